//! The migration to time partitions: rows written under the old schema are kept (in legacy
//! partitions), their ids stay duplicates, and retention drops them whole once past the window.

use std::time::Duration;

use crate::helpers::{TestOptions, event, scalar, spawn_app, wait_for};

/// Rows written under the schema before time partitioning.
const OLD_ROWS: &str = "
    INSERT INTO entities (entity, kind, event_count) VALUES ('post:old', 'post', 3),
                                                             ('post:recent', 'post', 2);
    INSERT INTO events (id, entity, signal, weight, priority, received_at) VALUES
        ('m1', 'post:old', 'flag', 1, 'normal', now() - interval '8 days'),
        ('m2', 'post:old', 'flag', 1, 'normal', now() - interval '8 days'),
        ('m3', 'post:old', 'flag', 1, 'normal', now() - interval '2 days'),
        ('m4', 'post:recent', 'flag', 1, 'normal', now() - interval '1 hour'),
        ('m5', 'post:recent', 'flag', 1, 'normal', now() - interval '1 minute');
    INSERT INTO signal_totals (entity, signal, count, weight_sum) VALUES
        ('post:old', 'flag', 3, 3), ('post:recent', 'flag', 2, 2);
    INSERT INTO signal_buckets (entity, signal, bucket_start, count, weight_sum) VALUES
        ('post:recent', 'flag', date_trunc('minute', now() - interval '1 hour'), 1, 1),
        ('post:recent', 'flag', date_trunc('minute', now()), 1, 1);
    INSERT INTO evaluations (entity, worker, started_at, finished_at, moderation_version,
                             event_count, decisions)
    VALUES ('post:old', 'w', now() - interval '2 days', now() - interval '2 days', 0, 3, '{}');
";

#[tokio::test]
async fn rows_written_before_partitioning_are_kept_deduplicated_and_retained() {
    let app = spawn_app(TestOptions {
        before_partitioning: Some(OLD_ROWS),
        ..TestOptions::idle()
    })
    .await;
    // Kept as they were, in the legacy partitions. The table is named in the statement: not
    // one the compile-time check can take, kept a string.
    let pool = &app.pool;
    let count = |sql: String| async move {
        sqlx::query_scalar::<_, i64>(&sql)
            .fetch_one(pool)
            .await
            .expect(&sql)
    };
    for (table, rows) in [("events", 5), ("signal_buckets", 2), ("evaluations", 1)] {
        assert_eq!(
            count(format!("SELECT count(*) FROM {table}")).await,
            rows,
            "{table}"
        );
        let legacy = count(format!(
            "SELECT count(*) FROM {table} WHERE tableoid = '{table}_legacy'::regclass"
        ))
        .await;
        assert_eq!(legacy, rows, "{table} rows are in {table}_legacy");
    }
    // Evaluation ids go on from the old table's.
    sqlx::query!(
        "INSERT INTO evaluations (entity, worker, started_at, moderation_version, event_count,
                                  decisions)
         VALUES ('post:old', 'w', now(), 0, 3, '{}')",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        scalar!(app, "SELECT count(DISTINCT id) FROM evaluations"),
        2
    );

    // Old ids are duplicates (under the entity they were recorded for), new ones are not.
    assert_eq!(app.send(&event("m4", "post:recent", "flag")).await, (0, 1));
    assert_eq!(
        app.send(&event("m1", "post:elsewhere", "flag")).await,
        (0, 1)
    );
    // The new id goes into a partition of the service's own width: the migration's first one
    // lasts only seconds, and the one-second retention below would drop it. The service's
    // first partition ends on its width's boundary, which may be minutes away (then the next
    // one, made ahead, takes the id).
    wait_for(
        Duration::from_secs(60),
        "the migration's partition is over",
        || async {
            scalar!(
                app,
                "SELECT count(*) FROM partitions WHERE parent = 'events'
             AND lower_bound <= now() AND upper_bound > now() + interval '30 seconds'"
            ) == 1
        },
    )
    .await;
    assert_eq!(app.send(&event("m6", "post:recent", "flag")).await, (1, 0));
    let entities = app
        .backends
        .store
        .events()
        .duplicates_of(&["m1", "m4"])
        .await
        .unwrap();
    assert_eq!(entities["m1"].entity.as_str(), "post:old");
    assert_eq!(entities["m4"].entity.as_str(), "post:recent");
    let totals = || async { scalar!(app, "SELECT sum(count)::int8 FROM signal_counts") };
    assert_eq!(totals().await, 6);
    assert_eq!(
        scalar!(app, "SELECT sum(event_count)::int8 FROM entity_counts"),
        6
    );

    // Retention drops the legacy partition whole once all of it is past the window: here a
    // window of a second, on a store of the test's own.
    let store = app
        .backends
        .store
        .clone()
        .with_partitions(quiesce::store::PartitionPlan::new(
            Duration::from_secs(1),
            1,
            Duration::from_secs(1),
        ));
    wait_for(
        Duration::from_secs(10),
        "the legacy partition is a second old",
        || async {
            scalar!(
                app,
                "SELECT count(*) FROM partitions
             WHERE name = 'events_legacy' AND upper_bound <= now() - interval '1 second'"
            ) == 1
        },
    )
    .await;
    let purged = store.retention().purge_expired(1000, 10).await.unwrap();
    assert_eq!(purged.dropped.events, 5);
    let dropped: Vec<&str> = purged
        .dropped
        .partitions
        .iter()
        .map(|(_, name)| name.as_str())
        .collect();
    assert!(dropped.contains(&"events_legacy"), "{dropped:?}");
    assert!(dropped.contains(&"evaluations_legacy"), "{dropped:?}");
    // Minute buckets are kept 25 h whatever the retention.
    assert!(!dropped.contains(&"signal_buckets_legacy"), "{dropped:?}");
    let left: Vec<String> = sqlx::query_scalar!("SELECT id FROM events ORDER BY id")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(left, ["m6"]);
    assert_eq!(totals().await, 6, "totals stay");
    // Past the window, an old id is forgotten.
    assert_eq!(app.send(&event("m4", "post:recent", "flag")).await, (1, 0));
}
