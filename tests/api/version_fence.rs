//! The version fence: an evaluation whose snapshot version is overtaken writes nothing and is
//! retried on the new version.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::FutureExt;
use quiesce::domain::Status;
use serde_json::json;

use crate::helpers::{TestApp, TestOptions, event, scalar, spawn_app, wait_for};

/// One fenced statement for these evaluations, waiting on rows held elsewhere.
async fn record_waiting(
    app: &TestApp,
    evaluations: &[quiesce::store::FencedEvaluation],
) -> Result<HashMap<String, quiesce::store::Recorded>, quiesce::store::StoreError> {
    app.backends
        .store
        .evaluations()
        .record_fenced_evaluations("test", evaluations)
        .await
}

/// What a worker hands the store for one evaluation of this snapshot.
fn fenced(
    snapshot: &quiesce::domain::Snapshot,
    verdict: &quiesce::rules::Verdict,
    decision: Option<&quiesce::rules::Decision>,
) -> quiesce::store::FencedEvaluation {
    quiesce::store::FencedEvaluation {
        snapshot: snapshot.clone(),
        verdict: verdict.clone(),
        decision: decision.cloned(),
        started_at: chrono::Utc::now(),
        due_at: None,
        trace: None,
        statement: None,
        label_statements: Vec::new(),
    }
}

/// Sends one upvote for each entity.
async fn upvote_each(app: &TestApp, entities: &[&str]) {
    let events: Vec<_> = entities
        .iter()
        .map(|entity| event(&format!("{entity}-upvote"), entity, "upvote"))
        .collect();
    app.send(&json!(events)).await;
}

/// Sends ten flags for the entity (the default rules hide it) and returns what an evaluation
/// reads and decides: its snapshot, the verdict and the decision.
async fn flagged_ten_times(
    app: &TestApp,
    entity: &str,
) -> (
    quiesce::domain::Snapshot,
    quiesce::rules::Verdict,
    Option<quiesce::rules::Decision>,
) {
    let events: Vec<_> = (0..10)
        .map(|i| event(&format!("{entity}-flag-{i}"), entity, "flag"))
        .collect();
    app.send(&json!(events)).await;
    let snapshot = app.snapshot(entity).await;
    let verdict = app.backends.rules.current().evaluate(&snapshot);
    let decision = verdict.to_apply(snapshot.status, None).cloned();
    (snapshot, verdict, decision)
}

#[tokio::test]
async fn an_overtaken_evaluation_writes_nothing_and_is_retried() {
    // Between the snapshot and the write, a moderator changes the entity (bumping its version).
    let database_url = Arc::new(std::sync::Mutex::new(String::new()));
    let calls = Arc::new(AtomicUsize::new(0));
    let hook = {
        let (database_url, calls) = (Arc::clone(&database_url), Arc::clone(&calls));
        Arc::new(move |snapshot: quiesce::domain::Snapshot| {
            let (database_url, calls) = (Arc::clone(&database_url), Arc::clone(&calls));
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    let url = database_url.lock().unwrap().clone();
                    let pool = sqlx::PgPool::connect(&url).await.unwrap();
                    sqlx::query!("UPDATE entities SET moderation_version = moderation_version + 1 WHERE entity = $1", snapshot.entity.as_str())
                        .execute(&pool)
                        .await
                        .unwrap();
                    pool.close().await;
                }
            }
            .boxed()
        })
    };
    let app = spawn_app(TestOptions {
        before_apply: Some(hook),
        ..TestOptions::default().with(|s| s.schedule.debounce_window = Duration::from_millis(50))
    })
    .await;
    *database_url.lock().unwrap() =
        secrecy::ExposeSecret::expose_secret(&app.settings.database.database_url).to_owned();

    let events: Vec<_> = (0..10)
        .map(|i| event(&format!("f{i}"), "post:fenced", "flag"))
        .collect();
    app.send(&json!(events)).await;
    app.wait_settled(Duration::from_secs(20)).await;

    assert!(
        calls.load(Ordering::SeqCst) >= 2,
        "the overtaken evaluation was retried"
    );
    // Only the retry wrote: one evaluation row, one action applied on top of version 1.
    assert_eq!(app.evaluation_count("post:fenced").await, 1);
    let (applied_version, moderation_version) = sqlx::query!(
        "SELECT a.applied_version, e.moderation_version FROM actions a JOIN entities e USING (entity)
         WHERE entity = 'post:fenced'",
    )
    .fetch_one(&app.pool)
    .await
    .map(|row| (row.applied_version, row.moderation_version))
    .unwrap();
    assert_eq!((applied_version, moderation_version), (1, 2));
    assert_eq!(app.count_actions().await, 1);
}

