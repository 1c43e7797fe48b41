//! The debounce schedule in Redis: schedule, claim, renew, ack, retry and reap, one Lua
//! script each, on one node or a cluster; `index` keeps which shards have something due.
//! See docs/state-machine.md for an entity's life in these sets.

mod claims;
mod connection;
mod dead_letters;
mod index;
mod inspect;
mod keys;
mod reshard;
mod scripts;
mod wake;

use std::collections::{BTreeMap, HashSet};

use futures::future::{join_all, try_join_all};

use self::scripts::SCRIPTS;
pub use self::{
    claims::{Claim, ClaimBatch, Failed, LeaseReports, Locked, Reaped},
    connection::{Cluster, RedisConnection, cluster_nodes},
    dead_letters::{DeadLetterCursor, DeadLetterPage},
    index::{FailingShards, IndexRead, RESCAN_MAX_SHARDS_PER_STEP, RESCAN_STEP, ReadShard, Settle},
    inspect::{RedisDurability, ScheduleState, ShardDepth},
    keys::{IndexKind, Keyspace, Shard, ShardKeys, slot_of},
    reshard::LayoutDepth,
    wake::Wakeups,
};
// The timing is the settings' as much as the schedule's: it lives in domain, re-exported here
// for the queue's users.
pub use crate::domain::{ScheduleMode, Timing};
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
    #[error("redis did not answer in time")]
    TimedOut,
}

pub type Result<T> = std::result::Result<T, QueueError>;

#[derive(Clone)]
pub struct Queue {
    redis: RedisConnection,
    keys: Keyspace,
    timing: Timing,
    /// Redis' clock as the index's reads last asked it, shared by this process's readers.
    index_clock: std::sync::Arc<index::IndexClock>,
}

impl Queue {
    pub fn new(redis: RedisConnection, keys: Keyspace, timing: Timing) -> Self {
        Self {
            redis,
            keys,
            timing,
            index_clock: std::sync::Arc::default(),
        }
    }

    pub fn keys(&self) -> &Keyspace {
        &self.keys
    }

    pub fn timing(&self) -> Timing {
        self.timing
    }

    pub fn connection(&self) -> RedisConnection {
        self.redis.clone()
    }

    /// Schedules (or re-schedules) entities, one script call per shard, run concurrently, and
    /// reports to the due index each shard whose earliest fire-at moved earlier (the index
    /// already holds a time no later for the others). While a shard count change drains, an
    /// entity the old layout still holds is scheduled there (with its max-wait anchor), the
    /// others in the current layout. Returns the earliest fire-at set (unix ms); an error when
    /// any shard failed (the others are scheduled all the same).
    pub async fn schedule(&self, entities: &[(EntityId, Priority)]) -> Result<Option<i64>> {
        let outcome = self.schedule_each(entities, None).await;
        match outcome.failure {
            Some((error, _)) => Err(error),
            None => Ok(outcome.earliest),
        }
    }

