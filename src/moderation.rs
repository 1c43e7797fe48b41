//! Moderators' decisions, as the API and the console take them: a reversal of an automated
//! action (with the override it implies, and the author's compensated signal scheduled) and an
//! override of an entity's status, whose default length is decided here once. Which actions
//! may be reversed is decided here too, as a typed refusal the edges map to their answers.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::{
    active_rules::RuleDemoter,
    audit,
    domain::{Actor, AuditAction, AuditEntry, EntityId, Priority, Status},
    queue::Queue,
    rules::RuleSet,
    store::{
        EndedTimer, LockedAction, Reversal, ReversalRequest, StatusOverride, Store, StoreError,
        TurnoverRetry, Tx,
    },
    telemetry::{Chain, names},
};

pub const MAX_TEXT: usize = 1000;

/// What [`acceptable_text`] asks, for an error message.
pub const TEXT_RULE: &str = "must be 1-1000 characters without control characters, not only spaces";

/// Whether a moderator's free text (a name, a reason) may be recorded: 1-1000 characters
/// without control characters, not only spaces. The API and the console hold it to the same
/// rule.
pub fn acceptable_text(text: &str) -> bool {
    text.chars().any(|c| c != ' ')
        && !text.chars().any(char::is_control)
        && text.chars().count() <= MAX_TEXT
}

/// Why an action may not be reversed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReversalRefusal {
    #[error("action {id} was already reversed by {by} at {at}")]
    AlreadyReversed {
        id: i64,
        by: String,
        at: DateTime<Utc>,
    },
    /// The entity changed after the action: only the latest change can be undone.
    #[error(
        "action {id} was superseded: the entity changed after it (now version {version}); reverse the latest action or set an override"
    )]
    Superseded { id: i64, version: i64 },
}

/// Why a reversal was not made: the rule refused, or the store failed.
#[derive(Debug, thiserror::Error)]
pub enum ReversalError {
    #[error(transparent)]
    Refused(#[from] ReversalRefusal),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An action is reversed once, and only while it is the entity's latest change: restoring an
/// older action's previous status would wipe (or even escalate over) what happened since.
fn may_reverse(locked: &LockedAction) -> Result<(), ReversalRefusal> {
    let action = &locked.action;
    if let (Some(at), Some(by)) = (action.reversed_at, &action.reversed_by) {
        return Err(ReversalRefusal::AlreadyReversed {
            id: action.id,
            by: by.clone(),
            at,
        });
    }
    if locked.entity_version != action.applied_version + 1 {
        return Err(ReversalRefusal::Superseded {
            id: action.id,
            version: locked.entity_version,
        });
    }
    Ok(())
}

/// A moderator's reversal as `request` asks it: recorded (with the implied override, lasting
/// `override_for`), counted, the author's compensated signal scheduled, and the action's rule
/// weighed by `demoter`, the guard (its reversal rate changed just now). `request.appeal`: the
/// open appeal this reversal upholds (`appeals.rs`), decided with it; `None`: the moderator's
/// own review. A reversal that puts a restriction back gets its statement of reasons on
/// `demoter`'s rules. The compensation is an event: a partition turnover is repaired and the
/// whole reversal tried again.
#[tracing::instrument(skip_all, fields(action = request.id))]
pub async fn reverse(
    store: &Store,
    queue: &Queue,
    demoter: &RuleDemoter,
    request: ReversalRequest<'_>,
) -> Result<Reversal, ReversalError> {
    let rules = demoter.rules.as_ref().map(|rules| rules.current());
    let reversal = retried_at_turnover(store, || async {
        let mut tx = store.begin().await?;
        let reversal = reverse_in(&mut tx, rules.as_deref(), &request).await?;
        tx.commit().await?;
        Ok::<_, ReversalError>(reversal)
    })
    .await?;
    after_reversal(store, queue, demoter, &request, &reversal).await;
    Ok(reversal)
}

/// Runs a use case's `attempt` (its own transaction, begun and committed inside it), and again
/// after the partitions are turned over when it failed for want of one
/// ([`TurnoverRetry::needs_turnover`]: a compensation or an appeal writes an event), at most
/// three times in all. The use case holds the loop: the store only turns the partitions over.
pub(crate) async fn retried_at_turnover<T, E, F, Fut>(store: &Store, mut attempt: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: TurnoverRetry + From<StoreError> + 'static,
{
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(error) if tries < 3 && error.needs_turnover() => {
                tracing::debug!(error = %Chain(&error), "partition turnover, retrying");
                store.partitions().turn_over().await?;
                tries += 1;
            }
            outcome => return outcome,
        }
    }
}

/// A reversal's statements in `tx`, which its caller commits (`reverse`, or an upheld appeal
/// with its own check: `appeals.rs`): the action and its entity locked, the rule asked, the
/// statement of a restricting reversal drafted on `rules`, then written.
pub async fn reverse_in(
    tx: &mut Tx,
    rules: Option<&RuleSet>,
    request: &ReversalRequest<'_>,
) -> Result<Reversal, ReversalError> {
    let locked = tx.lock_action(request.id).await?;
    may_reverse(&locked)?;
    let action = &locked.action;
    let restored = Status::parse(&action.previous_status).map_err(|e| {
        StoreError::corrupt(format!("the previous status of action {}", action.id), e)
    })?;
    let statement = EntityId::parse(&action.entity).ok().and_then(|entity| {
        rules?.moderator_statement(&entity, restored, request.reason, false, None)
    });
    Ok(tx
        .reverse_action(locked, request, statement.as_ref())
        .await?)
}

/// What follows a committed reversal: counted, the action's rule weighed by the guard, the
/// author whose derived signal was compensated scheduled.
pub async fn after_reversal(
    store: &Store,
    queue: &Queue,
    demoter: &RuleDemoter,
    request: &ReversalRequest<'_>,
    reversal: &Reversal,
) {
    let source = if request.appeal.is_some() {
        "appeal"
    } else {
        "review"
    };
    metrics::counter!(names::REVERSALS, "rule" => reversal.action.rule.clone(), "source" => source)
        .increment(1);
    demoter.after_reversal(store, &reversal.action.rule).await;
    if let Some(author) = &reversal.author {
        // The compensation is committed; if this schedule is lost the repair sweep finds it.
        if let Err(error) = queue.schedule(&[(author.clone(), Priority::Normal)]).await {
            tracing::warn!(error = %Chain(&error), %author, "could not schedule the author after a reversal");
        }
    }
}

impl TurnoverRetry for ReversalError {
    fn needs_turnover(&self) -> bool {
        matches!(self, ReversalError::Store(error) if error.needs_turnover())
    }
}

/// An override a moderator asks for.
#[derive(Debug, Clone, Copy)]
pub struct OverrideRequest<'a> {
    pub entity: &'a EntityId,
    /// The moderator (their name, credential and address).
    pub by: &'a Actor,
    pub status: Status,
    /// When automation may go past it again; `None`: after `default_for`.
    pub until: Option<DateTime<Utc>>,
    /// A timed override: the status holds this long, then quiesce restores the one the entity
    /// had (and automation may go past it again then). Exclusive with `until`.
    pub duration: Option<Duration>,
    pub reason: &'a str,
}

