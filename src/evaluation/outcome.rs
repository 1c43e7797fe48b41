//! How one evaluation ended, and why it was given back or failed: typed, so that each
//! outcome settles its claim its own way (`failure.rs`) and is counted under its label.

use std::{sync::Arc, time::Duration};

use crate::{
    queue::QueueError,
    store::{Completion, StoreError},
};

/// How one evaluation ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Evaluated and recorded (with or without an action).
    Done(Completion),
    /// The entity was locked or in flight elsewhere: tried again shortly, no attempt used.
    Snooze(Duration),
    /// A transient failure that is not the entity's fault (version conflict, Postgres or Redis
    /// unreachable): re-scheduled after a short jittered delay, no attempt used.
    Retry(Failure),
    /// A failed attempt (error, panic, timeout): re-scheduled after an exponential backoff with
    /// full jitter.
    Failed(Failure),
    /// Moved to the dead-letter set: a fatal failure, or the last allowed attempt failed.
    DeadLettered(Failure),
}

/// Why an evaluation was given back or failed, with its cause: logged with the whole chain;
/// its message alone is what the failure record keeps as the last error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Failure {
    /// Taking the entity's lock failed, or (`busy`) it was held elsewhere and re-scheduling
    /// the entity failed: then the lease expires and the reaper returns it.
    #[error("{}", if *busy { "lock busy, and re-scheduling failed" } else { "lock" })]
    Lock {
        busy: bool,
        #[source]
        source: Arc<QueueError>,
    },
    /// Another writer moved the entity on since the snapshot.
    #[error("moderation version moved past {read}")]
    VersionMoved { read: i64 },
    /// The evaluation itself failed: the entity, the rules, the store or the time limit.
    #[error(transparent)]
    Evaluation(Arc<EvaluationError>),
    /// The evaluation panicked.
    #[error("panic: {0}")]
    Panic(String),
}

impl From<EvaluationError> for Failure {
    fn from(error: EvaluationError) -> Self {
        Failure::Evaluation(Arc::new(error))
    }
}

impl Failure {
    /// Postgres unreachable: not the entity's fault, and logged once for the whole outage (when
    /// it pauses claims, `failure.rs`), not once per evaluation it gives back.
    pub fn is_outage(&self) -> bool {
        matches!(self, Failure::Evaluation(error) if matches!(&**error, EvaluationError::Store(store) if store.is_unavailable()))
    }
}

impl Outcome {
    pub(super) fn label(&self) -> &'static str {
        match self {
            Outcome::Done(_) => "done",
            Outcome::Snooze(_) => "snooze",
            Outcome::Retry(_) => "retry",
            Outcome::Failed(_) => "failed",
            Outcome::DeadLettered(_) => "dead_lettered",
        }
    }
}

/// Why one evaluation did not complete.
#[derive(Debug, thiserror::Error)]
pub enum EvaluationError {
    #[error("entity is scheduled but has no record in Postgres")]
    UnknownEntity,
    #[error("the rules cannot evaluate this entity: {0}")]
    Rules(RuleFailures),
    #[error("evaluation did not finish within {0:?}")]
    TimedOut(Duration),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The live rules that could not evaluate an entity, each with its error as the verdict
/// records it: one failure of the evaluation, joined into one line only when shown.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleFailures(pub Vec<(String, String)>);

impl std::fmt::Display for RuleFailures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (rule, error)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "rule {rule:?}: {error}")?;
        }
        Ok(())
    }
}
