//! Evaluation: what happens to one claimed entity, from its lock to its ack. The [`Evaluator`]
//! locks the entity, reads one snapshot, runs the rules, records the completion behind the
//! version fence, schedules what the completion leaves (timers, the author) and acks; the worker
//! (`worker/`) claims and hands each claim to it.
//!
//! Its parts: `pipeline` (the sequence of one claim, read at once), `decision` (snapshot to
//! decision, in memory but for the snapshot's read), `timers` (what a completion leaves to
//! schedule), `failure` (how a claim is settled when the evaluation did not complete), `outcome`
//! (how it ended, typed), `batches` (the Postgres statements evaluations share), `lease` (the
//! lease estimate, and its renewal while an evaluation runs), `breaker` (Postgres' circuit
//! breaker, which the worker's poll loop reads).

/// A span for one step of an evaluation.
macro_rules! step {
    ($name:literal, $claim:expr) => {
        tracing::debug_span!($name, entity = %$claim.entity, shard = %$claim.shard)
    };
}

mod batches;
mod breaker;
mod decision;
mod failure;
mod lease;
mod outcome;
mod pipeline;
mod timers;

use std::{panic::AssertUnwindSafe, sync::Arc, time::Instant};

use futures::{FutureExt, future::BoxFuture};
use tracing::Instrument;

pub use self::{
    batches::EvaluationBatches,
    breaker::Breaker,
    failure::jittered,
    lease::LeaseEstimator,
    outcome::{EvaluationError, Failure, Outcome, RuleFailures},
};
use crate::{
    domain::Snapshot,
    queue::{Claim, Queue},
    rules::Rules,
    settings,
    store::Store,
    telemetry::{Chain, names},
};

/// A test seam: runs after the snapshot is read and before the decision is written.
pub type BeforeApplyHook = Arc<dyn Fn(Snapshot) -> BoxFuture<'static, ()> + Send + Sync>;

/// Evaluates claimed entities: one [`Evaluator::evaluate`] per claim. Clones share the
/// statements' batches, the breaker and the lease estimate.
#[derive(Clone)]
pub struct Evaluator {
    queue: Queue,
    store: Store,
    rules: Arc<Rules>,
    settings: settings::Worker,
    batches: EvaluationBatches,
    breaker: Arc<Breaker>,
    leases: Arc<LeaseEstimator>,
    before_apply: Option<BeforeApplyHook>,
}

impl Evaluator {
    /// Starts the shared statements' flusher tasks (inside a Tokio runtime).
    pub fn new(queue: Queue, store: Store, rules: Arc<Rules>, settings: &settings::Worker) -> Self {
        Self {
            batches: EvaluationBatches::start(store.clone(), settings.worker_id.clone()),
            leases: Arc::new(LeaseEstimator::new(settings.lease_floor, settings.lease)),
            breaker: Arc::default(),
            queue,
            store,
            rules,
            settings: settings.clone(),
            before_apply: None,
        }
    }

    pub fn with_before_apply(mut self, hook: BeforeApplyHook) -> Self {
        self.before_apply = Some(hook);
        self
    }

    /// Postgres' circuit breaker: tripped by an evaluation that found Postgres unreachable.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// The lease to give claims, from the measured evaluation times.
    pub fn leases(&self) -> &LeaseEstimator {
        &self.leases
    }

    /// Evaluates one claimed entity and settles its claim (ack, re-schedule or dead-letter).
    /// A panic inside the evaluation is caught and counted as a failed attempt.
    /// The span's `evaluation` is the claim token: the id every log line of this attempt shares.
    /// When spans are exported, it continues the trace of the oldest event it decides on and
    /// follows from each of them, once the snapshot has read them (`decision.rs`).
    pub async fn evaluate(&self, claim: Claim) -> Outcome {
        let span = tracing::info_span!("evaluation", entity = %claim.entity, evaluation = %claim.token, shard = %claim.shard);
        self.evaluate_counted(claim).instrument(span).await
    }

    /// [`Self::run`] with a panic taken for a failed attempt, the outcome counted, timed and
    /// logged once.
    async fn evaluate_counted(&self, claim: Claim) -> Outcome {
        let started = Instant::now();
        let outcome = match AssertUnwindSafe(self.run(&claim)).catch_unwind().await {
            Ok(outcome) => outcome,
            Err(panic) => self.panicked(&claim, panic).await,
        };
        metrics::counter!(names::EVALUATIONS, "outcome" => outcome.label()).increment(1);
        metrics::histogram!(names::EVALUATION_SECONDS).record(started.elapsed().as_secs_f64());
        log(&outcome);
        outcome
    }
}

/// The outcome's line, unless it was a success or a snooze. An outage was logged when it paused
/// claims (`failure.rs`): each evaluation it gives back adds a debug line only.
fn log(outcome: &Outcome) {
    match outcome {
        Outcome::Retry(reason) if reason.is_outage() => {
            tracing::debug!(reason = %Chain(reason), "evaluation given back in an outage")
        }
        Outcome::Retry(reason) => {
            tracing::info!(reason = %Chain(reason), "evaluation will be retried")
        }
        Outcome::Failed(error) => {
            tracing::warn!(error = %Chain(error), "evaluation failed; retrying with backoff")
        }
        Outcome::DeadLettered(error) => {
            tracing::error!(error = %Chain(error), "entity dead-lettered")
        }
        Outcome::Done(_) | Outcome::Snooze(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::{EvaluationError, Failure, Outcome, log};
    use crate::store::StoreError;

    /// The lines `log` writes at info level and above.
    fn logged(outcome: &Outcome) -> String {
        crate::telemetry::captured::logged(tracing::Level::INFO, || log(outcome)).1
    }

    #[test]
    fn an_outage_is_logged_once_when_it_pauses_claims_not_again_per_evaluation() {
        let unreachable = EvaluationError::Store(StoreError::Database(sqlx::Error::PoolTimedOut));
        let outage = Failure::from(unreachable);
        assert!(outage.is_outage());
        assert_eq!(logged(&Outcome::Retry(outage)), "");
        let moved = Failure::VersionMoved { read: 3 };
        assert!(!moved.is_outage());
        assert!(logged(&Outcome::Retry(moved)).contains("evaluation will be retried"));
        let failed = Failure::from(EvaluationError::Store(StoreError::Database(
            sqlx::Error::PoolTimedOut,
        )));
        assert!(
            logged(&Outcome::Failed(failed)).contains("evaluation failed"),
            "only a give-back is the outage's"
        );
    }
}
