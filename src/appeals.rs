//! Appeals (DSA Art. 20): the platform forwards its user's appeal of a restricting decision,
//! and a person decides it. Upheld, the decision is undone the way a moderator undoes one (a
//! reversal of its action, or an override back to the status it found), so it counts in the
//! reversal rate with `appeal` as its source; rejected, it is recorded and final. Either way
//! the platform is told (`appeal.decided`) and the audit trail records it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tracing::Instrument;

use crate::{
    active_rules::RuleDemoter,
    domain::{Actor, AuditAction, AuditEntry, EntityId, LabelRemoved, Status},
    moderation::{self, OverrideRequest, ReversalError, ReversalRefusal},
    queue::Queue,
    rules::RuleSet,
    store::{
        AppealDecision, AppealRecord, DecidedAppeal, LockedAppeal, ReversalRequest,
        StatementRecord, Store, StoreError, TurnoverRetry,
    },
    telemetry::names,
};

/// The longest appeal text taken.
pub const MAX_APPEAL_TEXT: usize = 5000;

/// Why an appeal may not be taken, claimed or decided as it is now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppealRefusal {
    #[error("the appeal window of statement {statement} closed at {closed_at}")]
    WindowClosed {
        statement: i64,
        closed_at: DateTime<Utc>,
    },
    #[error("statement {statement} already has an open appeal ({appeal})")]
    AlreadyOpen { statement: i64, appeal: i64 },
    /// An appeal of the decision was rejected: that is final.
    #[error(
        "appeal {appeal} of statement {statement} was rejected, and a rejected appeal is final: the decision cannot be appealed again"
    )]
    AlreadyRejected { statement: i64, appeal: i64 },
    #[error("appeal {0} was already decided")]
    Decided(i64),
    #[error("appeal {id} is claimed by {by} until {until}")]
    ClaimedElsewhere {
        id: i64,
        by: String,
        until: DateTime<Utc>,
    },
}

/// Why an appeal was not taken or not decided.
#[derive(Debug, thiserror::Error)]
pub enum AppealError {
    /// The decision restricts nothing (a flag for review, a restore): nothing to appeal.
    #[error(
        "action {0} restricts nothing (it has no statement of reasons): there is no decision to appeal"
    )]
    NothingToAppeal(i64),
    #[error(transparent)]
    Refused(#[from] AppealRefusal),
    /// Upheld, but the decision cannot be undone as it stands.
    #[error(transparent)]
    Reversal(ReversalRefusal),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl TurnoverRetry for AppealError {
    fn needs_turnover(&self) -> bool {
        matches!(self, AppealError::Store(error) if error.needs_turnover())
    }
}

impl From<ReversalError> for AppealError {
    fn from(error: ReversalError) -> Self {
        match error {
            ReversalError::Refused(refusal) => AppealError::Reversal(refusal),
            ReversalError::Store(error) => AppealError::Store(error),
        }
    }
}

/// The statement an appeal of action `id` contests.
pub async fn statement_of_action(store: &Store, id: i64) -> Result<StatementRecord, AppealError> {
    if let Some(statement) = store.statements().statement_of_action(id).await? {
        return Ok(statement);
    }
    // Tell an action that restricts nothing from one that does not exist.
    match store.console().action(id).await? {
        Some(_) => Err(AppealError::NothingToAppeal(id)),
        None => Err(StoreError::NotFound(format!("no action {id}")).into()),
    }
}

/// Takes `appellant`'s appeal of `statement`'s decision, within `window` of it: refused once an
/// appeal of it was rejected (that is final, whatever the window says), after the window, or
/// while another appeal of it is open. Recorded in the audit trail under `by` (the platform's
/// credential).
pub async fn submit(
    store: &Store,
    statement: &StatementRecord,
    appellant: &str,
    text: &str,
    window: Duration,
    by: &Actor,
) -> Result<AppealRecord, AppealError> {
    let mut tx = store.begin().await?;
    let earlier = tx.lock_earlier_appeals(statement.id).await?;
    if let Some(rejected) = earlier.iter().find(|appeal| appeal.rejected) {
        return Err(AppealRefusal::AlreadyRejected {
            statement: statement.id,
            appeal: rejected.id,
        }
        .into());
    }
    let closed_at =
        statement.created_at + chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX);
    if Utc::now() > closed_at {
        return Err(AppealRefusal::WindowClosed {
            statement: statement.id,
            closed_at,
        }
        .into());
    }
    let Some(id) = tx.insert_appeal(statement, appellant, text).await? else {
        let open = tx.open_appeal_of(statement.id).await?;
        return Err(AppealRefusal::AlreadyOpen {
            statement: statement.id,
            appeal: open,
        }
        .into());
    };
    let entry = AuditEntry {
        action: AuditAction::AppealSubmit,
        subject: format!("statement:{}", statement.id),
        before: None,
        after: Some(serde_json::json!({ "appeal": id, "entity": statement.entity })),
    };
    tx.audit(by, &entry).await?;
    tx.commit().await?;
    Ok(store.appeals().existing_appeal(id).await?)
}

