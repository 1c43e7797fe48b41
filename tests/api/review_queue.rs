//! The review queue's API: what automation flagged waits there, oldest first; a moderator
//! claims an item (no one else can while the claim lasts) and decides it.

use std::time::Duration;

use quiesce::credentials::{ApiToken, Role};
use quiesce::domain::Status;
use serde_json::{Value, json};

use crate::helpers::{TestApp, TestOptions, claim_next, event, scalar, spawn_app, wait_for};

/// Three flags (the default rules' `review_repeated_flags`) on each entity, evaluated: each
/// is flagged and waits in the queue, in this order.
async fn flagged(app: &TestApp, entities: &[&str]) -> Vec<i64> {
    flagged_as(app, entities, None).await
}

/// [`flagged`], sending the events with an ingest token.
async fn flagged_as(app: &TestApp, entities: &[&str], token: Option<&str>) -> Vec<i64> {
    let worker = app.worker();
    let mut ids = Vec::new();
    for entity in entities {
        let events: Vec<Value> = (0..3)
            .map(|i| event(&format!("{entity}-f{i}"), entity, "flag"))
            .collect();
        let mut request = app
            .client
            .post(format!("{}/v1/events", app.base))
            .json(&events);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        assert_eq!(request.send().await.unwrap().status().as_u16(), 202);
        worker.evaluate_claim(claim_next(&worker).await).await;
        assert_eq!(app.status_of(entity).await, Status::Flagged);
        let id: i64 = sqlx::query_scalar!(
            "SELECT id FROM actions WHERE entity = $1 AND action = 'flag'",
            entity
        )
        .fetch_one(&app.pool)
        .await
        .unwrap();
        ids.push(id);
    }
    ids
}

fn app_options() -> TestOptions {
    TestOptions::idle().with(|s| s.schedule.debounce_window = Duration::from_millis(20))
}

async fn waiting(app: &TestApp, query: &str) -> Vec<i64> {
    let (status, body) = app.get(&format!("/v1/review{query}")).await;
    assert_eq!(status, 200, "{body}");
    body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["id"].as_i64().unwrap())
        .collect()
}

async fn decide(app: &TestApp, id: i64, body: Value) -> (u16, Value) {
    app.post_json(&format!("/v1/review/{id}/decide"), body)
        .await
}

