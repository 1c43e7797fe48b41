//! The load the chaos and cluster suites run, and what must hold after it, read from
//! Postgres the way a queue checker accounts for every item: what went in came out, once.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use rand::Rng;
use serde_json::{Value, json};

use crate::helpers::{TestApp, event, scalar};

/// What the senders saw besides acceptances.
#[derive(Debug, Default)]
pub struct Tally {
    /// 503 answers, each retried.
    pub unavailable: AtomicU64,
    /// Events a retry found already recorded: an earlier attempt was committed but not
    /// answered 202 (the answer timed out after the commit).
    pub duplicates: AtomicU64,
}

/// Sends a request to the API at `base` until it is accepted: 503s and refused connections are retried, as a
/// webhook sender would; any other answer fails the test. Returns the accepted count.
pub async fn deliver_to(app: &TestApp, base: &str, body: &Value, tally: &Tally) -> u64 {
    loop {
        match app
            .client
            .post(format!("{base}/v1/events"))
            .json(body)
            .send()
            .await
        {
            Ok(response) if response.status() == 202 => {
                let reply: Value = response.json().await.unwrap();
                tally
                    .duplicates
                    .fetch_add(reply["duplicates"].as_u64().unwrap(), Ordering::Relaxed);
                return reply["accepted"].as_u64().unwrap();
            }
            Ok(response) if response.status() == 503 => {
                assert!(response.headers().get("retry-after").is_some());
                tally.unavailable.fetch_add(1, Ordering::Relaxed);
            }
            Ok(response) => panic!("unexpected status {}", response.status()),
            Err(error) => panic!("request failed: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `rounds` waves of one request per 100 events, over `entities` entities, about a third
/// flags; event ids start with `phase`, so that every call sends new events. Returns the
/// events accepted.
pub async fn run_load(
    app: &TestApp,
    phase: &str,
    rounds: usize,
    per_round: usize,
    entities: usize,
    tally: &Tally,
) -> u64 {
    run_load_via(
        app,
        std::slice::from_ref(&app.base),
        phase,
        rounds,
        per_round,
        entities,
        tally,
    )
    .await
}

/// [`run_load`] with its requests spread in turn over the APIs at `bases`.
pub async fn run_load_via(
    app: &TestApp,
    bases: &[String],
    phase: &str,
    rounds: usize,
    per_round: usize,
    entities: usize,
    tally: &Tally,
) -> u64 {
    let mut accepted = 0;
    for round in 0..rounds {
        let bodies: Vec<Value> = (0..per_round / 100)
            .map(|request| {
                let mut rng = rand::rng();
                json!(
                    (0..100)
                        .map(|i| {
                            let entity = format!("post:{}", rng.random_range(0..entities));
                            let signal = if rng.random_bool(0.35) {
                                "flag"
                            } else {
                                "upvote"
                            };
                            event(&format!("{phase}-r{round}-q{request}-{i}"), &entity, signal)
                        })
                        .collect::<Vec<_>>()
                )
            })
            .collect();
        let replies = futures::future::join_all(
            bodies
                .iter()
                .enumerate()
                .map(|(i, b)| deliver_to(app, &bases[i % bases.len()], b, tally)),
        )
        .await;
        accepted += replies.iter().sum::<u64>();
    }
    accepted
}

/// What must hold after any chaos, read from Postgres.
pub async fn check_accounting(app: &TestApp, accepted: u64) {
    assert_eq!(
        app.count_events().await as u64,
        accepted,
        "lost or doubled events"
    );
    assert_eq!(
        scalar!(
            app,
            "SELECT coalesce(sum(event_count), 0)::bigint FROM entity_counts"
        ) as u64,
        accepted,
        "counters out of step with events"
    );
    assert_eq!(
        app.count_unevaluated_events().await,
        0,
        "an entity's last events were never evaluated"
    );
    assert_eq!(
        app.count_stale_entities().await,
        0,
        "an entity's last evaluation is older than its last event"
    );
    assert_eq!(
        app.count_duplicate_actions().await,
        0,
        "an action was applied twice"
    );
    let dead: u64 = app
        .backends
        .queue
        .depths()
        .await
        .unwrap()
        .iter()
        .map(|d| d.dead)
        .sum();
    assert_eq!(dead, 0, "a healthy entity was dead-lettered");
}
