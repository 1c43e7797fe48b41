//! The outbox: claiming deliveries, recording their outcome, the failed deliveries and their
//! redrive, and the backlog.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, types::Json};

use super::{Result, Store, interval};
use crate::domain::{Payload, Topic};

/// The one way a row is put in the outbox: `payload`'s topic, its receiver and its fields, as
/// Rust serializes them, under `key`. The fenced statement's rows and a statement's notes, whose
/// ids the database gives in the same statement, are written there, with the topics' names bound
/// the same way (`fenced.rs`, `statements.rs`).
pub(super) async fn enqueue<P: Payload>(
    connection: &mut PgConnection,
    key: &str,
    payload: &P,
) -> Result<()> {
    sqlx::query!(
        "INSERT INTO outbox (topic, idempotency_key, payload, receiver)
         VALUES ($1, $2, $3::jsonb, $4)",
        P::TOPIC.name(),
        key,
        Json(payload) as _,
        P::TOPIC.receiver().as_str(),
    )
    .execute(connection)
    .await?;
    Ok(())
}

/// An outbox row claimed for delivery.
#[derive(Debug, Clone, Serialize)]
pub struct OutboxRow {
    pub id: i64,
    pub topic: String,
    pub idempotency_key: String,
    pub payload: serde_json::Value,
    pub attempts: i32,
    pub created_at: DateTime<Utc>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub failed_at: Option<DateTime<Utc>>,
    /// The trace the delivery continues (the span that applied the action), if any.
    #[serde(skip)]
    pub traceparent: Option<String>,
}

/// The store's handle on the outbox: deliveries claimed and their outcome recorded (`Store::outbox`).
#[derive(Clone, Copy)]
pub struct Outbox<'a> {
    pub(super) store: &'a Store,
}