#[tokio::test]
async fn two_moderators_cannot_claim_one_item_and_a_decision_is_a_reversible_action() {
    let app = spawn_app(app_options()).await;
    let ids = flagged(&app, &["post:q1", "post:q2"]).await;
    assert_eq!(waiting(&app, "").await, ids, "oldest first");

    let (status, item) = app
        .post_json(
            &format!("/v1/review/{}/claim", ids[0]),
            json!({"moderator": "mod:ana"}),
        )
        .await;
    assert_eq!(status, 200, "{item}");
    assert_eq!(item["claimed_by"], "mod:ana");
    let (status, refused) = app
        .post_json(
            &format!("/v1/review/{}/claim", ids[0]),
            json!({"moderator": "mod:ben"}),
        )
        .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "claimed");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("mod:ana")
    );
    assert_eq!(waiting(&app, "?claimed=false").await, vec![ids[1]]);
    assert_eq!(waiting(&app, "?claimed_by=mod:ana").await, vec![ids[0]]);

    // Only the claim's holder decides, and only on the version they saw.
    let version = item["moderation_version"].as_i64().unwrap();
    let decision = |moderator: &str, version: i64| json!({"moderator": moderator, "decision": "approve", "reason": "satire", "moderation_version": version});
    let (status, body) = decide(&app, ids[0], decision("mod:ben", version)).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("not_claimed")),
        "{body}"
    );
    let (status, body) = decide(&app, ids[0], decision("mod:ana", version - 1)).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("version_conflict")),
        "{body}"
    );
    assert_eq!(app.status_of("post:q1").await, Status::Flagged);

    let (status, outcome) = decide(&app, ids[0], decision("mod:ana", version)).await;
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["status"], "visible");
    assert_eq!(outcome["moderation_version"], version + 1);
    let action = outcome["action_id"].as_i64().unwrap();
    assert_eq!(app.status_of("post:q1").await, Status::Visible);
    let (_, entity) = app.get("/v1/entities/post:q1").await;
    assert_eq!(entity["override"]["status"], "visible", "{entity}");
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM outbox WHERE topic = 'action.applied' AND idempotency_key = $1",
            format!("review:{}", ids[0])
        ),
        1
    );
    assert_eq!(waiting(&app, "").await, vec![ids[1]]);
    let (status, again) = decide(&app, ids[0], decision("mod:ana", version + 1)).await;
    assert_eq!(
        (status, again["error"]["code"].clone()),
        (409, json!("already_decided")),
        "{again}"
    );

    // The decision is an action like any other: reversing it puts the flag back.
    let (status, reversal) = app
        .post_json(
            &format!("/v1/actions/{action}/reverse"),
            json!({"moderator": "mod:cy", "reason": "approved too soon"}),
        )
        .await;
    assert_eq!(status, 200, "{reversal}");
    assert_eq!(app.status_of("post:q1").await, Status::Flagged);
    assert_eq!(
        waiting(&app, "").await,
        ids,
        "the item waits again, undecided"
    );
    // Automation's reversal figures leave moderators' own decisions out.
    let (_, rate) = app.get("/v1/stats/reversal-rate").await;
    assert_eq!(rate["actions"], 2, "{rate}");
    assert_eq!(rate["reversed"], 0, "{rate}");
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn an_expired_claim_is_picked_up_by_another_moderator() {
    let app =
        spawn_app(app_options().with(|s| s.moderation.review_claim = Duration::from_millis(400)))
            .await;
    let ids = flagged(&app, &["post:x1"]).await;
    let claim = |who: &'static str| {
        let app = &app;
        let id = ids[0];
        async move {
            app.post_json(&format!("/v1/review/{id}/claim"), json!({"moderator": who}))
                .await
        }
    };
    assert_eq!(claim("mod:ana").await.0, 200);
    assert_eq!(claim("mod:ben").await.0, 409);
    wait_for(Duration::from_secs(10), "ana's claim to expire", || async {
        claim("mod:ben").await.0 == 200
    })
    .await;
    assert_eq!(waiting(&app, "?claimed_by=mod:ben").await, ids);
    assert_eq!(
        waiting(&app, "?claimed_by=mod:ana").await,
        Vec::<i64>::new()
    );
    // Ana's claim is gone: her decision is refused, Ben's goes through.
    let version = app.moderation_version_of("post:x1").await;
    let body = |who: &str| json!({"moderator": who, "decision": "hide", "reason": "abuse", "moderation_version": version});
    let (status, refused) = decide(&app, ids[0], body("mod:ana")).await;
    assert_eq!(
        (status, refused["error"]["code"].clone()),
        (409, json!("not_claimed")),
        "{refused}"
    );
    let (status, outcome) = decide(&app, ids[0], body("mod:ben")).await;
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(app.status_of("post:x1").await, Status::Hidden);
    let (_, entity) = app.get("/v1/entities/post:x1").await;
    assert_eq!(entity["override"]["status"], "hidden", "{entity}");
}

