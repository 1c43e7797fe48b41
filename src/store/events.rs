//! Recording events: the group commit of ingest, an append of event rows (the counters are
//! folded in at evaluation, `store/fold.rs`).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Postgres, Transaction};

use super::{GithubDelivery, Result, Store, StoreError};
use crate::domain::{EntityId, Event};

/// What recording a group of events found: the ids that were new, and what each duplicate
/// was recorded with before. A duplicate in neither was recorded by a transaction that
/// committed while the statement ran (the same id sent twice at once);
/// [`Events::duplicates_of`] reads it.
#[derive(Debug, Default)]
pub struct RecordedEvents {
    pub inserted: HashSet<String>,
    pub known: HashMap<String, Duplicate>,
}

/// An event recorded before: the entity it was recorded for, and whether that entity still
/// owes an evaluation (some event of it, folded or not, that no evaluation has seen, or a
/// mark of the repair sweep). A retry of an event already evaluated needs no schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    pub entity: EntityId,
    pub owed: bool,
}

/// The store's handle on the group commit's events and new entities (`Store::events`).
#[derive(Clone, Copy)]
pub struct Events<'a> {
    pub(super) store: &'a Store,
}

impl Events<'_> {
    /// Records events in one statement; returns the ids that were new.
    pub async fn record_events(self, events: &[&Event]) -> Result<HashSet<String>> {
        Ok(self.record_group(events, &[], &[]).await?.inserted)
    }

    /// Records a group commit's events, each with the trace context it came in (`traces`,
    /// by position; missing ones are none), and remembers the GitHub deliveries they came in,
    /// in one statement; returns the ids that were new and the entities of the duplicates. The
    /// statement is atomic on its own, so no BEGIN and COMMIT round trips go around it, and a
    /// delivery is remembered exactly when its events are durable.
    pub async fn record_group(
        self,
        events: &[&Event],
        traces: &[Option<&str>],
        deliveries: &[&GithubDelivery],
    ) -> Result<RecordedEvents> {
        // A partition turnover (an events partition whose time is over and not sealed yet, or
        // none made for now) is repaired and the statement retried.
        self.store
            .partitions()
            .with_turnover(|| async {
                let mut connection = self.store.pool.acquire().await?;
                record_in(&mut connection, events, traces, deliveries).await
            })
            .await
    }

    /// What these event ids were recorded with: their entity, and whether it still owes an
    /// evaluation.
    pub async fn duplicates_of(self, ids: &[&str]) -> Result<HashMap<String, Duplicate>> {
        let rows = sqlx::query!(
            r#"SELECT id AS "id!", entity AS "entity!", owed AS "owed!"
               FROM recorded_events($1)"#,
            ids as &[&str]
        )
        .fetch_all(&self.store.pool)
        .await?;
        rows.into_iter()
            .map(|row| Ok((row.id.clone(), duplicate(&row.id, &row.entity, row.owed)?)))
            .collect()
    }
}

fn duplicate(id: &str, entity: &str, owed: bool) -> Result<Duplicate> {
    match EntityId::parse(entity) {
        Ok(entity) => Ok(Duplicate { entity, owed }),
        Err(e) => Err(StoreError::corrupt(format!("the entity of event {id}"), e)),
    }
}

