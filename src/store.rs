//! Postgres, the source of truth: events, signal totals, entities, evaluations, actions and
//! the outbox. All SQL of the service lives here.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use secrecy::ExposeSecret;
use serde::Serialize;
use sqlx::{
    PgPool, Postgres, Row, Transaction,
    postgres::{PgConnectOptions, PgPoolOptions},
};

use crate::{
    domain::{
        EntityId, Event, EventId, Priority, Signal, SignalStats, SignalTotals, Snapshot, Status,
        WINDOWS,
    },
    rules::{Decision, Verdict},
    settings::Database,
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("postgres: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The entity's moderation version moved after the snapshot: a newer writer won.
    #[error("moderation version changed since the snapshot (read {read})")]
    VersionConflict { read: i64 },
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
    #[error("{0}")]
    NotFound(String),
    #[error("action {id} was already reversed by {by} at {at}")]
    AlreadyReversed {
        id: i64,
        by: String,
        at: DateTime<Utc>,
    },
    #[error(
        "action {id} was superseded: the entity changed after it (now version {version}); reverse the latest action or set an override"
    )]
    Superseded { id: i64, version: i64 },
    /// One failure of a statement that served several callers, handed to each of them.
    #[error(transparent)]
    Shared(std::sync::Arc<StoreError>),
    /// The call was dropped before it was answered (shutting down, or a panic in the batch).
    #[error("the Postgres call was interrupted before it was answered")]
    Interrupted,
}

pub type Result<T> = std::result::Result<T, StoreError>;

impl StoreError {
    /// A serialization failure or deadlock: retrying the transaction is the cure.
    pub fn is_conflict(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(db)) => db
                .code()
                .is_some_and(|code| code == "40001" || code == "40P01"),
            StoreError::Shared(error) => error.is_conflict(),
            _ => false,
        }
    }

    /// Postgres could not be reached or refused work for a reason of its own (connection lost,
    /// shutting down, out of resources, statement cancelled): not the entity's fault.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Database(error) => is_unavailable(error),
            StoreError::Shared(error) => error.is_unavailable(),
            _ => false,
        }
    }
}

pub async fn connect(settings: &Database) -> Result<PgPool> {
    // A statement that cannot finish within the backend timeout (a row lock held elsewhere, a
    // network black hole) is cancelled by Postgres rather than holding its caller forever.
    let statement_timeout = settings.backend_timeout.as_millis().to_string();
    let options: PgConnectOptions = settings
        .database_url
        .expose_secret()
        .parse::<PgConnectOptions>()?
        .options([
            ("statement_timeout", statement_timeout.as_str()),
            // Nearly every statement looks rows up by entity: a generic plan is as good as a
            // custom one, and re-planning each execution was a fifth of the evaluation cost
            // (BENCHMARKS.md).
            ("plan_cache_mode", "force_generic_plan"),
        ]);
    let pool = PgPoolOptions::new()
        .max_connections(settings.db_max_connections)
        .acquire_timeout(settings.backend_timeout)
        .connect_with(options)
        .await?;
    Ok(pool)
}

pub async fn migrate(pool: &PgPool) -> Result<()> {
    sqlx::migrate!("./migrations").run(pool).await?;
    Ok(())
}

/// Minute buckets outlive a shorter retention: the longest window needs 24 hours of them.
const BUCKETS_KEPT: std::time::Duration = std::time::Duration::from_secs(25 * 3600);

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

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ActionRecord {
    pub id: i64,
    pub entity: String,
    pub action: String,
    pub rule: String,
    pub reason: String,
    pub previous_status: String,
    pub new_status: String,
    pub applied_version: i64,
    pub dedup_key: String,
    pub created_at: DateTime<Utc>,
    /// The snapshot the rules decided on.
    #[schema(value_type = Object)]
    pub snapshot: serde_json::Value,
    pub reversed_at: Option<DateTime<Utc>>,
    pub reversed_by: Option<String>,
    pub reversal_reason: Option<String>,
}

const ACTION_COLUMNS: &str =
    "id, entity, action, rule, reason, previous_status, new_status, applied_version,
     dedup_key, created_at, snapshot, reversed_at, reversed_by, reversal_reason";

fn action_from_row(row: &sqlx::postgres::PgRow) -> ActionRecord {
    ActionRecord {
        id: row.get("id"),
        entity: row.get("entity"),
        action: row.get("action"),
        rule: row.get("rule"),
        reason: row.get("reason"),
        previous_status: row.get("previous_status"),
        new_status: row.get("new_status"),
        applied_version: row.get("applied_version"),
        dedup_key: row.get("dedup_key"),
        created_at: row.get("created_at"),
        snapshot: row.get("snapshot"),
        reversed_at: row.get("reversed_at"),
        reversed_by: row.get("reversed_by"),
        reversal_reason: row.get("reversal_reason"),
    }
}

