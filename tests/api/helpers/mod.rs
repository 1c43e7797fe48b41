//! Test harness: every test gets its own Postgres database (UUID-named), its own Redis key
//! prefix and its own port, so tests run in parallel against the shared servers.

use std::{sync::Arc, time::Duration};

use quiesce::credentials::{ApiToken, WebhookSecret};
use quiesce::{
    rules::RuleSet,
    settings::Settings,
    startup::{self, Application, Backends},
    worker::{BeforeApplyHook, Worker},
};
use secrecy::{ExposeSecret, SecretString};
use sqlx::{Connection, PgConnection, PgPool};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::proxy::{TcpProxy, redirect};

mod database;
mod db;
mod dsa;
mod http;
mod process;
mod redis;
mod wait;

// Each suite that includes these helpers uses some of them: none is unused in all.
#[allow(unused_imports)]
pub use database::*;
#[allow(unused_imports)]
pub use db::*;
#[allow(unused_imports)]
pub use dsa::*;
#[allow(unused_imports)]
pub use http::*;
#[allow(unused_imports)]
pub use process::*;
use redis::delete_redis_prefix;
#[allow(unused_imports)]
pub use wait::*;

pub fn database_base_url() -> String {
    let url = std::env::var("QUIESCE_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/quiesce".to_owned());
    url.rsplit_once('/')
        .map_or(url.clone(), |(base, _)| base.to_owned())
}

pub fn redis_url() -> String {
    std::env::var("QUIESCE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// What a test changes from the defaults: the settings themselves (millisecond windows, a
/// small lease, ...: [`TestOptions::with`]), and what is no setting (the rules, a hook, proxies,
/// rows written before the migrations).
pub struct TestOptions {
    /// The app's settings, with the test defaults of [`TestOptions::default`]; `spawn_app` adds
    /// the test's own database and Redis prefix (behind proxies if asked), turns
    /// test_short_retention on for a retention below 1h, and runs as with --insecure-dev when
    /// no API token is set.
    pub settings: Settings,
    /// Runs the evaluation loop in the app; [`TestOptions::idle`] does not.
    pub worker_loop: bool,
    pub before_apply: Option<BeforeApplyHook>,
    pub rules: Option<RuleSet>,
    /// Where the rules came from (what a reload reads).
    pub rules_file: Option<std::path::PathBuf>,
    /// Route Redis and Postgres through proxies the test can cut.
    pub through_proxies: bool,
    /// A Postgres server other than the shared one (`postgres://user@host:port`): a chaos test
    /// can stop it.
    pub database_base: Option<String>,
    /// SQL run on the database as the migrations before time partitioning left it, before the
    /// rest of them: rows written under the old schema.
    pub before_partitioning: Option<&'static str>,
    /// SQL run on the schema before [`FOLDING_MIGRATION`] (rows an earlier version wrote).
    pub before_folding: Option<&'static str>,
}

impl Default for TestOptions {
    /// Millisecond windows and polls, a small lease, 4 workers; the shared Redis (a test may
    /// name another, e.g. a private instance a chaos test can flush or restart) with 4 shards.
    /// Rates out of the way; no API token, inbound secret, named source or console session key
    /// (the settings' defaults). Everything else as `Settings::default()`.
    fn default() -> Self {
        let mut settings = Settings::default();
        settings.database.db_max_connections = 8;
        settings.database.backend_timeout = Duration::from_secs(5);
        settings.redis.redis_url = redis_url().into();
        settings.redis.shards = 4;
        let http = &mut settings.http;
        http.listen = "127.0.0.1:0".parse().unwrap();
        // Out of the way unless a test is about rates: some send bursts larger than the
        // default budget.
        http.rate_limit = 1_000_000;
        http.rate_burst = 1_000_000;
        http.request_timeout = Duration::from_secs(30);
        http.body_limit = 1024 * 1024;
        http.max_batch = 1000;
        settings.telemetry.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        let schedule = &mut settings.schedule;
        schedule.debounce_window = Duration::from_millis(300);
        schedule.max_wait = Duration::from_secs(10);
        schedule.max_attempts = 5;
        schedule.backoff_base = Duration::from_millis(20);
        schedule.backoff_max = Duration::from_millis(200);
        let worker = &mut settings.worker;
        worker.workers = 4;
        worker.lease = Duration::from_secs(5);
        worker.poll_interval = Duration::from_millis(20);
        worker.retry_delay = Duration::from_millis(40);
        worker.evaluation_timeout = Duration::from_secs(10);
        worker.shutdown_timeout = Duration::from_secs(5);
        worker.worker_id = "in-process".to_owned();
        settings.maintenance.sweep_interval = Duration::from_secs(30);
        settings.maintenance.sweep_grace = Duration::from_secs(10);
        Self {
            settings,
            worker_loop: true,
            before_apply: None,
            rules: None,
            rules_file: None,
            through_proxies: false,
            database_base: None,
            before_partitioning: None,
            before_folding: None,
        }
    }
}

impl TestOptions {
    /// No worker loop: the test drives or inspects the queue itself (a worker it makes has a
    /// concurrency of 1).
    pub fn idle() -> Self {
        Self::default().without_workers()
    }

    /// These options without the worker loop.
    pub fn without_workers(mut self) -> Self {
        self.worker_loop = false;
        self.settings.worker.workers = 1;
        self
    }

    /// These options with `change` made to the settings.
    pub fn with(mut self, change: impl FnOnce(&mut Settings)) -> Self {
        change(&mut self.settings);
        self
    }
}

/// API tokens from their specs (`role:<sha256>`).
pub fn api_tokens(specs: Vec<String>) -> Vec<ApiToken> {
    specs
        .iter()
        .map(|spec| ApiToken::parse(spec).expect("a token spec"))
        .collect()
}

/// Standard Webhooks secrets (`whsec_...`).
pub fn webhook_secrets(secrets: Vec<String>) -> Vec<WebhookSecret> {
    secrets
        .iter()
        .map(|s| WebhookSecret::parse(s).expect("a whsec_ secret"))
        .collect()
}

/// GitHub-style secrets.
pub fn github_secrets(secrets: Vec<String>) -> Vec<SecretString> {
    secrets
        .iter()
        .map(|s| SecretString::from(s.as_str()))
        .collect()
}

pub struct TestApp {
    pub base: String,
    /// The metrics listener (`http://127.0.0.1:<port>`).
    pub metrics_base: String,
    pub client: reqwest::Client,
    pub settings: Settings,
    pub backends: Backends,
    pub pool: PgPool,
    pub redis_proxy: Option<TcpProxy>,
    pub postgres_proxy: Option<TcpProxy>,
    database: TestDatabase,
    shutdown: CancellationToken,
    server: Option<JoinHandle<anyhow::Result<()>>>,
}

/// With `QUIESCE_TEST_LOG_DIR` (as `make test` sets it), every test's logs go, at debug level,
/// to files there, for the check that no secret appears in them (`tests/secrets_in_logs.rs`).
fn log_dir() -> Option<std::path::PathBuf> {
    std::env::var_os("QUIESCE_TEST_LOG_DIR").map(std::path::PathBuf::from)
}

fn init_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Some(dir) = log_dir() {
            use tracing_subscriber::prelude::*;
            std::fs::create_dir_all(&dir).expect("log dir");
            let file = std::fs::File::create(dir.join(format!("api-{}.log", std::process::id())))
                .expect("log file");
            let _ = tracing_subscriber::registry()
                .with(tracing_subscriber::EnvFilter::new(
                    "debug,sqlx=info,hyper=info,hyper_util=info,reqwest=info,h2=info,rustls=info",
                ))
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_ansi(false)
                        .with_writer(std::sync::Mutex::new(file)),
                )
                .try_init();
        } else if std::env::var_os("TEST_LOG").is_some() {
            quiesce::telemetry::init_tracing(
                quiesce::telemetry::LogFormat::Text,
                "info,quiesce=debug",
            );
        }
    });
}