    /// [`Self::schedule`], with the entities whose shard failed named: on a cluster one master
    /// that is down fails only the shards it serves, and the caller answers for each entity.
    /// A shard whose call has not answered by `deadline` counts as failed, so that a master
    /// that hangs (killed, its slots not taken over yet) cannot hold up the others' answers.
    pub async fn schedule_each(
        &self,
        entities: &[(EntityId, Priority)],
        deadline: Option<tokio::time::Instant>,
    ) -> ScheduleOutcome {
        // A call given up on is a failed shard; its script may still have run (a retry then
        // finds the entity scheduled, which is harmless).
        let bounded = |call| async move {
            match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, call)
                    .await
                    .unwrap_or(Err(QueueError::TimedOut)),
                None => call.await,
            }
        };
        let items = entities.iter().map(|(e, p)| (e, *p == Priority::Critical));
        let (draining, direct): (Vec<_>, Vec<_>) =
            items.partition(|(e, _)| self.keys.previous_shard_of(e).is_some());
        let mut scheduled = Vec::new();
        let mut failure: Option<QueueError> = None;
        let mut unscheduled: HashSet<EntityId> = HashSet::new();
        let mut current: Vec<(&EntityId, bool)> = direct;
        if !draining.is_empty() {
            let groups = self.group(draining, |e| {
                self.keys.previous_shard_of(e).expect("partitioned on it")
            });
            let held = join_all(groups.into_iter().map(|(keys, members)| async move {
                let entities: Vec<&EntityId> = members.iter().map(|(e, _)| *e).collect();
                (
                    bounded(self.schedule_in(keys, members, true)).await,
                    entities,
                )
            }))
            .await;
            for (result, entities) in held {
                match result {
                    Ok((set, not_held)) => {
                        scheduled.push(set);
                        current.extend(not_held);
                    }
                    Err(error) => {
                        failure = Some(error);
                        unscheduled.extend(entities.into_iter().cloned());
                    }
                }
            }
        }
        let groups = self.group(current, |e| self.keys.shard_of(e));
        let set = join_all(groups.into_iter().map(|(keys, members)| async move {
            let entities: Vec<&EntityId> = members.iter().map(|(e, _)| *e).collect();
            (
                bounded(self.schedule_in(keys, members, false)).await,
                entities,
            )
        }))
        .await;
        for (result, entities) in set {
            match result {
                Ok((set, _)) => scheduled.push(set),
                Err(error) => {
                    failure = Some(error);
                    unscheduled.extend(entities.into_iter().cloned());
                }
            }
        }
        // The shards that were scheduled are reported even when another failed: the caller
        // answers an error for the others (the sender retries), and these need no rescan.
        let earlier: Vec<(Shard, i64)> = scheduled
            .iter()
            .filter(|s| s.head_moved_earlier)
            .filter_map(|s| Some((s.shard, s.earliest?)))
            .collect();
        // The index lives on one master: a hung one must not hold up the answer either (a
        // report not made is what the rescan repairs).
        match deadline {
            Some(deadline) => {
                let report = self.report(IndexKind::Due, &earlier);
                if tokio::time::timeout_at(deadline, report).await.is_err() {
                    tracing::warn!(
                        "the shard index did not answer in time; the rescan will update it"
                    );
                }
            }
            None => self.report(IndexKind::Due, &earlier).await,
        }
        ScheduleOutcome {
            earliest: scheduled.iter().filter_map(|s| s.earliest).min(),
            failure: failure.map(|error| (error, unscheduled)),
        }
    }

    /// One schedule call on one shard; returns what it set, and (with `held_only`) the
    /// entities it does not hold, left unscheduled.
    async fn schedule_in<'a>(
        &self,
        keys: ShardKeys,
        members: Vec<(&'a EntityId, bool)>,
        held_only: bool,
    ) -> Result<(Scheduled, Vec<(&'a EntityId, bool)>)> {
        let mut invocation = SCRIPTS.schedule.prepare_invoke();
        invocation
            .key(keys.due())
            .key(keys.pending())
            .key(keys.dead())
            .key(keys.inflight())
            .arg(self.timing.window_ms)
            .arg(self.timing.max_wait_ms)
            .arg(self.timing.mode.as_str())
            .arg(if held_only { "1" } else { "0" });
        for (entity, critical) in &members {
            invocation
                .arg(entity.as_str())
                .arg(if *critical { "1" } else { "0" });
        }
        let mut redis = self.redis.clone();
        let (earliest, moved, not_held): (i64, i64, Vec<String>) = {
            let reply: Vec<redis::Value> = invocation
                .invoke_async(&mut redis)
                .timed_script("schedule")
                .await?;
            let mut reply = reply.into_iter();
            let (Some(earliest), Some(moved)) = (reply.next(), reply.next()) else {
                return Err(QueueError::Reply("schedule returned a short reply".into()));
            };
            let number = |v| redis::from_redis_value::<i64>(v).map_err(redis::RedisError::from);
            let not_held = redis::from_redis_value(redis::Value::Array(reply.collect()))
                .map_err(redis::RedisError::from)?;
            (number(earliest)?, number(moved)?, not_held)
        };
        let not_held = members
            .into_iter()
            .filter(|(e, _)| not_held.iter().any(|n| n == e.as_str()))
            .collect();
        let scheduled = Scheduled {
            shard: keys.shard(),
            earliest: (earliest >= 0).then_some(earliest),
            head_moved_earlier: moved == 1,
        };
        Ok((scheduled, not_held))
    }

    /// Groups items by the shard `shard_of` gives their entity (non-empty shards only), so
    /// that each script call touches one shard's keys.
    fn group<'a, T>(
        &self,
        items: impl IntoIterator<Item = (&'a EntityId, T)>,
        shard_of: impl Fn(&EntityId) -> Shard,
    ) -> Vec<(ShardKeys, Vec<(&'a EntityId, T)>)> {
        let mut groups: BTreeMap<Shard, Vec<(&EntityId, T)>> = BTreeMap::new();
        for (entity, value) in items {
            groups
                .entry(shard_of(entity))
                .or_default()
                .push((entity, value));
        }
        groups
            .into_iter()
            .map(|(shard, members)| (self.keys.for_shard(shard), members))
            .collect()
    }

    /// Schedules each entity at its time (unix ms), unless it is due sooner: the end of a timed
    /// action, whose evaluation restores the entity. One script call per shard (the current
    /// layout: during a shard count change the repair sweep finds a due timer either way);
    /// the due index is told of the shards whose head moved earlier. An entity dead-lettered
    /// is left alone, and so is one in flight with `skip_in_flight` (its evaluation decides).
    /// Returns how many entries were added or moved earlier.
    pub async fn schedule_at(
        &self,
        entities: &[(EntityId, i64)],
        skip_in_flight: bool,
    ) -> Result<usize> {
        let groups = self.group(entities.iter().map(|(e, at)| (e, *at)), |e| {
            self.keys.shard_of(e)
        });
        let calls = groups.into_iter().map(|(keys, members)| {
            let mut invocation = SCRIPTS.schedule_at.prepare_invoke();
            invocation
                .key(keys.due())
                .key(keys.dead())
                .key(keys.inflight())
                .arg(if skip_in_flight { "1" } else { "0" });
            for (entity, at) in members {
                invocation.arg(entity.as_str()).arg(at);
            }
            let mut redis = self.redis.clone();
            async move {
                let (earliest, moved, set): (i64, i64, usize) = invocation
                    .invoke_async(&mut redis)
                    .timed_script("schedule_at")
                    .await?;
                Ok::<_, QueueError>((keys.shard(), earliest, moved == 1, set))
            }
        });
        let set = try_join_all(calls).await?;
        let earlier: Vec<(Shard, i64)> = set
            .iter()
            .filter(|(_, earliest, moved, _)| *moved && *earliest >= 0)
            .map(|(shard, earliest, _, _)| (*shard, *earliest))
            .collect();
        self.report(IndexKind::Due, &earlier).await;
        Ok(set.iter().map(|(_, _, _, set)| set).sum())
    }

    /// Re-schedules, due now, those of `entities` that Redis holds neither due nor in flight
    /// (nor, while a shard count change drains, in the old layout). Returns how many.
    pub async fn repair(&self, entities: &[EntityId]) -> Result<usize> {
        let held = self.held_in_previous_layout(entities).await?;
        let lost: Vec<EntityId> = entities
            .iter()
            .filter(|e| !held.contains(e.as_str()))
            .cloned()
            .collect();
        self.count_per_shard("repair", &SCRIPTS.repair, &lost, |k| {
            vec![k.due(), k.pending(), k.inflight(), k.dead()]
        })
        .await
    }

    /// Those of `entities` that a layout being drained still holds (due, pending, in flight or
    /// dead). An entity only ever leaves the old layout, so the answer cannot go stale.
    async fn held_in_previous_layout(
        &self,
        entities: &[EntityId],
    ) -> Result<std::collections::HashSet<String>> {
        let groups = self.group(
            entities
                .iter()
                .filter(|e| self.keys.previous_shard_of(e).is_some())
                .map(|e| (e, ())),
            |e| self.keys.previous_shard_of(e).expect("filtered on it"),
        );
        let checks = groups.into_iter().map(|(keys, members)| {
            let mut pipe = redis::pipe();
            for (entity, ()) in &members {
                ask_held(&mut pipe, &keys, entity);
            }
            let mut redis = self.redis.clone();
            async move {
                let replies: Vec<Held> = pipe.query_async(&mut redis).await?;
                Ok::<_, QueueError>(
                    members
                        .into_iter()
                        .zip(replies)
                        .filter(|(_, held)| is_held(held))
                        .map(|((entity, ()), _)| entity.as_str().to_owned())
                        .collect::<Vec<_>>(),
                )
            }
        });
        Ok(try_join_all(checks).await?.into_iter().flatten().collect())
    }

    /// Runs a script that takes entities as ARGV, may make them due and returns a count, once
    /// per shard (with that shard's `keys`), concurrently; reports the shards to the due index;
    /// returns the sum.
    async fn count_per_shard(
        &self,
        name: &'static str,
        script: &redis::Script,
        entities: &[EntityId],
        keys: impl Fn(&ShardKeys) -> Vec<String>,
    ) -> Result<usize> {
        let groups = self.group(entities.iter().map(|e| (e, ())), |e| self.keys.shard_of(e));
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
                let count = invocation
                    .invoke_async::<usize>(&mut redis)
                    .timed_script(name)
                    .await?;
                Ok::<_, QueueError>((shard_keys.shard(), count))
            }
        });
        let counts = try_join_all(calls).await?;
        // Every shard touched (a redrive makes entities due whatever it counts): a shard
        // reported due that is not costs one claim call.
        let due_now: Vec<(Shard, i64)> = counts.iter().map(|(shard, _)| (*shard, 0)).collect();
        self.report(IndexKind::Due, &due_now).await;
        Ok(counts.into_iter().map(|(_, count)| count).sum())
    }

    pub async fn ping(&self) -> Result<()> {
        Ok(self.redis.ping().await?)
    }
}

