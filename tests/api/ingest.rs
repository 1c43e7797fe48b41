//! Ingest: durable before 202, idempotent by event id, atomic per request.

use std::time::Duration;

use futures::future::join_all;
use serde_json::json;

use crate::helpers::{TestApp, TestOptions, domain_event, event, scalar, spawn_app, wait_for};

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

/// The pages of Postgres' shared buffers a statement read (hit or not), by EXPLAIN's count.
async fn pages_read(connection: &mut sqlx::PgConnection, explained: &str) -> i64 {
    let plan: serde_json::Value = sqlx::query_scalar(&format!(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {explained}"
    ))
    .fetch_one(&mut *connection)
    .await
    .unwrap();
    let top = &plan[0]["Plan"];
    top["Shared Hit Blocks"].as_i64().unwrap() + top["Shared Read Blocks"].as_i64().unwrap()
}

/// A store on one connection that plans every statement generically from its first execution,
/// as Postgres comes to on its own after five: the plans its first groups make are the ones
/// its later groups use.
async fn generic_plans_store(app: &TestApp) -> (sqlx::PgPool, quiesce::store::Store) {
    let options: sqlx::postgres::PgConnectOptions = app.database_url().parse().unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.options([("plan_cache_mode", "force_generic_plan")]))
        .await
        .unwrap();
    (pool.clone(), quiesce::store::Store::new(pool))
}

/// Records `n` events of `name` in the partition of now, through the app's own connections.
async fn fill(app: &TestApp, name: &str, n: usize) {
    for chunk in 0..n / 500 {
        let events: Vec<_> = (0..500)
            .map(|i| domain_event(&format!("{name}-{chunk}-{i}"), &format!("post:f{}", i % 50)))
            .collect();
        let refs: Vec<_> = events.iter().collect();
        app.backends
            .store
            .events()
            .record_events(&refs)
            .await
            .unwrap();
    }
}

/// What ingest reads to find a group's duplicates does not grow with the partition it writes
/// to, whatever the partition held when a connection planned it (empty, as after a start or a
/// partition turnover, or well filled), and with no ANALYZE since (this machine's Postgres runs
/// without autovacuum). Before, a plan made while the partition held tens of thousands of rows
/// read it from end to end at every group, new events or not: an outside soak fell from 5,100
/// to 1,500 events/s in 180 s as the partition filled.
#[tokio::test]
async fn finding_a_groups_duplicates_reads_a_few_pages_however_full_the_partition() {
    let app = spawn_app(TestOptions::idle()).await;
    // The migrations' first partition ends when they ran: the test waits for the next one.
    wait_for(
        Duration::from_secs(15),
        "a partition of now that lasts another minute",
        || async {
            app.backends
                .store
                .partitions()
                .extend_partitions()
                .await
                .unwrap();
            scalar!(
                app,
                "SELECT EXISTS (SELECT 1 FROM partitions WHERE parent = 'events'
                                AND lower_bound <= now() AND upper_bound > now() + interval '60s')"
            )
        },
    )
    .await;
    // Connections that plan on the partition empty, small and filled: the plan that read it
    // whole was made on a partition of about a thousand rows.
    let mut planned = Vec::new();
    for (name, more) in [("empty", 0), ("small", 1_000), ("filled", 16_000)] {
        fill(&app, name, more).await;
        let (pool, store) = generic_plans_store(&app).await;
        for i in 0..3 {
            let early = domain_event(&format!("{name}-early-{i}"), "post:early");
            let recorded = store
                .events()
                .record_group(&[&early], &[], &[])
                .await
                .unwrap();
            assert_eq!(recorded.inserted.len(), 1);
        }
        planned.push((name, pool, store));
    }
    fill(&app, "more", 60_000).await;
    let app = &app;
    let partition_of = |id: &'static str| async move {
        scalar!(
            app,
            "SELECT tableoid::regclass::text FROM events WHERE id = $1",
            id
        )
    };
    let partition: String = partition_of("more-119-499").await;
    assert_eq!(
        partition_of("empty-early-0").await,
        partition,
        "one partition all along"
    );
    let pages: i64 = scalar!(
        app,
        "SELECT (pg_relation_size($1::text::regclass) / 8192)::bigint",
        partition
    );
    assert!(pages >= 900, "the partition holds {pages} pages");

    for (name, pool, store) in planned {
        // On the connection, with the plans it made: what ingest's probe reads, PL/pgSQL's own
        // catalog reads included.
        let mut connection = pool.acquire().await.unwrap();
        let read = pages_read(
            &mut connection,
            "SELECT * FROM recorded_events(ARRAY['absent-1', 'absent-2', 'absent-3'])",
        )
        .await;
        assert!(
            read <= 100,
            "planned on the {name} partition, the probe read {read} pages of {pages}"
        );
        drop(connection);
        // The connection's next group: its new event is recorded, its retry known with its
        // entity.
        let late = format!("{name}-late");
        let group = [
            domain_event(&late, "post:late"),
            domain_event("more-7-7", "post:other"),
        ];
        let recorded = store
            .events()
            .record_group(&[&group[0], &group[1]], &[], &[])
            .await
            .unwrap();
        assert_eq!(recorded.inserted.into_iter().collect::<Vec<_>>(), [late]);
        assert_eq!(recorded.known["more-7-7"].entity.as_str(), "post:f7");
    }
}

