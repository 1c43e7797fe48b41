//! The quiesce side of an HA run: a test database on the cluster with `serve` and `worker`
//! processes on it, and what must hold afterwards, read from Postgres, Redis and the processes'
//! metrics. Every read retries for a while: the test's own connections meet the failover too.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    net::SocketAddr,
    time::{Duration, Instant},
};

use crate::cluster::{self, Stamp};
use crate::helpers::{TestApp, TestOptions, free_address, spawn_app, wait_for};
use crate::load::check_accounting;
use crate::sender::{Outage, Sender};

/// The one value `sql` (a literal, checked at compile time) selects on the rig's database,
/// retried until it answers (60 s at most): [`crate::helpers::scalar!`] through a failover.
macro_rules! try_scalar {
    ($rig:expr, $sql:literal $(, $arg:expr)* $(,)?) => {
        $crate::checks::retried($sql, || async {
            sqlx::query_scalar!($sql $(, $arg)*)
                .fetch_one(&$rig.app.pool)
                .await
                .map(|value| $crate::helpers::NotNull::not_null(value, $sql))
        })
        .await
    };
}
pub(crate) use try_scalar;

pub struct Rig {
    /// Killed when dropped, before the app drops the database.
    _processes: Vec<tokio::process::Child>,
    /// The serve process' API (`http://127.0.0.1:<port>`).
    pub api: String,
    /// The metrics listeners of the serve and worker processes.
    pub metrics: Vec<String>,
    /// Where the processes log.
    logs: std::path::PathBuf,
    pub app: TestApp,
}

/// The settings of an HA run: the test defaults (a backend timeout of 5 s) with short windows, a
/// repair sweep every second (its grace the backend timeout)
/// and the default 5 attempts, so that an attempt burned on an outage shows.
fn options() -> TestOptions {
    TestOptions {
        database_base: Some(cluster::write_base()),
        ..TestOptions::idle().with(|s| {
            s.schedule.debounce_window = Duration::from_millis(300);
            s.schedule.max_wait = Duration::from_secs(2);
            s.worker.lease = Duration::from_secs(3);
            s.maintenance.sweep_interval = Duration::from_secs(1);
            s.maintenance.sweep_grace = s.database.backend_timeout;
        })
    }
}

