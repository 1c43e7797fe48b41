//! Settings, layered: built-in defaults, then an optional TOML file (`--config`), then
//! `QUIESCE_*` environment variables and command-line flags (a flag beats its variable).

use std::{net::SocketAddr, path::PathBuf, str::FromStr, time::Duration};

use secrecy::SecretString;
use serde::Deserialize;

pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/quiesce";
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Metrics are served apart from the API, on loopback, so they are not exposed with it.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";
/// Quiet time after an entity's last event before it is evaluated.
pub const DEFAULT_DEBOUNCE_WINDOW: Duration = Duration::from_secs(15);
/// Longest an entity with pending events waits, however steady its stream.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(120);
/// Evaluations run at once per process; evaluation is I/O bound, so more than the cores.
pub const DEFAULT_WORKERS: usize = 256;
pub const DEFAULT_REDIS_PREFIX: &str = "quiesce";
/// Queue shards; each is one Redis hash tag, so a cluster can spread them.
pub const DEFAULT_SHARDS: u16 = 16;
/// How long a claim (and the entity lock) lives without renewal; renewed every third of it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Shortest lease derived from measured evaluation times (p99 x 2 + margin); `lease` is the longest.
pub const DEFAULT_LEASE_FLOOR: Duration = Duration::from_secs(1);
/// Longest the poller sleeps when nothing is due sooner.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Most entities claimed from one shard in one script call.
pub const DEFAULT_CLAIM_BATCH: usize = 64;
/// Base delay before an entity that was locked or in flight elsewhere is tried again (jittered).
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(250);
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;
pub const DEFAULT_MAX_BATCH: usize = 1000;
/// Events per second one source (a named source, or one ingest token) may send.
pub const DEFAULT_RATE_LIMIT: u32 = 10_000;
/// Events a source may send at once above its rate; at least the largest batch.
pub const DEFAULT_RATE_BURST: u32 = 20_000;
/// Longest a request may take, body upload included, before it is answered 408.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Ingest requests handled at once; more are shed with 503 and Retry-After.
pub const DEFAULT_MAX_CONCURRENT_INGEST: usize = 512;
pub const DEFAULT_DB_MAX_CONNECTIONS: u32 = 16;
/// Longest a request or worker waits for Redis or Postgres before answering 503 / retrying.
pub const DEFAULT_BACKEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest one evaluation may run (snapshot, rules, write) before it is abandoned and retried.
pub const DEFAULT_EVALUATION_TIMEOUT: Duration = Duration::from_secs(10);
/// Failed attempts (errors, panics, timeouts, expired leases) before an entity is dead-lettered.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// First retry backoff after a failed attempt; doubles per attempt, with full jitter.
pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_secs(1);
/// Longest retry backoff.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(300);
/// How long event ids are kept for dedup: longer than senders retry (about 3 days).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// How often expired events are deleted.
pub const DEFAULT_RETENTION_INTERVAL: Duration = Duration::from_secs(600);
/// Most events deleted by one statement.
pub const DEFAULT_RETENTION_BATCH: usize = 10_000;
/// A rule whose 24h reversal rate passes this fraction raises the reversal-rate alert.
pub const DEFAULT_REVERSAL_ALERT_THRESHOLD: f64 = 0.2;
/// How long the override implied by a reversal keeps automation from redoing the action.
pub const DEFAULT_OVERRIDE_AFTER_REVERSAL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Longest wait for the webhook receiver's answer.
pub const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a webhook is retried before it joins the failed deliveries.
pub const DEFAULT_DELIVERY_HORIZON: Duration = Duration::from_secs(24 * 3600);
/// First retry backoff of a failed webhook; doubles per attempt, full jitter.
pub const DEFAULT_DELIVERY_BACKOFF_BASE: Duration = Duration::from_secs(1);
/// Longest webhook retry backoff (and the longest Retry-After honoured).
pub const DEFAULT_DELIVERY_BACKOFF_MAX: Duration = Duration::from_secs(600);
/// How often the repair sweep looks in Postgres for entities owed an evaluation that Redis lost.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(30);
/// Most entities one sweep pass examines.
pub const DEFAULT_SWEEP_BATCH: usize = 1000;
/// How long after its last event an entity may be missing from Redis before the sweep repairs
/// it: longer than an ingest takes from its Postgres commit to its Redis schedule.
pub const DEFAULT_SWEEP_GRACE: Duration = Duration::from_secs(10);
/// How long shutdown waits for running evaluations before giving their claims back.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {source}")]
    ParseFile {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("invalid {var} (--{flag}) {value:?}: {reason}")]
    Invalid {
        var: &'static str,
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error("invalid {var} ({field}): {reason}")]
    Inconsistent {
        var: &'static str,
        field: &'static str,
        reason: String,
    },
}

/// How an event moves an entity's fire-at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleMode {
    /// Every event pushes the fire-at to now + window (capped by max wait).
    Sliding,
    /// The first pending event fixes the fire-at at its time + window.
    Fixed,
}

impl ScheduleMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleMode::Sliding => "sliding",
            ScheduleMode::Fixed => "fixed",
        }
    }
}

impl FromStr for ScheduleMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sliding" => Ok(ScheduleMode::Sliding),
            "fixed" => Ok(ScheduleMode::Fixed),
            _ => Err("expected sliding or fixed".into()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err("expected text or json".into()),
        }
    }
}

