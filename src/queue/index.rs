//! The shard indexes: which shards may hold something due (or a lease that expires), and
//! from when. A script that makes a shard's earliest entry earlier reports the shard's time
//! here; workers and the reaper read the index (one call) instead of asking every shard, and
//! settle what they read. A rescan, a few shards a second by one process at a time, repairs an
//! index that Redis lost. docs/state-machine.md has the protocol and why no due entity is
//! missed.

use std::time::Duration;

use futures::{StreamExt, stream};

use super::{IndexKind, LeaseReports, Queue, QueueError, Result, Shard, scripts::SCRIPTS};
use crate::telemetry::Timed;

/// Shards rescanned at once (each its own call: a cluster pipeline holds one slot).
const RESCAN_CONCURRENCY: usize = 16;

/// How often a step of the index rescan runs (in one process of all).
pub const RESCAN_STEP: Duration = Duration::from_secs(1);

/// Most shards one rescan step reads (two commands each): what bounds the rescan's cost,
/// whatever the shard count.
pub const RESCAN_MAX_SHARDS_PER_STEP: usize = 16;

/// How many of `shards` one rescan step reads for all to be read once per `every`, within
/// 1..=[`RESCAN_MAX_SHARDS_PER_STEP`].
fn rescan_slice(shards: usize, every: Duration) -> usize {
    let steps = (every.as_secs_f64() / RESCAN_STEP.as_secs_f64()).max(1.0);
    ((shards as f64 / steps).ceil() as usize).clamp(1, RESCAN_MAX_SHARDS_PER_STEP)
}

/// Redis' clock for the index's reads: the index master's TIME at most [`Self::RESYNC`] ago,
/// carried forward by this process's monotonic clock, so that a read does not ask TIME each
/// time. A read's now only picks the shards it returns and where a hold ends: a shard read a
/// little early is a visit for nothing (its own script uses its master's clock), one read a
/// little late would wait that much, so the estimate errs ahead of Redis' clock, never behind.
#[derive(Debug, Default)]
pub(super) struct IndexClock(std::sync::Mutex<Option<(i64, std::time::Instant)>>);

impl IndexClock {
    /// How long an estimate is carried forward before a read asks TIME again.
    const RESYNC: Duration = Duration::from_secs(5);

    /// Redis' clock now (unix ms), if it was asked less than [`Self::RESYNC`] ago.
    fn now_ms(&self) -> Option<i64> {
        let synced = *self.0.lock().expect("not poisoned");
        synced
            .filter(|(_, at)| at.elapsed() < Self::RESYNC)
            .map(|(ms, at)| ms + at.elapsed().as_millis() as i64)
    }

    /// Redis' clock read `ms` after `asked` (when the call was sent): counted from `asked`,
    /// and a millisecond more for TIME's rounding down, the estimate is never behind.
    fn synced(&self, ms: i64, asked: std::time::Instant) {
        *self.0.lock().expect("not poisoned") = Some((ms + 1, asked));
    }
}

/// The first member of a sorted set with its score, as ZRANGE 0 0 WITHSCORES answers.
type Head = Vec<(String, f64)>;

/// What a reader of an index got.
#[derive(Debug, Default)]
pub struct IndexRead {
    /// Redis' clock at the read (unix ms).
    pub now_ms: i64,
    /// The earliest time after now at which another shard may be due.
    pub next_ms: Option<i64>,
    /// Shards that may hold something due now.
    pub shards: Vec<ReadShard>,
}

/// A shard read as due, with its report count at the read: its settle raises the shard's time
/// only if no report has come since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadShard {
    pub shard: Shard,
    reports: String,
    /// Its time in the index when read (unix ms).
    at: i64,
    /// Whether the read held it ([`Queue::read_and_hold`]): not settled, it gets `at` back.
    held: bool,
}

impl ReadShard {
    /// What its settle passes to index_settle.lua.
    fn settle_arg(&self, settle: Settle) -> i64 {
        match settle {
            // Still due from when it was read: never later than the truth (a report since
            // then only lowers it further).
            Settle::Untouched if self.held => self.at.max(0),
            settle => settle.as_arg(),
        }
    }
}

/// Shards whose calls failed lately (their master is down or failing over): a poll skips
/// them for [`FailingShards::PAUSE`] and tries the others, so that one unreachable master
/// does not hold up the shards of the healthy ones, and stops trying after
/// [`FailingShards::PER_POLL`] failures in one poll, so that a poll's time stays bounded.
#[derive(Debug, Default)]
pub struct FailingShards {
    since: std::sync::Mutex<std::collections::HashMap<Shard, std::time::Instant>>,
}

