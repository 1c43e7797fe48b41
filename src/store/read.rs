//! The read API's reads: applied actions, reversal counts, rule hits and one entity's record.

use std::collections::BTreeMap;

use super::{EntityRecord, Result, Store, interval};
use crate::domain::{AttributeReads, EntityId, Windows};
use chrono::{DateTime, Utc};
use serde::Serialize;

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

/// A label a live rule recorded on an entity: once, without changing its status.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
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

impl Store {
    /// Applied actions matching `filter`, newest first. The cursor is always a condition on
    /// the primary key (`id < coalesce(cursor, max)`), so the generic plan the pool uses walks
    /// the index from the cursor and a deep page costs what the first one does; an `id < $6`
    /// behind `$6 IS NULL OR` was only a filter, and read every newer action first.
    pub async fn actions(&self, filter: &ActionFilter) -> Result<Vec<ActionRecord>> {
        Ok(sqlx::query_as!(
            ActionRecord,
            "SELECT id, entity, action, rule, reason, previous_status, new_status, applied_version,
                    dedup_key, created_at, snapshot, reversed_at, reversed_by, reversal_reason
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
        .fetch_all(self.reader())
        .await?)
    }

    /// Automated actions applied in the last `window` (a timer's restore is none), and those
    /// reversed within 24h of being applied; overall and per rule (sorted by rule).
    pub async fn reversal_counts(
        &self,
        window: std::time::Duration,
    ) -> Result<(ReversalCounts, Vec<(String, ReversalCounts)>)> {
        let rows = sqlx::query!(
            r#"SELECT rule, count(*) AS "actions!",
                    count(*) FILTER (WHERE reversed_at IS NOT NULL
                                       AND reversed_at <= created_at + interval '24 hours') AS "reversed!"
             FROM actions
             -- A timer's restore is no rule's decision: it is not in the reversal rate.
             WHERE created_at >= now() - $1::interval AND action NOT IN ('restore', 'review')
             GROUP BY rule ORDER BY rule"#,
            interval(window),
        )
        .fetch_all(self.reader())
        .await?;
        let mut total = ReversalCounts::default();
        let mut by_rule = Vec::with_capacity(rows.len());
        for row in rows {
            let counts = ReversalCounts {
                actions: row.actions,
                reversed: row.reversed,
            };
            total.actions += counts.actions;
            total.reversed += counts.reversed;
            by_rule.push((row.rule, counts));
        }
        Ok((total, by_rule))
    }

    /// Live and shadow matches per rule in evaluations finished within `window`.
    pub async fn rule_hits(
        &self,
        window: std::time::Duration,
    ) -> Result<BTreeMap<String, (i64, i64)>> {
        let rows = sqlx::query!(
            r#"SELECT d.decision->>'rule' AS "rule!",
                    count(*) FILTER (WHERE d.kind = 'live') AS "live!",
                    count(*) FILTER (WHERE d.kind = 'shadow') AS "shadow!"
             FROM evaluations e,
                  LATERAL (SELECT 'live' AS kind, x AS decision
                             FROM jsonb_array_elements(e.decisions->'matched') x
                           UNION ALL
                           SELECT 'shadow', x
                             FROM jsonb_array_elements(coalesce(e.decisions->'shadow', '[]')) x) d
             WHERE e.finished_at >= now() - $1::interval
             GROUP BY 1"#,
            interval(window),
        )
        .fetch_all(self.reader())
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| (row.rule, (row.live, row.shadow)))
            .collect())
    }

    /// Evaluations finished in the last `window`, per entity: what a canary's two groups are
    /// counted from.
    pub async fn evaluations_per_entity(
        &self,
        window: std::time::Duration,
    ) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query!(
            r#"SELECT entity, count(*) AS "evaluations!"
             FROM evaluations
             WHERE finished_at >= now() - $1::interval
             GROUP BY entity"#,
            interval(window),
        )
        .fetch_all(self.reader())
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| (row.entity, row.evaluations))
            .collect())
    }

    /// The entity row and its signal totals, read together by one statement (one moment).
    pub async fn entity(&self, entity: &EntityId) -> Result<Option<EntityRecord>> {
        self.entity_with(entity, false, &Windows::ALL).await
    }

    /// The labels recorded on the entity (`labels` on a rule), oldest first.
    pub async fn labels_of(&self, entity: &EntityId) -> Result<Vec<LabelRecord>> {
        Ok(sqlx::query_as!(
            LabelRecord,
            "SELECT label, rule, reason, created_at FROM entity_labels
             WHERE entity = $1 ORDER BY created_at, label",
            entity.as_str(),
        )
        .fetch_all(self.reader())
        .await?)
    }

    /// As [`Store::entity`], also counting distinct actors when `with_actors`. Read for a page,
    /// from the replica while it keeps up.
    pub async fn entity_with(
        &self,
        entity: &EntityId,
        with_actors: bool,
        windows: &Windows,
    ) -> Result<Option<EntityRecord>> {
        Ok(self
            .entity_records_on(
                self.reader(),
                &[entity.as_str()],
                with_actors,
                windows,
                AttributeReads::ALL,
            )
            .await?
            .pop())
    }
}

impl Store {
    /// How many of these entities Postgres has a record of.
    pub async fn count_known_entities(&self, entities: &[String]) -> Result<i64> {
        let known = sqlx::query_scalar!(
            r#"SELECT count(*) AS "known!" FROM entities WHERE entity = ANY($1)"#,
            entities,
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(known)
    }
}
