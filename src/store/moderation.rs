//! Moderators' decisions: reversing an automated action, overriding an entity's status, and
//! the record of who decided what.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{
    ActionRecord, Result, StoreError, Tx,
    appeals::{AppealDecision, DecidedAppeal, decide_appeal_in},
    audit::record_audit_in,
    evaluations::{derived_event, derived_event_id},
    events::{lock_in_order, record_in},
    interval,
    outbox::enqueue,
    statements::{DecidedBy, IssuedStatement, issue_in},
};
use crate::domain::{
    ActionReversed, Actor, AuditAction, AuditEntry, EntityId, EntityOverridden, StatementDraft,
    Status,
};

/// A reversal as recorded: the action, and the entity's state after it.
#[derive(Debug, Clone)]
pub struct Reversal {
    pub action: ActionRecord,
    pub status: Status,
    pub moderation_version: i64,
    pub override_until: DateTime<Utc>,
    /// The author whose derived signal was compensated, to be scheduled.
    pub author: Option<EntityId>,
}

/// A reversal asked for: of action `id`, by `by` for `reason`, its implied override lasting
/// `override_for`; `appeal`: the open appeal whose upholding it is (recorded as its source and
/// decided in the same transaction), `None`: a moderator's own review of the action.
#[derive(Debug, Clone, Copy)]
pub struct ReversalRequest<'a> {
    pub id: i64,
    pub by: &'a Actor,
    pub reason: &'a str,
    pub override_for: std::time::Duration,
    pub appeal: Option<i64>,
}

/// An action as its locked row holds it, with its entity's version (that row locked too): what
/// the use case's rule reads (`moderation.rs`) before the store reverses it.
#[derive(Debug, Clone)]
pub struct LockedAction {
    pub action: ActionRecord,
    pub entity_version: i64,
    /// The author whose derived signal the action wrote (their row locked too), if any.
    pub author: Option<EntityId>,
}

