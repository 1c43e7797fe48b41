//! From the snapshot to the decision: the snapshot read (Postgres, a statement shared by
//! concurrent evaluations), then in memory the rules' verdict, the decision it applies, and
//! the dedup key that tells an action Redis remembers as applied.

use chrono::{DateTime, Utc};

use super::{EvaluationError, Evaluator, RuleFailures};
use crate::{
    domain::{Snapshot, Timer},
    queue::Claim,
    rules::{Decision, RuleSet, Verdict},
    store::FencedEvaluation,
    telemetry::{
        names,
        traces::{self, TraceParent},
    },
};

/// What the rules decided on a snapshot, ready for the fenced completion.
pub(super) struct Decided {
    pub(super) snapshot: Snapshot,
    verdict: Verdict,
    /// The action to apply, if any.
    pub(super) decision: Option<Decision>,
    /// The decision's dedup key.
    dedup_key: Option<String>,
    /// A timed action has ended: this evaluation restores the entity (`domain/timer.rs`).
    restoring: bool,
    /// Events arrived since the last evaluation.
    new_events: bool,
    started_at: DateTime<Utc>,
}

/// What a decision leaves to do once its completion is recorded (`timers.rs`), and the dedup
/// key the ack remembers.
pub(super) struct Afterwards {
    pub(super) decision: Option<Decision>,
    pub(super) dedup_key: Option<String>,
    /// The entity's timer, as the snapshot read it.
    pub(super) timer: Option<Timer>,
    /// A restore left events owed: they are scheduled once it is recorded.
    pub(super) events_owed: bool,
}

impl Evaluator {
    /// The entity's snapshot (unknown to Postgres: a fatal failure), and the evaluation's span
    /// put in the trace of the events it covers.
    pub(super) async fn snapshot(
        &self,
        claim: &Claim,
        rules: &RuleSet,
    ) -> Result<Snapshot, EvaluationError> {
        use tracing::Instrument;
        let snapshot = self
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
        traced(&tracing::Span::current(), claim, &snapshot.traces);
        Ok(snapshot)
    }

    /// Runs the rules on the snapshot and picks the decision: none without a new event, and
    /// none if its dedup key is `last_applied`, the one the lock read. A live rule that fails
    /// is the entity's failure. `started_at` is when the evaluation began, as it is recorded.
    pub(super) fn decide(
        &self,
        claim: &Claim,
        rules: &RuleSet,
        mut snapshot: Snapshot,
        last_applied: Option<&str>,
        started_at: DateTime<Utc>,
    ) -> Result<Decided, EvaluationError> {
        // A timed action that has ended: this evaluation restores the entity and decides
        // nothing else (`domain/timer.rs`). Its events stay owed (the evaluation records none
        // as seen), and the entity is scheduled again for them afterwards.
        let restoring = snapshot.due_timer().is_some();
        let new_events = snapshot.event_count > snapshot.previously_evaluated;
        if restoring {
            snapshot.event_count = snapshot.previously_evaluated;
        }
        let verdict = if restoring {
            Verdict {
                rules_version: rules.version(),
                ..Verdict::default()
            }
        } else {
            step!("rules", claim).in_scope(|| rules.evaluate(&snapshot))
        };
        counted(&verdict)?;
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
        Ok(Decided {
            snapshot,
            verdict,
            decision,
            dedup_key,
            restoring,
            new_events,
            started_at,
        })
    }
}

/// The verdict's rule errors and shadow hits counted (and logged); the live rules' errors are
/// the evaluation's failure.
fn counted(verdict: &Verdict) -> Result<(), EvaluationError> {
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
    Ok(())
}

impl Decided {
    /// What the completion will leave to do.
    pub(super) fn afterwards(&self) -> Afterwards {
        Afterwards {
            decision: self.decision.clone(),
            dedup_key: self.dedup_key.clone(),
            timer: self.snapshot.timer.clone(),
            events_owed: self.restoring && self.new_events,
        }
    }

    /// The events this evaluation covers that the previous one had not.
    pub(super) fn collapsed(&self) -> i64 {
        (self.snapshot.event_count - self.snapshot.previously_evaluated).max(0)
    }

    /// The completion to record: the decision with its statement of reasons (a restricting
    /// decision explains itself to its author, `rules/statement/`) and the labels'.
    pub(super) fn into_fenced(
        self,
        claim: &Claim,
        rules: &RuleSet,
        trace: Option<String>,
    ) -> FencedEvaluation {
        let statement = self
            .decision
            .as_ref()
            .and_then(|d| rules.statement_for(d, &self.snapshot));
        let label_statements = rules.label_statements(&self.verdict, &self.snapshot);
        FencedEvaluation {
            snapshot: self.snapshot,
            verdict: self.verdict,
            decision: self.decision,
            started_at: self.started_at,
            due_at: DateTime::<Utc>::from_timestamp_millis(claim.due_at_ms),
            trace,
            statement,
            label_statements,
        }
    }
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
