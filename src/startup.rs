//! Wiring: connect to Postgres and Redis, build the HTTP server and the workers, and run them
//! until a shutdown signal.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context;
use redis::{
    aio::{ConnectionManager, ConnectionManagerConfig},
    cluster::ClusterClientBuilder,
};
use secrecy::ExposeSecret;
use sqlx::{Postgres, migrate::MigrateDatabase, postgres::PgConnectOptions};
use tokio::{net::TcpListener, sync::Notify};
use tokio_util::sync::CancellationToken;

use crate::{
    actions::{DeliverySettings, Dispatcher},
    console,
    credentials::redact_passwords,
    http::{self, AppState, Limits, signature::InboundSecrets},
    ingest::Ingestor,
    maintenance::Maintenance,
    queue::{self, Keyspace, Queue, RedisConnection, Wakeups},
    rules::{RuleSet, Rules},
    settings::Settings,
    store::{self, PartitionPlan, Store},
    telemetry,
    worker::Worker,
};

/// Loads the configured rules file, or the built-in copy of the shipped one, into a reloadable
/// handle.
pub fn load_rules(settings: &Settings) -> anyhow::Result<Rules> {
    let file = settings.moderation.rules.file();
    let set = match file {
        Some(path) => RuleSet::from_file(path).context("the rules were refused")?,
        None => RuleSet::default_rules(),
    };
    Ok(Rules::new(set, file.map(ToOwned::to_owned)))
}

/// The database URL as messages show it: its password redacted.
fn database_address(settings: &Settings) -> String {
    redact_passwords(settings.database.database_url.expose_secret())
}

/// Refuses a database URL that does not parse, naming its variable.
fn check_database_url(settings: &Settings) -> anyhow::Result<()> {
    settings
        .database
        .database_url
        .expose_secret()
        .parse::<PgConnectOptions>()
        .map(|_| ())
        .map_err(|error| {
            anyhow::anyhow!(
                "invalid QUIESCE_DATABASE_URL {}: {}; expected a URL such as postgres://host:port/database",
                database_address(settings),
                redact_passwords(&error.to_string())
            )
        })
}

/// Creates the database if it does not exist and applies pending migrations.
pub async fn prepare_database(settings: &Settings) -> anyhow::Result<()> {
    check_database_url(settings)?;
    let url = settings.database.database_url.expose_secret();
    let address = database_address(settings);
    if !Postgres::database_exists(url)
        .await
        .with_context(|| format!("cannot reach Postgres at {address} (QUIESCE_DATABASE_URL)"))?
    {
        Postgres::create_database(url).await.with_context(|| {
            format!("cannot create the database {address} (QUIESCE_DATABASE_URL)")
        })?;
        tracing::info!("created the database");
    }
    let pool = connect_postgres(settings).await?;
    store::migrate(&pool).await.context("migrations failed")?;
    pool.close().await;
    Ok(())
}

/// The Postgres pool; errors name QUIESCE_DATABASE_URL and the address, its password redacted.
pub async fn connect_postgres(settings: &Settings) -> anyhow::Result<sqlx::PgPool> {
    check_database_url(settings)?;
    store::connect(&settings.database).await.with_context(|| {
        format!(
            "cannot connect to Postgres at {} (QUIESCE_DATABASE_URL)",
            database_address(settings)
        )
    })
}

/// A Redis connection (one node, or a cluster for a `redis+cluster://` URL) and where to
/// subscribe to wake-ups; errors name QUIESCE_REDIS_URL and the address, its password redacted.
pub async fn connect_redis(settings: &Settings) -> anyhow::Result<(RedisConnection, Wakeups)> {
    let url = settings.redis.redis_url.expose_secret();
    let address = redact_passwords(url);
    let timeout = settings.database.backend_timeout;
    let channel = Keyspace::new(settings.redis.redis_prefix.clone(), 1)
        .index()
        .wake_channel();
    if let Some(nodes) = queue::cluster_nodes(url) {
        anyhow::ensure!(
            !nodes.is_empty(),
            "invalid QUIESCE_REDIS_URL {address}: a cluster URL names its seed nodes, redis+cluster://host:port,host:port"
        );
        let client = ClusterClientBuilder::new(nodes.clone())
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .build()
            .with_context(|| format!("invalid QUIESCE_REDIS_URL {address}"))?;
        let connection = queue::Cluster::connect(client).await.with_context(|| {
            format!("cannot connect to the Redis Cluster at {address} (QUIESCE_REDIS_URL)")
        })?;
        return Ok((
            RedisConnection::Cluster(connection),
            Wakeups::cluster(nodes, channel),
        ));
    }
    let client =
        redis::Client::open(url).with_context(|| format!("invalid QUIESCE_REDIS_URL {address}"))?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(2);
    let connection = ConnectionManager::new_with_config(client.clone(), config)
        .await
        .with_context(|| format!("cannot connect to Redis at {address} (QUIESCE_REDIS_URL)"))?;
    Ok((
        RedisConnection::Node(connection),
        Wakeups::node(client, channel),
    ))
}

