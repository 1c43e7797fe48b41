//! Moderators' decisions: reversing an automated action, overriding an entity's status, and
//! the record of who decided what.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{Postgres, Transaction};

use super::{
    ActionRecord, Result, Store, StoreError,
    appeals::{AppealDecision, decide_appeal_in},
    audit::record_audit_in,
    evaluations::{derived_event, derived_event_id},
    events::{lock_in_order, record_in},
    interval,
    statements::{DecidedBy, IssuedStatement, issue_in},
};
use crate::domain::{Actor, AuditAction, AuditEntry, EntityId, StatementDraft, Status};

/// A reversal as recorded: the action, and the entity's state after it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Reversal {
    pub action: ActionRecord,
    pub status: Status,
    pub moderation_version: i64,
    pub override_until: DateTime<Utc>,
    /// The author whose derived signal was compensated, to be scheduled.
    #[serde(skip)]
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
}

impl Store {
    /// A moderator reverses an automated action, if `may_reverse` allows it on the action and
    /// its entity's version as their locked rows hold them (whose rule it is: `moderation.rs`):
    /// the entity's status goes back to what it was before the action, its version is bumped
    /// (an evaluation in flight then writes nothing), and an override keeps automation from
    /// redoing it for `override_for`. The reversal is recorded (who, when, why, in the audit
    /// trail too) and an outbox row tells the platform. `Ok(Err(refusal))`: the rule refused;
    /// nothing written.
    /// A reversal that restricts (it puts back a hide or a suspension: the reversal of a
    /// restore or of a moderator's approval) is a decision of its own: `explain` drafts its
    /// statement of reasons from the entity and the status it sets.
    pub async fn reverse_action<R>(
        &self,
        request: ReversalRequest<'_>,
        may_reverse: impl Fn(&LockedAction) -> std::result::Result<(), R>,
        explain: impl Fn(&str, Status) -> Option<StatementDraft>,
    ) -> Result<std::result::Result<Reversal, R>> {
        // The compensation is an event: a partition turnover is repaired and the whole
        // reversal retried.
        self.with_turnover(|| self.reverse_once(request, &may_reverse, &explain))
            .await
    }

