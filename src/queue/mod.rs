//! The debounce schedule in Redis: schedule, claim, renew, ack, retry and reap, one Lua
//! script each. See docs/state-machine.md for an entity's life in these sets.

mod claims;
mod dead_letters;
mod inspect;
mod keys;
mod scripts;

use futures::future::try_join_all;
use redis::aio::ConnectionManager;

use self::scripts::SCRIPTS;
pub use self::{
    claims::{Claim, ClaimBatch, Failed, Reaped},
    dead_letters::{DeadLetter, DeadLetterCursor, DeadLetterPage, FailureRecord},
    inspect::{RedisDurability, ScheduleState, ShardDepth},
    keys::{Keyspace, ShardKeys},
};
use crate::{
    domain::{EntityId, Priority},
    telemetry::Timed,
};

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("redis returned an unexpected reply: {0}")]
    Reply(String),
}

pub type Result<T> = std::result::Result<T, QueueError>;

/// How an event moves an entity's fire-at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleMode {
    /// Every event pushes the fire-at to now + window (capped by max wait).
    Sliding,
    /// The first pending event fixes the fire-at at its time + window.
    Fixed,
}

impl ScheduleMode {
    /// As `lua/schedule.lua` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleMode::Sliding => "sliding",
            ScheduleMode::Fixed => "fixed",
        }
    }
}

/// Debounce timing and the retry policy, in milliseconds as the scripts take them.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub window_ms: u64,
    pub max_wait_ms: u64,
    pub mode: ScheduleMode,
    pub max_attempts: u32,
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
}

#[derive(Clone)]
pub struct Queue {
    redis: ConnectionManager,
    keys: Keyspace,
    timing: Timing,
}

impl Queue {
    pub fn new(redis: ConnectionManager, keys: Keyspace, timing: Timing) -> Self {
        Self {
            redis,
            keys,
            timing,
        }
    }

    pub fn keys(&self) -> &Keyspace {
        &self.keys
    }

    pub fn timing(&self) -> Timing {
        self.timing
    }

    pub fn connection(&self) -> ConnectionManager {
        self.redis.clone()
    }

    /// Schedules (or re-schedules) entities, one script call per shard, run concurrently.
    /// Returns the earliest fire-at set (unix ms).
    pub async fn schedule(&self, entities: &[(EntityId, Priority)]) -> Result<Option<i64>> {
        let groups = self.by_shard(entities.iter().map(|(e, p)| (e, *p == Priority::Critical)));
        let calls = groups.into_iter().map(|(keys, members)| {
            let mut invocation = SCRIPTS.schedule.prepare_invoke();
            invocation
                .key(keys.due())
                .key(keys.pending())
                .key(keys.dead())
                .arg(self.timing.window_ms)
                .arg(self.timing.max_wait_ms)
                .arg(self.timing.mode.as_str());
            for (entity, critical) in members {
                invocation
                    .arg(entity.as_str())
                    .arg(if critical { "1" } else { "0" });
            }
            let mut redis = self.redis.clone();
            async move {
                invocation
                    .invoke_async::<Option<i64>>(&mut redis)
                    .timed_script("schedule")
                    .await
            }
        });
        let earliest = try_join_all(calls).await?;
        Ok(earliest.into_iter().flatten().min())
    }

    /// Groups entities by the shard that owns them (non-empty shards only), so that each
    /// script call touches one shard's keys.
    fn by_shard<'a, T>(
        &self,
        items: impl IntoIterator<Item = (&'a EntityId, T)>,
    ) -> Vec<(ShardKeys, Vec<(&'a EntityId, T)>)> {
        let mut groups: Vec<Vec<(&EntityId, T)>> =
            (0..self.keys.shards()).map(|_| Vec::new()).collect();
        for (entity, value) in items {
            groups[self.keys.shard_of(entity) as usize].push((entity, value));
        }
        groups
            .into_iter()
            .enumerate()
            .filter(|(_, members)| !members.is_empty())
            .map(|(shard, members)| (self.keys.for_shard(shard as u16), members))
            .collect()
    }

    /// Re-schedules, due now, those of `entities` that Redis holds neither due nor in flight.
    /// Returns how many were re-scheduled.
    pub async fn repair(&self, entities: &[EntityId]) -> Result<usize> {
        self.count_per_shard("repair", &SCRIPTS.repair, entities, |k| {
            vec![k.due(), k.pending(), k.inflight(), k.dead()]
        })
        .await
    }

    /// Runs a script that takes entities as ARGV and returns a count, once per shard (with
    /// that shard's `keys`), concurrently; returns the sum.
    async fn count_per_shard(
        &self,
        name: &'static str,
        script: &redis::Script,
        entities: &[EntityId],
        keys: impl Fn(&ShardKeys) -> Vec<String>,
    ) -> Result<usize> {
        let groups = self.by_shard(entities.iter().map(|e| (e, ())));
        let calls = groups.into_iter().map(|(shard_keys, members)| {
            let mut invocation = script.prepare_invoke();
            for key in keys(&shard_keys) {
                invocation.key(key);
            }
            for (entity, ()) in members {
                invocation.arg(entity.as_str());
            }
            let mut redis = self.redis.clone();
            async move {
                invocation
                    .invoke_async::<usize>(&mut redis)
                    .timed_script(name)
                    .await
            }
        });
        Ok(try_join_all(calls).await?.into_iter().sum())
    }

    pub async fn ping(&self) -> Result<()> {
        let mut redis = self.redis.clone();
        let _: String = redis::cmd("PING").query_async(&mut redis).await?;
        Ok(())
    }
}
