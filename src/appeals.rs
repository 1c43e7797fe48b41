//! Appeals (DSA Art. 20): the platform forwards its user's appeal of a restricting decision,
//! and a person decides it. Upheld, the decision is undone the way a moderator undoes one (a
//! reversal of its action, or an override back to the status it found), so it counts in the
//! reversal rate with `appeal` as its source; rejected, it is recorded and final. Either way
//! the platform is told (`appeal.decided`) and the audit trail records it.

use std::time::Duration;

use crate::{
    active_rules::RuleDemoter,
    domain::{Actor, EntityId, Status},
    moderation::{self, OverrideRequest, ReversalError, ReversalRefusal},
    queue::Queue,
    rules::RuleSet,
    store::{AppealDecision, AppealRecord, AppealRefusal, StatementRecord, Store, StoreError},
    telemetry::names,
};

/// The longest appeal text taken.
pub const MAX_APPEAL_TEXT: usize = 5000;

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
    if let Some(statement) = store.statement_of_action(id).await? {
        return Ok(statement);
    }
    // Tell an action that restricts nothing from one that does not exist.
    match store.action(id).await? {
        Some(_) => Err(AppealError::NothingToAppeal(id)),
        None => Err(StoreError::NotFound(format!("no action {id}")).into()),
    }
}

/// Takes `appellant`'s appeal of `statement`'s decision, within `window` of it.
pub async fn submit(
    store: &Store,
    statement: &StatementRecord,
    appellant: &str,
    text: &str,
    window: Duration,
    by: &Actor,
) -> Result<AppealRecord, AppealError> {
    Ok(store
        .submit_appeal(statement, appellant, text, window, by)
        .await??)
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
    let appeal = desk.store.existing_appeal(id).await?;
    if appeal.outcome.is_some() {
        return Err(AppealRefusal::Decided(id).into());
    }
    if let (Some(holder), Some(until)) = (&appeal.claimed_by, appeal.claim_until)
        && holder != &by.name
        && until > chrono::Utc::now()
    {
        return Err(AppealRefusal::ClaimedElsewhere {
            id,
            by: holder.clone(),
            until,
        }
        .into());
    }
    match (decision, appeal.action_id) {
        (AppealDecision::Rejected, _) => {
            desk.store.reject_appeal(id, by, reason).await??;
        }
        (AppealDecision::Upheld, None) if appeal.label.is_some() => {
            // A restricting label: it comes off; the status was never the label's.
            let label = appeal.label.clone().unwrap_or_default();
            desk.store
                .remove_label_upholding(&appeal, &label, by, reason)
                .await??;
        }
        (AppealDecision::Upheld, Some(action)) => {
            moderation::reverse(
                desk.store,
                desk.queue,
                action,
                by,
                reason,
                desk.override_for,
                desk.demoter,
                Some(id),
            )
            .await?;
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
            moderation::override_status(
                desk.store,
                desk.queue,
                desk.rules,
                request,
                desk.override_for,
                Some(id),
            )
            .await?;
        }
    }
    let rule = appeal
        .rule
        .clone()
        .unwrap_or_else(|| "moderator".to_owned());
    metrics::counter!(names::APPEALS_DECIDED, "outcome" => decision.as_str(), "rule" => rule)
        .increment(1);
    Ok(desk.store.existing_appeal(id).await?)
}