/// Every setting, with its default. Field docs are the reference for the config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Postgres connection URL (the source of truth).
    pub database_url: SecretString,
    /// Redis connection URL (the debounce schedule).
    pub redis_url: SecretString,
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// Listener serving only /metrics and /healthz, apart from the API; `None`: no metrics
    /// listener.
    #[serde(deserialize_with = "listen_or_off")]
    pub metrics_listen: Option<SocketAddr>,
    /// Rules file (TOML); `None` uses the shipped default rules.
    pub rules: Option<PathBuf>,
    #[serde(with = "humantime_serde")]
    pub debounce_window: Duration,
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
    pub schedule_mode: ScheduleMode,
    /// Evaluations run at once by this process.
    pub workers: usize,
    /// Namespace of every Redis key.
    pub redis_prefix: String,
    pub shards: u16,
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    #[serde(with = "humantime_serde")]
    pub lease_floor: Duration,
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    pub claim_batch: usize,
    #[serde(with = "humantime_serde")]
    pub retry_delay: Duration,
    pub body_limit: usize,
    pub max_batch: usize,
    /// Events per second per source (default for named sources without their own).
    pub rate_limit: u32,
    /// Events per source above the rate at once.
    pub rate_burst: u32,
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    pub max_concurrent_ingest: usize,
    /// Named webhook senders, each posting to `/v1/sources/{name}/events` with its own secrets.
    pub sources: Vec<SourceSettings>,
    pub db_max_connections: u32,
    #[serde(with = "humantime_serde")]
    pub backend_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub evaluation_timeout: Duration,
    pub max_attempts: u32,
    #[serde(with = "humantime_serde")]
    pub backoff_base: Duration,
    #[serde(with = "humantime_serde")]
    pub backoff_max: Duration,
    #[serde(with = "humantime_serde")]
    pub override_after_reversal: Duration,
    /// Exported as `quiesce_reversal_rate_alert_threshold` for the reversal-rate alert.
    pub reversal_alert_threshold: f64,
    /// API tokens as `role:<sha256 hex of the token>` (roles: ingest, moderator, admin).
    pub api_tokens: Vec<String>,
    /// Run the API without tokens and inbound signatures: for local development only.
    pub insecure_dev: bool,
    /// Standard Webhooks secrets (`whsec_...`) that inbound events must be signed with; empty:
    /// inbound signatures are not checked.
    pub inbound_secrets: Vec<SecretString>,
    /// GitHub-style secrets for `X-Hub-Signature-256: sha256=<hex>` senders.
    pub inbound_github_secrets: Vec<SecretString>,
    /// Accepted difference between a signed request's timestamp and now, both ways.
    #[serde(with = "humantime_serde")]
    pub signature_tolerance: Duration,
    /// Where applied actions and reversals are delivered (POST); `None`: rows wait in the outbox.
    pub webhook_url: Option<String>,
    /// Standard Webhooks secret (`whsec_...`) that signs deliveries.
    pub webhook_secret: Option<SecretString>,
    #[serde(with = "humantime_serde")]
    pub delivery_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub delivery_horizon: Duration,
    #[serde(with = "humantime_serde")]
    pub delivery_backoff_base: Duration,
    #[serde(with = "humantime_serde")]
    pub delivery_backoff_max: Duration,
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    #[serde(with = "humantime_serde")]
    pub retention_interval: Duration,
    pub retention_batch: usize,
    #[serde(with = "humantime_serde")]
    pub sweep_interval: Duration,
    pub sweep_batch: usize,
    #[serde(with = "humantime_serde")]
    pub sweep_grace: Duration,
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    pub log_format: LogFormat,
    /// Name recorded with each evaluation; defaults to host name and process id.
    pub worker_id: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            database_url: SecretString::from(DEFAULT_DATABASE_URL),
            redis_url: SecretString::from(DEFAULT_REDIS_URL),
            listen: DEFAULT_LISTEN.parse().expect("default listen address"),
            metrics_listen: Some(
                DEFAULT_METRICS_LISTEN
                    .parse()
                    .expect("default metrics address"),
            ),
            rules: None,
            debounce_window: DEFAULT_DEBOUNCE_WINDOW,
            max_wait: DEFAULT_MAX_WAIT,
            schedule_mode: ScheduleMode::Sliding,
            workers: DEFAULT_WORKERS,
            redis_prefix: DEFAULT_REDIS_PREFIX.to_owned(),
            shards: DEFAULT_SHARDS,
            lease: DEFAULT_LEASE,
            lease_floor: DEFAULT_LEASE_FLOOR,
            poll_interval: DEFAULT_POLL_INTERVAL,
            claim_batch: DEFAULT_CLAIM_BATCH,
            retry_delay: DEFAULT_RETRY_DELAY,
            body_limit: DEFAULT_BODY_LIMIT,
            max_batch: DEFAULT_MAX_BATCH,
            rate_limit: DEFAULT_RATE_LIMIT,
            rate_burst: DEFAULT_RATE_BURST,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_concurrent_ingest: DEFAULT_MAX_CONCURRENT_INGEST,
            sources: Vec::new(),
            db_max_connections: DEFAULT_DB_MAX_CONNECTIONS,
            backend_timeout: DEFAULT_BACKEND_TIMEOUT,
            evaluation_timeout: DEFAULT_EVALUATION_TIMEOUT,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            backoff_base: DEFAULT_BACKOFF_BASE,
            backoff_max: DEFAULT_BACKOFF_MAX,
            override_after_reversal: DEFAULT_OVERRIDE_AFTER_REVERSAL,
            reversal_alert_threshold: DEFAULT_REVERSAL_ALERT_THRESHOLD,
            api_tokens: Vec::new(),
            insecure_dev: false,
            inbound_secrets: Vec::new(),
            inbound_github_secrets: Vec::new(),
            signature_tolerance: Duration::from_secs(300),
            webhook_url: None,
            webhook_secret: None,
            delivery_timeout: DEFAULT_DELIVERY_TIMEOUT,
            delivery_horizon: DEFAULT_DELIVERY_HORIZON,
            delivery_backoff_base: DEFAULT_DELIVERY_BACKOFF_BASE,
            delivery_backoff_max: DEFAULT_DELIVERY_BACKOFF_MAX,
            retention: DEFAULT_RETENTION,
            retention_interval: DEFAULT_RETENTION_INTERVAL,
            retention_batch: DEFAULT_RETENTION_BATCH,
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
            sweep_batch: DEFAULT_SWEEP_BATCH,
            sweep_grace: DEFAULT_SWEEP_GRACE,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            log_format: LogFormat::Text,
            worker_id: default_worker_id(),
        }
    }
}

/// A named webhook sender: its own secrets, and optionally its own rate.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSettings {
    /// Path segment of its endpoint: 1-64 of `a-z 0-9 - _`.
    pub name: String,
    /// Standard Webhooks secrets (`whsec_...`); several for rotation.
    #[serde(default)]
    pub secrets: Vec<SecretString>,
    /// GitHub-style secrets for `X-Hub-Signature-256` senders.
    #[serde(default)]
    pub github_secrets: Vec<SecretString>,
    /// Events per second; `None`: the global `rate_limit`.
    #[serde(default)]
    pub rate_limit: Option<u32>,
    /// Burst; `None`: the global `rate_burst`.
    #[serde(default)]
    pub rate_burst: Option<u32>,
}

impl SourceSettings {
    fn check(&self) -> Result<(), String> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !name_ok {
            return Err(format!(
                "source name {:?} must be 1-64 of a-z, 0-9, - and _",
                self.name
            ));
        }
        if self.secrets.is_empty() && self.github_secrets.is_empty() {
            return Err(format!(
                "source {} has no secret; every source must sign its requests",
                self.name
            ));
        }
        if let Some(reason) = self.secrets.iter().find_map(|s| validate_secret(s).err()) {
            return Err(format!("source {}: {reason}", self.name));
        }
        if self.rate_limit == Some(0) || self.rate_burst == Some(0) {
            return Err(format!(
                "source {}: rate_limit and rate_burst must be greater than zero",
                self.name
            ));
        }
        Ok(())
    }
}

