//! Bounded attempts and dead letters: a poison entity ends in the dead letters with its
//! reason, without holding up the others; fatal failures go there at once; outages do not use
//! up attempts; redrive evaluates a dead letter again. Dead letters and failure records are
//! durable in Postgres: they survive the loss of every Redis key, a lost dead letter goes back
//! in Redis' dead set before anything is re-scheduled, and redrive works from Postgres.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::FutureExt;
use quiesce::domain::Status;
use quiesce::{
    domain::{EntityId, Priority},
    worker::Outcome,
};
use serde_json::{Value, json};

use crate::helpers::{TestApp, TestOptions, claim_next, event, scalar, spawn_app, wait_for};

async fn dead_letters(app: &TestApp) -> Vec<Value> {
    let (status, body) = app.get("/v1/dead-letters").await;
    assert_eq!(status, 200, "{body}");
    body["dead_letters"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_poison_entity_is_dead_lettered_while_the_others_are_evaluated_and_redrive_works() {
    let poisoned = Arc::new(AtomicBool::new(true));
    let hook = poison_hook("post:poison", Arc::clone(&poisoned));
    let app = spawn_app(TestOptions {
        before_apply: Some(hook),
        ..TestOptions::default().with(|s| {
            s.schedule.debounce_window = Duration::from_millis(100);
            s.schedule.max_attempts = 3;
            s.worker.workers = 8;
        })
    })
    .await;

    let flags: Vec<Value> = (0..10)
        .map(|i| event(&format!("p{i}"), "post:poison", "flag"))
        .collect();
    app.send(&json!(flags)).await;
    for half in 0..2 {
        let others: Vec<Value> = (0..1000)
            .map(|i| event(&format!("o{half}-{i}"), &format!("post:ok{i}"), "upvote"))
            .collect();
        app.send(&json!(others)).await;
    }

    wait_for(
        Duration::from_secs(30),
        "the poison entity in the dead letters",
        || async { dead_letters(&app).await.len() == 1 },
    )
    .await;
    wait_for(
        Duration::from_secs(30),
        "the 1000 healthy entities to be evaluated",
        || async {
            scalar!(
                app,
                "SELECT count(DISTINCT entity) FROM evaluations WHERE entity <> 'post:poison'"
            ) == 1000
        },
    )
    .await;
    // On time: the poison's retries hold no worker for long (bounded by the window, the
    // workers' throughput and a loaded machine, not by the poison's backoff).
    let slowest = scalar!(
        app,
        "SELECT (1000 * extract(epoch FROM max(v.started_at - e.last_event_at)))::bigint
             FROM evaluations v JOIN entities e USING (entity) WHERE entity <> 'post:poison'"
    );
    assert!(slowest < 20_000, "a healthy entity waited {slowest} ms");
    let dead = &dead_letters(&app).await[0];
    assert_eq!(dead["entity"], "post:poison");
    assert_eq!(dead["reason"], "attempts_exhausted");
    assert_eq!(dead["attempts"], 3);
    assert!(
        dead["last_error"]
            .as_str()
            .unwrap()
            .contains("always crashes"),
        "{dead}"
    );
    assert!(dead["first_failure_ms"].as_i64() <= dead["last_failure_ms"].as_i64());
    assert_eq!(app.evaluation_count("post:poison").await, 0);

    // New events for a dead-lettered entity are still recorded, but do not schedule it.
    app.send(&event("p-late", "post:poison", "flag")).await;
    assert_eq!(app.event_count_of("post:poison").await, 11);
    let entity = EntityId::parse("post:poison").unwrap();
    assert_eq!(
        app.backends
            .queue
            .state_of(&entity)
            .await
            .unwrap()
            .due_at_ms,
        None
    );

    // Fixed, and redriven: evaluated once more with fresh attempts.
    poisoned.store(false, Ordering::SeqCst);
    let response = app
        .client
        .post(format!("{}/v1/dead-letters/post:poison/redrive", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    wait_for(
        Duration::from_secs(20),
        "the redriven entity to be evaluated",
        || async { app.evaluation_count("post:poison").await == 1 },
    )
    .await;
    assert_eq!(app.status_of("post:poison").await, Status::Hidden);
    assert!(dead_letters(&app).await.is_empty());
    let again = app
        .client
        .post(format!("{}/v1/dead-letters/post:poison/redrive", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 404, "no longer dead-lettered");
}

#[tokio::test]
async fn a_fatal_failure_is_dead_lettered_at_once_and_the_cli_lists_and_redrives_it() {
    let app = spawn_app(TestOptions::idle()).await;
    // Scheduled in Redis but unknown to Postgres: it can never be evaluated.
    let ghost = EntityId::parse("post:ghost").unwrap();
    app.backends
        .queue
        .schedule(&[(ghost.clone(), Priority::Critical)])
        .await
        .unwrap();
    let worker = app.worker();
    let claim = worker
        .claim_once(1)
        .await
        .unwrap()
        .claims
        .pop()
        .expect("due at once");
    let outcome = worker.evaluate_claim(claim).await;
    assert!(matches!(outcome, Outcome::DeadLettered(_)), "{outcome:?}");
    let dead = dead_letters(&app).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["reason"], "fatal");
    assert_eq!(dead[0]["attempts"], 1);

    let listed = app.run_cli(&["dead-letters", "list"]).await;
    assert!(listed.contains("post:ghost\tfatal\tattempts=1"), "{listed}");
    let redriven = app
        .run_cli(&["dead-letters", "redrive", "--reason", "attempts_exhausted"])
        .await;
    assert_eq!(redriven.trim(), "redriven: 0");
    let redriven = app
        .run_cli(&["dead-letters", "redrive", "--reason", "fatal"])
        .await;
    assert_eq!(redriven.trim(), "redriven: 1");
    assert!(dead_letters(&app).await.is_empty());
    assert!(
        app.backends
            .queue
            .state_of(&ghost)
            .await
            .unwrap()
            .due_at_ms
            .is_some()
    );
}

#[tokio::test]
async fn a_postgres_outage_does_not_use_up_attempts() {
    let app = spawn_app(TestOptions {
        through_proxies: true,
        ..TestOptions::idle().with(|s| {
            s.database.backend_timeout = Duration::from_secs(1);
            s.schedule.debounce_window = Duration::from_millis(20);
            s.schedule.max_attempts = 2;
        })
    })
    .await;
    let flags: Vec<Value> = (0..10)
        .map(|i| event(&format!("f{i}"), "post:outage", "flag"))
        .collect();
    app.send(&json!(flags)).await;
    let worker = app.worker();
    let postgres = app.postgres_proxy.as_ref().unwrap();
    postgres.cut();

    // Many more failed tries than attempts allowed, all because Postgres is away.
    for _ in 0..4 {
        let claim = claim_next(&worker).await;
        let outcome = worker.evaluate_claim(claim).await;
        assert!(matches!(outcome, Outcome::Retry(_)), "{outcome:?}");
    }

    postgres.restore();
    // Read once Postgres is back: the dead letters live there.
    assert!(dead_letters(&app).await.is_empty());
    let claim = claim_next(&worker).await;
    let outcome = worker.evaluate_claim(claim).await;
    assert!(matches!(outcome, Outcome::Done(_)), "{outcome:?}");
    assert_eq!(app.status_of("post:outage").await, Status::Hidden);
}

#[tokio::test]
async fn a_worker_that_dies_on_every_attempt_ends_in_the_dead_letters() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(20);
        s.worker.lease = Duration::from_millis(300);
        s.schedule.max_attempts = 2;
    }))
    .await;
    app.send(&event("e1", "post:killer", "flag")).await;
    let worker = app.worker();
    // Claimed and never settled, twice: each expired lease is an attempt.
    let _first = claim_next(&worker).await;
    wait_for(
        Duration::from_secs(10),
        "the first lease to expire",
        || async { app.maintenance().reap_once().await.unwrap().returned == 1 },
    )
    .await;
    let _second = claim_next(&worker).await;
    wait_for(
        Duration::from_secs(10),
        "the second lease to expire",
        || async { app.maintenance().reap_once().await.unwrap().dead_lettered == 1 },
    )
    .await;
    let dead = dead_letters(&app).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["reason"], "attempts_exhausted");
    assert_eq!(dead[0]["attempts"], 2);
    assert!(
        dead[0]["last_error"]
            .as_str()
            .unwrap()
            .contains("lease expired")
    );

    // Durable: the reaper's dead letter is still listed, as it was, after Redis lost it.
    app.lose_redis_data().await;
    assert_eq!(dead_letters(&app).await, dead);
}

