//! Chaos suite: real processes killed, Redis flushed and restarted, Postgres crashed and restarted, while a
//! load runs; afterwards Postgres is checked the way a queue checker accounts for every item:
//! what went in came out, once. Slow, so `make chaos` runs it (and CI), not `make test`.

#[path = "../api/helpers/mod.rs"]
#[allow(dead_code)]
mod helpers;
#[path = "../support/load.rs"]
mod load;
#[path = "../support/private_redis.rs"]
#[allow(dead_code)]
mod private_redis;
#[path = "../api/proxy.rs"]
#[allow(dead_code)]
mod proxy;
#[path = "../support/secrets.rs"]
mod secrets;

use std::{
    process::Stdio,
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use crate::helpers::scalar;
use helpers::{TestOptions, spawn_app, wait_for};
use load::{Tally, check_accounting, run_load};
use private_redis::PrivateRedis;
use rand::Rng;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make chaos"]
async fn sigkilled_worker_processes_lose_nothing_and_duplicate_nothing() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(200);
        s.schedule.max_wait = Duration::from_secs(2);
        s.worker.lease = Duration::from_secs(2);
        s.schedule.max_attempts = 1000;
        s.maintenance.sweep_interval = Duration::from_secs(1);
    }))
    .await;
    let mut workers: Vec<_> = (0..3)
        .map(|i| app.spawn_worker_process(&format!("w{i}-0"), None))
        .collect();
    let tally = Tally::default();

    let load = run_load(&app, "kill", 10, 1000, 1000, &tally);
    let killer = async {
        let mut kills = 0;
        while kills < 60 {
            let pause = rand::rng().random_range(20..120);
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let victim = rand::rng().random_range(0..workers.len());
            workers[victim].start_kill().unwrap();
            workers[victim].wait().await.unwrap();
            kills += 1;
            workers[victim] = app.spawn_worker_process(&format!("w{victim}-{kills}"), None);
        }
        kills
    };
    let (accepted, kills) = tokio::join!(load, killer);
    assert_eq!(kills, 60);
    assert_eq!(accepted, 10_000);

    app.wait_settled(Duration::from_secs(120)).await;
    check_accounting(&app, accepted).await;
    let evaluations = app.count_evaluations().await;
    let actions = app.count_actions().await;
    eprintln!(
        "chaos sigkill: {kills} kills, {accepted} events, {evaluations} evaluations, {actions} actions"
    );
    for mut worker in workers {
        worker.start_kill().unwrap();
        worker.wait().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make chaos"]
async fn timed_actions_pending_through_kills_and_a_redis_wipe_are_each_restored_once() {
    const USERS: usize = 30;
    let dir = std::env::temp_dir().join(format!("quiesce-chaos-timers-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let rules = dir.join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"timeout\"\nkinds = [\"user\"]\nwhen = 'count(\"report\") >= 2'\n\
         action = \"suspend\"\nreason = \"{count.report} reports\"\nduration = \"8s\"\n",
    )
    .unwrap();
    let app = spawn_app(TestOptions {
        rules: Some(quiesce::rules::RuleSet::from_file(&rules).unwrap()),
        ..TestOptions::idle().with(|s| {
            s.moderation.rules = quiesce::settings::RulesSource::File(rules.clone());
            s.schedule.debounce_window = Duration::from_millis(100);
            s.schedule.max_wait = Duration::from_secs(1);
            s.worker.lease = Duration::from_secs(2);
            s.schedule.max_attempts = 1000;
            s.maintenance.sweep_interval = Duration::from_secs(1);
            s.maintenance.sweep_grace = Duration::from_secs(1);
            s.database.backend_timeout = Duration::from_secs(1);
        })
    })
    .await;
    let mut workers: Vec<_> = (0..3)
        .map(|i| app.spawn_worker_process(&format!("t{i}-0"), None))
        .collect();
    let events: Vec<serde_json::Value> = (0..USERS)
        .flat_map(|u| {
            (0..2)
                .map(move |r| helpers::event(&format!("c{u}-{r}"), &format!("user:c{u}"), "report"))
        })
        .collect();
    assert_eq!(
        app.send(&serde_json::json!(events)).await,
        (2 * USERS as u64, 0)
    );
    wait_for(Duration::from_secs(60), "every user suspended", || async {
        scalar!(app, "SELECT count(*) FROM actions WHERE action = 'suspend'") == USERS as i64
    })
    .await;
    // Every timer is pending: its end is in Redis' due set and in Postgres. The test's keys
    // go (its prefix only: never the server's others), and workers die, while they wait.
    let pending = scalar!(
        app,
        "SELECT count(*) FROM entities WHERE timer_ends_at > now()"
    );
    assert!(pending > 0, "no timer pending at the wipe");
    app.backends.queue.delete_prefix().await.unwrap();
    let mut kills = 0;
    let chaos = Instant::now();
    while chaos.elapsed() < Duration::from_secs(12) {
        let pause = rand::rng().random_range(200..800);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let victim = rand::rng().random_range(0..workers.len());
        workers[victim].start_kill().unwrap();
        workers[victim].wait().await.unwrap();
        kills += 1;
        workers[victim] = app.spawn_worker_process(&format!("t{victim}-{kills}"), None);
        if kills == 5 {
            app.backends.queue.delete_prefix().await.unwrap();
        }
    }
    wait_for(Duration::from_secs(90), "every user restored", || async {
        scalar!(
            app,
            "SELECT count(*) FROM entities WHERE status = 'visible' AND timer_ends_at IS NULL"
        ) == USERS as i64
    })
    .await;
    // Every entity evaluated and the queue drained: no claim is left that could still apply a
    // late duplicate restore.
    app.wait_settled(Duration::from_secs(60)).await;
    let per_entity = |action: &'static str| {
        let app = &app;
        async move {
            sqlx::query!(
                r#"SELECT entity, count(*) AS "count!" FROM actions WHERE action = $1 GROUP BY entity"#,
                action
            )
            .fetch_all(&app.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|row| (row.entity, row.count))
            .collect::<Vec<_>>()
        }
    };
    for action in ["suspend", "restore"] {
        let counts = per_entity(action).await;
        assert_eq!(counts.len(), USERS, "{action}: {counts:?}");
        assert!(counts.iter().all(|(_, n)| *n == 1), "{action}: {counts:?}");
    }
    let notes = scalar!(
        app,
        "SELECT count(DISTINCT payload->>'entity') FROM outbox
             WHERE topic = 'action.applied' AND payload->>'action' = 'restore'"
    );
    assert_eq!(notes, USERS as i64);
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM outbox WHERE payload->>'action' = 'restore'"
        ),
        USERS as i64
    );
    // No restore before its timer's end.
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM actions r JOIN actions s ON s.entity = r.entity
             WHERE r.action = 'restore' AND s.action = 'suspend' AND r.created_at < s.ends_at"
        ),
        0
    );
    eprintln!(
        "chaos timers: {USERS} timed suspensions, {pending} pending at the wipe, {kills} kills, 2 wipes: 0 lost, 0 duplicate restores"
    );
    for mut worker in workers {
        worker.start_kill().unwrap();
        worker.wait().await.unwrap();
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make chaos"]
async fn redis_flushed_and_restarted_mid_run_still_ends_in_one_evaluation_per_entity() {
    let mut redis = PrivateRedis::start().await;
    let max_wait = Duration::from_secs(2);
    let sweep = Duration::from_millis(500);
    let app = spawn_app(TestOptions::default().with(|s| {
        s.redis.redis_url = redis.url().into();
        s.schedule.debounce_window = Duration::from_millis(300);
        s.schedule.max_wait = max_wait;
        s.database.backend_timeout = Duration::from_secs(1);
        s.maintenance.sweep_grace = Duration::from_secs(1);
        s.maintenance.sweep_interval = sweep;
        s.worker.workers = 8;
    }))
    .await;
    let tally = Tally::default();

    let mut accepted = run_load(&app, "before", 2, 2000, 500, &tally).await;
    redis.command("FLUSHALL").await;
    accepted += run_load(&app, "flushed", 2, 2000, 500, &tally).await;
    redis.restart().await;
    accepted += run_load(&app, "restarted", 1, 2000, 500, &tally).await;
    assert_eq!(accepted, 10_000);
    let disrupted = Instant::now();

    app.wait_settled(Duration::from_secs(60)).await;
    let settle = disrupted.elapsed();
    check_accounting(&app, accepted).await;
    // Within max wait + the sweep's grace and interval, plus room for a loaded machine.
    let bound = max_wait + Duration::from_secs(1) + sweep + Duration::from_secs(10);
    assert!(
        settle <= bound,
        "settled {settle:?} after the last disruption (bound {bound:?})"
    );
    eprintln!(
        "chaos redis: {accepted} events, {} evaluations, settled {settle:?} after the restart, {} 503s retried",
        app.count_evaluations().await,
        tally.unavailable.load(Ordering::Relaxed)
    );
}

/// A Postgres server of this test's own (scripts/dev/private-postgres.sh), which it may crash and
/// restart.
struct PrivatePostgres {
    port: u16,
    dir: std::path::PathBuf,
}

impl PrivatePostgres {
    fn script() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dev/private-postgres.sh")
    }

    async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("quiesce-chaos-pg-{}", uuid::Uuid::new_v4()));
        let postgres = Self { port, dir };
        postgres
            .run(&["start", postgres.dir.to_str().unwrap(), &port.to_string()])
            .await;
        postgres
    }

    fn base_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}", self.port)
    }

    async fn run(&self, args: &[&str]) {
        let status = tokio::process::Command::new("bash")
            .arg(Self::script())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .unwrap();
        assert!(status.success(), "private-postgres.sh {args:?} failed");
    }

    /// Stops the server the hard way (no checkpoint: it recovers from its WAL on start).
    async fn crash(&self) {
        self.run(&["stop", self.dir.to_str().unwrap(), "immediate"])
            .await;
    }

    async fn start_again(&self) {
        self.run(&["start", self.dir.to_str().unwrap(), &self.port.to_string()])
            .await;
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(Self::script())
            .args(["stop", self.dir.to_str().unwrap(), "immediate"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make chaos"]
async fn a_postgres_restart_mid_run_dead_letters_nothing_and_loses_nothing() {
    let postgres = PrivatePostgres::start().await;
    let app = spawn_app(TestOptions {
        database_base: Some(postgres.base_url()),
        ..TestOptions::default().with(|s| {
            s.schedule.debounce_window = Duration::from_millis(200);
            s.schedule.max_wait = Duration::from_secs(2);
            s.database.backend_timeout = Duration::from_secs(1);
            s.maintenance.sweep_grace = Duration::from_secs(1);
            s.maintenance.sweep_interval = Duration::from_millis(500);
            s.schedule.max_attempts = 3;
            s.worker.workers = 8;
        })
    })
    .await;
    let tally = Tally::default();

    let mut accepted = run_load(&app, "before", 2, 2000, 500, &tally).await;
    // Postgres crashes and is down for three seconds, then recovers from its WAL, while
    // senders keep sending (and retrying their 503s) and workers keep polling.
    postgres.crash().await;
    let restart = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        postgres.start_again().await;
    };
    let (more, ()) = tokio::join!(run_load(&app, "during", 2, 2000, 500, &tally), restart);
    accepted += more;
    assert_eq!(accepted, 8_000);

    app.wait_settled(Duration::from_secs(60)).await;
    check_accounting(&app, accepted).await;
    assert!(
        tally.unavailable.load(Ordering::Relaxed) > 0,
        "the senders saw the outage"
    );
    eprintln!(
        "chaos postgres restart: {accepted} events, {} 503s retried, {} evaluations",
        tally.unavailable.load(Ordering::Relaxed),
        app.count_evaluations().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make chaos"]
async fn a_worker_whose_clock_lags_redis_reaps_with_the_attempts_postgres_kept() {
    let libfaketime = std::env::var("QUIESCE_LIBFAKETIME")
        .expect("QUIESCE_LIBFAKETIME, the path of libfaketime.so.1 (make chaos sets it)");
    // The worker process' wall clock runs an hour behind Redis'; its monotonic clock (its
    // timers) is left alone.
    let lagging = [
        ("LD_PRELOAD", libfaketime.as_str()),
        ("FAKETIME", "-3600"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let lag = {
        let faked = std::process::Command::new("date")
            .arg("+%s")
            .envs(lagging)
            .output()
            .expect("date under libfaketime");
        let faked: i64 = String::from_utf8_lossy(&faked.stdout)
            .trim()
            .parse()
            .unwrap();
        chrono::Utc::now().timestamp() - faked
    };
    assert!(
        (3590..=3610).contains(&lag),
        "libfaketime puts the clock back an hour ({lag} s)"
    );

    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(20);
        s.worker.lease = Duration::from_millis(600);
        s.schedule.max_attempts = 3;
    }))
    .await;
    app.send(&helpers::event("k1", "post:lagging", "flag"))
        .await;
    // A worker claims the entity and dies: its lease expires, a failed attempt.
    let _lost = helpers::claim_next(&app.worker()).await;
    // Postgres kept two earlier failed attempts that Redis' copy lost (a flush, a failover).
    sqlx::query!(
        "INSERT INTO entity_failures
 (entity, attempts, first_failure_at, last_failure_at, last_error)
         VALUES ('post:lagging', 2, now(), now(), 'timed out')",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let mut worker = app
        .worker_command("lagging", None)
        .envs(lagging)
        .spawn()
        .expect("start a worker process under libfaketime");

    // The reaper finds the expired lease by Redis' clock, as reap.lua expires it, and so reads
    // its floor from Postgres: the lost lease is the third attempt, and the last. With the
    // process' clock an hour behind it would find no lease expiring, count from Redis' record
    // alone (one attempt) and evaluate the entity again.
    wait_for(
        Duration::from_secs(30),
        "post:lagging to be dead-lettered on its third attempt",
        || async {
            app.dead_letter_count_of("post:lagging").await == 1
                || app.evaluation_count("post:lagging").await > 0
        },
    )
    .await;
    assert_eq!(
        scalar!(
            app,
            "SELECT attempts::bigint FROM dead_letters
             WHERE entity = 'post:lagging' AND reason = 'attempts_exhausted'"
        ),
        3
    );
    assert_eq!(
        app.evaluation_count("post:lagging").await,
        0,
        "a dead-lettered entity is not evaluated"
    );
    let _ = worker.kill().await;
    eprintln!(
        "chaos clock lag: a worker process {lag} s behind Redis dead-lettered the entity on its third attempt"
    );
}