/// `name=whsec_...` or `name=github:<secret>`, comma-separated; a name given several times has
/// several secrets (rotation). Rates come from the global settings (or the config file).
fn parse_sources(raw: &str) -> Result<Vec<SourceSettings>, String> {
    let mut sources: Vec<SourceSettings> = Vec::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        // Errors never echo the entry: it holds a secret.
        let (name, secret) = entry
            .split_once('=')
            .ok_or("expected name=whsec_<base64> or name=github:<secret>")?;
        let index = match sources.iter().position(|s| s.name == name) {
            Some(index) => index,
            None => {
                sources.push(SourceSettings {
                    name: name.to_owned(),
                    secrets: Vec::new(),
                    github_secrets: Vec::new(),
                    rate_limit: None,
                    rate_burst: None,
                });
                sources.len() - 1
            }
        };
        let source = &mut sources[index];
        match secret.strip_prefix("github:") {
            Some(github) if !github.is_empty() => {
                source.github_secrets.push(SecretString::from(github))
            }
            Some(_) => return Err(format!("source {name}: the github secret is empty")),
            None => source.secrets.push(SecretString::from(secret)),
        }
    }
    for source in &sources {
        source.check()?;
    }
    Ok(sources)
}

fn parse_listen_or_off(raw: &str) -> Result<Option<SocketAddr>, String> {
    if raw.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    raw.parse()
        .map(Some)
        .map_err(|_| "expected host:port, e.g. 127.0.0.1:9464, or off".into())
}

fn listen_or_off<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SocketAddr>, D::Error> {
    let raw = String::deserialize(deserializer)?;
    parse_listen_or_off(&raw).map_err(serde::de::Error::custom)
}

fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "quiesce".to_owned());
    format!("{host}-{}", std::process::id())
}

