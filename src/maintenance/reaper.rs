//! The reaper: claims whose lease expired (their worker died or stalled) go back to the due
//! set, or to the dead letters on their last attempt.

use std::collections::HashMap;

use super::Maintenance;
use crate::{
    queue::{FailingShards, IndexKind, QueueError, Reaped, Settle, Shard},
    telemetry::{Chain, names},
};

/// Most expired leases returned per shard in one pass.
const REAP_BATCH: usize = 256;

/// Most shards one pass takes from the lease index.
const SHARDS_PER_PASS: usize = 256;

impl Maintenance {
    /// Returns every expired lease to the due set (or, on its last attempt, to the dead
    /// letters), in the shards the lease index says may hold one.
    pub async fn reap_once(&self) -> Result<Reaped, QueueError> {
        let read = self
            .queue
            .read_index(IndexKind::Leases, SHARDS_PER_PASS)
            .await?;
        let mut total = Reaped::default();
        let mut settled = Vec::with_capacity(read.shards.len());
        let mut failures = Vec::new();
        for read_shard in read.shards {
            let shard = read_shard.shard;
            if failures.len() >= FailingShards::PER_POLL || self.failing.paused(shard) {
                settled.push((read_shard, Settle::Untouched));
                continue;
            }
            let reaped = match self.reap_shard(shard).await {
                Ok(reaped) => reaped,
                Err(error) => {
                    // The others are still reaped (one unreachable master must not hold up
                    // the rest).
                    self.failing.failed(shard);
                    settled.push((read_shard, Settle::Untouched));
                    failures.push(error);
                    continue;
                }
            };
            total.returned += reaped.returned;
            total.dead_lettered += reaped.dead_lettered;
            // Read after the reap: a claim since then is in it (or reported it).
            let next = if reaped.returned + reaped.dead_lettered >= REAP_BATCH {
                Ok(Some(0))
            } else {
                self.queue.earliest_lease(shard).await
            };
            settled.push((read_shard, next.map_or(Settle::Untouched, Settle::of)));
        }
        self.queue.settle_index(IndexKind::Leases, &settled).await?;
        if let Some(error) = failures.pop() {
            tracing::warn!(error = %Chain(&error), failed = failures.len() + 1, "reap failed on some shards; the others were reaped");
        }
        if total.returned + total.dead_lettered > 0 {
            metrics::counter!(names::LEASES_REAPED)
                .increment((total.returned + total.dead_lettered) as u64);
            metrics::counter!(names::DEAD_LETTERED, "reason" => "attempts_exhausted")
                .increment(total.dead_lettered as u64);
            tracing::warn!(
                returned = total.returned,
                dead_lettered = total.dead_lettered,
                "entities whose worker lease expired"
            );
        }
        Ok(total)
    }
}

impl Maintenance {
    /// Reaps one shard with the failure records kept in Postgres: the attempts of the leases
    /// about to expire count from the greater of Redis' count and Postgres' (a Redis that lost
    /// its copy does not start over), and what the reap decided is written back to Postgres.
    /// Postgres errors are logged, never block the reap: Redis still counts, and the repair
    /// sweep copies dead letters Postgres missed.
    async fn reap_shard(&self, shard: Shard) -> Result<Reaped, QueueError> {
        let expiring = self.queue.expiring_leases(shard, REAP_BATCH).await?;
        let floors = if expiring.is_empty() {
            HashMap::new()
        } else {
            self.store
                .dead_letters().failure_floors(&expiring)
                .await
                .unwrap_or_else(|error| {
                    tracing::warn!(error = %Chain(&error), "could not read failure records from Postgres; counting from Redis' alone");
                    HashMap::new()
                })
        };
        let reaped = self.queue.reap(shard, REAP_BATCH, &floors).await?;
        if let Err(error) = self
            .store
            .dead_letters()
            .record_failures(&reaped.records)
            .await
        {
            tracing::warn!(error = %Chain(&error), "could not record reaped attempts in Postgres; the repair sweep copies dead letters from Redis");
        }
        Ok(reaped)
    }
}
