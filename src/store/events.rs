//! Recording events: the group commit of ingest, and the entity and signal-total counters that
//! newly recorded events move.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};

use super::{Result, Store, StoreError};
use crate::domain::{EntityId, Event, SignalTotals};

impl Store {
    /// Records events in one transaction (group commit); returns the ids that were new.
    ///
    /// Events are inserted sorted by id and counters upserted sorted by key, so concurrent
    /// group commits that share ids or entities wait on each other in one order, never in a
    /// cycle. Only newly inserted events move the counters.
    pub async fn record_events(&self, events: &[&Event]) -> Result<HashSet<String>> {
        // A partition turnover (an events partition whose time is over and not sealed yet, or
        // none made for now) is repaired and the transaction retried.
        self.with_turnover(|| async {
            let mut tx = self.pool.begin().await?;
            let inserted = record_in(&mut tx, events).await?;
            tx.commit().await?;
            Ok(inserted)
        })
        .await
    }

    /// The entities that these event ids were recorded for.
    pub async fn entities_of(&self, ids: &[&str]) -> Result<HashMap<String, EntityId>> {
        let rows = sqlx::query!(
            "SELECT id, entity FROM events WHERE id = ANY($1)",
            ids as &[&str]
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|row| match EntityId::parse(&row.entity) {
                Ok(entity) => Ok((row.id, entity)),
                Err(e) => Err(StoreError::corrupt(
                    format!("the entity of event {}", row.id),
                    e,
                )),
            })
            .collect()
    }
}

/// Records events in the caller's transaction; returns the ids that were new. Events are
/// inserted sorted by id and counters upserted sorted by key, so concurrent transactions that
/// share ids or entities wait on each other in one order, never in a cycle. Only newly
/// inserted events move the counters.
///
/// An id is new when no partition holds it: the partition the row goes to (the one of this
/// transaction's `now()`) by its unique index, the older ones by the check in the statement,
/// which is only trusted once all of them are sealed (`store/partitions.rs`). When one is not,
/// nothing is written and [`StoreError::Unsealed`] tells the caller to seal and retry.
pub(super) async fn record_in(
    tx: &mut Transaction<'_, Postgres>,
    events: &[&Event],
) -> Result<HashSet<String>> {
    let mut events = events.to_vec();
    events.sort_unstable_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    // Borrowed columns (no copies): the casts name the types bound to the text arrays, which
    // the macro would otherwise want owned.
    let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    let entities: Vec<&str> = events.iter().map(|e| e.entity.as_str()).collect();
    let signals: Vec<&str> = events.iter().map(|e| e.signal.as_str()).collect();
    let actors: Vec<Option<&str>> = events.iter().map(|e| e.actor.as_deref()).collect();
    let weights: Vec<f64> = events.iter().map(|e| e.weight).collect();
    let occurred: Vec<Option<DateTime<Utc>>> = events.iter().map(|e| e.occurred_at).collect();
    let priorities: Vec<&str> = events.iter().map(|e| e.priority.as_str()).collect();
    let authors: Vec<Option<&str>> = events
        .iter()
        .map(|e| e.author.as_ref().map(EntityId::as_str))
        .collect();
    let rows: Vec<Option<String>> = sqlx::query_scalar!(
        r#"WITH gate AS MATERIALIZED (
               SELECT NOT EXISTS (SELECT 1 FROM partitions p
                                  WHERE p.parent = 'events' AND p.upper_bound <= now()
                                    AND p.sealed_at IS NULL) AS open,
                      (SELECT max(p.lower_bound) FROM partitions p
                       WHERE p.parent = 'events' AND p.lower_bound <= now()) AS current_from
           ),
           input AS MATERIALIZED (
               SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[],
                                    $6::timestamptz[], $7::text[], $8::text[])
                   AS t(id, entity, signal, actor, weight, occurred_at, priority, author)
           ),
           -- The ids already in an older (sealed) partition; the current one is the insert's
           -- arbiter. One index scan per partition for the whole group.
           earlier AS MATERIALIZED (
               SELECT e.id FROM events e
               WHERE (SELECT open FROM gate) AND e.id = ANY($1::text[])
                 AND e.received_at < (SELECT current_from FROM gate)
           ),
           inserted AS (
               INSERT INTO events (id, entity, signal, actor, weight, occurred_at, priority, author)
               SELECT i.id, i.entity, i.signal, i.actor, i.weight, i.occurred_at, i.priority,
                      i.author
               FROM input i
               WHERE (SELECT open FROM gate) AND i.id NOT IN (SELECT id FROM earlier)
               ON CONFLICT DO NOTHING
               RETURNING id
           )
           SELECT id AS "id?" FROM inserted
           UNION ALL
           SELECT NULL FROM gate WHERE NOT open"#,
        &ids as &[&str],
        &entities as &[&str],
        &signals as &[&str],
        &actors as &[Option<&str>],
        &weights,
        &occurred as &[Option<DateTime<Utc>>],
        &priorities as &[&str],
        &authors as &[Option<&str>],
    )
    .fetch_all(&mut **tx)
    .await?;
    let Some(inserted) = rows.into_iter().collect::<Option<Vec<String>>>() else {
        return Err(StoreError::Unsealed);
    };
    let inserted: HashSet<String> = inserted.into_iter().collect();
    if !inserted.is_empty() {
        let fresh = events.iter().filter(|e| inserted.contains(e.id.as_str()));
        let mut per_entity: BTreeMap<&str, (i64, Option<&str>)> = BTreeMap::new();
        let mut per_signal: BTreeMap<(&str, &str), SignalTotals> = BTreeMap::new();
        for event in fresh {
            let entry = per_entity.entry(event.entity.as_str()).or_default();
            entry.0 += 1;
            if let Some(author) = &event.author {
                entry.1 = Some(author.as_str());
            }
            let totals = per_signal
                .entry((event.entity.as_str(), event.signal.as_str()))
                .or_default();
            totals.count += 1;
            totals.weight += event.weight;
        }
        upsert_entities(tx, &per_entity).await?;
        upsert_signal_totals(tx, &per_signal).await?;
    }
    Ok(inserted)
}

