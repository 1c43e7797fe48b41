//! Logs (tracing) and metrics (Prometheus). Metric names live here so docs and dashboards
//! have one list to follow; labels are bounded (no entity ids, no raw paths).

use std::sync::OnceLock;

#[cfg(test)]
pub(crate) mod captured;
mod filter;
pub mod traces;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::{EnvFilter, Layer as _, filter::Targets, fmt, prelude::*};

use self::filter::Uncached;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

pub mod names {
    pub const EVENTS_INGESTED: &str = "quiesce_events_ingested_total";
    pub const EVENTS_DUPLICATE: &str = "quiesce_events_duplicate_total";
    pub const EVENTS_REJECTED: &str = "quiesce_events_rejected_total";
    pub const RATE_LIMITED: &str = "quiesce_rate_limited_total";
    pub const INGEST_COMMIT_SECONDS: &str = "quiesce_ingest_commit_seconds";
    pub const EVALUATIONS: &str = "quiesce_evaluations_total";
    pub const EVALUATION_SECONDS: &str = "quiesce_evaluation_duration_seconds";
    pub const FIRE_DELAY_SECONDS: &str = "quiesce_fire_delay_seconds";
    pub const ACTIONS: &str = "quiesce_actions_total";
    pub const LOCK_CONTENTION: &str = "quiesce_lock_contention_total";
    pub const VERSION_CONFLICTS: &str = "quiesce_version_conflicts_total";
    pub const RULE_ERRORS: &str = "quiesce_rule_errors_total";
    pub const LEASES_REAPED: &str = "quiesce_leases_reaped_total";
    pub const SWEEP_REPAIRED: &str = "quiesce_sweep_repaired_total";
    pub const EVENTS_PURGED: &str = "quiesce_events_purged_total";
    pub const PARTITIONS_MADE: &str = "quiesce_partitions_made_total";
    pub const PARTITIONS_DROPPED: &str = "quiesce_partitions_dropped_total";
    pub const POSTGRES_BREAKER_OPEN: &str = "quiesce_postgres_breaker_open";
    pub const POSTGRES_WRITABLE: &str = "quiesce_postgres_writable";
    pub const REPLICA_LAG_SECONDS: &str = "quiesce_replica_lag_seconds";
    pub const REPLICA_IN_USE: &str = "quiesce_replica_in_use";
    pub const LEASE_SECONDS: &str = "quiesce_lease_seconds";
    pub const REVERSALS: &str = "quiesce_reversals_total";
    pub const REVIEW_DECISIONS: &str = "quiesce_review_decisions_total";
    pub const REVIEW_WAITING: &str = "quiesce_review_waiting";
    pub const REVIEW_OLDEST_WAIT: &str = "quiesce_review_oldest_wait_seconds";
    pub const GUARD_DEMOTIONS: &str = "quiesce_rule_guard_demotions_total";
    pub const GUARD_DEMOTED_AT: &str = "quiesce_rule_guard_demoted_timestamp_seconds";
    pub const SHADOW_HITS: &str = "quiesce_shadow_hits_total";
    pub const DELIVERIES: &str = "quiesce_webhook_deliveries_total";
    pub const DSA_SUBMISSIONS: &str = "quiesce_dsa_submissions_total";
    pub const STATEMENTS: &str = "quiesce_statements_total";
    pub const APPEALS_WAITING: &str = "quiesce_appeals_waiting";
    pub const APPEALS_OLDEST_WAIT: &str = "quiesce_appeals_oldest_wait_seconds";
    pub const APPEALS_DECIDED_DAY: &str = "quiesce_appeals_decided_24h";
    pub const APPEALS_UPHELD_DAY: &str = "quiesce_appeals_upheld_24h";
    pub const APPEALS_DECIDED: &str = "quiesce_appeals_decided_total";
    pub const APPEAL_ALERT_SECONDS: &str = "quiesce_appeal_wait_alert_seconds";
    pub const OUTBOX_BACKLOG: &str = "quiesce_outbox_backlog";
    pub const DEAD_LETTERED: &str = "quiesce_dead_lettered_total";
    pub const DEAD_LETTERS: &str = "quiesce_dead_letters";
    pub const QUEUE_DUE: &str = "quiesce_queue_due";
    pub const QUEUE_INFLIGHT: &str = "quiesce_queue_inflight";
    pub const EVENTS_PER_EVALUATION: &str = "quiesce_events_per_evaluation";
    pub const STORE_BATCH_SIZE: &str = "quiesce_store_batch_size";
    pub const QUEUE_LAG_SECONDS: &str = "quiesce_queue_lag_seconds";
    pub const LOCK_ACQUIRE_SECONDS: &str = "quiesce_lock_acquire_duration_seconds";
    pub const REDIS_SCRIPT_SECONDS: &str = "quiesce_redis_script_duration_seconds";
    pub const POSTGRES_QUERY_SECONDS: &str = "quiesce_postgres_query_duration_seconds";
    pub const ACTIONS_24H: &str = "quiesce_actions_24h";
    pub const REVERSED_24H: &str = "quiesce_reversed_24h";
    pub const REVERSAL_RATE_24H: &str = "quiesce_reversal_rate_24h";
    pub const REVERSAL_RATE_THRESHOLD: &str = "quiesce_reversal_rate_alert_threshold";
    pub const MAX_WAIT_SECONDS: &str = "quiesce_max_wait_seconds";
    pub const HTTP_REQUESTS: &str = "quiesce_http_requests_total";
    pub const HTTP_SECONDS: &str = "quiesce_http_request_duration_seconds";
    pub const HTTP_CONNECTIONS: &str = "quiesce_http_connections";
    pub const AUDIT_FAILURES: &str = "quiesce_audit_failures_total";
    pub const RULES_VERSION: &str = "quiesce_rules_version";
}

