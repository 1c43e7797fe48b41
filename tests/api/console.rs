//! The moderator console over HTTP: the headers every page carries, the session cookie's
//! attributes, and refusals of bad forms (a 4xx page naming the field; nothing written). What
//! a moderator does in a browser is the browser suite's (tests/console/, `make console`).

use quiesce::credentials::{ApiToken, Role};
use reqwest::{StatusCode, header};

use crate::{
    helpers::{TestApp, TestOptions, event, spawn_app},
    secrets::{CONSOLE_SESSION_KEY, TOKEN_INGEST, TOKEN_MODERATOR},
};

pub(crate) async fn console_app() -> TestApp {
    spawn_app(TestOptions::idle().with(with_console)).await
}

/// Settings for a test that signs in to the console: an ingest and a moderator token, and the
/// console's session key.
pub(crate) fn with_console(s: &mut quiesce::settings::Settings) {
    s.security.api_tokens = crate::helpers::api_tokens(vec![
        ApiToken::spec_for(Role::Ingest, TOKEN_INGEST),
        ApiToken::spec_for(Role::Moderator, TOKEN_MODERATOR),
    ]);
    s.console.console_session_key = Some(CONSOLE_SESSION_KEY.to_owned().into());
}

/// Sends events with the ingest token (a console test's settings require one); asserts 202.
pub(crate) async fn ingest(app: &TestApp, events: &serde_json::Value) {
    let response = app
        .client
        .post(format!("{}/v1/events", app.base))
        .bearer_auth(TOKEN_INGEST)
        .json(events)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
}

