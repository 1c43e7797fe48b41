//! The read API's reads: applied actions, an entity's evaluations, reversal counts, rule hits
//! and one entity's record.

use std::collections::BTreeMap;

use super::{EntityRecord, PageKey, Result, Store, interval};
use crate::domain::{AttributeReads, EntityId, Windows};
use chrono::{DateTime, Utc};
use serde::Serialize;

#[derive(Debug, Clone)]
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
    pub snapshot: serde_json::Value,
    pub reversed_at: Option<DateTime<Utc>>,
    pub reversed_by: Option<String>,
    pub reversal_reason: Option<String>,
    /// Once reversed, where the reversal came from: `review` (a moderator's own) or `appeal`
    /// (an upheld appeal).
    pub reversal_source: Option<String>,
    /// The rules version in force when an evaluation applied it (null: applied before rules
    /// versions, or not by an evaluation: a review decision, a timer ended early).
    pub rules_version: Option<i64>,
}

/// One completed evaluation as recorded: when, on which version and event count, what the rules
/// concluded (`decisions`, a [`crate::rules::Verdict`]) and the action it applied, if any.
#[derive(Debug, Clone)]
pub struct EvaluationRecord {
    pub id: i64,
    pub worker: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub due_at: Option<DateTime<Utc>>,
    pub moderation_version: i64,
    pub event_count: i64,
    pub decisions: serde_json::Value,
    pub action_id: Option<i64>,
    /// The snapshot the rules saw. Every evaluation keeps it now; one recorded by an earlier
    /// version kept it only when a shadow rule matched.
    pub snapshot: Option<serde_json::Value>,
    /// The rules version that decided it (`None`: recorded before rules versions).
    pub rules_version: Option<i64>,
}

/// How often a rule held in a window's evaluations: live (it acted, or would have but for the
/// status or an override), in shadow, and exempted (it held, and so did its `unless`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleHits {
    pub live: i64,
    pub shadow: i64,
    pub exempted: i64,
}

/// A label a live rule recorded on an entity: once, without changing its status.
#[derive(Debug, Clone)]
pub struct LabelRecord {
    pub label: String,
    pub rule: String,
    pub reason: String,
    pub created_at: DateTime<Utc>,
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

/// Automated actions applied in a window, and how many a moderator reversed within 24h or
/// upholding an appeal (an appeal comes later than a moderator's own look).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ReversalCounts {
    pub actions: i64,
    pub reversed: i64,
    /// Of `reversed`, those reversed by an upheld appeal.
    pub reversed_by_appeal: i64,
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

/// The store's handle on the read API's reads (`Store::read`).
#[derive(Clone, Copy)]
pub struct Read<'a> {
    pub(super) store: &'a Store,
}