/// Installs the global subscriber once; later calls (tests building several apps) are no-ops.
/// Tests stay quiet unless `TEST_LOG` is set. Logs follow `RUST_LOG`; exported spans (when an
/// OTLP endpoint is set, `traces`) are quiesce's own at info and above, whatever the logs show,
/// so that `RUST_LOG=warn` keeps the traces whole.
pub fn init_tracing(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    // Logs go to stderr, so that stdout carries only a command's output (JSON that parses);
    // colour codes only when a person reads them on a terminal, never in a file.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = match format {
        LogFormat::Text => fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .boxed(),
        LogFormat::Json => fmt::layer().json().with_writer(std::io::stderr).boxed(),
    };
    let spans = traces::tracer().map(|tracer| {
        // Not activated on enter: an evaluation's span is put in its events' trace once its
        // snapshot has read them (`evaluation/decision.rs`), which an activated span refuses.
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_context_activation(false)
            .with_filter(Uncached(
                Targets::new().with_target("quiesce", tracing::Level::INFO),
            ))
    });
    let _ = tracing_subscriber::registry()
        .with(logs.with_filter(Uncached(filter)))
        .with(spans)
        .try_init();
}

/// How often the recorder folds recorded histogram samples into its buckets.
const UPKEEP_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// Without upkeep, every histogram sample waits in memory for the next scrape, and a process
/// nobody scrapes (Prometheus down, `metrics_listen = off`) grows by each one. The thread lives
/// as long as the process, as the recorder does; it holds nothing a shutdown must release.
fn spawn_upkeep(handle: PrometheusHandle) {
    let spawned = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_PERIOD);
                handle.run_upkeep();
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "could not start the metrics upkeep; memory grows until scraped");
    }
}

