//! Workers: claim due entities and hand each claim to the evaluator (`evaluation/`), which
//! locks it, reads one snapshot, runs the rules, applies at most one version-checked action
//! and acks. This file is the worker and its single step, `claim_once`; `poll` is the loop
//! around it (bounded concurrency, graceful shutdown, claiming paused while the evaluator's
//! breaker is open).

mod poll;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::sync::Notify;
use tracing::Instrument;

// What the evaluation's callers name through the worker, as before it had its own module.
pub use crate::evaluation::{
    BeforeApplyHook, EvaluationBatches, EvaluationError, Failure, LeaseEstimator, Outcome,
    RuleFailures,
};
use crate::{
    evaluation::{Evaluator, jittered},
    queue::{Claim, FailingShards, IndexKind, LeaseReports, Queue, QueueError, Settle, Wakeups},
    rules::Rules,
    settings,
    store::Store,
    telemetry::names,
};

/// Longest back-off after Redis errors in the poll loop.
const MAX_POLL_BACKOFF: Duration = Duration::from_secs(5);

/// Most shards one poll takes from the due index.
const SHARDS_PER_READ: usize = 64;

/// Shortest sleep between a process's reads of the due index when nothing wakes it and
/// nothing is due at once (a tenth of `poll_interval` if that is shorter): what falls due
/// within it waits for one read.
const READ_GAP: Duration = Duration::from_millis(10);

/// How long a poll holds the shards it read from the due index: the other processes, woken
/// by the same due time, leave them to it until it settles them (in a few milliseconds,
/// unless it died: then they wait this long at most).
const READ_HOLD: Duration = Duration::from_millis(500);

/// The result of one pass over every shard.
#[derive(Debug, Default)]
pub struct ClaimRound {
    pub claims: Vec<Claim>,
    /// How long until the earliest entity still waiting is due (None: nothing waits).
    pub next_due_in: Option<Duration>,
    /// Due entities pushed back because an earlier claim of theirs is still running.
    pub busy: usize,
    /// Redis' clock at the read of the due index (unix ms).
    pub read_at_ms: i64,
    /// Shards the read found due (and held).
    pub shards_read: usize,
}

impl ClaimRound {
    /// Whether the round found nothing due although it read at or after `expected` (the
    /// index's time this process slept until): another process took what was due first.
    pub fn beaten(&self, expected: Option<i64>) -> bool {
        self.shards_read == 0 && expected.is_some_and(|at| self.read_at_ms >= at)
    }

    /// When the earliest entity still waiting is due (unix ms, Redis' clock).
    fn next_due_at_ms(&self) -> Option<i64> {
        self.next_due_in
            .map(|wait| self.read_at_ms + wait.as_millis() as i64)
    }
}

#[derive(Clone)]
pub struct Worker {
    queue: Queue,
    store: Store,
    settings: settings::Worker,
    wakeup: Arc<Notify>,
    /// Other processes' schedules that make something due sooner, forwarded to `wakeup`.
    wakeups: Option<Wakeups>,
    /// Evaluates each claim; its breaker pauses claiming, its lease estimate sets the claims'.
    evaluator: Evaluator,
    stats: Arc<WorkerStats>,
    /// Shards whose claims failed lately, skipped for a moment.
    failing: Arc<FailingShards>,
}

/// Counters of one worker, for tests and logs (Prometheus has the process-wide figures).
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Entities claimed by this worker's poll loop and single-step calls.
    pub claims: AtomicU64,
    /// Postgres probes made while the circuit breaker was open.
    pub probes: AtomicU64,
    /// Writes refused by the moderation version fence (a stale evaluation).
    pub fenced: AtomicU64,
}

impl Worker {
    pub fn new(
        queue: Queue,
        store: Store,
        rules: Arc<Rules>,
        settings: &settings::Worker,
        wakeup: Arc<Notify>,
    ) -> Self {
        Self {
            evaluator: Evaluator::new(queue.clone(), store.clone(), rules, settings),
            queue,
            store,
            settings: settings.clone(),
            wakeup,
            wakeups: None,
            stats: Arc::default(),
            failing: Arc::default(),
        }
    }

    pub fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    /// Whether this worker has stopped claiming because Postgres is unreachable.
    pub fn breaker_open(&self) -> bool {
        self.evaluator.breaker().is_open()
    }

    pub fn with_before_apply(mut self, hook: BeforeApplyHook) -> Self {
        self.evaluator = self.evaluator.with_before_apply(hook);
        self
    }

    /// Evaluates one claimed entity and settles its claim (`Evaluator::evaluate`), counting
    /// a write the version fence refused.
    pub async fn evaluate_claim(&self, claim: Claim) -> Outcome {
        let outcome = self.evaluator.evaluate(claim).await;
        if let Outcome::Retry(Failure::VersionMoved { .. }) = outcome {
            self.stats.fenced.fetch_add(1, Ordering::Relaxed);
        }
        outcome
    }

    pub fn with_wakeups(mut self, wakeups: Wakeups) -> Self {
        self.wakeups = Some(wakeups);
        self
    }