pub async fn spawn_app(options: TestOptions) -> TestApp {
    init_logs();
    let database_base = options
        .database_base
        .clone()
        .unwrap_or_else(database_base_url);
    // From here on, whatever happens, the database (and, once the settings are made, the
    // keys) is removed when `database` is dropped: with the app, or by a panic on the way.
    let mut database = TestDatabase::create(&database_base).await;
    let id = database.id.clone();

    let mut database_url = database.url();
    let mut redis_url = options.settings.redis.redis_url.expose_secret().to_owned();
    // The cleanup goes straight to the servers: a test may end with its proxies cut.
    let direct_redis_url = redis_url.clone();
    let (mut redis_proxy, mut postgres_proxy) = (None, None);
    if options.through_proxies {
        // A cluster client follows the nodes' own addresses past any proxy: on a cluster only
        // Postgres goes through one (a test that cuts Redis needs a single node).
        if quiesce::queue::cluster_nodes(&redis_url).is_none() {
            let (target, _) = redirect(&redis_url, 6379, "127.0.0.1:1".parse().unwrap());
            let proxy = TcpProxy::start(target).await;
            redis_url = redirect(&redis_url, 6379, proxy.address).1;
            redis_proxy = Some(proxy);
        }
        let (target, _) = redirect(&database_url, 5432, "127.0.0.1:1".parse().unwrap());
        let proxy = TcpProxy::start(target).await;
        database_url = redirect(&database_url, 5432, proxy.address).1;
        postgres_proxy = Some(proxy);
    }
    let mut settings = options.settings;
    settings.database.database_url = database_url.clone().into();
    settings.redis.redis_url = redis_url.into();
    settings.redis.redis_prefix = format!("test-{id}");
    settings.maintenance.test_short_retention =
        settings.maintenance.retention < Duration::from_secs(3600);
    settings.security.insecure_dev = settings.security.api_tokens.is_empty();
    settings.validate().expect("valid test settings");
    let mut direct_settings = settings.clone();
    direct_settings.redis.redis_url = direct_redis_url.into();
    database.keys = Some(direct_settings);
    if let Some(sql) = options.before_partitioning {
        write_before(&database_url, PARTITIONING_MIGRATION, sql).await;
    }
    if let Some(sql) = options.before_folding {
        write_before(&database_url, FOLDING_MIGRATION, sql).await;
    }
    if let Err(error) = startup::prepare_database(&settings).await {
        panic!(
            "{}",
            explain_postgres_error("migrations", &*error, &database_base).await
        );
    }
    let rules = Arc::new(quiesce::rules::Rules::new(
        options.rules.unwrap_or_else(RuleSet::default_rules),
        options.rules_file.clone(),
    ));
    let backends = match Backends::connect(&settings, rules).await {
        Ok(backends) => backends,
        Err(error) => panic!(
            "{}",
            explain_postgres_error("backends", &*error, &database_base).await
        ),
    };
    let worker = options.worker_loop.then(|| {
        let worker = backends.worker(&settings);
        match options.before_apply {
            Some(hook) => worker.with_before_apply(hook),
            None => worker,
        }
    });
    let app = Application::build(&settings, &backends, worker)
        .await
        .expect("application");
    let base = format!("http://{}", app.address());
    let metrics_base = format!(
        "http://{}",
        app.metrics_address().expect("a metrics listener")
    );
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(app.run_until_stopped(shutdown.clone()));
    TestApp {
        database,
        base,
        metrics_base,
        client: reqwest::Client::new(),
        pool: backends.store.pool().clone(),
        redis_proxy,
        postgres_proxy,
        settings,
        backends,
        shutdown,
        server: Some(server),
    }
}

