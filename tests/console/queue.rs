//! The review queue in a real browser: two moderators working one queue, each decision, a
//! claim that expires and is picked up, and the keyboard path (access keys, no script).

use std::time::Duration;

use quiesce::domain::Status;
use serde_json::Value;

use crate::helpers::scalar;
use crate::{
    browser::Browser,
    flags,
    helpers::{TestApp, spawn_app, wait_for},
    ingest, options,
    secrets::{TOKEN_ADMIN, TOKEN_MODERATOR},
};

/// Three flags on each entity (the default rules' `review_repeated_flags`): each is flagged
/// and waits in the queue. Returns their items' ids, oldest first.
async fn flagged(app: &TestApp, entities: &[&str]) -> Vec<i64> {
    let mut ids = Vec::new();
    for entity in entities {
        ingest(app, flags(entity, 3)).await;
        let flag = || async {
            scalar!(
                app,
                "SELECT coalesce(max(id), 0) FROM actions WHERE entity = $1 AND action = 'flag'",
                entity
            )
        };
        wait_for(Duration::from_secs(20), "the flag", || async {
            flag().await > 0
        })
        .await;
        ids.push(flag().await);
    }
    ids
}

/// The item the browser is on (`/console/queue/{id}`), once the claim went through.
async fn claimed_item(browser: &Browser) -> i64 {
    browser.find("#decide").await;
    let path = browser.path().await;
    path.trim_start_matches("/console/queue/")
        .parse()
        .unwrap_or_else(|_| panic!("{path}"))
}

/// Claims the oldest item with Alt+N, types the reason and decides with Alt+`key`, no mouse.
async fn decide_by_keys(browser: &Browser, reason: &str, key: char) -> i64 {
    browser.goto("/console/queue").await;
    browser
        .find("body")
        .await
        .send_keys("\u{E00A}n\u{E000}")
        .await
        .unwrap();
    let id = claimed_item(browser).await;
    let field = browser.find("#reason").await;
    field.click().await.unwrap();
    field
        .send_keys(&format!("{reason}\u{E00A}{key}\u{E000}"))
        .await
        .unwrap();
    browser
        .wait_until("the queue after the decision", |b| async move {
            b.path().await == "/console/queue"
        })
        .await;
    id
}

