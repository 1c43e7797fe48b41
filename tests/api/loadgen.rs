//! The load generator's own checks, on small runs: a debounced burst collapses to one
//! evaluation per entity with the right actions; per-event evaluation (a 1 ms window) on the
//! Sloan scenario is caught applying the wrong action.

use std::{sync::Arc, time::Duration};

use quiesce::{
    loadgen::{self, LoadConfig, Scenario},
    rules::RuleSet,
};
use secrecy::ExposeSecret;

use crate::helpers::{TestApp, TestOptions, spawn_app};

fn config(app: &TestApp, scenario: Scenario, events: usize, entities: usize) -> LoadConfig {
    LoadConfig {
        url: app.base.clone(),
        scenario,
        events,
        entities,
        rate: None,
        send_for: None,
        pause: Duration::ZERO,
        batch: 50,
        connections: 8,
        token: None,
        secret: None,
        source: None,
        database_url: Some(
            app.settings
                .database
                .database_url
                .expose_secret()
                .to_owned(),
        ),
        drain_timeout: Duration::from_secs(60),
        window: app.settings.schedule.debounce_window,
        run_id: uuid::Uuid::new_v4().simple().to_string()[..10].to_owned(),
        rules: Arc::new(RuleSet::default_rules()),
        seed: 7,
        progress: false,
        attributes: false,
        duplicates: 0.0,
    }
}

#[tokio::test]
async fn a_debounced_burst_collapses_to_one_evaluation_per_entity_with_the_right_actions() {
    // The window is wide enough that a slow machine's pauses between one entity's events do
    // not split its burst.
    let app = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(1500);
        s.schedule.max_wait = Duration::from_secs(20);
    }))
    .await;
    let report = loadgen::run(config(&app, Scenario::Burst, 3000, 100))
        .await
        .unwrap();
    assert_eq!(report.events_accepted, 3000);
    assert!(
        report.errors_by_status.is_empty(),
        "{:?}",
        report.errors_by_status
    );
    let drain = report.drain.unwrap();
    assert!(drain.drained);
    assert_eq!(drain.entities, 100);
    assert_eq!(drain.evaluations, 100, "one evaluation per entity");
    assert!(drain.expected_actions > 0, "the mix triggers rules");
    assert_eq!(drain.actions, drain.expected_actions);
    assert_eq!(drain.wrong_actions, 0);
    assert_eq!(drain.duplicate_actions, 0);
    assert_eq!(
        drain.fire_delays.len(),
        100,
        "every evaluation has a fire delay"
    );
    // The busiest one-second window holds some of these 100 evaluations, never more.
    assert!((1..=100).contains(&drain.evaluations_per_second_peak));
    // Every lock was released with its ack, none left to expire.
    let locks: Vec<String> = app
        .redis_keys()
        .await
        .into_iter()
        .filter(|k| k.contains(":lock:"))
        .collect();
    assert!(locks.is_empty(), "{locks:?}");
}

#[tokio::test]
async fn per_event_evaluation_of_the_sloan_scenario_is_reported_as_wrong() {
    let naive = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(1);
        s.schedule.max_wait = Duration::from_millis(1);
    }))
    .await;
    let mut sloan = config(&naive, Scenario::Sloan, 0, 3);
    // One request per event, in order: the flags are evaluated before the upvotes arrive.
    sloan.batch = 1;
    sloan.connections = 1;
    let report = loadgen::run(sloan).await.unwrap();
    let drain = report.drain.unwrap();
    assert!(drain.drained);
    assert_eq!(
        drain.expected_actions, 0,
        "the full picture calls for nothing"
    );
    assert!(
        drain.wrong_actions > 0,
        "the early flags hid valid posts: {drain:?}"
    );
    assert!(drain.evaluations > 3, "evaluated again and again");

    // A window that outlasts the send's pauses on a loaded machine (at 500 ms, a stalled send
    // split one post's burst in two).
    let debounced = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = Duration::from_secs(2);
        s.schedule.max_wait = Duration::from_secs(20);
    }))
    .await;
    let report = loadgen::run(config(&debounced, Scenario::Sloan, 0, 3))
        .await
        .unwrap();
    let drain = report.drain.unwrap();
    assert_eq!((drain.wrong_actions, drain.actions), (0, 0));
    assert_eq!(drain.evaluations, 3);
}

#[tokio::test]
async fn a_random_send_for_a_time_stops_then_checks_only_the_events_it_sent() {
    let app = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(300);
        s.schedule.max_wait = Duration::from_secs(20);
    }))
    .await;
    let planned = 1_000_000;
    let mut random = config(&app, Scenario::Random, planned, 200);
    random.batch = 20;
    random.connections = 2;
    random.send_for = Some(Duration::from_millis(500));
    random.pause = Duration::from_millis(20);
    let report = loadgen::run(random).await.unwrap();
    assert!(
        report.errors_by_status.is_empty(),
        "{:?}",
        report.errors_by_status
    );
    assert!((1..planned).contains(&report.events_sent), "stopped early");
    assert_eq!(report.events_sent, report.requests as usize * 20);
    assert_eq!(report.events_accepted, report.events_sent as u64);
    // Pauses of 10 ms on average: 2 connections make at most about 100 requests in 500 ms
    // (without them, a request takes a few milliseconds).
    assert!(report.requests <= 150, "{} requests", report.requests);
    let drain = report.drain.unwrap();
    assert!(drain.drained, "the checks wait for what was sent only");
    assert!((1..=200).contains(&drain.entities));
    assert_eq!((drain.wrong_actions, drain.duplicate_actions), (0, 0));
}

#[tokio::test]
async fn a_sender_that_resends_half_its_requests_gets_each_event_recorded_once() {
    let app = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(1500);
        s.schedule.max_wait = Duration::from_secs(20);
    }))
    .await;
    let mut retrying = config(&app, Scenario::Burst, 4000, 100);
    retrying.duplicates = 0.5;
    let report = loadgen::run(retrying).await.unwrap();
    assert!(
        report.errors_by_status.is_empty(),
        "{:?}",
        report.errors_by_status
    );
    assert_eq!(report.events_sent, 4000);
    assert_eq!(report.events_accepted, 2000, "the events sent fresh, once");
    assert_eq!(
        report.duplicates, 2000,
        "every re-sent event answered as a duplicate"
    );
    assert!(report.answered_per_second > report.events_per_second);
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored, 2000);
    let drain = report.drain.unwrap();
    assert!(drain.drained);
    assert_eq!(drain.entities, 100);
    assert_eq!(drain.actions, drain.expected_actions);
    assert_eq!((drain.wrong_actions, drain.duplicate_actions), (0, 0));
}
