//! Liveness, readiness and the Prometheus scrape.

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde::Serialize;
use utoipa::ToSchema;

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;

use super::AppState;
use crate::{queue::Queue, store::Store, telemetry::names};

#[derive(Serialize, ToSchema)]
pub struct Health {
    status: &'static str,
}

#[derive(Serialize, ToSchema)]
pub struct Readiness {
    /// `ready` or `unavailable`.
    status: &'static str,
    /// `ok` or the error.
    redis: String,
    postgres: String,
    /// The rules version this process evaluates with (null before one is stored).
    rules_version: Option<i64>,
}

/// The process is up.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    responses((status = 200, description = "The process is up", body = Health))
)]
pub async fn healthz() -> impl IntoResponse {
    Json(Health { status: "ok" })
}

/// Redis answers and Postgres takes writes (a primary, not read-only) within the backend
/// timeout; with the rules version in force.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    responses(
        (status = 200, description = "Redis answers and Postgres takes writes", body = Readiness),
        (status = 503, description = "Redis does not answer, or Postgres does not take writes (unreachable, read-only or in recovery)", body = Readiness),
    )
)]
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let timeout = state.settings.database.backend_timeout;
    let (redis, postgres) = tokio::join!(
        tokio::time::timeout(timeout, state.queue.ping()),
        tokio::time::timeout(timeout, state.store.writable()),
    );
    let describe = |ok: bool, error: Option<String>| {
        if ok {
            "ok".to_owned()
        } else {
            error.unwrap_or_else(|| "timed out".into())
        }
    };
    let redis_ok = matches!(redis, Ok(Ok(())));
    let postgres_ok = matches!(postgres, Ok(Ok(())));
    let body = Readiness {
        status: if redis_ok && postgres_ok {
            "ready"
        } else {
            "unavailable"
        },
        redis: describe(
            redis_ok,
            redis.ok().and_then(|r| r.err()).map(|e| e.to_string()),
        ),
        postgres: describe(
            postgres_ok,
            postgres.ok().and_then(|r| r.err()).map(|e| e.to_string()),
        ),
        rules_version: state.rules.current().version(),
    };
    let status = if redis_ok && postgres_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}

/// How long a scrape waits on a backend: Prometheus gives up on a scrape after 10 s by default,
/// and an outage is when the breaker's and the primary's gauges must still be read.
const SCRAPE_WAIT: Duration = Duration::from_secs(3);

/// Prometheus text format; queue depths are read from Redis at scrape time. Answers within
/// twice [`SCRAPE_WAIT`] whatever the backends do: Postgres and Redis are asked at once, and
/// Postgres' figures only when it takes writes (they keep their last values meanwhile).
pub(super) async fn render_metrics(
    queue: &Queue,
    store: &Store,
    rules: &crate::rules::Rules,
    handle: &PrometheusHandle,
    timeout: Duration,
) -> impl IntoResponse + use<> {
    let wait = timeout.min(SCRAPE_WAIT);
    // Whether the primary takes writes, as /readyz asks it: a read-only or recovering server
    // answers a ping, so the alert on this gauge is what notices it.
    let (writable, depths) = tokio::join!(
        tokio::time::timeout(wait, store.writable()),
        tokio::time::timeout(wait, queue.depths())
    );
    let writable = matches!(writable, Ok(Ok(())));
    metrics::gauge!(names::POSTGRES_WRITABLE).set(f64::from(u8::from(writable)));
    match depths {
        Ok(Ok(depths)) => {
            for depth in depths {
                let shard = depth.shard.to_string();
                metrics::gauge!(names::QUEUE_DUE, "shard" => shard.clone()).set(depth.due as f64);
                metrics::gauge!(names::QUEUE_INFLIGHT, "shard" => shard.clone())
                    .set(depth.inflight as f64);
                metrics::gauge!(names::DEAD_LETTERS, "shard" => shard.clone())
                    .set(depth.dead as f64);
                metrics::gauge!(names::QUEUE_LAG_SECONDS, "shard" => shard)
                    .set(depth.lag_ms as f64 / 1000.0);
            }
        }
        Ok(Err(error)) => {
            tracing::warn!(error = %crate::telemetry::Chain(&error), "queue depth unavailable for the scrape")
        }
        Err(_) => tracing::warn!("queue depth timed out for the scrape"),
    }
    if writable {
        postgres_figures(store, rules, wait).await;
    }
    // This process's rules version, read from its own handle (several apps may share one
    // recorder in tests).
    metrics::gauge!(names::RULES_VERSION).set(rules.current().version().unwrap_or(0) as f64);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        handle.render(),
    )
}