#[allow(clippy::too_many_arguments)]
async fn record_decision(
    tx: &mut Transaction<'_, Postgres>,
    entity: &str,
    kind: &str,
    action_id: Option<i64>,
    moderator: &str,
    reason: &str,
    status: &str,
    until: Option<DateTime<Utc>>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO moderator_decisions (entity, kind, action_id, moderator, reason, status, until)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(entity)
    .bind(kind)
    .bind(action_id)
    .bind(moderator)
    .bind(reason)
    .bind(status)
    .bind(until)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Which actions to list (all filters optional); `before` is the cursor: actions with a
/// smaller id, newest first.
#[derive(Debug, Clone, Default)]
pub struct ActionFilter {
    pub entity: Option<EntityId>,
    pub rule: Option<String>,
    pub action: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub reversed: Option<bool>,
    pub before: Option<i64>,
    pub limit: i64,
}

/// A reversal as recorded: the action, and the entity's state after it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Reversal {
    pub action: ActionRecord,
    pub status: Status,
    pub moderation_version: i64,
    pub override_until: DateTime<Utc>,
    /// The author whose derived signal was compensated, to be scheduled.
    #[serde(skip)]
    pub author: Option<EntityId>,
}

/// Automated actions applied in a window, and how many a moderator reversed within 24h.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ReversalCounts {
    pub actions: i64,
    pub reversed: i64,
}

impl ReversalCounts {
    pub fn rate(&self) -> f64 {
        if self.actions == 0 {
            0.0
        } else {
            self.reversed as f64 / self.actions as f64
        }
    }
}

/// An outbox row claimed for delivery.
#[derive(Debug, Clone, Serialize)]
pub struct OutboxRow {
    pub id: i64,
    pub topic: String,
    pub idempotency_key: String,
    pub payload: serde_json::Value,
    pub attempts: i32,
    pub created_at: DateTime<Utc>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub failed_at: Option<DateTime<Utc>>,
}

const OUTBOX_COLUMNS: &str =
    "id, topic, idempotency_key, payload, attempts, created_at, last_status, last_error, failed_at";

fn outbox_from_row(row: &sqlx::postgres::PgRow) -> OutboxRow {
    OutboxRow {
        id: row.get("id"),
        topic: row.get("topic"),
        idempotency_key: row.get("idempotency_key"),
        payload: row.get("payload"),
        attempts: row.get("attempts"),
        created_at: row.get("created_at"),
        last_status: row.get("last_status"),
        last_error: row.get("last_error"),
        failed_at: row.get("failed_at"),
    }
}

/// Where the repair sweep continues: the last (pending since, entity) it examined.
pub type SweepCursor = (DateTime<Utc>, String);

/// What a completed evaluation wrote.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    /// No action was due; the evaluation is recorded.
    NoAction,
    /// The action was applied now, as this action row; `author` got a derived signal for it
    /// and must be scheduled.
    Applied {
        action_id: i64,
        author: Option<EntityId>,
    },
    /// The action's dedup key exists: it took effect before (a retry after a crash).
    AlreadyApplied,
}

/// What the fenced completion does with an entity row another transaction holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockedRows {
    /// Wait for it (up to `statement_timeout`).
    Wait,
    /// Leave the entity out, as if fenced; the caller finds out which it was.
    Skip,
}

/// [`Store::record_fenced_evaluations`]' statement.
const RECORD_FENCED: &str = "WITH input AS (
                 SELECT * FROM UNNEST($1::text[], $2::int8[], $3::int8[], $4::text[],
                                      $5::timestamptz[], $6::jsonb[], $7::jsonb[],
                                      $8::timestamptz[], $9::text[], $10::text[], $11::text[],
                                      $12::text[], $13::text[], $14::text[])
                     AS t(entity, version, event_count, worker, started_at, decisions, snapshot,
                          due_at, status, action, rule, reason, new_status, dedup_key)
             ),
             locked AS MATERIALIZED (
                 SELECT e.entity FROM entities e
                 JOIN input i ON i.entity = e.entity AND e.moderation_version = i.version
                 ORDER BY e.entity
                 FOR UPDATE OF e
             ),
             applied AS (
                 INSERT INTO actions (entity, action, rule, reason, previous_status, new_status,
                                      snapshot, applied_version, dedup_key)
                 SELECT i.entity, i.action, i.rule, i.reason, i.status, i.new_status, i.snapshot,
                        i.version, i.dedup_key
                 FROM input i JOIN locked l ON l.entity = i.entity
                 WHERE i.action IS NOT NULL
                 ORDER BY i.dedup_key
                 ON CONFLICT ON CONSTRAINT actions_dedup_key_unique DO NOTHING
                 RETURNING id, entity, action, rule, reason, new_status, applied_version, dedup_key
             ),
             notified AS (
                 INSERT INTO outbox (topic, idempotency_key, payload)
                 SELECT 'action.applied', a.dedup_key,
                        jsonb_build_object('action_id', a.id, 'entity', a.entity,
                                           'action', a.action, 'rule', a.rule,
                                           'reason', a.reason, 'status', a.new_status,
                                           'moderation_version', a.applied_version + 1)
                 FROM applied a
                 ORDER BY a.id
             ),
             fenced AS (
                 UPDATE entities e SET
                     status = COALESCE(a.new_status, e.status),
                     moderation_version = e.moderation_version
                                          + CASE WHEN a.id IS NULL THEN 0 ELSE 1 END,
                     evaluated_event_count = GREATEST(e.evaluated_event_count, i.event_count),
                     pending_since = CASE WHEN e.event_count <= i.event_count THEN NULL
                                          ELSE e.pending_since END,
                     evaluation_count = e.evaluation_count + 1,
                     last_evaluated_at = now()
                 FROM input i
                 JOIN locked l ON l.entity = i.entity
                 LEFT JOIN applied a ON a.entity = i.entity
                 WHERE e.entity = i.entity AND e.moderation_version = i.version
                 RETURNING e.entity, a.id AS action_id)
             INSERT INTO evaluations (entity, worker, started_at, moderation_version, event_count,
                                      decisions, action_id, snapshot, due_at)
             SELECT i.entity, i.worker, i.started_at, i.version, i.event_count, i.decisions,
                    f.action_id,
                    CASE WHEN jsonb_array_length(i.decisions->'shadow') > 0 THEN i.snapshot END,
                    i.due_at
             FROM fenced f JOIN input i ON i.entity = f.entity
             RETURNING entity, action_id";