/// A hook that panics in the evaluation of `entity` while `poisoned` holds.
fn poison_hook(
    entity: &'static str,
    poisoned: Arc<AtomicBool>,
) -> quiesce::worker::BeforeApplyHook {
    Arc::new(move |snapshot: quiesce::domain::Snapshot| {
        let poison = poisoned.load(Ordering::SeqCst) && snapshot.entity.as_str() == entity;
        async move {
            if poison {
                panic!("this entity always crashes its evaluation");
            }
        }
        .boxed()
    })
}

#[tokio::test]
async fn a_dead_letter_survives_a_redis_loss_and_stays_dead_until_redriven() {
    let poisoned = Arc::new(AtomicBool::new(true));
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(20);
        s.schedule.max_attempts = 1;
    }))
    .await;
    app.send(&event("d1", "post:dl", "flag")).await;
    let worker = app
        .worker()
        .with_before_apply(poison_hook("post:dl", Arc::clone(&poisoned)));
    let outcome = worker.evaluate_claim(claim_next(&worker).await).await;
    assert!(matches!(outcome, Outcome::DeadLettered(_)), "{outcome:?}");
    let before = dead_letters(&app).await;
    assert_eq!(before.len(), 1);

    app.lose_redis_data().await;
    // The list, the reason, the attempts and the error come from Postgres.
    let after = dead_letters(&app).await;
    assert_eq!(after, before);
    assert_eq!(after[0]["entity"], "post:dl");
    assert_eq!(after[0]["reason"], "attempts_exhausted");
    assert_eq!(after[0]["attempts"], 1);
    assert!(
        after[0]["last_error"]
            .as_str()
            .unwrap()
            .contains("always crashes")
    );

    // A new event schedules it (Redis forgot it is dead) until the sweep restores the cache,
    // which takes it out of the due set again; then new events do not schedule it.
    app.send(&event("d2", "post:dl", "flag")).await;
    let report = app.maintenance().sweep_once(None).await.unwrap().0;
    assert!(report.ran);
    assert_eq!(report.dead_letters_restored, 1);
    assert_eq!(report.repaired, 0, "a dead entity is not re-scheduled");
    app.send(&event("d3", "post:dl", "flag")).await;
    let entity = EntityId::parse("post:dl").unwrap();
    assert_eq!(
        app.backends
            .queue
            .state_of(&entity)
            .await
            .unwrap()
            .due_at_ms,
        None
    );
    assert!(worker.claim_once(10).await.unwrap().claims.is_empty());
    assert_eq!(app.evaluation_count("post:dl").await, 0);
    let again = app.maintenance().sweep_once(None).await.unwrap().0;
    assert_eq!(
        (again.dead_letters_restored, again.dead_letters_recorded),
        (0, 0)
    );

    // Redriven: evaluated, and the record keeps who redrove it and when.
    poisoned.store(false, Ordering::SeqCst);
    let response = app
        .client
        .post(format!("{}/v1/dead-letters/post:dl/redrive", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let outcome = worker.evaluate_claim(claim_next(&worker).await).await;
    assert!(matches!(outcome, Outcome::Done(_)), "{outcome:?}");
    assert_eq!(app.evaluation_count("post:dl").await, 1);
    assert!(dead_letters(&app).await.is_empty());
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM dead_letters
             WHERE entity = 'post:dl' AND redriven_at IS NOT NULL AND redriven_by = 'api'"
        ),
        1
    );
}