/// `moderator` claims appeal `id` for `claim_for` (again: extends their own claim).
pub async fn claim(
    store: &Store,
    id: i64,
    moderator: &str,
    claim_for: Duration,
) -> Result<AppealRecord, AppealError> {
    let mut tx = store.begin().await?;
    let locked = tx.lock_appeal(id).await?;
    may_take(&locked, moderator)?;
    tx.claim_appeal(id, moderator, claim_for).await?;
    tx.commit().await?;
    Ok(store.appeals().existing_appeal(id).await?)
}

/// An appeal is claimed or decided while it is open, by anyone whose claim it is not taken
/// from: no one else holds a live claim on it.
fn may_take(locked: &LockedAppeal, moderator: &str) -> Result<(), AppealRefusal> {
    if locked.decided {
        return Err(AppealRefusal::Decided(locked.id));
    }
    if let (Some(by), Some(until)) = (&locked.claimed_by, locked.claim_until)
        && by != moderator
        && until > Utc::now()
    {
        return Err(AppealRefusal::ClaimedElsewhere {
            id: locked.id,
            by: by.clone(),
            until,
        });
    }
    Ok(())
}

/// What deciding an appeal needs besides the appeal.
pub struct AppealDesk<'a> {
    pub store: &'a Store,
    pub queue: &'a Queue,
    pub rules: &'a RuleSet,
    pub demoter: &'a RuleDemoter,
    /// How long an upheld decision keeps automation from redoing it.
    pub override_for: Duration,
}

/// `by` decides appeal `id`. Upheld: the decision is undone in the same transaction that
/// records the outcome.
pub async fn decide(
    desk: &AppealDesk<'_>,
    id: i64,
    by: &Actor,
    decision: AppealDecision,
    reason: &str,
) -> Result<AppealRecord, AppealError> {
    let appeal = desk.store.appeals().existing_appeal(id).await?;
    // Refused early on the appeal as read now; each way of deciding asks again on its locked
    // row, in the transaction that decides it.
    may_take(
        &LockedAppeal {
            id,
            decided: appeal.outcome.is_some(),
            claimed_by: appeal.claimed_by.clone(),
            claim_until: appeal.claim_until,
        },
        &by.name,
    )?;
    let decided = DecidedAppeal {
        id,
        by,
        decision,
        reason,
        reversal: None,
    };
    match (decision, appeal.action_id) {
        (AppealDecision::Rejected, _) => {
            let mut tx = desk.store.begin().await?;
            may_take(&tx.lock_appeal(id).await?, &by.name)?;
            tx.decide_appeal(&decided).await?;
            tx.commit().await?;
        }
        (AppealDecision::Upheld, None) if appeal.label.is_some() => {
            // A restricting label: it comes off; the status was never the label's.
            let label = appeal.label.clone().unwrap_or_default();
            let mut tx = desk.store.begin().await?;
            may_take(&tx.lock_appeal(id).await?, &by.name)?;
            tx.remove_label(&appeal.entity, &label).await?;
            let removed = LabelRemoved {
                entity: appeal.entity.clone(),
                label,
                appeal: id,
                moderator: by.name.clone(),
                reason: reason.to_owned(),
            };
            tx.enqueue(&format!("label-removed:{id}"), &removed).await?;
            tx.decide_appeal(&decided).await?;
            tx.commit().await?;
        }
        (AppealDecision::Upheld, Some(action)) => {
            let request = ReversalRequest {
                id: action,
                by,
                reason,
                override_for: desk.override_for,
                appeal: Some(id),
            };
            // The appeal locked and checked in the reversal's transaction, which decides it.
            let rules = desk.demoter.rules.as_ref().map(|rules| rules.current());
            let reversal = moderation::retried_at_turnover(desk.store, || async {
                let mut tx = desk.store.begin().await?;
                may_take(&tx.lock_appeal(id).await?, &by.name)?;
                let reversal = moderation::reverse_in(&mut tx, rules.as_deref(), &request).await?;
                tx.commit().await?;
                Ok::<_, AppealError>(reversal)
            })
            .instrument(tracing::info_span!("reverse", action))
            .await?;
            moderation::after_reversal(desk.store, desk.queue, desk.demoter, &request, &reversal)
                .await;
        }
        (AppealDecision::Upheld, None) => {
            // A moderator's override: put back the status it found.
            let entity = EntityId::parse(&appeal.entity)
                .map_err(|e| StoreError::corrupt(format!("the entity of appeal {id}"), e))?;
            let status = Status::parse(&appeal.previous_status).map_err(|e| {
                StoreError::corrupt(format!("the previous status of appeal {id}"), e)
            })?;
            let request = OverrideRequest {
                entity: &entity,
                by,
                status,
                until: None,
                duration: None,
                reason,
            };
            // The appeal locked and checked in the override's transaction, which decides it;
            // the override is not timed, so nothing is left to schedule.
            let mut tx = desk.store.begin().await?;
            may_take(&tx.lock_appeal(id).await?, &by.name)?;
            moderation::override_in(&mut tx, desk.rules, &request, desk.override_for, Some(id))
                .await?;
            tx.commit().await?;
        }
    }
    let rule = appeal
        .rule
        .clone()
        .unwrap_or_else(|| "moderator".to_owned());
    metrics::counter!(names::APPEALS_DECIDED, "outcome" => decision.as_str(), "rule" => rule)
        .increment(1);
    Ok(desk.store.appeals().existing_appeal(id).await?)
}
