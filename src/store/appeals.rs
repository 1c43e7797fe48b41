//! Appeals against statements' decisions (DSA Art. 20): the statements that take, lock, claim
//! and decide one, run in the appeals use case's transaction (`appeals.rs` decides the window
//! and who may claim or decide); the decision recorded with what upholding it undoes
//! (`moderation.rs`, `statements.rs`), the platform told and the audit trail written in the
//! same transaction.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;

use super::{
    Result, Store, StoreError, Tx, audit::record_audit_in, interval, outbox::enqueue,
    statements::StatementRecord,
};
use crate::domain::{Actor, AppealDecided, AuditAction, AuditEntry};

/// An appeal, with what it contests.
#[derive(Debug, Clone)]
pub struct AppealRecord {
    pub id: i64,
    pub statement_id: i64,
    pub action_id: Option<i64>,
    pub entity: String,
    pub rule: Option<String>,
    /// Who took the decision contested: `automated`, `review`, `override` or `reversal`.
    pub decided_by: String,
    /// What the decision set, and what it found.
    pub status: String,
    pub previous_status: String,
    /// The label contested, for a restricting label's statement.
    pub label: Option<String>,
    pub appellant: String,
    pub text: String,
    pub created_at: DateTime<Utc>,
    pub claimed_by: Option<String>,
    pub claim_until: Option<DateTime<Utc>>,
    pub decided_at: Option<DateTime<Utc>>,
    pub decided_by_moderator: Option<String>,
    /// `upheld` or `rejected`, once decided.
    pub outcome: Option<String>,
    pub decision_reason: Option<String>,
}

/// A moderator's decision on an appeal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AppealDecision {
    /// The appellant is right: the decision is reversed.
    Upheld,
    /// The decision stands.
    Rejected,
}

impl AppealDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            AppealDecision::Upheld => "upheld",
            AppealDecision::Rejected => "rejected",
        }
    }
}

/// An earlier appeal of a statement, as its locked row holds it: open, or rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EarlierAppeal {
    pub id: i64,
    pub rejected: bool,
}

/// An appeal as its locked row holds it: what the use case's rule reads (`appeals.rs`) before
/// the store writes. The claim shows as stored, lapsed or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedAppeal {
    pub id: i64,
    pub decided: bool,
    pub claimed_by: Option<String>,
    pub claim_until: Option<DateTime<Utc>>,
}

impl Tx {
    /// Locks the appeals of statement `statement` that are open or were rejected, oldest first:
    /// one being rejected meanwhile is read once its decision commits, as rejected.
    pub async fn lock_earlier_appeals(&mut self, statement: i64) -> Result<Vec<EarlierAppeal>> {
        Ok(sqlx::query_as!(
            EarlierAppeal,
            r#"SELECT id, outcome IS NOT NULL AS "rejected!" FROM appeals
               WHERE statement_id = $1 AND (decided_at IS NULL OR outcome = 'rejected')
               ORDER BY id FOR UPDATE"#,
            statement,
        )
        .fetch_all(&mut *self.tx)
        .await?)
    }

    /// Records `appellant`'s appeal of `statement`; `None`: an open appeal of it holds the
    /// place (an appeal is open once per statement), nothing written.
    pub async fn insert_appeal(
        &mut self,
        statement: &StatementRecord,
        appellant: &str,
        text: &str,
    ) -> Result<Option<i64>> {
        Ok(sqlx::query_scalar!(
            "INSERT INTO appeals (statement_id, entity, appellant, text) VALUES ($1, $2, $3, $4)
             ON CONFLICT (statement_id) WHERE decided_at IS NULL DO NOTHING
             RETURNING id",
            statement.id,
            statement.entity,
            appellant,
            text,
        )
        .fetch_optional(&mut *self.tx)
        .await?)
    }

    /// The open appeal of statement `statement`.
    pub async fn open_appeal_of(&mut self, statement: i64) -> Result<i64> {
        Ok(sqlx::query_scalar!(
            "SELECT id FROM appeals WHERE statement_id = $1 AND decided_at IS NULL",
            statement,
        )
        .fetch_one(&mut *self.tx)
        .await?)
    }

