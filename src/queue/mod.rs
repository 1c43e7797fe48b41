//! The debounce schedule in Redis: schedule, claim, renew, ack, retry and reap, one Lua
//! script each. See docs/state-machine.md for an entity's life in these sets.

mod keys;
mod scripts;

use crate::telemetry::Timed;
use std::time::Duration;

use futures::future::try_join_all;
use redis::aio::ConnectionManager;

pub use self::keys::{Keyspace, ShardKeys};
use self::scripts::SCRIPTS;
use crate::{
    config::{ScheduleMode, Settings},
    domain::{EntityId, Priority},
};

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("redis returned an unexpected reply: {0}")]
    Reply(String),
}

pub type Result<T> = std::result::Result<T, QueueError>;

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

impl Timing {
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            window_ms: settings.debounce_window.as_millis() as u64,
            max_wait_ms: settings.max_wait.as_millis() as u64,
            mode: settings.schedule_mode,
            max_attempts: settings.max_attempts,
            backoff_base_ms: settings.backoff_base.as_millis() as u64,
            backoff_max_ms: settings.backoff_max.as_millis() as u64,
        }
    }
}

/// One claimed entity: only the holder of `token` may renew, ack or retry it.
#[derive(Debug, Clone)]
pub struct Claim {
    pub shard: u16,
    pub entity: EntityId,
    pub token: String,
    /// The fire-at the entity was claimed at (unix ms).
    pub due_at_ms: i64,
    /// Lease (and lock time-to-live) of this claim, renewed by the same amount.
    pub lease_ms: u64,
}

/// What one claim call on one shard returned.
#[derive(Debug, Default)]
pub struct ClaimBatch {
    /// Redis' clock at the claim (unix ms).
    pub now_ms: i64,
    /// The earliest fire-at still waiting in the shard, if any.
    pub next_due_ms: Option<i64>,
    /// Due entities pushed back because an earlier claim of theirs was still running.
    pub busy: usize,
    pub claims: Vec<Claim>,
    /// Members that failed to parse as entity ids (never written by quiesce).
    pub malformed: Vec<String>,
}

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

/// What one reaper call did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    /// Entities whose lease expired, due again.
    pub returned: usize,
    /// Entities whose lease expired on their last allowed attempt.
    pub dead_lettered: usize,
}

/// What became of a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// Due again after its backoff.
    Retried,
    /// Moved to the dead-letter set.
    DeadLettered,
    /// The claim had been taken over; its new owner decides.
    TakenOver,
}

/// The failure history an entity carries in Redis while retried, and into the dead letters.
#[derive(
    Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct FailureRecord {
    /// `fatal` or `attempts_exhausted`, for dead letters.
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub last_error: String,
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub first_failure_ms: i64,
    #[serde(default)]
    pub last_failure_ms: i64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct DeadLetter {
    pub entity: String,
    pub dead_lettered_at_ms: i64,
    #[serde(flatten)]
    pub record: FailureRecord,
}

/// Position in a dead-letter listing: a shard and an offset in its set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeadLetterCursor {
    pub shard: u16,
    pub offset: usize,
}

impl DeadLetterCursor {
    pub fn parse(raw: &str) -> Option<Self> {
        let (shard, offset) = raw.split_once('.')?;
        Some(Self {
            shard: shard.parse().ok()?,
            offset: offset.parse().ok()?,
        })
    }

    pub fn encode(&self) -> String {
        format!("{}.{}", self.shard, self.offset)
    }
}

#[derive(Debug, Default)]
pub struct DeadLetterPage {
    pub entries: Vec<DeadLetter>,
    pub next: Option<DeadLetterCursor>,
}

