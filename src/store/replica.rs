//! Reads from a replica (`database_read_url`, off by default): the reads that may be a moment
//! stale (the read API's entities and actions, the audit trail's pages, the console's lists
//! and charts, backtests and sweeps) go to a streaming replica while its replay lag is within
//! `read_max_lag`; a replica that lags more or does not answer is passed over for the primary
//! until it catches up. Decisions, the review queue's claims and every write stay on the
//! primary, as does every read a decision is made on.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use secrecy::ExposeSecret;
use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};
use tokio_util::sync::CancellationToken;

use super::Result;
use crate::{credentials::ServiceUrl, settings::Database, telemetry::names};

/// How often the replica's lag is measured.
const LAG_CHECK: Duration = Duration::from_secs(1);

/// The replica's pool and what its last lag check found.
#[derive(Clone)]
pub struct Replica {
    pool: PgPool,
    max_lag: Duration,
    state: Arc<ReplicaState>,
}

#[derive(Default)]
struct ReplicaState {
    /// Its lag was measured within `max_lag` at the last check.
    in_use: AtomicBool,
    /// The last lag measured, in milliseconds (`u64::MAX`: not answered).
    lag_millis: AtomicU64,
}

impl Replica {
    /// The replica's pool, connected lazily: a replica that is down when a process starts
    /// costs nothing but its reads, which go to the primary until it answers.
    pub fn connect(url: &ServiceUrl, settings: &Database) -> Result<Self> {
        let statement_timeout = settings.backend_timeout.as_millis().to_string();
        let options = url.expose_secret().parse::<PgConnectOptions>()?.options([
            ("statement_timeout", statement_timeout.as_str()),
            ("plan_cache_mode", "force_generic_plan"),
            ("default_transaction_read_only", "on"),
        ]);
        let pool = PgPoolOptions::new()
            .max_connections(settings.db_max_connections)
            .acquire_timeout(settings.backend_timeout)
            .connect_lazy_with(options);
        Ok(Self {
            pool,
            max_lag: settings.read_max_lag,
            state: Arc::new(ReplicaState {
                in_use: AtomicBool::new(false),
                lag_millis: AtomicU64::new(u64::MAX),
            }),
        })
    }

    /// The pool to read from when reads may be a moment stale: the replica's while it is in use.
    pub(super) fn pool(&self) -> Option<&PgPool> {
        self.in_use().then_some(&self.pool)
    }

    /// Whether its last check found it answering within `read_max_lag`.
    pub fn in_use(&self) -> bool {
        self.state.in_use.load(Ordering::Relaxed)
    }

    /// The replay lag its last check measured; none when it did not answer.
    pub fn lag(&self) -> Option<Duration> {
        match self.state.lag_millis.load(Ordering::Relaxed) {
            u64::MAX => None,
            millis => Some(Duration::from_millis(millis)),
        }
    }

    /// Measures the lag every second until `shutdown`, and puts the replica in or out of use.
    pub async fn watch(self, shutdown: CancellationToken) {
        let mut ticks = tokio::time::interval(LAG_CHECK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => self.check().await,
            }
        }
    }

    /// One lag check: the replica is in use while it answers within the backend timeout and its
    /// lag is within `read_max_lag`.
    pub async fn check(&self) {
        let measured =
            tokio::time::timeout(LAG_CHECK.max(Duration::from_millis(500)), self.measure())
                .await
                .ok()
                .and_then(|lag| lag.ok());
        let in_use = measured.is_some_and(|lag| lag <= self.max_lag);
        let was = self.state.in_use.swap(in_use, Ordering::Relaxed);
        let millis = measured.map_or(u64::MAX, |lag| lag.as_millis() as u64);
        self.state.lag_millis.store(millis, Ordering::Relaxed);
        metrics::gauge!(names::REPLICA_IN_USE).set(f64::from(u8::from(in_use)));
        if let Some(lag) = measured {
            metrics::gauge!(names::REPLICA_LAG_SECONDS).set(lag.as_secs_f64());
        }
        match (was, in_use) {
            (true, false) => tracing::warn!(
                lag = ?measured,
                max = ?self.max_lag,
                "the read replica lags or does not answer; its reads go to the primary"
            ),
            (false, true) => tracing::info!(lag = ?measured, "reads go to the read replica"),
            _ => {}
        }
    }

    /// The replica's replay lag. Caught up when it has replayed all it received and is still
    /// streaming (an idle primary sends nothing, and the replica is not behind); otherwise the
    /// age of the last transaction it replayed. A server that is not in recovery (the URL
    /// names a primary) has none.
    async fn measure(&self) -> Result<Duration> {
        let seconds = sqlx::query_scalar!(
            r#"SELECT CASE
                 WHEN NOT pg_is_in_recovery() THEN 0
                 WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()
                      AND EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')
                   THEN 0
                 ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8,
                               'Infinity')
               END::float8 AS "lag!""#
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(Duration::try_from_secs_f64(seconds.max(0.0)).unwrap_or(Duration::MAX))
    }
}
