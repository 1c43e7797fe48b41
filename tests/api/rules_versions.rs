//! Rules versions: the rules file seeds version 1, a publish (validated first) makes the next
//! version active and every evaluation, action and webhook after it carries that version; the
//! versions list pages; a rollback is a new activation; both are in the audit trail with the
//! admin's token as their author. The console's Backtest page publishes the candidate it ran,
//! with its report, for admins only.

use std::time::Duration;

use quiesce::credentials::{ApiToken, Role};
use reqwest::{StatusCode, header};
use serde_json::{Value, json};

use crate::helpers::scalar;
use crate::{
    audit::console_session,
    helpers::{TestApp, TestOptions, call, claim_next, event, spawn_app},
    secrets::{CONSOLE_SESSION_KEY, TOKEN_ADMIN, TOKEN_MODERATOR},
};

const HIDE_AT_TWO: &str = "[[rule]]\nname = \"hide_two\"\nkinds = [\"post\"]\nwhen = 'count(\"flag\") >= 2'\naction = \"hide\"\nreason = \"{count.flag} flags\"\n";

/// Two flags on `entity`, evaluated by a worker of the test; returns the evaluation's rules
/// version and its action's, if any.
async fn flag_twice(app: &TestApp, entity: &str) -> (Option<i64>, Option<i64>) {
    let events: Vec<Value> = (0..2)
        .map(|i| event(&format!("{entity}-{i}"), entity, "flag"))
        .collect();
    let (status, body) = call(app, "POST", "/v1/events", TOKEN_ADMIN, json!(events)).await;
    assert_eq!(status, 202, "{body}");
    let worker = app.worker();
    let outcome = worker.evaluate_claim(claim_next(&worker).await).await;
    assert!(
        matches!(outcome, quiesce::worker::Outcome::Done(_)),
        "{outcome:?}"
    );
    let evaluation: Option<i64> = sqlx::query_scalar!(
        "SELECT rules_version FROM evaluations WHERE entity = $1 ORDER BY id DESC LIMIT 1",
        entity
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    let action: Option<Option<i64>> = sqlx::query_scalar!(
        "SELECT rules_version FROM actions WHERE entity = $1",
        entity
    )
    .fetch_optional(&app.pool)
    .await
    .unwrap();
    (evaluation, action.flatten())
}

#[tokio::test]
async fn a_publish_is_validated_stored_and_decides_what_follows_and_a_rollback_undoes_it() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(10);
        s.security.api_tokens = crate::helpers::api_tokens(vec![
            ApiToken::spec_for(Role::Moderator, TOKEN_MODERATOR),
            ApiToken::spec_for(Role::Admin, TOKEN_ADMIN),
        ]);
    }))
    .await;
    let admin = ApiToken::parse(&ApiToken::spec_for(Role::Admin, TOKEN_ADMIN))
        .unwrap()
        .label();

    // The default rules seeded version 1: the listing, readiness and the first evaluation say so.
    let (_, listing) = call(&app, "GET", "/v1/rules", TOKEN_MODERATOR, json!(null)).await;
    let seeded = &listing["version"];
    assert_eq!(seeded["version"], 1, "{listing}");
    assert_eq!(seeded["author"], "quiesce");
    assert_eq!(seeded["text"], quiesce::rules::DEFAULT_RULES);
    assert_eq!(
        seeded["hash"],
        quiesce::active_rules::hash(quiesce::rules::DEFAULT_RULES)
    );
    assert_eq!(app.get("/readyz").await.1["rules_version"], 1);
    assert_eq!(flag_twice(&app, "post:before").await, (Some(1), None));

    // Refused: a rule that does not compile (named, with the position), a missing message,
    // the wrong role. Nothing is stored.
    let broken = "[[rule]]\nname = \"broken\"\nwhen = 'count(\"flag\") >='\naction = \"hide\"\nreason = \"x\"\n";
    let (status, body) = call(
        &app,
        "POST",
        "/v1/rules",
        TOKEN_ADMIN,
        json!({"rules": broken, "message": "oops"}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_rules");
    assert_eq!(body["error"]["field"], "rules");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("broken") && message.contains("1:"),
        "{message}"
    );
    let (status, body) = call(
        &app,
        "POST",
        "/v1/rules",
        TOKEN_ADMIN,
        json!({"rules": HIDE_AT_TWO}),
    )
    .await;
    assert_eq!((status, &body["error"]["field"]), (422, &json!("message")));
    let (status, body) = call(
        &app,
        "POST",
        "/v1/rules",
        TOKEN_ADMIN,
        json!({"rules": format!("# a NUL \u{0}\n{HIDE_AT_TWO}"), "message": "m"}),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (422, &json!("invalid_rules"))
    );
    let (status, _) = call(
        &app,
        "POST",
        "/v1/rules",
        TOKEN_MODERATOR,
        json!({"rules": HIDE_AT_TWO, "message": "m"}),
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(scalar!(app, "SELECT count(*) FROM rules_versions"), 1);

    // Published: version 2, active at once here, on every evaluation, action and webhook after.
    let (status, body) = call(
        &app,
        "POST",
        "/v1/rules",
        TOKEN_ADMIN,
        json!({"rules": HIDE_AT_TWO, "message": "hide at two flags"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["version"], 2);
    assert_eq!(body["hash"], quiesce::active_rules::hash(HIDE_AT_TWO));
    let (_, listing) = call(&app, "GET", "/v1/rules", TOKEN_MODERATOR, json!(null)).await;
    assert_eq!(listing["version"]["version"], 2);
    assert_eq!(listing["version"]["author"], admin.as_str());
    assert_eq!(listing["version"]["message"], "hide at two flags");
    assert_eq!(listing["version"]["text"], HIDE_AT_TWO);
    assert_eq!(listing["rules"][0]["name"], "hide_two");
    assert_eq!(flag_twice(&app, "post:after").await, (Some(2), Some(2)));
    let payload: Value =
        sqlx::query_scalar!("SELECT payload FROM outbox WHERE payload->>'entity' = 'post:after' AND topic = 'action.applied'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(payload["rules_version"], 2, "{payload}");

    // The versions, newest first, paged.
    let (status, page) = call(
        &app,
        "GET",
        "/v1/rules/versions?limit=1",
        TOKEN_MODERATOR,
        json!(null),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["versions"][0]["version"], 2);
    assert_eq!(page["versions"][0]["active"], true);
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let (_, page) = call(
        &app,
        "GET",
        &format!("/v1/rules/versions?limit=1&cursor={cursor}"),
        TOKEN_MODERATOR,
        json!(null),
    )
    .await;
    assert_eq!(page["versions"][0]["version"], 1);
    assert_eq!(page["versions"][0]["active"], false);
    assert!(page["versions"][0].get("text").is_none(), "{page}");

    // Rolled back: version 1 active again, as a third activation.
    let (status, body) = call(
        &app,
        "POST",
        "/v1/rules/versions/9/activate",
        TOKEN_ADMIN,
        json!(null),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = call(
        &app,
        "POST",
        "/v1/rules/versions/1/activate",
        TOKEN_ADMIN,
        json!({"message": "too strict"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let history: Vec<(i64, String)> =
        sqlx::query!("SELECT version, kind FROM rules_activations ORDER BY id")
            .fetch_all(&app.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|row| (row.version, row.kind))
            .collect();
    assert_eq!(
        history,
        [
            (1, "seed".to_owned()),
            (2, "publish".to_owned()),
            (1, "rollback".to_owned())
        ]
    );
    assert_eq!(app.get("/readyz").await.1["rules_version"], 1);
    assert_eq!(flag_twice(&app, "post:rolled").await, (Some(1), None));

    // Both decisions are in the audit trail with the admin's token as their actor.
    let (_, audit) = call(
        &app,
        "GET",
        "/v1/audit?subject=rules",
        TOKEN_ADMIN,
        json!(null),
    )
    .await;
    let entries = audit["entries"].as_array().unwrap();
    let kinds: Vec<(&str, &str, &Value)> = entries
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["actor"].as_str().unwrap(),
                &e["after"]["version"],
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("rules.rollback", admin.as_str(), &json!(1)),
            ("rules.publish", admin.as_str(), &json!(2)),
        ]
    );
}

/// The user of this process's uid, as the password database names it (`uid:<n>` without an
/// entry), asked of `id`: the name the command line must record, whatever `$USER` says.
fn os_user() -> String {
    let id = |flag: &str| {
        std::process::Command::new("id")
            .arg(flag)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8(o.stdout).unwrap().trim().to_owned())
    };
    id("-un").unwrap_or_else(|| format!("uid:{}", id("-u").expect("id -u")))
}

/// The keys of a JSON object as written, in order.
fn keys_in_order(text: &str) -> Vec<String> {
    regex::Regex::new(r#""([a-z_]+)":"#)
        .unwrap()
        .captures_iter(text)
        .map(|c| c[1].to_owned())
        .collect()
}

#[tokio::test]
async fn the_command_line_publishes_and_rolls_back() {
    let app = spawn_app(TestOptions::idle()).await;
    let dir = std::env::temp_dir().join(format!("quiesce-publish-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rules.toml");
    std::fs::write(&file, HIDE_AT_TWO).unwrap();
    // With no USER or LOGNAME in its environment (as under a service manager).
    let out = app
        .run_cli(&[
            "rules",
            "publish",
            file.to_str().unwrap(),
            "-m",
            "from the shell",
        ])
        .await;
    let published: Value = serde_json::from_str(&out).expect("JSON on stdout");
    assert_eq!(published["version"], 2);
    assert_eq!(published["hash"], quiesce::active_rules::hash(HIDE_AT_TWO));
    // The keys in the order the README shows them.
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let shown = readme
        .lines()
        .find(|l| l.starts_with(r#"{"version":"#) && l.contains(r#""hash":"#))
        .expect("the README's publish output");
    assert_eq!(keys_in_order(&out), keys_in_order(shown), "{out}");
    let author: String = sqlx::query_scalar!("SELECT author FROM rules_versions WHERE version = 2")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let actor = format!("cli:{}", os_user());
    assert_eq!(author, actor);
    // With USER and LOGNAME naming someone else: the process's user all the same.
    let out = app
        .run_cli_with(
            &["rules", "rollback", "1"],
            &[("USER", "someone-else"), ("LOGNAME", "someone-else")],
        )
        .await;
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["version"], 1);
    let recorded: Vec<(String, String)> =
        sqlx::query!("SELECT action, actor FROM audit_log WHERE action IN ('rules.publish', 'rules.rollback') ORDER BY id")
            .fetch_all(&app.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|row| (row.action, row.actor))
            .collect();
    assert_eq!(
        recorded,
        [
            ("rules.publish".to_owned(), actor.clone()),
            ("rules.rollback".to_owned(), actor.clone()),
        ]
    );
    // This process hears of both (it follows only in a real boot: a reload reads it).
    let (_, body) = app.post_json("/v1/rules/reload", json!(null)).await;
    assert_eq!(body["version"], 1);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn an_admin_publishes_the_backtested_candidate_from_the_console_with_its_report() {
    let app = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(10);
        s.security.api_tokens = crate::helpers::api_tokens(vec![
            ApiToken::spec_for(Role::Moderator, TOKEN_MODERATOR),
            ApiToken::spec_for(Role::Admin, TOKEN_ADMIN),
        ]);
        s.console.console_session_key = Some(CONSOLE_SESSION_KEY.to_owned().into());
    }))
    .await;
    // Three flags on each of four posts: the default rules send them to review; a candidate
    // that hides at two flags would hide them instead.
    for post in 0..4 {
        let events: Vec<Value> = (0..3)
            .map(|i| event(&format!("p{post}-{i}"), &format!("post:{post}"), "flag"))
            .collect();
        let (status, body) = call(&app, "POST", "/v1/events", TOKEN_ADMIN, json!(events)).await;
        assert_eq!(status, 202, "{body}");
    }
    app.wait_settled(Duration::from_secs(20)).await;
    assert_eq!(app.count_actions().await, 4);

    let run = |client: reqwest::Client, cookie: String, csrf: String| {
        let app = &app;
        async move {
            client
                .post(format!("{}/console/backtest", app.base))
                .header(header::COOKIE, &cookie)
                .form(&[
                    ("csrf", csrf.as_str()),
                    ("rules", HIDE_AT_TWO),
                    ("window", "24h"),
                ])
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    // A moderator backtests but cannot publish.
    let (client, cookie, csrf) = console_session(&app, "Morgan", TOKEN_MODERATOR).await;
    let page = run(client.clone(), cookie.clone(), csrf.clone()).await;
    assert!(page.contains("An admin can publish"), "{page}");
    let refused = client
        .post(format!("{}/console/backtest/publish", app.base))
        .header(header::COOKIE, &cookie)
        .form(&[
            ("csrf", csrf.as_str()),
            ("rules", HIDE_AT_TWO),
            ("window", "24h"),
            ("message", "m"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);

    // An admin backtests, then publishes the candidate from the report's page.
    let (client, cookie, csrf) = console_session(&app, "Alex", TOKEN_ADMIN).await;
    let page = run(client.clone(), cookie.clone(), csrf.clone()).await;
    assert!(
        page.contains(r#"action="/console/backtest/publish""#),
        "{page}"
    );
    let publish = |message: &'static str| {
        let (client, cookie, csrf) = (client.clone(), cookie.clone(), csrf.clone());
        let base = app.base.clone();
        async move {
            client
                .post(format!("{base}/console/backtest/publish"))
                .header(header::COOKIE, &cookie)
                .form(&[
                    ("csrf", csrf.as_str()),
                    ("rules", HIDE_AT_TWO),
                    ("window", "24h"),
                    ("message", message),
                ])
                .send()
                .await
                .unwrap()
        }
    };
    let refused = publish(" ").await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(scalar!(app, "SELECT count(*) FROM rules_versions"), 1);
    let published = publish("hide at two flags, backtested").await;
    assert_eq!(published.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        published.headers()[header::LOCATION],
        "/console/rules?published=2"
    );

    // The version keeps the report; the API's list and the console's page show its figures.
    let (_, page) = call(
        &app,
        "GET",
        "/v1/rules/versions",
        TOKEN_MODERATOR,
        json!(null),
    )
    .await;
    let newest = &page["versions"][0];
    assert_eq!(
        (&newest["version"], &newest["author"]),
        (&json!(2), &json!("Alex"))
    );
    let overall = &newest["backtest"]["overall"];
    assert_eq!(
        (&overall["added"], &overall["removed"]),
        (&json!(4), &json!(4)),
        "{newest}"
    );
    assert!(
        overall["expected_reversal_rate"].is_null()
            || overall["expected_reversal_rate"]["rate"].is_number()
    );
    let listing = client
        .get(format!("{}/console/rules?published=2", app.base))
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(listing.contains("Published as version 2"), "{listing}");
    assert!(
        listing.contains("+4 added") && listing.contains("−4 removed"),
        "{listing}"
    );
    assert!(listing.contains("expected reversal rate"), "{listing}");
    let (_, audit) = call(
        &app,
        "GET",
        "/v1/audit?action=rules.publish",
        TOKEN_ADMIN,
        json!(null),
    )
    .await;
    assert_eq!(audit["entries"][0]["actor"], "Alex", "{audit}");
    assert_eq!(audit["entries"][0]["after"]["backtest"], true);
}

/// The next line of `lines` that contains `wanted` (30 s at most).
async fn log_line(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
    wanted: &str,
) -> String {
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains(wanted) {
                return line;
            }
        }
        panic!("the process ended without logging {wanted:?}")
    })
    .await
    .unwrap_or_else(|_| panic!("no {wanted:?} in the log within 30 s"))
}

/// A log line writes a rules version as its number (`none` without one), not `Some(1)`.
#[tokio::test]
async fn log_lines_write_the_rules_version_as_a_number() {
    use tokio::io::AsyncBufReadExt;

    let app = spawn_app(TestOptions::idle()).await;
    let address = crate::helpers::free_address();
    let mut serve = app
        .serve_command("logged", address)
        .env("RUST_LOG", "info")
        .env("QUIESCE_LOG_FORMAT", "text")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start serve");
    let mut lines = tokio::io::BufReader::new(serve.stderr.take().unwrap()).lines();
    let serving = log_line(&mut lines, "quiesce is serving").await;
    assert!(serving.contains(" rules_version=1"), "{serving}");
    let reload = app
        .client
        .post(format!("http://{address}/v1/rules/reload"))
        .send()
        .await
        .unwrap();
    assert_eq!(reload.status(), 200);
    let reloaded = log_line(&mut lines, "rules reloaded").await;
    assert!(reloaded.contains(" version=1"), "{reloaded}");
    for line in [serving, reloaded] {
        assert!(!line.contains("Some("), "{line}");
    }
    serve.kill().await.unwrap();
}