/// The key layout the settings give: the shard count, and the one being drained if any.
pub fn keyspace(settings: &Settings) -> Keyspace {
    Keyspace::new(settings.redis.redis_prefix.clone(), settings.redis.shards)
        .draining(Some(settings.redis.previous_shards))
}

/// Scheduled entities sampled per shard, per set, by the startup check of the schedule.
const SCHEDULE_SAMPLE: usize = 3;

/// Postgres, Redis and the rules: what both the API and the workers run on.
#[derive(Clone)]
pub struct Backends {
    pub store: Store,
    pub queue: Queue,
    pub rules: Arc<Rules>,
    pub wakeup: Arc<Notify>,
    /// Where worker processes hear of what other processes made due.
    pub wakeups: Wakeups,
}

impl Backends {
    pub async fn connect(settings: &Settings, rules: Arc<Rules>) -> anyhow::Result<Self> {
        let pool = connect_postgres(settings).await?;
        let (redis, wakeups) = connect_redis(settings).await?;
        let store =
            Store::new(pool).with_partitions(PartitionPlan::from_settings(&settings.maintenance));
        // The partitions this retention's width wants from now on (the migration made a few
        // minutes' worth; retention passes and a write that finds none make more).
        if let Err(error) = store.extend_partitions().await {
            tracing::warn!(error = %crate::telemetry::Chain(&error), "could not make the time partitions ahead of time");
        }
        Ok(Self {
            store,
            queue: Queue::new(redis, keyspace(settings), settings.schedule.timing()),
            rules,
            wakeup: Arc::new(Notify::new()),
            wakeups,
        })
    }

    /// Warns loudly when Redis may drop queue keys (eviction) or lose them on restart (no AOF).
    pub async fn check_redis_durability(&self) {
        match self.queue.durability().await {
            Ok(Some(nodes)) => {
                for (node, durability) in nodes {
                    for warning in durability.warnings() {
                        if node.is_empty() {
                            tracing::warn!("{warning}");
                        } else {
                            tracing::warn!(node, "{warning}");
                        }
                    }
                }
            }
            Ok(None) => tracing::info!(
                "Redis does not allow CONFIG GET; eviction policy and AOF not checked"
            ),
            Err(error) => {
                tracing::warn!(error = %crate::telemetry::Chain(&error), "could not check the Redis configuration")
            }
        }
    }

    /// Checks that the schedule in Redis belongs to this database: samples a few scheduled
    /// entities per shard (`SCHEDULE_SAMPLE`) and looks them up in Postgres. Entities are
    /// recorded before they are scheduled, so a sample none of which the database knows means
    /// the Redis prefix holds another database's schedule (every entity of it would be
    /// dead-lettered): refused, naming both. Some unknown ones are a warning.
    pub async fn check_schedule_matches_database(&self, settings: &Settings) -> anyhow::Result<()> {
        let sample = self
            .queue
            .sample_scheduled(SCHEDULE_SAMPLE)
            .await
            .context("cannot read the schedule from Redis")?;
        if sample.is_empty() {
            return Ok(());
        }
        let known = self
            .store
            .count_known_entities(&sample)
            .await
            .context("cannot look the scheduled entities up in Postgres")?;
        let unknown = sample.len() as i64 - known;
        let which = format!(
            "the Redis prefix {:?} (QUIESCE_REDIS_PREFIX, at {}) and the database {} (QUIESCE_DATABASE_URL)",
            settings.redis.redis_prefix,
            redact_passwords(settings.redis.redis_url.expose_secret()),
            database_address(settings),
        );
        if known == 0 {
            anyhow::bail!(
                "the schedule does not belong to the database: none of {} scheduled entities sampled \
                 from {which} has a record in the database. Point both at the same deployment, or use \
                 a prefix of its own for this database",
                sample.len()
            );
        }
        if unknown > 0 {
            tracing::warn!(
                sampled = sample.len(),
                unknown,
                "some scheduled entities sampled from {which} have no record in the database; \
                 they will be dead-lettered"
            );
        }
        Ok(())
    }

