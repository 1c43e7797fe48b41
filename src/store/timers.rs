//! Timers of timed actions (`domain/timer.rs`): the due timers the repair sweep schedules
//! again, and a moderator's early end of one. The end on time is the entity's evaluation
//! (`store/evaluations.rs` writes the restore behind the version fence).

use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};

use super::{
    Result, Store, StoreError,
    moderation::{ModeratorDecision, record_decision},
    outbox::enqueue,
};
use crate::domain::{ActionApplied, AppliedBy, EntityId, Status, Timer};

/// A moderator's early end of a timer, as recorded: the restore action and the entity's state.
#[derive(Debug, Clone)]
pub struct EndedTimer {
    /// The restore action.
    pub action_id: i64,
    pub status: Status,
    pub moderation_version: i64,
    /// When the timer would have ended.
    pub was_to_end_at: DateTime<Utc>,
}

/// The store's handle on timed actions' timers (`Store::timers`).
#[derive(Clone, Copy)]
pub struct Timers<'a> {
    pub(super) store: &'a Store,
}

impl Timers<'_> {
    /// Entities whose timer has ended (Postgres' clock), soonest first, at most `limit`: the
    /// repair sweep makes those Redis does not hold due now.
    pub async fn due_timers(
        tx: &mut Transaction<'static, Postgres>,
        limit: usize,
    ) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar!(
            "SELECT entity FROM entities
             WHERE timer_ends_at IS NOT NULL AND timer_ends_at <= now()
             ORDER BY timer_ends_at LIMIT $1",
            limit as i64,
        )
        .fetch_all(&mut **tx)
        .await?)
    }

    /// The entity's timer in force, if any (a restore may have put a displaced one back).
    pub async fn timer_of(self, entity: &EntityId) -> Result<Option<Timer>> {
        let row = sqlx::query!(
            r#"SELECT timer_ends_at AS "ends_at?", timer_restores_to AS "restores_to?",
                      timer_action, timer_set_by
               FROM entities WHERE entity = $1"#,
            entity.as_str(),
        )
        .fetch_optional(&self.store.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        match (row.ends_at, row.restores_to) {
            (Some(ends_at), Some(restores_to)) => Ok(Some(Timer {
                ends_at,
                restores_to: Status::parse(&restores_to)
                    .map_err(|e| StoreError::corrupt(format!("the timer of {entity}"), e))?,
                action_id: row.timer_action,
                set_by: row.timer_set_by.unwrap_or_default(),
            })),
            _ => Ok(None),
        }
    }

    /// A moderator ends the entity's timer now: the restore it would have applied at its end
    /// is applied now (an action, deduplicated, delivered and reversible like the one on time),
    /// the version bumped (an evaluation in flight then writes nothing) and the decision
    /// recorded. [`StoreError::NotFound`] if no timer is in force.
    pub async fn end_timer(
        self,
        entity: &EntityId,
        moderator: &str,
        reason: &str,
    ) -> Result<EndedTimer> {
        let mut tx = self.store.pool.begin().await?;
        let row = sqlx::query!(
            r#"SELECT status, moderation_version, timer_ends_at AS "ends_at?",
                      timer_restores_to AS "restores_to?", timer_action, timer_set_by
               FROM entities WHERE entity = $1 FOR UPDATE"#,
            entity.as_str(),
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| {
            StoreError::NotFound(format!("no events were ever recorded for {entity}"))
        })?;
        let (Some(ends_at), Some(restores_to)) = (row.ends_at, row.restores_to) else {
            return Err(StoreError::NotFound(format!(
                "{entity} has no timed action in force"
            )));
        };
        let set_by = row.timer_set_by.unwrap_or_default();
        let dedup_key = format!("restore-early:{entity}:{}", row.moderation_version);
        let snapshot = serde_json::json!({
            "entity": entity,
            "status": row.status,
            "moderation_version": row.moderation_version,
            "timer": {"ends_at": ends_at, "restores_to": restores_to,
                      "action_id": row.timer_action, "set_by": set_by},
            "ended_early_by": moderator,
        });
        let action_id = sqlx::query_scalar!(
            "INSERT INTO actions (entity, action, rule, reason, previous_status, new_status,
                                  snapshot, applied_version, dedup_key)
             VALUES ($1, 'restore', $2, $3, $4, $5, $6, $7, $8)
             RETURNING id",
            entity.as_str(),
            set_by,
            format!("ended early by {moderator}: {reason}"),
            row.status,
            restores_to,
            snapshot,
            row.moderation_version,
            dedup_key,
        )
        .fetch_one(&mut *tx)
        .await?;
        let version = sqlx::query_scalar!(
            "UPDATE entities e SET status = e.timer_restores_to,
                 moderation_version = e.moderation_version + 1,
                 -- The timer the ended one displaced, if any, is in force again.
                 timer_ends_at = (t.displaced_timer->>'ends_at')::timestamptz,
                 timer_restores_to = t.displaced_timer->>'restores_to',
                 timer_action = (t.displaced_timer->>'action_id')::int8,
                 timer_set_by = t.displaced_timer->>'set_by'
             FROM (SELECT $1::text AS entity) k
             LEFT JOIN entities o ON o.entity = k.entity
             LEFT JOIN actions t ON t.id = o.timer_action
             WHERE e.entity = k.entity
             RETURNING e.moderation_version",
            entity.as_str(),
        )
        .fetch_one(&mut *tx)
        .await?;
        let status = Status::parse(&restores_to)
            .map_err(|e| StoreError::corrupt(format!("the timer of {entity}"), e))?;
        let applied = ActionApplied {
            action_id,
            entity: entity.to_string(),
            action: "restore".to_owned(),
            rule: set_by,
            reason: format!("ended early by {moderator}: {reason}"),
            status,
            moderation_version: version,
            by: AppliedBy::Restore {},
        };
        enqueue(&mut tx, &dedup_key, &applied).await?;
        record_decision(
            &mut tx,
            &ModeratorDecision {
                entity: entity.as_str(),
                kind: "timer_end",
                action_id: Some(action_id),
                moderator,
                reason,
                status: &restores_to,
                until: None,
            },
        )
        .await?;
        tx.commit().await?;
        Ok(EndedTimer {
            action_id,
            status,
            moderation_version: version,
            was_to_end_at: ends_at,
        })
    }
}