async fn decide(browser: &Browser, reason: &str, button: &str) {
    browser.type_into("#reason", reason).await;
    browser.click(button).await;
    browser
        .wait_until("the queue after the decision", |b| async move {
            b.path().await == "/console/queue"
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn two_moderators_claim_from_one_queue_without_collision() {
    let app = spawn_app(options()).await;
    let ids = flagged(&app, &["post:q-1", "post:q-2"]).await;
    let (ana, ben) = tokio::join!(Browser::start(&app.base), Browser::start(&app.base));
    ana.sign_in("Ana", TOKEN_MODERATOR).await;
    ben.sign_in("Ben", TOKEN_MODERATOR).await;

    ana.goto("/console/queue").await;
    assert_eq!(
        ana.text("#queue-items tbody tr:first-child td[data-label='Entity']")
            .await,
        "post:q-1"
    );
    ana.click("#claim-next").await;
    assert_eq!(claimed_item(&ana).await, ids[0]);
    ben.goto("/console/queue").await;
    ben.click("#claim-next").await;
    assert_eq!(
        claimed_item(&ben).await,
        ids[1],
        "Ben gets the next item, not Ana's"
    );

    // Ben sees Ana's claim and no way to take it; a forged claim is refused.
    ben.goto("/console/queue").await;
    let row = format!("#queue-items tr[data-item-id='{}']", ids[0]);
    assert_eq!(
        ben.text(&format!("{row} td[data-label='Claimed by']"))
            .await,
        "Ana"
    );
    assert!(!ben.has(&format!("{row} form")).await);
    ben.goto(&format!("/console/queue/{}", ids[0])).await;
    assert!(
        !ben.has("#decide").await,
        "only the holder gets the decision form"
    );
    assert!(ben.text("#claimed-by").await.starts_with("Ana until"));

    ana.goto(&format!("/console/queue/{}", ids[0])).await;
    decide(&ana, "satire, not abuse", "#approve").await;
    ben.goto(&format!("/console/queue/{}", ids[1])).await;
    decide(&ben, "targeted abuse", "#hide").await;
    assert_eq!(app.status_of("post:q-1").await, Status::Visible);
    assert_eq!(app.status_of("post:q-2").await, Status::Hidden);
    ana.goto("/console/queue").await;
    ana.find("#queue-empty").await;
    let decided: Vec<(String, String)> = sqlx::query!(
        r#"SELECT reviewed_by AS "reviewed_by!", review_decision AS "review_decision!"
           FROM actions WHERE reviewed_at IS NOT NULL ORDER BY id"#,
    )
    .fetch_all(&app.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| (row.reviewed_by, row.review_decision))
    .collect();
    assert_eq!(
        decided,
        vec![
            ("Ana".into(), "approve".into()),
            ("Ben".into(), "hide".into())
        ]
    );
    // Quality counts them: one of two decisions agreed with automation.
    ana.goto("/console/quality").await;
    assert_eq!(ana.text("#queue-agreement").await, "1 of 2 (50%)");
    assert_eq!(ana.text("#queue-waiting").await, "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn each_decision_by_keyboard_and_an_escalation_an_admin_takes() {
    let app = spawn_app(options()).await;
    let ids = flagged(&app, &["post:k-1", "post:k-2", "post:k-3"]).await;
    let moderator = Browser::start(&app.base).await;
    moderator.sign_in("Kai", TOKEN_MODERATOR).await;

    // Alt+N claims the oldest item, Alt+D dismisses it: the reason typed, no mouse.
    assert_eq!(decide_by_keys(&moderator, "a pile-on", 'd').await, ids[0]);
    assert_eq!(app.status_of("post:k-1").await, Status::Visible);
    let override_status: Option<String> =
        sqlx::query_scalar!("SELECT override_status FROM entities WHERE entity = 'post:k-1'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(override_status, None, "a dismissal leaves automation free");

    // Alt+N, then Alt+H hides.
    assert_eq!(decide_by_keys(&moderator, "abuse", 'h').await, ids[1]);
    assert_eq!(app.status_of("post:k-2").await, Status::Hidden);

    // Alt+E escalates: the item stays, marked, out of a moderator's reach.
    assert_eq!(
        decide_by_keys(&moderator, "a legal question", 'e').await,
        ids[2]
    );
    let row = format!("#queue-items tr[data-item-id='{}']", ids[2]);
    assert!(
        moderator
            .text(&format!("{row} td[data-label='Waiting']"))
            .await
            .contains("escalated")
    );
    assert!(
        !moderator.has(&format!("{row} form")).await,
        "a moderator cannot claim it"
    );
    moderator.click("#claim-next").await;
    moderator.find("#queue-items, #queue-empty").await;
    assert!(
        moderator.path().await.starts_with("/console/queue?"),
        "nothing left for a moderator"
    );
    assert_eq!(app.status_of("post:k-3").await, Status::Flagged);

    let admin = Browser::start(&app.base).await;
    admin.sign_in("Root", TOKEN_ADMIN).await;
    admin.goto("/console/queue?escalated=yes").await;
    admin.click(&format!("{row} form button")).await;
    assert_eq!(claimed_item(&admin).await, ids[2]);
    decide(&admin, "unlawful content", "#hide").await;
    assert_eq!(app.status_of("post:k-3").await, Status::Hidden);
    let outbox: Vec<Value> = sqlx::query_scalar!(
        "SELECT payload FROM outbox WHERE topic = 'action.applied' AND payload->>'action' = 'review' ORDER BY id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let decisions: Vec<&str> = outbox
        .iter()
        .map(|p| p["decision"].as_str().unwrap())
        .collect();
    assert_eq!(
        decisions,
        ["dismiss", "hide", "hide"],
        "each status change is sent to the platform"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn a_claim_that_expires_is_picked_up_by_another_moderator() {
    let app =
        spawn_app(options().with(|s| s.moderation.review_claim = Duration::from_secs(2))).await;
    let ids = flagged(&app, &["post:x-1"]).await;
    let (ana, ben) = tokio::join!(Browser::start(&app.base), Browser::start(&app.base));
    ana.sign_in("Ana", TOKEN_MODERATOR).await;
    ben.sign_in("Ben", TOKEN_MODERATOR).await;
    ana.goto("/console/queue").await;
    ana.click("#claim-next").await;
    assert_eq!(claimed_item(&ana).await, ids[0]);

    let row = format!("#queue-items tr[data-item-id='{}']", ids[0]);
    ben.goto("/console/queue").await;
    assert_eq!(
        ben.text(&format!("{row} td[data-label='Claimed by']"))
            .await,
        "Ana"
    );
    let button = format!("{row} form button");
    ben.reload_until("/console/queue", "Ana's claim to expire", |b| {
        let button = button.clone();
        async move { b.has(&button).await }
    })
    .await;
    ben.click(&button).await;
    assert_eq!(claimed_item(&ben).await, ids[0]);

    // Ana's form is stale: her decision is refused and changes nothing.
    ana.type_into("#reason", "too late").await;
    ana.click("#approve").await;
    ana.wait_until(
        "the refusal",
        |b| async move { b.has("#error-message").await },
    )
    .await;
    assert!(ana.text("#error-message").await.contains("claimed by Ben"));
    assert_eq!(app.status_of("post:x-1").await, Status::Flagged);
    decide(&ben, "spam", "#hide").await;
    assert_eq!(app.status_of("post:x-1").await, Status::Hidden);
}
