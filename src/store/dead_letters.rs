//! Dead letters and failure records, durable. Redis keeps a copy of both (the dead set is the
//! fast check that stops a dead entity's scheduling), but a failover or a flush may forget it;
//! this is the record the API lists and redrives from, and the one that restores Redis.
//!
//! Order of writes: a failed attempt is decided in Redis first (the Lua script checks the
//! claim token and counts the attempt atomically), then written here. When that write fails,
//! the repair sweep copies Redis' dead set into Postgres on its next pass (`sync`); a lost
//! failure record only weakens the floor of the next attempt. A redrive marks the record here
//! inside a transaction, makes the entities due in Redis, then commits: a Redis error rolls
//! the mark back.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};

use super::{Result, Store, StoreError};
use crate::{
    domain::EntityId,
    queue::{DeadLetter, DeadLetterCursor as RedisCursor, FailureRecord, Queue, QueueError},
};

/// Dead letters read, redriven or reconciled per statement.
const PAGE: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl From<sqlx::Error> for DeadLetterError {
    fn from(error: sqlx::Error) -> Self {
        DeadLetterError::Store(error.into())
    }
}

/// Position in the listing of dead letters: after this (dead-lettered at, id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetterKey {
    pub at_micros: i64,
    pub id: i64,
}

impl DeadLetterKey {
    /// `<dead-lettered at, unix microseconds>.<id>`, as [`DeadLetterKey::encode`] writes it.
    pub fn parse(raw: &str) -> Option<Self> {
        let (at, id) = raw.split_once('.')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(at) || !digits(id) {
            return None;
        }
        Some(Self {
            at_micros: at.parse().ok()?,
            id: id.parse().ok()?,
        })
    }

    pub fn encode(&self) -> String {
        format!("{}.{}", self.at_micros, self.id)
    }
}

/// A page of dead letters that are not redriven, oldest first.
#[derive(Debug, Default)]
pub struct DeadLetterRows {
    pub entries: Vec<DeadLetter>,
    pub next: Option<DeadLetterKey>,
}

/// What one reconciliation of Redis and Postgres did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetterSync {
    /// Dead letters Redis held that Postgres had not recorded (its write had failed).
    pub recorded: usize,
    /// Dead letters Redis had lost, put back in its dead set.
    pub restored: usize,
    /// The shard where the next reconciliation goes on reading Redis' dead sets.
    pub next_shard: u16,
}

/// Which shards' dead sets a reconciliation reads: `count` of them from shard `from`,
/// wrapping round after the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardWalk {
    pub from: u16,
    pub count: u16,
}