impl FailingShards {
    /// How long a shard that failed is left alone.
    pub const PAUSE: Duration = Duration::from_secs(1);
    /// Failures after which a poll tries no more shards.
    pub const PER_POLL: usize = 3;

    /// Whether the shard failed less than [`Self::PAUSE`] ago.
    pub fn paused(&self, shard: Shard) -> bool {
        let mut since = self.since.lock().expect("not poisoned");
        since.retain(|_, at| at.elapsed() < Self::PAUSE);
        since.contains_key(&shard)
    }

    pub fn failed(&self, shard: Shard) {
        self.since
            .lock()
            .expect("not poisoned")
            .insert(shard, std::time::Instant::now());
    }
}

/// What a reader learned of a shard it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// The earliest time still waiting in the shard (its script's answer).
    Next(i64),
    /// The shard holds nothing more.
    Empty,
    /// The reader did not get to the shard; it keeps its time.
    Untouched,
}

impl Settle {
    pub fn of(next: Option<i64>) -> Self {
        next.map_or(Settle::Empty, Settle::Next)
    }

    fn as_arg(self) -> i64 {
        match self {
            Settle::Next(at) => at.max(0),
            Settle::Empty => -1,
            Settle::Untouched => -2,
        }
    }
}

impl Queue {
    /// Tells an index the earliest time something in each shard is due. A failure is logged,
    /// not returned: the shard's own script succeeded, and the rescan finds the shard.
    pub(crate) async fn report(&self, kind: IndexKind, times: &[(Shard, i64)]) {
        if times.is_empty() {
            return;
        }
        let index = self.keys.index();
        let mut invocation = SCRIPTS.index_report.prepare_invoke();
        invocation
            .key(index.times(kind))
            .key(index.reports(kind))
            .arg(match kind {
                IndexKind::Due => index.wake_channel(),
                IndexKind::Leases => String::new(),
            });
        for (shard, at) in times {
            invocation.arg(shard.id()).arg(*at);
        }
        let mut redis = self.redis.clone();
        let reported: redis::RedisResult<i64> = invocation
            .invoke_async(&mut redis)
            .timed_script("index_report")
            .await;
        if let Err(error) = reported {
            tracing::warn!(error = %crate::telemetry::Chain(&error), "could not update the shard index; the rescan will");
        }
    }

    /// Reads up to `limit` shards of an index that may hold something due now (the most
    /// overdue first).
    pub async fn read_index(&self, kind: IndexKind, limit: usize) -> Result<IndexRead> {
        self.read_and_hold(kind, limit, Duration::ZERO).await
    }

    /// [`Self::read_index`], and the shards read are held for `hold`: other readers do not
    /// read them until this reader settles them ([`Self::settle_index`], which gives a shard it
    /// did not get to its time back) or the hold ends. Processes that wake at the same due time
    /// then do not all claim and settle the same shards.
    pub async fn read_and_hold(
        &self,
        kind: IndexKind,
        limit: usize,
        hold: Duration,
    ) -> Result<IndexRead> {
        let index = self.keys.index();
        let mut redis = self.redis.clone();
        let held = !hold.is_zero();
        let estimate = self.index_clock.now_ms();
        let asked = std::time::Instant::now();
        let reply: Vec<redis::Value> = SCRIPTS
            .index_read
            .key(index.times(kind))
            .key(index.reports(kind))
            .arg(limit)
            .arg(hold.as_millis() as u64)
            .arg(estimate.map_or_else(String::new, |ms| ms.to_string()))
            .invoke_async(&mut redis)
            .timed_script("index_read")
            .await?;
        let short = || QueueError::Reply("index_read: short reply".into());
        let mut values = reply.into_iter();
        let number = |value: Option<redis::Value>| -> Result<i64> {
            Ok(redis::from_redis_value(value.ok_or_else(short)?)
                .map_err(redis::RedisError::from)?)
        };
        let now_ms = number(values.next())?;
        if estimate.is_none() {
            self.index_clock.synced(now_ms, asked);
        }
        let next_ms = Some(number(values.next())?).filter(|&at| at >= 0);
        let mut shards = Vec::new();
        let mut foreign = Vec::new();
        while let Some(id) = values.next() {
            let id: String = redis::from_redis_value(id).map_err(redis::RedisError::from)?;
            let reports: String = redis::from_redis_value(values.next().ok_or_else(short)?)
                .map_err(redis::RedisError::from)?;
            // A score, as Lua gives it: a string.
            let at: String = redis::from_redis_value(values.next().ok_or_else(short)?)
                .map_err(redis::RedisError::from)?;
            let at = at
                .parse::<f64>()
                .map_err(|_| QueueError::Reply("index_read: a time that is no number".into()))?
                as i64;
            let read = |shard| ReadShard {
                shard,
                reports,
                at,
                held,
            };
            match Shard::parse(&id) {
                Some(shard) if self.keys.knows(shard) => shards.push(read(shard)),
                // Another process's layout during a shard count change: left to the processes
                // that use it.
                Some(shard) => foreign.push(read(shard)),
                None => self.forget_in_index(kind, &id).await?,
            }
        }
        if !foreign.is_empty() {
            self.drop_empty_foreign(kind, foreign).await;
        }
        Ok(IndexRead {
            now_ms,
            next_ms,
            shards,
        })
    }