/// The folder the processes of a run log in (target/ha-logs/<run>/), emptied.
fn log_dir(run: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/ha-logs")
        .join(run);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn log_file(dir: &std::path::Path, name: &str) -> std::fs::File {
    std::fs::File::create(dir.join(format!("{name}.log"))).unwrap()
}

impl Rig {
    /// Heals the cluster, then a database of its own with one `serve` and two `worker`
    /// processes on HAProxy's read-write port, each with a metrics listener.
    pub async fn start(run: &str) -> Self {
        cluster::ha(&["heal"]).await;
        let app = spawn_app(options()).await;
        let mut processes = Vec::new();
        let mut metrics = Vec::new();
        let logs = log_dir(run);
        let listen = free_address();
        let serve_metrics = free_address();
        let log = log_file(&logs, "serve");
        processes.push(
            app.serve_command("ha-serve", listen)
                .env("QUIESCE_METRICS_LISTEN", serve_metrics.to_string())
                .env("RUST_LOG", "info,sqlx=warn,sqlx_core::pool::inner=off")
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("start quiesce serve"),
        );
        metrics.push(serve_metrics);
        for i in 1..=2 {
            let address = free_address();
            let log = log_file(&logs, &format!("worker-{i}"));
            processes.push(
                app.worker_command(&format!("ha-worker-{i}"), Some(address))
                    .env("RUST_LOG", "info,sqlx=warn,sqlx_core::pool::inner=off")
                    .stdout(log.try_clone().unwrap())
                    .stderr(log)
                    .spawn()
                    .expect("start quiesce worker"),
            );
            metrics.push(address);
        }
        app.wait_healthy("the serve process", listen).await;
        for address in &metrics {
            app.wait_healthy("a process' metrics listener", *address)
                .await;
        }
        Self {
            _processes: processes,
            api: format!("http://{listen}"),
            metrics: metrics
                .iter()
                .map(|a: &SocketAddr| format!("http://{a}"))
                .collect(),
            logs,
            app,
        }
    }

    /// The ERROR lines the processes logged so far.
    pub fn error_lines(&self) -> usize {
        std::fs::read_dir(&self.logs)
            .unwrap()
            .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default())
            .map(|text| text.lines().filter(|l| l.contains(" ERROR ")).count())
            .sum()
    }

    /// Whether the serve process' /readyz says ready.
    pub async fn ready(&self) -> bool {
        self.app
            .client
            .get(format!("{}/readyz", self.api))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    }

    /// Every recorded event evaluated, nothing due or in flight.
    pub async fn wait_settled(&self, timeout: Duration) {
        wait_for(
            timeout,
            "every entity to be evaluated and the queue to drain",
            || async {
                self.app
                    .backends
                    .queue
                    .depths()
                    .await
                    .is_ok_and(|d| d.iter().all(|d| d.due == 0 && d.inflight == 0))
                    && try_scalar!(self, "SELECT count(*) FROM entity_counts WHERE event_count <> evaluated_event_count")
                        == 0
            },
        )
        .await;
    }

    /// `sql` on the leader's own port (not through HAProxy), in this run's database: another
    /// server than the one the statements are checked against, so `sql` stays a string.
    pub async fn count_on_leader(&self, sql: &str) -> i64 {
        let leader = cluster::leader().await.expect("a leader");
        let database = self.app.database_url();
        let name = database.rsplit('/').next().unwrap();
        let url = format!("postgres://postgres@{}/{name}", leader.address);
        retried(sql, || async {
            let mut connection = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await?;
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&mut connection)
                .await
        })
        .await
    }

    /// What must hold after any run; the counts, for the report line.
    pub async fn check(&self, sender: &Sender) -> Counts {
        let accepted = sender.accepted();
        let accepted_set: HashSet<&str> = accepted.iter().map(String::as_str).collect();
        assert_eq!(
            accepted.len(),
            accepted_set.len(),
            "an id answered 202 twice"
        );
        let stored: Vec<(String, i64)> = retried("events by id", || async {
            let rows = sqlx::query!(r#"SELECT id, count(*) AS "n!" FROM events GROUP BY id"#)
                .fetch_all(&self.app.pool)
                .await?;
            Ok(rows.into_iter().map(|row| (row.id, row.n)).collect())
        })
        .await;
        let stored: HashMap<&str, i64> = stored.iter().map(|(id, n)| (id.as_str(), *n)).collect();
        let lost: Vec<&&str> = accepted_set
            .iter()
            .filter(|id| !stored.contains_key(**id))
            .take(10)
            .collect();
        let doubled: Vec<(&&str, &i64)> = stored.iter().filter(|(_, n)| **n > 1).take(10).collect();
        let unknown: Vec<&&str> = stored
            .keys()
            .filter(|id| !accepted_set.contains(**id))
            .take(10)
            .collect();
        assert!(lost.is_empty(), "acknowledged events lost: {lost:?}");
        assert!(doubled.is_empty(), "events recorded twice: {doubled:?}");
        assert!(
            unknown.is_empty(),
            "events recorded that were never acknowledged: {unknown:?}"
        );

        // Counters, settled entities, no duplicate action, no dead letter in Redis: what the
        // chaos and cluster suites check.
        check_accounting(&self.app, accepted.len() as u64).await;
        // Each entity's latest evaluation read all its events (its snapshot's count).
        let unsettled = try_scalar!(
            self,
            "SELECT count(*) FROM (SELECT entity, count(*) AS n FROM events GROUP BY entity) e
                 LEFT JOIN LATERAL (SELECT event_count FROM evaluations v WHERE v.entity = e.entity
                                    ORDER BY finished_at DESC, id DESC LIMIT 1) latest ON true
                 WHERE latest.event_count IS DISTINCT FROM e.n"
        );
        assert_eq!(
            unsettled, 0,
            "an entity's latest evaluation missed some of its events"
        );
        assert_eq!(
            try_scalar!(self, "SELECT count(*) FROM dead_letters"),
            0,
            "entities dead-lettered in Postgres"
        );
        let mut burned = 0.0;
        for metrics in &self.metrics {
            burned += counter(metrics, "quiesce_evaluations_total", "outcome=\"failed\"").await
                + counter(
                    metrics,
                    "quiesce_evaluations_total",
                    "outcome=\"dead_lettered\"",
                )
                .await;
        }
        let failure_records = try_scalar!(self, "SELECT count(*) FROM entity_failures");
        assert_eq!(
            (burned, failure_records),
            (0.0, 0),
            "attempts burned (failed evaluations counted by the processes, failure records in Postgres)"
        );
        let (others, no_answer) = sender.unexpected();
        assert!(
            others.is_empty(),
            "answers other than 202 and 503: {:?}",
            &others[..others.len().min(5)]
        );
        let events = accepted.len();
        Counts {
            events,
            evaluations: try_scalar!(self, "SELECT count(*) FROM evaluations"),
            actions: try_scalar!(self, "SELECT count(*) FROM actions"),
            unavailable: sender
                .attempts()
                .iter()
                .filter(|a| a.answer == crate::sender::Answer::Unavailable)
                .count(),
            no_answer,
        }
    }
}

