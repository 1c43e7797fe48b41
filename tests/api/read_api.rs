//! Read API, health and metrics.

use std::time::Duration;

use quiesce::domain::Status;
use serde_json::{Value, json};

use crate::helpers::{TestOptions, event, scalar, spawn_app, wait_for};

#[tokio::test]
async fn an_entity_shows_its_status_aggregates_and_schedule() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_secs(30);
        s.schedule.max_wait = Duration::from_secs(60);
    }))
    .await;
    app.send(&json!([
        event("a", "post:9842", "flag"),
        event("b", "post:9842", "upvote"),
        event("c", "post:9842", "upvote")
    ]))
    .await;

    let (status, body) = app.get("/v1/entities/post:9842").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "visible");
    assert_eq!(body["kind"], "post");
    assert_eq!(body["moderation_version"], 0);
    assert_eq!(body["signals"]["upvote"]["count"], 2);
    assert_eq!(body["signals"]["flag"]["count"], 1);
    assert_eq!(body["evaluation"]["pending"], true);
    assert_eq!(body["evaluation"]["count"], 0);
    let fires_at =
        chrono::DateTime::parse_from_rfc3339(body["evaluation"]["fires_at"].as_str().unwrap())
            .unwrap();
    let ahead = fires_at.signed_duration_since(chrono::Utc::now());
    assert!(
        ahead > chrono::Duration::seconds(20) && ahead <= chrono::Duration::seconds(31),
        "{ahead}"
    );

    let (status, body) = app.get("/v1/entities/post:404").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
    let (status, body) = app.get("/v1/entities/Post").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "entity");
}