impl Tx {
    /// Locks action `id` and its entity's row (with the author's, whose derived signal the
    /// action wrote) until the transaction ends, and reads them: what the use case's rule reads
    /// before a reversal ([`StoreError::NotFound`]: there is no such action).
    pub async fn lock_action(&mut self, id: i64) -> Result<LockedAction> {
        let action = sqlx::query_as!(
            ActionRecord,
            "SELECT id, entity, action, rule, reason, previous_status, new_status, applied_version,
                    dedup_key, created_at, snapshot, reversed_at, reversed_by, reversal_reason,
                    reversal_source, rules_version
             FROM actions WHERE id = $1 FOR UPDATE",
            id,
        )
        .fetch_optional(&mut *self.tx)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("no action {id}")))?;
        // The author whose derived signal this action wrote (events never change, so this is
        // read before any entity lock); both entity rows are then locked in the order ingest
        // and evaluation batches lock them, so that none of them waits on the other in a cycle.
        let author = sqlx::query_scalar!(
            "SELECT entity FROM events WHERE id = $1",
            derived_event_id(&action.dedup_key),
        )
        .fetch_optional(&mut *self.tx)
        .await?;
        let author = author
            .map(|a| {
                EntityId::parse(&a).map_err(|e| {
                    StoreError::corrupt(format!("the entity of action {id}'s derived event"), e)
                })
            })
            .transpose()?;
        let mut entities = vec![action.entity.as_str()];
        entities.extend(author.as_ref().map(EntityId::as_str));
        lock_in_order(&mut self.tx, &entities).await?;
        let entity_version = sqlx::query_scalar!(
            "SELECT moderation_version FROM entities WHERE entity = $1",
            action.entity,
        )
        .fetch_one(&mut *self.tx)
        .await?;
        Ok(LockedAction {
            action,
            entity_version,
            author,
        })
    }

    /// Reverses the action `locked` holds, as `request` asks: the entity's status goes back to
    /// what it was before the action, its version is bumped (an evaluation in flight then
    /// writes nothing), and an override keeps automation from redoing it for `override_for`.
    /// The author's derived signal is compensated; the reversal is recorded (who, when, why,
    /// in the audit trail too) and an outbox row tells the platform; `request.appeal`, if any,
    /// is decided upheld. `statement`: the statement of reasons of a reversal that restricts
    /// (it puts back a hide or a suspension), written after the reversal's own webhook.
    pub async fn reverse_action(
        &mut self,
        locked: LockedAction,
        request: &ReversalRequest<'_>,
        statement: Option<&StatementDraft>,
    ) -> Result<Reversal> {
        let ReversalRequest {
            id,
            by,
            reason,
            override_for,
            appeal,
        } = *request;
        let moderator = by.name.as_str();
        let submit = self.submit_statements;
        let LockedAction { action, author, .. } = locked;
        let source = if appeal.is_some() { "appeal" } else { "review" };
        // The author's derived signal for this action is compensated, so that reversed
        // actions do not count towards escalating the author.
        let author = match author {
            Some(author) => {
                let compensation = derived_event(
                    format!("derived-reversal:{}", action.dedup_key),
                    &author,
                    format!("auto.{}.reversed", action.action),
                    &action.entity,
                )?;
                record_in(&mut self.tx, &[&compensation], &[], &[]).await?;
                Some(author)
            }
            None => None,
        };
        let entity_row = sqlx::query!(
            r#"UPDATE entities SET
                 status = $2,
                 moderation_version = moderation_version + 1,
                 override_status = $2,
                 override_until = now() + $3::interval,
                 override_by = $4,
                 override_reason = $5,
                 -- A moderator's decision ends any timer in force: the status is theirs now.
                 timer_ends_at = NULL, timer_restores_to = NULL, timer_action = NULL,
                 timer_set_by = NULL
             WHERE entity = $1
             RETURNING moderation_version, override_until AS "override_until!""#,
            action.entity,
            action.previous_status,
            interval(override_for),
            moderator,
            reason,
        )
        .fetch_one(&mut *self.tx)
        .await?;
        let action = sqlx::query_as!(
            ActionRecord,
            "UPDATE actions SET reversed_at = now(), reversed_by = $2, reversal_reason = $3,
                    reversal_source = $4
             WHERE id = $1
             RETURNING id, entity, action, rule, reason, previous_status, new_status,
                       applied_version, dedup_key, created_at, snapshot, reversed_at, reversed_by,
                       reversal_reason, reversal_source, rules_version",
            id,
            moderator,
            reason,
            source,
        )
        .fetch_one(&mut *self.tx)
        .await?;
        let new_version = entity_row.moderation_version;
        // The reversal's own webhook first, then the appeal's outcome and any statement (the
        // outbox delivers an entity's rows in the order they are written).
        let reversed = ActionReversed {
            action_id: id,
            entity: action.entity.clone(),
            action: action.action.clone(),
            rule: action.rule.clone(),
            status: action.previous_status.clone(),
            moderator: moderator.to_owned(),
            reason: reason.to_owned(),
            moderation_version: new_version,
            source,
        };
        enqueue(
            &mut self.tx,
            &format!("reversal:{}", action.dedup_key),
            &reversed,
        )
        .await?;
        if let Some(appeal) = appeal {
            let decided = DecidedAppeal {
                id: appeal,
                by,
                decision: AppealDecision::Upheld,
                reason,
                reversal: Some(id),
            };
            decide_appeal_in(&mut self.tx, &decided).await?;
        }
        let restored = Status::parse(&action.previous_status)
            .map_err(|e| StoreError::corrupt(format!("the previous status of action {id}"), e))?;
        if let Some(draft) = statement {
            let issued = IssuedStatement {
                draft,
                entity: &action.entity,
                action_id: None,
                rule: None,
                decided_by: DecidedBy::Reversal,
                previous_status: &action.new_status,
                status: restored.as_str(),
            };
            issue_in(&mut self.tx, issued, submit).await?;
        }
        if action.action == "review" {
            // A moderator's queue decision undone: its item waits again, undecided.
            sqlx::query!(
                "UPDATE actions SET reviewed_at = NULL, reviewed_by = NULL, review_decision = NULL,
                        review_reason = NULL, review_action = NULL
                 WHERE id = ($1::jsonb ->> 'review_item')::int8 AND review_action = $2",
                action.snapshot,
                id,
            )
            .execute(&mut *self.tx)
            .await?;
        }
        let override_until = entity_row.override_until;
        record_decision(
            &mut self.tx,
            &ModeratorDecision {
                entity: &action.entity,
                kind: "reversal",
                action_id: Some(id),
                moderator,
                reason,
                status: &action.previous_status,
                until: Some(override_until),
            },
        )
        .await?;
        record_audit_in(
            &mut *self.tx,
            by,
            &AuditEntry {
                action: AuditAction::Reverse,
                subject: format!("action:{id}"),
                before: Some(serde_json::json!({
                    "entity": action.entity,
                    "action": action.action,
                    "rule": action.rule,
                    "status": action.new_status,
                })),
                after: Some(serde_json::json!({
                    "entity": action.entity,
                    "status": action.previous_status,
                    "override_until": override_until,
                    "reason": reason,
                    "moderation_version": new_version,
                })),
            },
        )
        .await?;
        Ok(Reversal {
            status: Status::parse(&action.previous_status).map_err(|e| {
                StoreError::corrupt(format!("the previous status of action {id}"), e)
            })?,
            moderation_version: new_version,
            override_until,
            action,
            author,
        })
    }
}

/// A moderator's override of an entity's status, to record: `status` until `until`; a timed
/// one (`timed`) also sets a timer ending at `until` that restores the status the entity had.
/// `statement`: the statement of reasons of a restricting override, written with it;
/// `appeal`: the open appeal whose upholding this override is, decided with it.
#[derive(Debug, Clone, Copy)]
pub struct StatusOverride<'a> {
    pub entity: &'a EntityId,
    pub by: &'a Actor,
    pub status: Status,
    pub until: DateTime<Utc>,
    pub reason: &'a str,
    pub timed: bool,
    pub statement: Option<&'a StatementDraft>,
    pub appeal: Option<i64>,
}