static RECORD_FENCED_SKIPPING_LOCKED: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| {
        RECORD_FENCED.replace("FOR UPDATE OF e", "FOR UPDATE OF e SKIP LOCKED")
    });

/// One evaluation to record behind the version fence: what the rules saw and decided, and the
/// action to apply, if any.
#[derive(Debug, Clone, Copy)]
pub struct FencedEvaluation<'a> {
    pub snapshot: &'a Snapshot,
    pub verdict: &'a Verdict,
    pub decision: Option<&'a Decision>,
    pub worker: &'a str,
    pub started_at: DateTime<Utc>,
    pub due_at: Option<DateTime<Utc>>,
}

/// What [`Store::record_fenced_evaluations`] wrote for one entity that passed the fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// The action applied now; `None` if there was no decision or its dedup key existed.
    pub action_id: Option<i64>,
}

#[derive(Clone)]
pub struct Store {
    pool: PgPool,
}

impl Store {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Records events in one transaction (group commit); returns the ids that were new.
    ///
    /// Events are inserted sorted by id and counters upserted sorted by key, so concurrent
    /// group commits that share ids or entities wait on each other in one order, never in a
    /// cycle. Only newly inserted events move the counters.
    pub async fn record_events(&self, events: &[&Event]) -> Result<HashSet<String>> {
        let mut tx = self.pool.begin().await?;
        let inserted = record_in(&mut tx, events).await?;
        tx.commit().await?;
        Ok(inserted)
    }

    /// The entities that these event ids were recorded for.
    pub async fn entities_of(&self, ids: &[&str]) -> Result<HashMap<String, EntityId>> {
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT id, entity FROM events WHERE id = ANY($1)")
                .bind(ids)
                .fetch_all(&self.pool)
                .await?;
        rows.into_iter()
            .map(|(id, entity)| {
                EntityId::parse(&entity)
                    .map(|entity| (id, entity))
                    .map_err(|e| StoreError::Corrupt(e.0))
            })
            .collect()
    }

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
                let entity =
                    EntityId::parse(&record.entity).map_err(|e| StoreError::Corrupt(e.0))?;
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

