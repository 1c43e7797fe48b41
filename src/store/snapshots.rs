//! Reading entities: the one-statement read of entity rows with their signal totals, windows
//! and distinct actors, as the read API shows them and as snapshots the rules decide on.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Row;

use super::{Result, Store, StoreError};
use crate::domain::{EntityId, SignalStats, SignalTotals, Snapshot, Status, WINDOWS};

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
    /// The latest moderator override, whether or not it is still in force.
    #[serde(rename = "override")]
    pub override_decision: Option<Override>,
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
            .snapshots(&[entity.as_str()], with_actors, true)
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
        with_windows: bool,
    ) -> Result<HashMap<String, Snapshot>> {
        self.entity_records(entities, with_actors, with_windows)
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
                        .and_then(|a| EntityId::parse(a).ok()),
                    taken_at: record.read_at,
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
        with_windows: bool,
    ) -> Result<Vec<EntityRecord>> {
        // One statement sees one snapshot of the database, so each entity row, its totals, its
        // windows and (when asked) its distinct actors agree.
        let rows = sqlx::query(
            "SELECT e.entity, e.kind, e.status, e.moderation_version, e.event_count,
                    e.evaluated_event_count, e.pending_since, e.last_event_at, e.evaluation_count,
                    e.last_evaluated_at, now() AS read_at, e.override_status, e.override_until,
                    e.override_by, e.override_reason, e.author,
                    (SELECT coalesce(json_agg(json_build_array(t.signal, t.count, t.weight_sum)), '[]')
                     FROM signal_totals t WHERE t.entity = e.entity) AS totals,
                    CASE WHEN $5 THEN
                    (SELECT coalesce(json_agg(json_build_array(w.signal, w.name, w.count, w.weight)), '[]')
                     FROM (SELECT b.signal, win.name, sum(b.count)::int8 AS count,
                                  sum(b.weight_sum) AS weight
                           FROM signal_buckets b
                           JOIN UNNEST($2::text[], $3::int8[]) AS win(name, seconds)
                             ON b.bucket_start >= date_trunc('minute', now())
                                                  - make_interval(secs => win.seconds)
                           WHERE b.entity = e.entity
                             AND b.bucket_start >= now() - interval '24 hours'
                           GROUP BY b.signal, win.name) w)
                    END AS windows,
                    CASE WHEN $4 THEN
                        (SELECT coalesce(json_agg(json_build_array(a.signal, a.actors)), '[]')
                         FROM (SELECT signal, count(DISTINCT actor) AS actors FROM events
                               WHERE entity = e.entity GROUP BY signal) a)
                    END AS actors
             FROM entities e WHERE e.entity = ANY($1)",
        )
        .bind(entities)
        .bind(WINDOWS.iter().map(|(name, _)| *name).collect::<Vec<_>>())
        .bind(
            WINDOWS
                .iter()
                .map(|(_, seconds)| *seconds)
                .collect::<Vec<_>>(),
        )
        .bind(with_actors)
        .bind(with_windows)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| entity_record_from(row, with_windows))
            .collect()
    }
}

/// Totals, distinct actors and trailing-window counts per signal, read in the caller's
/// transaction (one snapshot).
/// The signal figures of an entity row read by [`Store::entity_with`]: totals, windows and,
/// when read, distinct actors, each a JSON array of tuples.
fn signal_stats_from(
    row: &sqlx::postgres::PgRow,
    with_windows: bool,
) -> Result<BTreeMap<String, SignalStats>> {
    use sqlx::types::Json;
    let mut stats: BTreeMap<String, SignalStats> = BTreeMap::new();
    let Json(totals): Json<Vec<(String, i64, f64)>> = row.try_get("totals")?;
    for (signal, count, weight) in totals {
        let entry = stats.entry(signal).or_default();
        entry.count = count;
        entry.weight = weight;
        if !with_windows {
            continue;
        }
        for (name, _) in WINDOWS {
            entry
                .windows
                .insert(name.to_owned(), SignalTotals::default());
        }
    }
    if let Some(Json(actors)) = row.try_get::<Option<Json<Vec<(String, i64)>>>, _>("actors")? {
        for stat in stats.values_mut() {
            stat.actors = Some(0);
        }
        for (signal, count) in actors {
            stats.entry(signal).or_default().actors = Some(count);
        }
    }
    // (signal, window, count, weight) per row; NULL when the windows were not read.
    type WindowRows = Vec<(String, String, i64, f64)>;
    let windows: Option<Json<WindowRows>> = row.try_get("windows")?;
    for (signal, window, count, weight) in windows.map(|Json(w)| w).unwrap_or_default() {
        stats
            .entry(signal)
            .or_default()
            .windows
            .insert(window, SignalTotals { count, weight });
    }
    Ok(stats)
}

/// An entity row as read by [`Store::entity_records`].
fn entity_record_from(row: &sqlx::postgres::PgRow, with_windows: bool) -> Result<EntityRecord> {
    let signals = signal_stats_from(row, with_windows)?;
    let entity: String = row.get("entity");
    let status: String = row.get("status");
    Ok(EntityRecord {
        status: Status::parse(&status)
            .map_err(|e| StoreError::corrupt(format!("the status of entity {entity}"), e))?,
        override_decision: override_from_row(row, &entity)?,
        entity,
        kind: row.get("kind"),
        moderation_version: row.get("moderation_version"),
        event_count: row.get("event_count"),
        evaluated_event_count: row.get("evaluated_event_count"),
        pending_since: row.get("pending_since"),
        last_event_at: row.get("last_event_at"),
        evaluation_count: row.get("evaluation_count"),
        last_evaluated_at: row.get("last_evaluated_at"),
        signals,
        author: row.get("author"),
        read_at: row.get("read_at"),
    })
}

fn override_from_row(row: &sqlx::postgres::PgRow, entity: &str) -> Result<Option<Override>> {
    let status: Option<String> = row.get("override_status");
    let until: Option<DateTime<Utc>> = row.get("override_until");
    match (status, until) {
        (Some(status), Some(until)) => Ok(Some(Override {
            status: Status::parse(&status).map_err(|e| {
                StoreError::corrupt(format!("the override status of entity {entity}"), e)
            })?,
            until,
            by: row
                .get::<Option<String>, _>("override_by")
                .unwrap_or_default(),
            reason: row
                .get::<Option<String>, _>("override_reason")
                .unwrap_or_default(),
        })),
        _ => Ok(None),
    }
}
