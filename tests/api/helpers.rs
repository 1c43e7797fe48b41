//! Test harness: every test gets its own Postgres database (UUID-named), its own Redis key
//! prefix and its own port, so tests run in parallel against the shared servers.

use std::{
    future::Future,
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use quiesce::credentials::{ApiToken, WebhookSecret};
use quiesce::{
    rules::RuleSet,
    settings::{Settings, Source},
    startup::{self, Application, Backends},
    worker::{BeforeApplyHook, Worker},
};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, PgPool};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::proxy::{TcpProxy, redirect};

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
    sqlx::raw_sql(sql)
        .execute(&mut connection)
        .await
        .expect("rows under the old schema");
    connection.close().await.ok();
}

/// A Standard Webhooks secret for named-source tests.
pub const SHOP_SECRET: &str = crate::secrets::SHOP;
/// Another source's secret.
pub const FORUM_SECRET: &str = crate::secrets::FORUM;

/// A named source signing with `secrets`, at the global rate.
pub fn source(name: &str, secrets: &[&str]) -> Source {
    let secrets = secrets
        .iter()
        .map(|s| WebhookSecret::parse(s).expect("a whsec_ secret"))
        .collect();
    Source::new(name, secrets)
}

/// Standard Webhooks headers signing `body` with `secret` now.
pub fn signed_headers(secret: &str, body: &[u8]) -> reqwest::header::HeaderMap {
    let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
    let now = chrono::Utc::now().timestamp();
    let signature = WebhookSecret::parse(secret)
        .expect("a whsec_ secret")
        .sign(&id, now, body);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("webhook-id", id.parse().unwrap());
    headers.insert("webhook-timestamp", now.to_string().parse().unwrap());
    headers.insert("webhook-signature", signature.parse().unwrap());
    headers.insert("content-type", "application/json".parse().unwrap());
    headers
}

/// One event as a platform would send it.
pub fn event(id: &str, entity: &str, signal: &str) -> Value {
    json!({ "id": id, "entity": entity, "type": signal })
}

