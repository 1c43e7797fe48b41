//! The fold: ingest appends events, the evaluation folds them into the entity's figures. Every
//! figure a user reads stays exact through it: events committed while a fold runs, a crash
//! between a fold and the evaluation's completion, retention racing folds, an entity Redis lost
//! after it was evaluated once, and an upgrade from the schema where ingest counted.

use std::{sync::Arc, time::Duration};

use serde_json::json;

use crate::helpers::{
    TestApp, TestOptions, claim_next, event, pausing_hook, scalar, spawn_app, wait_for,
};

const DAY: Duration = Duration::from_secs(24 * 3600);

/// The entity as `GET /v1/entities/{id}` shows it: (event_count, the flag total).
async fn read_counts(app: &TestApp, entity: &str) -> (i64, i64) {
    let (status, body) = app.get(&format!("/v1/entities/{entity}")).await;
    assert_eq!(status, 200, "{body}");
    (
        body["event_count"].as_i64().unwrap(),
        body["signals"]["flag"]["count"].as_i64().unwrap_or(0),
    )
}

/// The folded part alone: (entities.event_count, signal_totals' flag count, its buckets' sum).
async fn folded(app: &TestApp, entity: &str) -> (i64, i64, i64) {
    (
        scalar!(
            app,
            "SELECT event_count FROM entities WHERE entity = $1",
            entity
        ),
        scalar!(
            app,
            "SELECT coalesce(sum(count), 0)::int8 FROM signal_totals
             WHERE entity = $1 AND signal = 'flag'",
            entity
        ),
        scalar!(
            app,
            "SELECT coalesce(sum(count), 0)::int8 FROM signal_buckets
             WHERE entity = $1 AND signal = 'flag'",
            entity
        ),
    )
}

fn flags(prefix: &str, entity: &str, n: usize) -> serde_json::Value {
    json!(
        (0..n)
            .map(|i| event(&format!("{prefix}{i}"), entity, "flag"))
            .collect::<Vec<_>>()
    )
}

#[tokio::test]
async fn ingest_appends_and_a_fold_moves_the_events_into_the_figures_once() {
    let app = spawn_app(TestOptions::idle()).await;
    assert_eq!(app.send(&flags("a", "post:f", 3)).await, (3, 0));
    // Ingest wrote the events and the entity's row, no counter.
    assert_eq!(folded(&app, "post:f").await, (0, 0, 0));
    assert_eq!(read_counts(&app, "post:f").await, (3, 3));
    let windows = |body: &serde_json::Value| {
        ["1m", "5m", "1h", "24h"].map(|w| body["signals"]["flag"]["windows"][w]["count"].as_i64())
    };
    let (_, unfolded) = app.get("/v1/entities/post:f").await;
    assert_eq!(windows(&unfolded), [Some(3); 4], "{unfolded}");

    // A transaction still open holds back what a fold may take: its event, and those of
    // every transaction after it, stay unfolded and are counted by reads all the same.
    let mut open = app.pool.begin().await.unwrap();
    sqlx::query!(
        "INSERT INTO events (id, entity, signal, weight, priority)
         VALUES ('late', 'post:f', 'flag', 1, 'normal')",
    )
    .execute(&mut *open)
    .await
    .unwrap();
    assert_eq!(app.send(&flags("b", "post:f", 2)).await, (2, 0));
    let store = &app.backends.store;
    // Transactions of other clients of the server hold the horizon back for a moment too.
    wait_for(
        Duration::from_secs(10),
        "the first three folded",
        || async {
            store.fold().entities(&["post:f"], 1).await.unwrap();
            folded(&app, "post:f").await == (3, 3, 3)
        },
    )
    .await;
    assert_eq!(read_counts(&app, "post:f").await, (5, 5));
    // Folding again takes nothing twice.
    store.fold().entities(&["post:f"], 1).await.unwrap();
    assert_eq!(folded(&app, "post:f").await, (3, 3, 3));

    open.commit().await.unwrap();
    assert_eq!(read_counts(&app, "post:f").await, (6, 6));
    wait_for(
        Duration::from_secs(10),
        "a fold to take the rest",
        || async {
            store.fold().entities(&["post:f"], 1).await.unwrap();
            folded(&app, "post:f").await == (6, 6, 6)
        },
    )
    .await;
    assert_eq!(read_counts(&app, "post:f").await, (6, 6));
    // The folded buckets give the windows the unfolded events gave.
    let (_, all_folded) = app.get("/v1/entities/post:f").await;
    assert_eq!(windows(&all_folded), [Some(6); 4], "{all_folded}");
    assert_eq!(app.count_unfolded_events().await, 0, "everything is folded");
}

