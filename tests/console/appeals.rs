//! Appeals in a real browser: a post hidden by a rule, its statement of reasons on the entity
//! page, its author's appeal forwarded over the API, and a moderator who claims and upholds it
//! by keyboard (another appeal rejected) until the post is visible again; then the refusals: a
//! claim held by another moderator, a stale form after the claim moved, an appeal decided
//! already.

use std::time::Duration;

use quiesce::domain::Status;
use serde_json::{Value, json};

use crate::helpers::scalar;
use crate::{
    SCRIPT, UNLABELLED,
    browser::Browser,
    helpers::{TestApp, spawn_app},
    ingest, nothing_ran, options,
    secrets::{TOKEN_INGEST, TOKEN_MODERATOR},
    wait_for_action,
};

/// Five critical reports on `entity`: the default rules' `remove_reported` hides it at once.
/// Returns the hide's action id.
async fn hidden_by_reports(app: &TestApp, entity: &str) -> i64 {
    let reports: Vec<Value> = (0..5)
        .map(|i| {
            json!({"id": format!("{entity}-report-{i}"), "entity": entity, "type": "report",
                   "priority": "critical", "actor": format!("user:{}", 300 + i)})
        })
        .collect();
    ingest(app, json!(reports)).await;
    let action = wait_for_action(app, entity).await;
    assert_eq!(app.status_of(entity).await, Status::Hidden);
    action
}