/// A GET (or, for any other method, a POST) with `token`, and `body` as JSON unless null;
/// returns the status and the JSON reply (its text as a string if it is not JSON).
pub async fn call(
    app: &TestApp,
    method: &str,
    path: &str,
    token: &str,
    body: Value,
) -> (u16, Value) {
    let request = match method {
        "GET" => app.client.get(format!("{}{path}", app.base)),
        _ => app.client.post(format!("{}{path}", app.base)),
    };
    let request = if body.is_null() {
        request
    } else {
        request.json(&body)
    };
    let response = request.bearer_auth(token).send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Polls `condition` until it holds or `timeout` passes; panics with `what` on timeout.
pub async fn wait_for<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl TestApp {
    /// Posts `body` to a named source's endpoint, signed with `secret`.
    pub async fn post_signed(&self, source: &str, secret: &str, body: &Value) -> reqwest::Response {
        let bytes = serde_json::to_vec(body).unwrap();
        self.client
            .post(format!("{}/v1/sources/{source}/events", self.base))
            .headers(signed_headers(secret, &bytes))
            .body(bytes)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn post_events(&self, body: &Value) -> reqwest::Response {
        self.client
            .post(format!("{}/v1/events", self.base))
            .json(body)
            .send()
            .await
            .expect("request sent")
    }

    /// Posts and asserts 202; returns (accepted, duplicates).
    pub async fn send(&self, body: &Value) -> (u64, u64) {
        let response = self.post_events(body).await;
        let status = response.status();
        let reply: Value = response.json().await.expect("json reply");
        assert_eq!(status, 202, "{reply}");
        (
            reply["accepted"].as_u64().unwrap(),
            reply["duplicates"].as_u64().unwrap(),
        )
    }

    /// Posts a JSON body; returns the status and the JSON reply.
    pub async fn post_json(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .expect("request sent");
        let status = response.status().as_u16();
        (status, response.json().await.expect("json reply"))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("request sent");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// The Prometheus text from the metrics listener.
    pub async fn metrics_text(&self) -> String {
        let response = self
            .client
            .get(format!("{}/metrics", self.metrics_base))
            .send()
            .await
            .expect("metrics request sent");
        assert_eq!(response.status(), 200);
        response.text().await.unwrap()
    }

    pub async fn scalar(&self, sql: &str) -> i64 {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(&self.pool)
            .await
            .expect(sql)
    }

    pub async fn evaluation_count(&self, entity: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM evaluations WHERE entity = $1")
            .bind(entity)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    pub async fn status_of(&self, entity: &str) -> String {
        sqlx::query_scalar("SELECT status FROM entities WHERE entity = $1")
            .bind(entity)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// Nothing due or in flight in any shard.
    pub async fn queue_is_empty(&self) -> bool {
        let depths = self.backends.queue.depths().await.expect("redis");
        depths.iter().all(|d| d.due == 0 && d.inflight == 0)
    }

    /// Every recorded event has been covered by an evaluation and nothing waits in Redis.
    pub async fn settled(&self) -> bool {
        self.queue_is_empty().await
            && self
                .scalar(
                    "SELECT count(*) FROM entity_counts WHERE event_count <> evaluated_event_count",
                )
                .await
                == 0
    }

    pub async fn wait_settled(&self, timeout: Duration) {
        wait_for(
            timeout,
            "every entity to be evaluated and the queue to drain",
            || self.settled(),
        )
        .await;
    }

    /// Every Redis key under this test's prefix (on every primary of a cluster).
    pub async fn redis_keys(&self) -> Vec<String> {
        self.backends
            .queue
            .keys_under_prefix()
            .await
            .expect("redis SCAN")
    }

    /// This test's Redis keys that hold or record work: every key but the index rescan's lock
    /// and cursor, which maintenance writes on a timer. A check that nothing was scheduled or
    /// written compares these.
    pub async fn work_keys(&self) -> Vec<String> {
        let index = self.backends.queue.keys().index();
        let mut keys = self.redis_keys().await;
        keys.retain(|key| !index.is_rescan_bookkeeping(key));
        keys
    }

    /// The entity's snapshot as an evaluation reads it (without distinct actors); it must exist.
    pub async fn snapshot(&self, entity: &str) -> quiesce::domain::Snapshot {
        let entity = quiesce::domain::EntityId::parse(entity).unwrap();
        self.backends
            .store
            .snapshot(&entity, false)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{entity} has no events"))
    }

    /// The entity's max-wait anchor (unix ms) in Redis, if it has one.
    pub async fn max_wait_anchor(&self, entity: &quiesce::domain::EntityId) -> Option<i64> {
        self.backends.queue.max_wait_anchor(entity).await.unwrap()
    }

    /// Deletes every Redis key of this test, as a restart without persistence or a flush would
    /// (only this test's prefix: the server is shared).
    pub async fn lose_redis_data(&self) {
        self.backends
            .queue
            .delete_prefix()
            .await
            .expect("delete the prefix's keys");
        assert!(self.redis_keys().await.is_empty());
    }

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

    /// Moves these events `ago` into the past, into a partition made for them (from an hour
    /// before that time to an hour after: once per test, partitions may not overlap).
    pub async fn age_events(&self, ids: &[&str], ago: Duration) {
        let hour = Duration::from_secs(3600);
        self.add_past_partition(quiesce::store::Partitioned::Events, ago + hour, ago - hour)
            .await;
        let moved = sqlx::query(
            "UPDATE events SET received_at = now() - make_interval(secs => $2) WHERE id = ANY($1)",
        )
        .bind(ids)
        .bind(ago.as_secs_f64())
        .execute(&self.pool)
        .await
        .expect("events moved into the past")
        .rows_affected();
        assert_eq!(moved, ids.len() as u64, "{ids:?}");
    }

    /// Adds the partition of `table` for the times from `from_ago` to `to_ago` before now
    /// (rows of that time can then be written there).
    pub async fn add_past_partition(
        &self,
        table: quiesce::store::Partitioned,
        from_ago: Duration,
        to_ago: Duration,
    ) -> String {
        let now = chrono::Utc::now();
        self.backends
            .store
            .add_partition(table, now - from_ago, now - to_ago)
            .await
            .expect("a partition in the past")
    }

    /// Starts `quiesce worker` as a separate process on this test's database and prefix.
    /// With `metrics_listen`, the process also serves /metrics there.
    pub fn spawn_worker_process(
        &self,
        worker_id: &str,
        metrics_listen: Option<std::net::SocketAddr>,
    ) -> tokio::process::Child {
        self.worker_command(worker_id, metrics_listen)
            .spawn()
            .expect("start quiesce worker")
    }

    /// The `quiesce worker` command of [`Self::spawn_worker_process`], for a test to adjust.
    pub fn worker_command(
        &self,
        worker_id: &str,
        metrics_listen: Option<std::net::SocketAddr>,
    ) -> tokio::process::Command {
        let mut settings = self.settings.clone();
        settings.telemetry.metrics_listen = metrics_listen;
        settings.worker.workers = 4;
        settings.database.db_max_connections = 4;
        settings.worker.worker_id = worker_id.to_owned();
        process_command("worker", worker_id, &settings)
    }

    /// Starts `quiesce serve` (the API and its workers) as a separate process on this test's
    /// database and prefix, listening on `listen`, open without tokens.
    #[allow(dead_code)] // The cluster suite's; the API suite runs its API in the test process.
    pub fn spawn_serve_process(
        &self,
        name: &str,
        listen: std::net::SocketAddr,
    ) -> tokio::process::Child {
        self.serve_command(name, listen)
            .spawn()
            .expect("start quiesce serve")
    }

    /// The `quiesce serve` command of [`Self::spawn_serve_process`], for a test to adjust.
    #[allow(dead_code)] // The cluster suite's.
    pub fn serve_command(
        &self,
        name: &str,
        listen: std::net::SocketAddr,
    ) -> tokio::process::Command {
        let mut settings = self.settings.clone();
        settings.http.listen = listen;
        settings.telemetry.metrics_listen = None;
        settings.security.insecure_dev = true;
        settings.worker.workers = 4;
        settings.database.db_max_connections = 8;
        process_command("serve", name, &settings)
    }

    /// Runs the `quiesce` binary with this test's Redis settings; returns its standard output.
    pub async fn run_cli(&self, args: &[&str]) -> String {
        self.run_cli_with(args, &[]).await
    }

    /// [`Self::run_cli`] with some settings changed in the environment (`QUIESCE_*`, value).
    pub async fn run_cli_with(&self, args: &[&str], changed: &[(&str, &str)]) -> String {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_quiesce"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(self.settings.to_environment())
            .envs(changed.iter().copied())
            .env("RUST_LOG", "error")
            .output()
            .await
            .expect("run quiesce");
        assert!(
            output.status.success(),
            "quiesce {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Starts a worker process with a metrics listener and waits until it answers.
    pub async fn spawn_ready_worker_process(
        &self,
        worker_id: &str,
    ) -> (tokio::process::Child, std::net::SocketAddr) {
        let address = free_address();
        let process = self.spawn_worker_process(worker_id, Some(address));
        self.wait_healthy("the worker process to start", address)
            .await;
        (process, address)
    }

    /// Waits (30 s at most) until a process this test started answers `/healthz` on `address`.
    pub async fn wait_healthy(&self, what: &str, address: std::net::SocketAddr) {
        wait_for(Duration::from_secs(30), what, || async {
            self.client
                .get(format!("http://{address}/healthz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await;
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

/// A database of the test's own on the shared server (`quiesce_test_<id>`), dropped, with the
/// Redis keys of `keys`, when this is dropped: with the test's app, or on its own when the test
/// (or `spawn_app` itself) panics after creating it, so a failed test leaves nothing behind.
pub struct TestDatabase {
    /// The database is `quiesce_test_<id>`; a test's Redis prefix is `test-<id>`.
    pub id: String,
    /// `postgres://...:5432`, without a proxy.
    base: String,
    /// The app's settings with Redis' own address (without a proxy): its prefix's keys are
    /// deleted with the database.
    keys: Option<Settings>,
}

impl TestDatabase {
    /// Creates a fresh database on the server at `base`.
    pub async fn create(base: &str) -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let database = Self {
            id,
            base: base.to_owned(),
            keys: None,
        };
        let mut admin = admin_connection(base).await;
        sqlx::query(&format!("CREATE DATABASE {}", database.name()))
            .execute(&mut admin)
            .await
            .expect("create the test database");
        admin.close().await.ok();
        database
    }

    pub fn name(&self) -> String {
        format!("quiesce_test_{}", self.id)
    }

    pub fn url(&self) -> String {
        format!("{}/{}", self.base, self.name())
    }

    /// Drops the database (retrying while a connection being closed still holds it) and
    /// deletes the keys, each until it is gone or a deadline passes.
    async fn remove(name: String, base: String, keys: Option<Settings>) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let admin = format!("{base}/postgres");
        let mut failure = String::from("no attempt");
        while tokio::time::Instant::now() < deadline {
            let dropped = match PgConnection::connect(&admin).await {
                Ok(mut admin) => {
                    let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    sqlx::query(&drop).execute(&mut admin).await.map(|_| ())
                }
                Err(error) => Err(error),
            };
            match dropped {
                Ok(()) => {
                    failure.clear();
                    break;
                }
                Err(error) => failure = error.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !failure.is_empty() {
            // The run's leftovers check names it too; this says why.
            eprintln!("could not drop the test database {name}: {failure}");
        }
        if let Some(keys) = keys {
            delete_redis_prefix(&keys).await;
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (name, base, keys) = (self.name(), self.base.clone(), self.keys.take());
        run_to_end_in_drop(Self::remove(name, base, keys));
    }
}

/// Runs `work` to its end from a `Drop`, which cannot await and may run while a panic unwinds
/// the test's runtime: on a thread with a runtime of its own, joined.
pub fn run_to_end_in_drop(work: impl Future<Output = ()> + Send + 'static) {
    let _ = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work)
    })
    .join();
}

/// A connection to the maintenance database (`postgres`) of the server at `base`; a refusal
/// panics with what happened and what to do ([`explain_postgres_error`]).
pub async fn admin_connection(base: &str) -> PgConnection {
    match PgConnection::connect(&format!("{base}/postgres")).await {
        Ok(connection) => connection,
        Err(error) => panic!(
            "{}",
            explain_postgres_error("connect to Postgres", &error, base).await
        ),
    }
}

/// How many client connections the server has open, of how many it allows.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionUsage {
    pub in_use: i64,
    pub max_connections: i64,
}

/// The server's connection use, read over a connection of its own to the maintenance database;
/// `None` when that connection is refused too (nothing was left, not even a reserved slot).
pub async fn connection_usage(base: &str) -> Option<ConnectionUsage> {
    let mut connection = PgConnection::connect(&format!("{base}/postgres"))
        .await
        .ok()?;
    let (in_use, max_connections): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM pg_stat_activity
                 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()),
                current_setting('max_connections')::bigint",
    )
    .fetch_one(&mut connection)
    .await
    .ok()?;
    connection.close().await.ok();
    Some(ConnectionUsage {
        in_use,
        max_connections,
    })
}

/// The panic message of `what` having failed with `error` against the server at `base`. An
/// unreachable server points to scripts/dev/services.sh; a server that refused for want of
/// connections (SQLSTATE 53300: max_connections used up, or a database's or role's own limit)
/// is named as such, with how many are in use and what to do; so is a pool that got no
/// connection in time (sqlx retries a 53300 until then).
pub async fn explain_postgres_error(
    what: &str,
    error: &(dyn std::error::Error + Send + Sync + 'static),
    base: &str,
) -> String {
    // The error's chain is not Send: read before the await below.
    let (causes, refused, timed_out, unreachable) = {
        let error: &(dyn std::error::Error + 'static) = error;
        let chain = std::iter::successors(Some(error), |error| error.source());
        let mut causes: Vec<String> = chain.clone().map(ToString::to_string).collect();
        // sqlx's error repeats its source's text ("error returned from database: <it>").
        causes.dedup_by(|source, error| error.ends_with(source.as_str()));
        let sqlx_error = chain
            .clone()
            .find_map(|error| error.downcast_ref::<sqlx::Error>());
        let refused = sqlx_error.is_some_and(|error| {
            matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some(TOO_MANY_CONNECTIONS))
        });
        let timed_out = sqlx_error.is_some_and(|error| matches!(error, sqlx::Error::PoolTimedOut));
        let unreachable = sqlx_error
            .is_some_and(|error| matches!(error, sqlx::Error::Io(_) | sqlx::Error::Tls(_)));
        (causes.join(": "), refused, timed_out, unreachable)
    };
    if unreachable {
        return format!(
            "{what} failed: {causes} (is Postgres reachable? see scripts/dev/services.sh)"
        );
    }
    if !refused && !timed_out {
        return format!("{what} failed: {causes}");
    }
    too_many_connections_message(what, &causes, refused, connection_usage(base).await)
}

/// SQLSTATE too_many_connections.
const TOO_MANY_CONNECTIONS: &str = "53300";

/// What [`explain_postgres_error`] says of a refusal (`refused`) or of a pool that waited in
/// vain, with the server's connection use when it could be read.
pub fn too_many_connections_message(
    what: &str,
    causes: &str,
    refused: bool,
    usage: Option<ConnectionUsage>,
) -> String {
    let happened = if refused {
        "Postgres refused the connection: too many clients"
    } else {
        "no Postgres connection came within the pool's timeout, as when the server has too many clients"
    };
    let usage = match usage {
        Some(usage) => format!(
            "{} of the server's {} connections (max_connections) are in use",
            usage.in_use, usage.max_connections
        ),
        None => "not even a connection to count them was left".to_owned(),
    };
    format!(
        "{what} failed: {happened} ({causes}); {usage}. Each test thread holds up to \
         {TEST_CONNECTIONS} connections: lower TEST_THREADS (make test TEST_THREADS=2, or cargo \
         test -- --test-threads 2) or close other clients of the server (psql sessions, a make \
         run, another test run)"
    )
}

/// Postgres connections one test holds at most, in the usual case: its app's pool
/// (`db_max_connections`, 8 in [`TestOptions::default`]), the rules listener, and the admin
/// or migration connection. A test that starts a worker process adds 5, a serve process 9.
/// scripts/dev/test-connections.sh (run by `make test`) uses the same figure.
pub const TEST_CONNECTIONS: u32 = 10;

/// `quiesce <subcommand>` with `settings` in its environment (as the process reads them), its
/// output in the test log folder when there is one, killed when dropped.
fn process_command(subcommand: &str, name: &str, settings: &Settings) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_quiesce"));
    command
        .arg(subcommand)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(settings.to_environment())
        .env(
            "RUST_LOG",
            if log_dir().is_some() {
                "debug,sqlx=info,hyper=info,hyper_util=info"
            } else if std::env::var_os("TEST_LOG").is_some() {
                "info"
            } else {
                "error"
            },
        )
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(dir) = log_dir() {
        let path = dir.join(format!(
            "{subcommand}-{name}-{}.log",
            uuid::Uuid::new_v4().simple()
        ));
        let file = std::fs::File::create(path).expect("process log file");
        command
            .stdout(file.try_clone().expect("log file handle"))
            .stderr(file);
    }
    command
}

/// Deletes every key under a test's prefix, by SCAN on every primary (never KEYS or FLUSHDB
/// on a shared server), on a connection of its own (the test's runtime may be gone).
async fn delete_redis_prefix(settings: &Settings) {
    let Ok((redis, _)) = quiesce::startup::connect_redis(settings).await else {
        return;
    };
    let queue = quiesce::queue::Queue::new(
        redis,
        quiesce::startup::keyspace(settings),
        settings.schedule.timing(),
    );
    let _ = queue.delete_prefix().await;
}

/// A loopback address no one listens on now, for a process a test starts.
pub fn free_address() -> std::net::SocketAddr {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap()
}

/// Claims until the entity comes up (its window has to pass first).
pub async fn claim_next(worker: &quiesce::worker::Worker) -> quiesce::queue::Claim {
    let claimed = std::sync::Mutex::new(None);
    wait_for(
        Duration::from_secs(10),
        "a due entity to be claimed",
        || async {
            let mut claims = worker.claim_once(1).await.unwrap().claims;
            let mut claimed = claimed.lock().unwrap();
            *claimed = claims.pop();
            claimed.is_some()
        },
    )
    .await;
    claimed.into_inner().unwrap().unwrap()
}

/// A hook that signals `entered` and then waits for `resume` (at most 20 s).
pub fn pausing_hook(
    entered: Arc<tokio::sync::Notify>,
    resume: Arc<tokio::sync::Notify>,
) -> BeforeApplyHook {
    Arc::new(move |_snapshot| {
        use futures::FutureExt;
        let (entered, resume) = (Arc::clone(&entered), Arc::clone(&resume));
        async move {
            entered.notify_one();
            let _ = tokio::time::timeout(Duration::from_secs(20), resume.notified()).await;
        }
        .boxed()
    })
}

/// Sends a request head (and `body`) and leaves the connection open.
pub async fn send_head(app: &TestApp, head: &str, body: &[u8]) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(app.base.trim_start_matches("http://"))
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, head.as_bytes())
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, body)
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::flush(&mut stream).await.unwrap();
    stream
}

/// The status of the first answer on the connection, within a deadline.
pub async fn answer_status(stream: &mut tokio::net::TcpStream, deadline: Duration) -> Option<u16> {
    let mut buffer = vec![0u8; 4096];
    let n = tokio::time::timeout(deadline, tokio::io::AsyncReadExt::read(stream, &mut buffer))
        .await
        .ok()?
        .ok()?;
    String::from_utf8_lossy(&buffer[..n])
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
}
