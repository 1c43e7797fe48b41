//! Dead letters and failure records, durable. Redis keeps a copy of both (the dead set is the
//! fast check that stops a dead entity's scheduling), but a failover or a flush may forget it;
//! this is the record the API lists and redrives from, and the one that restores Redis.
//!
//! What spans both (a redrive, the sweep's reconciliation) is the `dead_letters` use case's:
//! the statements here that mark or lock rows for it run in an [`Uncommitted`] transaction,
//! which it commits once Redis is written (a Redis error rolls the mark back).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};

use super::{Result, Store, Uncommitted, entity_or_report};
use crate::domain::{DeadLetter, DeadReason, EntityId, FailureRecord};

/// Position in the listing of dead letters: after this (dead-lettered at, id).
pub type DeadLetterKey = super::PageKey;

/// A page of dead letters that are not redriven, oldest first.
#[derive(Debug, Default)]
pub struct DeadLetterRows {
    pub entries: Vec<DeadLetter>,
    pub next: Option<DeadLetterKey>,
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

fn reason_of(record: &FailureRecord) -> &'static str {
    record
        .reason
        .unwrap_or(DeadReason::AttemptsExhausted)
        .as_str()
}

/// Dead letters marked redriven together.
#[derive(Debug, Default)]
pub struct MarkedPage {
    /// How many rows were marked.
    pub marked: usize,
    /// Their entities, to make due again.
    pub entities: Vec<EntityId>,
}

/// A dead letter as stored, with its place in the listing.
struct Row {
    id: i64,
    at_micros: i64,
    entity: String,
    reason: String,
    attempts: i32,
    first_failure_at: DateTime<Utc>,
    last_failure_at: DateTime<Utc>,
    last_error: String,
    dead_lettered_at: DateTime<Utc>,
}

impl Row {
    /// The dead letter the row holds; a row whose entity or reason does not parse is reported
    /// and passed over.
    fn dead_letter(self) -> Option<DeadLetter> {
        let entity = entity_or_report(&self.entity, "a dead-letter row")?;
        let reason = match DeadReason::parse(&self.reason) {
            Ok(reason) => reason,
            Err(error) => {
                tracing::error!(id = self.id, reason = %self.reason, %error, "a dead-letter row holds no known reason; passed over");
                return None;
            }
        };
        Some(DeadLetter {
            entity,
            dead_lettered_at_ms: self.dead_lettered_at.timestamp_millis(),
            record: FailureRecord {
                reason: Some(reason),
                last_error: self.last_error,
                attempts: self.attempts.max(0) as u32,
                first_failure_ms: self.first_failure_at.timestamp_millis(),
                last_failure_ms: self.last_failure_at.timestamp_millis(),
            },
        })
    }
}

/// The store's handle on dead letters and failure records, durable (`Store::dead_letters`).
#[derive(Clone, Copy)]
pub struct DeadLetters<'a> {
    pub(super) store: &'a Store,
}