impl Read<'_> {
    /// Applied actions matching `filter`, newest first. The cursor is always a condition on
    /// the primary key (`id < coalesce(cursor, max)`), so the generic plan the pool uses walks
    /// the index from the cursor and a deep page costs what the first one does; an `id < $6`
    /// behind `$6 IS NULL OR` was only a filter, and read every newer action first.
    pub async fn actions(self, filter: &ActionFilter) -> Result<Vec<ActionRecord>> {
        Ok(sqlx::query_as!(
            ActionRecord,
            "SELECT id, entity, action, rule, reason, previous_status, new_status, applied_version,
                    dedup_key, created_at, snapshot, reversed_at, reversed_by, reversal_reason,
                    reversal_source, rules_version
             FROM actions
             WHERE ($1::text IS NULL OR entity = $1)
               AND ($2::text IS NULL OR rule = $2)
               AND ($3::text IS NULL OR action = $3)
               AND ($4::timestamptz IS NULL OR created_at >= $4)
               AND ($5::bool IS NULL OR (reversed_at IS NOT NULL) = $5)
               AND id < coalesce($6::int8, 9223372036854775807)
             ORDER BY id DESC
             LIMIT $7",
            filter.entity.as_ref().map(EntityId::as_str),
            filter.rule.as_deref(),
            filter.action.as_deref(),
            filter.since,
            filter.reversed,
            filter.before,
            filter.limit,
        )
        .fetch_all(self.store.reader())
        .await?)
    }

    /// Automated actions applied in the last `window` (a timer's restore is none), and those
    /// reversed within 24h of being applied; overall and per rule (sorted by rule).
    pub async fn reversal_counts(
        self,
        window: std::time::Duration,
    ) -> Result<(ReversalCounts, Vec<(String, ReversalCounts)>)> {
        let rows = sqlx::query!(
            r#"SELECT rule, count(*) AS "actions!",
                    count(*) FILTER (WHERE reversed_at IS NOT NULL
                                       AND (reversed_at <= created_at + interval '24 hours'
                                            OR reversal_source = 'appeal')) AS "reversed!",
                    count(*) FILTER (WHERE reversal_source = 'appeal') AS "reversed_by_appeal!"
             FROM actions
             -- A timer's restore is no rule's decision: it is not in the reversal rate.
             WHERE created_at >= now() - $1::interval AND action NOT IN ('restore', 'review')
             GROUP BY rule ORDER BY rule"#,
            interval(window),
        )
        .fetch_all(self.store.reader())
        .await?;
        let mut total = ReversalCounts::default();
        let mut by_rule = Vec::with_capacity(rows.len());
        for row in rows {
            let counts = ReversalCounts {
                actions: row.actions,
                reversed: row.reversed,
                reversed_by_appeal: row.reversed_by_appeal,
            };
            total.actions += counts.actions;
            total.reversed += counts.reversed;
            total.reversed_by_appeal += counts.reversed_by_appeal;
            by_rule.push((row.rule, counts));
        }
        Ok((total, by_rule))
    }

    /// Live, shadow and exempted matches per rule in evaluations finished within `window`.
    pub async fn rule_hits(
        self,
        window: std::time::Duration,
    ) -> Result<BTreeMap<String, RuleHits>> {
        let rows = sqlx::query!(
            r#"SELECT d.rule AS "rule!",
                    count(*) FILTER (WHERE d.kind = 'live') AS "live!",
                    count(*) FILTER (WHERE d.kind = 'shadow') AS "shadow!",
                    count(*) FILTER (WHERE d.kind = 'exempted') AS "exempted!"
             FROM evaluations e,
                  LATERAL (SELECT 'live' AS kind, x->>'rule' AS rule
                             FROM jsonb_array_elements(e.decisions->'matched') x
                           UNION ALL
                           SELECT 'shadow', x->>'rule'
                             FROM jsonb_array_elements(coalesce(e.decisions->'shadow', '[]')) x
                           UNION ALL
                           SELECT 'exempted', x
                             FROM jsonb_array_elements_text(coalesce(e.decisions->'exempted', '[]')) x) d
             WHERE e.finished_at >= now() - $1::interval
             GROUP BY 1"#,
            interval(window),
        )
        .fetch_all(self.store.reader())
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let hits = RuleHits {
                    live: row.live,
                    shadow: row.shadow,
                    exempted: row.exempted,
                };
                (row.rule, hits)
            })
            .collect())
    }

    /// The entity's evaluations, newest first, `limit` of them before `before` (a page's last
    /// row), on the entity's index. The bound on `started_at` alone is what lets the index
    /// start at the cursor; the row comparison then orders evaluations that started at once.
    pub async fn entity_evaluations(
        self,
        entity: &EntityId,
        before: Option<PageKey>,
        limit: i64,
    ) -> Result<Vec<EvaluationRecord>> {
        let before_at = before.map(|key| key.at());
        Ok(sqlx::query_as!(
            EvaluationRecord,
            "SELECT id, worker, started_at, finished_at, due_at, moderation_version, event_count,
                    decisions, action_id, snapshot, rules_version
             FROM evaluations
             WHERE entity = $1
               AND started_at <= coalesce($2::timestamptz, 'infinity')
               AND (started_at, id) < (coalesce($2::timestamptz, 'infinity'),
                                       coalesce($3::int8, 9223372036854775807))
             ORDER BY started_at DESC, id DESC LIMIT $4",
            entity.as_str(),
            before_at,
            before.map(|key| key.id),
            limit,
        )
        .fetch_all(self.store.reader())
        .await?)
    }

    /// Evaluations finished in the last `window`, per entity: what a canary's two groups are
    /// counted from.
    pub async fn evaluations_per_entity(
        self,
        window: std::time::Duration,
    ) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query!(
            r#"SELECT entity, count(*) AS "evaluations!"
             FROM evaluations
             WHERE finished_at >= now() - $1::interval
             GROUP BY entity"#,
            interval(window),
        )
        .fetch_all(self.store.reader())
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| (row.entity, row.evaluations))
            .collect())
    }

    /// The entity row and its signal totals, read together by one statement (one moment).
    pub async fn entity(self, entity: &EntityId) -> Result<Option<EntityRecord>> {
        self.entity_with(entity, false, &Windows::ALL).await
    }

    /// The labels recorded on the entity (`labels` on a rule), oldest first.
    pub async fn labels_of(self, entity: &EntityId) -> Result<Vec<LabelRecord>> {
        Ok(sqlx::query_as!(
            LabelRecord,
            "SELECT label, rule, reason, created_at FROM entity_labels
             WHERE entity = $1 ORDER BY created_at, label",
            entity.as_str(),
        )
        .fetch_all(self.store.reader())
        .await?)
    }

    /// As [`Read::entity`], also counting distinct actors when `with_actors`. Read for a page,
    /// from the replica while it keeps up.
    pub async fn entity_with(
        self,
        entity: &EntityId,
        with_actors: bool,
        windows: &Windows,
    ) -> Result<Option<EntityRecord>> {
        Ok(self
            .store
            .snapshots()
            .entity_records_on(
                self.store.reader(),
                &[entity.as_str()],
                with_actors,
                windows,
                AttributeReads::ALL,
            )
            .await?
            .pop())
    }
}

impl Read<'_> {
    /// How many of these entities Postgres has a record of.
    pub async fn count_known_entities(self, entities: &[String]) -> Result<i64> {
        let known = sqlx::query_scalar!(
            r#"SELECT count(*) AS "known!" FROM entities WHERE entity = ANY($1)"#,
            entities,
        )
        .fetch_one(&self.store.pool)
        .await?;
        Ok(known)
    }
}
