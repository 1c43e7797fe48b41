//! What a backtest reads, and only reads: the evaluations of a window in entity order, each
//! with the snapshot the rules saw and the action it applied, in keyset pages; and the latest
//! moderator decision on a page's entities. Nothing here writes or locks a row.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sqlx::types::Json;

use super::{Result, Store, StoreError, entity_or_report};
use crate::domain::{EntityId, SignalStats, Snapshot, SnapshotAttributes, Status};

/// Where the next page of [`Backtest::replay_page`] starts: after this evaluation, in the order
/// (entity, started_at, id) the evaluations' entity index gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayCursor {
    pub entity: String,
    pub started_at: DateTime<Utc>,
    pub id: i64,
}

impl ReplayCursor {
    /// Before every evaluation.
    pub fn start() -> Self {
        Self {
            entity: String::new(),
            started_at: DateTime::<Utc>::UNIX_EPOCH,
            id: 0,
        }
    }
}

/// The action an evaluation applied, as it stands now.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedAction {
    pub id: i64,
    pub rule: String,
    pub action: crate::domain::Action,
    pub new_status: Status,
    pub created_at: DateTime<Utc>,
    /// A moderator reversed it within 24h of its being applied (the reversal rate's measure).
    pub reversed_within_24h: bool,
    /// When a moderator reversed it, if one did.
    pub reversed_at: Option<DateTime<Utc>>,
}

/// One recorded evaluation, as a backtest replays it.
#[derive(Debug, Clone)]
pub struct ReplayedEvaluation {
    pub id: i64,
    pub entity: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub moderation_version: i64,
    /// What the rules saw: the evaluation's own snapshot or, for one recorded before every
    /// evaluation kept it, its action's; `None` when neither was kept.
    pub snapshot: Option<Snapshot>,
    pub applied: Option<AppliedAction>,
    /// The status a timed action's end restored in this evaluation (its action is a
    /// `restore`, not a rule's): the replay takes it as it takes a moderator's decision.
    pub restored: Option<Status>,
    /// The labels live rules gave the entity in the window (each once per entity), the same
    /// on every evaluation of the entity.
    pub labels_in_force: Vec<String>,
}

/// A moderator's latest reversal or override of an entity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatestDecision {
    pub status: Status,
    pub at: DateTime<Utc>,
}

/// A snapshot as stored in `evaluations.snapshot` and `actions.snapshot` (the JSON of
/// [`Snapshot`]).
#[derive(Debug, Deserialize)]
struct StoredSnapshot {
    entity: String,
    kind: String,
    status: Status,
    moderation_version: i64,
    event_count: i64,
    #[serde(default)]
    signals: BTreeMap<String, SignalStats>,
    taken_at: DateTime<Utc>,
    #[serde(default)]
    override_cap: Option<Status>,
    #[serde(default)]
    author: Option<String>,
    #[serde(default)]
    attributes: SnapshotAttributes,
    timer: Option<crate::domain::Timer>,
}

impl StoredSnapshot {
    fn into_snapshot(self, evaluation: i64) -> Result<Snapshot> {
        let entity = EntityId::parse(&self.entity).map_err(|e| {
            StoreError::corrupt(format!("the snapshot of evaluation {evaluation}"), e)
        })?;
        Ok(Snapshot {
            entity,
            kind: self.kind,
            status: self.status,
            moderation_version: self.moderation_version,
            event_count: self.event_count,
            previously_evaluated: 0,
            unfolded: 0,
            signals: self.signals,
            taken_at: self.taken_at,
            override_cap: self.override_cap,
            author: self
                .author
                .as_deref()
                .and_then(|a| entity_or_report(a, "a recorded snapshot's author")),
            attributes: self.attributes,
            timer: self.timer,
            content_date: None,
            first_event_at: None,
            traces: Vec::new(),
        })
    }
}

struct ReplayRow {
    id: i64,
    entity: String,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
    moderation_version: i64,
    snapshot: Option<Json<StoredSnapshot>>,
    action_id: Option<i64>,
    action: Option<String>,
    rule: Option<String>,
    new_status: Option<String>,
    applied_at: Option<DateTime<Utc>>,
    reversed_within_24h: Option<bool>,
    reversed_at: Option<DateTime<Utc>>,
}

/// The store's handle on what a backtest reads: a window's evaluations in entity order (`Store::backtest`).
#[derive(Clone, Copy)]
pub struct Backtest<'a> {
    pub(super) store: &'a Store,
}

