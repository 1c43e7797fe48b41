//! No two evaluations of one entity run at once, across worker tasks and processes, and no
//! action is applied twice.

use std::{collections::HashMap, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use futures::{FutureExt, future::join_all};
use serde_json::{Value, json};

use crate::helpers::{TestOptions, claim_next, event, spawn_app, wait_for};

/// One evaluation: started, finished, by which worker.
type Run<'a> = (DateTime<Utc>, DateTime<Utc>, &'a str);

#[tokio::test]
async fn workers_in_two_processes_never_evaluate_one_entity_at_once() {
    // Widen each in-process evaluation so that overlaps, if the claim or lock let any through,
    // would be seen.
    let hook = Arc::new(|_snapshot| tokio::time::sleep(Duration::from_millis(40)).boxed());
    let app = spawn_app(TestOptions {
        before_apply: Some(hook),
        ..TestOptions::default().with(|s| {
            s.schedule.debounce_window = Duration::from_millis(10);
            s.schedule.max_wait = Duration::from_millis(100);
            s.worker.workers = 8;
        })
    })
    .await;
    let (mut process, _) = app.spawn_ready_worker_process("second-process").await;

    // Waves of flags on a few hot entities: each wave re-schedules them while earlier
    // evaluations may still run.
    let entities: Vec<String> = (0..12).map(|i| format!("post:hot{i}")).collect();
    for wave in 0..20 {
        let bodies: Vec<Value> = entities
            .iter()
            .map(|entity| json!([event(&format!("{entity}-w{wave}"), entity, "flag")]))
            .collect();
        join_all(bodies.iter().map(|b| app.send(b))).await;
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    app.wait_settled(Duration::from_secs(60)).await;

    let rows: Vec<(String, String, DateTime<Utc>, DateTime<Utc>)> =
        sqlx::query!(r#"SELECT entity, worker, started_at, finished_at AS "finished_at!" FROM evaluations ORDER BY entity, started_at"#)
            .fetch_all(&app.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|row| (row.entity, row.worker, row.started_at, row.finished_at))
            .collect();
    let mut by_entity: HashMap<&str, Vec<Run>> = HashMap::new();
    for (entity, worker, started, finished) in &rows {
        by_entity
            .entry(entity)
            .or_default()
            .push((*started, *finished, worker));
    }
    assert_eq!(by_entity.len(), entities.len());
    for (entity, runs) in &by_entity {
        for pair in runs.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1,
                "{entity}: an evaluation by {} started at {} before one by {} finished at {}",
                pair[1].2,
                pair[1].0,
                pair[0].2,
                pair[0].1
            );
        }
    }
    let workers: std::collections::HashSet<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    assert!(
        workers.contains("second-process"),
        "the second process took part: {workers:?}"
    );
    assert!(
        workers.contains("in-process"),
        "the in-process workers took part: {workers:?}"
    );

    // Each entity got 20 flags: at most one flag action and one hide action, ending hidden.
    let duplicated = app.count_duplicate_actions().await;
    assert_eq!(duplicated, 0, "an action was applied twice");
    assert_eq!(app.count_hidden().await, 12);

    process.start_kill().unwrap();
    process.wait().await.unwrap();
}

#[tokio::test]
async fn a_worker_process_exports_metrics_and_stops_cleanly_on_sigterm() {
    let app = spawn_app(TestOptions::idle()).await;
    let (mut process, metrics_address) = app.spawn_ready_worker_process("stopping").await;
    let pid = process.id().expect("running") as i32;
    // Wait until it is up and polling: its first claim leaves no trace, so give it work.
    app.send(&event("e1", "post:stop", "flag")).await;
    wait_for(
        Duration::from_secs(20),
        "the worker process to evaluate",
        || async { app.evaluation_count("post:stop").await == 1 },
    )
    .await;
    // A worker process has no API; its metrics listener is how it is scraped. The counter is
    // recorded after the ack, a moment after the evaluation row is committed.
    wait_for(
        Duration::from_secs(10),
        "the evaluation in the process's metrics",
        || async {
            let scrape = app
                .client
                .get(format!("http://{metrics_address}/metrics"))
                .send()
                .await
                .unwrap();
            scrape
                .text()
                .await
                .unwrap()
                .contains("quiesce_evaluations_total{outcome=\"done\"} 1")
        },
    )
    .await;

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), process.wait())
        .await
        .expect("exits after SIGTERM")
        .unwrap();
    assert!(status.success(), "exit status {status}");
}

