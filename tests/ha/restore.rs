//! The restore drill (docs/operations.md, "Restoring Postgres"): a Postgres that archives its
//! WAL, a base backup, more load, a point-in-time restore to a chosen instant, and quiesce
//! started on the restored database with a Redis prefix of its own, the way back the runbook
//! gives: the repair sweep schedules every entity with events the restored database holds
//! unevaluated. What was accepted before the restore point is all there; what came after is
//! what a sender resends, and is recorded once.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{TestOptions, event, free_address, scalar, spawn_app, wait_for};
use crate::scopeguard;

/// Votes, flags and reports in turn.
const MIXED: &[&str] = &["flag", "upvote", "report"];

/// Runs scripts/dev/restore-drill.sh with `args`; its standard output, trimmed.
fn drill(args: &[&str]) -> String {
    let output = std::process::Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/dev/restore-drill.sh"
        ))
        .args(args)
        .output()
        .expect("run restore-drill.sh");
    assert!(
        output.status.success(),
        "restore-drill.sh {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// `count` events over `entities` entities, ids `<phase>-<n>`, of `kinds` in turn.
fn batch(phase: &str, count: usize, entities: usize, kinds: &[&str]) -> Value {
    json!(
        (0..count)
            .map(|n| event(
                &format!("{phase}-{n}"),
                &format!("post:{phase}{}", n % entities),
                kinds[n % kinds.len()]
            ))
            .collect::<Vec<_>>()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "HA suite: make ha"]
async fn a_point_in_time_restore_keeps_what_was_accepted_before_it_and_quiesce_resumes_on_it() {
    let base = drill(&["start"]);
    // Declared before the app, so dropped after it: the servers stop once its database is gone.
    let _servers = scopeguard(|| {
        drill(&["stop"]);
    });
    let app = spawn_app(TestOptions {
        database_base: Some(base),
        ..TestOptions::default().with(|s| {
            s.schedule.debounce_window = Duration::from_secs(1);
            s.schedule.max_wait = Duration::from_secs(3);
            s.maintenance.sweep_interval = Duration::from_secs(1);
            s.maintenance.sweep_grace = s.database.backend_timeout;
        })
    })
    .await;

    // Before the backup, between it and the restore point, and after the restore point.
    app.send(&batch("a", 120, 30, MIXED)).await;
    app.wait_settled(Duration::from_secs(60)).await;
    drill(&["backup"]);
    app.send(&batch("b", 120, 30, MIXED)).await;
    app.wait_settled(Duration::from_secs(60)).await;
    // Accepted just before the restore point, evaluated after it (the debounce window is 1 s):
    // the restored database holds these events and no evaluation of them. Nine flags each: the
    // default rules hide every one.
    app.send(&batch("late", 90, 10, &["flag"])).await;
    let restore_point: String = scalar!(app, "SELECT clock_timestamp()::text");
    app.wait_settled(Duration::from_secs(60)).await;
    let late_evaluated_after: i64 = scalar!(
        app,
        "SELECT count(*) FROM evaluations WHERE entity LIKE 'post:late%' \
         AND finished_at > $1::text::timestamptz",
        &restore_point
    );
    assert!(
        late_evaluated_after > 0,
        "the late entities were evaluated after the restore point"
    );
    app.send(&batch("c", 120, 30, MIXED)).await;
    app.wait_settled(Duration::from_secs(60)).await;
    drill(&["archive"]);

    // The restore, and quiesce on it with a prefix of its own (the old one holds a schedule and
    // dedup keys of a history the database no longer has).
    let restored = drill(&["restore", &restore_point]);
    let database_url =
        secrecy::ExposeSecret::expose_secret(&app.settings.database.database_url).to_owned();
    let database = database_url.rsplit_once('/').unwrap().1;
    let restored_url = format!("{restored}/{database}");
    let prefix = format!("{}:restored", app.settings.redis.redis_prefix);
    let listen = free_address();
    let mut serve = app
        .serve_command("restored", listen)
        .env("QUIESCE_DATABASE_URL", &restored_url)
        .env("QUIESCE_REDIS_PREFIX", &prefix)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .expect("start quiesce on the restored database");
    app.wait_healthy("quiesce on the restored database", listen)
        .await;
    let pool = sqlx::PgPool::connect(&restored_url).await.unwrap();
    // Statements on the restored database, a server of the drill's, not the test's own: strings.
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };

    // Everything accepted before the restore point, nothing after it.
    let held = count(
        "SELECT count(*) FROM events WHERE id LIKE 'a-%' OR id LIKE 'b-%' OR id LIKE 'late-%'",
    )
    .await;
    assert_eq!(held, 330, "every event accepted before the restore point");
    assert_eq!(
        count("SELECT count(*) FROM events WHERE id LIKE 'c-%'").await,
        0,
        "nothing accepted after the restore point"
    );
    // The repair sweep schedules what the restored database holds unevaluated.
    wait_for(
        Duration::from_secs(60),
        "every entity of the restored database evaluated after its last event",
        || async {
            count("SELECT count(*) FROM entity_counts WHERE event_count <> evaluated_event_count")
                .await
                == 0
        },
    )
    .await;
    assert!(count("SELECT count(*) FROM evaluations WHERE entity LIKE 'post:late%'").await > 0);

    // The sender resends what came after the restore point: recorded once; what the database
    // kept is deduplicated.
    let client = reqwest::Client::new();
    let post = |body: Value| {
        let request = client
            .post(format!("http://{listen}/v1/events"))
            .json(&body);
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 202);
            response.json::<Value>().await.unwrap()
        }
    };
    let resent = post(batch("c", 120, 30, MIXED)).await;
    assert_eq!(resent["accepted"], 120, "{resent}");
    let again = post(batch("a", 120, 30, MIXED)).await;
    assert_eq!(again["duplicates"], 120, "{again}");
    wait_for(
        Duration::from_secs(60),
        "the resent events evaluated",
        || async {
            count("SELECT count(*) FROM entity_counts WHERE event_count <> evaluated_event_count")
                .await
                == 0
        },
    )
    .await;
    assert_eq!(count("SELECT count(*) FROM events").await, 450);
    // The same events under the same rules: the restored quiesce decided every entity as the
    // original did, once (the late entities' actions, lost with the restore, made again).
    let decisions = |pool: sqlx::PgPool| async move {
        sqlx::query_as::<_, (String, String, String)>(
            "SELECT entity, action, new_status FROM actions ORDER BY 1, 2, 3",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    let original = decisions(app.pool.clone()).await;
    let remade = decisions(pool.clone()).await;
    assert!(
        original
            .iter()
            .any(|(entity, _, _)| entity.starts_with("post:late")),
        "the rules act on some late entities: {original:?}"
    );
    assert_eq!(remade, original, "the restored database's actions");
    eprintln!(
        "ha restore: restored to {restore_point}: 330 of 330 events accepted before it held, 0 of \
         the 120 after it; {late_evaluated_after} evaluations of the late entities (after the \
         restore point) made again by the repair sweep on a new prefix; the 120 resent recorded \
         once, 120 of what was kept deduplicated; {} actions, the original's",
        remade.len()
    );
    pool.close().await;
    serve.start_kill().unwrap();
    let _ = serve.wait().await;
}
