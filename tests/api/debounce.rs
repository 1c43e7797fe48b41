//! Debounce: a burst costs one evaluation, max wait bounds a steady stream, an event during an
//! evaluation causes exactly one more, and critical events skip the window.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{FutureExt, future::join_all};
use quiesce::domain::Status;
use rand::seq::SliceRandom;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::helpers::{TestOptions, event, scalar, spawn_app, wait_for};

/// 500 upvotes and 10 flags in random order, sent as concurrent requests.
fn sloan_burst(entity: &str) -> Vec<Value> {
    let mut events: Vec<Value> = (0..500)
        .map(|i| event(&format!("{entity}-up-{i}"), entity, "upvote"))
        .chain((0..10).map(|i| event(&format!("{entity}-flag-{i}"), entity, "flag")))
        .collect();
    events.shuffle(&mut rand::rng());
    events
}

#[tokio::test]
async fn sloan_a_post_buried_in_upvotes_with_ten_flags_is_evaluated_once_and_left_alone() {
    let app = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(1500);
        s.schedule.max_wait = Duration::from_secs(30);
    }))
    .await;

    let burst = sloan_burst("post:sloan");
    let bodies: Vec<Value> = burst.chunks(10).map(|chunk| json!(chunk)).collect();
    let replies = join_all(bodies.iter().map(|body| app.send(body))).await;
    assert_eq!(replies.iter().map(|r| r.0).sum::<u64>(), 510);

    let flags_only: Vec<Value> = (0..10)
        .map(|i| event(&format!("lone-flag-{i}"), "post:flagged", "flag"))
        .collect();
    let bodies: Vec<Value> = flags_only.chunks(2).map(|chunk| json!(chunk)).collect();
    join_all(bodies.iter().map(|body| app.send(body))).await;

    app.wait_settled(Duration::from_secs(30)).await;

    assert_eq!(app.evaluation_count("post:sloan").await, 1);
    assert_eq!(app.status_of("post:sloan").await, Status::Visible);
    assert_eq!(app.action_count_of("post:sloan").await, 0);
    let snapshot_events: i64 = scalar!(
        app,
        "SELECT event_count FROM evaluations WHERE entity = 'post:sloan'"
    );
    assert_eq!(
        snapshot_events, 510,
        "the one evaluation saw the whole burst"
    );

    assert_eq!(app.evaluation_count("post:flagged").await, 1);
    assert_eq!(app.status_of("post:flagged").await, Status::Hidden);
    assert_eq!(app.action_count_of("post:flagged").await, 1);
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn a_burst_over_200_entities_costs_200_evaluations() {
    let app = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = Duration::from_secs(2);
        s.schedule.max_wait = Duration::from_secs(60);
        s.worker.workers = 8;
    }))
    .await;

    // 50 requests, each carrying one event for each of the 200 entities, all in flight at once.
    let requests: Vec<Value> = (0..50)
        .map(|round| {
            json!(
                (0..200)
                    .map(|e| event(
                        &format!("r{round}-e{e}"),
                        &format!("comment:{e}"),
                        if round % 7 == 0 { "flag" } else { "upvote" }
                    ))
                    .collect::<Vec<_>>()
            )
        })
        .collect();
    let replies = join_all(requests.iter().map(|body| app.send(body))).await;
    assert_eq!(replies.iter().map(|r| r.0).sum::<u64>(), 10_000);

    app.wait_settled(Duration::from_secs(60)).await;
    assert_eq!(app.count_evaluations().await, 200);
    assert_eq!(app.count_evaluated_entities().await, 200);
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM entity_counts WHERE event_count = 50"
        ),
        200
    );
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM evaluations WHERE event_count <> 50"
        ),
        0
    );
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn a_steady_stream_is_evaluated_at_least_every_max_wait() {
    let window = Duration::from_millis(300);
    let max_wait = Duration::from_millis(900);
    let app = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = window;
        s.schedule.max_wait = max_wait;
    }))
    .await;

    let started = Instant::now();
    let stream_for = max_wait * 4;
    let mut sent = 0;
    let mut ticker = tokio::time::interval(window / 3);
    while started.elapsed() < stream_for {
        ticker.tick().await;
        app.send(&event(&format!("s{sent}"), "post:stream", "upvote"))
            .await;
        sent += 1;
    }
    let stream_end = chrono::Utc::now();

    // Without the max-wait cap the window never closes during the stream: no evaluation at all.
    let during: Vec<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar!("SELECT started_at FROM evaluations WHERE entity = 'post:stream' AND started_at <= $1 ORDER BY started_at", stream_end)
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert!(
        during.len() >= 3,
        "only {} evaluations during a {stream_for:?} stream",
        during.len()
    );

    // Consecutive evaluations are at most max wait apart, plus the gap until the next event
    // (window / 3) and scheduling slack.
    let bound =
        chrono::Duration::from_std(max_wait + window / 3 + Duration::from_millis(1000)).unwrap();
    for pair in during.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap <= bound, "evaluations {gap} apart, more than {bound}");
    }
    app.wait_settled(Duration::from_secs(20)).await;
    assert_eq!(app.event_count_of("post:stream").await, sent);
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn an_event_during_an_evaluation_causes_exactly_one_more() {
    let entered = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let calls = Arc::new(AtomicUsize::new(0));
    let hook = {
        let (entered, release, calls) = (
            Arc::clone(&entered),
            Arc::clone(&release),
            Arc::clone(&calls),
        );
        Arc::new(move |_snapshot| {
            let (entered, release, calls) = (
                Arc::clone(&entered),
                Arc::clone(&release),
                Arc::clone(&calls),
            );
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    entered.notify_one();
                    let _ = tokio::time::timeout(Duration::from_secs(10), release.notified()).await;
                }
            }
            .boxed()
        })
    };
    let app = spawn_app(TestOptions {
        before_apply: Some(hook),
        ..TestOptions::default().with(|s| s.schedule.debounce_window = Duration::from_millis(100))
    })
    .await;

    app.send(&event("first", "post:busy", "flag")).await;
    tokio::time::timeout(Duration::from_secs(10), entered.notified())
        .await
        .expect("first evaluation started");

    // Accepted while the first evaluation holds the entity.
    app.send(&event("second", "post:busy", "flag")).await;
    release.notify_one();

    app.wait_settled(Duration::from_secs(20)).await;
    let seen: Vec<i64> = sqlx::query_scalar!(
        "SELECT event_count FROM evaluations WHERE entity = 'post:busy' ORDER BY id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        seen,
        vec![1, 2],
        "one evaluation before the second event, exactly one after"
    );
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn a_critical_event_skips_the_window() {
    let app = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = Duration::from_secs(60);
        s.schedule.max_wait = Duration::from_secs(120);
    }))
    .await;
    app.send(&event("normal", "post:calm", "flag")).await;
    let mut critical = event("urgent", "post:urgent", "report.csam");
    critical["priority"] = json!("critical");
    app.send(&critical).await;

    wait_for(
        Duration::from_secs(10),
        "the critical entity's evaluation",
        || async { app.evaluation_count("post:urgent").await == 1 },
    )
    .await;
    assert_eq!(
        app.evaluation_count("post:calm").await,
        0,
        "a normal event still waits for its window"
    );
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn anchors_take_six_bytes_and_a_decimal_anchor_from_an_earlier_version_still_caps_max_wait() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_secs(2);
        s.schedule.max_wait = Duration::from_secs(3);
    }))
    .await;
    let queue = &app.backends.queue;
    let mut redis = queue.connection();
    let clock = queue.connection();
    let redis_now_ms = || {
        let mut redis = clock.clone();
        async move {
            let time: Vec<String> = redis::cmd("TIME").query_async(&mut redis).await.unwrap();
            time[0].parse::<i64>().unwrap() * 1000 + time[1].parse::<i64>().unwrap() / 1000
        }
    };

    // A new entity's anchor is its first event's time, stored in 6 bytes.
    let fresh = quiesce::domain::EntityId::parse("post:anchor-new").unwrap();
    let before = redis_now_ms().await;
    app.send(&json!(event("a1", fresh.as_str(), "upvote")))
        .await;
    let after = redis_now_ms().await;
    let anchor = app.max_wait_anchor(&fresh).await.expect("pending");
    assert!(
        (before..=after).contains(&anchor),
        "{before} <= {anchor} <= {after}"
    );
    let raw: Vec<u8> = redis::cmd("HGET")
        .arg(queue.keys().for_entity(&fresh).pending())
        .arg(fresh.as_str())
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(raw.len(), 6);

    // An entity left pending by an earlier version (decimal anchor), first event 5 s ago: the
    // next event finds max wait (3 s) past: due at anchor + 3 s (now), not in 1 s or 2 s.
    let legacy = quiesce::domain::EntityId::parse("post:anchor-legacy").unwrap();
    let keys = queue.keys().for_entity(&legacy);
    let old = redis_now_ms().await - 5_000;
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg(keys.due())
        .arg(old + 6_000) // due in a second, as an earlier event slid it
        .arg(legacy.as_str())
        .ignore()
        .cmd("HSET")
        .arg(keys.pending())
        .arg(legacy.as_str())
        .arg(old.to_string())
        .ignore()
        .query_async(&mut redis)
        .await
        .unwrap();
    app.send(&json!(event("l1", legacy.as_str(), "upvote")))
        .await;
    let due = queue.state_of(&legacy).await.unwrap().due_at_ms.unwrap();
    assert_eq!(due, old + 3_000, "capped at the decimal anchor + max wait");
    assert_eq!(app.max_wait_anchor(&legacy).await, Some(old));
    app.assert_statements_complete().await;
}
