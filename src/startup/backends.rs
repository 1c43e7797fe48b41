//! The backends both the API and the workers run on, and the checks made of them at startup.

use std::sync::Arc;

use anyhow::Context;
use secrecy::ExposeSecret;
use tokio::sync::Notify;

use super::connect::{connect_redis, connect_store, database_address, keyspace};
use crate::{
    active_rules,
    credentials::redact_passwords,
    maintenance::Maintenance,
    queue::{Queue, Wakeups},
    rules::Rules,
    settings::Settings,
    store::Store,
    worker::Worker,
};

/// Scheduled entities sampled per shard, per set, by the startup check of the schedule.
const SCHEDULE_SAMPLE: usize = 3;

/// The oldest Redis the scripts run on (`ZADD LT`, in the shard index's scripts, came in 6.2).
const MIN_REDIS_VERSION: (u32, u32) = (6, 2);

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
        let store = connect_store(settings).await?;
        let (redis, wakeups) = connect_redis(settings).await?;
        // The partitions this retention's width wants from now on (the migration made a few
        // minutes' worth; retention passes and a write that finds none make more).
        if let Err(error) = store.partitions().extend_partitions().await {
            tracing::warn!(error = %crate::telemetry::Chain(&error), "could not make the time partitions ahead of time");
        }
        // The active rules version, not the file, is in force (the file seeds an empty table).
        active_rules::start(&store, &rules)
            .await
            .context("cannot put the active rules version in force")?;
        Ok(Self {
            store,
            queue: Queue::new(redis, keyspace(settings), settings.schedule.timing()),
            rules,
            wakeup: Arc::new(Notify::new()),
            wakeups,
        })
    }

    /// Warns loudly when Redis may drop queue keys (eviction) or lose them on restart (no AOF),
    /// or is older than the scripts need.
    pub async fn check_redis_durability(&self) {
        if let Ok(versions) = self.queue.server_versions().await {
            for (node, (major, minor)) in versions {
                if (major, minor) < MIN_REDIS_VERSION {
                    tracing::error!(
                        node,
                        "Redis {major}.{minor} is older than 6.2, which the shard index's scripts need (ZADD LT): its reports fail, and due entities wait for the index rescan; upgrade Redis"
                    );
                }
            }
        }
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
            .read()
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