/// The gauges read from Postgres at scrape time, asked at once, each within `wait`.
async fn postgres_figures(store: &Store, rules: &crate::rules::Rules, wait: Duration) {
    let (backlog, review, reversals, appeals) = tokio::join!(
        tokio::time::timeout(wait, store.outbox().outbox_backlog()),
        tokio::time::timeout(
            wait,
            store.review().review_figures(Duration::from_secs(3600))
        ),
        // The reversal rate comes from Postgres, so it survives restarts and is the same on
        // every process. Rules in force without actions read 0.
        tokio::time::timeout(
            wait,
            store.read().reversal_counts(Duration::from_secs(24 * 3600))
        ),
        tokio::time::timeout(wait, store.appeals().appeal_figures()),
    );
    // Every rule in force has its appeals' series from the start, at 0 until one is decided.
    for rule in rules.current().rules() {
        for outcome in ["upheld", "rejected"] {
            metrics::counter!(names::APPEALS_DECIDED, "outcome" => outcome, "rule" => rule.name.clone())
                .increment(0);
        }
    }
    match appeals {
        Ok(Ok(figures)) => {
            metrics::gauge!(names::APPEALS_WAITING).set(figures.waiting as f64);
            metrics::gauge!(names::APPEALS_OLDEST_WAIT).set(figures.oldest_wait_secs);
            metrics::gauge!(names::APPEALS_DECIDED_DAY).set(figures.decided_day as f64);
            metrics::gauge!(names::APPEALS_UPHELD_DAY).set(figures.upheld_day as f64);
        }
        Ok(Err(error)) => {
            tracing::warn!(error = %crate::telemetry::Chain(&error), "appeals unavailable for the scrape")
        }
        Err(_) => tracing::warn!("appeals timed out for the scrape"),
    }
    match backlog {
        Ok(Ok(backlog)) => metrics::gauge!(names::OUTBOX_BACKLOG).set(backlog as f64),
        Ok(Err(error)) => {
            tracing::warn!(error = %crate::telemetry::Chain(&error), "outbox backlog unavailable for the scrape")
        }
        Err(_) => tracing::warn!("outbox backlog timed out for the scrape"),
    }
    match review {
        Ok(Ok(figures)) => {
            metrics::gauge!(names::REVIEW_WAITING).set(figures.waiting as f64);
            let oldest = figures.oldest_flagged_at.map_or(0.0, |at| {
                (chrono::Utc::now() - at).num_milliseconds().max(0) as f64 / 1000.0
            });
            metrics::gauge!(names::REVIEW_OLDEST_WAIT).set(oldest);
        }
        Ok(Err(error)) => {
            tracing::warn!(error = %crate::telemetry::Chain(&error), "review queue unavailable for the scrape")
        }
        Err(_) => tracing::warn!("review queue timed out for the scrape"),
    }
    match reversals {
        Ok(Ok((_, by_rule))) => {
            let mut rules: std::collections::BTreeMap<String, crate::store::ReversalCounts> = rules
                .current()
                .rules()
                .iter()
                .map(|rule| (rule.name.clone(), Default::default()))
                .collect();
            rules.extend(by_rule);
            for (rule, counts) in rules {
                metrics::gauge!(names::ACTIONS_24H, "rule" => rule.clone())
                    .set(counts.actions as f64);
                metrics::gauge!(names::REVERSED_24H, "rule" => rule.clone())
                    .set(counts.reversed as f64);
                metrics::gauge!(names::REVERSAL_RATE_24H, "rule" => rule).set(counts.rate());
            }
        }
        Ok(Err(error)) => {
            tracing::warn!(error = %crate::telemetry::Chain(&error), "reversal rate unavailable for the scrape")
        }
        Err(_) => tracing::warn!("reversal rate timed out for the scrape"),
    }
}
