//! Retention by time partitions: whole partitions leave once past the retention while newer
//! events and every total stay; the dedup of an id holds across partition boundaries, also for
//! concurrent transactions that straddle one; a write that finds no partition makes it.

use std::time::Duration;

use futures::future::join_all;
use quiesce::{
    domain::Event,
    store::{Partitioned, Store},
};
use serde_json::json;
use sqlx::{Connection, PgConnection};

use crate::helpers::{TestApp, TestOptions, domain_event, event, scalar, spawn_app, wait_for};

const DAY: Duration = Duration::from_secs(24 * 3600);
const HOUR: Duration = Duration::from_secs(3600);

/// Events partitions of 2 s (a retention of a minute cut in 30), made 12 s ahead: boundaries
/// come by often, and partitions run out unless a write makes them.
fn short_partitions() -> TestOptions {
    TestOptions::idle().with(|s| {
        s.maintenance.retention = Duration::from_secs(60);
        s.maintenance.retention_partitions = 30;
        s.maintenance.retention_interval = Duration::from_secs(5);
    })
}

/// The partition that holds this event.
async fn partition_of(app: &TestApp, id: &str) -> String {
    scalar!(
        app,
        "SELECT tableoid::regclass::text FROM events WHERE id = $1",
        id
    )
}

/// Waits until Postgres' clock is past the end of this events partition.
async fn wait_until_over(app: &TestApp, partition: &str) {
    wait_for(
        Duration::from_secs(10),
        "the partition's time is over",
        || async {
            scalar!(
                app,
                "SELECT upper_bound <= now() FROM partitions WHERE name = $1",
                partition
            )
        },
    )
    .await;
}

/// The events partition of Postgres' now, at least `margin` before its end (waits for the
/// next one otherwise).
async fn current_partition(app: &TestApp, margin: Duration) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        // A write makes the partition of now if it is missing.
        app.backends
            .store
            .partitions()
            .extend_partitions()
            .await
            .unwrap();
        let found: Option<String> = sqlx::query_scalar!(
            "SELECT name FROM partitions
             WHERE parent = 'events' AND lower_bound <= now()
               AND upper_bound > now() + make_interval(secs => $1)",
            margin.as_secs_f64()
        )
        .fetch_optional(&app.pool)
        .await
        .unwrap();
        if let Some(name) = found {
            return name;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no partition with {margin:?} left"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_old_partition_is_dropped_whole_while_newer_events_and_totals_stay() {
    let app = spawn_app(TestOptions::idle()).await;
    let events: Vec<_> = (0..6)
        .map(|i| event(&format!("r{i}"), "post:kept", "flag"))
        .collect();
    assert_eq!(app.send(&json!(events)).await, (6, 0));
    app.age_events(&["r0", "r1", "r2", "r3"], 8 * DAY).await;
    let old = partition_of(&app, "r0").await;
    // Minute buckets are kept as long (and at least 25 h): a partition of them from eight
    // days ago goes, today's stay.
    let buckets = app
        .add_past_partition(Partitioned::SignalBuckets, 8 * DAY + HOUR, 8 * DAY - HOUR)
        .await;
    sqlx::query!(
        "INSERT INTO signal_buckets (entity, signal, bucket_start, count, weight_sum)
         VALUES ('post:kept', 'flag', date_trunc('minute', now() - interval '8 days'), 4, 4)",
    )
    .execute(&app.pool)
    .await
    .unwrap();

    assert_eq!(app.maintenance().purge_once().await.unwrap(), 4);
    for gone in [&old, &buckets] {
        let left = scalar!(
            app,
            "SELECT count(*) FROM pg_class WHERE relname = $1",
            gone
        );
        assert_eq!(left, 0, "{gone} is dropped");
        let listed = scalar!(app, "SELECT count(*) FROM partitions WHERE name = $1", gone);
        assert_eq!(listed, 0, "{gone} is forgotten");
    }
    let left: Vec<String> = sqlx::query_scalar!("SELECT id FROM events ORDER BY id")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(left, ["r4", "r5"]);
    assert_eq!(scalar!(app, "SELECT count(*) FROM signal_buckets"), 1);
    assert_eq!(app.event_count_of("post:kept").await, 6);
    assert_eq!(
        scalar!(
            app,
            "SELECT count FROM signal_counts WHERE entity = 'post:kept'"
        ),
        6
    );
    // The dropped ids are forgotten, the kept ones remembered.
    assert_eq!(
        app.send(&json!([
            event("r0", "post:kept", "flag"),
            event("r5", "post:kept", "flag")
        ]))
        .await,
        (1, 1)
    );
    assert_eq!(app.maintenance().purge_once().await.unwrap(), 0);
}

