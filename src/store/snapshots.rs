//! Reading entities: the one-statement read of entity rows with their signal totals, windows
//! and distinct actors, as the read API shows them and as snapshots the rules decide on.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, NaiveDate, Utc};
use sqlx::types::Json;

use super::{
    Result, Store, StoreError,
    attribute_rows::{FoldedBuckets, FoldedNumbers, FoldedValues, UnfoldedAttributes},
    entity_or_report,
    entity_rows::{
        Actors, Decayed, EntityRow, Totals, UnfoldedSignals, WindowRows, entity_record_from,
    },
};
use crate::domain::{
    AttributeReads, Attributes, AuthorContext, DAY_WINDOWS, DAYS_KEPT, EntityId, SignalStats,
    Snapshot, SnapshotAttributes, Status, Timer, WINDOWS, Windows, parse_half_life,
};

/// An entity's row as the store reads it (the read API shows it as its `EntityView`, `http/read.rs`).
#[derive(Debug, Clone)]
pub struct EntityRecord {
    pub entity: String,
    pub kind: String,
    pub status: Status,
    pub moderation_version: i64,
    pub event_count: i64,
    pub evaluated_event_count: i64,
    /// Of `event_count`, those not folded yet.
    pub unfolded_count: i64,
    pub pending_since: Option<DateTime<Utc>>,
    pub last_event_at: DateTime<Utc>,
    pub evaluation_count: i64,
    pub last_evaluated_at: Option<DateTime<Utc>>,
    pub signals: BTreeMap<String, SignalStats>,
    pub author: Option<String>,
    /// Attribute aggregates and context, as far as they were read.
    pub attributes: SnapshotAttributes,
    /// The latest moderator override, whether or not it is still in force.
    pub override_decision: Option<Override>,
    /// The timed action in force, if any: when it ends and what its end restores.
    pub timer: Option<Timer>,
    /// Postgres' clock when this was read.
    pub read_at: DateTime<Utc>,
    /// The sender's content date (`Snapshot::content_date`).
    pub content_date: Option<NaiveDate>,
    /// When its first event was recorded.
    pub first_event_at: Option<DateTime<Utc>>,
    /// The `traceparent`s of the events received since the last evaluation, oldest first, at
    /// most 32; read only when spans are exported.
    pub traces: Vec<String>,
}

/// A moderator's decision that automation does not escalate past until it expires.
#[derive(Debug, Clone)]
pub struct Override {
    pub status: Status,
    pub until: DateTime<Utc>,
    pub by: String,
    pub reason: String,
}

/// The store's handle on entities read as snapshots (`Store::snapshots`).
#[derive(Clone, Copy)]
pub struct Snapshots<'a> {
    pub(super) store: &'a Store,
}

