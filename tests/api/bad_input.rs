//! Bad input: each validation rule answers with its status and an error body naming the
//! problem, and nothing of a rejected request reaches Postgres or Redis.

use serde_json::{Value, json};

use crate::helpers::{TestOptions, scalar, spawn_app};

struct Case {
    name: &'static str,
    content_type: Option<&'static str>,
    body: String,
    status: u16,
    code: &'static str,
    field: Option<&'static str>,
    index: Option<u64>,
}

fn case(name: &'static str, body: Value, field: &'static str) -> Case {
    Case {
        name,
        content_type: Some("application/json"),
        body: body.to_string(),
        status: 422,
        code: "invalid_event",
        field: Some(field),
        index: None,
    }
}

fn valid(id: &str) -> Value {
    json!({ "id": id, "entity": "post:1", "type": "flag" })
}

fn with(field: &str, value: Value) -> Value {
    let mut event = valid("evt-1");
    event[field] = value;
    event
}

fn without(field: &str) -> Value {
    let mut event = valid("evt-1");
    event.as_object_mut().unwrap().remove(field);
    event
}

#[tokio::test]
async fn every_validation_rule_answers_with_its_status_and_writes_nothing() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.http.body_limit = 8 * 1024;
        s.http.max_batch = 5;
    }))
    .await;

    let raw = |name, content_type, body: &str, status, code| Case {
        name,
        content_type,
        body: body.to_owned(),
        status,
        code,
        field: None,
        index: None,
    };
    let mut cases = vec![
        raw(
            "malformed json",
            Some("application/json"),
            "{\"id\": ",
            400,
            "malformed_json",
        ),
        raw(
            "no content type",
            None,
            &valid("evt-1").to_string(),
            415,
            "unsupported_media_type",
        ),
        raw(
            "text/plain",
            Some("text/plain"),
            &valid("evt-1").to_string(),
            415,
            "unsupported_media_type",
        ),
        raw(
            "body over the limit",
            Some("application/json"),
            &format!("[{}]", vec![valid("evt-1").to_string(); 200].join(",")),
            413,
            "payload_too_large",
        ),
        raw(
            "empty batch",
            Some("application/json"),
            "[]",
            422,
            "invalid_batch",
        ),
        raw(
            "batch over max",
            Some("application/json"),
            &json!((0..6).map(|i| valid(&format!("e{i}"))).collect::<Vec<_>>()).to_string(),
            422,
            "invalid_batch",
        ),
        raw(
            "scalar body",
            Some("application/json"),
            "42",
            422,
            "invalid_batch",
        ),
        case("missing id", without("id"), "id"),
        case("empty id", with("id", json!("")), "id"),
        case("id too long", with("id", json!("x".repeat(129))), "id"),
        case("id with a space", with("id", json!("evt 1")), "id"),
        case("id not a string", with("id", json!(7)), "id"),
        case("missing entity", without("entity"), "entity"),
        case(
            "entity without kind",
            with("entity", json!("9842")),
            "entity",
        ),
        case(
            "entity with upper-case kind",
            with("entity", json!("Post:1")),
            "entity",
        ),
        case(
            "entity kind too long",
            with("entity", json!(format!("{}:1", "k".repeat(33)))),
            "entity",
        ),
        case("entity id empty", with("entity", json!("post:")), "entity"),
        case(
            "entity id too long",
            with("entity", json!(format!("post:{}", "1".repeat(129)))),
            "entity",
        ),
        case(
            "entity id with a slash",
            with("entity", json!("post:a/b")),
            "entity",
        ),
        case("missing type", without("type"), "type"),
        case("type upper-case", with("type", json!("Flag")), "type"),
        case("type too long", with("type", json!("f".repeat(65))), "type"),
        case("actor not a string", with("actor", json!(17)), "actor"),
        case(
            "actor too long",
            with("actor", json!("a".repeat(129))),
            "actor",
        ),
        case("weight zero", with("weight", json!(0)), "weight"),
        case("weight negative", with("weight", json!(-1)), "weight"),
        case("weight over 1000", with("weight", json!(1000.5)), "weight"),
        case("weight a string", with("weight", json!("1")), "weight"),
        case(
            "occurred_at not RFC 3339",
            with("occurred_at", json!("yesterday")),
            "occurred_at",
        ),
        case(
            "occurred_at a number",
            with("occurred_at", json!(1700000000)),
            "occurred_at",
        ),
        case(
            "priority unknown",
            with("priority", json!("urgent")),
            "priority",
        ),
        case("unknown field", with("severity", json!("high")), "severity"),
        case(
            "author not an entity id",
            with("author", json!("77")),
            "author",
        ),
        case("author not a string", with("author", json!(77)), "author"),
    ];
    let mut second_bad = case(
        "second event of a batch invalid",
        json!([valid("evt-ok"), with("weight", json!(-3))]),
        "weight",
    );
    second_bad.index = Some(1);
    cases.push(second_bad);
    let mut not_object = case(
        "batch item not an object",
        json!([valid("evt-ok"), "flag"]),
        "",
    );
    not_object.field = None;
    not_object.index = Some(1);
    cases.push(not_object);

    for case in &cases {
        let mut request = app
            .client
            .post(format!("{}/v1/events", app.base))
            .body(case.body.clone());
        if let Some(content_type) = case.content_type {
            request = request.header("content-type", content_type);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let body: Value = response
            .json()
            .await
            .unwrap_or_else(|e| panic!("{}: body is not JSON: {e}", case.name));
        assert_eq!(status, case.status, "{}: {body}", case.name);
        let error = &body["error"];
        assert_eq!(error["code"], case.code, "{}: {body}", case.name);
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{}: {body}",
            case.name
        );
        match case.field {
            Some(field) => assert_eq!(error["field"], field, "{}: {body}", case.name),
            None => assert!(error.get("field").is_none(), "{}: {body}", case.name),
        }
        match case.index {
            Some(index) => assert_eq!(error["index"], index, "{}: {body}", case.name),
            None => assert!(error.get("index").is_none(), "{}: {body}", case.name),
        }
    }

    assert_eq!(app.count_events().await, 0);
    assert_eq!(app.count_entities().await, 0);
    assert_eq!(scalar!(app, "SELECT count(*) FROM signal_counts"), 0);
    assert_eq!(app.work_keys().await, Vec::<String>::new());

    // The same service still takes a valid request afterwards.
    assert_eq!(app.send(&valid("evt-1")).await, (1, 0));
}