impl Backtest<'_> {
    /// Postgres' clock: where a backtest's window ends.
    pub async fn now(self) -> Result<DateTime<Utc>> {
        Ok(sqlx::query_scalar!(r#"SELECT now() AS "now!""#)
            .fetch_one(self.store.reader())
            .await?)
    }

    /// Up to `limit` evaluations finished in `[since, until)`, after `cursor` in the order
    /// (entity, started_at, id): one index range per time partition of the window, merged, so a
    /// page costs the same wherever it starts. With them, the latest moderator decision (a
    /// reversal or an override) before `until` on each of their entities that has one. Both
    /// are read in one READ ONLY transaction: Postgres itself refuses any write in it.
    pub async fn replay_page(
        self,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
        cursor: &ReplayCursor,
        limit: i64,
    ) -> Result<(Vec<ReplayedEvaluation>, HashMap<String, LatestDecision>)> {
        let mut tx = self.store.reader().begin().await?;
        sqlx::query!("SET TRANSACTION READ ONLY")
            .execute(&mut *tx)
            .await?;
        let rows = sqlx::query_as!(
            ReplayRow,
            r#"SELECT e.id AS "id!", e.entity, e.started_at, e.finished_at, e.moderation_version,
                      coalesce(e.snapshot, a.snapshot) AS "snapshot: Json<StoredSnapshot>",
                      a.id AS "action_id?", a.action AS "action?", a.rule AS "rule?",
                      a.new_status AS "new_status?", a.created_at AS "applied_at?",
                      (a.reversed_at IS NOT NULL
                       AND a.reversed_at <= a.created_at + interval '24 hours') AS "reversed_within_24h?",
                      a.reversed_at AS "reversed_at?"
               FROM evaluations e
               LEFT JOIN actions a ON a.id = e.action_id
               WHERE e.finished_at >= $1 AND e.finished_at < $2
                 AND (e.entity, e.started_at) >= ($3, $4)
                 AND (e.entity, e.started_at, e.id) > ($3, $4, $5)
               ORDER BY e.entity, e.started_at, e.id
               LIMIT $6"#,
            since,
            until,
            cursor.entity,
            cursor.started_at,
            cursor.id,
            limit,
        )
        .fetch_all(&mut *tx)
        .await?;
        let page = rows
            .into_iter()
            .map(replayed_from)
            .collect::<Result<Vec<_>>>()?;
        let mut entities: Vec<&str> = page.iter().map(|e| e.entity.as_str()).collect();
        entities.dedup();
        let decisions = sqlx::query!(
            r#"SELECT DISTINCT ON (entity) entity, status, created_at
               FROM moderator_decisions
               WHERE entity = ANY($1) AND created_at < $2
               ORDER BY entity, id DESC"#,
            &entities as &[&str],
            until,
        )
        .fetch_all(&mut *tx)
        .await?;
        let labels = sqlx::query!(
            "SELECT entity, label FROM entity_labels
             WHERE entity = ANY($1) AND created_at >= $2 AND created_at < $3
             ORDER BY entity, label",
            &entities as &[&str],
            since,
            until,
        )
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let mut labelled: HashMap<String, Vec<String>> = HashMap::new();
        for row in labels {
            labelled.entry(row.entity).or_default().push(row.label);
        }
        let page = page
            .into_iter()
            .map(|mut evaluation| {
                if let Some(labels) = labelled.get(&evaluation.entity) {
                    evaluation.labels_in_force = labels.clone();
                }
                evaluation
            })
            .collect();
        let decisions = decisions
            .into_iter()
            .map(|row| {
                let status = Status::parse(&row.status).map_err(|e| {
                    StoreError::corrupt(format!("a decision's status on {}", row.entity), e)
                })?;
                Ok((
                    row.entity,
                    LatestDecision {
                        status,
                        at: row.created_at,
                    },
                ))
            })
            .collect::<Result<HashMap<_, _>>>()?;
        Ok((page, decisions))
    }
}

fn replayed_from(row: ReplayRow) -> Result<ReplayedEvaluation> {
    let id = row.id;
    let snapshot = row
        .snapshot
        .map(|Json(stored)| stored.into_snapshot(id))
        .transpose()?;
    let restored = match (row.action.as_deref(), &row.new_status) {
        (Some("restore"), Some(status)) => Some(Status::parse(status).map_err(|e| {
            StoreError::corrupt(format!("the status a restore of {} set", row.entity), e)
        })?),
        _ => None,
    };
    let action = row.action.filter(|_| restored.is_none());
    let applied = match (row.action_id, action, row.rule, row.new_status) {
        (Some(action_id), Some(action), Some(rule), Some(new_status)) => Some(AppliedAction {
            id: action_id,
            action: match action.as_str() {
                "flag" => crate::domain::Action::Flag,
                "hide" => crate::domain::Action::Hide,
                "suspend" => crate::domain::Action::Suspend,
                _ => {
                    return Err(StoreError::Corrupt(super::Corruption {
                        what: format!("the action of action {action_id}: {action:?}"),
                        source: None,
                    }));
                }
            },
            new_status: Status::parse(&new_status).map_err(|e| {
                StoreError::corrupt(format!("the new status of action {action_id}"), e)
            })?,
            rule,
            created_at: row.applied_at.unwrap_or(row.finished_at),
            reversed_within_24h: row.reversed_within_24h.unwrap_or(false),
            reversed_at: row.reversed_at,
        }),
        _ => None,
    };
    Ok(ReplayedEvaluation {
        id,
        entity: row.entity,
        started_at: row.started_at,
        finished_at: row.finished_at,
        moderation_version: row.moderation_version,
        snapshot,
        applied,
        restored,
        labels_in_force: Vec::new(),
    })
}
