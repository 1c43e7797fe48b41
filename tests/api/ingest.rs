//! Ingest: durable before 202, idempotent by event id, atomic per request.

use std::time::Duration;

use futures::future::join_all;
use serde_json::json;

use crate::helpers::{TestOptions, event, scalar, spawn_app};

#[tokio::test]
async fn an_event_id_sent_twice_is_counted_once() {
    let app = spawn_app(TestOptions::idle()).await;
    let body = event("evt-1", "post:1", "flag");

    assert_eq!(app.send(&body).await, (1, 0));
    assert_eq!(app.send(&body).await, (0, 1));

    // The same id, concurrently, from ten senders: exactly one of them records it.
    let twin = event("evt-2", "post:1", "flag");
    let replies = join_all((0..10).map(|_| app.send(&twin))).await;
    assert_eq!(replies.iter().map(|r| r.0).sum::<u64>(), 1, "{replies:?}");
    assert_eq!(replies.iter().map(|r| r.1).sum::<u64>(), 9, "{replies:?}");

    // An id repeated inside one batch counts once too.
    assert_eq!(
        app.send(&json!([
            event("evt-3", "post:1", "flag"),
            event("evt-3", "post:1", "flag")
        ]))
        .await,
        (1, 1)
    );

    assert_eq!(app.count_events().await, 3);
    assert_eq!(app.event_count_of("post:1").await, 3);
    assert_eq!(app.signal_count_of("post:1", "flag").await, 3);
}

#[tokio::test]
async fn a_duplicate_still_reschedules_its_entity() {
    // A sender retries after a Redis failure: the retry finds the id recorded but must repair
    // the schedule, or the entity would never be evaluated.
    let app = spawn_app(TestOptions::idle()).await;
    let body = event("evt-1", "post:7", "flag");
    app.send(&body).await;
    app.lose_schedule_of("post:7").await;

    assert_eq!(app.send(&body).await, (0, 1));
    assert!(app.due_at("post:7").await.is_some());
}

#[tokio::test]
async fn accepted_events_are_in_postgres_and_scheduled_when_202_returns() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_secs(30);
        s.schedule.max_wait = Duration::from_secs(60);
    }))
    .await;
    let events: Vec<_> = (0..300)
        .map(|i| event(&format!("e{i}"), &format!("comment:{}", i % 30), "upvote"))
        .collect();
    let (accepted, duplicates) = app.send(&json!(events)).await;
    assert_eq!((accepted, duplicates), (300, 0));
    assert_eq!(app.count_events().await, 300);
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM entity_counts WHERE event_count = 10"
        ),
        30
    );
    // Minute buckets for windowed rules count the same events.
    assert_eq!(
        scalar!(app, "SELECT sum(count)::bigint FROM bucket_counts"),
        300
    );
    let depths = app.backends.queue.depths().await.unwrap();
    assert_eq!(depths.iter().map(|d| d.due).sum::<u64>(), 30);
}

#[tokio::test]
async fn optional_fields_are_recorded() {
    let app = spawn_app(TestOptions::idle()).await;
    let body = json!({
        "id": "evt-full", "entity": "post:3", "type": "report.spam", "actor": "user:9",
        "weight": 2.5, "occurred_at": "2026-11-30T10:00:00+01:00", "priority": "normal"
    });
    app.send(&body).await;
    let (actor, weight, occurred): (String, f64, chrono::DateTime<chrono::Utc>) = sqlx::query!(
        r#"SELECT actor AS "actor!", weight, occurred_at AS "occurred_at!"
               FROM events WHERE id = 'evt-full'"#
    )
    .fetch_one(&app.pool)
    .await
    .map(|row| (row.actor, row.weight, row.occurred_at))
    .unwrap();
    assert_eq!(actor, "user:9");
    assert_eq!(weight, 2.5);
    assert_eq!(occurred.to_rfc3339(), "2026-11-30T09:00:00+00:00");
    let weight_sum: f64 = scalar!(
        app,
        "SELECT weight_sum FROM signal_counts WHERE entity = 'post:3'"
    );
    assert_eq!(weight_sum, 2.5);
}