    /// Locks appeal `id` until the transaction ends and reads it ([`StoreError::NotFound`]:
    /// there is none).
    pub async fn lock_appeal(&mut self, id: i64) -> Result<LockedAppeal> {
        let row = sqlx::query!(
            "SELECT decided_at, claimed_by, claim_until FROM appeals WHERE id = $1 FOR UPDATE",
            id,
        )
        .fetch_optional(&mut *self.tx)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("no appeal {id}")))?;
        Ok(LockedAppeal {
            id,
            decided: row.decided_at.is_some(),
            claimed_by: row.claimed_by,
            claim_until: row.claim_until,
        })
    }

    /// `moderator` holds appeal `id` for `claim_for` from now.
    pub async fn claim_appeal(
        &mut self,
        id: i64,
        moderator: &str,
        claim_for: std::time::Duration,
    ) -> Result<()> {
        sqlx::query!(
            "UPDATE appeals SET claimed_by = $2, claim_until = now() + $3 WHERE id = $1",
            id,
            moderator,
            interval(claim_for),
        )
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Takes label `label` off `entity`.
    pub async fn remove_label(&mut self, entity: &str, label: &str) -> Result<()> {
        sqlx::query!(
            "DELETE FROM entity_labels WHERE entity = $1 AND label = $2",
            entity,
            label,
        )
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Records the decision on open appeal `id` (see [`decide_appeal_in`]).
    pub async fn decide_appeal(&mut self, decided: &DecidedAppeal<'_>) -> Result<()> {
        decide_appeal_in(&mut self.tx, decided).await
    }
}

/// The store's handle on appeals: taken, locked, claimed and decided by `appeals.rs`'s use case (`Store::appeals`).
#[derive(Clone, Copy)]
pub struct Appeals<'a> {
    pub(super) store: &'a Store,
}

impl Appeals<'_> {
    pub async fn appeal(self, id: i64) -> Result<Option<AppealRecord>> {
        Ok(sqlx::query_as!(
            AppealRecord,
            "SELECT a.id, a.statement_id, s.action_id, a.entity, s.rule, s.decided_by, s.status,
                    s.previous_status, s.label, a.appellant, a.text, a.created_at, a.claimed_by,
                    a.claim_until, a.decided_at, a.decided_by AS decided_by_moderator, a.outcome,
                    a.decision_reason
             FROM appeals a JOIN statements s ON s.id = a.statement_id WHERE a.id = $1",
            id,
        )
        .fetch_optional(&self.store.pool)
        .await?)
    }

    /// Appeal `id`, which must exist: its absence is [`StoreError::NotFound`].
    pub async fn existing_appeal(self, id: i64) -> Result<AppealRecord> {
        self.appeal(id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("no appeal {id}")))
    }

    /// Appeals, oldest first: the open ones (`open`), the decided ones, or all.
    pub async fn list(
        self,
        open: Option<bool>,
        after: Option<i64>,
        limit: i64,
    ) -> Result<Vec<AppealRecord>> {
        Ok(sqlx::query_as!(
            AppealRecord,
            "SELECT a.id, a.statement_id, s.action_id, a.entity, s.rule, s.decided_by, s.status,
                    s.previous_status, s.label, a.appellant, a.text, a.created_at, a.claimed_by,
                    a.claim_until, a.decided_at, a.decided_by AS decided_by_moderator, a.outcome,
                    a.decision_reason
             FROM appeals a JOIN statements s ON s.id = a.statement_id
             WHERE ($1::bool IS NULL OR (a.decided_at IS NULL) = $1) AND a.id > COALESCE($2::int8, 0)
             ORDER BY a.id LIMIT $3",
            open,
            after,
            limit,
        )
        .fetch_all(&self.store.pool)
        .await?)
    }

    /// Every appeal of an entity's decisions, oldest first (for its page).
    pub async fn appeals_of_entity(self, entity: &str) -> Result<Vec<AppealRecord>> {
        Ok(sqlx::query_as!(
            AppealRecord,
            "SELECT a.id, a.statement_id, s.action_id, a.entity, s.rule, s.decided_by, s.status,
                    s.previous_status, s.label, a.appellant, a.text, a.created_at, a.claimed_by,
                    a.claim_until, a.decided_at, a.decided_by AS decided_by_moderator, a.outcome,
                    a.decision_reason
             FROM appeals a JOIN statements s ON s.id = a.statement_id
             WHERE a.entity = $1 ORDER BY a.id",
            entity,
        )
        .fetch_all(self.store.reader())
        .await?)
    }

    /// Appeals waiting, the oldest one's wait, decided over the last day and upheld among them.
    pub async fn appeal_figures(self) -> Result<AppealFigures> {
        let row = sqlx::query!(
            r#"SELECT
                 (SELECT count(*) FROM appeals WHERE decided_at IS NULL) AS "waiting!",
                 (SELECT EXTRACT(EPOCH FROM now() - min(created_at))::float8 FROM appeals
                  WHERE decided_at IS NULL) AS oldest_wait_secs,
                 (SELECT count(*) FROM appeals WHERE decided_at > now() - interval '1 day')
                     AS "decided_day!",
                 (SELECT count(*) FROM appeals WHERE decided_at > now() - interval '1 day'
                  AND outcome = 'upheld') AS "upheld_day!""#
        )
        .fetch_one(self.store.reader())
        .await?;
        Ok(AppealFigures {
            waiting: row.waiting,
            oldest_wait_secs: row.oldest_wait_secs.unwrap_or(0.0),
            decided_day: row.decided_day,
            upheld_day: row.upheld_day,
        })
    }
}