    pub fn worker(&self, settings: &Settings) -> Worker {
        Worker::new(
            self.queue.clone(),
            self.store.clone(),
            Arc::clone(&self.rules),
            &settings.worker,
            Arc::clone(&self.wakeup),
        )
        .with_wakeups(self.wakeups.clone())
    }

    /// The reaper, the repair sweep and retention, which run wherever workers run.
    pub fn maintenance(&self, settings: &Settings) -> Maintenance {
        Maintenance::new(
            self.queue.clone(),
            self.store.clone(),
            &settings.maintenance,
            settings.worker.lease_floor,
            settings.redis.index_rescan,
        )
    }
}

/// Runs the evaluation loop and maintenance beside it until `shutdown`, then waits for both:
/// the loop drains its running evaluations first.
pub async fn run_workers(worker: Worker, maintenance: Maintenance, shutdown: CancellationToken) {
    tokio::join!(worker.run(shutdown.clone()), maintenance.run(shutdown));
}

/// The HTTP API, bound to its port, with its metrics listener and the workers of the same
/// process.
pub struct Application {
    listener: TcpListener,
    address: SocketAddr,
    metrics: Option<(TcpListener, SocketAddr)>,
    state: AppState,
    /// Signs the moderator console's sessions.
    sessions: console::Sessions,
    connection_limits: http::server::ConnectionLimits,
    workers: Option<(Worker, Maintenance)>,
}

impl Application {
    /// Binds the listener (port 0 picks a free port) and builds the state; `worker` is the
    /// evaluation loop to run beside the API, with maintenance (`None` for an API-only process).
    pub async fn build(
        settings: &Settings,
        backends: &Backends,
        worker: Option<Worker>,
    ) -> anyhow::Result<Self> {
        let listen = settings.http.listen;
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen} (QUIESCE_LISTEN)"))?;
        let address = listener.local_addr()?;
        let metrics = match settings.telemetry.metrics_listen {
            Some(at) => {
                let listener = TcpListener::bind(at)
                    .await
                    .with_context(|| format!("cannot listen for metrics on {at} (QUIESCE_METRICS_LISTEN; off disables it)"))?;
                let bound = listener.local_addr()?;
                record_baseline(settings);
                Some((listener, bound))
            }
            None => None,
        };
        let ingestor = Ingestor::start(
            backends.store.clone(),
            backends.queue.clone(),
            Arc::clone(&backends.wakeup),
            settings.database.backend_timeout,
        );
        let security = &settings.security;
        let state = AppState::new(http::Shared {
            store: backends.store.clone(),
            queue: backends.queue.clone(),
            ingestor,
            rules: Arc::clone(&backends.rules),
            // --insecure-dev waives what is missing; whatever is configured is enforced.
            auth: Arc::new(http::auth::Auth::new(
                security.api_tokens.clone(),
                !security.insecure_dev || !security.api_tokens.is_empty(),
            )),
            inbound: Arc::new(InboundSecrets::new(
                &security.inbound_secrets,
                &security.inbound_github_secrets,
                security.signature_tolerance,
            )),
            sources: Arc::new(
                security
                    .sources
                    .iter()
                    .map(|source| {
                        let secrets = InboundSecrets::new(
                            &source.secrets,
                            &source.github_secrets,
                            security.signature_tolerance,
                        );
                        (source.name.clone(), secrets)
                    })
                    .collect(),
            ),
            rate_limits: Arc::new(http::limits::RateLimits::new(
                &settings.http,
                &security.sources,
            )),
            ingest_slots: Arc::new(tokio::sync::Semaphore::new(
                settings.http.max_concurrent_ingest,
            )),
            backtests: Arc::new(crate::backtest::Gate::default()),
            limits: Arc::new(Limits {
                body_limit: settings.http.body_limit,
                max_batch: settings.http.max_batch,
                backend_timeout: settings.database.backend_timeout,
                override_after_reversal: settings.moderation.override_after_reversal,
                request_timeout: settings.http.request_timeout,
                body_pace: http::body::BodyPace {
                    min_rate: settings.http.body_min_rate,
                    grace: settings.http.body_grace,
                },
            }),
        });
        Ok(Self {
            listener,
            address,
            metrics,
            state,
            sessions: console::Sessions::new(&settings.console),
            connection_limits: http::server::ConnectionLimits {
                header_read_timeout: settings.http.header_read_timeout,
                max_connections: settings.http.max_connections,
                drain_timeout: settings.http.request_timeout,
            },
            workers: worker.map(|worker| (worker, backends.maintenance(settings))),
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Where `/metrics` is served, if anywhere.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|(_, address)| *address)
    }

