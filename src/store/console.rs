//! What the moderator console reads beyond the JSON API's reads (`read.rs`): one action, an
//! entity's history (its actions, moderator decisions, recent events and events per minute), reversals per day and rule, and the pace of evaluations. Every statement is keyed
//! by an indexed column and bounded by a limit or a window.

use chrono::{DateTime, Utc};

use super::{ActionRecord, Result, Store, interval};
use crate::domain::EntityId;

/// A moderator's reversal or override, from the audit trail.
#[derive(Debug, Clone)]
pub struct DecisionRecord {
    pub id: i64,
    pub kind: String,
    pub action_id: Option<i64>,
    pub moderator: String,
    pub reason: String,
    pub status: String,
    pub until: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// One recorded event of an entity.
#[derive(Debug, Clone)]
pub struct EventRecord {
    pub id: String,
    pub signal: String,
    pub actor: Option<String>,
    pub weight: f64,
    pub received_at: DateTime<Utc>,
}

/// Events of one signal received in one minute.
#[derive(Debug, Clone, PartialEq)]
pub struct MinuteCount {
    pub signal: String,
    pub minute: DateTime<Utc>,
    pub count: i64,
}

/// Actions of one rule applied on one day (UTC), and how many of them were reversed within 24h.
#[derive(Debug, Clone, PartialEq)]
pub struct DailyReversals {
    pub day: DateTime<Utc>,
    pub rule: String,
    pub actions: i64,
    pub reversed: i64,
}

/// How fast evaluations run now: finished in the last minute, and the fire delay (start minus
/// due time) of those finished in the last five minutes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvaluationPace {
    pub last_minute: i64,
    pub delay_samples: i64,
    pub delay_p50_ms: Option<f64>,
    pub delay_p99_ms: Option<f64>,
    pub delay_max_ms: Option<f64>,
}

/// The store's handle on what the console reads beyond the API's reads (`Store::console`).
#[derive(Clone, Copy)]
pub struct Console<'a> {
    pub(super) store: &'a Store,
}

impl Console<'_> {
    /// One action by id.
    pub async fn action(self, id: i64) -> Result<Option<ActionRecord>> {
        Ok(sqlx::query_as!(
            ActionRecord,
            "SELECT id, entity, action, rule, reason, previous_status, new_status, applied_version,
                    dedup_key, created_at, snapshot, reversed_at, reversed_by, reversal_reason,
                    reversal_source, rules_version
             FROM actions WHERE id = $1",
            id,
        )
        .fetch_optional(self.store.reader())
        .await?)
    }

    /// The entity's latest actions, newest first (on `actions_entity_idx`).
    pub async fn entity_actions(self, entity: &EntityId, limit: i64) -> Result<Vec<ActionRecord>> {
        Ok(sqlx::query_as!(
            ActionRecord,
            "SELECT id, entity, action, rule, reason, previous_status, new_status, applied_version,
                    dedup_key, created_at, snapshot, reversed_at, reversed_by, reversal_reason,
                    reversal_source, rules_version
             FROM actions WHERE entity = $1
             ORDER BY id DESC LIMIT $2",
            entity.as_str(),
            limit,
        )
        .fetch_all(self.store.reader())
        .await?)
    }

    /// Moderators' reversals and overrides of the entity, newest first.
    pub async fn entity_decisions(
        self,
        entity: &EntityId,
        limit: i64,
    ) -> Result<Vec<DecisionRecord>> {
        Ok(sqlx::query_as!(
            DecisionRecord,
            "SELECT id, kind, action_id, moderator, reason, status, until, created_at
             FROM moderator_decisions WHERE entity = $1
             ORDER BY id DESC LIMIT $2",
            entity.as_str(),
            limit,
        )
        .fetch_all(self.store.reader())
        .await?)
    }

    /// The entity's latest retained events, newest first.
    pub async fn entity_events(self, entity: &EntityId, limit: i64) -> Result<Vec<EventRecord>> {
        Ok(sqlx::query_as!(
            EventRecord,
            // By inserting transaction, newest first (the entity's index), not by receive
            // time, which would sort every event of a busy entity; the two orders differ only
            // among events received within one commit of each other.
            "SELECT id, signal, actor, weight, received_at
             FROM events WHERE entity = $1
             ORDER BY xid DESC, id DESC LIMIT $2",
            entity.as_str(),
            limit,
        )
        .fetch_all(self.store.reader())
        .await?)
    }

    /// Events per minute and signal since `since`, from the minute buckets rules count
    /// windows with (kept for 24h), oldest first.
    pub async fn entity_minutes(
        self,
        entity: &EntityId,
        since: DateTime<Utc>,
    ) -> Result<Vec<MinuteCount>> {
        Ok(sqlx::query_as!(
            MinuteCount,
            r#"SELECT signal AS "signal!", bucket_start AS "minute!", count AS "count!"
             FROM bucket_counts WHERE entity = $1 AND bucket_start >= $2
             ORDER BY bucket_start, signal"#,
            entity.as_str(),
            since,
        )
        .fetch_all(self.store.reader())
        .await?)
    }

    /// Automated actions per UTC day and rule over the last `window`, and those reversed
    /// within 24h of being applied (the figure `reversal_counts` gives for the whole window).
    pub async fn daily_reversals(self, window: std::time::Duration) -> Result<Vec<DailyReversals>> {
        Ok(sqlx::query_as!(
            DailyReversals,
            r#"SELECT date_trunc('day', created_at, 'UTC') AS "day!", rule,
                      count(*) AS "actions!",
                      count(*) FILTER (WHERE reversed_at IS NOT NULL
                                         AND reversed_at <= created_at + interval '24 hours') AS "reversed!"
             FROM actions
             WHERE created_at >= now() - $1::interval AND action NOT IN ('restore', 'review')
             GROUP BY 1, 2 ORDER BY 1, 2"#,
            interval(window),
        )
        .fetch_all(self.store.reader())
        .await?)
    }

    /// Evaluations finished in the last minute, and the fire delay of those of the last five.
    pub async fn evaluation_pace(self) -> Result<EvaluationPace> {
        let row = sqlx::query!(
            r#"SELECT count(*) FILTER (WHERE finished_at >= now() - interval '1 minute') AS "last_minute!",
                      count(due_at) AS "samples!",
                      percentile_cont(0.5) WITHIN GROUP (ORDER BY delay) AS p50,
                      percentile_cont(0.99) WITHIN GROUP (ORDER BY delay) AS p99,
                      max(delay) AS max
             FROM (SELECT finished_at, due_at,
                          1000 * extract(epoch FROM started_at - due_at)::float8 AS delay
                   FROM evaluations WHERE finished_at >= now() - interval '5 minutes') recent"#,
        )
        .fetch_one(self.store.reader())
        .await?;
        Ok(EvaluationPace {
            last_minute: row.last_minute,
            delay_samples: row.samples,
            delay_p50_ms: row.p50,
            delay_p99_ms: row.p99,
            delay_max_ms: row.max,
        })
    }
}