/// Overrides from flags or `QUIESCE_*` variables; each is parsed by [`Settings::load`] so
/// that an invalid value is reported with the variable's name.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigArgs {
    /// TOML file with any of the settings below (keys in snake_case, e.g. max_wait = "2m").
    #[arg(long, env = "QUIESCE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Postgres URL [default: postgres://postgres@127.0.0.1:5432/quiesce].
    #[arg(
        long,
        env = "QUIESCE_DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,
    /// Redis URL [default: redis://127.0.0.1:6379].
    #[arg(
        long,
        env = "QUIESCE_REDIS_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub redis_url: Option<String>,
    /// HTTP listen address [default: 127.0.0.1:8080].
    #[arg(long, env = "QUIESCE_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,
    /// Listener serving only /metrics and /healthz, apart from the API; `off` for none [default: 127.0.0.1:9464].
    #[arg(long, env = "QUIESCE_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// Rules file (TOML) [default: the shipped default rules].
    #[arg(long, env = "QUIESCE_RULES", value_name = "FILE")]
    pub rules: Option<String>,
    /// Quiet time after an entity's last event before it is evaluated [default: 15s].
    #[arg(long, env = "QUIESCE_DEBOUNCE_WINDOW", value_name = "DURATION")]
    pub debounce_window: Option<String>,
    /// Longest an entity with pending events waits for evaluation [default: 2m].
    #[arg(long, env = "QUIESCE_MAX_WAIT", value_name = "DURATION")]
    pub max_wait: Option<String>,
    /// `sliding` (each event restarts the window) or `fixed` (first event fixes it) [default: sliding].
    #[arg(long, env = "QUIESCE_SCHEDULE_MODE", value_name = "MODE")]
    pub schedule_mode: Option<String>,
    /// Evaluations this process runs at once; they share their Postgres statements [default: 256].
    #[arg(long, env = "QUIESCE_WORKERS", value_name = "N")]
    pub workers: Option<String>,
    /// Namespace of every Redis key [default: quiesce].
    #[arg(long, env = "QUIESCE_REDIS_PREFIX", value_name = "PREFIX")]
    pub redis_prefix: Option<String>,
    /// Queue shards (Redis hash tags); every process must use the same number [default: 16].
    #[arg(long, env = "QUIESCE_SHARDS", value_name = "N")]
    pub shards: Option<String>,
    /// Longest claim and lock lifetime without renewal; the lease in use is p99 evaluation time x 2 + 1s, within lease-floor..lease [default: 30s].
    #[arg(long, env = "QUIESCE_LEASE", value_name = "DURATION")]
    pub lease: Option<String>,
    /// Shortest lease, however fast evaluations are (capped at --lease) [default: 1s].
    #[arg(long, env = "QUIESCE_LEASE_FLOOR", value_name = "DURATION")]
    pub lease_floor: Option<String>,
    /// Longest the poller sleeps when nothing is due sooner [default: 100ms].
    #[arg(long, env = "QUIESCE_POLL_INTERVAL", value_name = "DURATION")]
    pub poll_interval: Option<String>,
    /// Most entities claimed from a shard in one call [default: 64].
    #[arg(long, env = "QUIESCE_CLAIM_BATCH", value_name = "N")]
    pub claim_batch: Option<String>,
    /// Base delay (jittered) before retrying a locked or conflicted entity [default: 250ms].
    #[arg(long, env = "QUIESCE_RETRY_DELAY", value_name = "DURATION")]
    pub retry_delay: Option<String>,
    /// Largest accepted request body in bytes [default: 1048576].
    #[arg(long, env = "QUIESCE_BODY_LIMIT", value_name = "BYTES")]
    pub body_limit: Option<String>,
    /// Most events in one request [default: 1000].
    #[arg(long, env = "QUIESCE_MAX_BATCH", value_name = "N")]
    pub max_batch: Option<String>,
    /// Events per second one source may send (a named source, or one ingest token); more get 429 with Retry-After [default: 10000].
    #[arg(long, env = "QUIESCE_RATE_LIMIT", value_name = "EVENTS")]
    pub rate_limit: Option<String>,
    /// Events a source may send at once above its rate; at least --max-batch [default: 20000].
    #[arg(long, env = "QUIESCE_RATE_BURST", value_name = "EVENTS")]
    pub rate_burst: Option<String>,
    /// Longest a request may take, body upload included, before it is answered 408 [default: 30s].
    #[arg(long, env = "QUIESCE_REQUEST_TIMEOUT", value_name = "DURATION")]
    pub request_timeout: Option<String>,
    /// Ingest requests handled at once; more are answered 503 with Retry-After [default: 512].
    #[arg(long, env = "QUIESCE_MAX_CONCURRENT_INGEST", value_name = "N")]
    pub max_concurrent_ingest: Option<String>,
    /// Named webhook senders posting to /v1/sources/{name}/events, comma-separated name=whsec_<base64> or name=github:<secret>; repeat a name for rotation [default: none].
    #[arg(
        long,
        env = "QUIESCE_SOURCES",
        value_name = "SOURCES",
        hide_env_values = true
    )]
    pub sources: Option<String>,
    /// Postgres pool size [default: 16].
    #[arg(long, env = "QUIESCE_DB_MAX_CONNECTIONS", value_name = "N")]
    pub db_max_connections: Option<String>,
    /// Longest wait for Redis or Postgres before answering 503 or retrying [default: 5s].
    #[arg(long, env = "QUIESCE_BACKEND_TIMEOUT", value_name = "DURATION")]
    pub backend_timeout: Option<String>,
    /// Longest one evaluation may run before it is abandoned and retried [default: 10s].
    #[arg(long, env = "QUIESCE_EVALUATION_TIMEOUT", value_name = "DURATION")]
    pub evaluation_timeout: Option<String>,
    /// Failed attempts before an entity is dead-lettered [default: 5].
    #[arg(long, env = "QUIESCE_MAX_ATTEMPTS", value_name = "N")]
    pub max_attempts: Option<String>,
    /// First retry backoff after a failed attempt; doubles each attempt, full jitter [default: 1s].
    #[arg(long, env = "QUIESCE_BACKOFF_BASE", value_name = "DURATION")]
    pub backoff_base: Option<String>,
    /// Longest retry backoff [default: 5m].
    #[arg(long, env = "QUIESCE_BACKOFF_MAX", value_name = "DURATION")]
    pub backoff_max: Option<String>,
    /// How long a reversal keeps automation from redoing the action (an implied override) [default: 7days].
    #[arg(long, env = "QUIESCE_OVERRIDE_AFTER_REVERSAL", value_name = "DURATION")]
    pub override_after_reversal: Option<String>,
    /// A rule's 24h reversal rate above which the reversal-rate alert fires; exported as a metric [default: 0.2].
    #[arg(
        long,
        env = "QUIESCE_REVERSAL_ALERT_THRESHOLD",
        value_name = "FRACTION"
    )]
    pub reversal_alert_threshold: Option<String>,
    /// API tokens, comma-separated, each role:<sha256 hex of the token> with role ingest, moderator or admin [default: none].
    #[arg(
        long,
        env = "QUIESCE_API_TOKENS",
        value_name = "SPECS",
        hide_env_values = true
    )]
    pub api_tokens: Option<String>,
    /// Serve the API without API tokens and inbound signatures (local development only; `make run` uses it).
    #[arg(long, env = "QUIESCE_INSECURE_DEV")]
    pub insecure_dev: bool,
    /// Standard Webhooks secrets (whsec_<base64>, comma-separated; several for rotation) that POST /v1/events must be signed with [default: none, not checked].
    #[arg(
        long,
        env = "QUIESCE_INBOUND_SECRETS",
        value_name = "SECRETS",
        hide_env_values = true
    )]
    pub inbound_secrets: Option<String>,
    /// GitHub-style secrets (comma-separated) for X-Hub-Signature-256 senders [default: none].
    #[arg(
        long,
        env = "QUIESCE_INBOUND_GITHUB_SECRETS",
        value_name = "SECRETS",
        hide_env_values = true
    )]
    pub inbound_github_secrets: Option<String>,
    /// Accepted clock difference of a signed request, both ways [default: 5m].
    #[arg(long, env = "QUIESCE_SIGNATURE_TOLERANCE", value_name = "DURATION")]
    pub signature_tolerance: Option<String>,
    /// URL that receives applied actions and reversals as signed webhooks [default: none, rows wait in the outbox].
    #[arg(long, env = "QUIESCE_WEBHOOK_URL", value_name = "URL")]
    pub webhook_url: Option<String>,
    /// Standard Webhooks secret (whsec_<base64>) that signs deliveries [default: none, unsigned].
    #[arg(
        long,
        env = "QUIESCE_WEBHOOK_SECRET",
        value_name = "SECRET",
        hide_env_values = true
    )]
    pub webhook_secret: Option<String>,
    /// Longest wait for the receiver's answer [default: 10s].
    #[arg(long, env = "QUIESCE_DELIVERY_TIMEOUT", value_name = "DURATION")]
    pub delivery_timeout: Option<String>,
    /// How long a webhook is retried before it joins the failed deliveries [default: 24h].
    #[arg(long, env = "QUIESCE_DELIVERY_HORIZON", value_name = "DURATION")]
    pub delivery_horizon: Option<String>,
    /// First retry backoff of a failed webhook; doubles per attempt, full jitter [default: 1s].
    #[arg(long, env = "QUIESCE_DELIVERY_BACKOFF_BASE", value_name = "DURATION")]
    pub delivery_backoff_base: Option<String>,
    /// Longest webhook retry backoff and longest Retry-After honoured [default: 10m].
    #[arg(long, env = "QUIESCE_DELIVERY_BACKOFF_MAX", value_name = "DURATION")]
    pub delivery_backoff_max: Option<String>,
    /// How long event ids are kept for dedup; older events are deleted (totals stay) [default: 7days].
    #[arg(long, env = "QUIESCE_RETENTION", value_name = "DURATION")]
    pub retention: Option<String>,
    /// How often expired events are deleted [default: 10m].
    #[arg(long, env = "QUIESCE_RETENTION_INTERVAL", value_name = "DURATION")]
    pub retention_interval: Option<String>,
    /// Most events one delete statement removes [default: 10000].
    #[arg(long, env = "QUIESCE_RETENTION_BATCH", value_name = "N")]
    pub retention_batch: Option<String>,
    /// How often the repair sweep re-schedules, from Postgres, entities Redis lost [default: 30s].
    #[arg(long, env = "QUIESCE_SWEEP_INTERVAL", value_name = "DURATION")]
    pub sweep_interval: Option<String>,
    /// Most entities one sweep pass examines [default: 1000].
    #[arg(long, env = "QUIESCE_SWEEP_BATCH", value_name = "N")]
    pub sweep_batch: Option<String>,
    /// Quiet time after an entity's last event before the sweep may repair it; at least the backend timeout [default: 10s].
    #[arg(long, env = "QUIESCE_SWEEP_GRACE", value_name = "DURATION")]
    pub sweep_grace: Option<String>,
    /// How long shutdown waits for running evaluations [default: 30s].
    #[arg(long, env = "QUIESCE_SHUTDOWN_TIMEOUT", value_name = "DURATION")]
    pub shutdown_timeout: Option<String>,
    /// Log format: `text` or `json` [default: text]; the level comes from RUST_LOG.
    #[arg(long, env = "QUIESCE_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// Name recorded with each evaluation [default: <hostname>-<pid>].
    #[arg(long, env = "QUIESCE_WORKER_ID", value_name = "NAME")]
    pub worker_id: Option<String>,
}

