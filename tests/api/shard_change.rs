//! Changing the shard count online: processes started with new `shards` and the old count as
//! `previous_shards` keep what the old layout holds there (max-wait anchors included) until it
//! is evaluated, put new entities in the new layout, move the old layout's dead letters where
//! redrive looks, and `quiesce shards` says when the old layout is empty. The same change under
//! load, with old and new processes side by side, is in the cluster suite.

use std::{sync::Arc, time::Duration};

use quiesce::{
    domain::{EntityId, EventBody, Priority},
    queue::{IndexKind, Queue},
    settings::Settings,
    startup::Backends,
    worker::Outcome,
};
use serde_json::json;

use crate::helpers::{TestApp, TestOptions, claim_next, event, spawn_app};

#[tokio::test]
async fn a_shard_count_change_drains_the_old_layout_with_its_anchors_and_dead_letters() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_secs(5);
        s.schedule.max_wait = Duration::from_secs(30);
        s.redis.shards = 4;
    }))
    .await;
    let held = EntityId::parse("post:held").unwrap();
    app.send(&json!([event("h1", "post:held", "flag")])).await;
    let anchor = app
        .backends
        .queue
        .max_wait_anchor(&held)
        .await
        .unwrap()
        .expect("an anchor in the old layout");
    // An entity that cannot be evaluated, dead-lettered in the old layout.
    let ghost = dead_lettered_ghost(&app).await;

    // The new processes: 8 shards, draining the 4.
    let (settings, new) = process_of(&app, 8, 4).await;
    let depths = new.queue.layout_depths().await.unwrap();
    assert_eq!((depths[0].shards, depths[0].draining), (8, false));
    assert_eq!((depths[1].shards, depths[1].draining), (4, true));
    assert_eq!(
        (depths[1].due, depths[1].pending, depths[1].dead),
        (1, 1, 1)
    );

    // A new event for an entity the old layout holds goes there, and keeps its first anchor.
    new.queue
        .schedule(&[(held.clone(), Priority::Critical)])
        .await
        .unwrap();
    assert_eq!(
        new.queue.max_wait_anchor(&held).await.unwrap(),
        Some(anchor)
    );
    // A new entity goes to the new layout.
    let fresh = EntityId::parse("post:fresh").unwrap();
    let body: EventBody = serde_json::from_value(event("f1", "post:fresh", "flag")).unwrap();
    new.store
        .events()
        .record_events(&[&body.into_event().unwrap()])
        .await
        .unwrap();
    new.queue
        .schedule(&[(fresh.clone(), Priority::Critical)])
        .await
        .unwrap();
    let depths = new.queue.layout_depths().await.unwrap();
    assert_eq!((depths[0].due, depths[0].pending), (1, 1), "the new entity");
    assert_eq!(
        (depths[1].due, depths[1].pending),
        (1, 1),
        "the held entity"
    );

    // The dead letter stays in the old layout (old processes look nowhere else), dead there.
    assert!(new.queue.is_dead_lettered(&ghost).await.unwrap());
    new.queue
        .schedule(&[(ghost.clone(), Priority::Critical)])
        .await
        .unwrap();
    assert_eq!(
        new.queue.state_of(&ghost).await.unwrap().due_at_ms,
        None,
        "a dead letter is not scheduled in either layout"
    );

    // A new worker claims from both layouts; the old one is drained but for the dead letter.
    let new_worker = new.worker(&settings);
    let mut evaluated = Vec::new();
    for _ in 0..2 {
        let claim = claim_next(&new_worker).await;
        evaluated.push(claim.entity.clone());
        assert!(matches!(
            new_worker.evaluate_claim(claim).await,
            Outcome::Done(_)
        ));
    }
    evaluated.sort();
    assert_eq!(evaluated, vec![fresh.clone(), held.clone()]);
    let depths = new.queue.layout_depths().await.unwrap();
    assert!(depths[1].is_drained());
    assert_eq!((depths[0].dead, depths[1].dead), (0, 1));
    let new_count = [("QUIESCE_SHARDS", "8"), ("QUIESCE_PREVIOUS_SHARDS", "4")];
    let report = app.run_cli_with(&["shards"], &new_count).await;
    assert!(
        report.contains(
            "the 4 shards drained hold only 1 dead letters: once every process runs 8 shards"
        ),
        "{report}"
    );

    // Every process runs 8 shards now: the dead letter moves, and stays dead.
    let report = app
        .run_cli_with(&["shards", "--move-dead-letters"], &new_count)
        .await;
    assert!(
        report.contains("dead letters moved to the current layout: 1 (0 recorded in Postgres first; 1 left the draining layout)"),
        "{report}"
    );
    assert!(
        report.contains("the 4 shards drained are empty: set previous_shards to 0"),
        "{report}"
    );
    assert!(
        report.contains("8 shards\tdue=0\tpending=0\tin_flight=0\tdead=1"),
        "{report}"
    );
    let (_, retired) = process_of(&app, 8, 0).await;
    assert!(retired.queue.is_dead_lettered(&ghost).await.unwrap());

    // Redrive finds the dead letter where it moved and makes it due again.
    assert!(
        quiesce::dead_letters::redrive(
            &new.store,
            &new.queue,
            &ghost,
            &quiesce::domain::Actor::named("test", None),
        )
        .await
        .unwrap()
    );
    assert!(is_due(&new.queue, &ghost).await);
}