#[tokio::test]
async fn redrive_after_a_redis_loss_evaluates_the_entity_again() {
    let poisoned = Arc::new(AtomicBool::new(true));
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(20);
        s.schedule.max_attempts = 1;
    }))
    .await;
    app.send(&event("l1", "post:lost", "flag")).await;
    let worker = app
        .worker()
        .with_before_apply(poison_hook("post:lost", Arc::clone(&poisoned)));
    let outcome = worker.evaluate_claim(claim_next(&worker).await).await;
    assert!(matches!(outcome, Outcome::DeadLettered(_)), "{outcome:?}");

    // Redis forgets everything, and no sweep has run: Postgres alone knows the dead letter.
    app.lose_redis_data().await;
    poisoned.store(false, Ordering::SeqCst);
    let redriven = app.run_cli(&["dead-letters", "redrive", "--all"]).await;
    assert_eq!(redriven.trim(), "redriven: 1");
    let outcome = worker.evaluate_claim(claim_next(&worker).await).await;
    assert!(matches!(outcome, Outcome::Done(_)), "{outcome:?}");
    assert_eq!(app.evaluation_count("post:lost").await, 1);
    assert!(dead_letters(&app).await.is_empty());
    let listed = app.run_cli(&["dead-letters", "list"]).await;
    assert_eq!(listed.trim(), "no dead letters", "an empty listing says so");
}

