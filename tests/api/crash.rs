//! A worker killed between claim and ack: its lease expires, another worker evaluates the
//! entity, and the action is applied once.

use std::time::Duration;

use serde_json::json;
use sqlx::Connection;

use crate::helpers::{TestOptions, event, spawn_app, wait_for};

#[tokio::test]
async fn a_killed_worker_process_loses_nothing_and_duplicates_nothing() {
    let app = spawn_app(TestOptions {
        window: Duration::from_millis(50),
        lease: Duration::from_secs(1),
        workers: 0,
        ..Default::default()
    })
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
    sqlx::query("SELECT 1 FROM entities WHERE entity = 'post:crash' FOR UPDATE")
        .execute(&mut *hold)
        .await
        .unwrap();

    let mut doomed = app.spawn_worker_process("doomed", None);
    wait_for(Duration::from_secs(20), "the worker to block in its write", || async {
        app.scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
            .await
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

    // Another worker picks the entity up once the dead worker's lease runs out.
    let survivor = app.worker();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(survivor.run(shutdown.clone()));
    wait_for(
        Duration::from_secs(20),
        "the survivor to apply the action",
        || async { app.status_of("post:crash").await == "hidden" },
    )
    .await;
    app.wait_settled(Duration::from_secs(20)).await;
    shutdown.cancel();
    running.await.unwrap();

    assert_eq!(
        app.scalar("SELECT count(*) FROM actions WHERE entity = 'post:crash'")
            .await,
        1
    );
    assert_eq!(app.scalar("SELECT count(*) FROM outbox").await, 1);
    let workers: Vec<String> =
        sqlx::query_scalar("SELECT worker FROM evaluations WHERE entity = 'post:crash'")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        workers,
        vec!["in-process".to_owned()],
        "the killed worker wrote nothing"
    );
}

#[tokio::test]
async fn a_claim_that_is_never_acked_is_returned_and_evaluated_once() {
    // The same crash, driven step by step inside one process: claim, then drop the claim.
    let app = spawn_app(TestOptions {
        window: Duration::from_millis(20),
        lease: Duration::from_millis(600),
        workers: 0,
        ..Default::default()
    })
    .await;
    let events: Vec<_> = (0..3)
        .map(|i| event(&format!("f{i}"), "post:dropped", "flag"))
        .collect();
    app.send(&json!(events)).await;
    let worker = app.worker();

    let claimed = std::sync::Mutex::new(Vec::new());
    wait_for(
        Duration::from_secs(10),
        "the entity to be claimed",
        || async {
            let claims = worker.claim_once(10).await.unwrap().claims;
            let mut claimed = claimed.lock().unwrap();
            claimed.extend(claims);
            !claimed.is_empty()
        },
    )
    .await;
    let claimed = claimed.into_inner().unwrap();
    assert_eq!(claimed.len(), 1);
    // Nothing else can claim it while the lease runs.
    assert!(worker.claim_once(10).await.unwrap().claims.is_empty());

    wait_for(
        Duration::from_secs(10),
        "the lease to expire and be reaped",
        || async { worker.reap_once().await.unwrap() == 1 },
    )
    .await;
    let again = worker.claim_once(10).await.unwrap().claims;
    assert_eq!(again.len(), 1);
    let outcome = worker.process(again.into_iter().next().unwrap()).await;
    assert!(
        matches!(
            outcome,
            quiesce::worker::Outcome::Done(quiesce::store::Completion::Applied { .. })
        ),
        "{outcome:?}"
    );
    // The first claim's owner comes back late: its token no longer acks anything.
    assert!(!app.backends.queue.ack(&claimed[0]).await.unwrap());
    assert_eq!(app.status_of("post:dropped").await, "flagged");
    assert_eq!(app.scalar("SELECT count(*) FROM actions").await, 1);
    assert!(app.settled().await);
}