#[tokio::test]
async fn a_redrive_during_a_change_takes_the_dead_letter_out_of_the_old_layout() {
    let app = spawn_app(TestOptions::idle().with(|s| s.redis.shards = 4)).await;
    let ghost = dead_lettered_ghost(&app).await;
    let (settings, new) = process_of(&app, 8, 4).await;
    // The repair sweep of a new process leaves it where it is: Postgres' record is in Redis
    // (in the old layout), and a copy in the new one would outlive a redrive by an old process.
    let sweep = new.maintenance(&settings).sweep_once(None).await.unwrap().0;
    assert!(sweep.ran);
    assert_eq!(sweep.dead_letters_restored, 0);
    let depths = new.queue.layout_depths().await.unwrap();
    assert_eq!((depths[0].dead, depths[1].dead), (0, 1));
    // A redrive by a new process takes it out of the old layout and makes it due in the new.
    assert!(
        quiesce::dead_letters::redrive(
            &new.store,
            &new.queue,
            &ghost,
            &quiesce::domain::Actor::named("test", None),
        )
        .await
        .unwrap()
    );
    let depths = new.queue.layout_depths().await.unwrap();
    assert_eq!((depths[0].dead, depths[1].dead), (0, 0));
    assert_eq!(depths[0].due, 1);
    // Its next events schedule it in the new layout: it is dead in neither.
    new.queue
        .schedule(&[(ghost.clone(), Priority::Critical)])
        .await
        .unwrap();
    assert!(is_due(&new.queue, &ghost).await);
}

#[tokio::test]
async fn an_old_process_leaves_the_new_layouts_shards_in_the_index_until_they_are_empty() {
    let app = spawn_app(TestOptions::idle().with(|s| s.redis.shards = 4)).await;
    let (settings, new) = process_of(&app, 8, 4).await;
    let index = new.queue.keys().index().times(IndexKind::Due);
    let redis = new.queue.connection();
    let in_index = |shard: String| {
        let (index, mut redis) = (index.clone(), redis.clone());
        async move {
            let score: Option<f64> = redis::cmd("ZSCORE")
                .arg(index)
                .arg(shard)
                .query_async(&mut redis)
                .await
                .unwrap();
            score.is_some()
        }
    };

    // Due in the new layout: a process of the old count reads its shard and leaves it alone.
    let due = EntityId::parse("post:new-layout").unwrap();
    new.queue
        .schedule(&[(due.clone(), Priority::Critical)])
        .await
        .unwrap();
    let shard = new.queue.keys().shard_of(&due);
    let old_worker = app.worker();
    assert!(old_worker.claim_once(10).await.unwrap().claims.is_empty());
    assert!(in_index(shard.id()).await, "the old process kept the shard");
    let claims = new.worker(&settings).claim_once(10).await.unwrap().claims;
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].entity, due);

    // An index entry of the new layout whose shard holds nothing: the old process drops it.
    let gone = EntityId::parse("post:gone").unwrap();
    new.queue
        .schedule(&[(gone.clone(), Priority::Critical)])
        .await
        .unwrap();
    let shard = new.queue.keys().shard_of(&gone);
    let keys = new.queue.keys().for_shard(shard);
    let _: () = redis::pipe()
        .zrem(keys.due(), gone.as_str())
        .hdel(keys.pending(), gone.as_str())
        .exec_async(&mut redis.clone())
        .await
        .unwrap();
    assert!(in_index(shard.id()).await);
    assert!(old_worker.claim_once(10).await.unwrap().claims.is_empty());
    assert!(
        !in_index(shard.id()).await,
        "the empty shard left the index"
    );
}

/// Dead-letters `post:ghost` (scheduled but unknown to Postgres: it can never be evaluated) in
/// the app's layout.
async fn dead_lettered_ghost(app: &TestApp) -> EntityId {
    let ghost = EntityId::parse("post:ghost").unwrap();
    app.backends
        .queue
        .schedule(&[(ghost.clone(), Priority::Critical)])
        .await
        .unwrap();
    let worker = app.worker();
    let claim = claim_next(&worker).await;
    assert_eq!(claim.entity, ghost);
    assert!(matches!(
        worker.evaluate_claim(claim).await,
        Outcome::DeadLettered(_)
    ));
    ghost
}

/// The settings and backends of a process started with `shards` after `previous`.
async fn process_of(app: &TestApp, shards: u16, previous: u16) -> (Settings, Backends) {
    let mut settings = app.settings.clone();
    settings.redis.shards = shards;
    settings.redis.previous_shards = previous;
    let backends = Backends::connect(&settings, Arc::clone(&app.backends.rules))
        .await
        .unwrap();
    (settings, backends)
}

async fn is_due(queue: &Queue, entity: &EntityId) -> bool {
    queue.state_of(entity).await.unwrap().due_at_ms.is_some()
}