#[tokio::test]
async fn a_resent_id_is_a_duplicate_across_a_partition_boundary() {
    let app = spawn_app(short_partitions()).await;
    current_partition(&app, Duration::from_millis(500)).await;
    assert_eq!(app.send(&event("b1", "post:first", "flag")).await, (1, 0));
    let first = partition_of(&app, "b1").await;
    wait_until_over(&app, &first).await;

    // Sent again, under another entity, from a newer partition: a duplicate, and nothing is
    // written for the other entity.
    assert_eq!(app.send(&event("b1", "post:other", "flag")).await, (0, 1));
    assert_eq!(app.send(&event("b2", "post:first", "flag")).await, (1, 0));
    assert_ne!(
        partition_of(&app, "b2").await,
        first,
        "b2 is in a newer partition"
    );
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM entities WHERE entity = 'post:other'"
        ),
        0
    );
    assert_eq!(app.event_count_of("post:first").await, 2);
    // The insert after the boundary sealed the partition the first copy is in.
    let sealed = scalar!(
        app,
        "SELECT count(*) FROM partitions WHERE name = $1 AND sealed_at IS NOT NULL",
        first
    );
    assert_eq!(sealed, 1);
    let entities = app
        .backends
        .store
        .events()
        .duplicates_of(&["b1"])
        .await
        .unwrap();
    assert_eq!(entities["b1"].entity.as_str(), "post:first");
}

#[tokio::test]
async fn a_transaction_still_writing_the_old_partition_holds_up_the_new_ones_dedup() {
    let app = spawn_app(short_partitions()).await;
    let old = current_partition(&app, Duration::from_millis(800)).await;
    // A transaction received before the boundary writes id s1 and stays open past it.
    let mut writer = PgConnection::connect(&app.database_url()).await.unwrap();
    // Transaction control (BEGIN, COMMIT, ROLLBACK) here and below stays a string: no
    // schema to check it against.
    sqlx::query("BEGIN").execute(&mut writer).await.unwrap();
    sqlx::query!(
        "INSERT INTO events (id, entity, signal, weight, priority)
         VALUES ('s1', 'post:s', 'flag', 1, 'normal')",
    )
    .execute(&mut writer)
    .await
    .unwrap();
    wait_until_over(&app, &old).await;

    // After the boundary, the same id from another transaction: its check of the old
    // partition cannot see the open one's row, so it must wait for the seal, which waits for
    // the open transaction.
    let store = app.backends.store.clone();
    let twin = tokio::spawn(async move {
        let event = domain_event("s1", "post:s");
        store.events().record_events(&[&event]).await
    });
    // The seal waits for the open transaction's lock on the old partition.
    wait_for(
        Duration::from_secs(10),
        "the seal waits for the writer",
        || async {
            scalar!(
                app,
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = to_regclass($1)",
                &old
            ) > 0
        },
    )
    .await;
    assert!(
        !twin.is_finished(),
        "the new transaction waits for the seal"
    );
    sqlx::query("COMMIT").execute(&mut writer).await.unwrap();
    let inserted = tokio::time::timeout(Duration::from_secs(10), twin)
        .await
        .expect("the seal ends once the writer commits")
        .unwrap()
        .unwrap();
    assert!(inserted.is_empty(), "s1 is a duplicate: {inserted:?}");
    assert_eq!(
        scalar!(app, "SELECT count(*) FROM events WHERE id = 's1'"),
        1
    );
}

#[tokio::test]
async fn a_transaction_received_before_the_seal_cannot_write_after_it() {
    let app = spawn_app(short_partitions()).await;
    let old = current_partition(&app, Duration::from_millis(800)).await;
    // Received (its now()) before the boundary, but writing only after the seal.
    let mut late = PgConnection::connect(&app.database_url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut late).await.unwrap();
    sqlx::query!("SELECT now()")
        .fetch_one(&mut late)
        .await
        .unwrap();
    wait_until_over(&app, &old).await;
    assert_eq!(app.send(&event("t1", "post:t", "flag")).await, (1, 0));
    let sealed = scalar!(
        app,
        "SELECT count(*) FROM partitions WHERE name = $1 AND sealed_at IS NOT NULL",
        &old
    );
    assert_eq!(sealed, 1, "the send sealed {old}");

    let refused = sqlx::query!(
        "INSERT INTO events (id, entity, signal, weight, priority)
         VALUES ('t1', 'post:t', 'flag', 1, 'normal')",
    )
    .execute(&mut late)
    .await
    .expect_err("a sealed partition takes no rows");
    let code = refused
        .as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned());
    assert_eq!(code.as_deref(), Some("40001"), "{refused}");
    sqlx::query("ROLLBACK").execute(&mut late).await.unwrap();
    assert_eq!(
        scalar!(app, "SELECT count(*) FROM events WHERE id = 't1'"),
        1
    );
}