    /// The fence, the actions, their outbox rows, the entities' bookkeeping and the evaluation
    /// records of several evaluations in one statement (atomic on its own, one round trip).
    /// Returns, by entity, what was recorded for those that passed the fence; an entity whose
    /// version moved is left out and nothing of its evaluation is written.
    ///
    /// Rows are locked in entity order, as ingest locks them, so concurrent batches and ingest
    /// transactions wait on each other in one order, never in a cycle; once locked at the
    /// version read, an entity's action, status and evaluation are written together. The
    /// action's unique dedup key is the authority that it takes effect once: on a conflict the
    /// evaluation is recorded without it. An entity may appear once per call (a second one is
    /// refused as [`StoreError::Corrupt`]). With [`LockedRows::Skip`] an entity whose row is
    /// locked elsewhere is left out as well (the caller retries it with [`LockedRows::Wait`] to
    /// learn which), so one held row cannot hold up the others. The author's derived signal is
    /// not written here (see [`Store::complete_evaluation`]).
    pub async fn record_fenced_evaluations<'e>(
        executor: impl sqlx::PgExecutor<'e>,
        evaluations: &[FencedEvaluation<'_>],
        locked_rows: LockedRows,
    ) -> Result<HashMap<String, Recorded>> {
        use sqlx::types::Json;
        let distinct: HashSet<&str> = evaluations
            .iter()
            .map(|e| e.snapshot.entity.as_str())
            .collect();
        if distinct.len() != evaluations.len() {
            // Two rows of one entity would both pass the fence: two actions, one version bump.
            return Err(StoreError::Corrupt(
                "an entity appears twice in one fenced batch".into(),
            ));
        }
        // A text column of the UNNEST input, borrowed from the evaluations (no copies).
        fn strings<'a>(
            evaluations: &'a [FencedEvaluation<'a>],
            field: impl Fn(&'a FencedEvaluation<'a>) -> Option<&'a str>,
        ) -> Vec<Option<&'a str>> {
            evaluations.iter().map(field).collect()
        }
        let statement = match locked_rows {
            LockedRows::Wait => RECORD_FENCED,
            LockedRows::Skip => RECORD_FENCED_SKIPPING_LOCKED.as_str(),
        };
        let rows: Vec<(String, Option<i64>)> = sqlx::query_as(statement)
            .bind(strings(evaluations, |e| Some(e.snapshot.entity.as_str())))
            .bind(
                evaluations
                    .iter()
                    .map(|e| e.snapshot.moderation_version)
                    .collect::<Vec<_>>(),
            )
            .bind(
                evaluations
                    .iter()
                    .map(|e| e.snapshot.event_count)
                    .collect::<Vec<_>>(),
            )
            .bind(strings(evaluations, |e| Some(e.worker)))
            .bind(evaluations.iter().map(|e| e.started_at).collect::<Vec<_>>())
            .bind(
                evaluations
                    .iter()
                    .map(|e| Json(e.verdict))
                    .collect::<Vec<_>>(),
            )
            // The snapshot is kept with an action (what it decided on) and, in the evaluation
            // row, when a shadow rule matched (what it would have done, on what).
            .bind(
                evaluations
                    .iter()
                    .map(|e| {
                        (e.decision.is_some() || !e.verdict.shadow.is_empty())
                            .then_some(Json(e.snapshot))
                    })
                    .collect::<Vec<_>>(),
            )
            .bind(evaluations.iter().map(|e| e.due_at).collect::<Vec<_>>())
            .bind(strings(evaluations, |e| Some(e.snapshot.status.as_str())))
            .bind(strings(evaluations, |e| {
                e.decision.map(|d| d.action.as_str())
            }))
            .bind(strings(evaluations, |e| {
                e.decision.map(|d| d.rule.as_str())
            }))
            .bind(strings(evaluations, |e| {
                e.decision.map(|d| d.reason.as_str())
            }))
            .bind(strings(evaluations, |e| {
                e.decision.map(|d| d.action.status().as_str())
            }))
            .bind(
                evaluations
                    .iter()
                    .map(|e| e.decision.map(|d| e.snapshot.dedup_key(&d.rule)))
                    .collect::<Vec<_>>(),
            )
            .fetch_all(executor)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(entity, action_id)| (entity, Recorded { action_id }))
            .collect())
    }

    /// Records a completed evaluation and applies its decision, in one transaction, fenced by
    /// the moderation version read in the snapshot.
    ///
    /// The action row's unique dedup key is the authority that an action takes effect once;
    /// the status is set, never incremented. If the version moved, nothing is written and
    /// [`StoreError::VersionConflict`] is returned.
    pub async fn complete_evaluation(
        &self,
        snapshot: &Snapshot,
        verdict: &Verdict,
        decision: Option<&Decision>,
        worker: &str,
        started_at: DateTime<Utc>,
        due_at: Option<DateTime<Utc>>,
    ) -> Result<Completion> {
        let fenced = [FencedEvaluation {
            snapshot,
            verdict,
            decision,
            worker,
            started_at,
            due_at,
        }];
        let author = snapshot.author.as_ref().filter(|_| decision.is_some());
        let Some((decision, author)) = decision.zip(author) else {
            // One statement, atomic on its own: no transaction needed.
            let recorded =
                Self::record_fenced_evaluations(&self.pool, &fenced, LockedRows::Wait).await?;
            return completion_of(snapshot, decision, recorded.get(snapshot.entity.as_str()));
        };
        // An action on an authored entity feeds back: the author's entity gets a derived
        // signal, once per action (its id is the action's dedup key), in the same transaction.
        // Both rows are locked first, in the order ingest locks them.
        let mut tx = self.pool.begin().await?;
        lock_in_order(&mut tx, &[snapshot.entity.as_str(), author.as_str()]).await?;
        let recorded = Self::record_fenced_evaluations(&mut *tx, &fenced, LockedRows::Wait).await?;
        let mut completion = completion_of(
            snapshot,
            Some(decision),
            recorded.get(snapshot.entity.as_str()),
        )?;
        if let Completion::Applied {
            author: to_schedule,
            ..
        } = &mut completion
        {
            let derived = derived_event(
                derived_event_id(&snapshot.dedup_key(&decision.rule)),
                author,
                format!("auto.{}", decision.action.as_str()),
                snapshot.entity.as_str(),
            )?;
            let inserted = record_in(&mut tx, &[&derived]).await?;
            *to_schedule = (!inserted.is_empty()).then(|| author.clone());
        }
        tx.commit().await?;
        Ok(completion)
    }

    /// Takes the sweep lock for this key (one sweep at a time across processes) and returns
    /// the transaction holding it; `None` if another process is sweeping.
    pub async fn begin_sweep(
        &self,
        lock_name: &str,
    ) -> Result<Option<Transaction<'static, Postgres>>> {
        let mut tx = self.pool.begin().await?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtext($1))")
            .bind(lock_name)
            .fetch_one(&mut *tx)
            .await?;
        Ok(locked.then_some(tx))
    }

    /// Entities owed an evaluation (events newer than their last evaluation) whose last event
    /// is older than `grace`, oldest pending first, after `cursor`.
    pub async fn owed_evaluations(
        tx: &mut Transaction<'static, Postgres>,
        grace: std::time::Duration,
        cursor: Option<&SweepCursor>,
        limit: usize,
    ) -> Result<Vec<SweepCursor>> {
        let rows = sqlx::query(
            "SELECT pending_since, entity FROM entities
             WHERE pending_since IS NOT NULL
               AND event_count > evaluated_event_count
               AND last_event_at < now() - $1::interval
               AND ($2::timestamptz IS NULL OR (pending_since, entity) > ($2, $3))
             ORDER BY pending_since, entity
             LIMIT $4",
        )
        .bind(format!("{} milliseconds", grace.as_millis()))
        .bind(cursor.map(|c| c.0))
        .bind(cursor.map(|c| c.1.as_str()))
        .bind(limit as i64)
        .fetch_all(&mut **tx)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| (row.get("pending_since"), row.get("entity")))
            .collect())
    }

    /// Deletes events received more than `retention` ago, in statements of at most `batch`
    /// rows, at most `max_batches` of them, and one batch each of old minute buckets,
    /// evaluation records and delivered outbox rows; totals are not touched. Returns the
    /// number of events deleted.
    pub async fn purge_expired_events(
        &self,
        retention: std::time::Duration,
        batch: usize,
        max_batches: usize,
    ) -> Result<u64> {
        let age = format!("{} milliseconds", retention.as_millis());
        let mut deleted = 0;
        for _ in 0..max_batches {
            // SKIP LOCKED: processes purging at the same time take different rows.
            let done = sqlx::query(
                "DELETE FROM events WHERE id IN (
                     SELECT id FROM events WHERE received_at < now() - $1::interval
                     ORDER BY received_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
            )
            .bind(&age)
            .bind(batch as i64)
            .execute(&self.pool)
            .await?
            .rows_affected();
            deleted += done;
            if done < batch as u64 {
                break;
            }
        }
        // Minute buckets (kept at least 25h, for the 24h windows), evaluation records and
        // delivered outbox rows past the window go too, in the same bounded batches; actions
        // and moderator decisions are kept.
        let bucket_age = format!("{} milliseconds", retention.max(BUCKETS_KEPT).as_millis());
        for (statement, age) in [
            (
                "DELETE FROM signal_buckets WHERE ctid IN (
                     SELECT ctid FROM signal_buckets WHERE bucket_start < now() - $1::interval LIMIT $2)",
                &bucket_age,
            ),
            (
                "DELETE FROM evaluations WHERE id IN (
                     SELECT id FROM evaluations WHERE finished_at < now() - $1::interval
                     ORDER BY id LIMIT $2)",
                &age,
            ),
            (
                "DELETE FROM outbox WHERE id IN (
                     SELECT id FROM outbox WHERE delivered_at < now() - $1::interval
                     ORDER BY id LIMIT $2)",
                &age,
            ),
        ] {
            for _ in 0..max_batches {
                let done = sqlx::query(statement)
                    .bind(age)
                    .bind(batch as i64)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                if done < batch as u64 {
                    break;
                }
            }
        }
        Ok(deleted)
    }

    /// Claims up to `limit` outbox rows that are due for delivery (oldest first), counting an
    /// attempt and hiding them from other dispatchers for `claim_for`.
    pub async fn claim_deliveries(
        &self,
        limit: usize,
        claim_for: std::time::Duration,
    ) -> Result<Vec<OutboxRow>> {
        let rows = sqlx::query(&format!(
            "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = now() + $2::interval
             WHERE id IN (
                 SELECT id FROM outbox
                 WHERE delivered_at IS NULL AND failed_at IS NULL AND next_attempt_at <= now()
                 ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
             RETURNING {OUTBOX_COLUMNS}"
        ))
        .bind(limit as i64)
        .bind(format!("{} milliseconds", claim_for.as_millis()))
        .fetch_all(&self.pool)
        .await?;
        let mut rows: Vec<OutboxRow> = rows.iter().map(outbox_from_row).collect();
        rows.sort_by_key(|row| row.id);
        Ok(rows)
    }

    pub async fn mark_delivered(&self, id: i64, status: u16) -> Result<()> {
        sqlx::query("UPDATE outbox SET delivered_at = now(), last_status = $2, last_error = NULL WHERE id = $1")
            .bind(id)
            .bind(i32::from(status))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Records a failed attempt and the next one after `delay`; gives up (the row joins the
    /// failed deliveries) when that would fall past `horizon` since the row's horizon start.
    /// Returns whether it gave up.
    pub async fn reschedule_delivery(
        &self,
        id: i64,
        status: Option<u16>,
        error: &str,
        delay: std::time::Duration,
        horizon: std::time::Duration,
    ) -> Result<bool> {
        let gave_up: bool = sqlx::query_scalar(
            "UPDATE outbox SET
                 last_status = $2,
                 last_error = $3,
                 next_attempt_at = now() + $4::interval,
                 failed_at = CASE WHEN now() + $4::interval > horizon_from + $5::interval
                                  THEN now() END
             WHERE id = $1
             RETURNING failed_at IS NOT NULL",
        )
        .bind(id)
        .bind(status.map(i32::from))
        .bind(error)
        .bind(format!("{} milliseconds", delay.as_millis()))
        .bind(format!("{} milliseconds", horizon.as_millis()))
        .fetch_one(&self.pool)
        .await?;
        Ok(gave_up)
    }

    /// Deliveries given up, oldest first.
    pub async fn failed_deliveries(&self, limit: i64) -> Result<Vec<OutboxRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE failed_at IS NOT NULL ORDER BY id LIMIT $1"
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(outbox_from_row).collect())
    }

    /// Gives failed deliveries (all, or these ids) a new horizon, due now; returns how many.
    pub async fn redrive_deliveries(&self, ids: Option<&[i64]>) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE outbox SET failed_at = NULL, next_attempt_at = now(), horizon_from = now()
             WHERE failed_at IS NOT NULL AND ($1::int8[] IS NULL OR id = ANY($1))",
        )
        .bind(ids.map(<[i64]>::to_vec))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Outbox rows not yet delivered nor given up.
    pub async fn outbox_backlog(&self) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "SELECT count(*) FROM outbox WHERE delivered_at IS NULL AND failed_at IS NULL",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// Live and shadow matches per rule in evaluations finished within `window`.
    pub async fn rule_hits(
        &self,
        window: std::time::Duration,
    ) -> Result<BTreeMap<String, (i64, i64)>> {
        let rows = sqlx::query(
            "SELECT d.decision->>'rule' AS rule,
                    count(*) FILTER (WHERE d.kind = 'live') AS live,
                    count(*) FILTER (WHERE d.kind = 'shadow') AS shadow
             FROM evaluations e,
                  LATERAL (SELECT 'live' AS kind, x AS decision
                             FROM jsonb_array_elements(e.decisions->'matched') x
                           UNION ALL
                           SELECT 'shadow', x
                             FROM jsonb_array_elements(coalesce(e.decisions->'shadow', '[]')) x) d
             WHERE e.finished_at >= now() - $1::interval
             GROUP BY 1",
        )
        .bind(format!("{} milliseconds", window.as_millis()))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| (row.get("rule"), (row.get("live"), row.get("shadow"))))
            .collect())
    }

    /// The entity row and its signal totals, read together by one statement (one moment).
    pub async fn entity(&self, entity: &EntityId) -> Result<Option<EntityRecord>> {
        self.entity_with(entity, false, true).await
    }

    /// As [`Store::entity`], also counting distinct actors when `with_actors`.
    pub async fn entity_with(
        &self,
        entity: &EntityId,
        with_actors: bool,
        with_windows: bool,
    ) -> Result<Option<EntityRecord>> {
        Ok(self
            .entity_records(&[entity.as_str()], with_actors, with_windows)
            .await?
            .pop())
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

    /// Applied actions matching `filter`, newest first.
    pub async fn actions(&self, filter: &ActionFilter) -> Result<Vec<ActionRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {ACTION_COLUMNS} FROM actions
             WHERE ($1::text IS NULL OR entity = $1)
               AND ($2::text IS NULL OR rule = $2)
               AND ($3::text IS NULL OR action = $3)
               AND ($4::timestamptz IS NULL OR created_at >= $4)
               AND ($5::bool IS NULL OR (reversed_at IS NOT NULL) = $5)
               AND ($6::int8 IS NULL OR id < $6)
             ORDER BY id DESC
             LIMIT $7"
        ))
        .bind(filter.entity.as_ref().map(EntityId::as_str))
        .bind(filter.rule.as_deref())
        .bind(filter.action.as_deref())
        .bind(filter.since)
        .bind(filter.reversed)
        .bind(filter.before)
        .bind(filter.limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(action_from_row).collect())
    }

    /// A moderator reverses an automated action: the entity's status goes back to what it
    /// was before the action, its version is bumped (an evaluation in flight then writes
    /// nothing), and an override keeps automation from redoing it for `override_for`. The
    /// reversal is recorded (who, when, why) and an outbox row tells the platform.
    pub async fn reverse_action(
        &self,
        id: i64,
        moderator: &str,
        reason: &str,
        override_for: std::time::Duration,
    ) -> Result<Reversal> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&format!(
            "SELECT {ACTION_COLUMNS} FROM actions WHERE id = $1 FOR UPDATE"
        ))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("no action {id}")))?;
        let action = action_from_row(&row);
        if let (Some(at), Some(by)) = (action.reversed_at, action.reversed_by.clone()) {
            return Err(StoreError::AlreadyReversed { id, by, at });
        }
        // The author whose derived signal this action wrote (events never change, so this is
        // read before any entity lock); both entity rows are then locked in the order ingest
        // and evaluation batches lock them, so that none of them waits on the other in a cycle.
        let author: Option<String> = sqlx::query_scalar("SELECT entity FROM events WHERE id = $1")
            .bind(derived_event_id(&action.dedup_key))
            .fetch_optional(&mut *tx)
            .await?;
        let author = author
            .map(|a| EntityId::parse(&a).map_err(|e| StoreError::Corrupt(e.0)))
            .transpose()?;
        let mut entities = vec![action.entity.as_str()];
        entities.extend(author.as_ref().map(EntityId::as_str));
        lock_in_order(&mut tx, &entities).await?;
        // Only the latest change can be undone: restoring an older action's previous status
        // would wipe (or even escalate over) what happened since.
        let version: i64 =
            sqlx::query_scalar("SELECT moderation_version FROM entities WHERE entity = $1")
                .bind(&action.entity)
                .fetch_one(&mut *tx)
                .await?;
        if version != action.applied_version + 1 {
            return Err(StoreError::Superseded { id, version });
        }
        // The author's derived signal for this action is compensated, so that reversed
        // actions do not count towards escalating the author.
        let author = match author {
            Some(author) => {
                let compensation = derived_event(
                    format!("derived-reversal:{}", action.dedup_key),
                    &author,
                    format!("auto.{}.reversed", action.action),
                    &action.entity,
                )?;
                record_in(&mut tx, &[&compensation]).await?;
                Some(author)
            }
            None => None,
        };
        let until_interval = format!("{} milliseconds", override_for.as_millis());
        let entity_row = sqlx::query(
            "UPDATE entities SET
                 status = $2,
                 moderation_version = moderation_version + 1,
                 override_status = $2,
                 override_until = now() + $3::interval,
                 override_by = $4,
                 override_reason = $5
             WHERE entity = $1
             RETURNING moderation_version, override_until",
        )
        .bind(&action.entity)
        .bind(&action.previous_status)
        .bind(&until_interval)
        .bind(moderator)
        .bind(reason)
        .fetch_one(&mut *tx)
        .await?;
        let reversed = sqlx::query(&format!(
            "UPDATE actions SET reversed_at = now(), reversed_by = $2, reversal_reason = $3
             WHERE id = $1 RETURNING {ACTION_COLUMNS}"
        ))
        .bind(id)
        .bind(moderator)
        .bind(reason)
        .fetch_one(&mut *tx)
        .await?;
        let action = action_from_row(&reversed);
        let override_until: DateTime<Utc> = entity_row.get("override_until");
        let new_version: i64 = entity_row.get("moderation_version");
        record_decision(
            &mut tx,
            &action.entity,
            "reversal",
            Some(id),
            moderator,
            reason,
            &action.previous_status,
            Some(override_until),
        )
        .await?;
        sqlx::query(
            "INSERT INTO outbox (topic, idempotency_key, payload) VALUES ('action.reversed', $1, $2)",
        )
        .bind(format!("reversal:{}", action.dedup_key))
        .bind(serde_json::json!({
            "action_id": id,
            "entity": action.entity,
            "action": action.action,
            "rule": action.rule,
            "status": action.previous_status,
            "moderator": moderator,
            "reason": reason,
            "moderation_version": new_version,
        }))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Reversal {
            status: Status::parse(&action.previous_status).map_err(|e| StoreError::Corrupt(e.0))?,
            moderation_version: entity_row.get("moderation_version"),
            override_until,
            action,
            author,
        })
    }

    /// A moderator's decision on an entity: its status is set, its version bumped, and
    /// automation does not escalate past it until `until`.
    pub async fn override_entity(
        &self,
        entity: &EntityId,
        moderator: &str,
        status: Status,
        until: DateTime<Utc>,
        reason: &str,
    ) -> Result<i64> {
        let mut tx = self.pool.begin().await?;
        let version: i64 = sqlx::query_scalar(
            "UPDATE entities SET
                 status = $2,
                 moderation_version = moderation_version + 1,
                 override_status = $2,
                 override_until = $3,
                 override_by = $4,
                 override_reason = $5
             WHERE entity = $1
             RETURNING moderation_version",
        )
        .bind(entity.as_str())
        .bind(status.as_str())
        .bind(until)
        .bind(moderator)
        .bind(reason)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| {
            StoreError::NotFound(format!("no events were ever recorded for {entity}"))
        })?;
        record_decision(
            &mut tx,
            entity.as_str(),
            "override",
            None,
            moderator,
            reason,
            status.as_str(),
            Some(until),
        )
        .await?;
        sqlx::query(
            "INSERT INTO outbox (topic, idempotency_key, payload) VALUES ('entity.overridden', $1, $2)",
        )
        .bind(format!("override:{entity}:{version}"))
        .bind(serde_json::json!({
            "entity": entity,
            "status": status,
            "until": until,
            "moderator": moderator,
            "reason": reason,
            "moderation_version": version,
        }))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(version)
    }

    /// Automated actions applied in the last `window`, and those reversed within 24h of being
    /// applied; overall and per rule (sorted by rule).
    pub async fn reversal_counts(
        &self,
        window: std::time::Duration,
    ) -> Result<(ReversalCounts, Vec<(String, ReversalCounts)>)> {
        let rows = sqlx::query(
            "SELECT rule, count(*) AS actions,
                    count(*) FILTER (WHERE reversed_at IS NOT NULL
                                       AND reversed_at <= created_at + interval '24 hours') AS reversed
             FROM actions
             WHERE created_at >= now() - $1::interval
             GROUP BY rule ORDER BY rule",
        )
        .bind(format!("{} milliseconds", window.as_millis()))
        .fetch_all(&self.pool)
        .await?;
        let mut total = ReversalCounts::default();
        let mut by_rule = Vec::with_capacity(rows.len());
        for row in rows {
            let counts = ReversalCounts {
                actions: row.get("actions"),
                reversed: row.get("reversed"),
            };
            total.actions += counts.actions;
            total.reversed += counts.reversed;
            by_rule.push((row.get("rule"), counts));
        }
        Ok((total, by_rule))
    }
}