fn duration(raw: &str) -> Result<Duration, String> {
    humantime::parse_duration(raw)
        .map_err(|e| format!("{e}; expected a duration such as 15s, 500ms or 2m"))
}

fn positive<T: FromStr + PartialOrd + Default>(raw: &str) -> Result<T, String> {
    match raw.parse::<T>() {
        Ok(n) if n > T::default() => Ok(n),
        _ => Err("expected a positive whole number".into()),
    }
}

impl Settings {
    /// Defaults, then the file named by `--config`, then variables and flags.
    pub fn load(args: &ConfigArgs) -> Result<Self, ConfigError> {
        let mut settings = match &args.config {
            Some(path) => Self::from_file(path)?,
            None => Self::default(),
        };
        settings.apply(args)?;
        settings.validate()?;
        Ok(settings)
    }

    fn from_file(path: &PathBuf) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
            path: path.clone(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ConfigError::ParseFile {
            path: path.clone(),
            source: Box::new(source),
        })
    }

    fn apply(&mut self, args: &ConfigArgs) -> Result<(), ConfigError> {
        fn set<T>(
            target: &mut T,
            raw: &Option<String>,
            var: &'static str,
            flag: &'static str,
            parse: impl Fn(&str) -> Result<T, String>,
        ) -> Result<(), ConfigError> {
            if let Some(raw) = raw {
                *target = parse(raw.trim()).map_err(|reason| ConfigError::Invalid {
                    var,
                    flag,
                    value: raw.clone(),
                    reason,
                })?;
            }
            Ok(())
        }
        let secret = |raw: &str| Ok(SecretString::from(raw));
        let text = |raw: &str| {
            if raw.is_empty() {
                Err("must not be empty".to_owned())
            } else {
                Ok(raw.to_owned())
            }
        };
        let a = args;
        // Secret values are not echoed back in errors.
        if a.database_url.as_deref().is_some_and(str::is_empty) {
            return Err(invalid_secret("QUIESCE_DATABASE_URL", "database-url"));
        }
        if a.redis_url.as_deref().is_some_and(str::is_empty) {
            return Err(invalid_secret("QUIESCE_REDIS_URL", "redis-url"));
        }
        set(
            &mut self.database_url,
            &a.database_url,
            "QUIESCE_DATABASE_URL",
            "database-url",
            secret,
        )?;
        set(
            &mut self.redis_url,
            &a.redis_url,
            "QUIESCE_REDIS_URL",
            "redis-url",
            secret,
        )?;
        set(
            &mut self.listen,
            &a.listen,
            "QUIESCE_LISTEN",
            "listen",
            |r| {
                r.parse()
                    .map_err(|_| "expected host:port, e.g. 127.0.0.1:8080".into())
            },
        )?;
        set(
            &mut self.metrics_listen,
            &a.metrics_listen,
            "QUIESCE_METRICS_LISTEN",
            "metrics-listen",
            parse_listen_or_off,
        )?;
        set(&mut self.rules, &a.rules, "QUIESCE_RULES", "rules", |r| {
            text(r).map(|p| Some(PathBuf::from(p)))
        })?;
        set(
            &mut self.debounce_window,
            &a.debounce_window,
            "QUIESCE_DEBOUNCE_WINDOW",
            "debounce-window",
            duration,
        )?;
        set(
            &mut self.max_wait,
            &a.max_wait,
            "QUIESCE_MAX_WAIT",
            "max-wait",
            duration,
        )?;
        set(
            &mut self.schedule_mode,
            &a.schedule_mode,
            "QUIESCE_SCHEDULE_MODE",
            "schedule-mode",
            str::parse,
        )?;
        set(
            &mut self.workers,
            &a.workers,
            "QUIESCE_WORKERS",
            "workers",
            positive,
        )?;
        set(
            &mut self.redis_prefix,
            &a.redis_prefix,
            "QUIESCE_REDIS_PREFIX",
            "redis-prefix",
            |r| {
                if r.is_empty() || r.contains(['{', '}']) || r.len() > 64 {
                    Err("expected 1-64 characters without braces".into())
                } else {
                    Ok(r.to_owned())
                }
            },
        )?;
        set(
            &mut self.shards,
            &a.shards,
            "QUIESCE_SHARDS",
            "shards",
            positive,
        )?;
        set(
            &mut self.lease,
            &a.lease,
            "QUIESCE_LEASE",
            "lease",
            duration,
        )?;
        set(
            &mut self.lease_floor,
            &a.lease_floor,
            "QUIESCE_LEASE_FLOOR",
            "lease-floor",
            duration,
        )?;
        set(
            &mut self.poll_interval,
            &a.poll_interval,
            "QUIESCE_POLL_INTERVAL",
            "poll-interval",
            duration,
        )?;
        set(
            &mut self.claim_batch,
            &a.claim_batch,
            "QUIESCE_CLAIM_BATCH",
            "claim-batch",
            positive,
        )?;
        set(
            &mut self.retry_delay,
            &a.retry_delay,
            "QUIESCE_RETRY_DELAY",
            "retry-delay",
            duration,
        )?;
        set(
            &mut self.body_limit,
            &a.body_limit,
            "QUIESCE_BODY_LIMIT",
            "body-limit",
            positive,
        )?;
        set(
            &mut self.max_batch,
            &a.max_batch,
            "QUIESCE_MAX_BATCH",
            "max-batch",
            positive,
        )?;
        set(
            &mut self.rate_limit,
            &a.rate_limit,
            "QUIESCE_RATE_LIMIT",
            "rate-limit",
            positive,
        )?;
        set(
            &mut self.rate_burst,
            &a.rate_burst,
            "QUIESCE_RATE_BURST",
            "rate-burst",
            positive,
        )?;
        set(
            &mut self.request_timeout,
            &a.request_timeout,
            "QUIESCE_REQUEST_TIMEOUT",
            "request-timeout",
            duration,
        )?;
        set(
            &mut self.max_concurrent_ingest,
            &a.max_concurrent_ingest,
            "QUIESCE_MAX_CONCURRENT_INGEST",
            "max-concurrent-ingest",
            positive,
        )?;
        if let Some(raw) = &a.sources {
            self.sources = parse_sources(raw).map_err(|reason| ConfigError::Invalid {
                var: "QUIESCE_SOURCES",
                flag: "sources",
                value: String::new(),
                reason,
            })?;
        }
        set(
            &mut self.db_max_connections,
            &a.db_max_connections,
            "QUIESCE_DB_MAX_CONNECTIONS",
            "db-max-connections",
            positive,
        )?;
        set(
            &mut self.backend_timeout,
            &a.backend_timeout,
            "QUIESCE_BACKEND_TIMEOUT",
            "backend-timeout",
            duration,
        )?;
        set(
            &mut self.evaluation_timeout,
            &a.evaluation_timeout,
            "QUIESCE_EVALUATION_TIMEOUT",
            "evaluation-timeout",
            duration,
        )?;
        set(
            &mut self.max_attempts,
            &a.max_attempts,
            "QUIESCE_MAX_ATTEMPTS",
            "max-attempts",
            positive,
        )?;
        set(
            &mut self.backoff_base,
            &a.backoff_base,
            "QUIESCE_BACKOFF_BASE",
            "backoff-base",
            duration,
        )?;
        set(
            &mut self.backoff_max,
            &a.backoff_max,
            "QUIESCE_BACKOFF_MAX",
            "backoff-max",
            duration,
        )?;
        set(
            &mut self.override_after_reversal,
            &a.override_after_reversal,
            "QUIESCE_OVERRIDE_AFTER_REVERSAL",
            "override-after-reversal",
            duration,
        )?;
        set(
            &mut self.reversal_alert_threshold,
            &a.reversal_alert_threshold,
            "QUIESCE_REVERSAL_ALERT_THRESHOLD",
            "reversal-alert-threshold",
            |r| match r.parse::<f64>() {
                Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
                _ => Err("expected a fraction from 0 to 1, e.g. 0.2".into()),
            },
        )?;
        if let Some(raw) = &a.api_tokens {
            let specs: Vec<String> = raw
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            for spec in &specs {
                crate::credentials::ApiToken::parse(spec).map_err(|reason| {
                    ConfigError::Invalid {
                        var: "QUIESCE_API_TOKENS",
                        flag: "api-tokens",
                        value: String::new(),
                        reason,
                    }
                })?;
            }
            self.api_tokens = specs;
        }
        if a.insecure_dev {
            self.insecure_dev = true;
        }
        if let Some(raw) = &a.inbound_secrets {
            let secrets: Vec<&str> = raw
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            for secret in &secrets {
                crate::credentials::WebhookSecret::parse(secret).map_err(|reason| {
                    ConfigError::Invalid {
                        var: "QUIESCE_INBOUND_SECRETS",
                        flag: "inbound-secrets",
                        value: String::new(),
                        reason,
                    }
                })?;
            }
            self.inbound_secrets = secrets.into_iter().map(SecretString::from).collect();
        }
        if let Some(raw) = &a.inbound_github_secrets {
            self.inbound_github_secrets = raw
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(SecretString::from)
                .collect();
        }
        set(
            &mut self.signature_tolerance,
            &a.signature_tolerance,
            "QUIESCE_SIGNATURE_TOLERANCE",
            "signature-tolerance",
            duration,
        )?;
        set(
            &mut self.webhook_url,
            &a.webhook_url,
            "QUIESCE_WEBHOOK_URL",
            "webhook-url",
            |r| {
                if r.starts_with("http://") || r.starts_with("https://") {
                    Ok(Some(r.to_owned()))
                } else {
                    Err("expected an http:// or https:// URL".into())
                }
            },
        )?;
        if let Some(raw) = &a.webhook_secret {
            // Checked without echoing the value.
            crate::credentials::WebhookSecret::parse(raw.trim()).map_err(|reason| {
                ConfigError::Invalid {
                    var: "QUIESCE_WEBHOOK_SECRET",
                    flag: "webhook-secret",
                    value: String::new(),
                    reason,
                }
            })?;
            self.webhook_secret = Some(SecretString::from(raw.trim()));
        }
        set(
            &mut self.delivery_timeout,
            &a.delivery_timeout,
            "QUIESCE_DELIVERY_TIMEOUT",
            "delivery-timeout",
            duration,
        )?;
        set(
            &mut self.delivery_horizon,
            &a.delivery_horizon,
            "QUIESCE_DELIVERY_HORIZON",
            "delivery-horizon",
            duration,
        )?;
        set(
            &mut self.delivery_backoff_base,
            &a.delivery_backoff_base,
            "QUIESCE_DELIVERY_BACKOFF_BASE",
            "delivery-backoff-base",
            duration,
        )?;
        set(
            &mut self.delivery_backoff_max,
            &a.delivery_backoff_max,
            "QUIESCE_DELIVERY_BACKOFF_MAX",
            "delivery-backoff-max",
            duration,
        )?;
        set(
            &mut self.retention,
            &a.retention,
            "QUIESCE_RETENTION",
            "retention",
            duration,
        )?;
        set(
            &mut self.retention_interval,
            &a.retention_interval,
            "QUIESCE_RETENTION_INTERVAL",
            "retention-interval",
            duration,
        )?;
        set(
            &mut self.retention_batch,
            &a.retention_batch,
            "QUIESCE_RETENTION_BATCH",
            "retention-batch",
            positive,
        )?;
        set(
            &mut self.sweep_interval,
            &a.sweep_interval,
            "QUIESCE_SWEEP_INTERVAL",
            "sweep-interval",
            duration,
        )?;
        set(
            &mut self.sweep_batch,
            &a.sweep_batch,
            "QUIESCE_SWEEP_BATCH",
            "sweep-batch",
            positive,
        )?;
        set(
            &mut self.sweep_grace,
            &a.sweep_grace,
            "QUIESCE_SWEEP_GRACE",
            "sweep-grace",
            duration,
        )?;
        set(
            &mut self.shutdown_timeout,
            &a.shutdown_timeout,
            "QUIESCE_SHUTDOWN_TIMEOUT",
            "shutdown-timeout",
            duration,
        )?;
        set(
            &mut self.log_format,
            &a.log_format,
            "QUIESCE_LOG_FORMAT",
            "log-format",
            str::parse,
        )?;
        set(
            &mut self.worker_id,
            &a.worker_id,
            "QUIESCE_WORKER_ID",
            "worker-id",
            text,
        )?;
        Ok(())
    }

    /// Checks every value, whichever layer set it, and the relations between them. Errors
    /// name the variable (and the config-file key).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |var, field, reason: &str| {
            Err(ConfigError::Inconsistent {
                var,
                field,
                reason: reason.to_owned(),
            })
        };
        if self.debounce_window.is_zero() {
            return fail(
                "QUIESCE_DEBOUNCE_WINDOW",
                "debounce_window",
                "must be greater than zero",
            );
        }
        if self.max_wait < self.debounce_window {
            return fail(
                "QUIESCE_MAX_WAIT",
                "max_wait",
                "must be at least the debounce window",
            );
        }
        if self.lease_floor < Duration::from_millis(300) {
            return fail(
                "QUIESCE_LEASE_FLOOR",
                "lease_floor",
                "must be at least 300ms (a lease is renewed every third of it)",
            );
        }
        if self.lease < Duration::from_millis(300) {
            return fail(
                "QUIESCE_LEASE",
                "lease",
                "must be at least 300ms (it is renewed every third of it)",
            );
        }
        if self.sweep_grace < self.backend_timeout {
            return fail(
                "QUIESCE_SWEEP_GRACE",
                "sweep_grace",
                "must be at least the backend timeout (an ingest may take that long to schedule)",
            );
        }
        if self.backoff_max < self.backoff_base {
            return fail(
                "QUIESCE_BACKOFF_MAX",
                "backoff_max",
                "must be at least the backoff base",
            );
        }
        if self.retention < Duration::from_secs(3600) {
            return fail(
                "QUIESCE_RETENTION",
                "retention",
                "must be at least 1h (senders retry for days; 7days is the default)",
            );
        }
        if let Some(secret) = &self.webhook_secret
            && let Err(reason) = validate_secret(secret)
        {
            return fail("QUIESCE_WEBHOOK_SECRET", "webhook_secret", &reason);
        }
        if let Some(reason) = self
            .api_tokens
            .iter()
            .find_map(|spec| crate::credentials::ApiToken::parse(spec).err())
        {
            return fail("QUIESCE_API_TOKENS", "api_tokens", &reason);
        }
        if let Some(reason) = self
            .inbound_secrets
            .iter()
            .find_map(|s| validate_secret(s).err())
        {
            return fail("QUIESCE_INBOUND_SECRETS", "inbound_secrets", &reason);
        }
        if !(0.0..=1.0).contains(&self.reversal_alert_threshold) {
            return fail(
                "QUIESCE_REVERSAL_ALERT_THRESHOLD",
                "reversal_alert_threshold",
                "must be a fraction from 0 to 1",
            );
        }
        if let Some(reason) = self.sources.iter().find_map(|s| s.check().err()) {
            return fail("QUIESCE_SOURCES", "sources", &reason);
        }
        if let Some(name) = self
            .sources
            .iter()
            .enumerate()
            .find(|(i, s)| self.sources[..*i].iter().any(|o| o.name == s.name))
            .map(|(_, s)| &s.name)
        {
            return fail(
                "QUIESCE_SOURCES",
                "sources",
                &format!("source {name} is configured twice; list all its secrets in one entry"),
            );
        }
        let smallest_burst = self
            .sources
            .iter()
            .filter_map(|s| s.rate_burst)
            .chain([self.rate_burst])
            .min()
            .unwrap_or(self.rate_burst);
        if (smallest_burst as usize) < self.max_batch {
            return fail(
                "QUIESCE_RATE_BURST",
                "rate_burst",
                "must be at least max_batch (a full batch could never pass)",
            );
        }
        if self.request_timeout <= self.backend_timeout {
            return fail(
                "QUIESCE_REQUEST_TIMEOUT",
                "request_timeout",
                "must be longer than the backend timeout (which answers 503 first)",
            );
        }
        if self.delivery_backoff_max < self.delivery_backoff_base {
            return fail(
                "QUIESCE_DELIVERY_BACKOFF_MAX",
                "delivery_backoff_max",
                "must be at least the delivery backoff base",
            );
        }
        let zero_checks: [(&'static str, &'static str, bool); 22] = [
            ("QUIESCE_RATE_LIMIT", "rate_limit", self.rate_limit == 0),
            (
                "QUIESCE_MAX_CONCURRENT_INGEST",
                "max_concurrent_ingest",
                self.max_concurrent_ingest == 0,
            ),
            (
                "QUIESCE_REQUEST_TIMEOUT",
                "request_timeout",
                self.request_timeout.is_zero(),
            ),
            (
                "QUIESCE_DELIVERY_TIMEOUT",
                "delivery_timeout",
                self.delivery_timeout.is_zero(),
            ),
            (
                "QUIESCE_DELIVERY_HORIZON",
                "delivery_horizon",
                self.delivery_horizon.is_zero(),
            ),
            (
                "QUIESCE_DELIVERY_BACKOFF_BASE",
                "delivery_backoff_base",
                self.delivery_backoff_base.is_zero(),
            ),
            (
                "QUIESCE_RETENTION_INTERVAL",
                "retention_interval",
                self.retention_interval.is_zero(),
            ),
            (
                "QUIESCE_RETENTION_BATCH",
                "retention_batch",
                self.retention_batch == 0,
            ),
            (
                "QUIESCE_MAX_ATTEMPTS",
                "max_attempts",
                self.max_attempts == 0,
            ),
            (
                "QUIESCE_BACKOFF_BASE",
                "backoff_base",
                self.backoff_base.is_zero(),
            ),
            (
                "QUIESCE_SWEEP_INTERVAL",
                "sweep_interval",
                self.sweep_interval.is_zero(),
            ),
            ("QUIESCE_SWEEP_BATCH", "sweep_batch", self.sweep_batch == 0),
            (
                "QUIESCE_EVALUATION_TIMEOUT",
                "evaluation_timeout",
                self.evaluation_timeout.is_zero(),
            ),
            (
                "QUIESCE_POLL_INTERVAL",
                "poll_interval",
                self.poll_interval.is_zero(),
            ),
            (
                "QUIESCE_RETRY_DELAY",
                "retry_delay",
                self.retry_delay.is_zero(),
            ),
            (
                "QUIESCE_BACKEND_TIMEOUT",
                "backend_timeout",
                self.backend_timeout.is_zero(),
            ),
            ("QUIESCE_WORKERS", "workers", self.workers == 0),
            ("QUIESCE_SHARDS", "shards", self.shards == 0),
            ("QUIESCE_CLAIM_BATCH", "claim_batch", self.claim_batch == 0),
            ("QUIESCE_BODY_LIMIT", "body_limit", self.body_limit == 0),
            ("QUIESCE_MAX_BATCH", "max_batch", self.max_batch == 0),
            (
                "QUIESCE_DB_MAX_CONNECTIONS",
                "db_max_connections",
                self.db_max_connections == 0,
            ),
        ];
        if let Some((var, field, _)) = zero_checks.iter().find(|(_, _, zero)| *zero) {
            return fail(var, field, "must be greater than zero");
        }
        if self.redis_prefix.is_empty()
            || self.redis_prefix.len() > 64
            || self.redis_prefix.contains(['{', '}'])
        {
            return fail(
                "QUIESCE_REDIS_PREFIX",
                "redis_prefix",
                "must be 1-64 characters without braces",
            );
        }
        Ok(())
    }
}

