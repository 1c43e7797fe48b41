//! Reads from a real streaming replica (`database_read_url` on HAProxy's read-only port): the
//! reads that may be a moment stale are served there, go to the primary while its replay lags
//! past `read_max_lag`, come back when it catches up, and a backtest on it is refused nothing.
//! The replicas' replay is paused (`postgres-ha.sh replay-pause`: `pg_wal_replay_pause()`, with
//! Patroni in maintenance mode, which would resume it) under the rig's steady load, so their
//! lag grows by a second a second while the primary goes on committing. A replica that
//! does not answer at all is the API suite's `read_replica` test (a cut connection).

use std::time::Duration;

use serde_json::{Value, json};

use crate::checks::{Rig, gauge};
use crate::cluster::ha;
use crate::helpers::{free_address, wait_for};
use crate::{Load, scopeguard};

/// The replay lag past which reads go to the primary, in this test.
const MAX_LAG: &str = "5s";

/// `scripts/dev/postgres-ha.sh replay-resume`, run while a failed test unwinds too.
fn resume_replay() {
    let _ = std::process::Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/dev/postgres-ha.sh"
        ))
        .arg("replay-resume")
        .status();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "HA suite: make ha"]
async fn reads_go_to_the_replica_to_the_primary_while_it_lags_and_a_backtest_there_is_refused_nothing()
 {
    let rig = Rig::start("replica").await;
    let load = Load::start(&rig, "replica");
    load.warm_up(&rig).await;
    // A serve process reading from HAProxy's read-only port, the same database's name.
    let read_base = std::env::var("QUIESCE_HA_READ_URL")
        .expect("QUIESCE_HA_READ_URL names HAProxy's read-only port: run the suite with make ha");
    let write_url =
        secrecy::ExposeSecret::expose_secret(&rig.app.settings.database.database_url).to_owned();
    let database = write_url
        .rsplit_once('/')
        .unwrap()
        .1
        .split('?')
        .next()
        .unwrap();
    let read_url = format!("{}/{database}", read_base.rsplit_once('/').unwrap().0);
    let listen = free_address();
    let metrics = free_address();
    let mut reader = rig
        .app
        .serve_command("ha-reader", listen)
        .env("QUIESCE_DATABASE_READ_URL", &read_url)
        .env("QUIESCE_READ_MAX_LAG", MAX_LAG)
        .env("QUIESCE_METRICS_LISTEN", metrics.to_string())
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .expect("start the reading serve process");
    rig.app
        .wait_healthy("the reading serve process", listen)
        .await;
    let metrics = format!("http://{metrics}");
    let api = format!("http://{listen}");
    let client = reqwest::Client::new();
    let entity_status = |entity: &str| {
        let request = client.get(format!("{api}/v1/entities/{entity}"));
        async move { request.send().await.map_or(0, |r| r.status().as_u16()) }
    };
    wait_for(Duration::from_secs(30), "the replica in use", || async {
        gauge(&metrics, "quiesce_replica_in_use").await == 1.0
    })
    .await;

    // Served there: with replay paused, an entity the primary acknowledged is not found.
    let _resume = scopeguard(resume_replay);
    ha(&["replay-pause"]).await;
    // Acknowledged by the primary (counted with the load's events by the checks at the end).
    load.sender
        .send_one("replica-probe-1", "post:replica-probe", "flag")
        .await;
    // Within read_max_lag of the pause the read is served there. (A lag check that times out
    // on a busy machine sends a read to the primary for a second: the read is tried again.)
    wait_for(
        Duration::from_secs(4),
        "a read of the acknowledged entity served by the paused replica (404)",
        || async { entity_status("post:replica-probe").await == 404 },
    )
    .await;

    // Past read_max_lag its reads go to the primary, which has the entity.
    wait_for(
        Duration::from_secs(30),
        "reads to go to the primary while the replica lags",
        || async {
            gauge(&metrics, "quiesce_replica_in_use").await == 0.0
                && entity_status("post:replica-probe").await == 200
        },
    )
    .await;
    let lag = gauge(&metrics, "quiesce_replica_lag_seconds").await;
    assert!(lag > 5.0, "the lag measured past read_max_lag: {lag}");

    // Replay resumed: the replica catches up and is read again.
    ha(&["replay-resume"]).await;
    wait_for(
        Duration::from_secs(30),
        "the replica in use again",
        || async { gauge(&metrics, "quiesce_replica_in_use").await == 1.0 },
    )
    .await;
    assert_eq!(entity_status("post:replica-probe").await, 200);

    // A backtest reads there (READ ONLY transactions) and is refused nothing.
    let rules = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/default.toml"))
        .unwrap();
    let backtest = client
        .post(format!("{api}/v1/rules/backtest"))
        .json(&json!({"rules": rules, "since": "1h"}))
        .send()
        .await
        .unwrap();
    let status = backtest.status();
    let report: Value = backtest.json().await.unwrap();
    assert_eq!(status, 200, "a backtest on the replica: {report}");
    assert_eq!(
        gauge(&metrics, "quiesce_replica_in_use").await,
        1.0,
        "the backtest ran while the replica was in use"
    );
    let replayed = report["coverage"]["evaluations"].as_i64().unwrap_or(-1);
    assert!(replayed > 0, "the backtest replayed evaluations: {report}");

    let sender = load.finish().await;
    rig.wait_settled(Duration::from_secs(90)).await;
    let counts = rig.check(&sender).await;
    reader.start_kill().unwrap();
    let _ = reader.wait().await;
    eprintln!(
        "ha replica: reads served by the paused replica (404 for an acknowledged entity), by the \
         primary once its lag passed {MAX_LAG} ({lag:.1} s measured), by the replica again after \
         replay resumed; a backtest there replayed {replayed} evaluations; {counts}"
    );
}
