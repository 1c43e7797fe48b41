//! One evaluation, step by step: lock the entity, read its snapshot, run the rules, record the
//! completion behind the version fence, ack. Each step has a span of its own (at debug level)
//! with the entity and shard; the outcome says how the claim was settled.

use std::{
    panic::AssertUnwindSafe,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use futures::FutureExt;
use tracing::Instrument;

use super::{EvaluationError, Failure, Outcome, RuleFailures, Worker, lease::renew_while_running};
use crate::{
    domain::{Priority, Timer},
    queue::{Claim, Failed, Locked},
    rules::{Decision, Verdict},
    store::{Completion, FencedEvaluation, StoreError},
    telemetry::{
        Chain, names,
        traces::{self, TraceParent},
    },
};

/// A span for one step of an evaluation.
macro_rules! step {
    ($name:literal, $claim:expr) => {
        tracing::debug_span!($name, entity = %$claim.entity, shard = %$claim.shard)
    };
}

impl Worker {
    /// Evaluates one claimed entity and settles its claim (ack, re-schedule or dead-letter).
    /// A panic inside the evaluation is caught and counted as a failed attempt.
    /// The span's `evaluation` is the claim token: the id every log line of this attempt shares.
    /// When spans are exported, it continues the trace of the oldest event it decides on and
    /// follows from each of them, once the snapshot has read them (`traced`).
    pub async fn evaluate_claim(&self, claim: Claim) -> Outcome {
        let span = tracing::info_span!("evaluation", entity = %claim.entity, evaluation = %claim.token, shard = %claim.shard);
        self.evaluate_counted(claim).instrument(span).await
    }

    /// Puts the evaluation's span in the trace of the events its snapshot covers, and records
    /// the claim that took it there, when spans are exported. The span is exported at its end
    /// (context activation is off, `telemetry/mod.rs`), so its parent may be set this late;
    /// the traces are read by the snapshot's own statement, not one of their own.
    fn traced(span: &tracing::Span, claim: &Claim, traces: &[String]) {
        let pending: Vec<TraceParent> = traces
            .iter()
            .filter_map(|t| TraceParent::parse(t))
            .collect();
        let Some(first) = pending.first() else {
            return;
        };
        traces::continue_trace(span, Some(first));
        traces::follows_from(span, &pending);
        if let Some((began, ended)) = claim.claimed {
            traces::record_past(
                "claim",
                first,
                began,
                ended,
                vec![
                    opentelemetry::KeyValue::new("entity", claim.entity.to_string()),
                    opentelemetry::KeyValue::new("shard", claim.shard.to_string()),
                ],
            );
        }
    }

    /// [`Self::evaluate_locked`] with a panic taken for a failed attempt, the outcome counted,
    /// timed and logged once.
    async fn evaluate_counted(&self, claim: Claim) -> Outcome {
        let started = Instant::now();
        let outcome = match AssertUnwindSafe(self.evaluate_locked(&claim))
            .catch_unwind()
            .await
        {
            Ok(outcome) => outcome,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".to_owned());
                let outcome = self.fail(&claim, Failure::Panic(message), false).await;
                let _ = self.queue.unlock(&claim).await;
                outcome
            }
        };
        metrics::counter!(names::EVALUATIONS, "outcome" => outcome.label()).increment(1);
        metrics::histogram!(names::EVALUATION_SECONDS).record(started.elapsed().as_secs_f64());
        match &outcome {
            Outcome::Retry(reason) => {
                tracing::info!(reason = %Chain(reason), "evaluation will be retried")
            }
            Outcome::Failed(error) => {
                tracing::warn!(error = %Chain(error), "evaluation failed; retrying with backoff")
            }
            Outcome::DeadLettered(error) => {
                tracing::error!(error = %Chain(error), "entity dead-lettered")
            }
            _ => {}
        }
        outcome
    }

    /// Takes the entity's lock, evaluates it under the lock ([`Self::evaluate`]) and settles the
    /// claim by how that ended: acked, given back without an attempt (an outage, a conflict),
    /// or failed.
    async fn evaluate_locked(&self, claim: &Claim) -> Outcome {
        let locking = Instant::now();
        let locked = self
            .queue
            .lock(claim)
            .instrument(step!("lock", claim))
            .await;
        metrics::histogram!(names::LOCK_ACQUIRE_SECONDS).record(locking.elapsed().as_secs_f64());
        let last_applied = match locked {
            Ok(Locked::Taken { last_applied }) => last_applied,
            Ok(Locked::Busy) => {
                metrics::counter!(names::LOCK_CONTENTION).increment(1);
                let delay = self.jittered(self.settings.retry_delay);
                return match self.queue.retry(claim, delay).await {
                    Ok(_) => Outcome::Snooze(delay),
                    // The lease will expire and the reaper returns the entity.
                    Err(error) => Outcome::Retry(Failure::Lock {
                        busy: true,
                        source: Arc::new(error),
                    }),
                };
            }
            Err(error) => {
                // The SET may have taken effect with its reply lost: release it if it is ours.
                let _ = self.queue.unlock(claim).await;
                let failure = Failure::Lock {
                    busy: false,
                    source: Arc::new(error),
                };
                return self.give_back(claim, failure).await;
            }
        };

        let lost = Arc::new(AtomicBool::new(false));
        // Renewal stops when the guard drops: on return, on timeout, and on a panic.
        let renewal = renew_while_running(self.queue.clone(), claim.clone(), Arc::clone(&lost));
        let evaluation_started = Instant::now();
        let result = tokio::time::timeout(
            self.settings.evaluation_timeout,
            self.evaluate(claim, last_applied.as_deref()),
        )
        .await
        .unwrap_or(Err(EvaluationError::TimedOut(
            self.settings.evaluation_timeout,
        )));
        drop(renewal);
        self.leases.record(evaluation_started.elapsed());

        let mut released = false;
        let outcome = match result {
            Ok((completion, applied)) => {
                match self
                    .queue
                    .ack_remembering(claim, applied.as_deref())
                    .instrument(step!("ack", claim))
                    .await
                {
                    // The ack released the lock too.
                    Ok(_) => released = true,
                    // Not acked: the lease expires and the entity is evaluated again, which
                    // the dedup key and version fence make harmless.
                    Err(error) => {
                        tracing::warn!(error = %crate::telemetry::Chain(&error), "ack failed")
                    }
                }
                Outcome::Done(completion)
            }
            Err(error @ (EvaluationError::UnknownEntity | EvaluationError::Rules(_))) => {
                self.fail(claim, error.into(), true).await
            }
            Err(EvaluationError::Store(StoreError::VersionConflict { read })) => {
                metrics::counter!(names::VERSION_CONFLICTS).increment(1);
                self.stats.fenced.fetch_add(1, Ordering::Relaxed);
                self.give_back(claim, Failure::VersionMoved { read }).await
            }
            // A deadlock or serialization failure: try again, nobody's fault.
            Err(EvaluationError::Store(error)) if error.is_conflict() => {
                self.give_back(claim, EvaluationError::Store(error).into())
                    .await
            }
            // A timeout is the entity's fault only if Postgres answers and takes writes: a
            // black-holed network must not use up attempts.
            // So is one that waited on a primary that refused connections meanwhile (a
            // read-only spell that ended before the timeout).
            Err(error @ EvaluationError::TimedOut(_))
                if crate::store::primary_refused_since(evaluation_started)
                    || !self.postgres_answers().await =>
            {
                self.breaker.trip(self.settings.poll_interval);
                self.give_back(claim, error.into()).await
            }
            // An outage is not the entity's fault: it must not use up its attempts, and
            // claiming pauses until Postgres answers again.
            Err(EvaluationError::Store(error)) if error.is_unavailable() => {
                if !self.breaker_open() {
                    tracing::warn!(error = %crate::telemetry::Chain(&error), "Postgres unreachable; pausing claims");
                }
                self.breaker.trip(self.settings.poll_interval);
                self.give_back(claim, EvaluationError::Store(error).into())
                    .await
            }
            Err(error) => self.fail(claim, error.into(), false).await,
        };
        if lost.load(Ordering::Relaxed) {
            tracing::warn!("lease or lock was lost during the evaluation");
        }
        if !released && let Err(error) = self.queue.unlock(claim).await {
            tracing::warn!(error = %crate::telemetry::Chain(&error), "unlock failed; the lock expires with its lease");
        }
        outcome
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
            .retry(claim, self.jittered(self.settings.retry_delay))
            .await
        {
            tracing::warn!(error = %crate::telemetry::Chain(&error), "re-scheduling failed; the lease expires and the reaper returns it");
        }
        Outcome::Retry(reason)
    }

    /// Records a failed attempt: backoff and retry, or dead letter (at once if `fatal`).
    /// Redis decides (counting from the greater of its count and the one Postgres holds, so a
    /// Redis that lost its copy does not start over), then the outcome is written to Postgres;
    /// a dead letter whose write fails is copied there from Redis by the repair sweep.
    async fn fail(&self, claim: &Claim, error: Failure, fatal: bool) -> Outcome {
        let entity = claim.entity.to_string();
        let floor = match self
            .store
            .failure_floors(std::slice::from_ref(&entity))
            .await
        {
            Ok(mut floors) => floors.remove(&entity),
            Err(store_error) => {
                tracing::warn!(error = %crate::telemetry::Chain(&store_error), "could not read the failure record from Postgres; counting from Redis' alone");
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
                if let Err(store_error) = self.store.record_dead_letter(&dead).await {
                    tracing::warn!(error = %crate::telemetry::Chain(&store_error), "could not record the dead letter in Postgres; the repair sweep copies it from Redis");
                }
                Outcome::DeadLettered(error)
            }
            Ok(Failed::Retried(record)) => {
                if let Err(store_error) = self.store.record_failure(&entity, &record).await {
                    tracing::warn!(error = %crate::telemetry::Chain(&store_error), "could not record the failed attempt in Postgres; Redis still counts it");
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

    /// The evaluation under the lock: the completion, and the dedup key of the action it applied
    /// or found applied, for the ack to remember. `last_applied` is the dedup key of the
    /// entity's last applied action, as the lock read it.
    async fn evaluate(
        &self,
        claim: &Claim,
        last_applied: Option<&str>,
    ) -> Result<(Completion, Option<String>), EvaluationError> {
        let started_at = Utc::now();
        let rules = self.rules.current();
        let mut snapshot = self
            .batches
            .snapshot(
                &claim.entity,
                rules.uses_actors(),
                rules.windows_for(claim.entity.kind()),
                rules.attribute_reads(),
            )
            .instrument(step!("snapshot", claim))
            .await?
            .ok_or(EvaluationError::UnknownEntity)?;
        Self::traced(&tracing::Span::current(), claim, &snapshot.traces);
        // A timed action that has ended: this evaluation restores the entity and decides
        // nothing else (`domain/timer.rs`). Its events stay owed (the evaluation records none
        // as seen), and the entity is scheduled again for them below.
        let restoring = snapshot.due_timer().is_some();
        let new_events = snapshot.event_count > snapshot.previously_evaluated;
        if restoring {
            snapshot.event_count = snapshot.previously_evaluated;
        }
        let timer = snapshot.timer.clone();
        let verdict = if restoring {
            Verdict {
                rules_version: rules.version(),
                ..Verdict::default()
            }
        } else {
            step!("rules", claim).in_scope(|| rules.evaluate(&snapshot))
        };
        for (rule, error) in &verdict.shadow_errors {
            metrics::counter!(names::RULE_ERRORS).increment(1);
            tracing::warn!(%rule, %error, "shadow rule could not be evaluated");
        }
        if !verdict.errors.is_empty() {
            metrics::counter!(names::RULE_ERRORS).increment(verdict.errors.len() as u64);
            return Err(EvaluationError::Rules(RuleFailures(verdict.errors.clone())));
        }
        for shadow in &verdict.shadow {
            metrics::counter!(names::SHADOW_HITS, "rule" => shadow.rule.clone()).increment(1);
        }
        // Without a new event there is nothing new to decide on: an evaluation that a timer's
        // schedule or a repair brought about acts only through its timer (so a restore is not
        // undone at once by the same figures that took the timed action).
        let mut decision = verdict
            .to_apply(snapshot.status, snapshot.override_cap)
            .filter(|_| new_events)
            .cloned();
        let mut dedup_key = decision.as_ref().map(|d| snapshot.dedup_key(&d.rule));
        // Redis remembers this action as the entity's last applied (a cache in front of the
        // Postgres constraint; on a Redis error Postgres decides).
        if dedup_key.is_some() && dedup_key.as_deref() == last_applied {
            (decision, dedup_key) = (None, None);
        }
        if let Some(hook) = &self.before_apply {
            hook(snapshot.clone()).await;
        }
        let collapsed = (snapshot.event_count - snapshot.previously_evaluated).max(0);
        // A decision is recorded under a span of its own, which its webhook continues.
        let step = match &decision {
            Some(d) => {
                tracing::info_span!("action", action = d.action.as_str(), rule = %d.rule, entity = %claim.entity)
            }
            None => step!("completion", claim),
        };
        let trace = decision
            .as_ref()
            .and_then(|_| TraceParent::of_span(&step))
            .map(|t| t.as_str().to_owned());
        // A restricting decision explains itself to its author (`rules/statement.rs`).
        let statement = decision
            .as_ref()
            .and_then(|d| rules.statement_for(d, &snapshot));
        let label_statements = rules.label_statements(&verdict, &snapshot);
        let completion = self
            .batches
            .complete(FencedEvaluation {
                snapshot,
                verdict,
                decision: decision.clone(),
                started_at,
                due_at: DateTime::<Utc>::from_timestamp_millis(claim.due_at_ms),
                trace,
                statement,
                label_statements,
            })
            .instrument(step)
            .await?;
        metrics::histogram!(names::EVENTS_PER_EVALUATION).record(collapsed as f64);
        self.after_timers(
            claim,
            &decision,
            timer,
            restoring && new_events,
            &completion,
        )
        .await;
        if let Completion::Applied {
            author: Some(author),
            ..
        } = &completion
        {
            // The author's derived signal is committed; if this schedule is lost, the repair
            // sweep finds the author owed an evaluation.
            if let Err(error) = self
                .queue
                .schedule(&[(author.clone(), Priority::Normal)])
                .await
            {
                tracing::warn!(error = %crate::telemetry::Chain(&error), %author, "could not schedule the author; the sweep will");
            }
        }
        if let (Some(d), Completion::Applied { .. }) = (&decision, &completion) {
            metrics::counter!(names::ACTIONS, "action" => d.action.as_str(), "rule" => d.rule.clone())
                .increment(1);
            tracing::info!(action = d.action.as_str(), rule = %d.rule, "action applied");
        }
        // The ack remembers the dedup key once Postgres holds the action.
        let applied = match completion {
            Completion::Applied { .. } | Completion::AlreadyApplied => dedup_key,
            Completion::NoAction => None,
        };
        Ok((completion, applied))
    }

    /// The schedule a completion leaves for timers: a timed action just applied is scheduled
    /// at its end; a timer that this evaluation neither ended nor replaced is scheduled at its
    /// end again (an event's evaluation came first and took its entry); after a restore, the
    /// events it left owed are scheduled. Each is also found by the repair sweep if this is
    /// lost (the timer is in Postgres), so a failure here only delays.
    async fn after_timers(
        &self,
        claim: &Claim,
        decision: &Option<Decision>,
        timer: Option<Timer>,
        events_owed: bool,
        completion: &Completion,
    ) {
        let applied = matches!(completion, Completion::Applied { .. });
        let timed = decision.as_ref().and_then(|d| d.duration_secs);
        let ends_at = match (applied, timed, &timer) {
            // The timer ends at Postgres' now() + duration, taken before this.
            (true, Some(secs), _) => Some(Utc::now() + chrono::Duration::seconds(secs as i64)),
            (false, _, Some(timer)) => Some(timer.ends_at),
            _ => None,
        };
        if let Some(ends_at) = ends_at {
            let entry = [(claim.entity.clone(), ends_at.timestamp_millis() + 1)];
            if let Err(error) = self.queue.schedule_at(&entry, false).await {
                tracing::warn!(error = %crate::telemetry::Chain(&error), "could not schedule a timed action's end; the sweep will");
            }
        }
        if applied && decision.is_none() {
            metrics::counter!(names::ACTIONS, "action" => "restore", "rule" => timer.map(|t| t.set_by).unwrap_or_default())
                .increment(1);
            tracing::info!(action = "restore", "a timed action ended: restored");
            // The restore may have put a timer it displaced back in force: its end is due in
            // Redis too (the sweep finds it otherwise).
            match self.store.timer_of(&claim.entity).await {
                Ok(Some(displaced)) => {
                    let entry = [(
                        claim.entity.clone(),
                        displaced.ends_at.timestamp_millis() + 1,
                    )];
                    if let Err(error) = self.queue.schedule_at(&entry, false).await {
                        tracing::warn!(error = %crate::telemetry::Chain(&error), "could not schedule a displaced timer's end; the sweep will");
                    }
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(error = %crate::telemetry::Chain(&error), "could not read the timer after a restore; the sweep will schedule it")
                }
            }
            if events_owed
                && let Err(error) = self
                    .queue
                    .schedule(&[(claim.entity.clone(), Priority::Normal)])
                    .await
            {
                tracing::warn!(error = %crate::telemetry::Chain(&error), "could not schedule the events a restore left; the sweep will");
            }
        }
    }
}