#[tokio::test]
async fn the_store_refuses_a_write_on_a_stale_version() {
    let app = spawn_app(TestOptions::idle()).await;
    let (snapshot, verdict, decision) = flagged_ten_times(&app, "post:stale").await;
    let entity = snapshot.entity.clone();
    let store = &app.backends.store;
    assert_eq!(
        decision.as_ref().unwrap().action,
        quiesce::domain::Action::Hide
    );
    sqlx::query!("UPDATE entities SET moderation_version = 5 WHERE entity = 'post:stale'")
        .execute(&app.pool)
        .await
        .unwrap();

    let result = store
        .evaluations()
        .complete_evaluation("test", &fenced(&snapshot, &verdict, decision.as_ref()))
        .await;
    assert!(
        matches!(
            result,
            Err(quiesce::store::StoreError::VersionConflict { read: 0 })
        ),
        "{result:?}"
    );
    assert_eq!(app.count_actions().await, 0);
    assert_eq!(app.count_outbox().await, 0);
    assert_eq!(app.count_evaluations().await, 0);
    assert_eq!(app.status_of("post:stale").await, Status::Visible);

    // The same decision on a fresh snapshot applies, once.
    let fresh = store
        .snapshots()
        .snapshot(&entity, false)
        .await
        .unwrap()
        .unwrap();
    let done = store
        .evaluations()
        .complete_evaluation("test", &fenced(&fresh, &verdict, decision.as_ref()))
        .await
        .unwrap();
    assert!(matches!(done, quiesce::store::Completion::Applied { .. }));
    // Replaying the same decision on the same snapshot (a retry after a crash) writes nothing:
    // the dedup key already exists and the version has moved on.
    let replay = store
        .evaluations()
        .complete_evaluation("test", &fenced(&fresh, &verdict, decision.as_ref()))
        .await;
    assert!(
        matches!(
            replay,
            Err(quiesce::store::StoreError::VersionConflict { .. })
        ),
        "{replay:?}"
    );
    assert_eq!(app.count_actions().await, 1);
}