#[tokio::test]
async fn attempts_survive_a_redis_loss_mid_retry() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(20);
        s.schedule.max_attempts = 3;
    }))
    .await;
    app.send(&event("r1", "post:retry", "flag")).await;
    let worker = app
        .worker()
        .with_before_apply(poison_hook("post:retry", Arc::new(AtomicBool::new(true))));
    let outcome = worker.evaluate_claim(claim_next(&worker).await).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    assert_eq!(
        scalar!(
            app,
            "SELECT attempts::bigint FROM entity_failures WHERE entity = 'post:retry'"
        ),
        1
    );

    // Redis forgets the count; a new event schedules the entity again.
    app.lose_redis_data().await;
    app.send(&event("r2", "post:retry", "flag")).await;
    let outcome = worker.evaluate_claim(claim_next(&worker).await).await;
    assert!(matches!(outcome, Outcome::Failed(_)), "{outcome:?}");
    // The third attempt overall is the last, whatever Redis remembered.
    let outcome = worker.evaluate_claim(claim_next(&worker).await).await;
    assert!(matches!(outcome, Outcome::DeadLettered(_)), "{outcome:?}");
    let dead = dead_letters(&app).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["attempts"], 3);
    assert!(dead[0]["first_failure_ms"].as_i64() < dead[0]["last_failure_ms"].as_i64());
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM entity_failures WHERE entity = 'post:retry'"
        ),
        0,
        "the failure record ends with the dead letter"
    );
}

#[tokio::test]
async fn a_dead_letter_postgres_missed_is_recorded_from_redis_by_the_sweep() {
    let app = spawn_app(TestOptions::idle()).await;
    let ghost = EntityId::parse("post:missed").unwrap();
    app.backends
        .queue
        .schedule(&[(ghost.clone(), Priority::Critical)])
        .await
        .unwrap();
    let claim = claim_next(&app.worker()).await;
    // Dead-lettered in Redis only, as when Postgres was down at that moment.
    let failed = app
        .backends
        .queue
        .fail(&claim, "boom", true, None)
        .await
        .unwrap();
    assert!(
        matches!(failed, quiesce::queue::Failed::DeadLettered(_)),
        "{failed:?}"
    );
    assert!(dead_letters(&app).await.is_empty());

    let report = app.maintenance().sweep_once(None).await.unwrap().0;
    assert_eq!(report.dead_letters_recorded, 1);
    let dead = dead_letters(&app).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["entity"], "post:missed");
    assert_eq!(dead[0]["reason"], "fatal");
    assert_eq!(dead[0]["last_error"], "boom");
    // Recorded once, however many passes run.
    let again = app.maintenance().sweep_once(None).await.unwrap().0;
    assert_eq!(again.dead_letters_recorded, 0);
    assert_eq!(dead_letters(&app).await.len(), 1);
}
