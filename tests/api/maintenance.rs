//! Retention of event ids, and the Redis configuration check at startup.

use std::time::Duration;

use quiesce::{queue::RedisDurability, store::Partitioned};
use serde_json::json;

use crate::helpers::scalar;
use crate::{
    helpers::{TestOptions, event, spawn_app},
    private_redis::PrivateRedis,
};

fn days(n: u64) -> Duration {
    Duration::from_secs(n * 24 * 3600)
}

fn hours(n: u64) -> Duration {
    Duration::from_secs(n * 3600)
}

#[tokio::test]
async fn events_past_retention_are_deleted_and_totals_stay() {
    let app = spawn_app(TestOptions::idle()).await;
    let events: Vec<_> = (0..5)
        .map(|i| event(&format!("e{i}"), "post:old", "flag"))
        .collect();
    app.send(&json!(events)).await;
    // Three of them were received eight days ago (the default retention is seven), into the
    // partition of that time.
    app.age_events(&["e0", "e1", "e2"], days(8)).await;

    assert_eq!(app.maintenance().purge_once().await.unwrap(), 3);
    assert_eq!(app.count_events().await, 2);
    assert_eq!(
        scalar!(
            app,
            "SELECT count FROM signal_counts WHERE entity = 'post:old'"
        ),
        5,
        "aggregates are unchanged"
    );
    assert_eq!(app.event_count_of("post:old").await, 5);
    assert_eq!(app.maintenance().purge_once().await.unwrap(), 0);

    // Old evaluation records and delivered outbox rows go with them; undelivered rows stay.
    app.add_past_partition(Partitioned::Evaluations, days(10), days(9) - hours(1))
        .await;
    sqlx::query!(
        "INSERT INTO evaluations (entity, worker, started_at, finished_at, moderation_version,
                                  event_count, decisions)
         VALUES ('post:old', 'w', now() - interval '9 days', now() - interval '9 days', 0, 1, '{}'),
                ('post:old', 'w', now(), now(), 0, 5, '{}')",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    sqlx::query!(
        "INSERT INTO outbox (topic, idempotency_key, payload, delivered_at)
         VALUES ('t', 'old-delivered', '{}', now() - interval '9 days'),
                ('t', 'old-pending', '{}', NULL)",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    app.maintenance().purge_once().await.unwrap();
    assert_eq!(app.count_evaluations().await, 1);
    let left: Vec<String> = sqlx::query_scalar!("SELECT idempotency_key FROM outbox")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(left, vec!["old-pending".to_owned()]);

    // Within the window an id is still a duplicate; past it, the id is forgotten.
    assert_eq!(app.send(&event("e3", "post:old", "flag")).await, (0, 1));
    assert_eq!(app.send(&event("e0", "post:old", "flag")).await, (1, 0));
}

#[tokio::test]
async fn the_redis_durability_check_reads_the_server_settings() {
    // A Redis of this test's own, whose settings it may change: the check must report what
    // the server is set to, whichever way it is set.
    let redis = PrivateRedis::start().await;
    let app = spawn_app(TestOptions::idle().with(|s| s.redis.redis_url = redis.url().into())).await;
    for (appendonly, policy, warned) in [
        ("no", "allkeys-lru", vec!["allkeys-lru", "AOF"]),
        ("yes", "noeviction", vec![]),
    ] {
        redis.config_set("appendonly", appendonly).await;
        redis.config_set("maxmemory-policy", policy).await;
        let durability = app
            .backends
            .queue
            .durability()
            .await
            .unwrap()
            .expect("CONFIG allowed");
        // One node: one reply, named by no address.
        let [(node, durability)]: [(String, RedisDurability); 1] =
            durability.try_into().expect("one node");
        assert_eq!(node, "");
        assert_eq!(
            durability,
            RedisDurability {
                maxmemory_policy: policy.into(),
                appendonly: appendonly == "yes",
            }
        );
        let warnings = durability.warnings();
        assert_eq!(warnings.len(), warned.len(), "{warnings:?}");
        for (warning, names) in warnings.iter().zip(warned) {
            assert!(warning.contains(names), "{warning}");
        }
    }
}
