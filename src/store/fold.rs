//! The fold: an entity's events not folded yet go into its count, signal totals, minute
//! buckets and day buckets, once (and its day buckets older than [`DAYS_KEPT`] days go).
//! Ingest only appends events (`store/events.rs`); the evaluation, already the entity's one
//! writer while it holds its lock, folds once its snapshot is read and only when the entity
//! gathered `FOLD_AT_LEAST` unfolded events (`evaluation/batches.rs`), so a burst's aggregation
//! costs one write per entity and signal instead of one per group commit.
//!
//! What is folded is told by transaction ids. An event carries the id of the transaction that
//! inserted it (`xid`); the entity's `folded_horizon` says that every event with a lower id is
//! in its figures. A fold takes the events from the horizon up to its snapshot's xmin (every
//! transaction below it has ended, so no event can still appear there) and moves the horizon
//! to it, in one statement holding the entity row. Events at or above the horizon are added by
//! every read (`store/snapshots.rs`), so figures are exact whether or not a fold has run.

use std::time::Duration;

use super::{Result, Store, interval, partitions::BUCKETS_KEPT};
use crate::domain::DAYS_KEPT;

/// The store's handle on the fold of an entity's events into its figures (`Store::fold`).
#[derive(Clone, Copy)]
pub struct Fold<'a> {
    pub(super) store: &'a Store,
}