    /// Claims up to `limit` due entities from the shards the due index says may hold some
    /// (the most overdue first, no more shards than `limit`: the others are left to other
    /// processes), then settles the index with what each shard answered.
    pub async fn claim_once(&self, limit: usize) -> Result<ClaimRound, QueueError> {
        let lease = self.evaluator.leases().current();
        metrics::gauge!(names::LEASE_SECONDS).set(lease.as_secs_f64());
        let read_limit = SHARDS_PER_READ.min(limit.max(1));
        let read = self
            .queue
            .read_and_hold(IndexKind::Due, read_limit, READ_HOLD)
            .await?;
        let mut round = ClaimRound {
            read_at_ms: read.now_ms,
            shards_read: read.shards.len(),
            ..ClaimRound::default()
        };
        let mut next_due_in: Option<i64> = read.next_ms.map(|at| (at - read.now_ms).max(0));
        // A full read: more shards may be due now than it returned.
        let full_read = read.shards.len() >= read_limit;
        let mut paused = 0;
        let mut settled = Vec::with_capacity(read.shards.len());
        let mut failures = Vec::new();
        let mut leases = LeaseReports::default();
        for read_shard in read.shards {
            let shard = read_shard.shard;
            let remaining = limit.saturating_sub(round.claims.len());
            if remaining == 0 || failures.len() >= FailingShards::PER_POLL {
                settled.push((read_shard, Settle::Untouched));
                next_due_in = Some(0);
                continue;
            }
            if self.failing.paused(shard) {
                settled.push((read_shard, Settle::Untouched));
                paused += 1;
                continue;
            }
            let claim_began = std::time::SystemTime::now();
            let claimed = self
                .queue
                .claim_deferring(
                    shard,
                    remaining.min(self.settings.claim_batch),
                    jittered(self.settings.retry_delay),
                    lease,
                    &mut leases,
                )
                .instrument(tracing::debug_span!("claim", %shard))
                .await;
            let mut batch = match claimed {
                Ok(batch) => batch,
                Err(error) => {
                    // The others are still asked: one unreachable master must not hold up
                    // the shards of the rest.
                    self.failing.failed(shard);
                    settled.push((read_shard, Settle::Untouched));
                    failures.push((shard, error));
                    continue;
                }
            };
            settled.push((read_shard, Settle::of(batch.next_due_ms)));
            round.busy += batch.busy;
            if batch.busy > 0 {
                metrics::counter!(names::LOCK_CONTENTION).increment(batch.busy as u64);
            }
            for raw in &batch.malformed {
                tracing::error!(member = %raw, %shard, "due set holds a member that is not an entity id");
            }
            let claim_call = (claim_began, std::time::SystemTime::now());
            for claim in &mut batch.claims {
                claim.claimed = Some(claim_call);
                let delay_ms = (batch.now_ms - claim.due_at_ms).max(0);
                metrics::histogram!(names::FIRE_DELAY_SECONDS).record(delay_ms as f64 / 1000.0);
            }
            if let Some(next) = batch.next_due_ms {
                let wait = (next - batch.now_ms).max(0);
                next_due_in = Some(next_due_in.map_or(wait, |w| w.min(wait)));
            }
            self.stats
                .claims
                .fetch_add(batch.claims.len() as u64, Ordering::Relaxed);
            round.claims.extend(batch.claims);
        }
        // (Unless it was all shards left alone for failing: that would only spin.)
        if full_read && paused < settled.len() {
            next_due_in = Some(0);
        }
        // The settle and the round's leases in one call to the index, before anything is
        // processed.
        if let Err(error) = self.queue.settle_round(&settled, leases).await {
            // The shards keep their earlier (lower) times, or are held a moment: read again,
            // nothing missed. The leases are found by the rescan, as any report not made.
            tracing::warn!(error = %crate::telemetry::Chain(&error), "could not settle the due index nor report the round's leases; the rescan will");
        }
        // Keep what other shards gave: dropping it would strand those claims until their
        // leases expire. Only a poll that claimed nothing and failed is an error.
        if let Some((shard, error)) = failures.pop() {
            if round.claims.is_empty() && settled.iter().all(|(_, s)| *s == Settle::Untouched) {
                return Err(error);
            }
            tracing::warn!(error = %crate::telemetry::Chain(&error), %shard, failed = failures.len() + 1, "claim failed on some shards; the others were claimed");
        }
        round.next_due_in = next_due_in.map(|ms| Duration::from_millis(ms as u64));
        Ok(round)
    }
}

#[cfg(test)]
mod tests {
    use super::ClaimRound;

    #[test]
    fn a_poll_that_woke_for_a_due_time_and_found_nothing_due_was_beaten_to_it() {
        let empty = ClaimRound {
            read_at_ms: 1_000,
            ..ClaimRound::default()
        };
        assert!(empty.beaten(Some(1_000)));
        assert!(empty.beaten(Some(990)));
        assert!(
            !empty.beaten(Some(1_001)),
            "woke before it (a wake-up, the poll interval)"
        );
        assert!(!empty.beaten(None), "it slept for no due time");
        let found = ClaimRound {
            read_at_ms: 1_000,
            shards_read: 1,
            ..ClaimRound::default()
        };
        assert!(!found.beaten(Some(1_000)), "it read shards due");
    }
}
