//! Bounded attempts and dead letters: a poison entity ends in the dead letters with its
//! reason, without holding up the others; fatal failures go there at once; outages do not use
//! up attempts; redrive evaluates a dead letter again.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::FutureExt;
use quiesce::{
    domain::{EntityId, Priority},
    worker::Outcome,
};
use serde_json::{Value, json};

use crate::helpers::{TestApp, TestOptions, claim_next, event, spawn_app, wait_for};

async fn dead_letters(app: &TestApp) -> Vec<Value> {
    let (status, body) = app.get("/v1/dead-letters").await;
    assert_eq!(status, 200, "{body}");
    body["dead_letters"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_poison_entity_is_dead_lettered_while_the_others_are_evaluated_and_redrive_works() {
    let poisoned = Arc::new(AtomicBool::new(true));
    let hook = {
        let poisoned = Arc::clone(&poisoned);
        Arc::new(move |snapshot: quiesce::domain::Snapshot| {
            let poison =
                poisoned.load(Ordering::SeqCst) && snapshot.entity.as_str() == "post:poison";
            async move {
                if poison {
                    panic!("this entity always crashes its evaluation");
                }
            }
            .boxed()
        })
    };
    let app = spawn_app(TestOptions {
        window: Duration::from_millis(100),
        max_attempts: 3,
        workers: 8,
        before_apply: Some(hook),
        ..Default::default()
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
            app.scalar(
                "SELECT count(DISTINCT entity) FROM evaluations WHERE entity <> 'post:poison'",
            )
            .await
                == 1000
        },
    )
    .await;
    // On time: the poison's retries hold no worker for long (bounded by the window, the
    // workers' throughput and a loaded machine, not by the poison's backoff).
    let slowest = app
        .scalar(
            "SELECT (1000 * extract(epoch FROM max(v.started_at - e.last_event_at)))::bigint
             FROM evaluations v JOIN entities e USING (entity) WHERE entity <> 'post:poison'",
        )
        .await;
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
    assert_eq!(
        app.scalar("SELECT event_count FROM entities WHERE entity = 'post:poison'")
            .await,
        11
    );
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
    assert_eq!(app.status_of("post:poison").await, "hidden");
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
    let outcome = worker.process(claim).await;
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
        backend_timeout: Duration::from_secs(1),
        window: Duration::from_millis(20),
        max_attempts: 2,
        ..TestOptions::idle()
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
        let outcome = worker.process(claim).await;
        assert!(matches!(outcome, Outcome::Retry(_)), "{outcome:?}");
    }
    assert!(dead_letters(&app).await.is_empty());

    postgres.restore();
    let claim = claim_next(&worker).await;
    let outcome = worker.process(claim).await;
    assert!(matches!(outcome, Outcome::Done(_)), "{outcome:?}");
    assert_eq!(app.status_of("post:outage").await, "hidden");
}

#[tokio::test]
async fn a_worker_that_dies_on_every_attempt_ends_in_the_dead_letters() {
    let app = spawn_app(TestOptions {
        window: Duration::from_millis(20),
        lease: Duration::from_millis(300),
        max_attempts: 2,
        ..TestOptions::idle()
    })
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
}