/// The appeals' figures now.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AppealFigures {
    pub waiting: i64,
    pub oldest_wait_secs: f64,
    pub decided_day: i64,
    pub upheld_day: i64,
}

/// A decision on an open appeal, to record: `by` decided `decision` for `reason`;
/// `reversal`: the action an upheld appeal reversed.
#[derive(Debug, Clone, Copy)]
pub struct DecidedAppeal<'a> {
    pub id: i64,
    pub by: &'a Actor,
    pub decision: AppealDecision,
    pub reason: &'a str,
    pub reversal: Option<i64>,
}

/// Records the decision on an open appeal, tells the platform (`appeal.decided`) and writes the
/// audit entry. [`StoreError::NotFound`]: it is not open (whoever decided it meanwhile won).
pub(super) async fn decide_appeal_in(
    connection: &mut PgConnection,
    decided: &DecidedAppeal<'_>,
) -> Result<()> {
    let DecidedAppeal {
        id,
        by,
        decision,
        reason,
        reversal,
    } = *decided;
    let row = sqlx::query!(
        "UPDATE appeals a SET decided_at = now(), decided_by = $2, outcome = $3,
                decision_reason = $4, claimed_by = NULL, claim_until = NULL
         FROM statements s
         WHERE a.id = $1 AND s.id = a.statement_id AND a.decided_at IS NULL
         RETURNING a.entity, a.statement_id, s.puid, s.action_id, a.appellant",
        id,
        by.name,
        decision.as_str(),
        reason,
    )
    .fetch_optional(&mut *connection)
    .await?
    // Whoever decided it meanwhile won; this decision's transaction writes nothing.
    .ok_or_else(|| StoreError::NotFound(format!("appeal {id} is not open")))?;
    let payload = AppealDecided {
        appeal: id,
        statement_id: row.statement_id,
        puid: row.puid,
        entity: row.entity.clone(),
        action_id: row.action_id,
        appellant: row.appellant,
        outcome: decision.as_str(),
        reason: reason.to_owned(),
        moderator: by.name.clone(),
        reversal_of: reversal,
    };
    enqueue(&mut *connection, &format!("appeal:{id}"), &payload).await?;
    record_audit_in(
        &mut *connection,
        by,
        &AuditEntry {
            action: AuditAction::AppealDecide,
            subject: format!("appeal:{id}"),
            before: Some(
                serde_json::json!({ "entity": row.entity, "statement": row.statement_id }),
            ),
            after: Some(serde_json::json!({ "outcome": decision, "reason": reason,
                                            "reversal_of": reversal })),
        },
    )
    .await?;
    Ok(())
}