impl ShardWalk {
    /// The walk over `total` shards as at most two stretches `[from, end)` (to the last shard,
    /// then round from the first), at most `total` shards in all; and where the next walk
    /// begins.
    fn stretches(self, total: u16) -> (Vec<(u16, u16)>, u16) {
        let total = u32::from(total.max(1));
        let first = u32::from(self.from) % total;
        let to = first + u32::from(self.count).clamp(1, total);
        let mut stretches = vec![(first as u16, to.min(total) as u16)];
        if to > total {
            stretches.push((0, (to - total) as u16));
        }
        (stretches, (to % total) as u16)
    }
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

fn reason_of(record: &FailureRecord) -> &str {
    record.reason.as_deref().unwrap_or("attempts_exhausted")
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

impl From<Row> for DeadLetter {
    fn from(row: Row) -> Self {
        DeadLetter {
            entity: row.entity,
            dead_lettered_at_ms: row.dead_lettered_at.timestamp_millis(),
            record: FailureRecord {
                reason: Some(row.reason),
                last_error: row.last_error,
                attempts: row.attempts.max(0) as u32,
                first_failure_ms: row.first_failure_at.timestamp_millis(),
                last_failure_ms: row.last_failure_at.timestamp_millis(),
            },
        }
    }
}

impl Store {
    /// The failure records Postgres holds for these entities' current failure streak (one that
    /// no successful evaluation has ended): the floor their next attempt counts from.
    pub async fn failure_floors(
        &self,
        entities: &[String],
    ) -> Result<HashMap<String, FailureRecord>> {
        let rows = sqlx::query!(
            r#"SELECT f.entity, f.attempts, f.first_failure_at, f.last_failure_at, f.last_error
             FROM entity_failures f LEFT JOIN entities e ON e.entity = f.entity
             WHERE f.entity = ANY($1)
               AND (e.last_evaluated_at IS NULL OR e.last_evaluated_at < f.recorded_at)"#,
            entities,
        )
        .fetch_all(&self.pool)
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
    pub async fn record_failure(&self, entity: &str, record: &FailureRecord) -> Result<()> {
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
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records a dead letter and forgets the entity's failure record. Idempotent: nothing is
    /// written if the entity already has a dead letter that is not redriven, or any dead
    /// letter at or after this one's time (this dead-lettering is already recorded, and was
    /// perhaps redriven since). Returns whether it was written.
    pub async fn record_dead_letter(&self, dead: &DeadLetter) -> Result<bool> {
        let done = sqlx::query!(
            "WITH cleared AS (DELETE FROM entity_failures WHERE entity = $1)
             INSERT INTO dead_letters (entity, reason, attempts, first_failure_at,
                                       last_failure_at, last_error, dead_lettered_at)
             SELECT $1, $2, $3, $4, $5, $6, $7
              WHERE NOT EXISTS (SELECT 1 FROM dead_letters
                                 WHERE entity = $1 AND dead_lettered_at >= $7)
             ON CONFLICT (entity) WHERE redriven_at IS NULL DO NOTHING",
            dead.entity,
            reason_of(&dead.record),
            dead.record.attempts as i32,
            at(dead.record.first_failure_ms),
            at(dead.record.last_failure_ms),
            dead.record.last_error,
            at(dead.dead_lettered_at_ms),
        )
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records what one reap (or any batch of failed attempts) returned: dead letters (those
    /// with a reason) and the failure records of entities still retried.
    pub async fn record_failures(&self, records: &[(String, FailureRecord)]) -> Result<()> {
        for (entity, record) in records {
            if record.reason.is_some() {
                self.record_dead_letter(&DeadLetter {
                    entity: entity.clone(),
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
    pub async fn dead_letters(
        &self,
        after: Option<DeadLetterKey>,
        limit: usize,
    ) -> Result<DeadLetterRows> {
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
        .fetch_all(&self.pool)
        .await?;
        let mut page = DeadLetterRows::default();
        for row in rows.into_iter().take(limit) {
            page.next = Some(DeadLetterKey {
                at_micros: row.at_micros,
                id: row.id,
            });
            page.entries.push(row.into());
        }
        if page.entries.len() < limit {
            page.next = None;
        }
        Ok(page)
    }

    /// Redrives one entity: marks its dead letter redriven by `by` and makes it due in Redis
    /// with fresh attempts. An entity Postgres does not record as dead-lettered is redriven
    /// if Redis holds it as such (its Postgres write failed and the sweep has not copied it
    /// yet). Returns false if neither does.
    pub async fn redrive_dead_letter(
        &self,
        queue: &Queue,
        entity: &EntityId,
        by: &str,
    ) -> std::result::Result<bool, DeadLetterError> {
        let mut tx = self.pool.begin().await?;
        let marked = sqlx::query_scalar!(
            "UPDATE dead_letters SET redriven_at = now(), redriven_by = $2
             WHERE entity = $1 AND redriven_at IS NULL
             RETURNING id",
            entity.as_str(),
            by,
        )
        .fetch_optional(&mut *tx)
        .await?;
        if marked.is_none() && !queue.is_dead_lettered(entity).await? {
            return Ok(false);
        }
        forget_failures(&mut tx, &[entity.to_string()]).await?;
        queue.redrive(std::slice::from_ref(entity)).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Redrives every dead letter (of `reason`, if given), a page at a time, each page marked
    /// and made due as [`Store::redrive_dead_letter`] does. Returns how many.
    pub async fn redrive_dead_letters(
        &self,
        queue: &Queue,
        reason: Option<&str>,
        by: &str,
    ) -> std::result::Result<usize, DeadLetterError> {
        let mut redriven = 0;
        loop {
            let mut tx = self.pool.begin().await?;
            let entities = sqlx::query_scalar!(
                "UPDATE dead_letters SET redriven_at = now(), redriven_by = $3
                 WHERE id IN (SELECT id FROM dead_letters
                               WHERE redriven_at IS NULL AND ($1::text IS NULL OR reason = $1)
                               ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
                 RETURNING entity",
                reason,
                PAGE as i64,
                by,
            )
            .fetch_all(&mut *tx)
            .await?;
            if entities.is_empty() {
                return Ok(redriven);
            }
            forget_failures(&mut tx, &entities).await?;
            let parsed: Vec<EntityId> = entities
                .iter()
                .filter_map(|e| EntityId::parse(e).ok())
                .collect();
            queue.redrive(&parsed).await?;
            tx.commit().await?;
            redriven += entities.len();
            if entities.len() < PAGE {
                return Ok(redriven);
            }
        }
    }

    /// Reconciles the two copies: dead letters Redis holds that Postgres has not recorded are
    /// recorded (their write failed), then dead letters Redis lost are put back in its dead
    /// set, out of the due set (so a dead entity is not evaluated again until redriven), and
    /// failure records no longer current are deleted. Run by the repair sweep before it
    /// re-schedules anything. Redis' dead sets are read in `shards`, at most as many shards as
    /// the layout has (wrapping round after the last); the report says where the next call
    /// goes on.
    pub async fn sync_dead_letters(
        &self,
        queue: &Queue,
        shards: ShardWalk,
    ) -> std::result::Result<DeadLetterSync, DeadLetterError> {
        let (stretches, next_shard) = shards.stretches(queue.keys().shards());
        let mut report = DeadLetterSync {
            next_shard,
            ..Default::default()
        };
        for (from, end) in stretches {
            let mut cursor = Some(RedisCursor {
                shard: from,
                offset: 0,
            });
            while let Some(at) = cursor {
                let page = queue.dead_letters_before(at, PAGE, end).await?;
                for dead in &page.entries {
                    if self.record_dead_letter(dead).await? {
                        report.recorded += 1;
                    }
                }
                cursor = page.next;
            }
        }

        let mut after = 0;
        loop {
            // Locked for share while Redis is written: a redrive of one of these waits, so it
            // cannot be undone by this restore.
            let mut tx = self.pool.begin().await?;
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
                PAGE as i64,
            )
            .fetch_all(&mut *tx)
            .await?;
            let Some(last) = rows.last().map(|row| row.id) else {
                break;
            };
            let full = rows.len() == PAGE;
            let dead: Vec<DeadLetter> = rows.into_iter().map(DeadLetter::from).collect();
            report.restored += queue.restore_dead_letters(&dead).await?;
            tx.commit().await?;
            if !full {
                break;
            }
            after = last;
        }

        sqlx::query!(
            "DELETE FROM entity_failures f USING entities e
             WHERE e.entity = f.entity AND e.last_evaluated_at >= f.recorded_at"
        )
        .execute(&self.pool)
        .await?;
        Ok(report)
    }
}

/// What moving a draining layout's dead letters did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MovedDeadLetters {
    /// Put in the current layout's dead set (Postgres holds them as not redriven).
    pub moved: usize,
    /// Found in the draining layout but missing from Postgres: recorded first.
    pub recorded: usize,
    /// Taken out of the draining layout (the moved ones, and any Postgres says were redriven).
    pub forgotten: usize,
}

impl Store {
    /// The last step of a shard count change, once every process runs the new count: the
    /// draining layout's dead letters move to the current one (`quiesce shards
    /// --move-dead-letters`). Postgres decides, as in the sweep's restore: one it holds as not
    /// redriven goes to the current layout's dead set, one it says was redriven just leaves;
    /// one it lacks is recorded first. The rows are locked for share while Redis is written,
    /// so a redrive of one of them waits and then clears it in both layouts.
    pub async fn move_draining_dead_letters(
        &self,
        queue: &Queue,
    ) -> std::result::Result<MovedDeadLetters, DeadLetterError> {
        let mut report = MovedDeadLetters::default();
        loop {
            let found = queue.draining_dead_letters().await?;
            if found.is_empty() {
                return Ok(report);
            }
            for dead in &found {
                if self.record_dead_letter(dead).await? {
                    report.recorded += 1;
                }
            }
            let entities: Vec<&str> = found.iter().map(|d| d.entity.as_str()).collect();
            let mut tx = self.pool.begin().await?;
            let rows = sqlx::query_as!(
                Row,
                r#"SELECT id, entity, reason, attempts, first_failure_at, last_failure_at,
                        last_error, dead_lettered_at,
                        (extract(epoch FROM dead_lettered_at) * 1000000)::bigint AS "at_micros!"
                 FROM dead_letters
                 WHERE redriven_at IS NULL AND entity = ANY($1)
                 ORDER BY id
                 FOR SHARE"#,
                &entities as &[&str],
            )
            .fetch_all(&mut *tx)
            .await?;
            let live: Vec<DeadLetter> = rows.into_iter().map(DeadLetter::from).collect();
            let parsed: Vec<(EntityId, &DeadLetter)> = live
                .iter()
                .filter_map(|d| EntityId::parse(&d.entity).ok().map(|e| (e, d)))
                .collect();
            report.moved += queue.restore_in_current_layout(&parsed).await?;
            let read: Vec<(EntityId, i64)> = found
                .iter()
                .filter_map(|d| {
                    EntityId::parse(&d.entity)
                        .ok()
                        .map(|e| (e, d.dead_lettered_at_ms))
                })
                .collect();
            let forgotten = queue.forget_draining_dead_letters(&read).await?;
            tx.commit().await?;
            report.forgotten += forgotten;
            // What is left was dead-lettered again since it was read: the next run takes it.
            if forgotten == 0 {
                return Ok(report);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_of_the_dead_sets_goes_round_the_shards_a_stretch_at_a_time() {
        let walk = |from, count| ShardWalk { from, count }.stretches(1000);
        assert_eq!(walk(0, 128), (vec![(0, 128)], 128));
        assert_eq!(walk(900, 128), (vec![(900, 1000), (0, 28)], 28));
        assert_eq!(walk(872, 128), (vec![(872, 1000)], 0));
        // Never more than every shard once, wherever it starts.
        assert_eq!(
            ShardWalk {
                from: 2,
                count: 128
            }
            .stretches(4),
            (vec![(2, 4), (0, 2)], 2)
        );
        assert_eq!(
            ShardWalk {
                from: 7,
                count: 128
            }
            .stretches(4),
            (vec![(3, 4), (0, 3)], 3)
        );
    }

    #[test]
    fn a_cursor_reads_back_what_it_wrote_and_refuses_anything_else() {
        let key = DeadLetterKey {
            at_micros: 1_764_000_000_123_456,
            id: 42,
        };
        assert_eq!(DeadLetterKey::parse(&key.encode()), Some(key));
        for bad in ["", "1", "1.", ".1", "a.1", "1.-2", "+1.2", "1.2.3"] {
            assert_eq!(DeadLetterKey::parse(bad), None, "{bad}");
        }
    }
}