impl Outbox<'_> {
    /// Claims up to `limit` outbox rows for `receiver` (`platform`, `dsa`) that are due for
    /// delivery (oldest first), counting an attempt and hiding them from other dispatchers for
    /// `claim_for`. A statement's row names it: its `statement` is read here (the
    /// Transparency Database's without quiesce's own `quiesce_` keys, with `decided_by` and
    /// `content_since` for a statement of the 2023 schema to be converted).
    ///
    /// An entity's rows go out one at a time, in the order they were written (by id): a row is
    /// not claimed while an earlier one of its entity is neither delivered nor given up, so a
    /// receiver hears of an action before its statement whatever the retries, and however
    /// many dispatchers share the work (`outbox_pending_entity_idx` answers it). A row without
    /// an entity is never held back.
    pub async fn claim_deliveries(
        self,
        receiver: &str,
        limit: usize,
        claim_for: std::time::Duration,
    ) -> Result<Vec<OutboxRow>> {
        let mut rows = sqlx::query_as!(
            OutboxRow,
            "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = now() + $2::interval
             WHERE id IN (
                 SELECT o.id FROM outbox o
                 WHERE o.receiver = $3 AND o.delivered_at IS NULL AND o.failed_at IS NULL
                   AND o.next_attempt_at <= now()
                   AND NOT EXISTS (
                       SELECT 1 FROM outbox e
                       WHERE e.receiver = o.receiver
                         AND e.payload ->> 'entity' = o.payload ->> 'entity'
                         AND e.id < o.id AND e.delivered_at IS NULL AND e.failed_at IS NULL)
                 ORDER BY o.next_attempt_at, o.id LIMIT $1 FOR UPDATE OF o SKIP LOCKED)
             RETURNING id, topic, idempotency_key,
                       CASE WHEN topic = $4 THEN
                           payload || jsonb_build_object('statement',
                               (SELECT s.body FROM statements s
                                WHERE s.id = (payload ->> 'statement_id')::int8))
                       -- The database's: without quiesce's own keys, with who decided and,
                       -- for a statement of the 2023 schema (no content date), the day of
                       -- its entity's first event: what actions/dsa.rs converts it by.
                       WHEN topic = $5 THEN
                           payload || coalesce(
                               (SELECT jsonb_build_object(
                                           'statement',
                                           s.body - ARRAY(SELECT k FROM jsonb_object_keys(s.body) k
                                                          WHERE k LIKE 'quiesce\\_%'),
                                           'decided_by', s.decided_by,
                                           'content_since',
                                           CASE WHEN NOT s.body ? 'content_date' THEN
                                               (SELECT to_char(e.created_at AT TIME ZONE 'UTC',
                                                               'YYYY-MM-DD')
                                                FROM entities e WHERE e.entity = s.entity)
                                           END)
                                FROM statements s
                                WHERE s.id = (payload ->> 'statement_id')::int8),
                               jsonb_build_object('statement', NULL))
                       ELSE payload END AS \"payload!\",
                       attempts, created_at, last_status, last_error, failed_at, traceparent",
            limit as i64,
            interval(claim_for),
            receiver,
            Topic::StatementIssued.name(),
            Topic::StatementSubmitted.name(),
        )
        .fetch_all(&self.store.pool)
        .await?;
        rows.sort_by_key(|row| row.id);
        Ok(rows)
    }

    pub async fn mark_delivered(self, id: i64, status: u16) -> Result<()> {
        sqlx::query!(
            "UPDATE outbox SET delivered_at = now(), last_status = $2, last_error = NULL WHERE id = $1",
            id,
            i32::from(status),
        )
        .execute(&self.store.pool)
        .await?;
        Ok(())
    }

    /// Records a failed attempt and the next one after `delay`; gives up (the row joins the
    /// failed deliveries) when that would fall past `horizon` since the row's horizon start.
    /// Returns whether it gave up.
    pub async fn reschedule_delivery(
        self,
        id: i64,
        status: Option<u16>,
        error: &str,
        delay: std::time::Duration,
        horizon: std::time::Duration,
    ) -> Result<bool> {
        let gave_up = sqlx::query_scalar!(
            r#"UPDATE outbox SET
                 last_status = $2,
                 last_error = $3,
                 next_attempt_at = now() + $4::interval,
                 failed_at = CASE WHEN now() + $4::interval > horizon_from + $5::interval
                                  THEN now() END
             WHERE id = $1
             RETURNING failed_at IS NOT NULL AS "gave_up!""#,
            id,
            status.map(i32::from),
            error,
            interval(delay),
            interval(horizon),
        )
        .fetch_one(&self.store.pool)
        .await?;
        Ok(gave_up)
    }

    /// Gives a delivery up at once: the receiver refused it for good (its reason in `error`).
    pub async fn fail_delivery(self, id: i64, status: u16, error: &str) -> Result<()> {
        sqlx::query!(
            "UPDATE outbox SET failed_at = now(), last_status = $2, last_error = $3 WHERE id = $1",
            id,
            i32::from(status),
            error,
        )
        .execute(&self.store.pool)
        .await?;
        Ok(())
    }

    /// Deliveries given up, oldest first.
    pub async fn failed_deliveries(self, limit: i64) -> Result<Vec<OutboxRow>> {
        Ok(sqlx::query_as!(
            OutboxRow,
            "SELECT id, topic, idempotency_key, payload, attempts, created_at, last_status,
                    last_error, failed_at, traceparent
             FROM outbox WHERE failed_at IS NOT NULL ORDER BY id LIMIT $1",
            limit,
        )
        .fetch_all(&self.store.pool)
        .await?)
    }

    /// Gives failed deliveries (all, or these ids) a new horizon, due now; returns how many.
    pub async fn redrive_deliveries(self, ids: Option<&[i64]>) -> Result<u64> {
        let done = sqlx::query!(
            "UPDATE outbox SET failed_at = NULL, next_attempt_at = now(), horizon_from = now()
             WHERE failed_at IS NOT NULL AND ($1::int8[] IS NULL OR id = ANY($1))",
            ids,
        )
        .execute(&self.store.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Outbox rows not yet delivered nor given up.
    pub async fn outbox_backlog(self) -> Result<i64> {
        Ok(sqlx::query_scalar!(
            r#"SELECT count(*) AS "backlog!" FROM outbox
             WHERE delivered_at IS NULL AND failed_at IS NULL"#,
        )
        .fetch_one(&self.store.pool)
        .await?)
    }
}
