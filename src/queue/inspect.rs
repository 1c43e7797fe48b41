//! What operators and tests read from the schedule: depths per shard, one entity's state,
//! max-wait anchors, and whether Redis is configured to keep its keys.

use futures::{StreamExt, TryStreamExt, stream};

use super::{Queue, Result, Shard, ShardKeys};
use crate::domain::EntityId;

/// Shards read at once by the depth scrape and the sample.
const SHARD_CONCURRENCY: usize = 16;

/// What Redis keeps through a restart or under memory pressure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisDurability {
    pub maxmemory_policy: String,
    pub appendonly: bool,
}

impl RedisDurability {
    /// What an operator should fix. quiesce stays correct without them (Postgres and the repair
    /// sweep recover lost schedules) but evaluations then wait for the sweep.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.maxmemory_policy != "noeviction" {
            warnings.push(format!(
                "Redis maxmemory-policy is {:?}, not \"noeviction\": under memory pressure Redis may evict \
                 queue keys; entities are then evaluated only after the repair sweep finds them",
                self.maxmemory_policy
            ));
        }
        if !self.appendonly {
            warnings.push(
                "Redis runs without AOF (appendonly no): a restart loses the schedule, and entities wait \
                 for the repair sweep; set appendonly yes (appendfsync everysec)"
                    .to_owned(),
            );
        }
        warnings
    }
}

/// How many entities one shard holds in each set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardDepth {
    pub shard: u16,
    pub due: u64,
    pub inflight: u64,
    pub dead: u64,
    /// How long the most overdue entity has been due (Redis time); zero when none is.
    pub lag_ms: i64,
}

/// Where an entity stands in the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleState {
    pub due_at_ms: Option<i64>,
    pub lease_until_ms: Option<i64>,
}

impl Queue {
    /// Up to `per_shard` entities of each shard's due set (the soonest) and as many of its
    /// in-flight set: a cheap sample of what the schedule holds, for checking that it belongs
    /// to the database; each entity once.
    pub async fn sample_scheduled(&self, per_shard: usize) -> Result<Vec<String>> {
        if per_shard == 0 {
            return Ok(Vec::new());
        }
        let sets: Vec<Vec<Vec<String>>> = self
            .per_shard(self.keys.current_shards(), |keys, pipe| {
                pipe.cmd("ZRANGE").arg(keys.due()).arg(0).arg(per_shard - 1);
                pipe.cmd("ZRANGE")
                    .arg(keys.inflight())
                    .arg(0)
                    .arg(per_shard - 1);
            })
            .await?;
        // An entity can be both due and in flight (claimed, then re-scheduled by a new event):
        // each is sampled once, so counting the known ones against the sample stays exact.
        let mut sample: Vec<String> = sets.into_iter().flatten().flatten().collect();
        sample.sort_unstable();
        sample.dedup();
        Ok(sample)
    }

    /// Runs one pipeline per shard (a cluster pipeline must stay in one slot), a few at a
    /// time; the replies in shard order.
    pub(super) async fn per_shard<T: redis::FromRedisValue + Send>(
        &self,
        shards: impl Iterator<Item = Shard>,
        commands: impl Fn(&ShardKeys, &mut redis::Pipeline),
    ) -> Result<Vec<T>> {
        let calls: Vec<_> = shards
            .map(|shard| {
                let keys = self.keys.for_shard(shard);
                let mut pipe = redis::pipe();
                commands(&keys, &mut pipe);
                let mut redis = self.redis.clone();
                async move { pipe.query_async::<T>(&mut redis).await }
            })
            .collect();
        Ok(stream::iter(calls)
            .buffered(SHARD_CONCURRENCY)
            .try_collect()
            .await?)
    }