#[tokio::test]
async fn an_event_committed_during_an_evaluation_is_counted_and_causes_one_more() {
    let entered = Arc::new(tokio::sync::Notify::new());
    let resume = Arc::new(tokio::sync::Notify::new());
    let app = spawn_app(TestOptions {
        before_apply: Some(pausing_hook(Arc::clone(&entered), Arc::clone(&resume))),
        ..TestOptions::default().with(|s| {
            s.schedule.debounce_window = Duration::from_millis(200);
            s.schedule.max_wait = Duration::from_secs(5);
        })
    })
    .await;
    app.send(&flags("d", "post:during", 4)).await;
    // The evaluation has folded and read its snapshot; two events arrive before it completes.
    tokio::time::timeout(Duration::from_secs(10), entered.notified())
        .await
        .expect("the evaluation reaches its apply");
    app.send(&flags("late", "post:during", 2)).await;
    resume.notify_one();
    // The second evaluation pauses too; let it through.
    tokio::time::timeout(Duration::from_secs(10), entered.notified())
        .await
        .expect("one more evaluation for the late events");
    resume.notify_one();
    app.wait_settled(Duration::from_secs(15)).await;

    let seen: Vec<i64> = sqlx::query_scalar!(
        "SELECT event_count FROM evaluations WHERE entity = 'post:during' ORDER BY id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(seen, [4, 6], "the first saw the burst, the second all six");
    assert_eq!(read_counts(&app, "post:during").await, (6, 6));
    assert_eq!(
        scalar!(
            app,
            "SELECT evaluated_event_count FROM entities WHERE entity = 'post:during'"
        ),
        6
    );
}

#[tokio::test]
async fn a_crash_between_fold_and_completion_leaves_the_entity_owed_and_exact() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.database.backend_timeout = Duration::from_secs(1);
        s.maintenance.sweep_grace = Duration::from_secs(1);
        s.schedule.debounce_window = Duration::from_secs(60);
        s.schedule.max_wait = Duration::from_secs(120);
    }))
    .await;
    app.send(&flags("c", "post:crash", 4)).await;
    // A worker folded, then died before its completion; Redis lost the schedule too.
    wait_for(Duration::from_secs(10), "the fold", || async {
        app.backends
            .store
            .fold()
            .entities(&["post:crash"], 1)
            .await
            .unwrap();
        folded(&app, "post:crash").await.0 == 4
    })
    .await;
    app.lose_redis_data().await;
    assert_eq!(read_counts(&app, "post:crash").await, (4, 4));
    let (_, body) = app.get("/v1/entities/post:crash").await;
    assert_eq!(body["evaluation"]["pending"], true, "{body}");

    let maintenance = app.maintenance();
    wait_for(
        Duration::from_secs(15),
        "the sweep to find the folded, unevaluated entity",
        || async { maintenance.sweep_once(None).await.unwrap().0.repaired == 1 },
    )
    .await;
    let worker = app.worker();
    worker.evaluate_claim(claim_next(&worker).await).await;
    assert_eq!(app.evaluation_count("post:crash").await, 1);
    assert_eq!(
        scalar!(
            app,
            "SELECT event_count FROM evaluations WHERE entity = 'post:crash'"
        ),
        4,
        "the evaluation saw the four events once"
    );
    assert_eq!(read_counts(&app, "post:crash").await, (4, 4));
    let (_, body) = app.get("/v1/entities/post:crash").await;
    assert_eq!(body["evaluation"]["pending"], false, "{body}");
}