#[tokio::test]
async fn concurrent_writers_of_one_id_record_it_once_across_boundaries() {
    let app = spawn_app(short_partitions()).await;
    let store: Store = app.backends.store.clone();
    // Eight transactions at a time carry the same id, round after round for three
    // partitions' time; each round also carries the previous round's id again.
    let started = std::time::Instant::now();
    let mut rounds = 0;
    let mut accepted = 0;
    while started.elapsed() < Duration::from_secs(7) {
        let id = format!("c{rounds}");
        let previous = format!("c{}", rounds.max(1) - 1);
        let tasks = (0..8).map(|_| {
            let store = store.clone();
            let (id, previous) = (id.clone(), previous.clone());
            async move {
                let (event, again) = (
                    domain_event(&id, "post:c"),
                    domain_event(&previous, "post:c"),
                );
                let events: Vec<&Event> = if id == previous {
                    vec![&event]
                } else {
                    vec![&event, &again]
                };
                store.events().record_events(&events).await.unwrap().len()
            }
        });
        accepted += join_all(tasks).await.into_iter().sum::<usize>();
        rounds += 1;
    }
    let partitions = scalar!(app, "SELECT count(DISTINCT tableoid) FROM events");
    assert!(partitions >= 3, "the rounds span {partitions} partitions");
    assert_eq!(accepted, rounds, "each id once");
    assert_eq!(app.count_events().await, rounds as i64);
    assert_eq!(
        scalar!(app, "SELECT count(DISTINCT id) FROM events"),
        rounds as i64
    );
    assert_eq!(app.event_count_of("post:c").await, rounds as i64);
}

#[tokio::test]
async fn a_write_that_finds_no_partition_makes_it() {
    let app = spawn_app(TestOptions::idle()).await;
    // Every events partition of now and later goes (as if the service had been stopped
    // longer than it made partitions ahead for).
    let ahead: Vec<String> = sqlx::query_scalar!(
        "SELECT name FROM partitions WHERE parent = 'events' AND upper_bound > now()",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(!ahead.is_empty());
    for name in &ahead {
        // DDL on a partition named at run time: a string.
        sqlx::query(&format!("ALTER TABLE events DETACH PARTITION {name}"))
            .execute(&app.pool)
            .await
            .unwrap();
        sqlx::query!("SELECT partition_forget($1)", name)
            .execute(&app.pool)
            .await
            .unwrap();
    }
    assert_eq!(app.send(&event("n1", "post:n", "flag")).await, (1, 0));
    assert_eq!(app.send(&event("n1", "post:n", "flag")).await, (0, 1));
    let made = scalar!(
        app,
        "SELECT count(*) FROM partitions WHERE parent = 'events' AND upper_bound > now()"
    );
    assert!(made > 0, "the partition of now was made");
}

#[tokio::test]
async fn a_detach_cut_short_is_finished_by_the_next_pass() {
    let app = spawn_app(TestOptions::idle()).await;
    app.send(&event("d1", "post:d", "flag")).await;
    app.age_events(&["d1"], 8 * DAY).await;
    let old = partition_of(&app, "d1").await;
    app.backends
        .store
        .partitions()
        .seal_due_partitions()
        .await
        .unwrap();
    // An open snapshot makes the concurrent detach wait; a lock timeout cuts it short, which
    // leaves the partition half detached.
    let mut reader = PgConnection::connect(&app.database_url()).await.unwrap();
    // Transaction and session control, and DDL on a partition named at run time: strings.
    sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut reader)
        .await
        .unwrap();
    sqlx::query!("SELECT count(*) FROM events")
        .fetch_one(&mut reader)
        .await
        .unwrap();
    let mut detacher = PgConnection::connect(&app.database_url()).await.unwrap();
    sqlx::query("SET lock_timeout = '200ms'")
        .execute(&mut detacher)
        .await
        .unwrap();
    sqlx::query(&format!(
        "ALTER TABLE events DETACH PARTITION {old} CONCURRENTLY"
    ))
    .execute(&mut detacher)
    .await
    .expect_err("cut short by the lock timeout");
    sqlx::query("COMMIT").execute(&mut reader).await.unwrap();
    let state: String = scalar!(app, "SELECT partition_state($1)", &old);
    assert_eq!(state, "detaching");

    assert_eq!(app.maintenance().purge_once().await.unwrap(), 1);
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM pg_class WHERE relname = $1",
            &old
        ),
        0
    );
}

/// What the planner knows of a table: its row count as ANALYZE (or VACUUM) last counted it, or
/// -1 when neither has run on it.
async fn counted_rows(app: &TestApp, table: &str) -> f32 {
    sqlx::query_scalar!(
        "SELECT reltuples FROM pg_class WHERE oid = $1::text::regclass",
        table
    )
    .fetch_one(&app.pool)
    .await
    .unwrap()
}