/// The first migration of time partitioning: [`TestOptions::before_partitioning`] runs its SQL
/// on the schema of the migrations before it.
pub const PARTITIONING_MIGRATION: i64 = 20261215000001;
/// The migration from which ingest appends and the evaluation folds.
pub const FOLDING_MIGRATION: i64 = 20261220000001;

/// Applies the migrations before `version` and runs `sql` on the result.
async fn write_before(database_url: &str, version: i64, sql: &str) {
    let mut migrator = sqlx::migrate!("./migrations");
    migrator.migrations = migrator
        .migrations
        .iter()
        .filter(|m| m.version < version)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    let mut connection = PgConnection::connect(database_url)
        .await
        .expect("the test database");
    migrator
        .run(&mut connection)
        .await
        .expect("the migrations before the one under test");
    // The test's own statements, on a schema older than the one they are checked against: a
    // string.
    sqlx::raw_sql(sql)
        .execute(&mut connection)
        .await
        .expect("rows under the old schema");
    connection.close().await.ok();
}

impl TestApp {
    /// A worker on this app's backends, for driving claims step by step.
    pub fn worker(&self) -> Worker {
        self.backends.worker(&self.settings)
    }

    /// Maintenance on this app's backends, for driving a reaper, sweep or retention pass.
    pub fn maintenance(&self) -> quiesce::maintenance::Maintenance {
        self.backends.maintenance(&self.settings)
    }

    /// This test's database, for connections of the test's own.
    pub fn database_url(&self) -> String {
        use secrecy::ExposeSecret;
        self.settings
            .database
            .database_url
            .expose_secret()
            .to_owned()
    }

    /// Stops the server and its workers the way SIGTERM does, and waits for them.
    pub async fn stop(&mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            server
                .await
                .expect("server task")
                .expect("server stopped cleanly");
        }
    }
}

impl Drop for TestApp {
    /// Stops the app; then its `database` field, dropped after this, deletes its database and
    /// keys. On the test's runtime (one thread) none of the app's tasks runs while this does,
    /// and when the test ends they end with the runtime, unpolled: what is deleted stays
    /// deleted. A test that goes on after dropping its app lets those tasks run their shutdown,
    /// so the keys are deleted again once the server task (which waits for the workers and
    /// maintenance) has stopped.
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let (Some(server), Some(keys), Ok(runtime)) = (
            self.server.take(),
            self.database.keys.clone(),
            tokio::runtime::Handle::try_current(),
        ) {
            runtime.spawn(async move {
                let _ = server.await;
                delete_redis_prefix(&keys).await;
            });
        }
    }
}
