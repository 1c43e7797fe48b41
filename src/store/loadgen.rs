//! What the load generator reads back after a run: its entities, evaluations, actions and
//! statuses, found by the run's entity id pattern (`LIKE`). The load generator connects to the
//! database on its own, so these take a pool, and they return the driver's errors as it
//! reports them.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

/// One evaluation of a run: when it started and finished, and its fire delay (start minus due
/// time) when the evaluation recorded a due time.
#[derive(Debug, Clone)]
pub struct RunEvaluation {
    pub entity: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub delay_ms: Option<f64>,
}

/// How many of the run's entities are recorded, and the events their evaluations have covered
/// so far: a cheap read of the entity rows alone (no event is read), for polling while the run
/// drains. The events covered only ever reach the events accepted; [`drain_progress`] confirms.
pub async fn covered_events(pool: &PgPool, pattern: &str) -> sqlx::Result<(i64, i64)> {
    let row = sqlx::query!(
        r#"SELECT count(*) AS "entities!",
                coalesce(sum(evaluated_event_count), 0)::int8 AS "covered!"
         FROM entities WHERE entity LIKE $1"#,
        pattern,
    )
    .fetch_one(pool)
    .await?;
    Ok((row.entities, row.covered))
}

/// How many of the run's entities are recorded, and how many of them are owed an evaluation:
/// exact (it counts every entity's events not folded yet), and as costly as that.
pub async fn drain_progress(pool: &PgPool, pattern: &str) -> sqlx::Result<(i64, i64)> {
    let row = sqlx::query!(
        r#"SELECT count(*) AS "entities!",
                count(*) FILTER (WHERE event_count <> evaluated_event_count) AS "owed!"
         FROM entity_counts WHERE entity LIKE $1"#,
        pattern,
    )
    .fetch_one(pool)
    .await?;
    Ok((row.entities, row.owed))
}

/// The run's evaluations, in the order they started.
pub async fn run_evaluations(pool: &PgPool, pattern: &str) -> sqlx::Result<Vec<RunEvaluation>> {
    sqlx::query_as!(
        RunEvaluation,
        r#"SELECT entity, started_at, finished_at,
                (extract(epoch FROM started_at - due_at) * 1000)::float8 AS "delay_ms?"
         FROM evaluations WHERE entity LIKE $1 ORDER BY started_at"#,
        pattern,
    )
    .fetch_all(pool)
    .await
}

/// The run's applied actions, as (entity, action).
pub async fn run_actions(pool: &PgPool, pattern: &str) -> sqlx::Result<Vec<(String, String)>> {
    let rows = sqlx::query!(
        "SELECT entity, action FROM actions WHERE entity LIKE $1",
        pattern,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.entity, row.action))
        .collect())
}

/// The run's entities and their statuses, as (entity, status).
pub async fn run_statuses(pool: &PgPool, pattern: &str) -> sqlx::Result<Vec<(String, String)>> {
    let rows = sqlx::query!(
        "SELECT entity, status FROM entities WHERE entity LIKE $1",
        pattern,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.entity, row.status))
        .collect())
}