/// The process-wide Prometheus recorder (installed on first use), with its upkeep running.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let seconds_fast = [
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ];
            let events_per_evaluation = [
                1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0,
            ];
            let batch_size = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
            let fire_delay = [
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
            ];
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(names::FIRE_DELAY_SECONDS.into()),
                    &fire_delay,
                )
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(names::EVENTS_PER_EVALUATION.into()),
                        &events_per_evaluation,
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(names::STORE_BATCH_SIZE.into()),
                        &batch_size,
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &seconds_fast)
                })
                .expect("bucket lists are non-empty")
                .install_recorder()
                .expect("the metrics recorder is installed once");
            describe();
            spawn_upkeep(handle.clone());
            handle
        })
        .clone()
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        names::EVENTS_INGESTED,
        "Events accepted and recorded (first time seen)."
    );
    describe_counter!(
        names::EVENTS_DUPLICATE,
        "Events whose id had been seen before."
    );
    describe_counter!(names::EVENTS_REJECTED, "Requests rejected, by reason.");
    describe_counter!(
        names::RATE_LIMITED,
        "Ingest requests refused with 429, by source (named source or token id)."
    );
    describe_histogram!(
        names::INGEST_COMMIT_SECONDS,
        Unit::Seconds,
        "Group commit: Postgres transaction plus Redis schedule."
    );
    describe_counter!(
        names::EVALUATIONS,
        "Evaluations by outcome (done, retry, snooze, fatal)."
    );
    describe_histogram!(
        names::EVALUATION_SECONDS,
        Unit::Seconds,
        "Lock to ack of one evaluation."
    );
    describe_histogram!(
        names::STORE_BATCH_SIZE,
        "Evaluations' Postgres calls answered by one statement, by call (snapshot, completion)."
    );
    describe_histogram!(
        names::FIRE_DELAY_SECONDS,
        Unit::Seconds,
        "Claim time minus due time."
    );
    describe_counter!(names::ACTIONS, "Actions applied, by action and rule.");
    describe_counter!(
        names::LOCK_CONTENTION,
        "Claims that found the entity locked or still in flight."
    );
    describe_counter!(
        names::VERSION_CONFLICTS,
        "Evaluations refused by the moderation version fence."
    );
    describe_counter!(
        names::RULE_ERRORS,
        "Rules that failed to evaluate on a snapshot."
    );
    describe_counter!(
        names::LEASES_REAPED,
        "In-flight entities returned to the queue after their lease expired."
    );
    describe_counter!(
        names::DEAD_LETTERED,
        "Entities moved to the dead-letter set, by reason (fatal, attempts_exhausted)."
    );
    describe_gauge!(
        names::DEAD_LETTERS,
        "Entities in the dead-letter set, by shard."
    );
    describe_counter!(
        names::SHADOW_HITS,
        "Shadow rules that matched a snapshot (what they would have done), by rule."
    );
    describe_counter!(
        names::DELIVERIES,
        "Outbound webhook attempts by outcome (delivered, retried, gave_up)."
    );
    describe_counter!(
        names::DSA_SUBMISSIONS,
        "Statements of reasons sent to the Transparency Database, by outcome (delivered, retried, refused, gave_up)."
    );
    describe_counter!(
        names::APPEALS_DECIDED,
        "Appeals decided by a moderator, by outcome (upheld, rejected) and rule."
    );
    describe_gauge!(
        names::APPEALS_WAITING,
        "Appeals waiting for a moderator's decision (read at scrape time)."
    );
    describe_gauge!(
        names::APPEALS_OLDEST_WAIT,
        "How long the oldest waiting appeal has waited (read at scrape time)."
    );
    describe_gauge!(
        names::APPEALS_DECIDED_DAY,
        "Appeals decided over the last 24 hours (read at scrape time)."
    );
    describe_gauge!(
        names::APPEALS_UPHELD_DAY,
        "Appeals upheld over the last 24 hours (read at scrape time)."
    );
    describe_gauge!(
        names::APPEAL_ALERT_SECONDS,
        "The appeal wait above which the appeals alert fires (appeal_alert_after)."
    );
    describe_gauge!(
        names::RULES_VERSION,
        "The rules version this process evaluates with (0: none stored yet)."
    );
    describe_gauge!(
        names::OUTBOX_BACKLOG,
        "Outbox rows not yet delivered nor given up (read at scrape time)."
    );
    describe_counter!(
        names::REVERSALS,
        "Automated actions reversed by a moderator, by rule."
    );
    describe_counter!(
        names::REVIEW_DECISIONS,
        "Moderators' decisions on review queue items, by decision (approve, hide, dismiss, escalate)."
    );
    describe_gauge!(
        names::REVIEW_WAITING,
        "Review queue items waiting for a moderator (read at scrape time)."
    );
    describe_gauge!(
        names::REVIEW_OLDEST_WAIT,
        Unit::Seconds,
        "How long the oldest waiting review queue item has waited (0: none waits; read at scrape time)."
    );
    describe_counter!(
        names::GUARD_DEMOTIONS,
        "Live rules the guard turned to shadow for their reversal rate, by rule."
    );
    describe_gauge!(
        names::GUARD_DEMOTED_AT,
        Unit::Seconds,
        "When the guard last turned the rule to shadow (Unix time), in the process that did."
    );
    describe_gauge!(
        names::LEASE_SECONDS,
        Unit::Seconds,
        "Lease and lock TTL given to new claims: p99 evaluation time x 2 + 1s, within the floor and the configured lease."
    );
    describe_gauge!(
        names::POSTGRES_BREAKER_OPEN,
        "1 while this process's workers pause claiming because Postgres is unreachable."
    );
    describe_gauge!(
        names::POSTGRES_WRITABLE,
        "1 when the primary took writes at the last scrape (it answered within backend_timeout, not in recovery, not read-only); 0 when it did not."
    );
    describe_gauge!(
        names::REPLICA_LAG_SECONDS,
        Unit::Seconds,
        "The read replica's replay lag at its last check (database_read_url)."
    );
    describe_gauge!(
        names::REPLICA_IN_USE,
        "1 while reads that may be a moment stale go to the read replica; 0 while they go to the primary (it lags past read_max_lag or does not answer). Absent where no replica is set."
    );
    describe_counter!(
        names::EVENTS_PURGED,
        "Events that left with their partition after the retention window (their totals stay), as ANALYZE counted them."
    );
    describe_counter!(
        names::PARTITIONS_MADE,
        "Time partitions made ahead of time by retention passes, by table."
    );
    describe_counter!(
        names::PARTITIONS_DROPPED,
        "Time partitions dropped whole after the retention window, by table."
    );
    describe_counter!(
        names::SWEEP_REPAIRED,
        "Entities owed an evaluation that Redis had lost, re-scheduled by the repair sweep."
    );
    describe_gauge!(
        names::QUEUE_DUE,
        "Entities waiting in the due set, by shard."
    );
    describe_gauge!(names::QUEUE_INFLIGHT, "Entities being evaluated, by shard.");
    describe_counter!(
        names::HTTP_REQUESTS,
        "HTTP requests by route template, method and status."
    );
    describe_histogram!(
        names::HTTP_SECONDS,
        Unit::Seconds,
        "HTTP request duration by route template."
    );
    describe_gauge!(
        names::HTTP_CONNECTIONS,
        "Open connections to the API listener (at most max_connections)."
    );
}

