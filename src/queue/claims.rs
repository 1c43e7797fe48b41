//! Claims: take due entities with a lease, lock each, renew, and settle them (ack, retry,
//! fail); the reaper returns the claims of workers that died.

use std::{collections::HashMap, time::Duration};

use super::{IndexKind, Queue, QueueError, Result, Shard, scripts::SCRIPTS};
use crate::{
    domain::{DeadLetter, EntityId, FailureRecord},
    telemetry::Timed,
};

/// One claimed entity: only the holder of `token` may renew, ack or retry it.
#[derive(Debug, Clone)]
pub struct Claim {
    pub shard: Shard,
    pub entity: EntityId,
    pub token: String,
    /// The fire-at the entity was claimed at (unix ms).
    pub due_at_ms: i64,
    /// Lease (and lock time-to-live) of this claim, renewed by the same amount.
    pub lease_ms: u64,
    /// When the claim call that took it began and ended (set by the worker that called it),
    /// for the claim's span in the entity's trace.
    pub claimed: Option<(std::time::SystemTime, std::time::SystemTime)>,
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
    /// Whether the claims' lease deadline is earlier than every lease the shard held before,
    /// so the lease index has to be told (otherwise it already holds a time no later).
    pub leases_moved_earlier: bool,
    pub claims: Vec<Claim>,
    /// Members that failed to parse as entity ids (never written by quiesce).
    pub malformed: Vec<String>,
}

/// What one reaper call did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reaped {
    /// Entities whose lease expired, due again.
    pub returned: usize,
    /// Entities whose lease expired on their last allowed attempt.
    pub dead_lettered: usize,
    /// The failure record of each entity reaped, for Postgres: a dead letter (with its reason)
    /// or a failure still being retried.
    pub records: Vec<(String, FailureRecord)>,
}

/// How long Redis remembers the dedup key of an entity's last applied action.
const APPLIED_TTL: Duration = Duration::from_secs(86_400);

/// What taking an entity's lock found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locked {
    /// The lock is the claim's now. `last_applied` is the dedup key of the entity's last applied
    /// action, if Redis remembers one (a cache: the Postgres constraint decides).
    Taken { last_applied: Option<String> },
    /// Another claim holds it.
    Busy,
}

/// What became of a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failed {
    /// Due again after its backoff, with this failure record.
    Retried(FailureRecord),
    /// Moved to the dead-letter set.
    DeadLettered(DeadLetter),
    /// The claim had been taken over; its new owner decides.
    TakenOver,
}

/// Lease deadlines that claims owe the lease index, told in one call by
/// [`Queue::report_leases`].
#[derive(Debug, Default)]
#[must_use = "the lease index must be told (Queue::report_leases)"]
pub struct LeaseReports(pub(super) Vec<(Shard, i64)>);

impl Queue {
    /// Claims up to `limit` due entities of one shard, and reports their lease deadline to the
    /// lease index when it is the shard's earliest.
    pub async fn claim(
        &self,
        shard: Shard,
        limit: usize,
        busy_delay: Duration,
        lease: Duration,
    ) -> Result<ClaimBatch> {
        let mut leases = LeaseReports::default();
        let claimed = self
            .claim_deferring(shard, limit, busy_delay, lease, &mut leases)
            .await;
        self.report_leases(leases).await;
        claimed
    }

    /// [`Self::claim`], with the lease index's report added to `leases` instead of made: a
    /// worker that claims in many shards in one round tells the index once, in one call to
    /// its master, instead of once per shard (under a trickle of events nearly every claim
    /// finds its shard's leases empty, and the index's master took one report per claim).
    /// A lease lasts seconds; a report made a round later is still made long before it ends,
    /// and one a crash loses is found by the index rescan, as any report a crash loses.
    pub async fn claim_deferring(
        &self,
        shard: Shard,
        limit: usize,
        busy_delay: Duration,
        lease: Duration,
        leases: &mut LeaseReports,
    ) -> Result<ClaimBatch> {
        let lease_ms = lease.as_millis().max(1) as u64;
        let keys = self.keys.for_shard(shard);
        let token_prefix = uuid::Uuid::new_v4().simple().to_string();
        let mut redis = self.redis.clone();
        let reply: Vec<redis::Value> = match SCRIPTS
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
            .await
        {
            Ok(reply) => reply,
            Err(error) => {
                // The script may have run with its answer lost: its leases are then known only
                // to the shard. A report at 0 has the reaper look (reports only lower a time).
                leases.0.push((shard, 0));
                return Err(error.into());
            }
        };
        let batch = parse_claim_reply(shard, lease_ms, reply)?;
        if batch.leases_moved_earlier {
            leases.0.push((shard, batch.now_ms + lease_ms as i64));
        }
        Ok(batch)
    }