/// The id of the author's derived event for the action with this dedup key (one per action).
fn derived_event_id(dedup_key: &str) -> String {
    format!("derived:{dedup_key}")
}

/// A signal quiesce records on an author's entity about one of its entities (`actor`).
fn derived_event(id: String, author: &EntityId, signal: String, actor: &str) -> Result<Event> {
    let corrupt = |e: crate::domain::Invalid| StoreError::Corrupt(e.0);
    Ok(Event {
        id: EventId::parse(&id).map_err(corrupt)?,
        entity: author.clone(),
        signal: Signal::parse(&signal).map_err(corrupt)?,
        actor: Some(actor.to_owned()),
        weight: 1.0,
        occurred_at: None,
        priority: Priority::Normal,
        author: None,
    })
}

/// The completion of one evaluation from what the fenced statement recorded for it (`None`:
/// the version had moved and nothing was written).
pub fn completion_of(
    snapshot: &Snapshot,
    decision: Option<&Decision>,
    recorded: Option<&Recorded>,
) -> Result<Completion> {
    match (recorded, decision) {
        (None, _) => Err(StoreError::VersionConflict {
            read: snapshot.moderation_version,
        }),
        (Some(_), None) => Ok(Completion::NoAction),
        (
            Some(Recorded {
                action_id: Some(id),
            }),
            Some(_),
        ) => Ok(Completion::Applied {
            action_id: *id,
            author: None,
        }),
        (Some(Recorded { action_id: None }), Some(_)) => Ok(Completion::AlreadyApplied),
    }
}

