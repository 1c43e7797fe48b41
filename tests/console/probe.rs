//! What a probe of the console found (issue 28), each as a moderator meets it in Chromium: a
//! notice the page cannot back, a name too long for the session cookie, text that does not
//! wrap, a sign-in error that loses what was typed, a form sent after the session ended, an
//! oversize form, the bare `/console/` redirect, and sign-in attempts without a limit.

use reqwest::{StatusCode, header};
use serde_json::json;

use super::{flags, ingest, options, wait_for_action};
use crate::helpers::scalar;
use crate::{
    browser::Browser,
    helpers::{TestApp, spawn_app},
    secrets::{TOKEN_ADMIN, TOKEN_MODERATOR},
};

/// Whether the page fits `width` CSS pixels: no horizontal scrolling.
async fn fits(browser: &Browser, width: u32) -> (bool, i64) {
    browser.set_viewport(width).await;
    let scroll = browser
        .script("return document.documentElement.scrollWidth")
        .await
        .as_i64()
        .unwrap();
    (scroll <= width as i64, scroll)
}

/// Submits the form around `css` (a field or a button) with Enter, and waits for the page it
/// leads to (the marker set on this one is gone).
async fn submit(browser: &Browser, css: &str) {
    browser.script("window.__before_submit = true").await;
    browser.find(css).await.send_keys("\u{E007}").await.unwrap();
    browser
        .wait_until("the next page", |b| async move {
            b.script(
                "return window.__before_submit === undefined && document.readyState === 'complete'",
            )
            .await
                == json!(true)
        })
        .await;
}

/// Whether action `id` has been reversed.
async fn reversed(app: &TestApp, id: i64) -> bool {
    scalar!(
        app,
        "SELECT count(*) FROM actions WHERE id = $1 AND reversed_at IS NOT NULL",
        id
    ) > 0
}

