//! Startup errors name the variable at fault and its address, never a password, and the
//! process exits non-zero at once.

use std::time::{Duration, Instant};

use crate::helpers::{TestOptions, spawn_app};

/// Runs the binary with exactly these variables; its exit status and standard error.
async fn run(args: &[&str], environment: &[(String, String)]) -> (bool, String, Duration) {
    let started = Instant::now();
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_quiesce"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "error")
            .envs(environment.iter().cloned())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("quiesce exits")
    .expect("run quiesce");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        started.elapsed(),
    )
}

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn a_database_url_without_a_scheme_is_named_by_its_variable() {
    let (ok, stderr, _) = run(
        &["migrate"],
        &vars(&[("QUIESCE_DATABASE_URL", "localhost/quiesce")]),
    )
    .await;
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("QUIESCE_DATABASE_URL"), "{stderr}");
    assert!(stderr.contains("localhost/quiesce"), "{stderr}");
}

#[tokio::test]
async fn an_unreachable_postgres_is_named_with_its_address_and_no_password() {
    let (ok, stderr, elapsed) = run(
        &["migrate"],
        &vars(&[
            (
                "QUIESCE_DATABASE_URL",
                "postgres://app:hunter2-secret@127.0.0.1:1/quiesce",
            ),
            ("QUIESCE_BACKEND_TIMEOUT", "2s"),
        ]),
    )
    .await;
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("QUIESCE_DATABASE_URL"), "{stderr}");
    assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
    assert!(!stderr.contains("hunter2-secret"), "{stderr}");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
}

#[tokio::test]
async fn a_refused_redis_is_named_with_its_variable_and_address() {
    let (ok, stderr, elapsed) = run(
        &["dead-letters", "list"],
        &vars(&[
            ("QUIESCE_REDIS_URL", "redis://:hunter2-secret@127.0.0.1:1"),
            ("QUIESCE_BACKEND_TIMEOUT", "2s"),
        ]),
    )
    .await;
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("QUIESCE_REDIS_URL"), "{stderr}");
    assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
    assert!(!stderr.contains("hunter2-secret"), "{stderr}");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
}

#[tokio::test]
async fn an_api_address_in_use_names_quiesce_listen() {
    let app = spawn_app(TestOptions::idle()).await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let mut environment = app.settings.to_environment();
    environment.push(("QUIESCE_LISTEN".to_owned(), address.clone()));
    environment.push(("QUIESCE_METRICS_LISTEN".to_owned(), "off".to_owned()));
    let (ok, stderr, _) = run(&["serve", "--insecure-dev"], &environment).await;
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("QUIESCE_LISTEN"), "{stderr}");
    assert!(stderr.contains(&address), "{stderr}");
}

/// `scripts/dev/services.sh` (what `make run` and `make test` start with) with these variables.
async fn services(environment: &[(&str, String)]) -> (bool, String, String, Duration) {
    let started = Instant::now();
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/dev/services.sh"
        ))
        .env_remove("QUIESCE_REDIS_URL")
        .env_remove("QUIESCE_DATABASE_URL")
        .env_remove("QUIESCE_NEED_REDIS_SERVER")
        .envs(environment.iter().map(|(k, v)| (*k, v.as_str())))
        .kill_on_drop(true)
        .output(),
    )
    .await
    .expect("services.sh exits")
    .expect("run services.sh");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        started.elapsed(),
    )
}

/// A URL the user gave is never replaced by a private server: a typo'd port stops the first
/// run within 5 s, naming the variable and the address without its password.
#[tokio::test]
async fn a_given_url_that_does_not_answer_stops_the_first_run() {
    let database = format!("{}/quiesce", crate::helpers::database_base_url());
    for (variable, url, other, other_url) in [
        (
            "QUIESCE_DATABASE_URL",
            "postgres://app:hunter2-secret@127.0.0.1:1/quiesce".to_owned(),
            "QUIESCE_REDIS_URL",
            crate::helpers::redis_url(),
        ),
        (
            "QUIESCE_REDIS_URL",
            "redis://:hunter2-secret@127.0.0.1:1".to_owned(),
            "QUIESCE_DATABASE_URL",
            database.clone(),
        ),
    ] {
        let (ok, stdout, stderr, elapsed) = services(&[(variable, url), (other, other_url)]).await;
        assert!(!ok, "{stdout}{stderr}");
        assert!(stdout.is_empty(), "nothing to export: {stdout}");
        assert!(stderr.contains(variable), "{stderr}");
        assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
        assert!(!stderr.contains("hunter2-secret"), "{stderr}");
        for private in [
            "starting a private",
            "starting the private",
            "using the private",
        ] {
            assert!(!stderr.contains(private), "no private server: {stderr}");
        }
        assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    }
}