#[tokio::test]
async fn a_batch_of_evaluations_records_the_current_ones_and_fences_out_the_stale_one() {
    let app = spawn_app(TestOptions::idle()).await;
    let names = ["post:batch-a", "post:batch-b", "post:batch-c"];
    upvote_each(&app, &names).await;
    let store = &app.backends.store;
    let snapshots = store
        .snapshots()
        .many(
            &names,
            false,
            &quiesce::domain::Windows::NONE,
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(snapshots.len(), 3, "one statement reads all three");
    // A moderator moves post:batch-b on after the snapshot.
    sqlx::query!("UPDATE entities SET moderation_version = 7 WHERE entity = 'post:batch-b'")
        .execute(&app.pool)
        .await
        .unwrap();

    let rules = app.backends.rules.current();
    let verdicts: Vec<_> = names
        .iter()
        .map(|name| rules.evaluate(&snapshots[*name]))
        .collect();
    let batch: Vec<_> = names
        .iter()
        .zip(&verdicts)
        .map(|(name, verdict)| fenced(&snapshots[*name], verdict, None))
        .collect();
    let recorded = record_waiting(&app, &batch).await.unwrap();

    let mut recorded: Vec<_> = recorded.into_keys().collect();
    recorded.sort();
    assert_eq!(recorded, ["post:batch-a", "post:batch-c"]);
    assert_eq!(app.evaluation_count("post:batch-a").await, 1);
    assert_eq!(app.evaluation_count("post:batch-b").await, 0, "fenced out");
    assert_eq!(app.evaluation_count("post:batch-c").await, 1);
    let evaluated: Vec<(String, i64, i64)> = sqlx::query!(
        "SELECT entity, evaluated_event_count, evaluation_count FROM entities ORDER BY entity",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| (row.entity, row.evaluated_event_count, row.evaluation_count))
    .collect();
    assert_eq!(
        evaluated,
        [
            ("post:batch-a".to_owned(), 1, 1),
            ("post:batch-b".to_owned(), 0, 0),
            ("post:batch-c".to_owned(), 1, 1),
        ]
    );

    // One entity twice in a batch would pass the fence twice: refused, nothing written.
    let twice = [batch[0].clone(), batch[0].clone()];
    let refused = record_waiting(&app, &twice).await;
    assert!(
        matches!(refused, Err(quiesce::store::StoreError::Corrupt(_))),
        "{refused:?}"
    );
    assert_eq!(app.evaluation_count("post:batch-a").await, 1);
}

#[tokio::test]
async fn a_decision_whose_dedup_key_exists_is_recorded_without_a_second_action() {
    // A retry after a crash between commit and ack finds its action already stored.
    let app = spawn_app(TestOptions::idle()).await;
    let (snapshot, verdict, decision) = flagged_ten_times(&app, "post:dedup").await;
    let decision = decision.unwrap();
    sqlx::query!(
        "INSERT INTO actions (entity, action, rule, reason, previous_status, new_status,
                              snapshot, applied_version, dedup_key)
         VALUES ('post:dedup', 'hide', $1, 'earlier', 'visible', 'hidden', '{}', 0, $2)",
        &decision.rule,
        snapshot.dedup_key(&decision.rule)
    )
    .execute(&app.pool)
    .await
    .unwrap();

    let batch = [fenced(&snapshot, &verdict, Some(&decision))];
    let recorded = record_waiting(&app, &batch).await.unwrap();
    assert_eq!(
        recorded.get("post:dedup"),
        Some(&quiesce::store::Recorded { action_id: None })
    );
    assert!(matches!(
        batch[0].completion(recorded.get("post:dedup")),
        Ok(quiesce::store::Completion::AlreadyApplied)
    ));
    assert_eq!(app.count_actions().await, 1);
    assert_eq!(app.count_outbox().await, 0);
    assert_eq!(app.evaluation_count("post:dedup").await, 1);
    let (status, version) = sqlx::query!(
        "SELECT status, moderation_version FROM entities WHERE entity = 'post:dedup'",
    )
    .fetch_one(&app.pool)
    .await
    .map(|row| (row.status, row.moderation_version))
    .unwrap();
    assert_eq!(
        (status.as_str(), version),
        ("visible", 0),
        "no second status change"
    );
}

