//! The shard indexes: which shards may hold something due (or a lease that expires), and
//! from when. A script that makes a shard's earliest entry earlier reports the shard's time
//! here; workers and the reaper read the index (one call) instead of asking every shard, and
//! settle what they read. A periodic rescan, by one process at a time, repairs an index that
//! Redis lost. docs/state-machine.md has the protocol and why no due entity is
//! missed.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};

use super::{IndexKind, Queue, QueueError, Result, Shard, scripts::SCRIPTS};
use crate::telemetry::Timed;

/// Shards rescanned at once (each its own call: a cluster pipeline holds one slot).
const RESCAN_CONCURRENCY: usize = 16;

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
        let index = self.keys.index();
        let mut redis = self.redis.clone();
        let reply: Vec<redis::Value> = SCRIPTS
            .index_read
            .key(index.times(kind))
            .key(index.reports(kind))
            .arg(limit)
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
        let next_ms = Some(number(values.next())?).filter(|&at| at >= 0);
        let mut shards = Vec::new();
        while let Some(id) = values.next() {
            let id: String = redis::from_redis_value(id).map_err(redis::RedisError::from)?;
            let reports: String = redis::from_redis_value(values.next().ok_or_else(short)?)
                .map_err(redis::RedisError::from)?;
            match Shard::parse(&id).filter(|s| self.keys.knows(*s)) {
                Some(shard) => shards.push(ReadShard { shard, reports }),
                // A layout no process uses any more: drop it from the index.
                None => self.forget_in_index(kind, &id).await?,
            }
        }
        Ok(IndexRead {
            now_ms,
            next_ms,
            shards,
        })
    }

    async fn forget_in_index(&self, kind: IndexKind, id: &str) -> Result<()> {
        tracing::warn!(
            shard = id,
            "the shard index names a shard of no layout in use; dropped"
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
    /// if no report has come since the read, else only goes down to it.
    pub async fn settle_index(
        &self,
        kind: IndexKind,
        shards: &[(ReadShard, Settle)],
    ) -> Result<()> {
        if shards.is_empty() {
            return Ok(());
        }
        let index = self.keys.index();
        let mut invocation = SCRIPTS.index_settle.prepare_invoke();
        invocation.key(index.times(kind)).key(index.reports(kind));
        for (read, settle) in shards {
            invocation
                .arg(read.shard.id())
                .arg(&read.reports)
                .arg(settle.as_arg());
        }
        let mut redis = self.redis.clone();
        let _: i64 = invocation
            .invoke_async(&mut redis)
            .timed_script("index_settle")
            .await?;
        Ok(())
    }

    /// Reports every shard's earliest due time and lease deadline to the indexes, if no other
    /// process has done so within `every` (a lock that expires after it). The indexes only go
    /// down here; this repairs an index that Redis lost (a flush, or a failover that dropped
    /// its latest writes) and a report that a crashed process never made. Returns whether
    /// this process rescanned.
    pub async fn rescan_index(&self, every: Duration) -> Result<bool> {
        let index = self.keys.index();
        let mut redis = self.redis.clone();
        let took: Option<String> = redis::cmd("SET")
            .arg(index.rescan_lock())
            .arg(std::process::id())
            .arg("NX")
            .arg("PX")
            .arg(every.as_millis().max(1) as u64)
            .query_async(&mut redis)
            .await?;
        if took.is_none() {
            return Ok(false);
        }
        let shards: Vec<Shard> = self
            .keys
            .current_shards()
            .chain(self.keys.previous_shards())
            .collect();
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
            .try_collect()
            .await?;
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
        Ok(true)
    }
}