/// Records events in one statement, on its own or in the caller's transaction; returns the
/// ids that were new and the entity each duplicate was recorded for. Ingest appends:
/// the event rows, and an entity's row the first time it is seen; the counters are folded in
/// at evaluation (`store/fold.rs`). Events are inserted sorted by id and new entity rows by
/// entity, so concurrent transactions that share ids or new entities wait on each other in
/// one order, never in a cycle. An entity row that exists is neither written nor locked, so a
/// hot entity's events do not queue behind its evaluation.
///
/// An id is new when no partition holds it: every partition by the statement's probe of its
/// unique index (as the statement's snapshot has them), and the partition the row goes to (the
/// one of this transaction's `now()`) by the insert's arbiter too, for a group committing
/// meanwhile. The probe of the older ones is only trusted once all of them are sealed
/// (`store/partitions.rs`): when one is not, nothing is written and [`StoreError::Unsealed`]
/// tells the caller to seal and retry.
///
/// A duplicate's entity is read by the same probe: a retrying sender's group costs no second
/// round trip.
pub(super) async fn record_in(
    connection: &mut PgConnection,
    events: &[&Event],
    traces: &[Option<&str>],
    deliveries: &[&GithubDelivery],
) -> Result<RecordedEvents> {
    let mut traced: Vec<(&Event, Option<&str>)> = events
        .iter()
        .copied()
        .zip(traces.iter().copied().chain(std::iter::repeat(None)))
        .collect();
    traced.sort_unstable_by(|a, b| a.0.id.as_str().cmp(b.0.id.as_str()));
    let (events, traces): (Vec<&Event>, Vec<Option<&str>>) = traced.into_iter().unzip();
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
    // As text, cast in the statement: NULL for an event without attributes.
    let attributes: Vec<Option<String>> = events
        .iter()
        .map(|e| {
            e.attributes
                .as_ref()
                .map(|a| serde_json::to_string(a).expect("scalars serialize"))
        })
        .collect();
    let delivery_sources: Vec<&str> = deliveries.iter().map(|d| d.source.as_str()).collect();
    let delivery_ids: Vec<&str> = deliveries.iter().map(|d| d.delivery_id.as_str()).collect();
    let delivery_digests: Vec<Vec<u8>> =
        deliveries.iter().map(|d| d.body_sha256.to_vec()).collect();
    let rows = sqlx::query!(
        r#"WITH gate AS MATERIALIZED (
               SELECT NOT EXISTS (SELECT 1 FROM partitions p
                                  WHERE p.parent = 'events' AND p.upper_bound <= now()
                                    AND p.sealed_at IS NULL) AS open
           ),
           input AS MATERIALIZED (
               SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[],
                                    $6::timestamptz[], $7::text[], $8::text[], $9::text[],
                                    $13::text[])
                   AS t(id, entity, signal, actor, weight, occurred_at, priority, author,
                        attributes, traceparent)
           ),
           -- The ids already recorded, in any partition, as the statement's snapshot has them
           -- (a retry's: recorded by a transaction that committed before it began), each with
           -- its entity and whether that owes an evaluation. A duplicate's entity is scheduled
           -- again only while it does: each retry of an event already evaluated would cost an
           -- evaluation that finds nothing new. One index probe per partition and id, by a plan
           -- no partition's size can change (the migration of `recorded_events` says why a
           -- function); an id recorded by a group committing meanwhile is the arbiter's below.
           known AS MATERIALIZED (
               SELECT r.id, r.entity, r.owed FROM recorded_events($1::text[]) r
               WHERE (SELECT open FROM gate)
           ),
           inserted AS (
               INSERT INTO events (id, entity, signal, actor, weight, occurred_at, priority, author,
                                   attributes, traceparent)
               SELECT i.id, i.entity, i.signal, i.actor, i.weight, i.occurred_at, i.priority,
                      i.author, i.attributes::jsonb, i.traceparent
               FROM input i
               WHERE (SELECT open FROM gate) AND i.id NOT IN (SELECT id FROM known)
               ON CONFLICT DO NOTHING
               RETURNING id, entity, author
           ),
           -- A first event makes the entity's row (pending, nothing folded); a row that exists
           -- is left alone. Which rows exist is a plain read (`entities_unknown`, one probe of
           -- the key per entity whatever the table's size when the statement was planned): the
           -- insert's own check of the unique index would wait for any open transaction that
           -- updated the row (a worker's evaluation, the sweep's mark), and so hold the whole
           -- group behind it. Only an entity another group is making at the same time meets
           -- the arbiter and waits.
           first_seen AS (
               INSERT INTO entities (entity, kind, pending_since, last_event_at, author)
               SELECT DISTINCT ON (n.entity) n.entity,
                      CASE WHEN position(':' IN n.entity) > 0 THEN split_part(n.entity, ':', 1)
                           ELSE '' END,
                      now(), now(), n.author
               FROM inserted n
               WHERE n.entity IN (SELECT u.entity
                                  FROM entities_unknown(ARRAY(SELECT entity FROM inserted)) u)
               ORDER BY n.entity, n.author NULLS LAST
               ON CONFLICT (entity) DO NOTHING
           ),
           -- The GitHub deliveries the events came in: remembered with them or not at all.
           remembered AS (
               INSERT INTO github_deliveries (source, delivery_id, body_sha256)
               SELECT d.source, d.delivery_id, d.body_sha256
               FROM UNNEST($10::text[], $11::text[], $12::bytea[])
                   AS d(source, delivery_id, body_sha256)
               WHERE (SELECT open FROM gate)
               ON CONFLICT DO NOTHING
           )
           SELECT id AS "id?", NULL::text AS "entity?", NULL::bool AS "owed?" FROM inserted
           UNION ALL
           SELECT id, entity, owed FROM known
           UNION ALL
           SELECT NULL, NULL, NULL FROM gate WHERE NOT open"#,
        &ids as &[&str],
        &entities as &[&str],
        &signals as &[&str],
        &actors as &[Option<&str>],
        &weights,
        &occurred as &[Option<DateTime<Utc>>],
        &priorities as &[&str],
        &authors as &[Option<&str>],
        &attributes as &[Option<String>],
        &delivery_sources as &[&str],
        &delivery_ids as &[&str],
        &delivery_digests,
        &traces as &[Option<&str>],
    )
    .fetch_all(&mut *connection)
    .await?;
    let mut recorded = RecordedEvents::default();
    for row in rows {
        match (row.id, row.entity) {
            (None, _) => return Err(StoreError::Unsealed),
            (Some(id), None) => {
                recorded.inserted.insert(id);
            }
            (Some(id), Some(entity)) => {
                let known = duplicate(&id, &entity, row.owed.unwrap_or(true))?;
                recorded.known.insert(id, known);
            }
        }
    }
    Ok(recorded)
}

/// Locks entity rows in id order before a transaction touches several (every transaction that
/// locks more than one does it this way, so none waits on another in a cycle; ingest locks none).
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