    /// The shard that holds an entity: its shard in a layout being drained while that still
    /// holds it, else its shard in the current layout.
    async fn holding_shard(&self, entity: &EntityId) -> Result<ShardKeys> {
        if let Some(previous) = self.keys.previous_shard_of(entity) {
            let keys = self.keys.for_shard(previous);
            let mut pipe = redis::pipe();
            super::ask_held(&mut pipe, &keys, entity);
            let mut redis = self.redis.clone();
            let held: super::Held = pipe.query_async(&mut redis).await?;
            if super::is_held(&held) {
                return Ok(keys);
            }
        }
        Ok(self.keys.for_entity(entity))
    }

    /// The max-wait anchor (unix ms) of an entity waiting in the due set: the time of its first
    /// event not yet claimed.
    pub async fn max_wait_anchor(&self, entity: &EntityId) -> Result<Option<i64>> {
        let key = self.holding_shard(entity).await?.pending();
        let mut redis = self.redis.clone();
        let raw: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(key)
            .arg(entity.as_str())
            .query_async(&mut redis)
            .await?;
        Ok(raw.as_deref().and_then(decode_anchor))
    }

    /// When the entity fires next and whether an evaluation of it is running.
    pub async fn state_of(&self, entity: &EntityId) -> Result<ScheduleState> {
        let keys = self.holding_shard(entity).await?;
        let mut redis = self.redis.clone();
        let (due, lease): (Option<f64>, Option<f64>) = redis::pipe()
            .zscore(keys.due(), entity.as_str())
            .zscore(keys.inflight(), entity.as_str())
            .query_async(&mut redis)
            .await?;
        Ok(ScheduleState {
            due_at_ms: due.map(|s| s as i64),
            lease_until_ms: lease.map(|s| s as i64),
        })
    }

    /// Due and in-flight counts per shard of the current layout, for the metrics.
    pub async fn depths(&self) -> Result<Vec<ShardDepth>> {
        self.depths_of(self.keys.current_shards()).await
    }

    /// Due and in-flight counts per shard of a layout being drained (empty when none is).
    pub async fn draining_depths(&self) -> Result<Vec<ShardDepth>> {
        self.depths_of(self.keys.previous_shards()).await
    }

    async fn depths_of(&self, shards: impl Iterator<Item = Shard>) -> Result<Vec<ShardDepth>> {
        let shards: Vec<Shard> = shards.collect();
        let mut redis = self.redis.clone();
        let time: (i64, i64) = redis::cmd("TIME").query_async(&mut redis).await?;
        let now_ms = time.0 * 1000 + time.1 / 1000;
        // Per shard: due, in flight, dead, and the earliest due member with its score.
        type ShardReply = (u64, u64, u64, Vec<(String, f64)>);
        let replies: Vec<ShardReply> = self
            .per_shard(shards.iter().copied(), |keys, pipe| {
                pipe.zcard(keys.due())
                    .zcard(keys.inflight())
                    .zcard(keys.dead())
                    .zrange_withscores(keys.due(), 0, 0);
            })
            .await?;
        Ok(shards
            .into_iter()
            .zip(replies)
            .map(|(shard, (due, inflight, dead, oldest))| ShardDepth {
                shard: shard.index,
                due,
                inflight,
                dead,
                lag_ms: oldest
                    .first()
                    .map_or(0, |(_, score)| (now_ms - *score as i64).max(0)),
            })
            .collect())
    }

    /// Reads, on every primary, the settings that decide what Redis keeps through a restart
    /// or under memory pressure; `None` where the server refuses CONFIG (some managed services
    /// do). Each with the node's address (empty on a single node).
    pub async fn durability(&self) -> Result<Option<Vec<(String, RedisDurability)>>> {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg("maxmemory-policy").arg("appendonly");
        let Ok(replies) = self.redis.on_primaries(cmd).await else {
            return Ok(None);
        };
        let mut nodes = Vec::new();
        for (node, reply) in replies {
            let pairs: std::collections::HashMap<String, String> =
                redis::from_redis_value(reply).map_err(redis::RedisError::from)?;
            nodes.push((
                node,
                RedisDurability {
                    maxmemory_policy: pairs.get("maxmemory-policy").cloned().unwrap_or_default(),
                    appendonly: pairs.get("appendonly").is_some_and(|v| v == "yes"),
                },
            ));
        }
        Ok(Some(nodes))
    }

