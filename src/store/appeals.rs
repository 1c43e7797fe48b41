//! Appeals against statements' decisions (DSA Art. 20): taken within the window, claimed,
//! decided by a person; the decision recorded with what upholding it undoes (`moderation.rs`,
//! `statements.rs`), the platform told and the audit trail written in the same transaction.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;

use super::{
    Result, Store, StoreError, audit::record_audit_in, interval, statements::StatementRecord,
};
use crate::domain::{Actor, AuditAction, AuditEntry};

/// An appeal, with what it contests.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
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

/// Why an appeal was not taken or not decided.
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

impl Store {
    /// The platform forwards `appellant`'s appeal of statement `id`'s decision: refused once an
    /// appeal of it was rejected (that is final), after `window` from the statement, or while
    /// another appeal of it is open. Recorded in the audit trail under `by` (the platform's
    /// credential).
    ///
    /// These checks (the window, the rejection, the open appeal; the claim in
    /// [`lock_open_appeal`]) are decisions the store takes today, beside the writes they guard;
    /// a later change moves them out of the store into the appeals use case.
    pub async fn submit_appeal(
        &self,
        statement: &StatementRecord,
        appellant: &str,
        text: &str,
        window: std::time::Duration,
        by: &Actor,
    ) -> Result<std::result::Result<AppealRecord, AppealRefusal>> {
        let mut tx = self.pool.begin().await?;
        // A rejection is final whatever the window says. The open appeal is locked with it:
        // one being rejected meanwhile is read once its decision commits, as rejected.
        let earlier = sqlx::query!(
            r#"SELECT id, outcome IS NOT NULL AS "rejected!" FROM appeals
               WHERE statement_id = $1 AND (decided_at IS NULL OR outcome = 'rejected')
               ORDER BY id FOR UPDATE"#,
            statement.id,
        )
        .fetch_all(&mut *tx)
        .await?;
        if let Some(rejected) = earlier.iter().find(|appeal| appeal.rejected) {
            return Ok(Err(AppealRefusal::AlreadyRejected {
                statement: statement.id,
                appeal: rejected.id,
            }));
        }
        let closed_at = statement.created_at
            + chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX);
        if Utc::now() > closed_at {
            return Ok(Err(AppealRefusal::WindowClosed {
                statement: statement.id,
                closed_at,
            }));
        }
        let id = sqlx::query_scalar!(
            "INSERT INTO appeals (statement_id, entity, appellant, text) VALUES ($1, $2, $3, $4)
             ON CONFLICT (statement_id) WHERE decided_at IS NULL DO NOTHING
             RETURNING id",
            statement.id,
            statement.entity,
            appellant,
            text,
        )
        .fetch_optional(&mut *tx)
        .await?;
        let Some(id) = id else {
            let open = sqlx::query_scalar!(
                "SELECT id FROM appeals WHERE statement_id = $1 AND decided_at IS NULL",
                statement.id,
            )
            .fetch_one(&mut *tx)
            .await?;
            return Ok(Err(AppealRefusal::AlreadyOpen {
                statement: statement.id,
                appeal: open,
            }));
        };
        record_audit_in(
            &mut *tx,
            by,
            &AuditEntry {
                action: AuditAction::AppealSubmit,
                subject: format!("statement:{}", statement.id),
                before: None,
                after: Some(serde_json::json!({ "appeal": id, "entity": statement.entity })),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(Ok(self.existing_appeal(id).await?))
    }

    pub async fn appeal(&self, id: i64) -> Result<Option<AppealRecord>> {
        Ok(sqlx::query_as!(
            AppealRecord,
            "SELECT a.id, a.statement_id, s.action_id, a.entity, s.rule, s.decided_by, s.status,
                    s.previous_status, s.label, a.appellant, a.text, a.created_at, a.claimed_by,
                    a.claim_until, a.decided_at, a.decided_by AS decided_by_moderator, a.outcome,
                    a.decision_reason
             FROM appeals a JOIN statements s ON s.id = a.statement_id WHERE a.id = $1",
            id,
        )
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Appeal `id`, which must exist: its absence is [`StoreError::NotFound`].
    pub async fn existing_appeal(&self, id: i64) -> Result<AppealRecord> {
        self.appeal(id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("no appeal {id}")))
    }

    /// Appeals, oldest first: the open ones (`open`), the decided ones, or all.
    pub async fn appeals(
        &self,
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
        .fetch_all(&self.pool)
        .await?)
    }

    /// Every appeal of an entity's decisions, oldest first (for its page).
    pub async fn appeals_of_entity(&self, entity: &str) -> Result<Vec<AppealRecord>> {
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
        .fetch_all(self.reader())
        .await?)
    }