impl Settings {
    /// What `serve` needs before it exposes the API: tokens and inbound signing secrets, unless
    /// `--insecure-dev` says otherwise.
    pub fn check_api_security(&self) -> Result<(), String> {
        if self.insecure_dev {
            return Ok(());
        }
        let mut missing = Vec::new();
        if self.api_tokens.is_empty() {
            missing.push(
                "QUIESCE_API_TOKENS (role:<sha256 hex of a token>, roles ingest, moderator, admin)",
            );
        }
        if self.inbound_secrets.is_empty()
            && self.inbound_github_secrets.is_empty()
            && self.sources.is_empty()
        {
            missing.push(
                "QUIESCE_INBOUND_SECRETS (whsec_<base64>), QUIESCE_INBOUND_GITHUB_SECRETS or QUIESCE_SOURCES",
            );
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "refusing to serve an open API: configure {}; or pass --insecure-dev for local development",
                missing.join(" and ")
            ))
        }
    }
}

fn validate_secret(secret: &SecretString) -> Result<(), String> {
    use secrecy::ExposeSecret;
    crate::credentials::WebhookSecret::parse(secret.expose_secret()).map(|_| ())
}

fn invalid_secret(var: &'static str, flag: &'static str) -> ConfigError {
    ConfigError::Invalid {
        var,
        flag,
        value: String::new(),
        reason: "must not be empty".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_value_names_its_variable() {
        let args = ConfigArgs {
            max_wait: Some("soon".into()),
            ..Default::default()
        };
        let err = Settings::load(&args).unwrap_err().to_string();
        assert!(err.contains("QUIESCE_MAX_WAIT"), "{err}");
        let args = ConfigArgs {
            workers: Some("0".into()),
            ..Default::default()
        };
        let err = Settings::load(&args).unwrap_err().to_string();
        assert!(err.contains("QUIESCE_WORKERS"), "{err}");
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = std::env::temp_dir().join(format!("quiesce-config-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("quiesce.toml");
        std::fs::write(
            &file,
            "max_wait = \"5m\"\ndebounce_window = \"30s\"\nworkers = 4\n",
        )
        .unwrap();
        let args = ConfigArgs {
            config: Some(file.clone()),
            debounce_window: Some("1s".into()),
            ..Default::default()
        };
        let settings = Settings::load(&args).unwrap();
        assert_eq!(settings.max_wait, Duration::from_secs(300));
        assert_eq!(settings.debounce_window, Duration::from_secs(1));
        assert_eq!(settings.workers, 4);
        assert_eq!(settings.listen.to_string(), DEFAULT_LISTEN);

        std::fs::write(&file, "max_wiat = \"5m\"\n").unwrap();
        let err = Settings::load(&args).unwrap_err().to_string();
        assert!(err.contains("max_wiat"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn max_wait_shorter_than_the_window_is_refused() {
        let args = ConfigArgs {
            debounce_window: Some("10s".into()),
            max_wait: Some("5s".into()),
            ..Default::default()
        };
        let err = Settings::load(&args).unwrap_err().to_string();
        assert!(err.contains("QUIESCE_MAX_WAIT"), "{err}");
    }

    #[test]
    fn values_from_the_file_are_checked_too() {
        let dir = std::env::temp_dir().join(format!("quiesce-config-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("quiesce.toml");
        std::fs::write(&file, "max_batch = 0\n").unwrap();
        let args = ConfigArgs {
            config: Some(file),
            ..Default::default()
        };
        let err = Settings::load(&args).unwrap_err().to_string();
        assert!(err.contains("QUIESCE_MAX_BATCH"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn sources_come_from_name_secret_pairs_and_errors_never_echo_a_secret() {
        let args = ConfigArgs {
            sources: Some(
                "shop=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, shop=whsec_QVFBQUFBQUFBQUFBQUFBQUFBQUE=,forum=github:hunter2-secret".into(),
            ),
            ..Default::default()
        };
        let settings = Settings::load(&args).unwrap();
        assert_eq!(settings.sources.len(), 2);
        assert_eq!(settings.sources[0].name, "shop");
        assert_eq!(
            settings.sources[0].secrets.len(),
            2,
            "rotation: two secrets"
        );
        assert_eq!(settings.sources[1].github_secrets.len(), 1);
        assert!(!format!("{settings:?}").contains("hunter2-secret"));

        for bad in [
            "Shop=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "shop:hunter2-secret",
            "shop=hunter2-secret",
            "shop=github:",
        ] {
            let args = ConfigArgs {
                sources: Some(bad.into()),
                ..Default::default()
            };
            let err = Settings::load(&args).unwrap_err().to_string();
            assert!(err.contains("QUIESCE_SOURCES"), "{err}");
            assert!(!err.contains("hunter2-secret"), "{err}");
        }
    }

    #[test]
    fn the_rate_burst_must_fit_a_full_batch_and_metrics_can_be_turned_off() {
        let args = ConfigArgs {
            rate_burst: Some("10".into()),
            ..Default::default()
        };
        let err = Settings::load(&args).unwrap_err().to_string();
        assert!(err.contains("QUIESCE_RATE_BURST"), "{err}");
        let args = ConfigArgs {
            metrics_listen: Some("off".into()),
            ..Default::default()
        };
        assert_eq!(Settings::load(&args).unwrap().metrics_listen, None);
        assert_eq!(
            Settings::default().metrics_listen.unwrap().to_string(),
            DEFAULT_METRICS_LISTEN
        );
    }

    #[test]
    fn serve_refuses_an_open_api_unless_insecure_dev_is_chosen() {
        let settings = Settings::default();
        let err = settings.check_api_security().unwrap_err();
        assert!(
            err.contains("QUIESCE_API_TOKENS") && err.contains("QUIESCE_INBOUND_SECRETS"),
            "{err}"
        );
        assert!(err.contains("--insecure-dev"), "{err}");
        let dev = Settings {
            insecure_dev: true,
            ..Settings::default()
        };
        assert!(dev.check_api_security().is_ok());
        let configured = Settings {
            api_tokens: vec![crate::credentials::ApiToken::spec_for(
                crate::credentials::Role::Admin,
                "t",
            )],
            inbound_github_secrets: vec![SecretString::from("s")],
            ..Settings::default()
        };
        assert!(configured.check_api_security().is_ok());
    }
}