    /// Each primary's Redis version (`INFO server`'s `redis_version`), as (major, minor).
    pub async fn server_versions(&self) -> Result<Vec<(String, (u32, u32))>> {
        let mut cmd = redis::cmd("INFO");
        cmd.arg("server");
        let mut versions = Vec::new();
        for (node, reply) in self.redis.on_primaries(cmd).await? {
            let info: String = redis::from_redis_value(reply).map_err(redis::RedisError::from)?;
            let version = info
                .lines()
                .find_map(|line| line.strip_prefix("redis_version:"))
                .and_then(|v| {
                    let mut parts = v.trim().split('.').map(|p| p.parse::<u32>().ok());
                    Some((parts.next()??, parts.next()??))
                });
            if let Some(version) = version {
                versions.push((node, version));
            }
        }
        Ok(versions)
    }

    /// Every key under the prefix, SCANned on every primary (for tests and operators).
    pub async fn keys_under_prefix(&self) -> Result<Vec<String>> {
        let escaped: String = self
            .keys
            .prefix()
            .chars()
            .flat_map(|c| {
                let special = matches!(c, '*' | '?' | '[' | ']' | '\\');
                special.then_some('\\').into_iter().chain([c])
            })
            .collect();
        let pattern = format!("{{{escaped}[:}}]*");
        let mut found = Vec::new();
        for node in self.redis.primaries().await? {
            let mut cursor: u64 = 0;
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000);
                let (next, batch): (u64, Vec<String>) =
                    redis::from_redis_value(self.redis.on_node(&node, cmd).await?)
                        .map_err(redis::RedisError::from)?;
                found.extend(batch);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        found.sort_unstable();
        found.dedup();
        Ok(found)
    }

    /// Deletes every key under the prefix (tests, and an operator retiring a prefix).
    pub async fn delete_prefix(&self) -> Result<usize> {
        let keys = self.keys_under_prefix().await?;
        let mut redis = self.redis.clone();
        for key in &keys {
            let _: i64 = redis::cmd("DEL").arg(key).query_async(&mut redis).await?;
        }
        Ok(keys.len())
    }
}

/// A pending-hash value as `lua/anchor.lua` writes it (6 bytes, big-endian unix ms), or a
/// decimal one written before that encoding.
fn decode_anchor(raw: &[u8]) -> Option<i64> {
    match raw.len() {
        6 => Some(
            raw.iter()
                .fold(0i64, |ms, byte| ms * 256 + i64::from(*byte)),
        ),
        _ => std::str::from_utf8(raw).ok()?.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::RedisDurability;

    #[test]
    fn anchors_decode_from_six_bytes_or_from_older_decimal_values() {
        let ms: i64 = 1_796_000_000_123;
        let bytes: Vec<u8> = (0..6).rev().map(|i| (ms >> (8 * i)) as u8).collect();
        assert_eq!(super::decode_anchor(&bytes), Some(ms));
        assert_eq!(super::decode_anchor(b"1796000000123"), Some(ms));
        assert_eq!(super::decode_anchor(b"not a time"), None);
    }

    #[test]
    fn eviction_and_missing_aof_are_reported() {
        let safe = RedisDurability {
            maxmemory_policy: "noeviction".into(),
            appendonly: true,
        };
        assert!(safe.warnings().is_empty());
        let risky = RedisDurability {
            maxmemory_policy: "allkeys-lru".into(),
            appendonly: false,
        };
        let warnings = risky.warnings();
        assert_eq!(warnings.len(), 2);
        assert!(warnings[0].contains("allkeys-lru"));
        assert!(warnings[1].contains("AOF"));
    }
}