#[tokio::test]
async fn json_logs_carry_the_evaluation_span_with_entity_and_evaluation_id() {
    let app = spawn_app(TestOptions::idle()).await;
    let mut command = app.worker_command("json-logs", None);
    command
        .env("QUIESCE_LOG_FORMAT", "json")
        .env("RUST_LOG", "info,quiesce=debug")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut process = command.spawn().expect("start quiesce worker");
    let events: Vec<_> = (0..10)
        .map(|i| event(&format!("j{i}"), "post:json", "flag"))
        .collect();
    app.send(&json!(events)).await;
    wait_for(Duration::from_secs(20), "the evaluation", || async {
        app.evaluation_count("post:json").await == 1
    })
    .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(process.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(20), async {
        use tokio::io::AsyncReadExt;
        let mut text = String::new();
        process
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut text)
            .await
            .unwrap();
        process
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut text)
            .await
            .unwrap();
        text
    })
    .await
    .expect("the worker stops on SIGTERM");
    // Every line is JSON; the action line is inside the evaluation span, which names the
    // entity and carries the evaluation id.
    let lines: Vec<serde_json::Value> = output
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let applied = lines
        .iter()
        .find(|l| l["fields"]["message"] == "action applied")
        .unwrap_or_else(|| panic!("no action line in {output}"));
    assert_eq!(applied["span"]["name"], "evaluation", "{applied}");
    assert_eq!(applied["span"]["entity"], "post:json", "{applied}");
    let evaluation = applied["span"]["evaluation"].as_str().unwrap();
    // A claim token: "<32 hex digits>:<n>:<max-wait anchor ms>".
    let parts: Vec<&str> = evaluation.split(':').collect();
    assert_eq!(parts.len(), 3, "{evaluation}");
    assert_eq!(parts[0].len(), 32, "{evaluation}");
}

/// The Redis fast path in front of the dedup constraint, at no round trip of its own: the ack
/// remembers the applied action's dedup key as the entity's last, the next lock reads it back,
/// and a decision with that key is dropped before it reaches Postgres.
#[tokio::test]
async fn the_ack_remembers_the_applied_dedup_key_and_the_lock_reads_it_back() {
    let app = spawn_app(TestOptions::idle()).await;
    let worker = app.worker();
    let mut redis = app.backends.queue.connection();
    let applied_key = |entity: &str| {
        let id = quiesce::domain::EntityId::parse(entity).unwrap();
        app.backends.queue.keys().for_entity(&id).applied(&id)
    };
    let flags = |entity: &str| -> Vec<Value> {
        (0..10)
            .map(|i| event(&format!("{entity}-{i}"), entity, "flag"))
            .collect()
    };

    // An action applied: the ack keeps its dedup key, as Postgres recorded it.
    app.send(&json!(flags("post:kept"))).await;
    let outcome = worker.evaluate_claim(claim_next(&worker).await).await;
    assert!(
        matches!(
            outcome,
            quiesce::worker::Outcome::Done(quiesce::store::Completion::Applied { .. })
        ),
        "{outcome:?}"
    );
    let recorded: String =
        sqlx::query_scalar("SELECT dedup_key FROM actions WHERE entity = 'post:kept'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let remembered: Option<String> = redis::cmd("GET")
        .arg(applied_key("post:kept"))
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(remembered.as_deref(), Some(recorded.as_str()));

    // A decision whose dedup key Redis remembers is dropped: the evaluation is recorded, and
    // no action with it.
    app.send(&json!(flags("post:known"))).await;
    let snapshot = app.snapshot("post:known").await;
    let rules = app.backends.rules.current();
    let verdict = rules.evaluate(&snapshot);
    let decision = verdict
        .to_apply(snapshot.status, None)
        .expect("ten flags hide");
    let _: () = redis::cmd("SET")
        .arg(applied_key("post:known"))
        .arg(snapshot.dedup_key(&decision.rule))
        .query_async(&mut redis)
        .await
        .unwrap();
    let outcome = worker.evaluate_claim(claim_next(&worker).await).await;
    assert!(
        matches!(
            outcome,
            quiesce::worker::Outcome::Done(quiesce::store::Completion::NoAction)
        ),
        "{outcome:?}"
    );
    assert_eq!(app.evaluation_count("post:known").await, 1);
    assert_eq!(
        app.status_of("post:known").await,
        quiesce::domain::Status::Visible
    );
    assert_eq!(app.count_actions().await, 1, "post:kept's alone");
}

/// An entity whose lock another claim holds is snoozed: given back for a short while without
/// using an attempt, and counted as lock contention (the alert's figure).
#[tokio::test]
async fn a_claim_that_finds_the_entity_locked_snoozes_without_using_an_attempt() {
    let app = spawn_app(TestOptions::idle()).await;
    let worker = app.worker();
    let id = quiesce::domain::EntityId::parse("post:held").unwrap();
    let lock = app.backends.queue.keys().for_entity(&id).lock(&id);
    let mut redis = app.backends.queue.connection();
    let _: () = redis::cmd("SET")
        .arg(&lock)
        .arg("held-elsewhere")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut redis)
        .await
        .unwrap();
    app.send(&json!([event("held-1", "post:held", "flag")]))
        .await;
    let outcome = worker.evaluate_claim(claim_next(&worker).await).await;
    assert!(
        matches!(outcome, quiesce::worker::Outcome::Snooze(_)),
        "{outcome:?}"
    );
    let holder: Option<String> = redis::cmd("GET")
        .arg(&lock)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(
        holder.as_deref(),
        Some("held-elsewhere"),
        "the lock is not taken"
    );
    assert!(
        app.backends
            .queue
            .state_of(&id)
            .await
            .unwrap()
            .due_at_ms
            .is_some(),
        "given back to the schedule"
    );
    assert_eq!(app.evaluation_count("post:held").await, 0);
    let failures: i64 = sqlx::query_scalar("SELECT count(*) FROM entity_failures")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(failures, 0, "no attempt used");
}