/// What [`Queue::schedule_each`] did.
#[derive(Debug)]
pub struct ScheduleOutcome {
    /// The earliest fire-at set (unix ms), if anything was scheduled.
    pub earliest: Option<i64>,
    /// A shard's error, and every entity left unscheduled by a shard that failed.
    pub failure: Option<(QueueError, HashSet<EntityId>)>,
}

/// What one schedule call set in one shard.
struct Scheduled {
    shard: Shard,
    /// The earliest fire-at it set (unix ms), if it scheduled anything.
    earliest: Option<i64>,
    /// Whether that fire-at is earlier than anything the shard held due before.
    head_moved_earlier: bool,
}

/// An entity's place in one shard: due, pending (an anchor), in flight, dead.
type Held = (Option<f64>, bool, Option<f64>, Option<f64>);

/// Adds the commands whose replies make a [`Held`] to `pipe`.
fn ask_held(pipe: &mut redis::Pipeline, keys: &ShardKeys, entity: &EntityId) {
    pipe.zscore(keys.due(), entity.as_str())
        .hexists(keys.pending(), entity.as_str())
        .zscore(keys.inflight(), entity.as_str())
        .zscore(keys.dead(), entity.as_str());
}

/// Whether the shard holds the entity in any of its sets.
fn is_held((due, pending, inflight, dead): &Held) -> bool {
    due.is_some() || *pending || inflight.is_some() || dead.is_some()
}