async fn upsert_entities(
    tx: &mut Transaction<'_, Postgres>,
    per_entity: &BTreeMap<&str, (i64, Option<&str>)>,
) -> Result<()> {
    let ids: Vec<&str> = per_entity.keys().copied().collect();
    let kinds: Vec<&str> = ids
        .iter()
        .map(|id| id.split_once(':').map_or("", |(k, _)| k))
        .collect();
    let counts: Vec<i64> = per_entity.values().map(|(n, _)| *n).collect();
    let authors: Vec<Option<&str>> = per_entity.values().map(|(_, a)| *a).collect();
    sqlx::query!(
        "INSERT INTO entities (entity, kind, event_count, pending_since, last_event_at, author)
         SELECT entity, kind, n, now(), now(), author
         FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::text[]) AS t(entity, kind, n, author)
         ORDER BY entity
         ON CONFLICT (entity) DO UPDATE SET
             event_count = entities.event_count + EXCLUDED.event_count,
             pending_since = COALESCE(entities.pending_since, now()),
             last_event_at = now(),
             author = COALESCE(EXCLUDED.author, entities.author)",
        &ids as &[&str],
        &kinds as &[&str],
        &counts,
        &authors as &[Option<&str>],
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn upsert_signal_totals(
    tx: &mut Transaction<'_, Postgres>,
    per_signal: &BTreeMap<(&str, &str), SignalTotals>,
) -> Result<()> {
    let entities: Vec<&str> = per_signal.keys().map(|(e, _)| *e).collect();
    let signals: Vec<&str> = per_signal.keys().map(|(_, s)| *s).collect();
    let counts: Vec<i64> = per_signal.values().map(|t| t.count).collect();
    let weights: Vec<f64> = per_signal.values().map(|t| t.weight).collect();
    // Running totals and this minute's bucket in one statement (one round trip); both sorted.
    sqlx::query!(
        "WITH input AS (
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::float8[]) AS t(e, s, c, w)
         ),
         totals AS (
             INSERT INTO signal_totals (entity, signal, count, weight_sum)
             SELECT e, s, c, w FROM input ORDER BY e, s
             ON CONFLICT (entity, signal) DO UPDATE SET
                 count = signal_totals.count + EXCLUDED.count,
                 weight_sum = signal_totals.weight_sum + EXCLUDED.weight_sum
         )
         INSERT INTO signal_buckets (entity, signal, bucket_start, count, weight_sum)
         SELECT e, s, date_trunc('minute', now()), c, w FROM input ORDER BY e, s
         ON CONFLICT (entity, signal, bucket_start) DO UPDATE SET
             count = signal_buckets.count + EXCLUDED.count,
             weight_sum = signal_buckets.weight_sum + EXCLUDED.weight_sum",
        &entities as &[&str],
        &signals as &[&str],
        &counts,
        &weights,
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Locks entity rows in id order, as ingest does, before a transaction touches several.
pub(super) async fn lock_in_order(
    tx: &mut Transaction<'_, Postgres>,
    entities: &[&str],
) -> Result<()> {
    sqlx::query!(
        "SELECT 1 AS locked FROM entities WHERE entity = ANY($1) ORDER BY entity FOR UPDATE",
        entities as &[&str]
    )
    .fetch_all(&mut **tx)
    .await?;
    Ok(())
}