    /// Settles, as empty, the shards of a layout this process does not use that hold nothing
    /// due or in flight any more (a layout retired, or drained): they leave the index unless a
    /// report came since the read. The others are left to the processes that use their layout
    /// (given their time back, if held), as is a shard that cannot be asked.
    async fn drop_empty_foreign(&self, kind: IndexKind, foreign: Vec<ReadShard>) {
        let checks = foreign.into_iter().map(|read| {
            let keys = self.keys.for_foreign_shard(read.shard);
            let mut redis = self.redis.clone();
            async move {
                let held: redis::RedisResult<(u64, u64)> = redis::pipe()
                    .zcard(keys.due())
                    .zcard(keys.inflight())
                    .query_async(&mut redis)
                    .await;
                let settle = match held {
                    Ok((0, 0)) => Settle::Empty,
                    _ => Settle::Untouched,
                };
                (read, settle)
            }
        });
        let settled: Vec<(ReadShard, Settle)> = futures::future::join_all(checks)
            .await
            .into_iter()
            .filter(|(read, settle)| read.held || *settle != Settle::Untouched)
            .collect();
        if let Err(error) = self.settle_index(kind, &settled).await {
            tracing::debug!(error = %crate::telemetry::Chain(&error), "could not drop empty shards of another layout from the index");
        }
    }

    async fn forget_in_index(&self, kind: IndexKind, id: &str) -> Result<()> {
        tracing::warn!(
            shard = id,
            "the shard index names something that is no shard; dropped"
        );
        let index = self.keys.index();
        let mut redis = self.redis.clone();
        redis::pipe()
            .zrem(index.times(kind), id)
            .hdel(index.reports(kind), id)
            .exec_async(&mut redis)
            .await?;
        Ok(())
    }

    /// Settles shards read from an index: each shard's time becomes what its script answered
    /// if no report has come since the read, else only goes down to it; a shard held and
    /// untouched gets its time back.
    pub async fn settle_index(
        &self,
        kind: IndexKind,
        shards: &[(ReadShard, Settle)],
    ) -> Result<()> {
        self.settle_reporting(kind, shards, &[]).await
    }

    /// Settles the due index after a worker's round ([`Self::settle_index`]) and tells the
    /// lease index what the round's claims owe it ([`Self::claim_deferring`]), in one call:
    /// both are the index's, under one hash tag.
    pub async fn settle_round(
        &self,
        shards: &[(ReadShard, Settle)],
        leases: LeaseReports,
    ) -> Result<()> {
        self.settle_reporting(IndexKind::Due, shards, &leases.0)
            .await
    }

    async fn settle_reporting(
        &self,
        kind: IndexKind,
        shards: &[(ReadShard, Settle)],
        leases: &[(Shard, i64)],
    ) -> Result<()> {
        if shards.is_empty() && leases.is_empty() {
            return Ok(());
        }
        let index = self.keys.index();
        let mut invocation = SCRIPTS.index_settle.prepare_invoke();
        invocation.key(index.times(kind)).key(index.reports(kind));
        if !leases.is_empty() {
            invocation
                .key(index.times(IndexKind::Leases))
                .key(index.reports(IndexKind::Leases));
        }
        invocation.arg(shards.len());
        for (read, settle) in shards {
            invocation
                .arg(read.shard.id())
                .arg(&read.reports)
                .arg(read.settle_arg(*settle));
        }
        for (shard, at) in leases {
            invocation.arg(shard.id()).arg(*at);
        }
        let mut redis = self.redis.clone();
        let _: i64 = invocation
            .invoke_async(&mut redis)
            .timed_script("index_settle")
            .await?;
        Ok(())
    }

