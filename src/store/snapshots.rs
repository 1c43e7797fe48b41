//! Reading entities: the one-statement read of entity rows with their signal totals, windows
//! and distinct actors, as the read API shows them and as snapshots the rules decide on.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::types::Json;

use super::{Result, Store, StoreError, entity_or_report};
use crate::domain::{
    AttributeReads, Attributes, AuthorContext, DAY_WINDOWS, DAYS_KEPT, EntityId, SignalStats,
    SignalTotals, Snapshot, SnapshotAttributes, Status, Timer, WINDOWS, Windows, parse_half_life,
};

/// An entity as the read API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct EntityRecord {
    pub entity: String,
    pub kind: String,
    pub status: Status,
    pub moderation_version: i64,
    pub event_count: i64,
    pub evaluated_event_count: i64,
    pub pending_since: Option<DateTime<Utc>>,
    pub last_event_at: DateTime<Utc>,
    pub evaluation_count: i64,
    pub last_evaluated_at: Option<DateTime<Utc>>,
    pub signals: BTreeMap<String, SignalStats>,
    pub author: Option<String>,
    /// Attribute aggregates and context, as far as they were read.
    #[serde(skip_serializing_if = "SnapshotAttributes::is_empty")]
    pub attributes: SnapshotAttributes,
    /// The latest moderator override, whether or not it is still in force.
    #[serde(rename = "override")]
    pub override_decision: Option<Override>,
    /// The timed action in force, if any: when it ends and what its end restores.
    pub timer: Option<Timer>,
    /// Postgres' clock when this was read.
    pub read_at: DateTime<Utc>,
}

/// A moderator's decision that automation does not escalate past until it expires.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Override {
    pub status: Status,
    pub until: DateTime<Utc>,
    pub by: String,
    pub reason: String,
}

impl Store {
    /// Reads the entity's status, version and every signal total in one statement (one moment of
    /// the database), so the rules see one moment. `None` for an entity with no events.
    pub async fn snapshot(&self, entity: &EntityId, with_actors: bool) -> Result<Option<Snapshot>> {
        Ok(self
            .snapshots(
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
    pub async fn snapshots(
        &self,
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
                };
                Ok((record.entity, snapshot))
            })
            .collect()
    }

