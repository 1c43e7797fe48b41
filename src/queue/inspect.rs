//! What operators and tests read from the schedule: depths per shard, one entity's state,
//! max-wait anchors, and whether Redis is configured to keep its keys.

use super::{Queue, Result};
use crate::domain::EntityId;

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
        let mut pipe = redis::pipe();
        for shard in 0..self.keys.shards() {
            let keys = self.keys.for_shard(shard);
            pipe.cmd("ZRANGE").arg(keys.due()).arg(0).arg(per_shard - 1);
            pipe.cmd("ZRANGE")
                .arg(keys.inflight())
                .arg(0)
                .arg(per_shard - 1);
        }
        let mut redis = self.redis.clone();
        let sets: Vec<Vec<String>> = pipe.query_async(&mut redis).await?;
        // An entity can be both due and in flight (claimed, then re-scheduled by a new event):
        // each is sampled once, so counting the known ones against the sample stays exact.
        let mut sample: Vec<String> = sets.into_iter().flatten().collect();
        sample.sort_unstable();
        sample.dedup();
        Ok(sample)
    }

    /// The max-wait anchor (unix ms) of an entity waiting in the due set: the time of its first
    /// event not yet claimed.
    pub async fn max_wait_anchor(&self, entity: &EntityId) -> Result<Option<i64>> {
        let key = self.keys.for_entity(entity).pending();
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
        let keys = self.keys.for_entity(entity);
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

    /// Due and in-flight counts per shard, for the metrics.
    pub async fn depths(&self) -> Result<Vec<ShardDepth>> {
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        for shard in 0..self.keys.shards() {
            let keys = self.keys.for_shard(shard);
            pipe.zcard(keys.due())
                .zcard(keys.inflight())
                .zcard(keys.dead())
                .zrange_withscores(keys.due(), 0, 0);
        }
        let mut redis = self.redis.clone();
        // Per shard: due, in flight, dead, and the earliest due member with its score.
        type ShardReply = (u64, u64, u64, Vec<(String, f64)>);
        let (time, shards): ((i64, i64), Vec<ShardReply>) = {
            let mut replies: Vec<redis::Value> = pipe.query_async(&mut redis).await?;
            let time =
                redis::from_redis_value(replies.remove(0)).map_err(redis::RedisError::from)?;
            let shards = replies
                .chunks(4)
                .map(|c| {
                    redis::from_redis_value(redis::Value::Array(c.to_vec()))
                        .map_err(redis::RedisError::from)
                })
                .collect::<redis::RedisResult<_>>()?;
            (time, shards)
        };
        let now_ms = time.0 * 1000 + time.1 / 1000;
        Ok(shards
            .into_iter()
            .enumerate()
            .map(|(shard, (due, inflight, dead, oldest))| ShardDepth {
                shard: shard as u16,
                due,
                inflight,
                dead,
                lag_ms: oldest
                    .first()
                    .map_or(0, |(_, score)| (now_ms - *score as i64).max(0)),
            })
            .collect())
    }

    /// Reads the settings that decide what Redis keeps through a restart or under memory
    /// pressure; `None` where the server refuses CONFIG (some managed services do).
    pub async fn durability(&self) -> Result<Option<RedisDurability>> {
        let mut redis = self.redis.clone();
        let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async(&mut redis)
            .await;
        let Ok(policy) = reply else {
            return Ok(None);
        };
        let appendonly: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendonly")
            .query_async(&mut redis)
            .await?;
        Ok(Some(RedisDurability {
            maxmemory_policy: policy.get(1).cloned().unwrap_or_default(),
            appendonly: appendonly.get(1).is_some_and(|v| v == "yes"),
        }))
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