    /// Tells the lease index what claims made with [`Self::claim_deferring`] owe it, in one
    /// call (a worker's round does it with its settle: [`Self::settle_round`]).
    pub async fn report_leases(&self, leases: LeaseReports) {
        self.report(IndexKind::Leases, &leases.0).await;
    }

    /// Finishes a claim and releases the entity lock if it is still ours; false if the claim
    /// had been taken over (lease expired and reaped).
    pub async fn ack(&self, claim: &Claim) -> Result<bool> {
        self.ack_remembering(claim, None).await
    }

    /// [`Self::ack`], remembering in the same call `applied`: the dedup key of the action the
    /// evaluation applied or found applied (a cache of the Postgres constraint, read back by
    /// the entity's next [`Self::lock`]). It is remembered even if the claim had been taken
    /// over: Postgres committed the action either way.
    pub async fn ack_remembering(&self, claim: &Claim, applied: Option<&str>) -> Result<bool> {
        let keys = self.keys.for_shard(claim.shard);
        let mut redis = self.redis.clone();
        let done: i64 = SCRIPTS
            .ack
            .key(keys.inflight())
            .key(keys.claims())
            .key(keys.failures())
            .key(keys.lock(&claim.entity))
            .key(keys.applied(&claim.entity))
            .arg(claim.entity.as_str())
            .arg(&claim.token)
            .arg(applied.unwrap_or_default())
            .arg(APPLIED_TTL.as_secs())
            .invoke_async(&mut redis)
            .timed_script("ack")
            .await?;
        Ok(done == 1)
    }

