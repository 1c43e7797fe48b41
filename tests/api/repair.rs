//! The repair sweep: entities that Postgres says are owed an evaluation are scheduled again
//! when Redis has lost them, so lost Redis data still ends in an evaluation.

use std::time::Duration;

use serde_json::json;

use crate::helpers::{TestOptions, event, scalar, spawn_app, wait_for};

#[tokio::test]
async fn the_sweep_reschedules_what_redis_lost_once_the_grace_has_passed() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.database.backend_timeout = Duration::from_secs(1);
        s.maintenance.sweep_grace = Duration::from_secs(3);
        s.schedule.debounce_window = Duration::from_secs(60);
        s.schedule.max_wait = Duration::from_secs(120);
    }))
    .await;
    let events: Vec<_> = (0..3)
        .map(|i| event(&format!("e{i}"), &format!("post:lost{i}"), "flag"))
        .collect();
    app.send(&json!(events)).await;
    app.lose_redis_data().await;
    let maintenance = app.maintenance();

    // Within the grace an ingest may still be on its way to Redis: nothing is touched.
    let (report, _) = maintenance.sweep_once(None).await.unwrap();
    assert!(report.ran);
    assert_eq!(report.repaired, 0);

    wait_for(
        Duration::from_secs(15),
        "the sweep to repair all three",
        || async { maintenance.sweep_once(None).await.unwrap().0.repaired == 3 },
    )
    .await;
    for i in 0..3 {
        let entity = quiesce::domain::EntityId::parse(&format!("post:lost{i}")).unwrap();
        let state = app.backends.queue.state_of(&entity).await.unwrap();
        assert!(state.due_at_ms.is_some(), "post:lost{i} is due again");
    }
    // What is already scheduled is left as it is.
    let (again, _) = maintenance.sweep_once(None).await.unwrap();
    assert_eq!((again.examined, again.repaired), (3, 0));

    // One sweep at a time: while another process holds the sweep lock, a pass does nothing.
    let lock_name = format!("quiesce-sweep:{}", app.settings.redis.redis_prefix);
    let held = app
        .backends
        .store
        .sweep()
        .begin_sweep(&lock_name)
        .await
        .unwrap()
        .expect("lock free");
    assert!(!maintenance.sweep_once(None).await.unwrap().0.ran);
    held.rollback().await.unwrap();
    assert!(maintenance.sweep_once(None).await.unwrap().0.ran);
}

#[tokio::test]
async fn the_sweeps_mark_is_committed_before_its_pass_ends() {
    // The mark's updates of entity rows are short transactions of their own: a pass that goes
    // on (Redis calls, more reads) holds no entity row, and what it marked is seen by all.
    let app = spawn_app(TestOptions::idle()).await;
    app.send(&json!([event("m1", "post:marked", "flag")])).await;
    // As after an evaluation that saw an earlier event: not pending, an event unevaluated.
    sqlx::query!("UPDATE entities SET pending_since = NULL WHERE entity = 'post:marked'")
        .execute(&app.pool)
        .await
        .unwrap();
    let store = &app.backends.store;
    let lock_name = format!("quiesce-sweep:{}", app.settings.redis.redis_prefix);
    // The event counts once the grace has passed since it was received (a pass reads up to
    // its transaction's start less the grace).
    wait_for(Duration::from_secs(10), "the grace to pass", || async {
        scalar!(app, "SELECT count(*) FROM events WHERE id = 'm1' AND received_at < now() - interval '300 ms'")
            == 1
    })
    .await;
    let mut pass = store
        .sweep()
        .begin_sweep(&lock_name)
        .await
        .unwrap()
        .expect("lock free");
    let marked = store
        .sweep()
        .mark_unevaluated(
            &mut pass,
            Duration::from_millis(200),
            Duration::from_secs(300),
        )
        .await
        .unwrap();
    assert_eq!(marked, 1);

    // The pass is still open: its mark is seen outside it, and ingest goes on for the entity.
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM entities WHERE entity = 'post:marked' AND pending_since IS NOT NULL"
        ),
        1
    );
    let sent = tokio::time::timeout(
        Duration::from_secs(10),
        app.post_events(&json!([event("m2", "post:marked", "flag")])),
    )
    .await;
    pass.rollback().await.unwrap();
    assert_eq!(sent.expect("answered while the pass is open").status(), 202);
}

#[tokio::test]
async fn entities_whose_schedule_redis_lost_are_still_evaluated_once() {
    let app = spawn_app(TestOptions::default().with(|s| {
        s.database.backend_timeout = Duration::from_secs(1);
        s.maintenance.sweep_grace = Duration::from_secs(1);
        s.maintenance.sweep_interval = Duration::from_millis(200);
        s.schedule.debounce_window = Duration::from_secs(3);
        s.schedule.max_wait = Duration::from_secs(30);
    }))
    .await;
    let events: Vec<_> = (0..200)
        .map(|i| event(&format!("e{i}"), &format!("post:{}", i % 20), "flag"))
        .collect();
    app.send(&json!(events)).await;
    // Redis restarts without persistence while the 20 entities wait for their window.
    app.lose_redis_data().await;

    app.wait_settled(Duration::from_secs(30)).await;
    // Every entity evaluated; a sweep that read an entity as owed just before its ack may
    // add one harmless extra evaluation.
    assert_eq!(app.count_evaluated_entities().await, 20);
    assert!(app.count_evaluations().await <= 40);
    assert_eq!(app.count_hidden().await, 20);
}