    async fn reverse_once<R>(
        &self,
        request: ReversalRequest<'_>,
        may_reverse: &impl Fn(&LockedAction) -> std::result::Result<(), R>,
        explain: &impl Fn(&str, Status) -> Option<StatementDraft>,
    ) -> Result<std::result::Result<Reversal, R>> {
        let ReversalRequest {
            id,
            by,
            reason,
            override_for,
            appeal,
        } = request;
        let moderator = by.name.as_str();
        let mut tx = self.pool.begin().await?;
        let action = sqlx::query_as!(
            ActionRecord,
            "SELECT id, entity, action, rule, reason, previous_status, new_status, applied_version,
                    dedup_key, created_at, snapshot, reversed_at, reversed_by, reversal_reason,
                    reversal_source, rules_version
             FROM actions WHERE id = $1 FOR UPDATE",
            id,
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("no action {id}")))?;
        // The author whose derived signal this action wrote (events never change, so this is
        // read before any entity lock); both entity rows are then locked in the order ingest
        // and evaluation batches lock them, so that none of them waits on the other in a cycle.
        let author = sqlx::query_scalar!(
            "SELECT entity FROM events WHERE id = $1",
            derived_event_id(&action.dedup_key),
        )
        .fetch_optional(&mut *tx)
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
        lock_in_order(&mut tx, &entities).await?;
        let entity_version = sqlx::query_scalar!(
            "SELECT moderation_version FROM entities WHERE entity = $1",
            action.entity,
        )
        .fetch_one(&mut *tx)
        .await?;
        let locked = LockedAction {
            action,
            entity_version,
        };
        if let Err(refusal) = may_reverse(&locked) {
            return Ok(Err(refusal));
        }
        let LockedAction { action, .. } = locked;
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
                record_in(&mut tx, &[&compensation], &[], &[]).await?;
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
        .fetch_one(&mut *tx)
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
            if appeal.is_some() { "appeal" } else { "review" },
        )
        .fetch_one(&mut *tx)
        .await?;
        let new_version = entity_row.moderation_version;
        // The reversal's own webhook first, then the appeal's outcome and any statement (the
        // outbox delivers an entity's rows in the order they are written).
        sqlx::query!(
            "INSERT INTO outbox (topic, idempotency_key, payload) VALUES ('action.reversed', $1, $2)",
            format!("reversal:{}", action.dedup_key),
            serde_json::json!({
            "action_id": id,
            "entity": action.entity,
            "action": action.action,
            "rule": action.rule,
            "status": action.previous_status,
            "moderator": moderator,
            "reason": reason,
            "moderation_version": new_version,
            "source": if appeal.is_some() { "appeal" } else { "review" },
            }),
        )
        .execute(&mut *tx)
        .await?;
        if let Some(appeal) = appeal {
            decide_appeal_in(
                &mut tx,
                appeal,
                by,
                AppealDecision::Upheld,
                reason,
                Some(id),
            )
            .await?;
        }
        let restored = Status::parse(&action.previous_status)
            .map_err(|e| StoreError::corrupt(format!("the previous status of action {id}"), e))?;
        if let Some(draft) = explain(&action.entity, restored) {
            let issued = IssuedStatement {
                draft: &draft,
                entity: &action.entity,
                action_id: None,
                rule: None,
                decided_by: DecidedBy::Reversal,
                previous_status: &action.new_status,
                status: restored.as_str(),
            };
            issue_in(&mut tx, issued, self.submits_statements()).await?;
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
            .execute(&mut *tx)
            .await?;
        }
        let override_until = entity_row.override_until;
        record_decision(
            &mut tx,
            &action.entity,
            "reversal",
            Some(id),
            moderator,
            reason,
            &action.previous_status,
            Some(override_until),
        )
        .await?;
        record_audit_in(
            &mut *tx,
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
        tx.commit().await?;
        Ok(Ok(Reversal {
            status: Status::parse(&action.previous_status).map_err(|e| {
                StoreError::corrupt(format!("the previous status of action {id}"), e)
            })?,
            moderation_version: new_version,
            override_until,
            action,
            author,
        }))
    }

    /// A moderator's decision on an entity: its status is set, its version bumped, and
    /// automation does not escalate past it until `until`. A timed override (`timed`) also
    /// sets a timer ending at `until` that restores the status the entity had; any other
    /// timer in force ends without a restore (the moderator's decision replaces it).
    /// `statement`: the statement of reasons of a restricting override, written with it;
    /// `appeal`: the open appeal whose upholding this override is, decided with it.
    #[allow(clippy::too_many_arguments)]
    pub async fn override_entity(
        &self,
        entity: &EntityId,
        by: &Actor,
        status: Status,
        until: DateTime<Utc>,
        reason: &str,
        timed: bool,
        statement: Option<&StatementDraft>,
        appeal: Option<i64>,
    ) -> Result<i64> {
        let moderator = by.name.as_str();
        let mut tx = self.pool.begin().await?;
        let before = sqlx::query!(
            "SELECT status, moderation_version, override_status, override_until FROM entities
             WHERE entity = $1 FOR UPDATE",
            entity.as_str(),
        )
        .fetch_optional(&mut *tx)
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
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| {
            StoreError::NotFound(format!("no events were ever recorded for {entity}"))
        })?;
        // The platform hears of the override before its statement (the outbox delivers an
        // entity's rows in the order they are written).
        sqlx::query!(
            "INSERT INTO outbox (topic, idempotency_key, payload) VALUES ('entity.overridden', $1, $2)",
            format!("override:{entity}:{version}"),
            serde_json::json!({
            "entity": entity,
            "status": status,
            "until": until,
            "timed": timed,
            "moderator": moderator,
            "reason": reason,
            "moderation_version": version,
            }),
        )
        .execute(&mut *tx)
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
            issue_in(&mut tx, issued, self.submits_statements()).await?;
        }
        if let Some(appeal) = appeal {
            decide_appeal_in(&mut tx, appeal, by, AppealDecision::Upheld, reason, None).await?;
        }
        record_audit_in(
            &mut *tx,
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
            &mut tx,
            entity.as_str(),
            "override",
            None,
            moderator,
            reason,
            status.as_str(),
            Some(until),
        )
        .await?;
        tx.commit().await?;
        Ok(version)
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn record_decision(
    tx: &mut Transaction<'_, Postgres>,
    entity: &str,
    kind: &str,
    action_id: Option<i64>,
    moderator: &str,
    reason: &str,
    status: &str,
    until: Option<DateTime<Utc>>,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO moderator_decisions (entity, kind, action_id, moderator, reason, status, until)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        entity,
        kind,
        action_id,
        moderator,
        reason,
        status,
        until,
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}