#[tokio::test]
async fn an_entity_evaluated_before_is_found_again_when_redis_loses_its_next_event() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.database.backend_timeout = Duration::from_secs(1);
        s.maintenance.sweep_grace = Duration::from_secs(1);
        s.schedule.debounce_window = Duration::from_millis(100);
        s.schedule.max_wait = Duration::from_secs(5);
    }))
    .await;
    let worker = app.worker();
    app.send(&flags("x", "post:again", 2)).await;
    worker.evaluate_claim(claim_next(&worker).await).await;
    assert_eq!(app.evaluation_count("post:again").await, 1);
    // The entity row exists and owes nothing: its next event writes no row, and Redis loses
    // that event's schedule.
    app.send(&flags("y", "post:again", 1)).await;
    app.lose_redis_data().await;
    let maintenance = app.maintenance();
    wait_for(
        Duration::from_secs(20),
        "the sweep to mark and repair the entity",
        || async { maintenance.sweep_once(None).await.unwrap().0.repaired == 1 },
    )
    .await;
    worker.evaluate_claim(claim_next(&worker).await).await;
    assert_eq!(app.evaluation_count("post:again").await, 2);
    assert_eq!(read_counts(&app, "post:again").await, (3, 3));
}

#[tokio::test]
async fn retention_racing_folds_drops_only_folded_events_and_keeps_every_count() {
    let app = spawn_app(TestOptions::idle()).await;
    let store = app.backends.store.clone();
    assert_eq!(app.send(&flags("r", "post:race", 10)).await, (10, 0));
    let aged: Vec<String> = (0..6).map(|i| format!("r{i}")).collect();
    let aged: Vec<&str> = aged.iter().map(String::as_str).collect();
    app.age_events(&aged, 8 * DAY).await;

    // Folds and new events go on while retention folds and drops the old partition.
    let folding = tokio::spawn({
        let store = store.clone();
        async move {
            for _ in 0..50 {
                store.fold().entities(&["post:race"], 1).await.unwrap();
            }
        }
    });
    let sending = async {
        for round in 0..5 {
            app.send(&flags(&format!("n{round}-"), "post:race", 2))
                .await;
        }
    };
    let maintenance = app.maintenance();
    let (purged, ()) = tokio::join!(maintenance.purge_once(), sending);
    folding.await.unwrap();
    assert_eq!(purged.unwrap(), 6, "the old partition went, once folded");
    assert_eq!(app.count_events().await, 14);
    assert_eq!(read_counts(&app, "post:race").await, (20, 20));
    wait_for(Duration::from_secs(10), "the last fold", || async {
        store.fold().entities(&["post:race"], 1).await.unwrap();
        folded(&app, "post:race").await.0 == 20
    })
    .await;
    assert_eq!(folded(&app, "post:race").await.1, 20);
    assert_eq!(read_counts(&app, "post:race").await, (20, 20));
}

/// Rows the schema before folding holds: ingest had counted its events already.
const COUNTED_ROWS: &str = "
    SELECT partition_add(t, now() - interval '1 hour',
                         (SELECT min(lower_bound) FROM partitions WHERE parent = t))
    FROM unnest(ARRAY['events', 'signal_buckets']) AS t;
    INSERT INTO entities (entity, kind, event_count, evaluated_event_count, author)
    VALUES ('post:up', 'post', 3, 3, 'user:7');
    INSERT INTO events (id, entity, signal, weight, priority, received_at) VALUES
        ('u1', 'post:up', 'flag', 1, 'normal', now() - interval '5 minutes'),
        ('u2', 'post:up', 'flag', 1, 'normal', now() - interval '5 minutes'),
        ('u3', 'post:up', 'upvote', 2, 'normal', now() - interval '1 minute');
    INSERT INTO signal_totals (entity, signal, count, weight_sum) VALUES
        ('post:up', 'flag', 2, 2), ('post:up', 'upvote', 1, 2);
    INSERT INTO signal_buckets (entity, signal, bucket_start, count, weight_sum) VALUES
        ('post:up', 'flag', date_trunc('minute', now() - interval '5 minutes'), 2, 2),
        ('post:up', 'upvote', date_trunc('minute', now() - interval '1 minute'), 1, 2);