#[tokio::test]
async fn actions_are_listed_newest_first_and_filtered() {
    let app = spawn_app(
        TestOptions::default().with(|s| s.schedule.debounce_window = Duration::from_millis(100)),
    )
    .await;
    for (entity, flags) in [("post:1", 10), ("post:2", 3)] {
        let events: Vec<_> = (0..flags)
            .map(|i| event(&format!("{entity}-{i}"), entity, "flag"))
            .collect();
        app.send(&json!(events)).await;
    }
    app.wait_settled(Duration::from_secs(20)).await;

    let (status, body) = app.get("/v1/actions").await;
    assert_eq!(status, 200, "{body}");
    let actions = body["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 2, "{body}");
    assert!(actions[0]["id"].as_i64() > actions[1]["id"].as_i64());

    let (_, body) = app.get("/v1/actions?entity=post:1").await;
    let actions = body["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 1);
    assert_eq!(actions[0]["action"], "hide");
    assert_eq!(actions[0]["rule"], "hide_flag_pile_on");
    assert_eq!(actions[0]["previous_status"], "visible");
    assert_eq!(actions[0]["new_status"], "hidden");
    assert_eq!(actions[0]["reason"], "10 flags against 0 upvotes");
    assert_eq!(actions[0]["snapshot"]["signals"]["flag"]["count"], 10);
    // Standing: the reversal's fields are there, and null.
    for field in [
        "reversed_at",
        "reversed_by",
        "reversal_reason",
        "reversal_source",
    ] {
        assert_eq!(actions[0].get(field), Some(&Value::Null), "{field}");
    }

    let (_, body) = app.get("/v1/actions?entity=post:2&limit=1").await;
    assert_eq!(body["actions"][0]["action"], "flag");

    for bad in [
        "/v1/actions?limit=0",
        "/v1/actions?limit=x",
        "/v1/actions?entity=nope",
        "/v1/actions?colour=red",
    ] {
        let (status, body) = app.get(bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body["error"]["field"].is_string(), "{bad}: {body}");
    }
}

#[tokio::test]
async fn an_entitys_evaluations_are_paged_newest_first_with_their_decisions_and_rules_version() {
    let app = spawn_app(
        TestOptions::default().with(|s| s.schedule.debounce_window = Duration::from_millis(10)),
    )
    .await;
    // Three evaluations: one flag (nothing), two more (the review rule flags it), an upvote
    // (the rule still holds; the status already is flagged).
    for (round, events) in [
        vec![event("p1", "post:p", "flag")],
        vec![event("p2", "post:p", "flag"), event("p3", "post:p", "flag")],
        vec![event("p4", "post:p", "upvote")],
    ]
    .into_iter()
    .enumerate()
    {
        app.send(&json!(events)).await;
        app.wait_settled(Duration::from_secs(20)).await;
        assert_eq!(app.evaluation_count("post:p").await, round as i64 + 1);
    }

    let (status, first) = app.get("/v1/entities/post:p/evaluations?limit=2").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["entity"], "post:p");
    let cursor = first["next_cursor"]
        .as_str()
        .expect("a full page has a cursor");
    let (status, second) = app
        .get(&format!(
            "/v1/entities/post:p/evaluations?limit=2&cursor={cursor}"
        ))
        .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["next_cursor"], serde_json::Value::Null, "{second}");
    let evaluations: Vec<&serde_json::Value> = first["evaluations"]
        .as_array()
        .unwrap()
        .iter()
        .chain(second["evaluations"].as_array().unwrap())
        .collect();
    let counts: Vec<i64> = evaluations
        .iter()
        .map(|e| e["event_count"].as_i64().unwrap())
        .collect();
    assert_eq!(counts, [4, 3, 1], "newest first, each once");
    let (latest, acted, quiet) = (evaluations[0], evaluations[1], evaluations[2]);
    assert_eq!(quiet["decisions"]["matched"], json!([]), "{quiet}");
    assert_eq!(quiet["action_id"], serde_json::Value::Null, "{quiet}");
    assert_eq!(
        acted["decisions"]["matched"][0]["rule"], "review_repeated_flags",
        "{acted}"
    );
    assert_eq!(acted["decisions"]["exempted"], json!([]), "{acted}");
    assert_eq!(
        latest["decisions"]["matched"][0]["rule"],
        "review_repeated_flags"
    );
    assert_eq!(latest["action_id"], serde_json::Value::Null, "{latest}");
    assert_eq!(latest["snapshot"]["status"], "flagged", "{latest}");

    // The action the evaluation applied, with the rules version that decided it: the
    // evaluation's, and the one its webhook carries.
    let (status, actions) = app.get("/v1/actions?entity=post:p").await;
    assert_eq!(status, 200, "{actions}");
    let action = &actions["actions"][0];
    assert_eq!(action["id"], acted["action_id"], "{actions} {acted}");
    let version = acted["rules_version"].as_i64().expect("a rules version");
    assert_eq!(action["rules_version"], version, "{actions}");
    let carried = scalar!(
        app,
        "SELECT (payload->>'rules_version')::int8 FROM outbox
             WHERE topic = 'action.applied' AND payload->>'entity' = 'post:p'"
    );
    assert_eq!(carried, version);

    for (bad, status, field) in [
        ("/v1/entities/post:p/evaluations?cursor=x", 400, "cursor"),
        ("/v1/entities/post:p/evaluations?cursor=1.", 400, "cursor"),
        ("/v1/entities/post:p/evaluations?limit=0", 400, "limit"),
        ("/v1/entities/post:p/evaluations?limit=201", 400, "limit"),
        ("/v1/entities/post:p/evaluations?colour=red", 400, "colour"),
        ("/v1/entities/Post/evaluations", 400, "entity"),
    ] {
        let (answered, body) = app.get(bad).await;
        assert_eq!(answered, status, "{bad}: {body}");
        assert_eq!(body["error"]["field"], field, "{bad}: {body}");
    }
    let (answered, body) = app.get("/v1/entities/post:none/evaluations").await;
    assert_eq!(answered, 404, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
}

#[tokio::test]
async fn health_readiness_and_metrics_answer() {
    let mut app = spawn_app(
        TestOptions::default().with(|s| s.schedule.debounce_window = Duration::from_millis(50)),
    )
    .await;
    assert_eq!(app.get("/healthz").await.0, 200);
    let response = app
        .client
        .delete(format!("{}/v1/events", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");
    let (status, body) = app.get("/v2/nothing").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let (status, body) = app.get("/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["redis"], "ok");
    assert_eq!(body["postgres"], "ok");

    // Counters are process-wide (other tests add to them too); what this test does must move
    // each of them, and a counter nobody increments would not move at all.
    let before = app.metrics_text().await;
    let events: Vec<_> = (0..10)
        .map(|i| event(&format!("m{i}"), "post:m", "flag"))
        .collect();
    app.send(&json!(events)).await;
    wait_for(Duration::from_secs(20), "the hide action", || async {
        app.status_of("post:m").await == Status::Hidden
    })
    .await;

    // Metrics are served on their own listener, not with the API.
    assert_eq!(app.get("/metrics").await.0, 404);
    let text = &app.metrics_text().await;
    for (series, at_least) in [
        ("quiesce_events_ingested_total", 10.0),
        ("quiesce_evaluations_total{outcome=\"done\"}", 1.0),
        ("quiesce_actions_total{action=\"hide\",", 1.0),
        ("quiesce_fire_delay_seconds_count", 1.0),
        (
            "quiesce_http_requests_total{route=\"/v1/events\",method=\"POST\",status=\"202\"}",
            1.0,
        ),
    ] {
        let moved = metric(text, series) - metric(&before, series);
        assert!(
            moved >= at_least,
            "{series} moved by {moved}, expected at least {at_least}"
        );
    }
    // Queue depths are read from Redis at each scrape: one series per shard of this app.
    for gauge in ["quiesce_queue_due", "quiesce_queue_inflight"] {
        let shards = text
            .lines()
            .filter(|line| line.starts_with(&format!("{gauge}{{shard=")))
            .count();
        assert!(
            shards >= usize::from(app.settings.redis.shards),
            "{gauge}: {shards} series"
        );
    }
    assert!(
        text.contains("route=\"/v1/events\""),
        "requests are labelled by route template"
    );
    assert!(!text.contains("post:m"), "no entity ids in metric labels");

    // Graceful shutdown: the server and its workers stop without error.
    app.stop().await;
    assert!(
        app.client
            .get(format!("{}/healthz", app.base))
            .send()
            .await
            .is_err(),
        "no longer listening"
    );
}

#[tokio::test]
async fn the_openapi_document_describes_every_route() {
    let app = spawn_app(TestOptions::idle()).await;
    let (status, doc) = app.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let expected = [
        ("post", "/v1/events"),
        ("post", "/v1/sources/{source}/events"),
        ("get", "/v1/entities/{entity}"),
        ("get", "/v1/entities/{entity}/evaluations"),
        ("put", "/v1/entities/{entity}/attributes"),
        ("get", "/v1/actions"),
        ("post", "/v1/actions/{id}/reverse"),
        ("post", "/v1/entities/{entity}/override"),
        ("post", "/v1/entities/{entity}/timer/end"),
        ("get", "/v1/stats/reversal-rate"),
        ("get", "/v1/review"),
        ("post", "/v1/review/{id}/claim"),
        ("post", "/v1/review/{id}/decide"),
        ("get", "/v1/statements"),
        ("post", "/v1/statements/{id}/appeals"),
        ("post", "/v1/actions/{id}/appeals"),
        ("get", "/v1/appeals"),
        ("post", "/v1/appeals/{id}/claim"),
        ("post", "/v1/appeals/{id}/decide"),
        ("get", "/v1/rules"),
        ("post", "/v1/rules/reload"),
        ("post", "/v1/rules"),
        ("get", "/v1/rules/versions"),
        ("post", "/v1/rules/versions/{version}/activate"),
        ("post", "/v1/rules/backtest"),
        ("get", "/v1/dead-letters"),
        ("post", "/v1/dead-letters/redrive"),
        ("post", "/v1/dead-letters/{entity}/redrive"),
        ("get", "/v1/audit"),
        ("get", "/healthz"),
        ("get", "/readyz"),
        ("get", "/openapi.json"),
    ];
    let paths = doc["paths"].as_object().unwrap();
    let documented: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
    assert_eq!(
        documented,
        expected.len(),
        "no undocumented or extra operation"
    );
    for (method, path) in expected {
        let operation = &doc["paths"][path][method];
        assert!(operation.is_object(), "{method} {path} is documented");
        assert!(
            !operation["responses"].as_object().unwrap().is_empty(),
            "{method} {path} has responses"
        );
    }
    // An action names where its reversal came from, as GET /v1/actions answers.
    assert!(
        doc["components"]["schemas"]["ActionRecord"]["properties"]["reversal_source"].is_object(),
        "{}",
        doc["components"]["schemas"]["ActionRecord"]
    );
    // Token routes say so; the named source's does not need one.
    assert_eq!(
        doc["paths"]["/v1/events"]["post"]["security"][0]["bearer"],
        json!([])
    );
    assert_eq!(
        doc["paths"]["/v1/sources/{source}/events"]["post"]["security"],
        json!([{}])
    );
}

/// The sum of the samples whose line starts with `series` (a name, or a name and the first
/// labels), 0 when there are none.
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(series))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