/// A moderator's decision as `moderator_decisions` records it: of `kind` (`review`,
/// `reversal`, `override`, `timer_end`), the action it wrote if any, the status it left and
/// until when automation stays off it.
#[derive(Debug, Clone, Copy)]
pub(super) struct ModeratorDecision<'a> {
    pub entity: &'a str,
    pub kind: &'a str,
    pub action_id: Option<i64>,
    pub moderator: &'a str,
    pub reason: &'a str,
    pub status: &'a str,
    pub until: Option<DateTime<Utc>>,
}

impl Tx {
    /// A moderator's decision on an entity: its status is set, its version bumped, and
    /// automation does not escalate past it until `until`; any timer in force that the
    /// override does not set ends without a restore (the moderator's decision replaces it).
    pub async fn override_entity(&mut self, request: &StatusOverride<'_>) -> Result<i64> {
        let StatusOverride {
            entity,
            by,
            status,
            until,
            reason,
            timed,
            statement,
            appeal,
        } = *request;
        let moderator = by.name.as_str();
        let before = sqlx::query!(
            "SELECT status, moderation_version, override_status, override_until FROM entities
             WHERE entity = $1 FOR UPDATE",
            entity.as_str(),
        )
        .fetch_optional(&mut *self.tx)
        .await?;
        // The right-hand sides read the row as it was: the timer restores the old status.
        let version = sqlx::query_scalar!(
            "UPDATE entities SET
                 status = $2,
                 moderation_version = moderation_version + 1,
                 override_status = $2,
                 override_until = $3,
                 override_by = $4,
                 override_reason = $5,
                 timer_ends_at = CASE WHEN $6 THEN $3::timestamptz END,
                 timer_restores_to = CASE WHEN $6 THEN status END,
                 timer_action = NULL,
                 timer_set_by = CASE WHEN $6 THEN $7 END
             WHERE entity = $1
             RETURNING moderation_version",
            entity.as_str(),
            status.as_str(),
            until,
            moderator,
            reason,
            timed,
            crate::domain::OVERRIDE_TIMER,
        )
        .fetch_optional(&mut *self.tx)
        .await?
        .ok_or_else(|| {
            StoreError::NotFound(format!("no events were ever recorded for {entity}"))
        })?;
        // The platform hears of the override before its statement (the outbox delivers an
        // entity's rows in the order they are written).
        let overridden = EntityOverridden {
            entity: entity.clone(),
            status,
            until,
            timed,
            moderator: moderator.to_owned(),
            reason: reason.to_owned(),
            moderation_version: version,
        };
        enqueue(
            &mut self.tx,
            &format!("override:{entity}:{version}"),
            &overridden,
        )
        .await?;
        if let (Some(draft), Some(found)) = (statement, &before) {
            let issued = IssuedStatement {
                draft,
                entity: entity.as_str(),
                action_id: None,
                rule: None,
                decided_by: DecidedBy::Override,
                previous_status: &found.status,
                status: status.as_str(),
            };
            issue_in(&mut self.tx, issued, self.submit_statements).await?;
        }
        if let Some(appeal) = appeal {
            let decided = DecidedAppeal {
                id: appeal,
                by,
                decision: AppealDecision::Upheld,
                reason,
                reversal: None,
            };
            decide_appeal_in(&mut self.tx, &decided).await?;
        }
        record_audit_in(
            &mut *self.tx,
            by,
            &AuditEntry {
                action: AuditAction::Override,
                subject: entity.to_string(),
                before: before.map(|b| {
                    serde_json::json!({
                        "status": b.status,
                        "moderation_version": b.moderation_version,
                        "override_status": b.override_status,
                        "override_until": b.override_until,
                    })
                }),
                after: Some(serde_json::json!({
                    "status": status,
                    "moderation_version": version,
                    "override_status": status,
                    "override_until": until,
                    "reason": reason,
                })),
            },
        )
        .await?;
        record_decision(
            &mut self.tx,
            &ModeratorDecision {
                entity: entity.as_str(),
                kind: "override",
                action_id: None,
                moderator,
                reason,
                status: status.as_str(),
                until: Some(until),
            },
        )
        .await?;
        Ok(version)
    }
}

/// Records `decision` in `moderator_decisions`.
pub(super) async fn record_decision(
    connection: &mut PgConnection,
    decision: &ModeratorDecision<'_>,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO moderator_decisions (entity, kind, action_id, moderator, reason, status, until)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        decision.entity,
        decision.kind,
        decision.action_id,
        decision.moderator,
        decision.reason,
        decision.status,
        decision.until,
    )
    .execute(connection)
    .await?;
    Ok(())
}