";

#[tokio::test]
async fn the_upgrade_keeps_every_count_and_folds_from_there() {
    let app = spawn_app(TestOptions {
        before_folding: Some(COUNTED_ROWS),
        ..TestOptions::idle()
    })
    .await;
    // The events ingest had counted are folded: counted once, not again.
    assert_eq!(read_counts(&app, "post:up").await, (3, 2));
    let (_, body) = app.get("/v1/entities/post:up").await;
    assert_eq!(body["signals"]["upvote"]["weight"], 2.0, "{body}");
    assert_eq!(
        body["signals"]["flag"]["windows"]["1h"]["count"], 2,
        "{body}"
    );
    let author = app.snapshot("post:up").await.author;
    assert_eq!(author.as_ref().map(|a| a.as_str()), Some("user:7"));
    assert_eq!(app.count_unfolded_events().await, 0);

    // New events are appended and folded from there.
    assert_eq!(app.send(&flags("v", "post:up", 2)).await, (2, 0));
    assert_eq!(read_counts(&app, "post:up").await, (5, 4));
    let store = &app.backends.store;
    wait_for(Duration::from_secs(10), "the fold", || async {
        store.fold().entities(&["post:up"], 1).await.unwrap();
        folded(&app, "post:up").await.0 == 5
    })
    .await;
    assert_eq!(folded(&app, "post:up").await, (5, 4, 4));
    assert_eq!(read_counts(&app, "post:up").await, (5, 4));
    // An old id is still a duplicate.
    assert_eq!(
        app.send(&json!([event("u1", "post:up", "flag")])).await,
        (0, 1)
    );
}

#[tokio::test]
async fn an_evaluation_folds_an_entity_that_gathered_many_events_and_reads_a_few() {
    let app = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(200);
        s.schedule.max_wait = Duration::from_secs(5);
    }))
    .await;
    app.send(&flags("few", "post:few", 5)).await;
    app.send(&flags("many", "post:many", 200)).await;
    app.wait_settled(Duration::from_secs(15)).await;
    for (entity, n) in [("post:few", 5), ("post:many", 200)] {
        assert_eq!(read_counts(&app, entity).await, (n, n), "{entity}");
        assert_eq!(
            scalar!(
                app,
                "SELECT event_count FROM evaluations WHERE entity = $1",
                entity
            ),
            n,
            "{entity}: one evaluation, on every event"
        );
    }
    // Five events are cheaper read than folded; two hundred are folded by an evaluation. A
    // transaction open elsewhere on the server can hold the first one's horizon back: then
    // one more event, and so one more evaluation, folds them.
    assert_eq!(folded(&app, "post:few").await, (0, 0, 0));
    let more = std::sync::atomic::AtomicUsize::new(0);
    wait_for(
        Duration::from_secs(30),
        "an evaluation to fold post:many",
        || async {
            if folded(&app, "post:many").await.0 > 0 {
                return true;
            }
            let n = more.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            app.send(&json!([event(&format!("more{n}"), "post:many", "flag")]))
                .await;
            app.wait_settled(Duration::from_secs(15)).await;
            false
        },
    )
    .await;
    let (count, totals, buckets) = folded(&app, "post:many").await;
    assert_eq!((totals, buckets), (count, count));
    let sent = 200 + more.load(std::sync::atomic::Ordering::Relaxed) as i64;
    assert_eq!(read_counts(&app, "post:many").await, (sent, sent));
}
