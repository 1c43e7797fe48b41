//! The moderator console in a real browser (`make console`): Debian's Chromium, driven over
//! WebDriver, against a real quiesce (its own database, Redis prefix and port, as every API test
//! has) over real connections. Each test is what a moderator or an admin relies on: review and
//! reverse an automated hide; decide an appeal of one (`appeals.rs`); who may sign in and who
//! may redrive; hostile values shown as text; a forged form refused; every page readable at 1280
//! and 390 pixels (the screenshots in docs/console/). Ignored in `make test`, which needs no
//! browser.

#[path = "../api/helpers/mod.rs"]
#[allow(dead_code)]
mod helpers;
#[path = "../api/proxy.rs"]
#[allow(dead_code)]
mod proxy;
#[path = "../support/secrets.rs"]
mod secrets;

mod appeals;
mod browser;
mod probe;
mod queue;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::FutureExt;
use quiesce::domain::Status;
use quiesce::{
    credentials::{ApiToken, Role},
    rules::RuleSet,
};
use serde_json::{Value, json};

use crate::helpers::scalar;
use crate::{
    browser::Browser,
    helpers::{TestApp, TestOptions, spawn_app, wait_for},
    secrets::{CONSOLE_SESSION_KEY, TOKEN_ADMIN, TOKEN_INGEST, TOKEN_MODERATOR},
};

fn tokens() -> Vec<String> {
    vec![
        ApiToken::spec_for(Role::Ingest, TOKEN_INGEST),
        ApiToken::spec_for(Role::Moderator, TOKEN_MODERATOR),
        ApiToken::spec_for(Role::Admin, TOKEN_ADMIN),
    ]
}

fn options() -> TestOptions {
    TestOptions::default().with(|s| {
        s.security.api_tokens = crate::helpers::api_tokens(tokens());
        s.console.console_session_key = Some(CONSOLE_SESSION_KEY.to_owned().into());
    })
}

/// Sends events through the API with the ingest token, as the platform does.
async fn ingest(app: &TestApp, events: Value) {
    let response = app
        .client
        .post(format!("{}/v1/events", app.base))
        .bearer_auth(TOKEN_INGEST)
        .json(&events)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202, "{}", response.text().await.unwrap());
}

/// `n` flags on `entity` from distinct actors.
fn flags(entity: &str, n: usize) -> Value {
    (0..n)
        .map(|i| json!({"id": format!("{entity}-flag-{i}"), "entity": entity, "type": "flag", "actor": format!("user:{i}")}))
        .collect()
}

/// The id of the entity's latest action, once the worker has applied one.
async fn wait_for_action(app: &TestApp, entity: &str) -> i64 {
    let latest = || async {
        scalar!(
            app,
            "SELECT coalesce(max(id), 0) FROM actions WHERE entity = $1",
            entity
        )
    };
    wait_for(Duration::from_secs(20), "the automated action", || async {
        latest().await > 0
    })
    .await;
    latest().await
}