/// The browser's session cookie, as a `Cookie:` header.
async fn session_cookie(browser: &Browser) -> String {
    let cookie = browser
        .client
        .get_named_cookie("quiesce_console")
        .await
        .expect("a session cookie");
    format!("quiesce_console={}", cookie.value())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn a_done_notice_shows_only_when_the_page_agrees_with_it() {
    let app = spawn_app(options()).await;
    ingest(&app, flags("post:probe-done", 11)).await;
    let id = wait_for_action(&app, "post:probe-done").await;
    let browser = Browser::start(&app.base).await;
    browser.sign_in("Morgan", TOKEN_MODERATOR).await;

    // A standing action, an entity with no override, no timer ended: no notice.
    browser
        .goto(&format!("/console/actions/{id}?done=reversed"))
        .await;
    browser.find("#reverse").await;
    assert!(!browser.has("#done").await, "Reversed on a standing action");
    for done in ["override", "timer"] {
        browser
            .goto(&format!("/console/entities/post:probe-done?done={done}"))
            .await;
        browser.find("#entity-status").await;
        assert!(
            !browser.has("#done").await,
            "?done={done} on an entity it did not happen to"
        );
    }

    // The real decisions still say so.
    browser.goto(&format!("/console/actions/{id}")).await;
    browser.type_into("#reason", "A probe's reversal").await;
    submit(&browser, "#reverse button").await;
    assert!(browser.text("#done").await.starts_with("Reversed"));
    browser.goto("/console/entities/post:probe-done").await;
    browser.type_into("#override-reason", "Held visible").await;
    submit(&browser, "#set-override button").await;
    assert_eq!(browser.text("#done").await, "Override set.");

    // An admin's Operations page does not repeat a count from the address.
    browser.goto("/console/review").await;
    browser.click("form[action='/console/logout'] button").await;
    browser.find("p.notice.ok").await;
    browser.sign_in("Ada Admin", TOKEN_ADMIN).await;
    browser
        .goto("/console/operations?done=redriven&count=99999")
        .await;
    browser.find("#depth-dead").await;
    let page = browser.text("main").await;
    assert!(!page.contains("99999"), "the address's count is shown");
    assert!(
        !browser.has("#done").await,
        "a redrive notice with nothing redriven"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn a_name_too_long_for_the_session_cookie_is_refused_on_the_form() {
    let app = spawn_app(options()).await;
    let browser = Browser::start(&app.base).await;
    browser.goto("/console/login").await;
    let name = "審".repeat(1000);
    browser.type_into("#name", &name).await;
    browser.type_into("#token", TOKEN_MODERATOR).await;
    submit(&browser, "#token").await;
    // Signed in, or refused on the form: not sent round to sign in again without a word.
    browser
        .wait_until("the refusal or a page", |b| async move {
            b.has("#error-message").await || !b.path().await.starts_with("/console/login")
        })
        .await;
    assert!(
        browser.has("#error-message").await,
        "no refusal; the browser is at {}",
        browser.path().await
    );
    let message = browser.text("#error-message").await;
    assert!(message.contains("too long"), "{message}");
    assert_eq!(browser.text("#error-field").await, "name");
    assert!(browser.has("#name").await, "the form, to try again");
    // A shorter one signs in (each field typed, then Enter, as above: one long keystroke run
    // that ends in the navigating Enter lost chromedriver's answer once on a loaded machine).
    browser.goto("/console/login").await;
    browser.type_into("#name", &"審".repeat(200)).await;
    browser.type_into("#token", TOKEN_MODERATOR).await;
    submit(&browser, "#token").await;
    assert_eq!(browser.text("#signed-in-as").await, "審".repeat(200));
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn long_unbroken_text_wraps_at_390_and_1280_pixels() {
    let app = spawn_app(options()).await;
    let entity = format!("post:{}", "x".repeat(128));
    let events: Vec<_> = (0..11)
        .map(|i| json!({"id": format!("long-{i}"), "entity": entity, "type": "flag", "actor": format!("user:{i}")}))
        .collect();
    ingest(&app, json!(events)).await;
    let id = wait_for_action(&app, &entity).await;
    let browser = Browser::start(&app.base).await;
    let name = "Q".repeat(300);
    browser.sign_in(&name, TOKEN_MODERATOR).await;
    let url = format!(
        "https://example.com/moderation/evidence?thread={}&page=1",
        "a1b2c3d4".repeat(100)
    );
    browser.goto(&format!("/console/actions/{id}")).await;
    browser.type_into("#reason", &url).await;
    submit(&browser, "#reverse button").await;
    browser.find("#done").await;
    let pages = [
        format!("/console/actions/{id}"),
        format!("/console/entities/{entity}"),
        "/console/review".to_owned(),
        "/console/review?reversed=reversed".to_owned(),
        "/console/quality".to_owned(),
    ];
    let mut wide = Vec::new();
    for path in &pages {
        browser.goto(path).await;
        browser.find("main h1").await;
        for width in [390, 1280] {
            let (ok, scroll) = fits(&browser, width).await;
            if !ok {
                wide.push(format!("{path} is {scroll} px wide at {width}"));
            }
        }
    }
    assert!(wide.is_empty(), "{wide:#?}");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn a_wrong_token_keeps_the_name_and_the_page_asked_for() {
    let app = spawn_app(options()).await;
    ingest(&app, flags("post:probe-deep", 1)).await;
    let browser = Browser::start(&app.base).await;
    browser.goto("/console/entities/post:probe-deep").await;
    assert!(browser.path().await.starts_with("/console/login?next="));
    browser.type_into("#name", "Morgan Reyes").await;
    browser.type_into("#token", "not-a-token").await;
    submit(&browser, "#token").await;
    assert!(
        browser.has("#error-message").await,
        "no error on {}",
        browser.path().await
    );
    assert!(browser.text("#error-message").await.contains("token"));
    assert!(
        browser.has("#name").await,
        "the form is shown again with the error"
    );
    assert_eq!(
        browser.find("#name").await.prop("value").await.unwrap(),
        Some("Morgan Reyes".to_owned()),
        "the typed name is kept"
    );
    assert_eq!(
        browser.find("#token").await.prop("value").await.unwrap(),
        Some(String::new()),
        "the token is never sent back"
    );
    browser.type_into("#token", TOKEN_MODERATOR).await;
    submit(&browser, "#token").await;
    browser
        .wait_until("the page asked for", |b| async move {
            b.path().await == "/console/entities/post:probe-deep"
        })
        .await;
    assert_eq!(browser.text("#signed-in-as").await, "Morgan Reyes");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn a_form_sent_after_the_session_ended_keeps_its_reason_through_sign_in() {
    let app = spawn_app(options()).await;
    ingest(&app, flags("post:probe-late", 11)).await;
    let id = wait_for_action(&app, "post:probe-late").await;
    let browser = Browser::start(&app.base).await;
    browser.sign_in("Morgan", TOKEN_MODERATOR).await;
    browser.goto(&format!("/console/actions/{id}")).await;
    let reason = "Satire: the thread at https://example.com/t/1 explains it, ünïcode & all";
    browser.type_into("#reason", reason).await;
    // The session ends while the moderator writes (it expired, the key rotated).
    browser
        .client
        .delete_cookie("quiesce_console")
        .await
        .unwrap();
    submit(&browser, "#reverse button").await;
    assert!(
        browser.has("#name").await,
        "the sign-in form, not a bare refusal: {}",
        browser.text("main").await
    );
    assert!(
        browser
            .text("#error-message")
            .await
            .contains("session has ended")
    );
    assert!(!reversed(&app, id).await, "nothing was done");
    browser.type_into("#name", "Morgan").await;
    browser.type_into("#token", TOKEN_MODERATOR).await;
    submit(&browser, "#token").await;
    browser
        .wait_until("the action's page", |b| async move {
            b.path()
                .await
                .starts_with(&format!("/console/actions/{id}"))
        })
        .await;
    assert_eq!(
        browser.find("#reason").await.prop("value").await.unwrap(),
        Some(reason.to_owned()),
        "the reason typed before is kept"
    );
    assert!(
        !reversed(&app, id).await,
        "signing in did not send the form"
    );
    submit(&browser, "#reverse button").await;
    assert!(browser.text("#done").await.starts_with("Reversed"));
    assert_eq!(browser.text("#reversal-reason").await, reason);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn an_oversize_form_gets_a_console_page_naming_the_limit() {
    let app = spawn_app(options()).await;
    ingest(&app, flags("post:probe-big", 11)).await;
    let id = wait_for_action(&app, "post:probe-big").await;
    let browser = Browser::start(&app.base).await;
    browser.sign_in("Morgan", TOKEN_MODERATOR).await;
    browser.goto(&format!("/console/actions/{id}")).await;
    // Past the textarea's maxlength, as a hand-made form or another client can send.
    browser
        .script("document.querySelector('#reason').removeAttribute('maxlength'); document.querySelector('#reason').value = 'x'.repeat(70000);")
        .await;
    browser.click("#reverse button").await;
    browser
        .wait_until(
            "the refusal",
            |b| async move { b.has("#error-message").await },
        )
        .await;
    assert!(browser.text("#error-message").await.contains("64 KiB"));
    assert!(
        browser.has("header.top a.brand").await,
        "the console's frame"
    );

    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = client
        .post(format!("{}/console/actions/{id}/reverse", app.base))
        .header(header::COOKIE, session_cookie(&browser).await)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("reason={}", "x".repeat(70_000)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(response.headers().contains_key("content-security-policy"));
    assert!(response.text().await.unwrap().contains("64 KiB"));
    assert!(!reversed(&app, id).await);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn the_console_root_redirect_carries_the_security_headers() {
    let app = spawn_app(options()).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = client
        .get(format!("{}/console/login", app.base))
        .send()
        .await
        .unwrap();
    for path in ["/console/", "/console"] {
        let response = client
            .get(format!("{}{path}", app.base))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_redirection(), "{path}");
        for name in [
            "content-security-policy",
            "x-frame-options",
            "x-content-type-options",
            "referrer-policy",
            "cross-origin-opener-policy",
            "cross-origin-resource-policy",
            "cache-control",
        ] {
            assert_eq!(
                response.headers().get(name),
                page.headers().get(name),
                "{name} on {path}"
            );
        }
    }
    // And in the browser, it leads to sign in, then Review.
    let browser = Browser::start(&app.base).await;
    browser.goto("/console/").await;
    assert!(browser.path().await.starts_with("/console/login"));
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "browser suite: make console"]
async fn sign_in_attempts_from_one_address_are_limited() {
    // 2 attempts a minute from one address: the bucket refills one every 30 s, far longer
    // than the browser's steps take on a loaded machine (at the default 10 a minute one comes
    // back every 6 s, which a slow CI run of 11 sign-ins outlasted).
    let app = spawn_app(options().with(|s| s.console.console_signin_limit = 2)).await;
    let browser = Browser::start(&app.base).await;
    for _ in 0..2 {
        browser.sign_in("Mallory", "guess-a-token").await;
        assert!(
            browser
                .text("#error-message")
                .await
                .contains("not a valid API token")
        );
    }
    browser.sign_in("Mallory", "guess-a-token").await;
    let refusal = browser.text("#error-message").await;
    assert!(refusal.contains("Too many sign-in attempts"), "{refusal}");
    assert!(refusal.contains("seconds"), "{refusal}");
    assert!(browser.text("h1").await.contains("Slow down"));
    // Even the right token waits its turn.
    browser.sign_in("Morgan", TOKEN_MODERATOR).await;
    assert!(
        browser
            .text("#error-message")
            .await
            .contains("Too many sign-in attempts")
    );
    // Status and Retry-After, as a client sees them.
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{}/console/login", app.base))
        .form(&[("name", "x"), ("token", "y")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = response.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    browser.close().await;
}