#[tokio::test]
async fn concurrent_requests_sharing_ids_in_opposite_orders_are_all_accepted() {
    // Senders retrying overlapping batches: the group commits must not deadlock each other.
    let app = spawn_app(TestOptions::idle()).await;
    let forward: Vec<_> = (0..1000)
        .map(|i| {
            event(
                &format!("shared-{i:03}"),
                &format!("post:{}", i % 20),
                "flag",
            )
        })
        .collect();
    let backward: Vec<_> = forward.iter().rev().cloned().collect();
    let bodies: Vec<_> = (0..24)
        .map(|n| {
            if n % 2 == 0 {
                json!(forward)
            } else {
                json!(backward)
            }
        })
        .collect();
    let replies = futures::future::join_all(bodies.iter().map(|body| app.post_events(body))).await;
    for reply in replies {
        assert_eq!(reply.status(), 202);
    }
    assert_eq!(app.count_events().await, 1000);
    assert_eq!(
        scalar!(app, "SELECT sum(event_count)::bigint FROM entity_counts"),
        1000
    );
}

#[tokio::test]
async fn a_retry_of_an_event_already_evaluated_schedules_nothing() {
    // A retry storm: senders re-send events the service has recorded and evaluated. Each
    // re-schedule would cost an evaluation that finds nothing new.
    let app = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = Duration::from_secs(2);
        s.schedule.max_wait = Duration::from_secs(10);
    }))
    .await;
    let first = event("r-1", "post:retried", "flag");
    assert_eq!(app.send(&first).await, (1, 0));
    app.wait_settled(Duration::from_secs(20)).await;
    assert_eq!(app.evaluation_count("post:retried").await, 1);

    assert_eq!(app.send(&first).await, (0, 1));
    assert_eq!(
        app.due_at("post:retried").await,
        None,
        "nothing owed: not scheduled again"
    );

    // Owed again (a new event whose schedule Redis lost): the retry of an old event of the
    // same entity schedules it, as any retry repairs a lost schedule.
    assert_eq!(
        app.send(&event("r-2", "post:retried", "flag")).await,
        (1, 0)
    );
    app.lose_schedule_of("post:retried").await;
    assert_eq!(app.send(&first).await, (0, 1));
    assert!(
        app.due_at("post:retried").await.is_some(),
        "owed: scheduled again"
    );
    app.wait_settled(Duration::from_secs(20)).await;
    assert_eq!(app.evaluation_count("post:retried").await, 2);
}

#[tokio::test]
async fn an_id_reused_for_another_entity_is_a_duplicate_and_schedules_only_the_recorded_entity() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_secs(30);
        s.schedule.max_wait = Duration::from_secs(60);
    }))
    .await;
    app.send(&event("same-id", "post:first", "flag")).await;
    assert_eq!(
        app.send(&event("same-id", "post:other", "flag")).await,
        (0, 1)
    );
    let other = quiesce::domain::EntityId::parse("post:other").unwrap();
    let first = quiesce::domain::EntityId::parse("post:first").unwrap();
    assert_eq!(
        app.backends.queue.state_of(&other).await.unwrap().due_at_ms,
        None
    );
    assert!(
        app.backends
            .queue
            .state_of(&first)
            .await
            .unwrap()
            .due_at_ms
            .is_some()
    );
    assert_eq!(app.count_entities().await, 1);
}

#[tokio::test]
async fn ingest_does_not_wait_for_an_open_transaction_that_updated_the_entity() {
    // A worker's evaluation (or the sweep's mark) updates an entity's row in a transaction of
    // its own; a sender's events for the entity must not queue behind it.
    let app = spawn_app(TestOptions::idle()).await;
    app.send(&json!([event("first", "post:busy", "flag")]))
        .await;
    let mut updater = app.pool.begin().await.unwrap();
    sqlx::query!("UPDATE entities SET pending_since = NULL WHERE entity = 'post:busy'")
        .execute(&mut *updater)
        .await
        .unwrap();

    let sent = tokio::time::timeout(
        Duration::from_secs(10),
        app.post_events(&json!([event("second", "post:busy", "upvote")])),
    )
    .await;
    updater.rollback().await.unwrap();
    let response = sent.expect("the request is answered while the other transaction is open");
    assert_eq!(response.status(), 202);
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM events WHERE entity = 'post:busy'"
        ),
        2
    );
}