/// The override as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overridden {
    pub moderation_version: i64,
    pub until: DateTime<Utc>,
}

/// Sets the entity's status; automation does not go past it until the request's `until`, or
/// for `default_for` (the length a reversal's override has) when it names none. A timed
/// override (`duration`) is scheduled at its end, when the entity's evaluation restores it.
///
/// An override that hides or suspends is a restricting decision: its statement of reasons, on
/// the `rules`' defaults, is written with it. `appeal`: the open appeal this override upholds.
pub async fn override_status(
    store: &Store,
    queue: &Queue,
    rules: &RuleSet,
    request: OverrideRequest<'_>,
    default_for: Duration,
    appeal: Option<i64>,
) -> Result<Overridden, StoreError> {
    let mut tx = store.begin().await?;
    let overridden = override_in(&mut tx, rules, &request, default_for, appeal).await?;
    tx.commit().await?;
    if request.duration.is_some() {
        // The timer is committed; if this schedule is lost the repair sweep finds it at its end.
        let entry = [(
            request.entity.clone(),
            overridden.until.timestamp_millis() + 1,
        )];
        if let Err(error) = queue.schedule_at(&entry, true).await {
            tracing::warn!(error = %Chain(&error), entity = %request.entity, "could not schedule a timed override's end");
        }
    }
    Ok(overridden)
}

/// An override's statements in `tx`, which its caller commits (`override_status`, or an upheld
/// appeal with its own check: `appeals.rs`); a timed one's end is the caller's to schedule.
pub async fn override_in(
    tx: &mut Tx,
    rules: &RuleSet,
    request: &OverrideRequest<'_>,
    default_for: Duration,
    appeal: Option<i64>,
) -> Result<Overridden, StoreError> {
    let until = match request.duration {
        Some(duration) => Utc::now() + duration,
        None => request.until.unwrap_or_else(|| Utc::now() + default_for),
    };
    let timed = request.duration.is_some();
    let statement = rules.moderator_statement(
        request.entity,
        request.status,
        request.reason,
        false,
        timed.then_some(until),
    );
    let moderation_version = tx
        .override_entity(&StatusOverride {
            entity: request.entity,
            by: request.by,
            status: request.status,
            until,
            reason: request.reason,
            timed,
            statement: statement.as_ref(),
            appeal,
        })
        .await?;
    Ok(Overridden {
        moderation_version,
        until,
    })
}

/// A moderator ends the entity's timed action (or timed override) now: the restore its end
/// would have applied is applied now, and recorded as the moderator's decision. The entry
/// Redis holds for the timer's end then finds nothing to restore.
pub async fn end_timer(
    store: &Store,
    queue: &Queue,
    entity: &EntityId,
    by: &Actor,
    reason: &str,
) -> Result<EndedTimer, StoreError> {
    let ended = store.timers().end_timer(entity, &by.name, reason).await?;
    let entry = AuditEntry {
        action: AuditAction::TimerEnd,
        subject: entity.to_string(),
        before: Some(serde_json::json!({ "timer_ends_at": ended.was_to_end_at })),
        after: Some(serde_json::json!({
            "status": ended.status,
            "moderation_version": ended.moderation_version,
            "restore_action": ended.action_id,
            "reason": reason,
        })),
    };
    audit::record(store, by, entry).await;
    // A timer the ended one had displaced is in force again: its end is scheduled (the sweep
    // finds it otherwise).
    match store.timers().timer_of(entity).await {
        Ok(Some(timer)) => {
            let entry = [(entity.clone(), timer.ends_at.timestamp_millis() + 1)];
            if let Err(error) = queue.schedule_at(&entry, true).await {
                tracing::warn!(error = %Chain(&error), %entity, "could not schedule a displaced timer's end");
            }
        }
        Ok(None) => {}
        Err(error) => {
            tracing::warn!(error = %Chain(&error), %entity, "could not read the timer after an early end")
        }
    }
    metrics::counter!(names::ACTIONS, "action" => "restore", "rule" => "ended early").increment(1);
    Ok(ended)
}
