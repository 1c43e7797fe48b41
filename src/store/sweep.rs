//! The repair sweep's reads: the sweep lock, and the entities owed an evaluation.

use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};

use super::{Result, Store, interval};

/// Where the repair sweep continues: the last (pending since, entity) it examined.
pub type SweepCursor = (DateTime<Utc>, String);

impl Store {
    /// Takes the sweep lock for this key (one sweep at a time across processes) and returns
    /// the transaction holding it; `None` if another process is sweeping.
    pub async fn begin_sweep(
        &self,
        lock_name: &str,
    ) -> Result<Option<Transaction<'static, Postgres>>> {
        let mut tx = self.pool.begin().await?;
        let locked = sqlx::query_scalar!(
            r#"SELECT pg_try_advisory_xact_lock(hashtext($1)) AS "locked!""#,
            lock_name
        )
        .fetch_one(&mut *tx)
        .await?;
        Ok(locked.then_some(tx))
    }

    /// Entities owed an evaluation (events newer than their last evaluation) whose last event
    /// is older than `grace`, oldest pending first, after `cursor`.
    pub async fn owed_evaluations(
        tx: &mut Transaction<'static, Postgres>,
        grace: std::time::Duration,
        cursor: Option<&SweepCursor>,
        limit: usize,
    ) -> Result<Vec<SweepCursor>> {
        let rows = sqlx::query!(
            r#"SELECT pending_since AS "pending_since!", entity FROM entities
             WHERE pending_since IS NOT NULL
               AND event_count > evaluated_event_count
               AND last_event_at < now() - $1::interval
               AND ($2::timestamptz IS NULL OR (pending_since, entity) > ($2, $3))
             ORDER BY pending_since, entity
             LIMIT $4"#,
            interval(grace),
            cursor.map(|c| c.0),
            cursor.map(|c| c.1.as_str()),
            limit as i64,
        )
        .fetch_all(&mut **tx)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| (row.pending_since, row.entity))
            .collect())
    }
}
