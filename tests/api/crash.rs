//! A worker killed between claim and ack: its lease expires, another worker evaluates the
//! entity, and the action is applied once.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::FutureExt;
use quiesce::domain::Status;
use serde_json::json;
use sqlx::Connection;

use crate::helpers::{TestOptions, claim_next, event, scalar, spawn_app, wait_for};

#[tokio::test]
async fn a_killed_worker_process_loses_nothing_and_duplicates_nothing() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(50);
        s.worker.lease = Duration::from_secs(1);
    }))
    .await;
    let events: Vec<_> = (0..10)
        .map(|i| event(&format!("f{i}"), "post:crash", "flag"))
        .collect();
    app.send(&json!(events)).await;

    // Hold the entity's row so the worker blocks inside its write, after claim and snapshot.
    let mut blocker = sqlx::PgConnection::connect_with(&app.pool.connect_options())
        .await
        .unwrap();
    let mut hold = blocker.begin().await.unwrap();
    sqlx::query!("SELECT 1 AS held FROM entities WHERE entity = 'post:crash' FOR UPDATE")
        .fetch_one(&mut *hold)
        .await
        .unwrap();

    let mut doomed = app.spawn_worker_process("doomed", None);
    wait_for(Duration::from_secs(20), "the worker to block in its write", || async {
        scalar!(app, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
            > 0
    })
    .await;
    let entity = quiesce::domain::EntityId::parse("post:crash").unwrap();
    assert!(
        app.backends
            .queue
            .state_of(&entity)
            .await
            .unwrap()
            .lease_until_ms
            .is_some(),
        "claimed, not acked"
    );

    doomed.start_kill().unwrap();
    doomed.wait().await.unwrap();
    hold.rollback().await.unwrap();

    // Another worker picks the entity up once the dead worker's lease runs out (its process's
    // reaper returns the claim).
    let survivor = app.worker();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(quiesce::startup::run_workers(
        survivor,
        app.maintenance(),
        shutdown.clone(),
    ));
    wait_for(
        Duration::from_secs(20),
        "the survivor to apply the action",
        || async { app.status_of("post:crash").await == Status::Hidden },
    )
    .await;
    app.wait_settled(Duration::from_secs(20)).await;
    shutdown.cancel();
    running.await.unwrap();

    assert_eq!(app.action_count_of("post:crash").await, 1);
    // The hide's webhook and its statement of reasons'.
    assert_eq!(app.count_outbox().await, 2);
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM statements WHERE entity = 'post:crash'"
        ),
        1
    );
    let workers: Vec<String> = sqlx::query_scalar!(
        "SELECT worker FROM evaluations WHERE entity = 'post:crash' ORDER BY id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    // The killed worker's statement was already in Postgres, waiting on the row: it either died
    // with the connection or landed when the row was released, as if the worker had committed
    // just before the kill. Either way the survivor evaluated last, and the fence and the dedup
    // key kept the action single (asserted above).
    assert!(
        workers == ["in-process"] || workers == ["doomed", "in-process"],
        "evaluations by {workers:?}"
    );
}

#[tokio::test]
async fn a_claim_that_is_never_acked_is_returned_and_evaluated_once() {
    // The same crash, driven step by step inside one process: claim, then drop the claim.
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(20);
        s.worker.lease = Duration::from_millis(600);
    }))
    .await;
    let events: Vec<_> = (0..3)
        .map(|i| event(&format!("f{i}"), "post:dropped", "flag"))
        .collect();
    app.send(&json!(events)).await;
    let entity = quiesce::domain::EntityId::parse("post:dropped").unwrap();
    let anchor = app
        .max_wait_anchor(&entity)
        .await
        .expect("scheduled with an anchor");
    let worker = app.worker();

    let lost = claim_next(&worker).await;
    assert_eq!(
        app.max_wait_anchor(&entity).await,
        None,
        "the claim takes the anchor along"
    );

    // An event while the claim is out makes the entity due again, but it is not claimed
    // twice: each poll pushes it back as busy.
    app.send(&event("f3", "post:dropped", "flag")).await;
    wait_for(
        Duration::from_secs(10),
        "the re-due entity to be seen as busy",
        || async {
            let round = worker.claim_once(10).await.unwrap();
            assert!(round.claims.is_empty(), "claimed twice: {:?}", round.claims);
            round.busy > 0
        },
    )
    .await;

    wait_for(
        Duration::from_secs(10),
        "the lease to expire and be reaped",
        || async { app.maintenance().reap_once().await.unwrap().returned == 1 },
    )
    .await;
    assert_eq!(
        app.max_wait_anchor(&entity).await,
        Some(anchor),
        "the reaped entity keeps its first event's max-wait anchor"
    );

    // A retried claim restores the anchor too, so retries cannot stretch max wait.
    let retried = claim_next(&worker).await;
    assert!(
        app.backends
            .queue
            .retry(&retried, Duration::ZERO)
            .await
            .unwrap()
    );
    assert_eq!(app.max_wait_anchor(&entity).await, Some(anchor));

    let claim = claim_next(&worker).await;
    let outcome = worker.evaluate_claim(claim).await;
    assert!(
        matches!(
            outcome,
            quiesce::worker::Outcome::Done(quiesce::store::Completion::Applied { .. })
        ),
        "{outcome:?}"
    );
    // The first claim's owner comes back late: its token no longer acks anything.
    assert!(!app.backends.queue.ack(&lost).await.unwrap());
    assert!(!app.backends.queue.ack(&retried).await.unwrap());
    assert_eq!(app.status_of("post:dropped").await, Status::Flagged);
    assert_eq!(app.count_actions().await, 1);
    assert_eq!(app.evaluation_count("post:dropped").await, 1);
    assert!(app.settled().await);
}

#[tokio::test]
async fn a_hung_evaluation_is_abandoned_at_the_timeout_and_retried() {
    let calls = Arc::new(AtomicUsize::new(0));
    let hook = {
        let calls = Arc::clone(&calls);
        Arc::new(move |_snapshot| {
            let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    // Hangs far longer than the test waits: only the timeout gets it unstuck.
                    tokio::time::sleep(Duration::from_secs(120)).await;
                }
            }
            .boxed()
        })
    };
    let app = spawn_app(TestOptions {
        before_apply: Some(hook),
        ..TestOptions::default().with(|s| {
            s.schedule.debounce_window = Duration::from_millis(20);
            s.worker.evaluation_timeout = Duration::from_millis(500);
        })
    })
    .await;
    let events: Vec<_> = (0..10)
        .map(|i| event(&format!("h{i}"), "post:hung", "flag"))
        .collect();
    app.send(&json!(events)).await;
    app.wait_settled(Duration::from_secs(20)).await;
    assert_eq!(app.status_of("post:hung").await, Status::Hidden);
    assert_eq!(
        app.evaluation_count("post:hung").await,
        1,
        "the abandoned run wrote nothing"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