/// Exports the settings alerts compare against, and creates the series that a healthy
/// process may never touch (so that rates and alerts see zeros rather than nothing), with
/// one rate-limit series for each budget the configuration implies (`rate_budgets`).
pub fn record_baseline(
    max_wait: std::time::Duration,
    reversal_alert_threshold: f64,
    rate_budgets: impl IntoIterator<Item = String>,
) {
    let _ = metrics_handle();
    metrics::gauge!(names::MAX_WAIT_SECONDS).set(max_wait.as_secs_f64());
    metrics::gauge!(names::REVERSAL_RATE_THRESHOLD).set(reversal_alert_threshold);
    for counter in [
        names::EVENTS_INGESTED,
        names::EVENTS_DUPLICATE,
        names::LOCK_CONTENTION,
        names::VERSION_CONFLICTS,
        names::RULE_ERRORS,
        names::LEASES_REAPED,
        names::SWEEP_REPAIRED,
        names::EVENTS_PURGED,
    ] {
        metrics::counter!(counter).increment(0);
    }
    for table in ["events", "evaluations", "signal_buckets"] {
        metrics::counter!(names::PARTITIONS_MADE, "table" => table).increment(0);
        metrics::counter!(names::PARTITIONS_DROPPED, "table" => table).increment(0);
    }
    for outcome in ["done", "snooze", "retry", "failed", "dead_lettered"] {
        metrics::counter!(names::EVALUATIONS, "outcome" => outcome).increment(0);
    }
    for reason in ["fatal", "attempts_exhausted"] {
        metrics::counter!(names::DEAD_LETTERED, "reason" => reason).increment(0);
    }
    for outcome in ["delivered", "retried", "gave_up"] {
        metrics::counter!(names::DELIVERIES, "outcome" => outcome).increment(0);
    }
    for outcome in ["delivered", "retried", "refused", "gave_up"] {
        metrics::counter!(names::DSA_SUBMISSIONS, "outcome" => outcome).increment(0);
    }
    metrics::gauge!(names::POSTGRES_BREAKER_OPEN).set(0.0);
    // Rule-less and at 0 (never within the alert's hour): the alert's series exists before
    // any demotion.
    metrics::gauge!(names::GUARD_DEMOTED_AT).set(0.0);
    for budget in rate_budgets {
        metrics::counter!(names::RATE_LIMITED, "source" => budget).increment(0);
    }
}

