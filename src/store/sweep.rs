//! The repair sweep's reads: the sweep lock, the mark of entities with unevaluated events, and
//! the entities owed an evaluation.

use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};

use super::{Result, Store, interval};

/// Entities one short transaction of the mark updates.
const MARK_CHUNK: usize = 500;

/// Where the repair sweep continues: the last (pending since, entity) it examined.
pub type SweepCursor = (DateTime<Utc>, String);

/// The store's handle on the repair sweep's reads (`Store::sweep`).
#[derive(Clone, Copy)]
pub struct Sweep<'a> {
    pub(super) store: &'a Store,
}

impl Sweep<'_> {
    /// Takes the sweep lock for this key (one sweep at a time across processes) and returns
    /// the transaction holding it; `None` if another process is sweeping.
    pub async fn begin_sweep(
        self,
        lock_name: &str,
    ) -> Result<Option<Transaction<'static, Postgres>>> {
        let mut tx = self.store.pool.begin().await?;
        let locked = sqlx::query_scalar!(
            r#"SELECT pg_try_advisory_xact_lock(hashtext($1)) AS "locked!""#,
            lock_name
        )
        .fetch_one(&mut *tx)
        .await?;
        Ok(locked.then_some(tx))
    }

    /// Marks pending every entity with an event received since the last mark that no
    /// evaluation has seen yet, reading at most `span` of receive time; returns how many were
    /// marked. Ingest does not write an entity row it already made, so this is how an entity
    /// whose schedule Redis lost after its first event is found again.
    ///
    /// The read goes up to the start of the oldest transaction still open in the database (and
    /// no later than `grace` ago): an event's `received_at` is its transaction's start, so every
    /// event before that bound is committed and seen, and the next mark starts there.
    ///
    /// The entities found are marked in short transactions of their own, [`MARK_CHUNK`] at a
    /// time, before the sweep's transaction moves the mark on. An entity row updated by a
    /// transaction still open makes ingest's insert of the entity wait for it (its uniqueness
    /// check waits for the updater), so marking inside the sweep's transaction held every
    /// group that sent an event for a marked entity until the whole pass committed: seconds
    /// under sustained load. A mark that commits while the pass fails later is harmless: the
    /// next pass reads the same span again and marks nothing twice.
    pub async fn mark_unevaluated(
        self,
        tx: &mut Transaction<'static, Postgres>,
        grace: std::time::Duration,
        span: std::time::Duration,
    ) -> Result<u64> {
        // First, alone: the bound. The next statement's snapshot is taken after it, so a
        // transaction that was open here started at or after the bound.
        let window = sqlx::query!(
            r#"SELECT m.scanned_to AS "from!",
                      least(now() - $1::interval, m.scanned_to + $2::interval,
                            coalesce((SELECT min(a.xact_start) FROM pg_stat_activity a
                                      WHERE a.datname = current_database()
                                        AND a.backend_type = 'client backend'
                                        AND a.pid <> pg_backend_pid()), now())) AS "to!"
               FROM sweep_marks m WHERE m.name = 'events' FOR UPDATE"#,
            interval(grace),
            interval(span),
        )
        .fetch_one(&mut **tx)
        .await?;
        if window.to <= window.from {
            return Ok(0);
        }
        // A read: it locks nothing, however long it takes.
        let seen = sqlx::query!(
            r#"SELECT s.entity AS "entity!", s.first_at AS "first_at!" FROM (
                   SELECT ev.entity, min(ev.received_at) AS first_at FROM events ev
                   WHERE ev.received_at >= $1 AND ev.received_at < $2
                   GROUP BY ev.entity
               ) s
               JOIN entities e ON e.entity = s.entity
               JOIN entity_counts c ON c.entity = s.entity
               WHERE e.pending_since IS NULL AND c.event_count > c.evaluated_event_count
               ORDER BY s.entity"#,
            window.from,
            window.to,
        )
        .fetch_all(&mut **tx)
        .await?;
        let mut marked = 0;
        for chunk in seen.chunks(MARK_CHUNK) {
            let entities: Vec<&str> = chunk.iter().map(|row| row.entity.as_str()).collect();
            let first_at: Vec<DateTime<Utc>> = chunk.iter().map(|row| row.first_at).collect();
            let mut mark = self.store.pool.begin().await?;
            super::events::lock_in_order(&mut mark, &entities).await?;
            // The conditions again: an evaluation may have seen the events since the read.
            marked += sqlx::query!(
                r#"UPDATE entities e SET pending_since = s.first_at
                   FROM UNNEST($1::text[], $2::timestamptz[]) AS s(entity, first_at)
                   JOIN entity_counts c ON c.entity = s.entity
                   WHERE e.entity = s.entity AND e.pending_since IS NULL
                     AND c.event_count > c.evaluated_event_count"#,
                &entities as &[&str],
                &first_at,
            )
            .execute(&mut *mark)
            .await?
            .rows_affected();
            mark.commit().await?;
        }
        sqlx::query!(
            "UPDATE sweep_marks SET scanned_to = $1 WHERE name = 'events'",
            window.to
        )
        .execute(&mut **tx)
        .await?;
        Ok(marked)
    }

    /// Entities owed an evaluation (events, folded or not, that no evaluation has seen) whose
    /// last event is older than `grace`, oldest pending first, after `cursor`.
    pub async fn owed_evaluations(
        tx: &mut Transaction<'static, Postgres>,
        grace: std::time::Duration,
        cursor: Option<&SweepCursor>,
        limit: usize,
    ) -> Result<Vec<SweepCursor>> {
        let rows = sqlx::query!(
            r#"SELECT e.pending_since AS "pending_since!", e.entity FROM entities e
             JOIN entity_counts c ON c.entity = e.entity
             WHERE e.pending_since IS NOT NULL
               AND c.event_count > c.evaluated_event_count
               AND c.last_event_at < now() - $1::interval
               AND ($2::timestamptz IS NULL OR (e.pending_since, e.entity) > ($2, $3))
             ORDER BY e.pending_since, e.entity
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
