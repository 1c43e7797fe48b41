//! Rules versions (`rules_versions`) and which one is active (`rules_activations`, a history:
//! the newest row names it). A publish or a rollback appends to the history, records itself in
//! the audit trail and notifies every process (`NOTIFY quiesce_rules`), in one transaction; the
//! notification is delivered at commit, so a process that hears it reads the new row.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, postgres::PgListener, types::Json};

use super::{Result, Store, StoreError, audit::record_audit_in};
use crate::domain::{Actor, AuditAction, AuditEntry};

/// The channel every process listens on; the payload is the version made active.
pub const RULES_CHANNEL: &str = "quiesce_rules";

/// Which version is active, as of which activation (activations only grow: a newer one wins,
/// whatever its version's number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveMarker {
    pub activation: i64,
    pub version: i64,
}

/// One stored version, with its text, as `GET /v1/rules` shows the active one.
#[derive(Debug, Clone, PartialEq)]
pub struct RulesVersion {
    pub version: i64,
    /// Hex SHA-256 of `text`.
    pub hash: String,
    pub author: String,
    pub message: String,
    pub created_at: DateTime<Utc>,
    /// The backtest report it was published with, if any.
    pub backtest: Option<serde_json::Value>,
    pub text: String,
}

/// The active version with the activation that made it so.
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveRules {
    pub marker: ActiveMarker,
    /// How it became active (`seed`, `publish`, `rollback`), by whom and when.
    pub kind: String,
    pub activated_by: String,
    pub activated_at: DateTime<Utc>,
    pub rules: RulesVersion,
}

/// A version as the versions list shows it: without its text.
#[derive(Debug, Clone, PartialEq)]
pub struct RulesVersionSummary {
    pub version: i64,
    pub hash: String,
    pub author: String,
    pub message: String,
    pub created_at: DateTime<Utc>,
    /// Whether it is the active one.
    pub active: bool,
    pub backtest: Option<serde_json::Value>,
}

/// What a new version is: its text and hash (checked by the caller), who and why.
#[derive(Debug, Clone)]
pub struct NewRulesVersion<'a> {
    pub text: &'a str,
    pub hash: &'a str,
    pub message: &'a str,
    pub backtest: Option<&'a serde_json::Value>,
}

/// The store's handle on rules versions and which one is active (`Store::rules_versions`).
#[derive(Clone, Copy)]
pub struct RulesVersions<'a> {
    pub(super) store: &'a Store,
}