    /// How many shards one rescan step reads so that every shard is read once per `every`:
    /// at least one, at most [`RESCAN_MAX_SHARDS_PER_STEP`] (more shards than that many per
    /// step take longer than `every` to go round).
    pub fn rescan_slice(&self, every: Duration) -> usize {
        rescan_slice(self.rescanned_shards().len(), every)
    }

    /// The shards the rescan goes round: the current layout's, then a draining layout's.
    fn rescanned_shards(&self) -> Vec<Shard> {
        self.keys
            .current_shards()
            .chain(self.keys.previous_shards())
            .collect()
    }

    /// One step of the index rescan, run every [`RESCAN_STEP`] by every process: the first
    /// to take the step's lock (it expires after the step) reads the earliest due time and
    /// lease deadline of the next [`Self::rescan_slice`] shards (a counter under the index's
    /// hash tag says which, so the processes go round the shards together) and reports them
    /// to the indexes. The indexes only go down here; this repairs an index that Redis lost (a
    /// flush, or a failover that dropped its latest writes) and a report that a crashed
    /// process never made, within `every` (longer with more shards than the step's limit
    /// allows), at a cost that does not grow with the shard count. Returns how many shards this
    /// process read (0: another process has this step).
    pub async fn rescan_index(&self, every: Duration) -> Result<usize> {
        let index = self.keys.index();
        let mut redis = self.redis.clone();
        let took: Option<String> = redis::cmd("SET")
            .arg(index.rescan_lock(self.keys.shards()))
            .arg(std::process::id())
            .arg("NX")
            .arg("PX")
            .arg((RESCAN_STEP.as_millis() * 9 / 10) as u64)
            .query_async(&mut redis)
            .await?;
        if took.is_none() {
            return Ok(0);
        }
        let all = self.rescanned_shards();
        let slice = self.rescan_slice(every).min(all.len());
        let end: i64 = redis::cmd("INCRBY")
            .arg(index.rescan_cursor(self.keys.shards()))
            .arg(slice)
            .query_async(&mut redis)
            .await?;
        let start = (end - slice as i64).rem_euclid(all.len() as i64) as usize;
        let shards: Vec<Shard> = (0..slice).map(|i| all[(start + i) % all.len()]).collect();
        let heads: Vec<(Shard, Option<i64>, Option<i64>)> = stream::iter(shards)
            .map(|shard| {
                let keys = self.keys.for_shard(shard);
                let mut redis = self.redis.clone();
                async move {
                    let (due, inflight): (Head, Head) = redis::pipe()
                        .zrange_withscores(keys.due(), 0, 0)
                        .zrange_withscores(keys.inflight(), 0, 0)
                        .query_async(&mut redis)
                        .await?;
                    let head = |set: Head| set.first().map(|(_, at)| *at as i64);
                    Ok::<_, QueueError>((shard, head(due), head(inflight)))
                }
            })
            .buffer_unordered(RESCAN_CONCURRENCY)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            // A shard on an unreachable master is read on the next round; the others now.
            .filter_map(|head| match head {
                Ok(head) => Some(head),
                Err(error) => {
                    tracing::debug!(error = %crate::telemetry::Chain(&error), "index rescan could not read a shard");
                    None
                }
            })
            .collect();
        let due: Vec<(Shard, i64)> = heads
            .iter()
            .filter_map(|(s, d, _)| Some((*s, (*d)?)))
            .collect();
        let leases: Vec<(Shard, i64)> = heads
            .iter()
            .filter_map(|(s, _, l)| Some((*s, (*l)?)))
            .collect();
        self.report(IndexKind::Due, &due).await;
        self.report(IndexKind::Leases, &leases).await;
        Ok(slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rescan_step_reads_enough_shards_to_go_round_in_time_but_never_more_than_its_limit() {
        let every = Duration::from_secs(30);
        assert_eq!(rescan_slice(120, every), 4);
        assert_eq!(rescan_slice(4, every), 1);
        assert_eq!(rescan_slice(1, Duration::from_millis(10)), 1);
        assert_eq!(rescan_slice(4, Duration::from_secs(1)), 4);
        assert_eq!(rescan_slice(480, every), RESCAN_MAX_SHARDS_PER_STEP);
        // The cost stays the same whatever the shard count; the round takes longer.
        assert_eq!(rescan_slice(1000, every), RESCAN_MAX_SHARDS_PER_STEP);
        assert_eq!(rescan_slice(16_384, every), RESCAN_MAX_SHARDS_PER_STEP);
    }
}