/// Records events in the caller's transaction; returns the ids that were new. Events are
/// inserted sorted by id and counters upserted sorted by key, so concurrent transactions that
/// share ids or entities wait on each other in one order, never in a cycle. Only newly
/// inserted events move the counters.
async fn record_in(
    tx: &mut Transaction<'_, Postgres>,
    events: &[&Event],
) -> Result<HashSet<String>> {
    let mut events = events.to_vec();
    events.sort_unstable_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    let inserted: Vec<String> = sqlx::query_scalar(
        "INSERT INTO events (id, entity, signal, actor, weight, occurred_at, priority, author)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[],
                              $6::timestamptz[], $7::text[], $8::text[])
         ON CONFLICT (id) DO NOTHING
         RETURNING id",
    )
    .bind(events.iter().map(|e| e.id.as_str()).collect::<Vec<_>>())
    .bind(events.iter().map(|e| e.entity.as_str()).collect::<Vec<_>>())
    .bind(events.iter().map(|e| e.signal.as_str()).collect::<Vec<_>>())
    .bind(
        events
            .iter()
            .map(|e| e.actor.as_deref())
            .collect::<Vec<_>>(),
    )
    .bind(events.iter().map(|e| e.weight).collect::<Vec<_>>())
    .bind(events.iter().map(|e| e.occurred_at).collect::<Vec<_>>())
    .bind(
        events
            .iter()
            .map(|e| e.priority.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        events
            .iter()
            .map(|e| e.author.as_ref().map(EntityId::as_str))
            .collect::<Vec<_>>(),
    )
    .fetch_all(&mut **tx)
    .await?;
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
    sqlx::query(
        "INSERT INTO entities (entity, kind, event_count, pending_since, last_event_at, author)
         SELECT entity, kind, n, now(), now(), author
         FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::text[]) AS t(entity, kind, n, author)
         ORDER BY entity
         ON CONFLICT (entity) DO UPDATE SET
             event_count = entities.event_count + EXCLUDED.event_count,
             pending_since = COALESCE(entities.pending_since, now()),
             last_event_at = now(),
             author = COALESCE(EXCLUDED.author, entities.author)",
    )
    .bind(ids)
    .bind(kinds)
    .bind(counts)
    .bind(authors)
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
    sqlx::query(
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
    )
    .bind(&entities)
    .bind(&signals)
    .bind(&counts)
    .bind(&weights)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Locks entity rows in id order, as ingest does, before a transaction touches several.