/// Rows read by sequential scans of `entities` so far, as the statistics have them once the
/// backends that read them reported (the events partitions' `n_tup_ins` reaching `inserted`
/// says they did: a backend reports all its counts at once).
async fn entities_scanned_once_reported(app: &TestApp, inserted: i64) -> i64 {
    wait_for(
        Duration::from_secs(15),
        "the statistics of the groups reported",
        || async {
            let reported: i64 = scalar!(
                app,
                "SELECT sum(n_tup_ins)::bigint FROM pg_stat_user_tables
                 WHERE relname LIKE 'events\\_p%'"
            );
            reported >= inserted
        },
    )
    .await;
    scalar!(
        app,
        "SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 'entities'"
    )
}

/// Which of a group's entities already have a row is read the same way however many entities
/// there are, on a connection whose plans were made while there were none or a few hundred.
/// Before, a plan made on a small table answered it with a sequential scan of every
/// entity for each group (2.8 ms a group at 10,000 entities): single-event ingest ran at 0.6
/// of an older build's rate beside the same work.
#[tokio::test]
async fn a_groups_new_entities_are_found_without_reading_every_entity() {
    // No background pass reads entities meanwhile: the statistics count every backend's.
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.maintenance.sweep_interval = Duration::from_secs(3600);
        s.maintenance.retention_interval = Duration::from_secs(3600);
    }))
    .await;
    let app = &app;
    let mut planned = Vec::new();
    let mut inserted = 0;
    for (name, more) in [("none", 0), ("few", 300)] {
        let events: Vec<_> = (0..more)
            .map(|i| domain_event(&format!("{name}-{i}"), &format!("post:{name}-{i}")))
            .collect();
        let refs: Vec<_> = events.iter().collect();
        for chunk in refs.chunks(500) {
            app.backends
                .store
                .events()
                .record_events(chunk)
                .await
                .unwrap();
        }
        inserted += more as i64;
        let (_, store) = generic_plans_store(app).await;
        for i in 0..3 {
            let event = domain_event(&format!("{name}-early-{i}"), &format!("post:{name}-e{i}"));
            store
                .events()
                .record_group(&[&event], &[], &[])
                .await
                .unwrap();
            inserted += 1;
        }
        planned.push((name, store));
    }
    // 20,000 entities more, through other connections.
    for chunk in 0..40 {
        let events: Vec<_> = (0..500)
            .map(|i| domain_event(&format!("wide-{chunk}-{i}"), &format!("post:w{chunk}-{i}")))
            .collect();
        let refs: Vec<_> = events.iter().collect();
        app.backends
            .store
            .events()
            .record_events(&refs)
            .await
            .unwrap();
        inserted += 500;
    }
    for (name, store) in planned {
        let before = entities_scanned_once_reported(app, inserted).await;
        // Groups of an entity seen before and one new each.
        for i in 0..5 {
            let group = [
                domain_event(&format!("{name}-seen-{i}"), "post:w7-7"),
                domain_event(&format!("{name}-new-{i}"), &format!("post:{name}-new-{i}")),
            ];
            let recorded = store
                .events()
                .record_group(&[&group[0], &group[1]], &[], &[])
                .await
                .unwrap();
            assert_eq!(recorded.inserted.len(), 2);
            inserted += 2;
        }
        let after = entities_scanned_once_reported(app, inserted).await;
        assert_eq!(
            after - before,
            0,
            "planned with {name} entities, 5 groups read {} entities by scans",
            after - before
        );
        // By key: a scan here would be counted in the next connection's figure.
        let new: Vec<String> = (0..5).map(|i| format!("post:{name}-new-{i}")).collect();
        let made: i64 = scalar!(
            app,
            "SELECT count(*) FROM entities WHERE entity = ANY($1)",
            &new
        );
        assert_eq!(made, 5);
    }
}
