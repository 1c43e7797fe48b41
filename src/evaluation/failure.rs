//! How a claim is settled when its evaluation did not complete: snoozed (the lock is held
//! elsewhere), given back without an attempt (a conflict, the version fence, an outage, which
//! also trips the breaker), or failed (an attempt used: backoff, or the dead letters).

use std::{any::Any, sync::Arc, time::Duration, time::Instant};

use rand::Rng;

use super::{EvaluationError, Evaluator, Failure, Outcome};
use crate::{
    queue::{Claim, Failed, QueueError},
    store::StoreError,
    telemetry::{Chain, names},
};

/// Half the base plus a random part of it ("equal jitter"), so retries spread out. The
/// worker's poll loop uses it too.
pub fn jittered(base: Duration) -> Duration {
    let base_ms = base.as_millis().max(2) as u64;
    Duration::from_millis(base_ms / 2 + rand::rng().random_range(0..=base_ms / 2))
}

impl Evaluator {
    /// The lock is held elsewhere: tried again after a short jittered delay.
    pub(super) async fn snooze(&self, claim: &Claim) -> Outcome {
        metrics::counter!(names::LOCK_CONTENTION).increment(1);
        let delay = jittered(self.settings.retry_delay);
        match self.queue.retry(claim, delay).await {
            Ok(_) => Outcome::Snooze(delay),
            // The lease will expire and the reaper returns the entity.
            Err(error) => Outcome::Retry(Failure::Lock {
                busy: true,
                source: Arc::new(error),
            }),
        }
    }

    /// Taking the lock failed: given back, and the lock released in case the script took it
    /// with its reply lost.
    pub(super) async fn lock_failed(&self, claim: &Claim, error: QueueError) -> Outcome {
        let _ = self.queue.unlock(claim).await;
        let failure = Failure::Lock {
            busy: false,
            source: Arc::new(error),
        };
        self.give_back(claim, failure).await
    }

    /// Settles a claim whose evaluation (begun at `started`) failed: given back without an
    /// attempt when it is not the entity's fault, failed otherwise.
    pub(super) async fn settle_failure(
        &self,
        claim: &Claim,
        error: EvaluationError,
        started: Instant,
    ) -> Outcome {
        match error {
            error @ (EvaluationError::UnknownEntity | EvaluationError::Rules(_)) => {
                self.fail(claim, error.into(), true).await
            }
            EvaluationError::Store(StoreError::VersionConflict { read }) => {
                metrics::counter!(names::VERSION_CONFLICTS).increment(1);
                self.give_back(claim, Failure::VersionMoved { read }).await
            }
            // A deadlock or serialization failure: try again, nobody's fault.
            EvaluationError::Store(error) if error.is_conflict() => {
                self.give_back(claim, EvaluationError::Store(error).into())
                    .await
            }
            // A timeout is the entity's fault only if Postgres answers and takes writes: a
            // black-holed network must not use up attempts.
            // So is one that waited on a primary that refused connections meanwhile (a
            // read-only spell that ended before the timeout).
            error @ EvaluationError::TimedOut(_)
                if self.store.primary_refused_since(started) || !self.postgres_answers().await =>
            {
                self.breaker.trip(self.settings.poll_interval);
                self.give_back(claim, error.into()).await
            }
            EvaluationError::Store(error) if error.is_unavailable() => {
                self.store.notice(&error);
                self.outage(claim, error).await
            }
            error => self.fail(claim, error.into(), false).await,
        }
    }

    /// An outage is not the entity's fault: it must not use up its attempts, and claiming
    /// pauses until Postgres answers again. Logged once, when it pauses claims (the outcome's
    /// line leaves it out: [`Failure::is_outage`]).
    async fn outage(&self, claim: &Claim, error: StoreError) -> Outcome {
        if !self.breaker.is_open() {
            tracing::warn!(error = %Chain(&error), "Postgres unreachable; pausing claims");
        }
        self.breaker.trip(self.settings.poll_interval);
        self.give_back(claim, EvaluationError::Store(error).into())
            .await
    }

    /// Whether Postgres answers within a second and takes writes.
    async fn postgres_answers(&self) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(1), self.store.writable()).await,
            Ok(Ok(()))
        )
    }

    /// Re-schedules after a short jittered delay without using an attempt.
    async fn give_back(&self, claim: &Claim, reason: Failure) -> Outcome {
        if let Err(error) = self
            .queue
            .retry(claim, jittered(self.settings.retry_delay))
            .await
        {
            tracing::warn!(error = %Chain(&error), "re-scheduling failed; the lease expires and the reaper returns it");
        }
        Outcome::Retry(reason)
    }

    /// The evaluation panicked: a failed attempt, and the lock released.
    pub(super) async fn panicked(&self, claim: &Claim, panic: Box<dyn Any + Send>) -> Outcome {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".to_owned());
        let outcome = self.fail(claim, Failure::Panic(message), false).await;
        let _ = self.queue.unlock(claim).await;
        outcome
    }

    /// Records a failed attempt: backoff and retry, or dead letter (at once if `fatal`).
    /// Redis decides (counting from the greater of its count and the one Postgres holds, so a
    /// Redis that lost its copy does not start over), then the outcome is written to Postgres;
    /// a dead letter whose write fails is copied there from Redis by the repair sweep.
    async fn fail(&self, claim: &Claim, error: Failure, fatal: bool) -> Outcome {
        let entity = claim.entity.to_string();
        let floor = match self
            .store
            .dead_letters()
            .failure_floors(std::slice::from_ref(&entity))
            .await
        {
            Ok(mut floors) => floors.remove(&entity),
            Err(store_error) => {
                tracing::warn!(error = %Chain(&store_error), "could not read the failure record from Postgres; counting from Redis' alone");
                None
            }
        };
        let last_error = error.to_string();
        match self
            .queue
            .fail(claim, &last_error, fatal, floor.as_ref())
            .await
        {
            Ok(Failed::DeadLettered(dead)) => {
                let reason = if fatal { "fatal" } else { "attempts_exhausted" };
                metrics::counter!(names::DEAD_LETTERED, "reason" => reason).increment(1);
                if let Err(store_error) = self.store.dead_letters().record_dead_letter(&dead).await
                {
                    tracing::warn!(error = %Chain(&store_error), "could not record the dead letter in Postgres; the repair sweep copies it from Redis");
                }
                Outcome::DeadLettered(error)
            }
            Ok(Failed::Retried(record)) => {
                if let Err(store_error) = self
                    .store
                    .dead_letters()
                    .record_failure(&entity, &record)
                    .await
                {
                    tracing::warn!(error = %Chain(&store_error), "could not record the failed attempt in Postgres; Redis still counts it");
                }
                Outcome::Failed(error)
            }
            Ok(Failed::TakenOver) => Outcome::Failed(error),
            Err(redis_error) => {
                tracing::warn!(redis_error = %Chain(&redis_error), "recording the failure failed; the lease expires and the reaper counts it");
                Outcome::Failed(error)
            }
        }
    }
}
