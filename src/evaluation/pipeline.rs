//! The sequence of one claim, in one function read at once ([`Evaluator::run`]): each Redis and
//! Postgres step in order, a call with a name. The steps' details follow it here, the rules'
//! part in `decision.rs`, what a completion leaves to schedule in `timers.rs`, and how a claim
//! that did not complete is settled in `failure.rs`. Each step has a span of its own (at debug
//! level) with the entity and shard.

use std::time::Instant;

use chrono::Utc;
use tracing::Instrument;

use super::{
    EvaluationError, Evaluator, Outcome,
    decision::{Afterwards, Decided},
    lease::renewing,
};
use crate::{
    queue::{Claim, Locked},
    rules::RuleSet,
    store::Completion,
    telemetry::{Chain, names, traces::TraceParent},
};

/// An evaluation that completed: its completion, and the dedup key of the action it applied
/// or found applied, for the ack to remember.
struct Evaluated {
    completion: Completion,
    applied: Option<String>,
}

impl Evaluator {
    /// One claim, from its lock to its ack. When nothing goes wrong: two Redis round trips (the
    /// lock, the ack) and two Postgres statements (each shared with concurrent evaluations), a
    /// renewal every third of the lease meanwhile, and a schedule call when the completion
    /// leaves a timer's end or an author to evaluate.
    pub(super) async fn run(&self, claim: &Claim) -> Outcome {
        // Redis: the entity's lock, with the dedup key of its last applied action (lock.lua).
        let last_applied = match self.lock(claim).await {
            Ok(Locked::Taken { last_applied }) => last_applied,
            Ok(Locked::Busy) => return self.snooze(claim).await,
            Err(error) => return self.lock_failed(claim, error).await,
        };
        let started = Instant::now();
        let evaluation = self.in_time(async {
            let (rules, started_at) = (self.rules.current(), Utc::now());
            // Postgres: the snapshot (a statement shared by concurrent evaluations).
            let snapshot = self.snapshot(claim, &rules).await?;
            // In memory: the rules' verdict, and the decision unless it is the last applied.
            let decided =
                self.decide(claim, &rules, snapshot, last_applied.as_deref(), started_at)?;
            self.before_apply(&decided).await;
            let afterwards = decided.afterwards();
            // Postgres: the completion behind the version fence (a shared statement too).
            let completion = self.complete(claim, &rules, decided).await?;
            // Redis: what the completion leaves: a timer's end, the author's evaluation.
            self.schedule_after(claim, &afterwards, &completion).await;
            let applied = afterwards.applied_key(&completion);
            Ok(Evaluated {
                completion,
                applied,
            })
        });
        // Redis, meanwhile: the lease and the lock renewed (renew.lua).
        let (evaluated, lease_lost) = renewing(&self.queue, claim, evaluation).await;
        self.leases.record(started.elapsed());
        // Redis: the ack (lock released, applied dedup key remembered: ack.lua), or the
        // failure settled (retry.lua or fail.lua).
        let (outcome, released) = match evaluated {
            Ok(evaluated) => self.ack(claim, evaluated).await,
            Err(error) => (self.settle_failure(claim, error, started).await, false),
        };
        // Redis: the lock released, unless the ack did (unlock.lua).
        self.release(claim, released, lease_lost).await;
        outcome
    }

    /// Takes the entity's lock, timed.
    async fn lock(&self, claim: &Claim) -> crate::queue::Result<Locked> {
        let locking = Instant::now();
        let locked = self
            .queue
            .lock(claim)
            .instrument(step!("lock", claim))
            .await;
        metrics::histogram!(names::LOCK_ACQUIRE_SECONDS).record(locking.elapsed().as_secs_f64());
        locked
    }

    /// The evaluation within `evaluation_timeout`.
    async fn in_time<T>(
        &self,
        evaluation: impl Future<Output = Result<T, EvaluationError>>,
    ) -> Result<T, EvaluationError> {
        let limit = self.settings.evaluation_timeout;
        tokio::time::timeout(limit, evaluation)
            .await
            .unwrap_or(Err(EvaluationError::TimedOut(limit)))
    }

    /// The test seam, if one is set.
    async fn before_apply(&self, decided: &Decided) {
        if let Some(hook) = &self.before_apply {
            hook(decided.snapshot.clone()).await;
        }
    }

    /// Records the completion behind the version fence (`store/fenced.rs`), a decision under a
    /// span of its own, which its webhook continues.
    async fn complete(
        &self,
        claim: &Claim,
        rules: &RuleSet,
        decided: Decided,
    ) -> Result<Completion, EvaluationError> {
        let collapsed = decided.collapsed();
        let step = match &decided.decision {
            Some(d) => {
                tracing::info_span!("action", action = d.action.as_str(), rule = %d.rule, entity = %claim.entity)
            }
            None => step!("completion", claim),
        };
        let trace = decided
            .decision
            .as_ref()
            .and_then(|_| TraceParent::of_span(&step))
            .map(|t| t.as_str().to_owned());
        let evaluation = decided.into_fenced(claim, rules, trace);
        let completion = self.batches.complete(evaluation).instrument(step).await?;
        metrics::histogram!(names::EVENTS_PER_EVALUATION).record(collapsed as f64);
        Ok(completion)
    }

    /// Acks the claim, remembering the applied dedup key; whether the ack released the lock.
    /// Not acked, the lease expires and the entity is evaluated again, which the dedup key and
    /// the version fence make harmless.
    async fn ack(&self, claim: &Claim, evaluated: Evaluated) -> (Outcome, bool) {
        let acked = self
            .queue
            .ack_remembering(claim, evaluated.applied.as_deref())
            .instrument(step!("ack", claim))
            .await;
        if let Err(error) = &acked {
            tracing::warn!(error = %Chain(error), "ack failed");
        }
        (Outcome::Done(evaluated.completion), acked.is_ok())
    }

    /// Releases the lock unless the ack did; warns if the renewal found it or the lease lost.
    async fn release(&self, claim: &Claim, released: bool, lost: bool) {
        if lost {
            tracing::warn!("lease or lock was lost during the evaluation");
        }
        if !released && let Err(error) = self.queue.unlock(claim).await {
            tracing::warn!(error = %Chain(&error), "unlock failed; the lock expires with its lease");
        }
    }
}

/// The dedup key an ack remembers: the decision's, once Postgres holds its action.
impl Afterwards {
    pub(super) fn applied_key(&self, completion: &Completion) -> Option<String> {
        match completion {
            Completion::Applied { .. } | Completion::AlreadyApplied => self.dedup_key.clone(),
            _ => None,
        }
    }
}
