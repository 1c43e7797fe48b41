//! Leases and locks under pauses: a worker paused past its lease is fenced off when it wakes,
//! and a slow evaluation that keeps renewing is not taken over.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use quiesce::domain::Status;
use serde_json::json;
use tokio::sync::Notify;

use quiesce::{store::Completion, worker::Outcome};

use crate::helpers::{TestOptions, claim_next, event, pausing_hook, scalar, spawn_app, wait_for};
use quiesce::startup::run_workers;

#[tokio::test]
async fn a_worker_paused_past_its_lease_writes_nothing_and_the_other_workers_action_stands() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(20);
        s.worker.lease = Duration::from_millis(600);
        s.worker.evaluation_timeout = Duration::from_secs(30);
    }))
    .await;
    let flags: Vec<_> = (0..10)
        .map(|i| event(&format!("f{i}"), "post:paused", "flag"))
        .collect();
    app.send(&json!(flags)).await;

    let (entered, resume) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let paused = app
        .worker()
        .with_before_apply(pausing_hook(Arc::clone(&entered), Arc::clone(&resume)));
    let claim = claim_next(&paused).await;
    let paused_run = tokio::spawn({
        let paused = paused.clone();
        async move { paused.evaluate_claim(claim).await }
    });
    tokio::time::timeout(Duration::from_secs(10), entered.notified())
        .await
        .expect("the paused worker read its snapshot");

    // It is now paused between its snapshot and its write, and its lease and lock run out as
    // if its renewals had stopped (a SIGSTOP, a long GC pause).
    let entity = quiesce::domain::EntityId::parse("post:paused").unwrap();
    let keys = app.backends.queue.keys().for_entity(&entity);
    let mut redis = app.backends.queue.connection();
    let _: () = redis::pipe()
        .zadd(keys.inflight(), entity.as_str(), 0)
        .del(keys.lock(&entity))
        .query_async(&mut redis)
        .await
        .unwrap();

    // Another worker rescues the entity and applies the action.
    let rescuer = app.worker();
    wait_for(
        Duration::from_secs(10),
        "the expired lease to be reaped",
        || async { app.maintenance().reap_once().await.unwrap().returned == 1 },
    )
    .await;
    let outcome = rescuer.evaluate_claim(claim_next(&rescuer).await).await;
    assert!(
        matches!(outcome, Outcome::Done(Completion::Applied { .. })),
        "{outcome:?}"
    );

    // The paused worker wakes up and tries to write its decision on the old version: fenced.
    resume.notify_one();
    let outcome = paused_run.await.unwrap();
    assert!(matches!(outcome, Outcome::Retry(_)), "{outcome:?}");
    assert_eq!(paused.stats().fenced.load(Ordering::Relaxed), 1);
    assert_eq!(app.count_actions().await, 1);
    assert_eq!(
        app.evaluation_count("post:paused").await,
        1,
        "the stale worker wrote nothing"
    );
    assert_eq!(scalar!(app, "SELECT moderation_version FROM entities"), 1);
    assert_eq!(app.status_of("post:paused").await, Status::Hidden);
}

#[tokio::test]
async fn a_slow_evaluation_that_renews_its_lease_is_evaluated_once() {
    let lease = Duration::from_millis(900);
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(20);
        s.worker.lease = lease;
    }))
    .await;
    let flags: Vec<_> = (0..10)
        .map(|i| event(&format!("f{i}"), "post:slow", "flag"))
        .collect();
    app.send(&json!(flags)).await;

    let (entered, resume) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let calls = Arc::new(AtomicUsize::new(0));
    let slow = app.worker().with_before_apply({
        let (calls, pause) = (
            Arc::clone(&calls),
            pausing_hook(entered.clone(), resume.clone()),
        );
        Arc::new(move |snapshot| {
            calls.fetch_add(1, Ordering::SeqCst);
            pause(snapshot)
        })
    });
    let shutdown = tokio_util::sync::CancellationToken::new();
    let slow_run = tokio::spawn(run_workers(slow, app.maintenance(), shutdown.clone()));
    tokio::time::timeout(Duration::from_secs(10), entered.notified())
        .await
        .expect("the slow evaluation started");

    // A competitor polls and reaps the same queue while the evaluation takes three leases.
    let competitor = tokio::spawn(run_workers(
        app.worker(),
        app.maintenance(),
        shutdown.clone(),
    ));
    let entity = quiesce::domain::EntityId::parse("post:slow").unwrap();
    let started = std::time::Instant::now();
    wait_for(lease * 6, "three lease lifetimes to pass", || async {
        // Renewal keeps moving the lease deadline; the claim stays the slow worker's.
        let state = app.backends.queue.state_of(&entity).await.unwrap();
        assert!(state.lease_until_ms.is_some(), "the claim was lost");
        started.elapsed() > lease * 3
    })
    .await;
    resume.notify_one();
    app.wait_settled(Duration::from_secs(20)).await;
    shutdown.cancel();
    slow_run.await.unwrap();
    competitor.await.unwrap();

    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(app.evaluation_count("post:slow").await, 1);
    assert_eq!(app.count_actions().await, 1);
}

#[tokio::test]
async fn claims_get_a_lease_derived_from_measured_evaluation_times() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(10);
        s.worker.lease = Duration::from_secs(30);
    }))
    .await;
    let worker = app.worker();
    let events: Vec<_> = (0..25)
        .map(|i| event(&format!("e{i}"), &format!("post:{i}"), "upvote"))
        .collect();
    app.send(&json!(events)).await;
    // Before any measurement, claims get the configured lease.
    let first = claim_next(&worker).await;
    assert_eq!(first.lease_ms, 30_000);
    worker.evaluate_claim(first).await;
    for _ in 1..25 {
        let claim = claim_next(&worker).await;
        worker.evaluate_claim(claim).await;
    }
    // 25 fast evaluations later: p99 x 2 + 1s, far below the 30s ceiling.
    app.send(&event("next", "post:next", "upvote")).await;
    let claim = claim_next(&worker).await;
    assert!(
        (1_000..10_000).contains(&claim.lease_ms),
        "lease {} ms",
        claim.lease_ms
    );
    let entity = quiesce::domain::EntityId::parse("post:next").unwrap();
    let deadline = app
        .backends
        .queue
        .state_of(&entity)
        .await
        .unwrap()
        .lease_until_ms
        .unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    assert!(
        deadline - now <= claim.lease_ms as i64,
        "the in-flight deadline uses it"
    );
}