    /// Gives a claim back, to fire again after `delay`.
    pub async fn retry(&self, claim: &Claim, delay: Duration) -> Result<bool> {
        let keys = self.keys.for_shard(claim.shard);
        let mut redis = self.redis.clone();
        let fire_at: i64 = SCRIPTS
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
        if fire_at > 0 {
            self.report(IndexKind::Due, &[(claim.shard, fire_at)]).await;
        }
        Ok(fire_at > 0)
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

    /// Returns entities whose lease expired (their worker died) to the due set. `floors`
    /// holds, per entity, the failure record Postgres has (attempts go on from the greater).
    pub async fn reap(
        &self,
        shard: Shard,
        limit: usize,
        floors: &HashMap<String, FailureRecord>,
    ) -> Result<Reaped> {
        let keys = self.keys.for_shard(shard);
        let mut redis = self.redis.clone();
        let mut invocation = SCRIPTS.reap.prepare_invoke();
        invocation
            .key(keys.due())
            .key(keys.pending())
            .key(keys.inflight())
            .key(keys.claims())
            .key(keys.failures())
            .key(keys.dead())
            .key(keys.dead_info())
            .arg(limit)
            .arg(self.timing.max_attempts);
        for (entity, floor) in floors {
            invocation
                .arg(entity)
                .arg(floor.attempts)
                .arg(floor.first_failure_ms);
        }
        let reply: Vec<redis::Value> = invocation
            .invoke_async(&mut redis)
            .timed_script("reap")
            .await?;
        let reaped = parse_reap_reply(reply)?;
        if reaped.returned > 0 {
            self.report(IndexKind::Due, &[(shard, 0)]).await;
        }
        Ok(reaped)
    }

    /// The earliest lease deadline in a shard (unix ms), if any claim is running there.
    pub async fn earliest_lease(&self, shard: Shard) -> Result<Option<i64>> {
        let keys = self.keys.for_shard(shard);
        let mut redis = self.redis.clone();
        let head: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(keys.inflight())
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .query_async(&mut redis)
            .await?;
        Ok(head.first().map(|(_, at)| *at as i64))
    }

    /// Records a failed attempt: due again after a jittered exponential backoff, or
    /// dead-lettered at the attempt limit (at once if `fatal`). Attempts go on from the greater
    /// of this shard's count and `floor` (what Postgres holds for this failure streak).
    pub async fn fail(
        &self,
        claim: &Claim,
        error: &str,
        fatal: bool,
        floor: Option<&FailureRecord>,
    ) -> Result<Failed> {
        let keys = self.keys.for_shard(claim.shard);
        let mut redis = self.redis.clone();
        let jitter: f64 = rand::random();
        let (status, record): (i64, Option<String>) = SCRIPTS
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
            .arg(floor.map_or(0, |f| f.attempts))
            .arg(floor.map_or(0, |f| f.first_failure_ms))
            .invoke_async(&mut redis)
            .timed_script("fail")
            .await?;
        if status == 1 {
            // Due again after a backoff the script chose: due at once is never later.
            self.report(IndexKind::Due, &[(claim.shard, 0)]).await;
        }
        let record = || parse_record("fail", record.as_deref().unwrap_or_default());
        Ok(match status {
            1 => Failed::Retried(record()?),
            2 => {
                let record = record()?;
                Failed::DeadLettered(DeadLetter {
                    entity: claim.entity.clone(),
                    dead_lettered_at_ms: record.last_failure_ms,
                    record,
                })
            }
            _ => Failed::TakenOver,
        })
    }

    /// Takes the entity lock for a claim (`SET lock token NX PX lease`) and, in the same call,
    /// reads the dedup key of the entity's last applied action.
    pub async fn lock(&self, claim: &Claim) -> Result<Locked> {
        let keys = self.keys.for_shard(claim.shard);
        let mut redis = self.redis.clone();
        let (taken, last_applied): (i64, Option<String>) = SCRIPTS
            .lock
            .key(keys.lock(&claim.entity))
            .key(keys.applied(&claim.entity))
            .arg(&claim.token)
            .arg(claim.lease_ms)
            .invoke_async(&mut redis)
            .timed_script("lock")
            .await?;
        Ok(if taken == 1 {
            Locked::Taken { last_applied }
        } else {
            Locked::Busy
        })
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
}

fn parse_record(script: &str, raw: &str) -> Result<FailureRecord> {
    serde_json::from_str(raw).map_err(|e| {
        QueueError::Reply(format!(
            "{script}: a failure record that does not parse: {e}"
        ))
    })
}

fn parse_reap_reply(reply: Vec<redis::Value>) -> Result<Reaped> {
    use redis::FromRedisValue;
    let bad = |what: &str| QueueError::Reply(format!("reap: {what}"));
    if reply.len() < 2 || !reply.len().is_multiple_of(2) {
        return Err(bad("wrong length"));
    }
    let count =
        |v: &redis::Value| usize::from_redis_value(v.clone()).map_err(|_| bad("not a count"));
    let text =
        |v: &redis::Value| String::from_redis_value(v.clone()).map_err(|_| bad("not a string"));
    let mut reaped = Reaped {
        returned: count(&reply[0])?,
        dead_lettered: count(&reply[1])?,
        records: Vec::new(),
    };
    for pair in reply[2..].chunks(2) {
        reaped
            .records
            .push((text(&pair[0])?, parse_record("reap", &text(&pair[1])?)?));
    }
    Ok(reaped)
}

fn parse_claim_reply(shard: Shard, lease_ms: u64, reply: Vec<redis::Value>) -> Result<ClaimBatch> {
    use redis::FromRedisValue;
    let bad = |what: &str| QueueError::Reply(format!("claim: {what}"));
    if reply.len() < 4 || !(reply.len() - 4).is_multiple_of(3) {
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
        leases_moved_earlier: number(&reply[3])? == 1,
        ..Default::default()
    };
    for chunk in reply[4..].chunks(3) {
        let raw = text(&chunk[0])?;
        match EntityId::parse(&raw) {
            Ok(entity) => batch.claims.push(Claim {
                shard,
                entity,
                token: text(&chunk[1])?,
                due_at_ms: number(&chunk[2])?,
                lease_ms,
                claimed: None,
            }),
            Err(_) => batch.malformed.push(raw),
        }
    }
    Ok(batch)
}