impl Fold<'_> {
    /// Folds the unfolded events of those entities that have at least `at_least` of them into
    /// their figures; returns how many entities were folded. An entity whose row another
    /// transaction holds (a moderator, a completion) is left for the next fold: reads count its
    /// events meanwhile. A few unfolded events cost a read less than their fold costs a write,
    /// so the worker folds an entity only once it has gathered many (retention folds the rest).
    pub async fn entities(self, entities: &[&str], at_least: i64) -> Result<u64> {
        if entities.is_empty() {
            return Ok(0);
        }
        // Buckets only go where their partitions are kept (`store/partitions.rs`).
        let buckets_from = interval(BUCKETS_KEPT - Duration::from_secs(60));
        let folded = self
            .store
            .partitions()
            .with_turnover(|| async {
                Ok(sqlx::query_scalar!(
                    r#"WITH upto AS MATERIALIZED (
                           SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xid
                       ),
                       locked AS MATERIALIZED (
                           SELECT e.entity, e.folded_horizon AS since FROM entities e
                           WHERE e.entity = ANY($1)
                             AND (SELECT count(*) FROM (
                                      SELECT 1 FROM events ev
                                      WHERE ev.entity = e.entity
                                        AND ev.xid >= e.folded_horizon
                                        AND ev.xid < (SELECT xid FROM upto)
                                      LIMIT $3) enough) >= $3
                           ORDER BY e.entity
                           FOR UPDATE OF e SKIP LOCKED
                       ),
                       fresh AS MATERIALIZED (
                           SELECT ev.entity, ev.signal, ev.weight, ev.received_at, ev.author,
                                  ev.xid, ev.id, ev.attributes
                           FROM locked l
                           JOIN events ev ON ev.entity = l.entity AND ev.xid >= l.since
                                         AND ev.xid < (SELECT xid FROM upto)
                       ),
                       totals AS (
                           INSERT INTO signal_totals (entity, signal, count, weight_sum)
                           SELECT entity, signal, count(*), sum(weight) FROM fresh
                           GROUP BY entity, signal ORDER BY entity, signal
                           ON CONFLICT (entity, signal) DO UPDATE SET
                               count = signal_totals.count + EXCLUDED.count,
                               weight_sum = signal_totals.weight_sum + EXCLUDED.weight_sum
                       ),
                       buckets AS (
                           INSERT INTO signal_buckets (entity, signal, bucket_start, count,
                                                       weight_sum)
                           SELECT entity, signal, date_trunc('minute', received_at), count(*),
                                  sum(weight)
                           FROM fresh
                           WHERE received_at >= now() - $2::interval
                           GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
                           ON CONFLICT (entity, signal, bucket_start) DO UPDATE SET
                               count = signal_buckets.count + EXCLUDED.count,
                               weight_sum = signal_buckets.weight_sum + EXCLUDED.weight_sum
                       ),
                       -- Attributes (NULL on most events: nothing to unnest). Strings and
                       -- booleans count per value; numbers keep their largest and latest.
                       attributes AS MATERIALIZED (
                           SELECT f.entity, f.signal, a.key AS attribute, a.value, f.xid, f.id,
                                  f.received_at
                           FROM fresh f CROSS JOIN LATERAL jsonb_each(f.attributes) a
                           -- `content_date` is the entity's, not a figure (per_entity).
                           WHERE f.attributes IS NOT NULL AND a.key <> 'content_date'
                       ),
                       attribute_counts AS (
                           INSERT INTO attribute_values (entity, signal, attribute, value, count)
                           SELECT entity, signal, attribute, value #>> '{}', count(*)
                           FROM attributes WHERE jsonb_typeof(value) IN ('string', 'boolean')
                           GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
                           ON CONFLICT (entity, signal, attribute, value) DO UPDATE SET
                               count = attribute_values.count + EXCLUDED.count
                       ),
                       attribute_figures AS (
                           INSERT INTO attribute_numbers (entity, signal, attribute, max, latest)
                           SELECT entity, signal, attribute, max(value::float8),
                                  (array_agg(value::float8 ORDER BY xid DESC, id DESC))[1]
                           FROM attributes WHERE jsonb_typeof(value) = 'number'
                           GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
                           ON CONFLICT (entity, signal, attribute) DO UPDATE SET
                               max = greatest(attribute_numbers.max, EXCLUDED.max),
                               latest = EXCLUDED.latest
                       ),
                       -- The same per receive minute, for the windows (number: value '').
                       attribute_minutes AS (
                           INSERT INTO attribute_buckets (entity, signal, attribute, value,
                                                          bucket_start, count, max, latest)
                           SELECT entity, signal, attribute,
                                  CASE WHEN jsonb_typeof(value) = 'number' THEN ''
                                       ELSE value #>> '{}' END,
                                  date_trunc('minute', received_at), count(*),
                                  max(CASE WHEN jsonb_typeof(value) = 'number'
                                           THEN value::float8 END),
                                  (array_agg(CASE WHEN jsonb_typeof(value) = 'number'
                                                  THEN value::float8 END
                                             ORDER BY xid DESC, id DESC))[1]
                           FROM attributes
                           WHERE received_at >= now() - $2::interval
                           GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
                           -- A later fold's events are newer: their latest replaces the bucket's.
                           ON CONFLICT (entity, signal, attribute, value, bucket_start)
                           DO UPDATE SET
                               count = attribute_buckets.count + EXCLUDED.count,
                               max = greatest(attribute_buckets.max, EXCLUDED.max),
                               latest = coalesce(EXCLUDED.latest, attribute_buckets.latest)
                       ),
                       days AS (
                           INSERT INTO signal_days (entity, signal, day, count, weight_sum)
                           SELECT entity, signal, (received_at AT TIME ZONE 'UTC')::date,
                                  count(*), sum(weight)
                           FROM fresh
                           WHERE received_at >= date_trunc('day', now(), 'UTC')
                                                - make_interval(days => $4::int4 - 1)
                           GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
                           ON CONFLICT (entity, signal, day) DO UPDATE SET
                               count = signal_days.count + EXCLUDED.count,
                               weight_sum = signal_days.weight_sum + EXCLUDED.weight_sum
                       ),
                       -- Rows are only written here, so this bounds each entity and signal
                       -- to DAYS_KEPT of them.
                       old_days AS (
                           DELETE FROM signal_days d USING locked l
                           WHERE d.entity = l.entity
                             AND d.day < (now() AT TIME ZONE 'UTC')::date - ($4::int4 - 1)
                       ),
                       per_entity AS (
                           SELECT entity, count(*) AS n, min(received_at) AS first_at,
                                  max(received_at) AS last_at,
                                  (array_agg(author ORDER BY xid DESC)
                                       FILTER (WHERE author IS NOT NULL))[1] AS author,
                                  (array_agg(attributes ->> 'content_date'
                                             ORDER BY xid DESC, id DESC)
                                       FILTER (WHERE attributes ? 'content_date'))[1]
                                      AS content_date
                           FROM fresh GROUP BY entity
                       ),
                       updated AS (
                           UPDATE entities e SET
                               event_count = e.event_count + p.n,
                               folded_horizon = greatest(e.folded_horizon,
                                                         (SELECT xid FROM upto)),
                               pending_since = coalesce(e.pending_since, p.first_at),
                               last_event_at = greatest(e.last_event_at, p.last_at),
                               author = coalesce(p.author, e.author),
                               content_date = coalesce(p.content_date, e.content_date)
                           FROM per_entity p WHERE e.entity = p.entity
                           RETURNING 1
                       )
                       SELECT count(*) AS "folded!" FROM updated"#,
                    entities as &[&str],
                    buckets_from.clone(),
                    at_least.max(1),
                    DAYS_KEPT as i32,
                )
                .fetch_one(&self.store.pool)
                .await?)
            })
            .await?;
        Ok(folded.max(0) as u64)
    }

    /// Up to `limit` entities after `after` (in id order) with events not folded yet in this
    /// events partition (by name, as the `partitions` table lists it).
    pub(super) async fn unfolded_in(
        self,
        partition: &str,
        after: &str,
        limit: i64,
    ) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar!(
            r#"SELECT DISTINCT ev.entity AS "entity!" FROM events ev
               JOIN entities e ON e.entity = ev.entity
               WHERE ev.received_at >= (SELECT lower_bound FROM partitions WHERE name = $1)
                 AND ev.received_at < (SELECT upper_bound FROM partitions WHERE name = $1)
                 AND ev.entity > $2
                 AND ev.xid >= e.folded_horizon
               ORDER BY ev.entity
               LIMIT $3"#,
            partition,
            after,
            limit,
        )
        .fetch_all(&self.store.pool)
        .await?)
    }
}