/// The platform forwards its user's appeal of `action`, with the ingest token. Returns its id.
async fn appeal(app: &TestApp, action: i64, text: &str) -> i64 {
    let response = app
        .client
        .post(format!("{}/v1/actions/{action}/appeals", app.base))
        .bearer_auth(TOKEN_INGEST)
        .json(&json!({"appellant": "user:77", "text": text}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let appeal: Value = response.json().await.unwrap();
    appeal["id"].as_i64().unwrap()
}

/// The entity's status as the API reads it.
async fn api_status(app: &TestApp, entity: &str) -> String {
    let response = app
        .client
        .get(format!("{}/v1/entities/{entity}", app.base))
        .bearer_auth(TOKEN_MODERATOR)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let record: Value = response.json().await.unwrap();
    record["status"].as_str().unwrap().to_owned()
}

/// The list after a decision, with its notice.
async fn decided(browser: &Browser, id: i64) -> String {
    browser
        .wait_until("the appeals after the decision", |b| async move {
            b.path().await == format!("/console/appeals?done={id}")
        })
        .await;
    browser.text("#done").await
}

/// Presses Alt+`key` (an access key) on the page.
async fn alt(browser: &Browser, key: char) {
    browser
        .find("body")
        .await
        .send_keys(&format!("\u{E00A}{key}\u{E000}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn an_appeal_upheld_in_the_console_makes_the_post_visible_and_a_rejected_one_stays_hidden() {
    let app = spawn_app(options()).await;
    let up = hidden_by_reports(&app, "post:appeal-up").await;
    let down = hidden_by_reports(&app, "post:appeal-down").await;
    let browser = Browser::start(&app.base).await;
    browser.sign_in("Ana", TOKEN_MODERATOR).await;

    // The statement of reasons the hide was given, on the entity page; no appeal yet.
    browser.goto("/console/entities/post:appeal-up").await;
    let row = browser.text("#statements tbody tr").await;
    for said in [
        "remove_reported",
        "automated",
        "content disabled",
        "STATEMENT_CATEGORY_",
        "quiesce-",
    ] {
        assert!(row.contains(said), "{said} in {row}");
    }
    assert_eq!(browser.text("#statements td.appeal").await, "none");

    let text = format!(
        "The reports came from one group that dislikes the post.\nIt is satire: see the thread.\n{SCRIPT}"
    );
    let first = appeal(&app, up, &text).await;
    let second = appeal(&app, down, "Please look again.").await;

    browser.click("a[href='/console/appeals']").await;
    let row = format!("#appeals-items tr[data-appeal-id='{first}']");
    browser.find(&row).await;
    assert_eq!(
        browser
            .text("#appeals-items tbody tr:first-child td[data-label='Entity']")
            .await,
        "post:appeal-up",
        "oldest first"
    );
    assert_eq!(
        browser.text(&format!("{row} td.appellant")).await,
        "user:77"
    );
    assert_eq!(browser.text(&format!("{row} td.holder")).await, "nobody");
    assert!(
        browser
            .text(&format!("{row} td[data-label='Decided']"))
            .await
            .contains("remove_reported")
    );
    assert_eq!(browser.script(UNLABELLED).await, json!([]));
    for width in [1280, 390] {
        assert!(
            browser.screenshot("appeals", width).await,
            "the appeals scroll sideways at {width} px"
        );
    }

    // Alt+C claims the oldest; the appeal's text keeps its lines and runs nothing.
    alt(&browser, 'c').await;
    browser.find("#decide").await;
    assert_eq!(browser.path().await, format!("/console/appeals/{first}"));
    assert!(browser.text("#claimed-by").await.starts_with("Ana until"));
    assert_eq!(browser.text("#appeal-text").await, text);
    nothing_ran(&browser).await;
    assert!(
        browser
            .text("#statement-facts")
            .await
            .contains("remove_reported")
    );
    assert_eq!(browser.script(UNLABELLED).await, json!([]));
    for width in [1280, 390] {
        assert!(
            browser.screenshot("appeal", width).await,
            "the appeal scrolls sideways at {width} px"
        );
    }

    // The reason, then Alt+U upholds it.
    let field = browser.find("#reason").await;
    field.click().await.unwrap();
    field
        .send_keys("Coordinated reports; the post breaks no rule.\u{E00A}u\u{E000}")
        .await
        .unwrap();
    assert!(decided(&browser, first).await.contains("upheld"));
    assert_eq!(api_status(&app, "post:appeal-up").await, "visible");

    // The second: Alt+R with no reason yet puts the cursor in it; with one, rejects.
    browser
        .click(&format!(
            "#appeals-items tr[data-appeal-id='{second}'] button.claim"
        ))
        .await;
    browser.find("#decide").await;
    alt(&browser, 'r').await;
    browser
        .wait_until("the reason focused", |b| async move {
            b.script("return document.activeElement.id").await == json!("reason")
        })
        .await;
    assert_eq!(browser.path().await, format!("/console/appeals/{second}"));
    browser
        .find("#reason")
        .await
        .send_keys("The reports are right: it is spam.\u{E00A}r\u{E000}")
        .await
        .unwrap();
    assert!(decided(&browser, second).await.contains("rejected"));
    browser.find("#appeals-empty").await;
    assert_eq!(api_status(&app, "post:appeal-down").await, "hidden");

    // What the decisions wrote: the reversal with its source, the platform's webhooks, the
    // audit trail under the moderator's name.
    let source: Option<String> =
        sqlx::query_scalar!("SELECT reversal_source FROM actions WHERE id = $1", up)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(source.as_deref(), Some("appeal"));
    let standing = scalar!(
        app,
        "SELECT count(*) FROM actions WHERE id = $1 AND reversed_at IS NULL",
        down
    );
    assert_eq!(standing, 1, "the rejected appeal's hide stands");
    let outcomes: Vec<Value> = sqlx::query_scalar!(
        "SELECT payload FROM outbox WHERE topic = 'appeal.decided' ORDER BY id"
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let outcomes: Vec<(i64, &str)> = outcomes
        .iter()
        .map(|p| {
            (
                p["appeal"].as_i64().unwrap(),
                p["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(outcomes, [(first, "upheld"), (second, "rejected")]);
    let audit: Vec<(String, String)> = sqlx::query!(
        "SELECT action, actor FROM audit_log WHERE action LIKE 'appeal.%' ORDER BY id"
    )
    .fetch_all(&app.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| (row.action, row.actor))
    .collect();
    let submit = ("appeal.submit".to_owned(), "platform".to_owned());
    let decide = ("appeal.decide".to_owned(), "Ana".to_owned());
    assert_eq!(
        audit,
        [submit.clone(), submit, decide.clone(), decide],
        "{audit:?}"
    );

    // The entity page links the statement's appeal, decided.
    browser.goto("/console/entities/post:appeal-up").await;
    assert_eq!(browser.text("#entity-status").await, "visible");
    assert_eq!(
        browser.text("#statements td.appeal").await,
        format!("Appeal #{first} upheld")
    );
    browser.click("#statements td.appeal a").await;
    assert!(browser.text("#outcome").await.contains("upheld by Ana"));

    // Quality counts the upheld appeal among the rule's reversals, told apart by its source.
    browser.goto("/console/quality").await;
    assert_eq!(browser.text("#reversal-rate").await, "1 of 2 (50%)");
    assert_eq!(browser.text("#reversed-by-appeal").await, "1");
    assert_eq!(
        browser
            .text("#per-rule tr[data-rule='remove_reported'] td.appealed")
            .await,
        "1"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn a_claim_held_by_another_moved_or_decided_refuses_the_decision() {
    let app =
        spawn_app(options().with(|s| s.moderation.review_claim = Duration::from_secs(2))).await;
    let action = hidden_by_reports(&app, "post:appeal-claims").await;
    let id = appeal(&app, action, "Not spam.").await;
    let (ana, ben) = tokio::join!(Browser::start(&app.base), Browser::start(&app.base));
    ana.sign_in("Ana", TOKEN_MODERATOR).await;
    ben.sign_in("Ben", TOKEN_MODERATOR).await;
    ana.goto(&format!("/console/appeals/{id}")).await;
    ana.click("button.claim").await;
    ana.find("#decide").await;

    // Ben sees Ana's claim and no way to decide.
    let row = format!("#appeals-items tr[data-appeal-id='{id}']");
    ben.goto("/console/appeals").await;
    assert_eq!(ben.text(&format!("{row} td.holder")).await, "Ana");
    assert!(!ben.has(&format!("{row} button.claim")).await);
    ben.goto(&format!("/console/appeals/{id}")).await;
    assert!(!ben.has("#decide").await, "only the holder decides");

    // Her claim runs out and Ben takes it: Ana's open form is refused.
    let button = format!("{row} button.claim");
    ben.reload_until("/console/appeals", "Ana's claim to run out", |b| {
        let button = button.clone();
        async move { b.has(&button).await }
    })
    .await;
    ben.click(&button).await;
    ben.find("#decide").await;
    ana.type_into("#reason", "upheld too late").await;
    ana.click("#uphold").await;
    ana.wait_until(
        "the refusal",
        |b| async move { b.has("#error-message").await },
    )
    .await;
    assert_eq!(ana.text("main h1").await, "Not done");
    assert!(ana.text("#error-message").await.contains("claimed by Ben"));
    assert_eq!(app.status_of("post:appeal-claims").await, Status::Hidden);

    // Ben rejects it in another tab; the form still open in the first is refused.
    let first_tab = ben.client.window().await.unwrap();
    let tab = ben.client.new_window(true).await.unwrap();
    ben.client.switch_to_window(tab.handle).await.unwrap();
    ben.goto(&format!("/console/appeals/{id}")).await;
    ben.type_into("#reason", "spam it is").await;
    ben.click("#reject").await;
    assert!(decided(&ben, id).await.contains("rejected"));
    ben.client.close_window().await.unwrap();
    ben.client.switch_to_window(first_tab).await.unwrap();
    ben.type_into("#reason", "upheld after all").await;
    ben.click("#uphold").await;
    ben.wait_until(
        "the refusal",
        |b| async move { b.has("#error-message").await },
    )
    .await;
    assert_eq!(ben.text("main h1").await, "Already decided");
    assert!(ben.text("#error-message").await.contains("already decided"));
    assert_eq!(app.status_of("post:appeal-claims").await, Status::Hidden);
    ana.close().await;
    ben.close().await;
}