impl Snapshots<'_> {
    /// Reads the entity's status, version and every signal total in one statement (one moment of
    /// the database), so the rules see one moment. `None` for an entity with no events.
    pub async fn snapshot(self, entity: &EntityId, with_actors: bool) -> Result<Option<Snapshot>> {
        Ok(self
            .many(
                &[entity.as_str()],
                with_actors,
                &Windows::ALL,
                AttributeReads::ALL,
            )
            .await?
            .into_values()
            .next())
    }

    /// Snapshots of several entities read by one statement (one moment for all of them), by
    /// entity id; an entity with no events has none.
    pub async fn many(
        self,
        entities: &[&str],
        with_actors: bool,
        windows: &Windows,
        attributes: AttributeReads,
    ) -> Result<HashMap<String, Snapshot>> {
        self.entity_records(entities, with_actors, windows, attributes)
            .await?
            .into_iter()
            .map(|record| {
                let entity = EntityId::parse(&record.entity).map_err(|e| {
                    StoreError::corrupt(format!("the entity id {:?}", record.entity), e)
                })?;
                let snapshot = Snapshot {
                    entity,
                    kind: record.kind,
                    status: record.status,
                    moderation_version: record.moderation_version,
                    event_count: record.event_count,
                    previously_evaluated: record.evaluated_event_count,
                    unfolded: record.unfolded_count,
                    override_cap: record
                        .override_decision
                        .filter(|o| o.until > record.read_at)
                        .map(|o| o.status),
                    signals: record.signals,
                    author: record
                        .author
                        .as_deref()
                        .and_then(|a| entity_or_report(a, "an entity's author")),
                    attributes: record.attributes,
                    taken_at: record.read_at,
                    timer: record.timer,
                    content_date: record.content_date,
                    first_event_at: record.first_event_at,
                    traces: record.traces,
                };
                Ok((record.entity, snapshot))
            })
            .collect()
    }

    /// The records of several entities (those that exist), read by one statement: one
    /// snapshot of the database for all of them, in a single round trip.
    pub async fn entity_records(
        self,
        entities: &[&str],
        with_actors: bool,
        windows: &Windows,
        attributes: AttributeReads,
    ) -> Result<Vec<EntityRecord>> {
        self.entity_records_on(&self.store.pool, entities, with_actors, windows, attributes)
            .await
    }

    /// As [`Snapshots::entity_records`], on `pool`: the primary's for a snapshot the rules decide
    /// on, the reader's for a page that shows an entity.
    pub(super) async fn entity_records_on(
        self,
        pool: &sqlx::PgPool,
        entities: &[&str],
        with_actors: bool,
        windows: &Windows,
        attributes: AttributeReads,
    ) -> Result<Vec<EntityRecord>> {
        // One statement sees one snapshot of the database, so each entity row, its totals, its
        // windows and (when asked) its distinct actors agree. Every figure is the folded part
        // plus the events not folded yet (the views signal_counts, bucket_counts and
        // day_counts add them).
        let window_names: Vec<&str> = WINDOWS.iter().map(|(name, _)| *name).collect();
        let window_seconds: Vec<i64> = WINDOWS.iter().map(|(_, seconds)| *seconds).collect();
        let day_names: Vec<&str> = DAY_WINDOWS.iter().map(|(name, _)| *name).collect();
        let day_counts: Vec<i32> = DAY_WINDOWS.iter().map(|(_, days)| *days as i32).collect();
        let half_lives: Vec<i64> = windows
            .half_lives
            .iter()
            .map(|name| {
                parse_half_life(name)
                    .map_err(|e| StoreError::corrupt(format!("the half-life {name:?}"), e))
            })
            .collect::<Result<_>>()?;
        let rows = sqlx::query_as!(
            EntityRow,
            r#"SELECT e.entity, e.kind, e.status, e.moderation_version,
                    e.event_count + u.n AS "event_count!", u.n AS "unfolded_count!",
                    e.evaluated_event_count,
                    coalesce(e.pending_since,
                             CASE WHEN e.event_count + u.n > e.evaluated_event_count
                                  THEN u.first_at END) AS pending_since,
                    greatest(e.last_event_at, u.last_at) AS "last_event_at!",
                    e.evaluation_count, e.last_evaluated_at, now() AS "read_at!",
                    e.override_status, e.override_until, e.override_by, e.override_reason,
                    e.timer_ends_at, e.timer_restores_to, e.timer_action, e.timer_set_by,
                    coalesce(u.author, e.author) AS author,
                    -- For statements of reasons: the sender's content date, the first event's.
                    coalesce(u.content_date, e.content_date) AS content_date,
                    e.created_at AS first_event_at,
                    -- The folded totals; the events not folded yet are added from the scan of
                    -- them below (u), not read a second time through the signal_counts view.
                    (SELECT coalesce(json_agg(json_build_array(t.signal, t.count, t.weight_sum)), '[]')
                     FROM signal_totals t WHERE t.entity = e.entity) AS "totals!: Json<Totals>",
                    coalesce(u.signals, '[]') AS "unfolded_signals!: Json<UnfoldedSignals>",
                    CASE WHEN $5 THEN
                    (SELECT coalesce(json_agg(json_build_array(w.signal, w.name, w.count, w.weight)), '[]')
                     FROM (SELECT b.signal, win.name, sum(b.count)::int8 AS count,
                                  sum(b.weight_sum) AS weight
                           FROM bucket_counts b
                           JOIN UNNEST($2::text[], $3::int8[]) AS win(name, seconds)
                             ON b.bucket_start >= date_trunc('minute', now())
                                                  - make_interval(secs => win.seconds)
                           WHERE b.entity = e.entity
                             AND b.bucket_start >= now() - interval '24 hours'
                           GROUP BY b.signal, win.name) w)
                    END AS "windows?: Json<WindowRows>",
                    CASE WHEN $6 THEN
                    (SELECT coalesce(json_agg(json_build_array(w.signal, w.name, w.count, w.weight)), '[]')
                     FROM (SELECT d.signal, win.name, sum(d.count)::int8 AS count,
                                  sum(d.weight_sum) AS weight
                           FROM day_counts d
                           JOIN UNNEST($7::text[], $8::int4[]) AS win(name, days)
                             ON d.day >= (now() AT TIME ZONE 'UTC')::date - win.days
                           WHERE d.entity = e.entity
                             AND d.day >= (now() AT TIME ZONE 'UTC')::date - ($11::int4 - 1)
                           GROUP BY d.signal, win.name) w)
                    END AS "days?: Json<WindowRows>",
                    -- Decayed counts: today's events by minute bucket, older ones by day, each
                    -- aged from the start of its bucket to the start of the current minute
                    -- (whole minutes: the same figure all minute long, as a replay reads it).
                    CASE WHEN cardinality($9::text[]) > 0 THEN
                    (SELECT coalesce(json_agg(json_build_array(x.signal, x.name, x.value)), '[]')
                     FROM (SELECT b.signal, hl.name,
                                  sum(b.count * power(0.5::float8,
                                      extract(epoch FROM date_trunc('minute', now()) - b.at)::float8
                                      / hl.seconds)) AS value
                           FROM (SELECT m.signal, m.bucket_start AS at, m.count
                                 FROM bucket_counts m
                                 WHERE m.entity = e.entity
                                   AND m.bucket_start >= date_trunc('day', now(), 'UTC')
                                 UNION ALL
                                 SELECT d.signal, d.day::timestamp AT TIME ZONE 'UTC', d.count
                                 FROM day_counts d
                                 WHERE d.entity = e.entity
                                   AND d.day < (now() AT TIME ZONE 'UTC')::date
                                   AND d.day >= (now() AT TIME ZONE 'UTC')::date
                                                - ($11::int4 - 1)) b
                           CROSS JOIN UNNEST($9::text[], $10::int8[]) AS hl(name, seconds)
                           GROUP BY b.signal, hl.name) x)
                    END AS "decayed?: Json<Decayed>",
                    CASE WHEN $4 THEN
                        (SELECT coalesce(json_agg(json_build_array(a.signal, a.actors)), '[]')
                         FROM (SELECT signal, count(DISTINCT actor) AS actors FROM events
                               WHERE entity = e.entity GROUP BY signal) a)
                    END AS "actors?: Json<Actors>",
                    -- Attribute aggregates: the folded rows (store/fold.rs) and the attributes
                    -- of the events not folded yet, each as it is; store/attribute_rows.rs adds
                    -- them up. Read only for rules that use them.
                    CASE WHEN $12 THEN
                    (SELECT coalesce(json_agg(json_build_array(f.signal, f.attribute, f.value, f.count)), '[]')
                     FROM attribute_values f WHERE f.entity = e.entity)
                    END AS "folded_values?: Json<FoldedValues>",
                    CASE WHEN $12 THEN
                    (SELECT coalesce(json_agg(json_build_array(f.signal, f.attribute, f.max, f.latest)), '[]')
                     FROM attribute_numbers f WHERE f.entity = e.entity)
                    END AS "folded_numbers?: Json<FoldedNumbers>",
                    -- The windows (1m to 24h) from the folded minute buckets, with each
                    -- bucket's age.
                    CASE WHEN $14 THEN
                    (SELECT coalesce(json_agg(json_build_array(
                                b.signal, b.attribute, b.value,
                                extract(epoch FROM date_trunc('minute', now()) - b.bucket_start)::int8,
                                b.count, b.max, b.latest)), '[]')
                     FROM attribute_buckets b
                     WHERE b.entity = e.entity AND b.bucket_start >= now() - interval '24 hours')
                    END AS "folded_buckets?: Json<FoldedBuckets>",
                    CASE WHEN $12 OR $14 THEN coalesce(u.attributes, '[]') END
                        AS "unfolded_attributes?: Json<UnfoldedAttributes>",
                    -- Context: the entity's latest, and its author's status, context and counts.
                    CASE WHEN $13 THEN
                        (SELECT c.attributes FROM entity_context c WHERE c.entity = e.entity
                         ORDER BY c.id DESC LIMIT 1)
                    END AS "context?: Json<Attributes>",
                    CASE WHEN $13 AND au.id IS NOT NULL THEN
                        json_build_object(
                            'id', au.id,
                            'status', coalesce((SELECT a.status FROM entities a
                                                WHERE a.entity = au.id), 'visible'),
                            'attributes', coalesce((SELECT c.attributes FROM entity_context c
                                                    WHERE c.entity = au.id
                                                    ORDER BY c.id DESC LIMIT 1), '{}'),
                            'counts', (SELECT coalesce(json_object_agg(t.signal, t.count), '{}')
                                       FROM signal_counts t WHERE t.entity = au.id))
                    END AS "author_context?: Json<AuthorContext>",
                    u.traces AS "traces?"
             FROM entities e
             -- The events not folded yet (store/fold.rs), in the same snapshot as the rest.
             CROSS JOIN LATERAL (
                 SELECT count(*) AS n, min(ev.received_at) AS first_at,
                        max(ev.received_at) AS last_at,
                        (array_agg(ev.author ORDER BY ev.xid DESC)
                             FILTER (WHERE ev.author IS NOT NULL))[1] AS author,
                        (array_agg(ev.attributes ->> 'content_date'
                                   ORDER BY ev.xid DESC, ev.id DESC)
                             FILTER (WHERE ev.attributes ? 'content_date'))[1] AS content_date,
                        json_agg(json_build_array(ev.signal, ev.weight)) AS signals,
                        -- Their attributes, as they are, for store/attribute_rows.rs: in the
                        -- same scan of the entity's unfolded events.
                        json_agg(json_build_array(
                                     ev.signal, ev.attributes - 'content_date',
                                     extract(epoch FROM date_trunc('minute', now())
                                                        - date_trunc('minute', ev.received_at))::int8,
                                     ev.received_at >= now() - interval '24 hours')
                                 ORDER BY ev.xid, ev.id)
                            FILTER (WHERE ($12 OR $14) AND ev.attributes IS NOT NULL) AS attributes,
                        -- The trace contexts of those received since the last evaluation
                        -- (unfolded events go back further), oldest first, when spans are
                        -- exported: the traces the evaluation continues and follows from.
                        (array_agg(ev.traceparent ORDER BY ev.xid, ev.id)
                             FILTER (WHERE $15 AND ev.traceparent IS NOT NULL
                                       AND ev.received_at
                                           > coalesce(e.last_evaluated_at, '-infinity')))[1:32]
                            AS traces
                 FROM events ev WHERE ev.entity = e.entity AND ev.xid >= e.folded_horizon
             ) u
             CROSS JOIN LATERAL (SELECT coalesce(u.author, e.author) AS id) au
             WHERE e.entity = ANY($1)"#,
            entities as &[&str],
            &window_names as &[&str],
            &window_seconds,
            with_actors,
            windows.minutes,
            windows.days,
            &day_names as &[&str],
            &day_counts,
            &windows.half_lives,
            &half_lives,
            DAYS_KEPT as i32,
            attributes.events,
            attributes.context,
            attributes.windows,
            crate::telemetry::traces::exporting(),
        )
        .fetch_all(pool)
        .await?;
        rows.into_iter()
            .map(|row| entity_record_from(row, windows, attributes))
            .collect()
    }
}
