//! The audit trail (`audit_log`): append-only in Postgres, where a trigger refuses UPDATE,
//! DELETE and TRUNCATE. Decisions that change a row here are recorded in their own
//! transaction (`record_audit_in`); the others just after they took effect.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgExecutor, types::Json};

use super::{Result, Store, interval};
use crate::domain::{Actor, AuditEntry};

/// One recorded decision, as `GET /v1/audit` and `quiesce audit` show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub credential: Option<String>,
    pub role: Option<String>,
    pub address: Option<String>,
    pub forwarded_for: Option<String>,
    pub action: String,
    pub subject: String,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
}

/// Which records to read: newest first, older than `before` (an id), at or after `since`.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub action: Option<String>,
    pub subject: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub before: Option<i64>,
    pub limit: i64,
}

/// The store's handle on the audit trail: appended to, and read a page at a time (`Store::audit`).
#[derive(Clone, Copy)]
pub struct Audit<'a> {
    pub(super) store: &'a Store,
}

impl Audit<'_> {
    /// Records a decision that already took effect.
    pub async fn record_audit(self, actor: &Actor, entry: &AuditEntry) -> Result<()> {
        record_audit_in(&self.store.pool, actor, entry).await
    }

    /// A page of the audit trail, newest first.
    pub async fn audit_page(self, filter: &AuditFilter) -> Result<Vec<AuditRecord>> {
        Ok(sqlx::query_as!(
            AuditRow,
            r#"SELECT id, at, actor, credential, role, address, forwarded_for, action, subject,
                      before AS "before: Json<serde_json::Value>",
                      after AS "after: Json<serde_json::Value>"
               FROM audit_log
               WHERE ($1::text IS NULL OR actor = $1)
                 AND ($2::text IS NULL OR action = $2)
                 AND ($3::text IS NULL OR subject = $3)
                 AND ($4::timestamptz IS NULL OR at >= $4)
                 AND ($5::int8 IS NULL OR id < $5)
               ORDER BY id DESC
               LIMIT $6"#,
            filter.actor,
            filter.action,
            filter.subject,
            filter.since,
            filter.before,
            filter.limit,
        )
        .fetch_all(self.store.reader())
        .await?
        .into_iter()
        .map(AuditRecord::from)
        .collect())
    }

    /// Removes the records older than `keep` (at least a day: the table refuses younger
    /// ones); returns how many went.
    pub async fn expire_audit(self, keep: Duration) -> Result<u64> {
        let removed = sqlx::query_scalar!(
            r#"SELECT audit_expire($1::interval) AS "removed!""#,
            interval(keep),
        )
        .fetch_one(&self.store.pool)
        .await?;
        Ok(removed.max(0) as u64)
    }
}

/// Records a decision: inside the transaction that makes it, or on its own.
pub(super) async fn record_audit_in(
    executor: impl PgExecutor<'_>,
    actor: &Actor,
    entry: &AuditEntry,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO audit_log (actor, credential, role, address, forwarded_for, action, subject,
                                before, after)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        actor.name,
        actor.credential,
        actor.role,
        actor.address,
        actor.forwarded_for,
        entry.action.as_str(),
        entry.subject,
        entry.before.as_ref().map(Json) as Option<Json<&serde_json::Value>>,
        entry.after.as_ref().map(Json) as Option<Json<&serde_json::Value>>,
    )
    .execute(executor)
    .await?;
    Ok(())
}

struct AuditRow {
    id: i64,
    at: DateTime<Utc>,
    actor: String,
    credential: Option<String>,
    role: Option<String>,
    address: Option<String>,
    forwarded_for: Option<String>,
    action: String,
    subject: String,
    before: Option<Json<serde_json::Value>>,
    after: Option<Json<serde_json::Value>>,
}

impl From<AuditRow> for AuditRecord {
    fn from(row: AuditRow) -> Self {
        Self {
            id: row.id,
            at: row.at,
            actor: row.actor,
            credential: row.credential,
            role: row.role,
            address: row.address,
            forwarded_for: row.forwarded_for,
            action: row.action,
            subject: row.subject,
            before: row.before.map(|Json(v)| v),
            after: row.after.map(|Json(v)| v),
        }
    }
}