    /// Serves until `shutdown` fires: stops accepting, finishes open requests, then lets the
    /// workers drain.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let workers = self.workers.map(|(worker, maintenance)| {
            tokio::spawn(run_workers(worker, maintenance, shutdown.clone()))
        });
        let metrics = self.metrics.map(|(listener, _)| {
            let router = http::metrics_router(
                self.state.queue.clone(),
                self.state.store.clone(),
                Arc::clone(&self.state.rules),
                telemetry::metrics_handle(),
                self.state.limits.backend_timeout,
            );
            serve_metrics(listener, router, shutdown.clone())
        });
        let pages = console::router(self.state.clone(), self.sessions);
        http::server::serve(
            self.listener,
            http::router_with(self.state, pages),
            self.connection_limits,
            shutdown.clone(),
        )
        .await;
        if let Some(workers) = workers {
            workers.await.context("the worker loop panicked")?;
        }
        if let Some(metrics) = metrics {
            metrics.await.context("the metrics listener panicked")?;
        }
        Ok(())
    }
}

fn serve_metrics(
    listener: TcpListener,
    router: axum::Router,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let stopped = axum::serve(listener, router)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(error) = stopped {
            tracing::error!(error = %crate::telemetry::Chain(&error), "the metrics listener failed");
        }
    })
}

/// Serves `/metrics` and `/healthz` on `settings.metrics_listen`, if set, until `shutdown`
/// (for `quiesce worker`; `serve` runs its own through [`Application`]).
pub async fn spawn_metrics_listener(
    settings: &Settings,
    backends: &Backends,
    shutdown: CancellationToken,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(address) = settings.telemetry.metrics_listen else {
        return Ok(None);
    };
    let listener = TcpListener::bind(address).await.with_context(|| {
        format!("cannot listen for metrics on {address} (QUIESCE_METRICS_LISTEN; off disables it)")
    })?;
    tracing::info!(address = %listener.local_addr()?, "metrics listener started");
    record_baseline(settings);
    let router = http::metrics_router(
        backends.queue.clone(),
        backends.store.clone(),
        Arc::clone(&backends.rules),
        telemetry::metrics_handle(),
        settings.database.backend_timeout,
    );
    Ok(Some(serve_metrics(listener, router, shutdown)))
}

/// Starts the webhook dispatcher if a webhook URL is configured.
pub fn spawn_dispatcher(
    settings: &Settings,
    backends: &Backends,
    shutdown: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    let delivery = DeliverySettings::from_settings(settings)?;
    tracing::info!(url = %crate::credentials::redact_passwords(&delivery.url), signed = delivery.secret.is_some(), "webhook dispatcher started");
    let dispatcher = Dispatcher::new(backends.store.clone(), delivery);
    Some(tokio::spawn(dispatcher.run(shutdown)))
}

/// Reloads the rules on SIGHUP; an invalid file is refused and the rules in force stay.
pub fn reload_rules_on_sighup(rules: Arc<Rules>) {
    #[cfg(unix)]
    tokio::spawn(async move {
        let Ok(mut hangups) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        else {
            return;
        };
        while hangups.recv().await.is_some() {
            match rules.reload() {
                Ok(count) => tracing::info!(rules = count, "rules reloaded"),
                Err(error) => {
                    tracing::error!(%error, "rules reload refused; the rules in force stay")
                }
            }
        }
    });
}

/// A token cancelled on SIGTERM or ctrl-c; the HTTP server and the workers share it.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let terminate = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => {}
            _ = terminate => {}
        }
        tracing::info!("shutdown requested: no new claims, finishing running evaluations");
        trigger.cancel();
    });
    token
}

/// The settings alerts compare against, and a zero for each series a healthy process may never
/// touch; each rate budget the configuration implies gets one (named sources, ingest tokens by
/// the label the limiter uses, and `default` for requests without a token).
fn record_baseline(settings: &Settings) {
    let security = &settings.security;
    let tokens = security.api_tokens.iter().map(|token| token.label());
    let sources = security
        .sources
        .iter()
        .map(|s| format!("source:{}", s.name));
    telemetry::record_baseline(
        settings.schedule.max_wait,
        settings.moderation.reversal_alert_threshold,
        tokens.chain(sources).chain(["default".to_owned()]),
    );
}