async fn lock_in_order(tx: &mut Transaction<'_, Postgres>, entities: &[&str]) -> Result<()> {
    sqlx::query("SELECT 1 FROM entities WHERE entity = ANY($1) ORDER BY entity FOR UPDATE")
        .bind(entities)
        .execute(&mut **tx)
        .await?;
    Ok(())
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
    let status: String = row.get("status");
    Ok(EntityRecord {
        entity: row.get("entity"),
        kind: row.get("kind"),
        status: Status::parse(&status).map_err(|e| StoreError::Corrupt(e.0))?,
        moderation_version: row.get("moderation_version"),
        event_count: row.get("event_count"),
        evaluated_event_count: row.get("evaluated_event_count"),
        pending_since: row.get("pending_since"),
        last_event_at: row.get("last_event_at"),
        evaluation_count: row.get("evaluation_count"),
        last_evaluated_at: row.get("last_evaluated_at"),
        signals,
        author: row.get("author"),
        override_decision: override_from_row(row)?,
        read_at: row.get("read_at"),
    })
}

/// Whether an error means Postgres could not be reached (answer 503 / retry), as opposed to a
/// query or data problem.
pub fn is_unavailable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        // 08: connection exception, 53: insufficient resources, 57P: shutdown or restart. A
        // cancelled statement (57014, our statement_timeout) is not here: a slow query of one
        // entity must not pause every worker.
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08") || code.starts_with("53") || code.starts_with("57P")
        }),
        _ => false,
    }
}

fn override_from_row(row: &sqlx::postgres::PgRow) -> Result<Option<Override>> {
    let status: Option<String> = row.get("override_status");
    let until: Option<DateTime<Utc>> = row.get("override_until");
    match (status, until) {
        (Some(status), Some(until)) => Ok(Some(Override {
            status: Status::parse(&status).map_err(|e| StoreError::Corrupt(e.0))?,
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