/// A Redis prefix holding another database's schedule is refused at startup, naming both, rather
/// than dead-lettered entity by entity; the same prefix with the database it belongs to starts.
#[tokio::test]
async fn a_schedule_that_belongs_to_another_database_is_refused_at_startup() {
    let app = spawn_app(TestOptions::idle()).await;
    // Scheduled as another database's ingest would have done: no record here.
    let strangers: Vec<_> = (0..20)
        .map(|i| {
            (
                quiesce::domain::EntityId::parse(&format!("post:stranger-{i}")).unwrap(),
                quiesce::domain::Priority::Normal,
            )
        })
        .collect();
    app.backends.queue.schedule(&strangers).await.unwrap();

    let mut environment = app.settings.to_environment();
    environment.push(("QUIESCE_METRICS_LISTEN".to_owned(), "off".to_owned()));
    let (ok, stderr, elapsed) = run(&["worker"], &environment).await;
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("does not belong"), "{stderr}");
    assert!(
        stderr.contains(&format!("{:?}", app.settings.redis.redis_prefix)),
        "{stderr}"
    );
    let database = app
        .settings
        .to_environment()
        .into_iter()
        .find(|(k, _)| k == "QUIESCE_DATABASE_URL")
        .unwrap()
        .1;
    let database_name = database.rsplit('/').next().unwrap();
    assert!(stderr.contains(database_name), "{stderr}");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    // Nothing was dead-lettered.
    assert!(
        app.redis_keys().await.iter().all(|k| !k.ends_with(":dead")),
        "{:?}",
        app.redis_keys().await
    );
}

#[tokio::test]
async fn migrations_are_not_cut_short_by_the_statement_timeout() {
    // The pool's statement_timeout (backend_timeout) bounds requests' statements; migrations
    // run on a pool that has one, here a millisecond, and must still run to the end.
    // The test's own database (not spawn_app's), dropped with `database` however the test ends.
    let database = crate::helpers::TestDatabase::create(&crate::helpers::database_base_url()).await;
    let url = database.url();
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.options([("statement_timeout", "1")]))
        .await
        .unwrap();
    quiesce::store::migrate(&pool)
        .await
        .expect("the migrations run to the end");
    let applied = sqlx::query_scalar!("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(&pool)
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(applied > 0);
    // And the pool's connections keep their timeout afterwards. (SHOW selects no column the
    // compile-time check can type: a string.)
    let timeout: String = sqlx::query_scalar("SHOW statement_timeout")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(timeout, "1ms");
    pool.close().await;
    drop(database);
}

/// `quiesce serve` with its open-files limit set to `soft` and `hard` before it starts.
fn limited(mut command: tokio::process::Command, soft: u64, hard: u64) -> tokio::process::Command {
    use nix::sys::resource::{Resource, setrlimit};
    // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing else.
    unsafe {
        command.pre_exec(move || {
            setrlimit(Resource::RLIMIT_NOFILE, soft, hard).map_err(std::io::Error::from)
        });
    }
    command
}

#[tokio::test]
async fn serve_refuses_to_start_when_the_open_files_limit_cannot_hold_max_connections() {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_quiesce"));
    command
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "error")
        .env("QUIESCE_INSECURE_DEV", "true")
        // Nothing answers here: the refusal comes before any connection is tried.
        .env("QUIESCE_DATABASE_URL", "postgres://127.0.0.1:1/quiesce")
        .env("QUIESCE_REDIS_URL", "redis://127.0.0.1:1")
        .kill_on_drop(true);
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        limited(command, 1024, 1024).output(),
    )
    .await
    .expect("quiesce exits")
    .expect("run quiesce");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    // The default max_connections (4096) and pool (16), with 256 files for the rest.
    for named in [
        "QUIESCE_MAX_CONNECTIONS",
        "4096",
        "4368 open files",
        "at most 1024",
        "LimitNOFILE",
    ] {
        assert!(stderr.contains(named), "{named} in: {stderr}");
    }
    assert!(
        !stderr.contains("127.0.0.1:1"),
        "no connection tried: {stderr}"
    );
}

#[tokio::test]
async fn serve_raises_its_soft_open_files_limit_to_what_max_connections_needs() {
    let app = spawn_app(TestOptions::idle()).await;
    let address = crate::helpers::free_address();
    let command = app.serve_command("limited", address);
    let mut serve = limited(command, 1024, 8192).spawn().expect("start serve");
    app.wait_healthy("serve to answer", address).await;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", serve.id().unwrap())).unwrap();
    let open_files = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap();
    let values: Vec<&str> = open_files.split_whitespace().collect();
    // serve_command's pool is 8: 4096 + 8 + 256.
    assert_eq!(values[3..5], ["4360", "8192"], "{open_files}");
    let _ = serve.kill().await;
}