/// A POST with a bearer token; the status and the JSON reply.
async fn post_as(app: &TestApp, token: &str, path: &str, body: Value) -> (u16, Value) {
    let response = app
        .client
        .post(format!("{}{path}", app.base))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn dismiss_frees_automation_and_escalate_leaves_the_item_to_an_admin() {
    let app = spawn_app(app_options().with(|s| {
        s.security.api_tokens = crate::helpers::api_tokens(vec![
            ApiToken::spec_for(Role::Ingest, crate::secrets::TOKEN_INGEST),
            ApiToken::spec_for(Role::Moderator, crate::secrets::TOKEN_MODERATOR),
            ApiToken::spec_for(Role::Admin, crate::secrets::TOKEN_ADMIN),
        ]);
    }))
    .await;
    let ids = flagged_as(
        &app,
        &["post:d1", "post:e1"],
        Some(crate::secrets::TOKEN_INGEST),
    )
    .await;
    let moderator = crate::secrets::TOKEN_MODERATOR;
    for id in &ids {
        let (status, body) = post_as(
            &app,
            moderator,
            &format!("/v1/review/{id}/claim"),
            json!({"moderator": "mod:ana"}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let version = |entity: &'static str| {
        let app = &app;
        async move { app.moderation_version_of(entity).await }
    };
    let decide_as = |token: &'static str, id: i64, body: Value| {
        let app = &app;
        async move { post_as(app, token, &format!("/v1/review/{id}/decide"), body).await }
    };
    let (status, dismissed) = decide_as(
        moderator,
        ids[0],
        json!({"moderator": "mod:ana", "decision": "dismiss", "reason": "a pile-on", "moderation_version": version("post:d1").await}),
    )
    .await;
    assert_eq!(status, 200, "{dismissed}");
    assert_eq!(app.status_of("post:d1").await, Status::Visible);
    let override_status: Option<String> =
        sqlx::query_scalar!("SELECT override_status FROM entities WHERE entity = 'post:d1'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(override_status, None, "dismiss sets no override");

    let before = version("post:e1").await;
    let (status, escalated) = decide_as(
        moderator,
        ids[1],
        json!({"moderator": "mod:ana", "decision": "escalate", "reason": "legal question", "moderation_version": before}),
    )
    .await;
    assert_eq!(status, 200, "{escalated}");
    assert!(escalated["action_id"].is_null());
    assert_eq!(app.status_of("post:e1").await, Status::Flagged);
    assert_eq!(
        version("post:e1").await,
        before,
        "escalating changes nothing of the entity"
    );
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM outbox WHERE topic = 'review.escalated'"
        ),
        1
    );
    // A moderator cannot take it back; an admin claims and decides it.
    let claim_path = format!("/v1/review/{}/claim", ids[1]);
    let (status, refused) = post_as(
        &app,
        moderator,
        &claim_path,
        json!({"moderator": "mod:ben"}),
    )
    .await;
    assert_eq!(
        (status, refused["error"]["code"].clone()),
        (409, json!("escalated")),
        "{refused}"
    );
    let admin = crate::secrets::TOKEN_ADMIN;
    let (status, claimed) =
        post_as(&app, admin, &claim_path, json!({"moderator": "admin:kim"})).await;
    assert_eq!(status, 200, "{claimed}");
    assert!(claimed["escalated_at"].is_string(), "{claimed}");
    let (status, hidden) = decide_as(
        admin,
        ids[1],
        json!({"moderator": "admin:kim", "decision": "hide", "reason": "unlawful", "moderation_version": before}),
    )
    .await;
    assert_eq!(status, 200, "{hidden}");
    assert_eq!(app.status_of("post:e1").await, Status::Hidden);
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn a_bad_decision_or_filter_is_refused_with_its_field_and_writes_nothing() {
    let app = spawn_app(app_options()).await;
    let ids = flagged(&app, &["post:b1"]).await;
    app.post_json(
        &format!("/v1/review/{}/claim", ids[0]),
        json!({"moderator": "mod:ana"}),
    )
    .await;
    let actions = app.count_actions().await;
    for (body, field) in [
        (
            json!({"moderator": "mod:ana", "decision": "maybe", "reason": "r", "moderation_version": 1}),
            "decision",
        ),
        (
            json!({"moderator": "mod:ana", "decision": "hide", "reason": "r"}),
            "moderation_version",
        ),
        (
            json!({"moderator": "mod:ana", "decision": "hide", "reason": " ", "moderation_version": 1}),
            "reason",
        ),
        (
            json!({"moderator": "mod:ana", "decision": "hide", "reason": "r", "moderation_version": -1}),
            "moderation_version",
        ),
        (
            json!({"moderator": "mod:ana", "decision": "hide", "reason": "r", "moderation_version": 1, "extra": 1}),
            "extra",
        ),
    ] {
        let (status, reply) = decide(&app, ids[0], body).await;
        assert_eq!(status, 422, "{reply}");
        assert_eq!(reply["error"]["field"], field, "{reply}");
    }
    for (query, field) in [
        ("?claimed=maybe", "claimed"),
        ("?older_than=soon", "older_than"),
        ("?kind=hide", "kind"),
        ("?cursor=x", "cursor"),
        ("?color=red", "color"),
    ] {
        let (status, reply) = app.get(&format!("/v1/review{query}")).await;
        assert_eq!(status, 400, "{query}: {reply}");
        assert_eq!(reply["error"]["field"], field, "{reply}");
    }
    let (status, reply) = app
        .post_json("/v1/review/abc/claim", json!({"moderator": "mod:ana"}))
        .await;
    assert_eq!(
        (status, reply["error"]["field"].clone()),
        (400, json!("id")),
        "{reply}"
    );
    let (status, _) = app
        .post_json("/v1/review/999999/claim", json!({"moderator": "mod:ana"}))
        .await;
    assert_eq!(status, 404);
    assert_eq!(app.count_actions().await, actions);
    assert_eq!(app.status_of("post:b1").await, Status::Flagged);
    app.assert_statements_complete().await;
}