impl DeadLetters<'_> {
    /// The failure records Postgres holds for these entities' current failure streak (one that
    /// no successful evaluation has ended): the floor their next attempt counts from.
    pub async fn failure_floors(
        self,
        entities: &[String],
    ) -> Result<HashMap<String, FailureRecord>> {
        let rows = sqlx::query!(
            r#"SELECT f.entity, f.attempts, f.first_failure_at, f.last_failure_at, f.last_error
             FROM entity_failures f LEFT JOIN entities e ON e.entity = f.entity
             WHERE f.entity = ANY($1)
               AND (e.last_evaluated_at IS NULL OR e.last_evaluated_at < f.recorded_at)"#,
            entities,
        )
        .fetch_all(&self.store.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let record = FailureRecord {
                    reason: None,
                    last_error: row.last_error,
                    attempts: row.attempts.max(0) as u32,
                    first_failure_ms: row.first_failure_at.timestamp_millis(),
                    last_failure_ms: row.last_failure_at.timestamp_millis(),
                };
                (row.entity, record)
            })
            .collect())
    }

    /// Records the failure record of an entity still being retried (Redis counted the attempt
    /// from the greater of its own count and the floor, so this record replaces the stored one).
    pub async fn record_failure(self, entity: &str, record: &FailureRecord) -> Result<()> {
        sqlx::query!(
            "INSERT INTO entity_failures (entity, attempts, first_failure_at, last_failure_at, last_error)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (entity) DO UPDATE SET
                 attempts = EXCLUDED.attempts,
                 first_failure_at = EXCLUDED.first_failure_at,
                 last_failure_at = EXCLUDED.last_failure_at,
                 last_error = EXCLUDED.last_error,
                 recorded_at = now()",
            entity,
            record.attempts as i32,
            at(record.first_failure_ms),
            at(record.last_failure_ms),
            record.last_error,
        )
        .execute(&self.store.pool)
        .await?;
        Ok(())
    }

    /// Records a dead letter and forgets the entity's failure record. Idempotent: nothing is
    /// written if the entity already has a dead letter that is not redriven, or any dead
    /// letter at or after this one's time (this dead-lettering is already recorded, and was
    /// perhaps redriven since). Returns whether it was written.
    pub async fn record_dead_letter(self, dead: &DeadLetter) -> Result<bool> {
        let done = sqlx::query!(
            "WITH cleared AS (DELETE FROM entity_failures WHERE entity = $1)
             INSERT INTO dead_letters (entity, reason, attempts, first_failure_at,
                                       last_failure_at, last_error, dead_lettered_at)
             SELECT $1, $2, $3, $4, $5, $6, $7
              WHERE NOT EXISTS (SELECT 1 FROM dead_letters
                                 WHERE entity = $1 AND dead_lettered_at >= $7)
             ON CONFLICT (entity) WHERE redriven_at IS NULL DO NOTHING",
            dead.entity.as_str(),
            reason_of(&dead.record),
            dead.record.attempts as i32,
            at(dead.record.first_failure_ms),
            at(dead.record.last_failure_ms),
            dead.record.last_error,
            at(dead.dead_lettered_at_ms),
        )
        .execute(&self.store.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records what one reap (or any batch of failed attempts) returned: dead letters (those
    /// with a reason) and the failure records of entities still retried.
    pub async fn record_failures(self, records: &[(String, FailureRecord)]) -> Result<()> {
        for (entity, record) in records {
            if record.reason.is_some() {
                let Some(entity) = entity_or_report(entity, "a reaped dead letter") else {
                    continue;
                };
                self.record_dead_letter(&DeadLetter {
                    entity,
                    dead_lettered_at_ms: record.last_failure_ms,
                    record: record.clone(),
                })
                .await?;
            } else {
                self.record_failure(entity, record).await?;
            }
        }
        Ok(())
    }

    /// Dead letters that are not redriven, oldest first, after `after`.
    pub async fn page(self, after: Option<DeadLetterKey>, limit: usize) -> Result<DeadLetterRows> {
        let rows = sqlx::query_as!(
            Row,
            r#"SELECT id, entity, reason, attempts, first_failure_at, last_failure_at, last_error,
                      dead_lettered_at, (extract(epoch FROM dead_lettered_at) * 1000000)::bigint AS "at_micros!"
             FROM dead_letters
             WHERE redriven_at IS NULL
               AND ($1::bigint IS NULL
                    OR (dead_lettered_at, id) > ('epoch'::timestamptz + $1::bigint * interval '1 microsecond', $2))
             ORDER BY dead_lettered_at, id
             LIMIT $3"#,
            after.map(|k| k.at_micros),
            after.map_or(0, |k| k.id),
            limit as i64 + 1,
        )
        .fetch_all(&self.store.pool)
        .await?;
        let mut page = DeadLetterRows::default();
        let taken = rows.len().min(limit);
        for row in rows.into_iter().take(limit) {
            page.next = Some(DeadLetterKey {
                at_micros: row.at_micros,
                id: row.id,
            });
            page.entries.extend(row.dead_letter());
        }
        if taken < limit {
            page.next = None;
        }
        Ok(page)
    }

    /// Marks the entity's dead letter redriven by `by` and forgets its failure record; the
    /// value says whether Postgres held a dead letter for it.
    pub async fn mark_redriven(self, entity: &EntityId, by: &str) -> Result<Uncommitted<bool>> {
        let mut tx = self.store.pool.begin().await?;
        let marked = sqlx::query_scalar!(
            "UPDATE dead_letters SET redriven_at = now(), redriven_by = $2
             WHERE entity = $1 AND redriven_at IS NULL
             RETURNING id",
            entity.as_str(),
            by,
        )
        .fetch_optional(&mut *tx)
        .await?;
        forget_failures(&mut tx, &[entity.to_string()]).await?;
        Ok(Uncommitted::new(tx, marked.is_some()))
    }

    /// Marks up to `limit` dead letters (of `reason`, if given) redriven by `by`, skipping rows
    /// another redrive holds, and forgets their failure records; the value is their entities.
    pub async fn mark_page_redriven(
        self,
        reason: Option<&str>,
        by: &str,
        limit: usize,
    ) -> Result<Uncommitted<MarkedPage>> {
        let mut tx = self.store.pool.begin().await?;
        let entities = sqlx::query_scalar!(
            "UPDATE dead_letters SET redriven_at = now(), redriven_by = $3
                 WHERE id IN (SELECT id FROM dead_letters
                               WHERE redriven_at IS NULL AND ($1::text IS NULL OR reason = $1)
                               ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
                 RETURNING entity",
            reason,
            limit as i64,
            by,
        )
        .fetch_all(&mut *tx)
        .await?;
        if !entities.is_empty() {
            forget_failures(&mut tx, &entities).await?;
        }
        let page = MarkedPage {
            marked: entities.len(),
            entities: entities
                .iter()
                .filter_map(|raw| entity_or_report(raw, "a redriven dead letter"))
                .collect(),
        };
        Ok(Uncommitted::new(tx, page))
    }

    /// Up to `limit` dead letters that are not redriven, after the row `after`, locked for
    /// share (a redrive of one of them waits until the transaction ends); rows another
    /// transaction holds are skipped. The value is the page and the id to continue after
    /// (`None`: the page is the last).
    pub async fn lock_live_dead_letters(
        self,
        after: i64,
        limit: usize,
    ) -> Result<Uncommitted<(Vec<DeadLetter>, Option<i64>)>> {
        let mut tx = self.store.pool.begin().await?;
        let rows = sqlx::query_as!(
            Row,
            r#"SELECT id, entity, reason, attempts, first_failure_at, last_failure_at,
                        last_error, dead_lettered_at,
                        (extract(epoch FROM dead_lettered_at) * 1000000)::bigint AS "at_micros!"
                 FROM dead_letters
                 WHERE redriven_at IS NULL AND id > $1
                 ORDER BY id LIMIT $2
                 FOR SHARE SKIP LOCKED"#,
            after,
            limit as i64,
        )
        .fetch_all(&mut *tx)
        .await?;
        let next = (rows.len() == limit)
            .then(|| rows.last().map(|row| row.id))
            .flatten();
        let dead = rows.into_iter().filter_map(Row::dead_letter).collect();
        Ok(Uncommitted::new(tx, (dead, next)))
    }

    /// The dead letters of these entities that are not redriven, locked for share (a redrive
    /// of one of them waits until the transaction ends).
    pub async fn lock_live_dead_letters_of(
        self,
        entities: &[&str],
    ) -> Result<Uncommitted<Vec<DeadLetter>>> {
        let mut tx = self.store.pool.begin().await?;
        let rows = sqlx::query_as!(
            Row,
            r#"SELECT id, entity, reason, attempts, first_failure_at, last_failure_at,
                        last_error, dead_lettered_at,
                        (extract(epoch FROM dead_lettered_at) * 1000000)::bigint AS "at_micros!"
                 FROM dead_letters
                 WHERE redriven_at IS NULL AND entity = ANY($1)
                 ORDER BY id
                 FOR SHARE"#,
            entities as &[&str],
        )
        .fetch_all(&mut *tx)
        .await?;
        let live = rows.into_iter().filter_map(Row::dead_letter).collect();
        Ok(Uncommitted::new(tx, live))
    }

    /// Deletes the failure records a successful evaluation has ended.
    pub async fn forget_ended_failures(self) -> Result<()> {
        sqlx::query!(
            "DELETE FROM entity_failures f USING entities e
             WHERE e.entity = f.entity AND e.last_evaluated_at >= f.recorded_at"
        )
        .execute(&self.store.pool)
        .await?;
        Ok(())
    }
}

/// Forgets failure records: the entities start again with fresh attempts.
async fn forget_failures(
    tx: &mut Transaction<'static, Postgres>,
    entities: &[String],
) -> Result<()> {
    sqlx::query!(
        "DELETE FROM entity_failures WHERE entity = ANY($1)",
        entities
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}