impl RulesVersions<'_> {
    /// A connection of its own (not one of the pool's) listening on [`RULES_CHANNEL`]; it
    /// reconnects and listens again by itself after a lost connection.
    pub async fn listen_for_rules(self) -> Result<PgListener> {
        let mut listener = PgListener::connect_with(&self.store.pool).await?;
        listener.listen(RULES_CHANNEL).await?;
        Ok(listener)
    }

    /// Which version is active, if any (one read of the newest activation).
    pub async fn active_rules_marker(self) -> Result<Option<ActiveMarker>> {
        Ok(sqlx::query_as!(
            ActiveMarker,
            "SELECT id AS activation, version FROM rules_activations ORDER BY id DESC LIMIT 1"
        )
        .fetch_optional(&self.store.pool)
        .await?)
    }

    /// The active version with its text, if any.
    pub async fn active_rules(self) -> Result<Option<ActiveRules>> {
        let row = sqlx::query!(
            r#"SELECT a.id AS activation, a.kind, a.author AS activated_by, a.activated_at,
                      v.version, v.text, v.hash, v.author, v.message, v.created_at,
                      v.backtest AS "backtest: Json<serde_json::Value>"
               FROM (SELECT * FROM rules_activations ORDER BY id DESC LIMIT 1) a
               JOIN rules_versions v ON v.version = a.version"#
        )
        .fetch_optional(&self.store.pool)
        .await?;
        Ok(row.map(|row| ActiveRules {
            marker: ActiveMarker {
                activation: row.activation,
                version: row.version,
            },
            kind: row.kind,
            activated_by: row.activated_by,
            activated_at: row.activated_at,
            rules: RulesVersion {
                version: row.version,
                hash: row.hash,
                author: row.author,
                message: row.message,
                created_at: row.created_at,
                backtest: row.backtest.map(|Json(v)| v),
                text: row.text,
            },
        }))
    }

    /// One stored version, with its text.
    pub async fn rules_version(self, version: i64) -> Result<Option<RulesVersion>> {
        Ok(sqlx::query_as!(
            RulesVersion,
            r#"SELECT version, hash, author, message, created_at,
                      backtest AS "backtest: serde_json::Value", text
               FROM rules_versions WHERE version = $1"#,
            version
        )
        .fetch_optional(&self.store.pool)
        .await?)
    }

    /// A page of versions, newest first, older than `before` (a version number).
    pub async fn rules_versions_page(
        self,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<RulesVersionSummary>> {
        Ok(sqlx::query_as!(
            RulesVersionSummary,
            r#"SELECT v.version, v.hash, v.author, v.message, v.created_at,
                      v.version = (SELECT version FROM rules_activations
                                   ORDER BY id DESC LIMIT 1) AS "active!",
                      v.backtest AS "backtest: serde_json::Value"
               FROM rules_versions v
               WHERE ($1::int8 IS NULL OR v.version < $1)
               ORDER BY v.version DESC
               LIMIT $2"#,
            before,
            limit,
        )
        .fetch_all(&self.store.pool)
        .await?)
    }

    /// Makes `rules` version 1 if there is no version yet (the rules file seeds an empty
    /// database); returns whether it did. Concurrent starts seed once (the table lock).
    pub async fn seed_rules(self, actor: &Actor, rules: NewRulesVersion<'_>) -> Result<bool> {
        let mut tx = self.store.pool.begin().await?;
        lock_versions(&mut tx).await?;
        let any = sqlx::query_scalar!("SELECT EXISTS (SELECT 1 FROM rules_versions) AS \"any!\"")
            .fetch_one(&mut *tx)
            .await?;
        if any {
            return Ok(false);
        }
        insert_version(&mut tx, 1, actor, &rules).await?;
        activate(&mut tx, 1, "seed", actor, rules.message).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Stores `rules` as the next version and makes it active, with its audit entry; returns
    /// the new version's number.
    pub async fn publish_rules(self, actor: &Actor, rules: NewRulesVersion<'_>) -> Result<i64> {
        let mut tx = self.store.pool.begin().await?;
        lock_versions(&mut tx).await?;
        let version = publish_in(&mut tx, actor, &rules).await?;
        tx.commit().await?;
        Ok(version)
    }

    /// Makes the stored `version` active again, as a new activation, with its audit entry.
    /// [`StoreError::NotFound`] if there is no such version.
    pub async fn activate_rules(self, actor: &Actor, version: i64, message: &str) -> Result<()> {
        let mut tx = self.store.pool.begin().await?;
        lock_versions(&mut tx).await?;
        let hash = sqlx::query_scalar!(
            "SELECT hash FROM rules_versions WHERE version = $1",
            version
        )
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("there is no rules version {version}")))?;
        let before = active_in(&mut tx).await?;
        activate(&mut tx, version, "rollback", actor, message).await?;
        let entry = AuditEntry {
            action: AuditAction::RulesRollback,
            subject: "rules".into(),
            before: before.map(|v| serde_json::json!({ "version": v })),
            after: Some(serde_json::json!({
                "version": version,
                "hash": hash,
                "message": message,
            })),
        };
        record_audit_in(&mut *tx, actor, &entry).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// Stores `rules` as the next version and makes it active, with its audit entry, in `tx`
/// (which holds [`lock_versions`]); returns the new version's number.
pub(super) async fn publish_in(
    tx: &mut PgConnection,
    actor: &Actor,
    rules: &NewRulesVersion<'_>,
) -> Result<i64> {
    let before = active_in(tx).await?;
    let version = sqlx::query_scalar!(
        "SELECT COALESCE(MAX(version), 0) + 1 AS \"next!\" FROM rules_versions"
    )
    .fetch_one(&mut *tx)
    .await?;
    insert_version(tx, version, actor, rules).await?;
    activate(tx, version, "publish", actor, rules.message).await?;
    let entry = AuditEntry {
        action: AuditAction::RulesPublish,
        subject: "rules".into(),
        before: before.map(|v| serde_json::json!({ "version": v })),
        after: Some(serde_json::json!({
            "version": version,
            "hash": rules.hash,
            "message": rules.message,
            "backtest": rules.backtest.is_some(),
        })),
    };
    record_audit_in(&mut *tx, actor, &entry).await?;
    Ok(version)
}

/// Publishes, rollbacks and the seed take turns: each reads the newest version and
/// activation and appends after them.
pub(super) async fn lock_versions(tx: &mut PgConnection) -> Result<()> {
    sqlx::query!("LOCK TABLE rules_versions, rules_activations IN EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await?;
    Ok(())
}

pub(super) async fn active_in(tx: &mut PgConnection) -> Result<Option<i64>> {
    Ok(
        sqlx::query_scalar!("SELECT version FROM rules_activations ORDER BY id DESC LIMIT 1")
            .fetch_optional(&mut *tx)
            .await?,
    )
}

async fn insert_version(
    tx: &mut PgConnection,
    version: i64,
    actor: &Actor,
    rules: &NewRulesVersion<'_>,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO rules_versions (version, text, hash, author, message, backtest)
         VALUES ($1, $2, $3, $4, $5, $6)",
        version,
        rules.text,
        rules.hash,
        actor.name,
        rules.message,
        rules.backtest.map(Json) as Option<Json<&serde_json::Value>>,
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Appends the activation and notifies every process (delivered at commit).
async fn activate(
    tx: &mut PgConnection,
    version: i64,
    kind: &str,
    actor: &Actor,
    message: &str,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO rules_activations (version, kind, author, message) VALUES ($1, $2, $3, $4)",
        version,
        kind,
        actor.name,
        message,
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "SELECT pg_notify($1, $2::int8::text)",
        RULES_CHANNEL,
        version
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}