async fn analyzed_at(app: &TestApp, partition: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    sqlx::query_scalar!(
        "SELECT analyzed_at FROM partitions WHERE name = $1",
        partition
    )
    .fetch_one(&app.pool)
    .await
    .unwrap()
}

/// A partition whose time is over is analyzed by the retention pass, once (an events partition
/// once sealed), so that the planner learns its final size and the plans cached while it was
/// small are made again, with or without autovacuum (this machine's Postgres runs without it).
/// The partition of now is left alone: analyzed while it fills, an empty partition would be
/// costed at zero pages and ingest's index probes lose to a scan.
#[tokio::test]
async fn a_partition_whose_time_is_over_is_analyzed_once_and_the_current_one_is_not() {
    let app = spawn_app(TestOptions::idle()).await;
    let events: Vec<_> = (0..5)
        .map(|i| event(&format!("z{i}"), "post:aged", "flag"))
        .collect();
    assert_eq!(app.send(&json!(events)).await, (5, 0));
    app.age_events(&["z0", "z1", "z2"], DAY).await;
    let old = partition_of(&app, "z0").await;
    let current = partition_of(&app, "z4").await;
    let old_evaluations = app
        .add_past_partition(Partitioned::Evaluations, 2 * DAY, DAY)
        .await;
    for never in [&old, &current, &old_evaluations] {
        assert_eq!(counted_rows(&app, never).await, -1.0, "{never}");
    }

    app.maintenance().purge_once().await.unwrap();
    assert_eq!(counted_rows(&app, &old).await, 3.0);
    assert_eq!(counted_rows(&app, &old_evaluations).await, 0.0);
    assert_eq!(counted_rows(&app, &current).await, -1.0, "the current one");
    let first = analyzed_at(&app, &old).await.expect("recorded");
    assert!(analyzed_at(&app, &current).await.is_none());
    assert!(
        scalar!(
            app,
            "SELECT sealed_at IS NOT NULL FROM partitions WHERE name = $1",
            old
        ),
        "sealed before it was analyzed"
    );

    // Once: the next pass leaves it.
    app.maintenance().purge_once().await.unwrap();
    assert_eq!(analyzed_at(&app, &old).await, Some(first));
}

/// A reversal writes the author's compensation as an event. When no partition takes it (the
/// partition of the action's time is over, none was made after it), the reversal's use case
/// has the partitions turned over and tries the whole reversal again: it is made once.
#[tokio::test]
async fn a_reversal_whose_compensation_finds_no_partition_is_made_once_after_a_turnover() {
    let app = spawn_app(short_partitions().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(20);
    }))
    .await;
    let partition = current_partition(&app, Duration::from_millis(1500)).await;
    let flags: Vec<_> = (0..10)
        .map(|i| json!({"id": format!("c{i}"), "entity": "post:c", "type": "flag", "author": "user:9"}))
        .collect();
    assert_eq!(app.send(&json!(flags)).await, (10, 0));
    let worker = app.worker();
    worker
        .evaluate_claim(crate::helpers::claim_next(&worker).await)
        .await;
    let hide = app.action_ids_of("post:c").await[0];

    // Nothing after this partition: the ones made ahead are dropped, then its time runs out.
    let ahead: Vec<String> = sqlx::query_scalar!(
        "SELECT name FROM partitions WHERE parent = 'events'
           AND lower_bound >= (SELECT upper_bound FROM partitions WHERE name = $1)",
        partition
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    for name in &ahead {
        // A table name the catalogue gave: no schema to check it against.
        sqlx::query(&format!("DROP TABLE \"{name}\""))
            .execute(&app.pool)
            .await
            .unwrap();
        sqlx::query!("DELETE FROM partitions WHERE name = $1", name)
            .execute(&app.pool)
            .await
            .unwrap();
    }
    wait_until_over(&app, &partition).await;

    let (status, body) = app
        .post_json(
            &format!("/v1/actions/{hide}/reverse"),
            json!({"moderator": "mod:ana", "reason": "not abuse"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "visible");
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM events WHERE entity = 'user:9' AND signal LIKE 'auto.%.reversed'"
        ),
        1,
        "the compensation is written once"
    );
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM actions WHERE entity = 'post:c' AND reversed_at IS NOT NULL"
        ),
        1
    );
    // The compensation went to a partition the turnover made for now.
    assert!(scalar!(
        app,
        "SELECT count(*) = 1 FROM partitions WHERE parent = 'events'
           AND lower_bound <= now() AND upper_bound > now() AND name <> $1",
        partition
    ));
}
