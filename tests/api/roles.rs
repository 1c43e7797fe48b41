//! API tokens and roles: every route x {no token, bad token, each role}.

use quiesce::credentials::{ApiToken, Role};
use serde_json::json;

use crate::helpers::{SHOP_SECRET, TestOptions, event, source, spawn_app};

#[tokio::test]
async fn every_route_answers_each_role_as_documented() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.security.api_tokens = crate::helpers::api_tokens(vec![
            ApiToken::spec_for(Role::Ingest, crate::secrets::TOKEN_INGEST),
            ApiToken::spec_for(Role::Moderator, crate::secrets::TOKEN_MODERATOR),
            ApiToken::spec_for(Role::Admin, crate::secrets::TOKEN_ADMIN),
        ]);
        s.security.sources = vec![source("shop", &[SHOP_SECRET])];
    }))
    .await;
    // (method, path, body, roles allowed). Open routes need nothing.
    let routes: Vec<(&str, &str, serde_json::Value, &[&str])> = vec![
        (
            "POST",
            "/v1/events",
            event("r1", "post:1", "flag"),
            &["ingest", "admin"],
        ),
        (
            "GET",
            "/v1/entities/post:1",
            json!(null),
            &["moderator", "admin"],
        ),
        (
            "GET",
            "/v1/entities/post:1/evaluations",
            json!(null),
            &["moderator", "admin"],
        ),
        ("GET", "/v1/actions", json!(null), &["moderator", "admin"]),
        (
            "GET",
            "/v1/stats/reversal-rate",
            json!(null),
            &["moderator", "admin"],
        ),
        ("GET", "/v1/rules", json!(null), &["moderator", "admin"]),
        (
            "POST",
            "/v1/actions/1/reverse",
            json!({"moderator": "m", "reason": "r"}),
            &["moderator", "admin"],
        ),
        (
            "POST",
            "/v1/entities/post:1/override",
            json!({"moderator": "m", "reason": "r", "status": "visible"}),
            &["moderator", "admin"],
        ),
        (
            "POST",
            "/v1/entities/post:1/timer/end",
            json!({"moderator": "m", "reason": "r"}),
            &["moderator", "admin"],
        ),
        ("GET", "/v1/review", json!(null), &["moderator", "admin"]),
        (
            "POST",
            "/v1/review/1/claim",
            json!({"moderator": "m"}),
            &["moderator", "admin"],
        ),
        (
            "POST",
            "/v1/review/1/decide",
            json!({"moderator": "m", "decision": "hide", "reason": "r", "moderation_version": 1}),
            &["moderator", "admin"],
        ),
        (
            "POST",
            "/v1/rules/backtest",
            json!({"rules": "", "since": "1h"}),
            &["moderator", "admin"],
        ),
        (
            "PUT",
            "/v1/entities/user:1/attributes",
            json!({}),
            &["ingest", "admin"],
        ),
        ("POST", "/v1/rules/reload", json!(null), &["admin"]),
        (
            "GET",
            "/v1/rules/versions",
            json!(null),
            &["moderator", "admin"],
        ),
        (
            "POST",
            "/v1/rules",
            json!({"rules": "", "message": "roles"}),
            &["admin"],
        ),
        (
            "POST",
            "/v1/rules/versions/1/activate",
            json!(null),
            &["admin"],
        ),
        ("GET", "/v1/dead-letters", json!(null), &["admin"]),
        ("GET", "/v1/audit", json!(null), &["admin"]),
        ("POST", "/v1/dead-letters/redrive", json!(null), &["admin"]),
        (
            "POST",
            "/v1/dead-letters/post:1/redrive",
            json!(null),
            &["admin"],
        ),
    ];
    let tokens: [(&str, Option<&str>); 5] = [
        ("none", None),
        ("bad", Some("not-a-token")),
        ("ingest", Some(crate::secrets::TOKEN_INGEST)),
        ("moderator", Some(crate::secrets::TOKEN_MODERATOR)),
        ("admin", Some(crate::secrets::TOKEN_ADMIN)),
    ];
    for (method, path, body, allowed) in &routes {
        for (who, token) in &tokens {
            let mut request = match *method {
                "GET" => app.client.get(format!("{}{path}", app.base)),
                "PUT" => app.client.put(format!("{}{path}", app.base)),
                _ => app.client.post(format!("{}{path}", app.base)),
            };
            if !body.is_null() {
                request = request.json(body);
            }
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let status = request.send().await.unwrap().status().as_u16();
            let expected_denial = match *who {
                "none" | "bad" => Some(401),
                role if allowed.contains(&role) => None,
                _ => Some(403),
            };
            match expected_denial {
                Some(denied) => assert_eq!(status, denied, "{method} {path} as {who}"),
                None => assert!(
                    status != 401 && status != 403,
                    "{method} {path} as {who}: {status}"
                ),
            }
        }
    }
    for open in ["/healthz", "/readyz"] {
        assert_eq!(app.get(open).await.0, 200, "{open} is open");
    }
    // Metrics are not served with the API, only on the metrics listener.
    assert_eq!(app.get("/metrics").await.0, 404);
    assert!(
        app.metrics_text()
            .await
            .contains("quiesce_http_requests_total")
    );
    // A named source's endpoint takes no token: its signature is the credential, so a request
    // without one is refused whatever token it carries.
    for (who, token) in &tokens {
        let mut request = app
            .client
            .post(format!("{}/v1/sources/shop/events", app.base))
            .json(&event("r2", "post:2", "flag"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let status = request.send().await.unwrap().status().as_u16();
        assert_eq!(status, 401, "unsigned source request as {who}");
    }
    // Only the two allowed ingests were written (ingest and admin sent the same id).
    assert_eq!(app.count_events().await, 1);
}