#[tokio::test]
async fn concurrent_evaluations_share_statements_and_each_gets_its_own_outcome() {
    // 40 entities: every even one has 10 flags (the default rules hide it), every odd one an
    // upvote; every fifth is overtaken by a moderator between its snapshot and its write.
    let app = spawn_app(TestOptions::idle()).await;
    let entities: Vec<String> = (0..40).map(|i| format!("post:shared-{i}")).collect();
    let mut events = Vec::new();
    for (i, entity) in entities.iter().enumerate() {
        if i % 2 == 0 {
            events.extend((0..10).map(|n| event(&format!("s{i}-{n}"), entity, "flag")));
        } else {
            events.push(event(&format!("s{i}"), entity, "upvote"));
        }
    }
    app.send(&json!(events)).await;
    let batches =
        quiesce::worker::EvaluationBatches::start(app.backends.store.clone(), "test".into());
    let rules = app.backends.rules.current();
    let runs = entities.iter().enumerate().map(|(i, name)| {
        let (batches, rules, pool) = (batches.clone(), rules.clone(), app.pool.clone());
        let entity = quiesce::domain::EntityId::parse(name).unwrap();
        async move {
            let snapshot = batches
                .snapshot(
                    &entity,
                    false,
                    &quiesce::domain::Windows::NONE,
                    Default::default(),
                )
                .await
                .unwrap()
                .unwrap();
            assert_eq!(snapshot.entity, entity, "each caller gets its own snapshot");
            if i % 5 == 0 {
                sqlx::query!(
                    "UPDATE entities SET moderation_version = 3 WHERE entity = $1",
                    entity.as_str()
                )
                .execute(&pool)
                .await
                .unwrap();
            }
            let verdict = rules.evaluate(&snapshot);
            let decision = verdict.to_apply(snapshot.status, None).cloned();
            let completion = batches
                .complete(quiesce::store::FencedEvaluation {
                    snapshot,
                    verdict,
                    decision,
                    started_at: chrono::Utc::now(),
                    due_at: None,
                    trace: None,
                    statement: None,
                    label_statements: Vec::new(),
                })
                .await;
            (i, completion)
        }
    });
    for (i, completion) in futures::future::join_all(runs).await {
        match (i % 5 == 0, i % 2 == 0, completion) {
            (true, _, Err(quiesce::store::StoreError::VersionConflict { read: 0 })) => {}
            (false, true, Ok(quiesce::store::Completion::Applied { .. })) => {}
            (false, false, Ok(quiesce::store::Completion::NoAction)) => {}
            (_, _, other) => panic!("entity {i}: {other:?}"),
        }
    }
    // 8 fenced out; of the 32 recorded, the 16 flagged ones (even, not a multiple of 5) hidden.
    assert_eq!(app.count_evaluations().await, 32);
    assert_eq!(app.count_actions().await, 16);
    assert_eq!(app.count_outbox().await, 16);
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM entities e JOIN actions a USING (entity)
             JOIN evaluations v ON v.action_id = a.id
             WHERE e.status = 'hidden' AND e.moderation_version = 1 AND a.applied_version = 0"
        ),
        16,
        "each action's entity, status, version and evaluation agree"
    );
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM outbox o JOIN actions a ON a.dedup_key = o.idempotency_key
             WHERE o.payload->>'action_id' = a.id::text AND o.payload->>'status' = 'hidden'
               AND o.payload->>'moderation_version' = '1'"
        ),
        16
    );
    let unknown = quiesce::domain::EntityId::parse("post:never-seen").unwrap();
    assert!(
        batches
            .snapshot(
                &unknown,
                false,
                &quiesce::domain::Windows::NONE,
                Default::default()
            )
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_row_locked_elsewhere_does_not_hold_up_the_evaluations_sharing_its_statement() {
    // The statement timeout is far beyond the wait below: the free entities must not be waiting
    // for the held row at all.
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.database.backend_timeout = Duration::from_secs(20);
        s.maintenance.sweep_grace = Duration::from_secs(20);
    }))
    .await;
    let names = ["post:held", "post:free-1", "post:free-2"];
    upvote_each(&app, &names).await;
    let batches =
        quiesce::worker::EvaluationBatches::start(app.backends.store.clone(), "test".into());
    let rules = app.backends.rules.current();
    let mut snapshots = Vec::new();
    for name in names {
        let entity = quiesce::domain::EntityId::parse(name).unwrap();
        snapshots.push(
            batches
                .snapshot(
                    &entity,
                    false,
                    &quiesce::domain::Windows::NONE,
                    Default::default(),
                )
                .await
                .unwrap()
                .unwrap(),
        );
    }
    // Another transaction holds post:held's row.
    let mut blocker =
        <sqlx::PgConnection as sqlx::Connection>::connect_with(&app.pool.connect_options())
            .await
            .unwrap();
    let mut hold = sqlx::Connection::begin(&mut blocker).await.unwrap();
    sqlx::query!("SELECT 1 AS held FROM entities WHERE entity = 'post:held' FOR UPDATE")
        .fetch_one(&mut *hold)
        .await
        .unwrap();

    let tasks: Vec<_> = snapshots
        .into_iter()
        .map(|snapshot| {
            let (batches, verdict) = (batches.clone(), rules.evaluate(&snapshot));
            tokio::spawn(async move {
                batches
                    .complete(quiesce::store::FencedEvaluation {
                        snapshot,
                        verdict,
                        decision: None,
                        started_at: chrono::Utc::now(),
                        due_at: None,
                        trace: None,
                        statement: None,
                        label_statements: Vec::new(),
                    })
                    .await
            })
        })
        .collect();
    wait_for(
        Duration::from_secs(10),
        "the free entities to be recorded while post:held is locked",
        || async {
            app.evaluation_count("post:free-1").await == 1
                && app.evaluation_count("post:free-2").await == 1
        },
    )
    .await;
    assert!(!tasks[0].is_finished(), "post:held waits for its row");
    assert_eq!(app.evaluation_count("post:held").await, 0);

    hold.rollback().await.unwrap();
    for task in tasks {
        assert!(matches!(
            task.await.unwrap(),
            Ok(quiesce::store::Completion::NoAction)
        ));
    }
    assert_eq!(app.evaluation_count("post:held").await, 1);
}