/// Where an entity stands in the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleState {
    pub due_at_ms: Option<i64>,
    pub lease_until_ms: Option<i64>,
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

    /// Claims up to `limit` due entities of one shard.
    pub async fn claim(
        &self,
        shard: u16,
        limit: usize,
        busy_delay: Duration,
        lease: Duration,
    ) -> Result<ClaimBatch> {
        let lease_ms = lease.as_millis().max(1) as u64;
        let keys = self.keys.for_shard(shard);
        let token_prefix = uuid::Uuid::new_v4().simple().to_string();
        let mut redis = self.redis.clone();
        let reply: Vec<redis::Value> = SCRIPTS
            .claim
            .key(keys.due())
            .key(keys.pending())
            .key(keys.inflight())
            .key(keys.claims())
            .arg(limit)
            .arg(lease_ms)
            .arg(&token_prefix)
            .arg(busy_delay.as_millis() as u64)
            .invoke_async(&mut redis)
            .timed_script("claim")
            .await?;
        parse_claim_reply(shard, lease_ms, reply)
    }

    /// Finishes a claim and releases the entity lock if it is still ours; false if the claim
    /// had been taken over (lease expired and reaped).
    pub async fn ack(&self, claim: &Claim) -> Result<bool> {
        let keys = self.keys.for_shard(claim.shard);
        let mut redis = self.redis.clone();
        let done: i64 = SCRIPTS
            .ack
            .key(keys.inflight())
            .key(keys.claims())
            .key(keys.failures())
            .key(keys.lock(&claim.entity))
            .arg(claim.entity.as_str())
            .arg(&claim.token)
            .invoke_async(&mut redis)
            .timed_script("ack")
            .await?;
        Ok(done == 1)
    }

    /// Gives a claim back, to fire again after `delay`.
    pub async fn retry(&self, claim: &Claim, delay: Duration) -> Result<bool> {
        let keys = self.keys.for_shard(claim.shard);
        let mut redis = self.redis.clone();
        let done: i64 = SCRIPTS
            .retry
            .key(keys.due())
            .key(keys.pending())
            .key(keys.inflight())
            .key(keys.claims())
            .arg(claim.entity.as_str())
            .arg(&claim.token)
            .arg(delay.as_millis() as u64)
            .invoke_async(&mut redis)
            .timed_script("retry")
            .await?;
        Ok(done == 1)
    }

    /// Extends the claim's lease and its entity lock; false if either was lost.
    pub async fn renew(&self, claim: &Claim) -> Result<bool> {
        let keys = self.keys.for_shard(claim.shard);
        let mut redis = self.redis.clone();
        let done: i64 = SCRIPTS
            .renew
            .key(keys.inflight())
            .key(keys.claims())
            .key(keys.lock(&claim.entity))
            .arg(claim.entity.as_str())
            .arg(&claim.token)
            .arg(claim.lease_ms)
            .invoke_async(&mut redis)
            .timed_script("renew")
            .await?;
        Ok(done == 1)
    }

    /// Returns entities whose lease expired (their worker died) to the due set.
    pub async fn reap(&self, shard: u16, limit: usize) -> Result<Reaped> {
        let keys = self.keys.for_shard(shard);
        let mut redis = self.redis.clone();
        let (returned, dead_lettered): (usize, usize) = SCRIPTS
            .reap
            .key(keys.due())
            .key(keys.pending())
            .key(keys.inflight())
            .key(keys.claims())
            .key(keys.failures())
            .key(keys.dead())
            .key(keys.dead_info())
            .arg(limit)
            .arg(self.timing.max_attempts)
            .invoke_async(&mut redis)
            .timed_script("reap")
            .await?;
        Ok(Reaped {
            returned,
            dead_lettered,
        })
    }

    /// Records a failed attempt: due again after a jittered exponential backoff, or
    /// dead-lettered at the attempt limit (at once if `fatal`).
    pub async fn fail(&self, claim: &Claim, error: &str, fatal: bool) -> Result<Failed> {
        let keys = self.keys.for_shard(claim.shard);
        let mut redis = self.redis.clone();
        let jitter: f64 = rand::random();
        let result: i64 = SCRIPTS
            .fail
            .key(keys.due())
            .key(keys.pending())
            .key(keys.inflight())
            .key(keys.claims())
            .key(keys.failures())
            .key(keys.dead())
            .key(keys.dead_info())
            .arg(claim.entity.as_str())
            .arg(&claim.token)
            .arg(error)
            .arg(self.timing.max_attempts)
            .arg(self.timing.backoff_base_ms)
            .arg(self.timing.backoff_max_ms)
            .arg(if fatal { "1" } else { "0" })
            .arg(jitter)
            .invoke_async(&mut redis)
            .timed_script("fail")
            .await?;
        Ok(match result {
            1 => Failed::Retried,
            2 => Failed::DeadLettered,
            _ => Failed::TakenOver,
        })
    }

    /// Dead-lettered entities, oldest first, shard by shard; `cursor` continues a listing.
    pub async fn dead_letters(
        &self,
        cursor: DeadLetterCursor,
        limit: usize,
    ) -> Result<DeadLetterPage> {
        let mut page = DeadLetterPage::default();
        let mut shard = cursor.shard;
        let mut offset = cursor.offset;
        while shard < self.keys.shards() && page.entries.len() < limit {
            let keys = self.keys.for_shard(shard);
            let want = limit - page.entries.len();
            let mut redis = self.redis.clone();
            let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(keys.dead())
                .arg(offset)
                .arg(offset + want - 1)
                .arg("WITHSCORES")
                .query_async(&mut redis)
                .await?;
            if !members.is_empty() {
                let infos: Vec<Option<String>> = redis::cmd("HMGET")
                    .arg(keys.dead_info())
                    .arg(members.iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>())
                    .query_async(&mut redis)
                    .await?;
                for ((entity, at), info) in members.iter().zip(infos) {
                    let record: FailureRecord = info
                        .and_then(|raw| serde_json::from_str(&raw).ok())
                        .unwrap_or_default();
                    page.entries.push(DeadLetter {
                        entity: entity.clone(),
                        dead_lettered_at_ms: *at as i64,
                        record,
                    });
                }
            }
            if members.len() == want {
                offset += want;
            } else {
                shard += 1;
                offset = 0;
            }
        }
        if shard < self.keys.shards() {
            page.next = Some(DeadLetterCursor { shard, offset });
        }
        Ok(page)
    }

    /// Takes entities out of the dead-letter set, due now with fresh attempts; returns how
    /// many were dead-lettered.
    pub async fn redrive(&self, entities: &[EntityId]) -> Result<usize> {
        self.count_per_shard("redrive", &SCRIPTS.redrive, entities, |k| {
            vec![k.dead(), k.dead_info(), k.due(), k.pending(), k.failures()]
        })
        .await
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

    /// Takes the entity lock for a claim: `SET lock token NX PX lease`.
    pub async fn lock(&self, claim: &Claim) -> Result<bool> {
        let key = self.keys.for_shard(claim.shard).lock(&claim.entity);
        let mut redis = self.redis.clone();
        let reply: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(&claim.token)
            .arg("NX")
            .arg("PX")
            .arg(claim.lease_ms)
            .query_async(&mut redis)
            .await?;
        Ok(reply.is_some())
    }

    /// Releases the entity lock if it still holds the claim's token.
    pub async fn unlock(&self, claim: &Claim) -> Result<bool> {
        let key = self.keys.for_shard(claim.shard).lock(&claim.entity);
        let mut redis = self.redis.clone();
        let done: i64 = SCRIPTS
            .unlock
            .key(key)
            .arg(&claim.token)
            .invoke_async(&mut redis)
            .timed_script("unlock")
            .await?;
        Ok(done == 1)
    }

    /// Whether the action with this dedup key is known to be applied (a cache: Postgres decides).
    pub async fn action_known_applied(&self, entity: &EntityId, dedup_key: &str) -> Result<bool> {
        let key = self.keys.for_entity(entity).applied_action(dedup_key);
        let mut redis = self.redis.clone();
        let exists: bool = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut redis)
            .await?;
        Ok(exists)
    }

    /// Remembers an applied action's dedup key for a day; only after Postgres committed it.
    pub async fn remember_applied_action(&self, entity: &EntityId, dedup_key: &str) -> Result<()> {
        let key = self.keys.for_entity(entity).applied_action(dedup_key);
        let mut redis = self.redis.clone();
        let _: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(1)
            .arg("NX")
            .arg("EX")
            .arg(86_400)
            .query_async(&mut redis)
            .await?;
        Ok(())
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

    pub async fn ping(&self) -> Result<()> {
        let mut redis = self.redis.clone();
        let _: String = redis::cmd("PING").query_async(&mut redis).await?;
        Ok(())
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

fn parse_claim_reply(shard: u16, lease_ms: u64, reply: Vec<redis::Value>) -> Result<ClaimBatch> {
    use redis::FromRedisValue;
    let bad = |what: &str| QueueError::Reply(format!("claim: {what}"));
    if reply.len() < 3 || !(reply.len() - 3).is_multiple_of(3) {
        return Err(bad("wrong length"));
    }
    let number = |v: &redis::Value| -> Result<i64> {
        match v {
            redis::Value::Int(n) => Ok(*n),
            other => {
                let text =
                    String::from_redis_value(other.clone()).map_err(|_| bad("not a number"))?;
                text.parse::<f64>()
                    .map(|f| f as i64)
                    .map_err(|_| bad("not a number"))
            }
        }
    };
    let text =
        |v: &redis::Value| String::from_redis_value(v.clone()).map_err(|_| bad("not a string"));
    let next = number(&reply[1])?;
    let mut batch = ClaimBatch {
        now_ms: number(&reply[0])?,
        next_due_ms: (next >= 0).then_some(next),
        busy: number(&reply[2])? as usize,
        ..Default::default()
    };
    for chunk in reply[3..].chunks(3) {
        let raw = text(&chunk[0])?;
        match EntityId::parse(&raw) {
            Ok(entity) => batch.claims.push(Claim {
                shard,
                entity,
                token: text(&chunk[1])?,
                due_at_ms: number(&chunk[2])?,
                lease_ms,
            }),
            Err(_) => batch.malformed.push(raw),
        }
    }
    Ok(batch)
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
