//! Wake-ups across processes: a worker process that found nothing due sleeps up to its poll
//! interval, but what another process makes due sooner (a critical event, a new due time
//! earlier than any it knew of) reaches it on the wake channel at once.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{TestOptions, spawn_app, wait_for};

fn event(entity: &str, priority: &str) -> Value {
    json!([{
        "id": format!("{entity}-1"), "entity": entity, "type": "flag",
        "actor": "user:1", "priority": priority
    }])
}

#[tokio::test]
async fn a_sleeping_worker_process_is_woken_by_events_another_process_schedules() {
    let app = spawn_app(
        TestOptions::idle().with(|s| s.schedule.debounce_window = Duration::from_millis(300)),
    )
    .await;
    // A poll interval far longer than anything this test waits for: only a wake-up gets the
    // entities claimed in time.
    let mut worker = app
        .worker_command("sleeper", None)
        .env("QUIESCE_POLL_INTERVAL", "10m")
        .spawn()
        .expect("start quiesce worker");
    let evaluated = |entity: &'static str| {
        let app = &app;
        move || async move { app.evaluation_count(entity).await == 1 }
    };
    // The process's first polls find this entity; once it is evaluated, the process has
    // nothing due and sleeps for its poll interval.
    app.send(&event("post:first", "critical")).await;
    wait_for(
        Duration::from_secs(30),
        "the worker process to evaluate its first entity",
        evaluated("post:first"),
    )
    .await;
    assert!(
        worker.try_wait().unwrap().is_none(),
        "the worker process runs"
    );

    // A critical event, then one whose window makes it due soon: each is told on the wake
    // channel, so the sleeping process claims it long before its poll interval.
    for (entity, priority) in [("post:critical", "critical"), ("post:windowed", "normal")] {
        let sent = Instant::now();
        app.send(&event(entity, priority)).await;
        wait_for(
            Duration::from_secs(20),
            &format!("{entity} to be evaluated by the sleeping process"),
            evaluated(entity),
        )
        .await;
        eprintln!(
            "wakeups: {entity} ({priority}) evaluated {:?} after it was sent",
            sent.elapsed()
        );
    }
    worker.kill().await.ok();
}