    /// `moderator` claims appeal `id` for `claim_for` (again: extends their own claim).
    pub async fn claim_appeal(
        &self,
        id: i64,
        moderator: &str,
        claim_for: std::time::Duration,
    ) -> Result<std::result::Result<AppealRecord, AppealRefusal>> {
        let mut tx = self.pool.begin().await?;
        if let Err(refusal) = lock_open_appeal(&mut tx, id, moderator).await? {
            return Ok(Err(refusal));
        }
        sqlx::query!(
            "UPDATE appeals SET claimed_by = $2, claim_until = now() + $3 WHERE id = $1",
            id,
            moderator,
            interval(claim_for),
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ok(self.existing_appeal(id).await?))
    }

    /// `by` rejects appeal `id`: recorded, final, the platform told, the audit trail written.
    pub async fn reject_appeal(
        &self,
        id: i64,
        by: &Actor,
        reason: &str,
    ) -> Result<std::result::Result<AppealRecord, AppealRefusal>> {
        let mut tx = self.pool.begin().await?;
        if let Err(refusal) = lock_open_appeal(&mut tx, id, &by.name).await? {
            return Ok(Err(refusal));
        }
        decide_appeal_in(&mut tx, id, by, AppealDecision::Rejected, reason, None).await?;
        tx.commit().await?;
        Ok(Ok(self.existing_appeal(id).await?))
    }

    /// An upheld appeal of a restricting label: the label comes off the entity (the platform
    /// told, `label.removed`) and the appeal is decided, in one transaction.
    pub async fn remove_label_upholding(
        &self,
        appeal: &AppealRecord,
        label: &str,
        by: &Actor,
        reason: &str,
    ) -> Result<std::result::Result<(), AppealRefusal>> {
        let mut tx = self.pool.begin().await?;
        if let Err(refusal) = lock_open_appeal(&mut tx, appeal.id, &by.name).await? {
            return Ok(Err(refusal));
        }
        sqlx::query!(
            "DELETE FROM entity_labels WHERE entity = $1 AND label = $2",
            appeal.entity,
            label,
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "INSERT INTO outbox (topic, idempotency_key, payload) VALUES ('label.removed', $1, $2)",
            format!("label-removed:{}", appeal.id),
            serde_json::json!({ "entity": appeal.entity, "label": label, "appeal": appeal.id,
                                "moderator": by.name, "reason": reason }),
        )
        .execute(&mut *tx)
        .await?;
        decide_appeal_in(&mut tx, appeal.id, by, AppealDecision::Upheld, reason, None).await?;
        tx.commit().await?;
        Ok(Ok(()))
    }

    /// Appeals waiting, the oldest one's wait, decided over the last day and upheld among them.
    pub async fn appeal_figures(&self) -> Result<AppealFigures> {
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
        .fetch_one(self.reader())
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AppealFigures {
    pub waiting: i64,
    pub oldest_wait_secs: f64,
    pub decided_day: i64,
    pub upheld_day: i64,
}

/// Locks appeal `id` if it is open and not claimed by someone other than `moderator`.
pub(super) async fn lock_open_appeal(
    connection: &mut PgConnection,
    id: i64,
    moderator: &str,
) -> Result<std::result::Result<(), AppealRefusal>> {
    let row = sqlx::query!(
        "SELECT decided_at, claimed_by, claim_until FROM appeals WHERE id = $1 FOR UPDATE",
        id,
    )
    .fetch_optional(&mut *connection)
    .await?
    .ok_or_else(|| StoreError::NotFound(format!("no appeal {id}")))?;
    if row.decided_at.is_some() {
        return Ok(Err(AppealRefusal::Decided(id)));
    }
    if let (Some(by), Some(until)) = (row.claimed_by, row.claim_until)
        && by != moderator
        && until > Utc::now()
    {
        return Ok(Err(AppealRefusal::ClaimedElsewhere { id, by, until }));
    }
    Ok(Ok(()))
}

/// Records the decision on a locked, open appeal, tells the platform (`appeal.decided`) and
/// writes the audit entry; `reversal`: the action an upheld appeal reversed.
pub(super) async fn decide_appeal_in(
    connection: &mut PgConnection,
    id: i64,
    by: &Actor,
    decision: AppealDecision,
    reason: &str,
    reversal: Option<i64>,
) -> Result<()> {
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

    sqlx::query!(
        "INSERT INTO outbox (topic, idempotency_key, payload) VALUES ('appeal.decided', $1, $2)",
        format!("appeal:{id}"),
        serde_json::json!({
            "appeal": id,
            "statement_id": row.statement_id,
            "puid": row.puid,
            "entity": row.entity,
            "action_id": row.action_id,
            "appellant": row.appellant,
            "outcome": decision,
            "reason": reason,
            "moderator": by.name,
            "reversal_of": reversal,
        }),
    )
    .execute(&mut *connection)
    .await?;
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