/// No dialog opened, no script of the page ran, no element a payload could have made exists.
async fn nothing_ran(browser: &Browser) {
    assert!(!browser.dialog_open().await, "a dialog opened");
    assert_eq!(
        browser.script("return window.__xss === undefined").await,
        json!(true),
        "a payload ran"
    );
    assert_eq!(
        browser
            .script("return document.querySelectorAll('script, img, iframe, object').length")
            .await,
        json!(0),
        "the page holds an element a payload made"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn a_moderator_reviews_a_hide_sees_its_snapshot_and_reverses_it() {
    let app = spawn_app(options()).await;
    let browser = Browser::start(&app.base).await;
    browser.sign_in("Morgan Reyes", TOKEN_MODERATOR).await;
    assert!(browser.path().await.starts_with("/console/review"));
    assert_eq!(browser.text("#signed-in-as").await, "Morgan Reyes");
    browser.goto("/console/quality").await;
    assert_eq!(browser.text("#reversal-rate").await, "0 of 0");

    ingest(&app, flags("post:console-1", 11)).await;
    browser
        .reload_until("/console/review", "the hide in Review", |b| async move {
            b.has("tr[data-action-id] a.open").await
        })
        .await;
    let row = browser.text("#actions tbody tr").await;
    assert!(
        row.contains("post:console-1") && row.contains("hide_flag_pile_on"),
        "{row}"
    );
    assert!(row.contains("11 flags against 0 upvotes"), "{row}");
    browser.click("#actions tbody tr a.open").await;
    browser.find("#snapshot-then").await;
    assert_eq!(
        browser
            .text("#signals-then tr[data-signal='flag'] .count")
            .await,
        "11",
        "the snapshot the rules saw"
    );
    // The default rules count no distinct actors, so their snapshot has none; now they are.
    assert_eq!(
        browser
            .text("#signals-then tr[data-signal='flag'] .actors")
            .await,
        "not counted"
    );
    assert_eq!(
        browser
            .text("#signals-now tr[data-signal='flag'] .count")
            .await,
        "11"
    );
    assert_eq!(
        browser
            .text("#signals-now tr[data-signal='flag'] .actors")
            .await,
        "11"
    );
    let action_page = browser.path().await;

    browser.goto("/console/quality").await;
    assert_eq!(browser.text("#reversal-rate").await, "0 of 1 (0%)");

    // Reverse with the keyboard: the reason, Tab to the button, Enter.
    browser.goto(&action_page).await;
    browser
        .type_into(
            "#reason",
            "Satire, not abuse: the flags came from one brigade\u{E004}\u{E007}",
        )
        .await;
    browser.find("#done").await;
    assert!(
        browser
            .text("#action-reversed")
            .await
            .contains("Morgan Reyes")
    );
    assert!(
        !browser.has("#reverse").await,
        "a reversed action offers no second reversal"
    );

    browser.click("h1 a.entity").await;
    browser.find("#entity-status").await;
    assert_eq!(browser.text("#entity-status").await, "visible");
    let shown = browser.text("#override").await;
    assert!(
        shown.contains("visible") && shown.contains("in force"),
        "{shown}"
    );
    assert!(
        shown.contains("Morgan Reyes") && shown.contains("one brigade"),
        "{shown}"
    );
    assert!(browser.text("#decisions").await.contains("reversal"));

    browser.goto("/console/quality").await;
    assert_eq!(browser.text("#reversal-rate").await, "1 of 1 (100%)");
    let rule = browser
        .text("#per-rule tr[data-rule='hide_flag_pile_on'] .rate")
        .await;
    assert_eq!(rule, "1 of 1 (100%)");

    // The console's decision is in the audit trail, under the moderator's name.
    let recorded: (String, String, String) = sqlx::query!(
        "SELECT kind, moderator, reason FROM moderator_decisions WHERE entity = 'post:console-1'",
    )
    .fetch_one(&app.pool)
    .await
    .map(|row| (row.kind, row.moderator, row.reason))
    .unwrap();
    assert_eq!(recorded.0, "reversal");
    assert_eq!(recorded.1, "Morgan Reyes");
    assert!(recorded.2.contains("one brigade"));
    assert_eq!(app.status_of("post:console-1").await, Status::Visible);
    browser.close().await;
}

fn poison_hook(
    entity: &'static str,
    poisoned: Arc<AtomicBool>,
) -> quiesce::worker::BeforeApplyHook {
    Arc::new(move |snapshot: quiesce::domain::Snapshot| {
        let poison = poisoned.load(Ordering::SeqCst) && snapshot.entity.as_str() == entity;
        async move {
            if poison {
                panic!("this entity always crashes its evaluation");
            }
        }
        .boxed()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn an_ingest_token_cannot_sign_in_and_only_an_admin_redrives_dead_letters() {
    let poisoned = Arc::new(AtomicBool::new(true));
    let app = spawn_app(TestOptions {
        before_apply: Some(poison_hook("post:poison", Arc::clone(&poisoned))),
        ..options().with(|s| s.schedule.max_attempts = 1)
    })
    .await;
    ingest(&app, flags("post:poison", 10)).await;
    let dead = || async {
        scalar!(
            app,
            "SELECT count(*) FROM dead_letters WHERE entity = 'post:poison' AND redriven_at IS NULL"
        )
    };
    wait_for(Duration::from_secs(20), "the dead letter", || async {
        dead().await == 1
    })
    .await;
    let browser = Browser::start(&app.base).await;

    browser.sign_in("Ingrid", TOKEN_INGEST).await;
    assert!(
        browser
            .text("#error-message")
            .await
            .contains("ingest token")
    );
    assert_eq!(browser.text("#error-field").await, "token");
    browser.goto("/console/review").await;
    assert!(
        browser.path().await.starts_with("/console/login"),
        "no session"
    );

    browser.sign_in("Morgan", TOKEN_MODERATOR).await;
    assert!(
        !browser.has("a[href='/console/operations']").await,
        "no Operations for a moderator"
    );
    browser.goto("/console/operations").await;
    assert!(browser.text("#error-message").await.contains("admin token"));
    // A moderator's own valid form, made by hand, is refused too: the server checks the role.
    browser.goto("/console/review").await;
    browser
        .script(
            "const f = document.createElement('form'); f.method = 'post';
             f.action = '/console/dead-letters/post:poison/redrive';
             const t = document.querySelector('input[name=csrf]').cloneNode(); f.appendChild(t);
             document.body.appendChild(f); f.submit();",
        )
        .await;
    browser
        .wait_until(
            "the refusal",
            |b| async move { b.has("#error-message").await },
        )
        .await;
    assert!(browser.text("#error-message").await.contains("admin token"));
    assert_eq!(dead().await, 1, "the moderator redrove nothing");

    browser.goto("/console/review").await;
    browser.click("form[action='/console/logout'] button").await;
    browser.find("p.notice.ok").await;
    browser.sign_in("Ada Admin", TOKEN_ADMIN).await;
    browser.click("a[href='/console/operations']").await;
    let row = "#dead-letters tr[data-entity='post:poison']";
    assert_eq!(
        browser.text(&format!("{row} .reason")).await,
        "attempts_exhausted"
    );
    assert!(
        browser
            .text(&format!("{row} .error"))
            .await
            .contains("always crashes")
    );
    assert_eq!(browser.text("#depth-dead").await, "1");

    poisoned.store(false, Ordering::SeqCst);
    browser.click(&format!("{row} button")).await;
    assert!(browser.text("#done").await.contains("Redrove 1"));
    assert!(browser.has("#no-dead-letters").await);
    browser
        .reload_until(
            "/console/entities/post:poison",
            "the evaluation after the redrive",
            |b| async move { b.text("#evaluation-count").await.starts_with('1') },
        )
        .await;
    assert_eq!(browser.text("#entity-status").await, "hidden");
    assert!(
        browser
            .text("#evaluations .decided")
            .await
            .contains("Applied hide")
    );
    let by: String = scalar!(
        app,
        "SELECT redriven_by FROM dead_letters WHERE entity = 'post:poison'"
    );
    assert_eq!(by, "Ada Admin");
    browser.close().await;
}

const SCRIPT: &str = "<script>window.__xss='script'</script>";
const IMAGE: &str = "\"><img src=x onerror=\"window.__xss='img';alert(1)\">";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn scripts_in_actors_reasons_and_names_render_as_text_and_run_nothing() {
    let app = spawn_app(options()).await;
    let entity = "post:xss";
    let mut events: Vec<Value> = (0..9)
        .map(|i| json!({"id": format!("x{i}"), "entity": entity, "type": "flag", "actor": format!("user:{i}")}))
        .collect();
    events.push(json!({"id": "x-script", "entity": entity, "type": "flag", "actor": SCRIPT}));
    events.push(json!({"id": "x-img", "entity": entity, "type": "flag", "actor": IMAGE}));
    ingest(&app, json!(events)).await;
    let id = wait_for_action(&app, entity).await;

    let browser = Browser::start(&app.base).await;
    let name = format!("Mallory {SCRIPT}");
    browser.sign_in(&name, TOKEN_MODERATOR).await;
    nothing_ran(&browser).await;
    assert_eq!(browser.text("#signed-in-as").await, name);

    browser.goto(&format!("/console/actions/{id}")).await;
    let reason = format!("{SCRIPT} and {IMAGE}");
    browser.type_into("#reason", &reason).await;
    browser.click("#reverse button").await;
    browser.find("#done").await;
    nothing_ran(&browser).await;
    assert_eq!(browser.text("#reversal-reason").await, reason);

    browser.goto(&format!("/console/entities/{entity}")).await;
    nothing_ran(&browser).await;
    let actors = browser.text("#events").await;
    assert!(
        actors.contains(SCRIPT) && actors.contains(IMAGE),
        "{actors}"
    );
    assert_eq!(browser.text("#override .override-reason").await, reason);
    assert_eq!(browser.text("#override .override-by").await, name);
    assert_eq!(browser.text("#decisions .decision-reason").await, reason);

    browser.goto("/console/review?reversed=reversed").await;
    nothing_ran(&browser).await;
    assert!(browser.text("#actions").await.contains(&name));
    browser.goto("/console/quality").await;
    nothing_ran(&browser).await;
    browser.close().await;
}

/// Another origin's page with a form that posts to the console without a CSRF token.
async fn forger(target: String) -> (u16, tokio::task::JoinHandle<()>) {
    let page = format!(
        r#"<!DOCTYPE html><html><body>
        <form method="post" action="{target}"><input name="reason" value="forged">
        <button id="forge" type="submit">Win a prize</button></form></body></html>"#
    );
    let router = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { axum::response::Html(page) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    (port, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn a_forged_post_without_the_csrf_token_is_refused_and_changes_nothing() {
    let app = spawn_app(options()).await;
    ingest(&app, flags("post:csrf", 11)).await;
    let id = wait_for_action(&app, "post:csrf").await;
    let browser = Browser::start(&app.base).await;
    browser.sign_in("Morgan", TOKEN_MODERATOR).await;
    let (port, server) = forger(format!("{}/console/actions/{id}/reverse", app.base)).await;

    // Same site (127.0.0.1), another origin: the browser sends the session cookie along, and
    // the missing CSRF token is what refuses the form.
    browser
        .client
        .goto(&format!("http://127.0.0.1:{port}/"))
        .await
        .unwrap();
    browser.click("#forge").await;
    browser
        .wait_until(
            "the refusal",
            |b| async move { b.has("#error-message").await },
        )
        .await;
    assert!(browser.text("h1").await.contains("Refused"));
    assert!(
        browser
            .text("#error-message")
            .await
            .contains("no CSRF token")
    );

    // Another site (localhost): the SameSite=Strict cookie stays home; no session, refused.
    browser
        .client
        .goto(&format!("http://localhost:{port}/"))
        .await
        .unwrap();
    browser.click("#forge").await;
    browser
        .wait_until(
            "the refusal",
            |b| async move { b.has("#error-message").await },
        )
        .await;
    assert!(
        browser
            .text("#error-message")
            .await
            .contains("session has ended")
    );

    let reversed = scalar!(
        app,
        "SELECT count(*) FROM actions WHERE id = $1 AND reversed_at IS NOT NULL",
        id
    );
    assert_eq!(reversed, 0, "the action stands");
    assert_eq!(app.count_moderator_decisions().await, 0);
    assert_eq!(app.status_of("post:csrf").await, Status::Hidden);
    // The moderator's session is intact, and the real form still works.
    browser.goto(&format!("/console/actions/{id}")).await;
    assert!(browser.has("#reverse").await);
    server.abort();
    browser.close().await;
}

/// The names of the page's form controls that have neither a label nor an aria-label.
const UNLABELLED: &str =
    "return Array.from(document.querySelectorAll('input:not([type=hidden]), select, textarea'))
    .filter(e => e.labels.length === 0 && !e.getAttribute('aria-label')).map(e => e.name)";

/// The default rules and a shadow rule, so that Quality has a shadow rule to weigh.
fn rules_with_a_shadow_rule() -> RuleSet {
    let text = format!(
        "{}\n{}",
        include_str!("../../rules/default.toml"),
        r#"
[[rule]]
name = "shadow_spam_reports"
kinds = ["post", "comment"]
when = 'count("report.spam") >= 2'
action = "hide"
reason = "{count.report.spam} spam reports"
shadow = true
"#
    );
    RuleSet::from_toml(&text).expect("valid rules")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn every_page_reads_at_1280_and_390_pixels_with_labelled_controls() {
    let poisoned = Arc::new(AtomicBool::new(true));
    let app = spawn_app(TestOptions {
        rules: Some(rules_with_a_shadow_rule()),
        before_apply: Some(poison_hook("post:flaky-embed", Arc::clone(&poisoned))),
        ..options().with(|s| s.schedule.max_attempts = 2)
    })
    .await;
    let mut events: Vec<Value> = (0..12)
        .map(|i| {
            json!({"id": format!("l{i}"), "entity": "post:launch-day", "type": "flag",
                        "actor": format!("user:{}", 100 + i), "author": "user:77"})
        })
        .collect();
    events.extend((0..3).map(|i| json!({"id": format!("u{i}"), "entity": "post:launch-day", "type": "upvote", "actor": format!("user:{}", 200 + i)})));
    events.extend((0..4).map(|i| json!({"id": format!("r{i}"), "entity": "post:recipe-swap", "type": "flag", "actor": format!("user:{}", 300 + i)})));
    events.extend((0..2).map(|i| json!({"id": format!("s{i}"), "entity": "post:cheap-watches", "type": "report.spam", "actor": format!("user:{}", 400 + i)})));
    events.extend((0..5).map(|i| json!({"id": format!("c{i}"), "entity": "comment:9001", "type": "report", "actor": format!("user:{}", 500 + i)})));
    events.extend((0..3).map(|i| json!({"id": format!("p{i}"), "entity": "post:flaky-embed", "type": "flag", "actor": format!("user:{}", 600 + i)})));
    ingest(&app, json!(events)).await;
    let launch = wait_for_action(&app, "post:launch-day").await;
    let comment = wait_for_action(&app, "comment:9001").await;
    wait_for_action(&app, "post:recipe-swap").await;
    wait_for(
        Duration::from_secs(20),
        "the shadow match and the dead letter",
        || async {
            app.evaluation_count("post:cheap-watches").await > 0
                && app.count_dead_letters().await > 0
        },
    )
    .await;

    let browser = Browser::start(&app.base).await;
    let mut pages: Vec<(&str, String)> = Vec::new();
    browser.goto("/console/login").await;
    pages.push(("sign-in", "/console/login".into()));
    browser.sign_in("Ada Admin", TOKEN_ADMIN).await;
    browser.goto(&format!("/console/actions/{comment}")).await;
    browser
        .type_into(
            "#reason",
            "A heated thread, not harassment: the reports were one group's",
        )
        .await;
    browser.click("#reverse button").await;
    browser.find("#done").await;
    browser.goto("/console/queue").await;
    browser.click("#claim-next").await;
    browser.find("#decide").await;
    pages.push(("queue", "/console/queue".into()));
    pages.push(("queue-item", browser.path().await));
    pages.push(("review", "/console/review".into()));
    pages.push(("action", format!("/console/actions/{launch}")));
    pages.push(("entity", "/console/entities/post:launch-day".into()));
    pages.push(("quality", "/console/quality".into()));
    pages.push(("operations", "/console/operations".into()));

    for (name, path) in &pages {
        if *name == "sign-in" {
            // Signed out for this one.
            continue;
        }
        browser.goto(path).await;
        assert_eq!(
            browser.script(UNLABELLED).await,
            json!([]),
            "unlabelled controls on {path}"
        );
        assert!(browser.has("main h1").await, "{path} has its heading");
        if *name == "quality" {
            let shadow = browser
                .text("#per-rule tr[data-rule='shadow_spam_reports'] .shadow")
                .await;
            assert_eq!(shadow, "1", "the shadow rule's match");
        }
        for width in [1280, 390] {
            let fits = browser.screenshot(name, width).await;
            assert!(fits, "{path} scrolls sideways at {width} px");
        }
    }
    // The sign-in page, signed out.
    browser.click("form[action='/console/logout'] button").await;
    browser.find("#name").await;
    assert_eq!(browser.script(UNLABELLED).await, json!([]));
    for width in [1280, 390] {
        assert!(
            browser.screenshot("sign-in", width).await,
            "sign-in scrolls sideways at {width} px"
        );
    }
    browser.close().await;
}