/// Times Redis script calls and Postgres round trips into their latency histograms.
pub trait Timed: std::future::Future + Sized {
    /// Into `quiesce_postgres_query_duration_seconds{query}`.
    fn timed_query(self, query: &'static str) -> impl std::future::Future<Output = Self::Output> {
        timed(self, names::POSTGRES_QUERY_SECONDS, "query", query)
    }

    /// Into `quiesce_redis_script_duration_seconds{script}`.
    fn timed_script(self, script: &'static str) -> impl std::future::Future<Output = Self::Output> {
        timed(self, names::REDIS_SCRIPT_SECONDS, "script", script)
    }
}

impl<F: std::future::Future> Timed for F {}

async fn timed<F: std::future::Future>(
    future: F,
    histogram: &'static str,
    label: &'static str,
    value: &'static str,
) -> F::Output {
    let started = std::time::Instant::now();
    let output = future.await;
    metrics::histogram!(histogram, label => value).record(started.elapsed().as_secs_f64());
    output
}

/// An optional value as a log field writes it: the value, or `none` (not `Some(1)`).
pub struct OrNone<T>(pub Option<T>);

impl<T: std::fmt::Display> std::fmt::Display for OrNone<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(value) => value.fmt(f),
            None => f.write_str("none"),
        }
    }
}

/// An error with its causes, `outer: cause: root cause`, for log lines. A cause whose text the
/// line already ends with is not written again: ours (`postgres: {0}`) and many libraries'
/// errors repeat their source's message in their own.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut line = self.0.to_string();
        let mut source = self.0.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            if !line.ends_with(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            source = cause.source();
        }
        f.write_str(&line)
    }
}

#[cfg(test)]
mod tests {
    use super::{Chain, OrNone};

    #[test]
    fn an_optional_field_is_its_value_or_none() {
        assert_eq!(OrNone(Some(1)).to_string(), "1");
        assert_eq!(OrNone::<i64>(None).to_string(), "none");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("disk full")]
    struct Root;

    #[derive(Debug, thiserror::Error)]
    #[error("write failed")]
    struct Quiet(#[source] Root);

    #[derive(Debug, thiserror::Error)]
    #[error("postgres: {0}")]
    struct Repeats(#[from] Quiet);

    #[test]
    fn chain_writes_each_cause_once() {
        assert_eq!(Chain(&Quiet(Root)).to_string(), "write failed: disk full");
        // The outer message already ends with its source's: only the deeper cause is added.
        assert_eq!(
            Chain(&Repeats(Quiet(Root))).to_string(),
            "postgres: write failed: disk full"
        );
        assert_eq!(Chain(&Root).to_string(), "disk full");
    }
}