/// A console page as the session `cookie` sees it; asserts 200.
pub(crate) async fn page(app: &TestApp, cookie: &str, path: &str) -> String {
    let response = app
        .client
        .get(format!("{}{path}", app.base))
        .header(header::COOKIE, cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    response.text().await.unwrap()
}

/// A form's fields.
type Form = Vec<(&'static str, String)>;

/// The `name=value` of a response's session cookie.
fn session_cookie(response: &reqwest::Response) -> String {
    let set = response
        .headers()
        .get(header::SET_COOKIE)
        .expect("a session cookie")
        .to_str()
        .unwrap();
    set.split(';').next().unwrap().to_owned()
}

/// The CSRF token of a page's first form.
pub(crate) fn csrf_of(page: &str) -> String {
    let re = regex::Regex::new(r#"name="csrf" value="([^"]+)""#).unwrap();
    re.captures(page).expect("a form with a CSRF token")[1].to_owned()
}

/// The sign-in form as a new browser gets it: a client that does not follow redirects, the
/// anonymous session cookie and the form's CSRF token.
async fn sign_in_form(app: &TestApp) -> (reqwest::Client, String, String) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let form = client
        .get(format!("{}/console/login", app.base))
        .send()
        .await
        .unwrap();
    let anonymous = session_cookie(&form);
    let csrf = csrf_of(&form.text().await.unwrap());
    (client, anonymous, csrf)
}

/// Signs in as a moderator; the session cookie and its CSRF token.
pub(crate) async fn sign_in(app: &TestApp) -> (String, String) {
    let (client, anonymous, csrf) = sign_in_form(app).await;
    let signed_in = client
        .post(format!("{}/console/login", app.base))
        .header(header::COOKIE, &anonymous)
        .form(&[
            ("csrf", csrf.as_str()),
            ("name", "Morgan"),
            ("token", TOKEN_MODERATOR),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let cookie = session_cookie(&signed_in);
    let page = client
        .get(format!("{}/console/review", app.base))
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    (cookie.clone(), csrf_of(&page.text().await.unwrap()))
}

#[tokio::test]
async fn every_console_response_has_a_strict_policy_and_the_cookie_is_strict() {
    let app = console_app().await;
    let page = app
        .client
        .get(format!("{}/console/login", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let headers = page.headers();
    let csp = headers["content-security-policy"].to_str().unwrap();
    for directive in [
        "default-src 'self'",
        "script-src 'none'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ] {
        assert!(csp.contains(directive), "{csp}");
    }
    assert_eq!(headers["x-frame-options"], "DENY");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["cache-control"], "no-store");
    let cookie = headers[header::SET_COOKIE].to_str().unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(
        !cookie.contains("Secure"),
        "plain HTTP without a proxy's word: {cookie}"
    );
    let behind_tls = app
        .client
        .get(format!("{}/console/login", app.base))
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .unwrap();
    assert!(
        behind_tls.headers()[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Secure")
    );
    // The stylesheet the page links is served, cacheable, under the same policy.
    let body = page.text().await.unwrap();
    let href = regex::Regex::new(r#"href="(/console/assets/console-[0-9a-f]{12}\.css)""#)
        .unwrap()
        .captures(&body)
        .expect("the stylesheet link")[1]
        .to_owned();
    let css = app
        .client
        .get(format!("{}{href}", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        css.headers()[header::CONTENT_TYPE],
        "text/css; charset=utf-8"
    );
    assert!(
        css.headers()[header::CACHE_CONTROL]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
    assert!(css.headers().contains_key("content-security-policy"));
    // Without a session, a page sends the browser to sign in, and a form is refused.
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let review = client
        .get(format!("{}/console/review?rule=x", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(review.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        review.headers()[header::LOCATION],
        "/console/login?next=%2Fconsole%2Freview%3Frule%3Dx"
    );
    let post = client
        .post(format!("{}/console/actions/1/reverse", app.base))
        .form(&[("reason", "r")])
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn bad_console_input_gets_a_page_naming_the_field_and_writes_nothing() {
    let app = console_app().await;
    let response = app
        .client
        .post(format!("{}/v1/events", app.base))
        .bearer_auth(TOKEN_INGEST)
        .json(&event("c1", "post:console-form", "flag"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let (cookie, csrf) = sign_in(&app).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let post = |path: &'static str, form: Form| {
        let (app, client, cookie) = (&app, client.clone(), cookie.clone());
        async move {
            let response = client
                .post(format!("{}{path}", app.base))
                .header(header::COOKIE, cookie)
                .form(&form)
                .send()
                .await
                .unwrap();
            (response.status(), response.text().await.unwrap())
        }
    };
    let override_path = "/console/entities/post:console-form/override";
    // (path, form, answer, the field the page names)
    let cases: Vec<(&'static str, Form, StatusCode, &str)> = vec![
        (
            override_path,
            vec![
                ("csrf", csrf.clone()),
                ("status", "gone".into()),
                ("reason", "r".into()),
            ],
            StatusCode::UNPROCESSABLE_ENTITY,
            "status",
        ),
        (
            override_path,
            vec![
                ("csrf", csrf.clone()),
                ("status", "hidden".into()),
                ("until", "soon".into()),
                ("reason", "r".into()),
            ],
            StatusCode::UNPROCESSABLE_ENTITY,
            "until",
        ),
        (
            override_path,
            vec![
                ("csrf", csrf.clone()),
                ("status", "hidden".into()),
                ("until", "2001-01-01 00:00".into()),
                ("reason", "r".into()),
            ],
            StatusCode::UNPROCESSABLE_ENTITY,
            "until",
        ),
        (
            override_path,
            vec![
                ("csrf", csrf.clone()),
                ("status", "hidden".into()),
                ("reason", "   ".into()),
            ],
            StatusCode::UNPROCESSABLE_ENTITY,
            "reason",
        ),
        (
            override_path,
            vec![
                ("csrf", csrf.clone()),
                ("status", "hidden".into()),
                ("reason", "r".into()),
                ("mood", "x".into()),
            ],
            StatusCode::UNPROCESSABLE_ENTITY,
            "mood",
        ),
        (
            "/console/actions/1/reverse",
            vec![("csrf", csrf.clone()), ("reason", "x".repeat(1001))],
            StatusCode::UNPROCESSABLE_ENTITY,
            "reason",
        ),
        (
            override_path,
            vec![("status", "hidden".into()), ("reason", "r".into())],
            StatusCode::FORBIDDEN,
            "",
        ),
        (
            override_path,
            vec![
                ("csrf", "not-this-sessions".into()),
                ("status", "hidden".into()),
                ("reason", "r".into()),
            ],
            StatusCode::FORBIDDEN,
            "",
        ),
    ];
    for (path, form, status, field) in cases {
        let (answered, page) = post(path, form.clone()).await;
        assert_eq!(answered, status, "{path} {form:?}: {page}");
        if !field.is_empty() {
            assert!(
                page.contains(&format!(r#"<code id="error-field">{field}</code>"#)),
                "{path} {form:?} names {field}: {page}"
            );
        }
    }
    let (status, page) = post(
        override_path,
        vec![
            ("csrf", csrf.clone()),
            ("status", "hidden".into()),
            ("reason", "checked".into()),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{page}");
    // Only the good form wrote: one decision, one version bump.
    assert_eq!(app.count_moderator_decisions().await, 1);
    assert_eq!(app.moderation_version_of("post:console-form").await, 1);
    // A bad filter names its parameter too.
    let review = app
        .client
        .get(format!("{}/console/review?since=yesterday", app.base))
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(review.status(), StatusCode::BAD_REQUEST);
    assert!(
        review
            .text()
            .await
            .unwrap()
            .contains(r#"<code id="error-field">since</code>"#)
    );
}

/// One sign-in attempt with a wrong token, sent as a proxy that appended `forwarded_for`: its
/// status (401, or 429 once the client's budget is spent).
async fn wrong_sign_in_from(app: &TestApp, forwarded_for: &str) -> StatusCode {
    let (client, anonymous, csrf) = sign_in_form(app).await;
    client
        .post(format!("{}/console/login", app.base))
        .header(header::COOKIE, &anonymous)
        .header("x-forwarded-for", forwarded_for)
        .form(&[
            ("csrf", csrf.as_str()),
            ("name", "Mallory"),
            ("token", "guess-a-token"),
        ])
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn behind_a_trusted_proxy_sign_ins_are_limited_per_forwarded_client() {
    // The test's connections come from 127.0.0.1, here the trusted proxy.
    let app = spawn_app(TestOptions::idle().with(|s| {
        with_console(s);
        s.console.console_signin_limit = 2;
        s.console.console_trusted_proxies = "127.0.0.1".parse().unwrap();
    }))
    .await;
    let (refused, counted) = (StatusCode::TOO_MANY_REQUESTS, StatusCode::UNAUTHORIZED);
    for (forwarded_for, expected, why) in [
        ("203.0.113.5", counted, "a client's first attempt"),
        ("203.0.113.5", counted, "its second"),
        ("203.0.113.5", refused, "its budget is spent"),
        (
            "198.51.100.1, 203.0.113.5",
            refused,
            "entries the client put before the proxy's give it no new budget",
        ),
        (
            "203.0.113.6",
            counted,
            "another browser behind the proxy has its own",
        ),
        (
            "203.0.113.6, 127.0.0.1",
            counted,
            "a second trusted hop is passed over",
        ),
        ("203.0.113.6", refused, "and spends it"),
    ] {
        let status = wrong_sign_in_from(&app, forwarded_for).await;
        assert_eq!(status, expected, "{why} ({forwarded_for})");
    }

    // Without trusted proxies X-Forwarded-For is not believed: one budget for the connection's
    // address, whatever the header says.
    let plain = spawn_app(TestOptions::idle().with(|s| {
        with_console(s);
        s.console.console_signin_limit = 2;
    }))
    .await;
    for (forwarded_for, expected) in [
        ("203.0.113.5", counted),
        ("203.0.113.6", counted),
        ("203.0.113.7", refused),
    ] {
        let status = wrong_sign_in_from(&plain, forwarded_for).await;
        assert_eq!(status, expected, "untrusted ({forwarded_for})");
    }
}