    /// The records of several entities (those that exist), read by one statement: one
    /// snapshot of the database for all of them, in a single round trip.
    pub async fn entity_records(
        &self,
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
                    e.event_count + u.n AS "event_count!",
                    e.evaluated_event_count,
                    coalesce(e.pending_since,
                             CASE WHEN e.event_count + u.n > e.evaluated_event_count
                                  THEN u.first_at END) AS pending_since,
                    greatest(e.last_event_at, u.last_at) AS "last_event_at!",
                    e.evaluation_count, e.last_evaluated_at, now() AS "read_at!",
                    e.override_status, e.override_until, e.override_by, e.override_reason,
                    e.timer_ends_at, e.timer_restores_to, e.timer_action, e.timer_set_by,
                    coalesce(u.author, e.author) AS author,
                    (SELECT coalesce(json_agg(json_build_array(t.signal, t.count, t.weight_sum)), '[]')
                     FROM signal_counts t WHERE t.entity = e.entity) AS "totals!: Json<Totals>",
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
                    -- aged from the start of its bucket.
                    CASE WHEN cardinality($9::text[]) > 0 THEN
                    (SELECT coalesce(json_agg(json_build_array(x.signal, x.name, x.value)), '[]')
                     FROM (SELECT b.signal, hl.name,
                                  sum(b.count * power(0.5::float8,
                                      extract(epoch FROM now() - b.at)::float8
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
                    -- Attribute aggregates: the folded part (store/fold.rs) plus the events
                    -- not folded yet; read only for rules that use them.
                    CASE WHEN $12 THEN
                    (SELECT coalesce(json_agg(json_build_array(v.signal, v.attribute, v.value, v.count)), '[]')
                     FROM (SELECT x.signal, x.attribute, x.value, sum(x.count)::int8 AS count
                           FROM (SELECT f.signal, f.attribute, f.value, f.count
                                 FROM attribute_values f WHERE f.entity = e.entity
                                 UNION ALL
                                 SELECT ev.signal, a.key, a.value #>> '{}', 1
                                 FROM events ev CROSS JOIN LATERAL jsonb_each(ev.attributes) a
                                 WHERE ev.entity = e.entity AND ev.xid >= e.folded_horizon
                                   AND ev.attributes IS NOT NULL
                                   AND jsonb_typeof(a.value) IN ('string', 'boolean')) x
                           GROUP BY 1, 2, 3) v)
                    END AS "attribute_values?: Json<AttributeValues>",
                    CASE WHEN $12 THEN
                    (SELECT coalesce(json_agg(json_build_array(n.signal, n.attribute, n.max, n.latest)), '[]')
                     FROM (SELECT x.signal, x.attribute, max(x.max) AS max,
                                  (array_agg(x.latest ORDER BY x.xid DESC NULLS LAST,
                                                               x.id DESC NULLS LAST))[1] AS latest
                           FROM (SELECT f.signal, f.attribute, f.max, f.latest, NULL::xid8 AS xid,
                                        NULL::text AS id
                                 FROM attribute_numbers f WHERE f.entity = e.entity
                                 UNION ALL
                                 SELECT ev.signal, a.key, a.value::float8, a.value::float8, ev.xid,
                                        ev.id
                                 FROM events ev CROSS JOIN LATERAL jsonb_each(ev.attributes) a
                                 WHERE ev.entity = e.entity AND ev.xid >= e.folded_horizon
                                   AND ev.attributes IS NOT NULL
                                   AND jsonb_typeof(a.value) = 'number') x
                           GROUP BY 1, 2) n)
                    END AS "attribute_numbers?: Json<AttributeNumbers>",
                    -- The same per trailing window (the minute windows only), from the folded
                    -- minute buckets plus the events not folded yet.
                    CASE WHEN $14 THEN
                    (SELECT coalesce(json_agg(json_build_array(w.signal, w.attribute, w.value, w.name,
                                                               w.count, w.max)), '[]')
                     FROM (SELECT x.signal, x.attribute, x.value, win.name,
                                  sum(x.count)::int8 AS count, max(x.max) AS max
                           FROM (SELECT b.signal, b.attribute, b.value, b.bucket_start, b.count, b.max
                                 FROM attribute_buckets b
                                 WHERE b.entity = e.entity
                                   AND b.bucket_start >= now() - interval '24 hours'
                                 UNION ALL
                                 SELECT ev.signal, a.key,
                                        CASE WHEN jsonb_typeof(a.value) = 'number' THEN ''
                                             ELSE a.value #>> '{}' END,
                                        date_trunc('minute', ev.received_at), 1,
                                        CASE WHEN jsonb_typeof(a.value) = 'number'
                                             THEN a.value::float8 END
                                 FROM events ev CROSS JOIN LATERAL jsonb_each(ev.attributes) a
                                 WHERE ev.entity = e.entity AND ev.xid >= e.folded_horizon
                                   AND ev.attributes IS NOT NULL
                                   AND ev.received_at >= now() - interval '24 hours') x
                           JOIN UNNEST($2::text[], $3::int8[]) AS win(name, seconds)
                             ON win.seconds <= 86400
                            AND x.bucket_start >= date_trunc('minute', now())
                                                  - make_interval(secs => win.seconds)
                           GROUP BY 1, 2, 3, 4) w)
                    END AS "attribute_windows?: Json<AttributeWindows>",
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
                    END AS "author_context?: Json<AuthorContext>"
             FROM entities e
             -- The events not folded yet (store/fold.rs), in the same snapshot as the rest.
             CROSS JOIN LATERAL (
                 SELECT count(*) AS n, min(ev.received_at) AS first_at,
                        max(ev.received_at) AS last_at,
                        (array_agg(ev.author ORDER BY ev.xid DESC)
                             FILTER (WHERE ev.author IS NOT NULL))[1] AS author
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
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|row| entity_record_from(row, windows, attributes))
            .collect()
    }
}

/// (signal, count, weight) per signal.
type Totals = Vec<(String, i64, f64)>;
/// (signal, window, count, weight) per row; NULL when the windows were not read.
type WindowRows = Vec<(String, String, i64, f64)>;
/// (signal, distinct actors) per signal; NULL when the actors were not counted.
type Actors = Vec<(String, i64)>;
/// (signal, attribute, value, events) per value of a string or boolean attribute.
type AttributeValues = Vec<(String, String, String, i64)>;
/// (signal, attribute, max, latest) per number attribute.
type AttributeNumbers = Vec<(String, String, f64, f64)>;
/// (signal, attribute, value, window, events, max) per value ('' for a number) and window.
type AttributeWindows = Vec<(String, String, String, String, i64, Option<f64>)>;
/// (signal, half-life, decayed count) per row; NULL when no decayed count was read.
type Decayed = Vec<(String, String, f64)>;

/// An entity row as [`Store::entity_records`]' statement returns it.
struct EntityRow {
    entity: String,
    kind: String,
    status: String,
    moderation_version: i64,
    event_count: i64,
    evaluated_event_count: i64,
    pending_since: Option<DateTime<Utc>>,
    last_event_at: DateTime<Utc>,
    evaluation_count: i64,
    last_evaluated_at: Option<DateTime<Utc>>,
    read_at: DateTime<Utc>,
    override_status: Option<String>,
    override_until: Option<DateTime<Utc>>,
    override_by: Option<String>,
    override_reason: Option<String>,
    timer_ends_at: Option<DateTime<Utc>>,
    timer_restores_to: Option<String>,
    timer_action: Option<i64>,
    timer_set_by: Option<String>,
    author: Option<String>,
    totals: Json<Totals>,
    windows: Option<Json<WindowRows>>,
    days: Option<Json<WindowRows>>,
    decayed: Option<Json<Decayed>>,
    actors: Option<Json<Actors>>,
    attribute_values: Option<Json<AttributeValues>>,
    attribute_numbers: Option<Json<AttributeNumbers>>,
    attribute_windows: Option<Json<AttributeWindows>>,
    context: Option<Json<Attributes>>,
    author_context: Option<Json<AuthorContext>>,
}

/// The figures of a row's signals that [`Store::entity_records`] read.
struct Figures {
    totals: Json<Totals>,
    windows: Option<Json<WindowRows>>,
    days: Option<Json<WindowRows>>,
    decayed: Option<Json<Decayed>>,
    actors: Option<Json<Actors>>,
}

/// The signal figures of an entity row read by [`Store::entity_records`]: totals (the folded
/// part plus the events not folded yet), the windows and decayed counts asked for and, when
/// read, distinct actors, each a JSON array of tuples. A figure read and found empty is 0, so
/// that a snapshot tells what was read (and a backtest what it may replay).
fn signal_stats_from(figures: Figures, read: &Windows) -> BTreeMap<String, SignalStats> {
    let Json(totals) = figures.totals;
    let mut stats: BTreeMap<String, SignalStats> = BTreeMap::new();
    let minutes = WINDOWS.iter().filter(|_| read.minutes);
    let days = DAY_WINDOWS.iter().filter(|_| read.days);
    for (signal, count, weight) in totals {
        let entry = stats.entry(signal).or_default();
        entry.count = count;
        entry.weight = weight;
        for (name, _) in minutes.clone().chain(days.clone()) {
            entry
                .windows
                .insert((*name).to_owned(), SignalTotals::default());
        }
        for half_life in &read.half_lives {
            entry.decayed.insert(half_life.clone(), 0.0);
        }
    }
    if let Some(Json(actors)) = figures.actors {
        for stat in stats.values_mut() {
            stat.actors = Some(0);
        }
        for (signal, count) in actors {
            stats.entry(signal).or_default().actors = Some(count);
        }
    }
    let windows = [figures.windows, figures.days].into_iter().flatten();
    for (signal, window, count, weight) in windows.flat_map(|Json(w)| w) {
        stats
            .entry(signal)
            .or_default()
            .windows
            .insert(window, SignalTotals { count, weight });
    }
    for (signal, half_life, value) in figures.decayed.map(|Json(d)| d).unwrap_or_default() {
        stats
            .entry(signal)
            .or_default()
            .decayed
            .insert(half_life, value);
    }
    stats
}

/// The attribute figures of an entity row, as far as they were read.
fn attributes_from(
    read: AttributeReads,
    values: Option<Json<AttributeValues>>,
    numbers: Option<Json<AttributeNumbers>>,
    windows: Option<Json<AttributeWindows>>,
    context: Option<Json<Attributes>>,
    author: Option<Json<AuthorContext>>,
) -> SnapshotAttributes {
    let mut attributes = SnapshotAttributes {
        read,
        context: context.map(|Json(c)| c).unwrap_or_default(),
        author: author.map(|Json(a)| a),
        ..Default::default()
    };
    for (signal, attribute, value, count) in values.map(|Json(v)| v).unwrap_or_default() {
        let stats = attributes.events.entry(signal).or_default();
        stats
            .entry(attribute)
            .or_default()
            .values
            .insert(value, count);
    }
    for (signal, attribute, max, latest) in numbers.map(|Json(n)| n).unwrap_or_default() {
        let stats = attributes.events.entry(signal).or_default();
        let stats = stats.entry(attribute).or_default();
        stats.max = Some(max);
        stats.latest = Some(latest);
    }
    for (signal, attribute, value, window, count, max) in
        windows.map(|Json(w)| w).unwrap_or_default()
    {
        let stats = attributes.events.entry(signal).or_default();
        let window = stats
            .entry(attribute)
            .or_default()
            .windows
            .entry(window)
            .or_default();
        match max {
            Some(max) => window.max = Some(max),
            None => {
                window.values.insert(value, count);
            }
        }
    }
    attributes
}

/// An entity row as read by [`Store::entity_records`].
fn entity_record_from(
    row: EntityRow,
    read: &Windows,
    reads: AttributeReads,
) -> Result<EntityRecord> {
    let attributes = attributes_from(
        reads,
        row.attribute_values,
        row.attribute_numbers,
        row.attribute_windows,
        row.context,
        row.author_context,
    );
    let signals = signal_stats_from(
        Figures {
            totals: row.totals,
            windows: row.windows,
            days: row.days,
            decayed: row.decayed,
            actors: row.actors,
        },
        read,
    );
    let entity = row.entity;
    let timer = match (row.timer_ends_at, row.timer_restores_to) {
        (Some(ends_at), Some(restores_to)) => Some(Timer {
            ends_at,
            restores_to: Status::parse(&restores_to).map_err(|e| {
                StoreError::corrupt(format!("the status the timer of {entity} restores"), e)
            })?,
            action_id: row.timer_action,
            set_by: row.timer_set_by.unwrap_or_default(),
        }),
        _ => None,
    };
    Ok(EntityRecord {
        timer,
        status: Status::parse(&row.status)
            .map_err(|e| StoreError::corrupt(format!("the status of entity {entity}"), e))?,
        override_decision: override_from(
            &entity,
            row.override_status,
            row.override_until,
            row.override_by,
            row.override_reason,
        )?,
        entity,
        kind: row.kind,
        moderation_version: row.moderation_version,
        evaluated_event_count: row.evaluated_event_count,
        pending_since: row.pending_since,
        last_event_at: row.last_event_at,
        evaluation_count: row.evaluation_count,
        last_evaluated_at: row.last_evaluated_at,
        signals,
        author: row.author,
        attributes,
        read_at: row.read_at,
        event_count: row.event_count,
    })
}

/// The latest override of the entity, if one was ever set (status and expiry both present).
fn override_from(
    entity: &str,
    status: Option<String>,
    until: Option<DateTime<Utc>>,
    by: Option<String>,
    reason: Option<String>,
) -> Result<Option<Override>> {
    match (status, until) {
        (Some(status), Some(until)) => Ok(Some(Override {
            status: Status::parse(&status).map_err(|e| {
                StoreError::corrupt(format!("the override status of entity {entity}"), e)
            })?,
            until,
            by: by.unwrap_or_default(),
            reason: reason.unwrap_or_default(),
        })),
        _ => Ok(None),
    }
}
