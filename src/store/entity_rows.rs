//! An entity row as the snapshot read (`snapshots.rs`) returns it, and what it becomes: the
//! signal figures (totals, windows, decayed counts, distinct actors), the attribute figures and
//! context, the timer and the override of an [`EntityRecord`].

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sqlx::types::Json;

use super::{
    EntityRecord, Override, Result, StoreError,
    attribute_rows::{
        AttributeRows, FoldedBuckets, FoldedNumbers, FoldedValues, UnfoldedAttributes,
        attribute_stats,
    },
};
use crate::domain::{
    AttributeReads, Attributes, AuthorContext, DAY_WINDOWS, SignalStats, SignalTotals,
    SnapshotAttributes, Status, Timer, WINDOWS, Windows, dsa_schema::parse_content_date,
};

/// (signal, count, weight) per signal.
pub(super) type Totals = Vec<(String, i64, f64)>;
/// (signal, weight) per event not folded yet.
pub(super) type UnfoldedSignals = Vec<(String, f64)>;
/// (signal, window, count, weight) per row; NULL when the windows were not read.
pub(super) type WindowRows = Vec<(String, String, i64, f64)>;
/// (signal, distinct actors) per signal; NULL when the actors were not counted.
pub(super) type Actors = Vec<(String, i64)>;
/// (signal, half-life, decayed count) per row; NULL when no decayed count was read.
pub(super) type Decayed = Vec<(String, String, f64)>;

/// An entity row as [`Snapshots::entity_records`]' statement returns it.
pub(super) struct EntityRow {
    pub(super) entity: String,
    pub(super) kind: String,
    pub(super) status: String,
    pub(super) moderation_version: i64,
    pub(super) event_count: i64,
    pub(super) evaluated_event_count: i64,
    pub(super) unfolded_count: i64,
    pub(super) pending_since: Option<DateTime<Utc>>,
    pub(super) last_event_at: DateTime<Utc>,
    pub(super) evaluation_count: i64,
    pub(super) last_evaluated_at: Option<DateTime<Utc>>,
    pub(super) read_at: DateTime<Utc>,
    pub(super) override_status: Option<String>,
    pub(super) override_until: Option<DateTime<Utc>>,
    pub(super) override_by: Option<String>,
    pub(super) override_reason: Option<String>,
    pub(super) timer_ends_at: Option<DateTime<Utc>>,
    pub(super) timer_restores_to: Option<String>,
    pub(super) timer_action: Option<i64>,
    pub(super) timer_set_by: Option<String>,
    pub(super) author: Option<String>,
    pub(super) content_date: Option<String>,
    pub(super) first_event_at: DateTime<Utc>,
    pub(super) totals: Json<Totals>,
    pub(super) unfolded_signals: Json<UnfoldedSignals>,
    pub(super) windows: Option<Json<WindowRows>>,
    pub(super) days: Option<Json<WindowRows>>,
    pub(super) decayed: Option<Json<Decayed>>,
    pub(super) actors: Option<Json<Actors>>,
    pub(super) folded_values: Option<Json<FoldedValues>>,
    pub(super) folded_numbers: Option<Json<FoldedNumbers>>,
    pub(super) folded_buckets: Option<Json<FoldedBuckets>>,
    pub(super) unfolded_attributes: Option<Json<UnfoldedAttributes>>,
    pub(super) context: Option<Json<Attributes>>,
    pub(super) author_context: Option<Json<AuthorContext>>,
    pub(super) traces: Option<Vec<String>>,
}

/// The figures of a row's signals that [`Snapshots::entity_records`] read.
struct Figures {
    /// The folded totals; `unfolded` adds the events not folded yet.
    totals: Json<Totals>,
    unfolded: Json<UnfoldedSignals>,
    windows: Option<Json<WindowRows>>,
    days: Option<Json<WindowRows>>,
    decayed: Option<Json<Decayed>>,
    actors: Option<Json<Actors>>,
}

/// The signal figures of an entity row read by [`Snapshots::entity_records`]: totals (the folded
/// part plus the events not folded yet), the windows and decayed counts asked for and, when
/// read, distinct actors, each a JSON array of tuples. A figure read and found empty is 0, so
/// that a snapshot tells what was read (and a backtest what it may replay).
fn signal_stats_from(figures: Figures, read: &Windows) -> BTreeMap<String, SignalStats> {
    let Json(folded) = figures.totals;
    let Json(unfolded) = figures.unfolded;
    let mut stats: BTreeMap<String, SignalStats> = BTreeMap::new();
    for (signal, count, weight) in folded {
        let entry = stats.entry(signal).or_default();
        entry.count += count;
        entry.weight += weight;
    }
    for (signal, weight) in unfolded {
        let entry = stats.entry(signal).or_default();
        entry.count += 1;
        entry.weight += weight;
    }
    let minutes = WINDOWS.iter().filter(|_| read.minutes);
    let days = DAY_WINDOWS.iter().filter(|_| read.days);
    for entry in stats.values_mut() {
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
    rows: AttributeRows,
    context: Option<Json<Attributes>>,
    author: Option<Json<AuthorContext>>,
) -> SnapshotAttributes {
    SnapshotAttributes {
        read,
        events: attribute_stats(rows),
        context: context.map(|Json(c)| c).unwrap_or_default(),
        author: author.map(|Json(a)| a),
    }
}

/// An entity row as read by [`Snapshots::entity_records`].
pub(super) fn entity_record_from(
    row: EntityRow,
    read: &Windows,
    reads: AttributeReads,
) -> Result<EntityRecord> {
    let rows = AttributeRows {
        values: row.folded_values,
        numbers: row.folded_numbers,
        buckets: row.folded_buckets,
        unfolded: row.unfolded_attributes,
    };
    let attributes = attributes_from(reads, rows, row.context, row.author_context);
    let signals = signal_stats_from(
        Figures {
            totals: row.totals,
            unfolded: row.unfolded_signals,
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
        unfolded_count: row.unfolded_count,
        pending_since: row.pending_since,
        last_event_at: row.last_event_at,
        evaluation_count: row.evaluation_count,
        last_evaluated_at: row.last_evaluated_at,
        signals,
        author: row.author,
        attributes,
        read_at: row.read_at,
        event_count: row.event_count,
        // Checked at ingest; one that does not read (written before the check) is none.
        content_date: row
            .content_date
            .as_deref()
            .and_then(|text| parse_content_date(text).ok()),
        first_event_at: Some(row.first_event_at),
        traces: row.traces.unwrap_or_default(),
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
