//! The audit trail: every human and admin decision (reversal, override, redrive, rules reload,
//! console sign-in and sign-out) is recorded with who made it, the token's label, the role,
//! the address and the state before and after; `GET /v1/audit` (admin) and `quiesce audit`
//! read it; the table refuses UPDATE, DELETE and TRUNCATE; no token is ever in it.

use std::time::Duration;

use quiesce::{
    credentials::{ApiToken, Role},
    domain::{EntityId, Priority},
};
use reqwest::{StatusCode, header};
use serde_json::{Value, json};

use crate::helpers::scalar;
use crate::{
    console::csrf_of,
    helpers::{TestApp, TestOptions, call, event, spawn_app, wait_for},
    secrets::{CONSOLE_SESSION_KEY, TOKEN_ADMIN, TOKEN_INGEST, TOKEN_MODERATOR},
};

const SETTLE: Duration = Duration::from_secs(20);

fn label(role: Role, token: &str) -> String {
    ApiToken::parse(&ApiToken::spec_for(role, token))
        .unwrap()
        .label()
}

async fn audit(app: &TestApp, query: &str) -> Vec<Value> {
    let (status, page) = call(
        app,
        "GET",
        &format!("/v1/audit{query}"),
        TOKEN_ADMIN,
        json!(null),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    page["entries"].as_array().unwrap().clone()
}

/// A console client signed in as `name` with `token`: the client, the session cookie and the
/// CSRF token of its pages.
pub(crate) async fn console_session(
    app: &TestApp,
    name: &str,
    token: &str,
) -> (reqwest::Client, String, String) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let cookie_of = |response: &reqwest::Response| -> String {
        let set = response.headers()[header::SET_COOKIE].to_str().unwrap();
        set.split(';').next().unwrap().to_owned()
    };
    let form = client
        .get(format!("{}/console/login", app.base))
        .send()
        .await
        .unwrap();
    let anonymous = cookie_of(&form);
    let csrf = csrf_of(&form.text().await.unwrap());
    let signed_in = client
        .post(format!("{}/console/login", app.base))
        .header(header::COOKIE, &anonymous)
        .header("x-forwarded-for", "203.0.113.7")
        .form(&[("csrf", csrf.as_str()), ("name", name), ("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let cookie = cookie_of(&signed_in);
    let page = client
        .get(format!("{}/console/review", app.base))
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    (client, cookie, csrf_of(&page))
}

/// Signs in to the console as `name` with the moderator token, then signs out.
async fn sign_in_and_out(app: &TestApp, name: &str) {
    let (client, cookie, csrf) = console_session(app, name, TOKEN_MODERATOR).await;
    let out = client
        .post(format!("{}/console/logout", app.base))
        .header(header::COOKIE, &cookie)
        .form(&[("csrf", csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn every_decision_is_in_the_audit_trail_with_its_actor_and_none_can_be_changed() {
    let app = spawn_app(TestOptions::default().with(|s| {
        s.security.api_tokens = crate::helpers::api_tokens(vec![
            ApiToken::spec_for(Role::Ingest, TOKEN_INGEST),
            ApiToken::spec_for(Role::Moderator, TOKEN_MODERATOR),
            ApiToken::spec_for(Role::Admin, TOKEN_ADMIN),
        ]);
        s.console.console_session_key = Some(CONSOLE_SESSION_KEY.to_owned().into());
    }))
    .await;
    let moderator = label(Role::Moderator, TOKEN_MODERATOR);
    let admin = label(Role::Admin, TOKEN_ADMIN);

    // A hide, reversed by a moderator; an override on another post.
    let events: Vec<Value> = (0..10)
        .map(|i| event(&format!("a-{i}"), "post:a", "flag"))
        .chain([event("b-0", "post:b", "flag")])
        .collect();
    let (status, body) = call(&app, "POST", "/v1/events", TOKEN_INGEST, json!(events)).await;
    assert_eq!(status, 202, "{body}");
    app.wait_settled(SETTLE).await;
    let hide: i64 = scalar!(
        app,
        "SELECT id FROM actions WHERE entity = 'post:a' AND action = 'hide'"
    );
    let reason = json!({"moderator": "mod:ana", "reason": "not abuse"});
    let (status, body) = call(
        &app,
        "POST",
        &format!("/v1/actions/{hide}/reverse"),
        TOKEN_MODERATOR,
        reason,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let override_body = json!({"moderator": "mod:ben", "status": "hidden", "reason": "spam ring"});
    let (status, body) = call(
        &app,
        "POST",
        "/v1/entities/post:b/override",
        TOKEN_MODERATOR,
        override_body,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // A dead letter redriven by an admin; a rules reload; a console sign-in and sign-out.
    let ghost = EntityId::parse("post:ghost").unwrap();
    app.backends
        .queue
        .schedule(&[(ghost.clone(), Priority::Critical)])
        .await
        .unwrap();
    // Unknown to Postgres, a worker dead-letters it at once.
    wait_for(SETTLE, "post:ghost dead-lettered", || async {
        app.dead_letter_count_of("post:ghost").await == 1
    })
    .await;
    let (status, body) = call(
        &app,
        "POST",
        "/v1/dead-letters/post:ghost/redrive",
        TOKEN_ADMIN,
        json!(null),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(&app, "POST", "/v1/rules/reload", TOKEN_ADMIN, json!(null)).await;
    assert_eq!(status, 200, "{body}");
    sign_in_and_out(&app, "Morgan").await;

    let entries = audit(&app, "").await;
    let kinds: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "console.sign_out",
            "console.sign_in",
            "rules.reload",
            "dead_letter.redrive",
            "entity.override",
            "action.reverse",
        ],
        "newest first: {entries:?}"
    );
    let entry = |kind: &str| {
        entries
            .iter()
            .find(|e| e["action"] == kind)
            .unwrap()
            .clone()
    };
    let reversal = entry("action.reverse");
    assert_eq!(reversal["actor"], "mod:ana");
    assert_eq!(reversal["credential"], moderator.as_str());
    assert_eq!(reversal["role"], "moderator");
    assert_eq!(reversal["address"], "127.0.0.1");
    assert_eq!(reversal["subject"], format!("action:{hide}"));
    assert_eq!(reversal["before"]["status"], "hidden");
    assert_eq!(reversal["after"]["status"], "visible");
    assert_eq!(reversal["after"]["reason"], "not abuse");
    let overridden = entry("entity.override");
    assert_eq!(
        (&overridden["actor"], &overridden["subject"]),
        (&json!("mod:ben"), &json!("post:b"))
    );
    assert_eq!(overridden["before"]["status"], "visible");
    assert_eq!(overridden["after"]["status"], "hidden");
    let redrive = entry("dead_letter.redrive");
    assert_eq!(
        (
            &redrive["actor"],
            &redrive["credential"],
            &redrive["role"],
            &redrive["subject"]
        ),
        (
            &json!(admin),
            &json!(admin),
            &json!("admin"),
            &json!("post:ghost")
        )
    );
    let reload = entry("rules.reload");
    assert_eq!(
        (&reload["actor"], &reload["after"]["rules"]),
        (&json!(admin), &json!(4))
    );
    let sign_in = entry("console.sign_in");
    assert_eq!(sign_in["actor"], "Morgan");
    assert_eq!(sign_in["subject"], moderator.as_str());
    assert_eq!(sign_in["forwarded_for"], "203.0.113.7");
    assert_eq!(entry("console.sign_out")["actor"], "Morgan");

    // Filters and keyset paging.
    let reversals = audit(&app, "?action=action.reverse&actor=mod:ana&since=1h").await;
    assert_eq!(reversals.len(), 1);
    let first = audit(&app, "?limit=2").await;
    let (_, page) = call(&app, "GET", "/v1/audit?limit=2", TOKEN_ADMIN, json!(null)).await;
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let second = audit(&app, &format!("?limit=2&cursor={cursor}")).await;
    assert_eq!(first.len() + second.len(), 4);
    assert_eq!(second[0]["action"], "rules.reload");
    for (query, field) in [
        ("?action=rules.delete", "action"),
        ("?since=yesterday", "since"),
        ("?limit=0", "limit"),
        ("?cursor=x", "cursor"),
        ("?who=me", "who"),
    ] {
        let (status, body) = call(
            &app,
            "GET",
            &format!("/v1/audit{query}"),
            TOKEN_ADMIN,
            json!(null),
        )
        .await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["field"], field, "{query}: {body}");
    }
    let (status, _) = call(&app, "GET", "/v1/audit", TOKEN_MODERATOR, json!(null)).await;
    assert_eq!(status, 403, "the audit trail is for admins");

    // The command prints the same entries as JSON lines.
    let lines = app.run_cli(&["audit", "--since", "1h", "--json"]).await;
    let printed: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(printed, entries);

    // No token is in it, only their labels.
    let all = serde_json::to_string(&entries).unwrap();
    for token in [TOKEN_INGEST, TOKEN_MODERATOR, TOKEN_ADMIN] {
        assert!(!all.contains(token));
    }

    // Append-only: UPDATE, DELETE and TRUNCATE are refused; only the retention pass removes
    // entries, and only those past audit_retention.
    for (statement, refused) in [
        (
            "UPDATE",
            sqlx::query!("UPDATE audit_log SET actor = 'someone else'")
                .execute(&app.pool)
                .await,
        ),
        (
            "DELETE",
            sqlx::query!("DELETE FROM audit_log")
                .execute(&app.pool)
                .await,
        ),
        // TRUNCATE is DDL to the compile-time check: a string.
        (
            "TRUNCATE",
            sqlx::query("TRUNCATE audit_log").execute(&app.pool).await,
        ),
    ] {
        let error = refused.unwrap_err();
        assert!(
            error.to_string().contains("append-only"),
            "{statement}: {error}"
        );
    }
    sqlx::query!(
        "INSERT INTO audit_log (at, actor, action, subject)
 VALUES (now() - interval '500 days', 'old', 'rules.reload', 'rules')",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let removed = app
        .backends
        .store
        .audit()
        .expire_audit(Duration::from_secs(400 * 24 * 3600))
        .await
        .unwrap();
    assert_eq!(removed, 1);
    assert_eq!(audit(&app, "").await, entries);

    // The console's audit page shows it to admins, and only to them.
    let (client, cookie, _) = console_session(&app, "Ada", TOKEN_ADMIN).await;
    let page = client
        .get(format!("{}/console/audit?action=action.reverse", app.base))
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let page = page.text().await.unwrap();
    assert!(
        page.contains(&format!(r#"data-id="{}""#, reversal["id"])),
        "{page}"
    );
    assert!(
        page.contains("mod:ana") && !page.contains("mod:ben"),
        "{page}"
    );
    let (client, cookie, _) = console_session(&app, "Morgan", TOKEN_MODERATOR).await;
    let refused = client
        .get(format!("{}/console/audit", app.base))
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn the_audit_command_prints_a_header_and_says_when_there_is_no_entry() {
    let app = spawn_app(TestOptions::idle()).await;
    let header = "at\taction\tsubject\tactor\tcredential\taddress";
    // Nothing recorded: the header, then a line that says so; JSON lines print nothing.
    let empty = app.run_cli(&["audit", "--since", "1h"]).await;
    let lines: Vec<&str> = empty.lines().collect();
    assert_eq!(lines.len(), 2, "{empty}");
    assert_eq!(lines[0], header);
    assert!(lines[1].starts_with("no entries since "), "{empty}");
    assert!(!lines[1].contains("filters"), "{empty}");
    assert_eq!(app.run_cli(&["audit", "--since", "1h", "--json"]).await, "");

    // One decision: the header, then its row under it.
    let (status, body) = app.post_json("/v1/rules/reload", json!(null)).await;
    assert_eq!(status, 200, "{body}");
    let table = app.run_cli(&["audit", "--since", "1h"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert_eq!(lines[0], header);
    let row: Vec<&str> = lines[1].split('\t').collect();
    assert_eq!(row.len(), header.split('\t').count(), "{table}");
    assert_eq!((row[1], row[2]), ("rules.reload", "rules"), "{table}");

    // A filter that matches none says so.
    let none = app
        .run_cli(&["audit", "--since", "1h", "--actor", "nobody"])
        .await;
    assert!(
        none.lines().nth(1).is_some_and(
            |l| l.starts_with("no entries since ") && l.ends_with("that match the filters")
        ),
        "{none}"
    );
}
