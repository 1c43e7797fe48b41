//! Event attributes at ingest: each refusal is a 422 naming the attribute, and nothing of the
//! refused request is written; accepted attributes are stored on the event row (NULL when an
//! event has none), through `/v1/events`, Standard Webhooks and GitHub-signed deliveries alike.

use hmac::{Hmac, Mac};
use quiesce::rules::RuleSet;
use serde_json::{Value, json};
use sha2::Sha256;

use crate::helpers::{SHOP_SECRET, TestApp, TestOptions, event, source, spawn_app};

pub const DECLARED: &str = r#"
[attributes.event.reason]
type = "string"
values = ["spam", "abuse", "off_topic"]

[attributes.event.score]
type = "number"

[attributes.event.note]
type = "string"

[attributes.event.verified_reporter]
type = "boolean"

[attributes.entity.account_age_days]
type = "number"

[attributes.entity.role]
type = "string"
values = ["member", "staff"]
"#;

/// Declared attributes, at most 3 an event, strings of at most 8 characters; a source signing
/// with Standard Webhooks (`shop`) and one signing the GitHub way (`forum`).
async fn app_with_declarations() -> TestApp {
    let mut forum = source("forum", &[]);
    forum.github_secrets = vec![secrecy::SecretString::from(crate::secrets::GITHUB)];
    spawn_app(TestOptions {
        rules: Some(RuleSet::from_toml(DECLARED).unwrap()),
        ..TestOptions::idle().with(|s| {
            s.http.max_attributes = 3;
            s.http.max_attribute_len = 8;
            s.security.sources = vec![source("shop", &[SHOP_SECRET]), forum];
        })
    })
    .await
}

/// A batch of five events whose fourth (index 3) carries `attributes`.
fn batch_with(attributes: Value) -> Value {
    let mut events: Vec<Value> = (0..5)
        .map(|i| event(&format!("a{i}"), &format!("post:{i}"), "flag"))
        .collect();
    events[3]["attributes"] = attributes;
    json!(events)
}

#[tokio::test]
async fn every_attribute_problem_is_a_422_naming_it_and_nothing_is_written() {
    let app = app_with_declarations().await;
    let cases = [
        (
            json!({"colour": "red"}),
            "attributes.colour",
            "not declared",
        ),
        (
            json!({"score": "high"}),
            "attributes.score",
            "must be a number",
        ),
        (
            json!({"verified_reporter": "yes"}),
            "attributes.verified_reporter",
            "must be a boolean",
        ),
        (
            json!({"reason": "rude"}),
            "attributes.reason",
            "must be one of spam, abuse, off_topic",
        ),
        (
            json!({"note": "longer than eight"}),
            "attributes.note",
            "longer than 8 characters",
        ),
        (
            json!({"reason": ["spam"]}),
            "attributes.reason",
            "nothing nested",
        ),
        (
            json!({"reason": "spam", "score": 1, "note": "n", "verified_reporter": true}),
            "attributes",
            "at most 3",
        ),
        (json!("spam"), "attributes", "must be an object"),
        (
            json!({"note": "a\u{0}b"}),
            "attributes.note",
            "control characters",
        ),
    ];
    for (attributes, field, message) in cases {
        let response = app.post_events(&batch_with(attributes.clone())).await;
        assert_eq!(response.status(), 422, "{attributes}");
        let body: Value = response.json().await.unwrap();
        let error = &body["error"];
        assert_eq!(error["code"], "invalid_event", "{body}");
        assert_eq!(error["index"], 3, "{body}");
        assert_eq!(error["field"], field, "{body}");
        assert!(
            error["message"].as_str().unwrap().contains(message),
            "{attributes}: {body}"
        );
    }
    // The same refusal through a signed source: the body parsing is shared.
    let response = app
        .post_signed("shop", SHOP_SECRET, &batch_with(json!({"reason": "rude"})))
        .await;
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["field"], "attributes.reason", "{body}");
    assert_eq!(app.count_events().await, 0);
    assert_eq!(app.count_entities().await, 0);
    assert!(app.queue_is_empty().await, "nothing was scheduled");
}

/// `X-Hub-Signature-256` over `body` with the GitHub secret of the tests.
fn github_signature(body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(crate::secrets::GITHUB.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

#[tokio::test]
async fn declared_attributes_are_stored_on_the_event_and_absent_ones_cost_nothing() {
    let app = app_with_declarations().await;
    app.send(&json!([
        {"id": "plain", "entity": "post:1", "type": "flag"},
        {"id": "empty", "entity": "post:1", "type": "flag", "attributes": {}},
        {"id": "full", "entity": "post:1", "type": "flag",
         "attributes": {"reason": "spam", "score": 0.93, "verified_reporter": true}},
    ]))
    .await;
    let response = app
        .post_signed(
            "shop",
            SHOP_SECRET,
            &json!({"id": "signed", "entity": "post:2", "type": "report",
                    "attributes": {"reason": "abuse"}}),
        )
        .await;
    assert_eq!(response.status(), 202);
    let github = r#"{"id":"github","entity":"post:3","type":"report","attributes":{"score":2}}"#;
    let response = app
        .client
        .post(format!("{}/v1/sources/forum/events", app.base))
        .header("content-type", "application/json")
        .header("x-hub-signature-256", github_signature(github))
        .header("x-github-delivery", "attributes-1")
        .body(github)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202, "{}", response.text().await.unwrap());
    let stored: Vec<(String, Option<Value>)> =
        sqlx::query!("SELECT id, attributes FROM events ORDER BY id")
            .fetch_all(&app.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|row| (row.id, row.attributes))
            .collect();
    assert_eq!(
        stored,
        vec![
            ("empty".into(), None),
            (
                "full".into(),
                Some(json!({"reason": "spam", "score": 0.93, "verified_reporter": true}))
            ),
            ("github".into(), Some(json!({"score": 2.0}))),
            ("plain".into(), None),
            ("signed".into(), Some(json!({"reason": "abuse"}))),
        ]
    );
}

#[tokio::test]
async fn the_openapi_document_describes_attributes_and_the_context_endpoint() {
    let app = app_with_declarations().await;
    let (status, document) = app.get("/openapi.json").await;
    assert_eq!(status, 200);
    let event = &document["components"]["schemas"]["Event"]["properties"]["attributes"];
    assert!(
        event["description"]
            .as_str()
            .unwrap()
            .contains("max_attributes"),
        "{event}"
    );
    let scalars = &event["additionalProperties"]["oneOf"];
    assert_eq!(scalars.as_array().map(Vec::len), Some(3), "{event}");
    let put = &document["paths"]["/v1/entities/{entity}/attributes"]["put"];
    // The rules listing says what may be sent.
    let (status, listing) = app.get("/v1/rules").await;
    assert_eq!(status, 200);
    assert_eq!(
        listing["attributes"]["event"]["reason"],
        json!({"type": "string", "values": ["spam", "abuse", "off_topic"]})
    );
    assert_eq!(
        listing["attributes"]["entity"]["account_age_days"]["type"],
        "number"
    );
    assert!(put["responses"]["422"].is_object(), "{put}");
    assert!(put["requestBody"].is_object(), "{put}");
}