/// The counts of a run, as its report line shows them.
pub struct Counts {
    events: usize,
    evaluations: i64,
    actions: i64,
    unavailable: usize,
    no_answer: usize,
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} events acknowledged, each in events once, 0 lost; {} evaluations, every entity's \
             latest covering all its events; {} actions, 0 duplicate; 0 attempts burned, 0 dead \
             letters; {} answers 503, {} attempts unanswered (retried)",
            self.events, self.evaluations, self.actions, self.unavailable, self.no_answer
        )
    }
}

/// Runs `query` until it succeeds, 60 s at most.
pub(crate) async fn retried<T, F, Fut>(what: &str, query: F) -> T
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match query().await {
            Ok(value) => return value,
            Err(error) => assert!(
                Instant::now() < deadline,
                "{what}: still failing after 60 s: {error}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The sum of a metric's samples whose labels contain `labels` ("" for all), from a metrics
/// listener; 0 when it has none.
pub async fn counter(metrics: &str, name: &str, labels: &str) -> f64 {
    let text = reqwest::get(format!("{metrics}/metrics"))
        .await
        .expect("a metrics listener")
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with([' ', '{']) && rest.contains(labels))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A gauge's value from a metrics listener (-1 when the listener does not answer).
pub async fn gauge(metrics: &str, name: &str) -> f64 {
    let Ok(response) = reqwest::get(format!("{metrics}/metrics")).await else {
        return -1.0;
    };
    let text = response.text().await.unwrap_or_default();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} "))?.parse().ok())
        .unwrap_or(-1.0)
}

/// How the evaluations' rate came back after a disruption.
pub struct Recovery {
    /// Evaluations per second over the 5 s before the disruption (its last second left out).
    pub rate_before: f64,
    /// From the moment writes were accepted again until the end of the first two seconds at
    /// 90% or more of that rate, after the rate first fell below it (zero if it never did);
    /// `None` when the rate did not come back before the load ended: a figure `make
    /// ha-figures` holds to its target, where `make ha` only reports it (every entity's
    /// evaluation covering all its events is checked by `Rig::check` either way).
    pub after_writes: Option<Duration>,
    /// Evaluations finished per 0.5 s from 1 s before the disruption (what the figure is read
    /// from, printed beside the answers').
    pub timeline: String,
}

pub async fn evaluation_recovery(rig: &Rig, disrupted: &Stamp, outage: &Outage) -> Recovery {
    let finished: Vec<f64> = retried("evaluation times", || {
        sqlx::query_scalar!(
            r#"SELECT (extract(epoch FROM finished_at - $1) * 1000)::float8 AS "since_ms!"
               FROM evaluations
               WHERE finished_at >= $1 - interval '6 seconds' ORDER BY finished_at"#,
            disrupted.wall
        )
        .fetch_all(&rig.app.pool)
    })
    .await;
    // Per second over two, so that a quiet second of a low rate is no dip.
    let rate_at = |from_ms: f64| {
        finished
            .iter()
            .filter(|t| **t >= from_ms && **t < from_ms + 2000.0)
            .count() as f64
            / 2.0
    };
    let rate_before = finished
        .iter()
        .filter(|t| **t >= -6000.0 && **t < -1000.0)
        .count() as f64
        / 5.0;
    let target = 0.9 * rate_before;
    let last = finished.last().copied().unwrap_or(0.0);
    let mut dipped = None;
    let mut recovered = None;
    let mut t = 0.0;
    while t + 2000.0 <= last {
        let rate = rate_at(t);
        match dipped {
            None if rate < target => dipped = Some(t),
            Some(_) if rate >= target => {
                recovered = Some(t + 2000.0);
                break;
            }
            _ => {}
        }
        t += 100.0;
    }
    let after_disruption = match (dipped, recovered) {
        (None, _) => Some(Duration::ZERO),
        (Some(_), Some(ms)) => Some(Duration::from_millis(ms as u64)),
        (Some(_), None) => None,
    };
    let timeline = (0..40)
        .map(|i| {
            let from = -1000.0 + 500.0 * f64::from(i);
            finished
                .iter()
                .filter(|t| **t >= from && **t < from + 500.0)
                .count()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join(" ");
    Recovery {
        timeline,
        rate_before,
        after_writes: after_disruption.map(|d| d.saturating_sub(outage.back_after)),
    }
}

/// The schedule's lag (how overdue the most overdue entity is, across shards), sampled every
/// 100 ms from its start until stopped: whether quiesce keeps up with what is due, apart from
/// the rate at which the load makes entities due.
pub struct LagWatch {
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Vec<(Instant, i64)>>,
}

impl LagWatch {
    pub fn start(rig: &Rig) -> Self {
        let stop = tokio_util::sync::CancellationToken::new();
        let queue = rig.app.backends.queue.clone();
        let until = stop.clone();
        let task = tokio::spawn(async move {
            let mut samples = Vec::new();
            while !until.is_cancelled() {
                if let Ok(depths) = queue.depths().await {
                    let lag = depths.iter().map(|d| d.lag_ms).max().unwrap_or(0);
                    samples.push((Instant::now(), lag));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            samples
        });
        Self { stop, task }
    }

    /// The samples: the most overdue entity's lag in ms, when it was read.
    pub async fn finish(self) -> Vec<(Instant, i64)> {
        self.stop.cancel();
        self.task.await.expect("the lag watch")
    }
}

/// From `writes_back` until the lag stayed under `bound_ms` for a second (`None`: it never did
/// before the samples end), and the largest lag per 0.5 s from `from` (40 slots).
pub fn lag_caught_up(
    samples: &[(Instant, i64)],
    from: Instant,
    writes_back: Instant,
    bound_ms: i64,
) -> (Option<Duration>, String) {
    let mut under_since: Option<Instant> = None;
    let mut caught_up = None;
    for (at, lag) in samples.iter().filter(|(at, _)| *at >= writes_back) {
        if *lag < bound_ms {
            let since = *under_since.get_or_insert(*at);
            if at.duration_since(since) >= Duration::from_secs(1) {
                caught_up = Some(since.duration_since(writes_back));
                break;
            }
        } else {
            under_since = None;
        }
    }
    let timeline = (0..40u64)
        .map(|slot| {
            let start = from + Duration::from_millis(500 * slot);
            let end = start + Duration::from_millis(500);
            samples
                .iter()
                .filter(|(at, _)| *at >= start && *at < end)
                .map(|(_, lag)| *lag)
                .max()
                .map_or("-".to_string(), |lag| lag.to_string())
        })
        .collect::<Vec<_>>()
        .join(" ");
    (caught_up, timeline)
}
