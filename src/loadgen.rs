//! The load generator behind `quiesce-loadgen`: sends a scenario's events to a running quiesce,
//! measures what ingest accepted and how fast, then (with database access) waits for the drain
//! and checks the outcome: evaluations per entity (how bursts collapse), fire delay (evaluation
//! start minus due time, as recorded by each evaluation), and duplicate or wrong actions, where
//! the right action is what the rules give on each entity's final counts.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::{Distribution, Zipf};
use serde::Serialize;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::{
    credentials::WebhookSecret,
    domain::Snapshot,
    domain::{EntityId, Status},
    rules::RuleSet,
    store,
};

/// How events are spread over entities and signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Zipf-distributed entities (a few hot, a long tail), mixed signals.
    Steady,
    /// Every entity receives its events in one burst, entities interleaved, mixed signals.
    Burst,
    /// Many entities, flags only: a spam wave the rules should hide.
    SpamWave,
    /// Valid posts buried in upvotes with a few early flags: nothing should happen.
    Sloan,
}

/// Upvotes and flags a Sloan post receives: 10 flags first, then 500 upvotes.
const SLOAN_FLAGS: usize = 10;
const SLOAN_UPVOTES: usize = 500;

#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Base URL of the quiesce API.
    pub url: String,
    pub scenario: Scenario,
    /// Events to send (for `sloan`: entities x 510).
    pub events: usize,
    pub entities: usize,
    /// Events per second to pace at; `None`: as fast as the server takes them.
    pub rate: Option<u32>,
    /// Events per request.
    pub batch: usize,
    /// Requests in flight.
    pub connections: usize,
    /// Bearer token for `/v1/events`.
    pub token: Option<String>,
    /// Standard Webhooks secret to sign requests with.
    pub secret: Option<String>,
    /// Post to `/v1/sources/{source}/events` instead of `/v1/events`.
    pub source: Option<String>,
    /// Postgres of the server, for the drain and outcome checks; `None`: ingest figures only.
    pub database_url: Option<String>,
    pub drain_timeout: Duration,
    /// The server's debounce window: after the drain, the generator waits this long again
    /// so that any extra evaluation would be counted.
    pub window: Duration,
    /// Prefix of every id and entity of this run.
    pub run_id: String,
    /// Rules the expected actions are computed with (the server's).
    pub rules: Arc<RuleSet>,
    pub seed: u64,
    pub progress: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Quantiles {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Quantiles {
    fn of(values: &mut [f64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_by(f64::total_cmp);
        let pick = |q: f64| values[((q * values.len() as f64) as usize).min(values.len() - 1)];
        Self {
            p50: pick(0.5),
            p99: pick(0.99),
            max: values[values.len() - 1],
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: Scenario,
    pub run_id: String,
    pub events_sent: usize,
    pub events_accepted: u64,
    pub duplicates: u64,
    pub requests: u64,
    pub batch: usize,
    pub connections: usize,
    pub send_seconds: f64,
    pub events_per_second: f64,
    pub http_latency_ms: Quantiles,
    pub errors_by_status: BTreeMap<String, u64>,
    /// Events accepted in each second of the run.
    pub accepted_per_second: Vec<u64>,
    pub drain: Option<Drain>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Drain {
    pub drained: bool,
    /// From the last request to the last evaluation that covered every event.
    pub drain_seconds: f64,
    pub entities: usize,
    pub evaluations: u64,
    pub evaluations_per_entity: f64,
    pub entities_evaluated_more_than_once: u64,
    pub evaluations_per_event: f64,
    pub fire_delay_ms: Quantiles,
    /// Evaluations finished in the busiest one-second window (any start, not only whole
    /// seconds of the clock), and the mean over the span they finished in (at least a second).
    pub evaluations_per_second_peak: u64,
    pub evaluations_per_second_mean: f64,
    pub actions: u64,
    /// The same action applied twice to one entity.
    pub duplicate_actions: u64,
    /// Entities whose final status differs from what the rules give on their final counts.
    pub wrong_actions: u64,
    /// Entities the rules act on, given their final counts.
    pub expected_actions: u64,
    /// (seconds since the run started, fire delay ms) of every evaluation, for plots.
    pub fire_delays: Vec<(f64, f64)>,
}

/// One event to send: which entity (index) and which signal.
#[derive(Debug, Clone, Copy)]
struct Planned {
    entity: u32,
    signal: &'static str,
}

fn mixed_signal(rng: &mut StdRng) -> &'static str {
    match rng.random_range(0..100) {
        0..70 => "upvote",
        70..95 => "flag",
        _ => "report",
    }
}

fn plan(config: &LoadConfig) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(config.seed);
    let entities = config.entities.max(1);
    match config.scenario {
        Scenario::Steady => {
            let zipf = Zipf::new(entities as f64, 1.07).expect("valid Zipf parameters");
            (0..config.events)
                .map(|_| Planned {
                    entity: zipf.sample(&mut rng) as u32 - 1,
                    signal: mixed_signal(&mut rng),
                })
                .collect()
        }
        Scenario::Burst => (0..config.events)
            .map(|i| Planned {
                entity: (i % entities) as u32,
                signal: mixed_signal(&mut rng),
            })
            .collect(),
        Scenario::SpamWave => (0..config.events)
            .map(|i| Planned {
                entity: (i % entities) as u32,
                signal: "flag",
            })
            .collect(),
        Scenario::Sloan => {
            // Each post's flags come first, then its upvotes, posts interleaved.
            let mut planned = Vec::with_capacity(entities * (SLOAN_FLAGS + SLOAN_UPVOTES));
            for n in 0..SLOAN_FLAGS + SLOAN_UPVOTES {
                for entity in 0..entities {
                    planned.push(Planned {
                        entity: entity as u32,
                        signal: if n < SLOAN_FLAGS { "flag" } else { "upvote" },
                    });
                }
            }
            planned
        }
    }
}

fn entity_name(run_id: &str, index: u32) -> String {
    format!("post:{run_id}-{index}")
}

#[derive(Default)]
struct Tally {
    latencies_ms: Vec<f64>,
    errors: BTreeMap<String, u64>,
}

/// Runs the scenario and, with a database URL, the drain and outcome checks.
pub async fn run(config: LoadConfig) -> anyhow::Result<Report> {
    let planned = Arc::new(plan(&config));
    let events_sent = planned.len();
    let batches = events_sent.div_ceil(config.batch.max(1));
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(config.connections)
        .build()?;
    let path = match &config.source {
        Some(source) => format!("{}/v1/sources/{source}/events", config.url),
        None => format!("{}/v1/events", config.url),
    };
    let secret = config
        .secret
        .as_deref()
        .map(WebhookSecret::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("invalid --secret: {e}"))?;
    let next = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicU64::new(0));
    let duplicates = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let per_second: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(Vec::new()));
    let bar = if config.progress {
        indicatif::ProgressBar::new(events_sent as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} events ({per_sec})",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    let started = Instant::now();
    let mut senders = tokio::task::JoinSet::new();
    for _ in 0..config.connections.max(1) {
        let (planned, next, accepted, duplicates, requests, tally, per_second, bar) = (
            Arc::clone(&planned),
            Arc::clone(&next),
            Arc::clone(&accepted),
            Arc::clone(&duplicates),
            Arc::clone(&requests),
            Arc::clone(&tally),
            Arc::clone(&per_second),
            bar.clone(),
        );
        let (client, path, secret, token, run_id) = (
            client.clone(),
            path.clone(),
            secret.clone(),
            config.token.clone(),
            config.run_id.clone(),
        );
        let (batch, rate) = (config.batch.max(1), config.rate);
        senders.spawn(async move {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= batches {
                    return;
                }
                if let Some(rate) = rate {
                    let due = Duration::from_secs_f64((index * batch) as f64 / rate as f64);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        tokio::time::sleep(wait).await;
                    }
                }
                let range = index * batch..((index + 1) * batch).min(planned.len());
                let events: Vec<Value> = range
                    .map(|i| {
                        let p = planned[i];
                        json!({
                            "id": format!("{run_id}-{i}"),
                            "entity": entity_name(&run_id, p.entity),
                            "type": p.signal,
                            "actor": format!("user:{}", i % 997),
                        })
                    })
                    .collect();
                let count = events.len();
                let body = serde_json::to_vec(&events).expect("events serialize");
                let mut request = client
                    .post(&path)
                    .header("content-type", "application/json");
                if let Some(token) = &token {
                    request = request.bearer_auth(token);
                }
                if let Some(secret) = &secret {
                    let id = format!("msg_{run_id}_{index}");
                    let now = chrono::Utc::now().timestamp();
                    request = request
                        .header("webhook-id", &id)
                        .header("webhook-timestamp", now.to_string())
                        .header("webhook-signature", secret.sign(&id, now, &body));
                }
                let sent = Instant::now();
                let result = request.body(body).send().await;
                let elapsed_ms = sent.elapsed().as_secs_f64() * 1000.0;
                requests.fetch_add(1, Ordering::Relaxed);
                let outcome = match result {
                    Ok(response) if response.status().as_u16() == 202 => {
                        let reply: Value = response.json().await.unwrap_or(Value::Null);
                        let new = reply["accepted"].as_u64().unwrap_or(0);
                        accepted.fetch_add(new, Ordering::Relaxed);
                        duplicates.fetch_add(
                            reply["duplicates"].as_u64().unwrap_or(0),
                            Ordering::Relaxed,
                        );
                        let second = started.elapsed().as_secs() as usize;
                        let mut seconds = per_second.lock().expect("tally lock");
                        if seconds.len() <= second {
                            seconds.resize(second + 1, 0);
                        }
                        seconds[second] += new;
                        None
                    }
                    Ok(response) => Some(response.status().as_u16().to_string()),
                    Err(error) if error.is_timeout() => Some("timeout".to_owned()),
                    Err(_) => Some("connection".to_owned()),
                };
                let mut tally = tally.lock().expect("tally lock");
                tally.latencies_ms.push(elapsed_ms);
                if let Some(error) = outcome {
                    *tally.errors.entry(error).or_default() += 1;
                }
                drop(tally);
                bar.inc(count as u64);
            }
        });
    }
    while let Some(joined) = senders.join_next().await {
        joined.context("a sender task failed")?;
    }
    let send_seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let mut tally = std::mem::take(&mut *tally.lock().expect("tally lock"));
    let accepted = accepted.load(Ordering::Relaxed);
    let per_second = std::mem::take(&mut *per_second.lock().expect("tally lock"));

    let drain = match &config.database_url {
        Some(url) => Some(drain(&config, url, &planned, started).await?),
        None => None,
    };
    Ok(Report {
        scenario: config.scenario,
        run_id: config.run_id.clone(),
        events_sent,
        events_accepted: accepted,
        duplicates: duplicates.load(Ordering::Relaxed),
        requests: requests.load(Ordering::Relaxed),
        batch: config.batch,
        connections: config.connections,
        send_seconds,
        events_per_second: accepted as f64 / send_seconds.max(1e-9),
        http_latency_ms: Quantiles::of(&mut tally.latencies_ms),
        errors_by_status: tally.errors,
        accepted_per_second: per_second,
        drain,
    })
}

/// The rules' verdict on an entity's final counts: the status it should end with.
fn expected_status(rules: &RuleSet, entity: &str, counts: &HashMap<&'static str, i64>) -> Status {
    let snapshot = Snapshot::with_counts(
        EntityId::parse(entity).expect("generated ids are valid"),
        counts.iter().map(|(signal, count)| (*signal, *count)),
    );
    let verdict = rules.evaluate(&snapshot);
    verdict
        .to_apply(Status::Visible, None)
        .map_or(Status::Visible, |d| d.action.status())
}

async fn drain(
    config: &LoadConfig,
    url: &str,
    planned: &[Planned],
    started: Instant,
) -> anyhow::Result<Drain> {
    let pool = PgPool::connect(url)
        .await
        .context("cannot connect to Postgres")?;
    let pattern = format!("post:{}-%", config.run_id);
    let mut counts: HashMap<u32, HashMap<&'static str, i64>> = HashMap::new();
    for p in planned {
        *counts
            .entry(p.entity)
            .or_default()
            .entry(p.signal)
            .or_default() += 1;
    }
    let entities = counts.len();
    let send_done = Instant::now();
    let deadline = send_done + config.drain_timeout;
    let mut drained = false;
    while Instant::now() < deadline {
        let (recorded, owed) = store::loadgen::drain_progress(&pool, &pattern).await?;
        if recorded as usize == entities && owed == 0 {
            drained = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let drain_seconds = send_done.elapsed().as_secs_f64();
    // Long enough for an evaluation that should not happen to show up.
    tokio::time::sleep(config.window + Duration::from_secs(1)).await;

    let run_started = chrono::Utc::now() - chrono::Duration::from_std(started.elapsed())?;
    let rows = store::loadgen::run_evaluations(&pool, &pattern).await?;
    let mut per_entity: HashMap<String, u64> = HashMap::new();
    let mut delays = Vec::with_capacity(rows.len());
    let mut fire_delays = Vec::with_capacity(rows.len());
    let mut finishes_ms = Vec::with_capacity(rows.len());
    for row in &rows {
        *per_entity.entry(row.entity.clone()).or_default() += 1;
        finishes_ms.push(row.finished_at.timestamp_millis());
        if let Some(delay) = row.delay_ms {
            delays.push(delay);
            let at = (row.started_at - run_started).num_milliseconds() as f64 / 1000.0;
            fire_delays.push((at, delay));
        }
    }
    let evaluations = rows.len() as u64;
    finishes_ms.sort_unstable();
    let span = match (finishes_ms.first(), finishes_ms.last()) {
        (Some(first), Some(last)) => ((last - first) as f64 / 1000.0).max(1.0),
        _ => 1.0,
    };

    let action_rows = store::loadgen::run_actions(&pool, &pattern).await?;
    let mut applied: HashMap<(String, String), u64> = HashMap::new();
    for row in &action_rows {
        *applied.entry(row.clone()).or_default() += 1;
    }
    let duplicate_actions = applied.values().map(|n| n.saturating_sub(1)).sum();
    let statuses: HashMap<String, String> = store::loadgen::run_statuses(&pool, &pattern)
        .await?
        .into_iter()
        .collect();
    let (mut wrong, mut expected_actions) = (0, 0);
    for (index, signals) in &counts {
        let name = entity_name(&config.run_id, *index);
        let expected = expected_status(&config.rules, &name, signals);
        if expected != Status::Visible {
            expected_actions += 1;
        }
        let actual = statuses.get(&name).map_or("visible", String::as_str);
        if actual != expected.as_str() {
            wrong += 1;
        }
    }
    pool.close().await;
    Ok(Drain {
        drained,
        drain_seconds,
        entities,
        evaluations,
        evaluations_per_entity: evaluations as f64 / entities.max(1) as f64,
        entities_evaluated_more_than_once: per_entity.values().filter(|n| **n > 1).count() as u64,
        evaluations_per_event: evaluations as f64 / planned.len().max(1) as f64,
        fire_delay_ms: Quantiles::of(&mut delays),
        evaluations_per_second_peak: busiest_window(&finishes_ms, 1_000),
        evaluations_per_second_mean: evaluations as f64 / span,
        actions: action_rows.len() as u64,
        duplicate_actions,
        wrong_actions: wrong,
        expected_actions,
        fire_delays,
    })
}

/// The most instants (sorted, in milliseconds) that fall in one window `[t, t + window_ms)`,
/// over every start `t`: the busiest window is never split by where a clock second begins.
fn busiest_window(sorted_ms: &[i64], window_ms: i64) -> u64 {
    debug_assert!(window_ms > 0, "an empty window would run past the end");
    let mut start = 0;
    let mut busiest = 0;
    for (end, at) in sorted_ms.iter().enumerate() {
        while sorted_ms[start] <= at - window_ms {
            start += 1;
        }
        busiest = busiest.max(end + 1 - start);
    }
    busiest as u64
}

impl Report {
    /// A human summary, one figure per line.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "scenario {:?} run {}\n  sent {} events in {} requests ({} per request, {} connections) in {:.2}s\n  accepted {} new + {} duplicates: {:.0} events/s\n  HTTP latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms\n  errors: {}\n",
            self.scenario,
            self.run_id,
            self.events_sent,
            self.requests,
            self.batch,
            self.connections,
            self.send_seconds,
            self.events_accepted,
            self.duplicates,
            self.events_per_second,
            self.http_latency_ms.p50,
            self.http_latency_ms.p99,
            self.http_latency_ms.max,
            if self.errors_by_status.is_empty() {
                "none".to_owned()
            } else {
                format!("{:?}", self.errors_by_status)
            },
        );
        if let Some(d) = &self.drain {
            out.push_str(&format!(
                "  drained: {} ({:.2}s after the last request)\n  evaluations: {} for {} entities = {:.2} per entity ({} entities more than once), {:.4} per event\n  fire delay p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms\n  evaluations/s: busiest one-second window {}, mean {:.0}\n  actions {} (expected {}), duplicates {}, wrong {}\n",
                d.drained,
                d.drain_seconds,
                d.evaluations,
                d.entities,
                d.evaluations_per_entity,
                d.entities_evaluated_more_than_once,
                d.evaluations_per_event,
                d.fire_delay_ms.p50,
                d.fire_delay_ms.p99,
                d.fire_delay_ms.max,
                d.evaluations_per_second_peak,
                d.evaluations_per_second_mean,
                d.actions,
                d.expected_actions,
                d.duplicate_actions,
                d.wrong_actions,
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::busiest_window;

    #[test]
    fn the_busiest_window_is_found_across_a_clock_second() {
        // 600 finishes in 12:00:00.700..12:00:01.299 (one every millisecond) would count as 300
        // and 300 by clock seconds; any one-second window holds all of them.
        let burst: Vec<i64> = (0..600).map(|i| 700 + i).collect();
        assert_eq!(busiest_window(&burst, 1_000), 600);
        // A window is half-open: instants exactly one second apart are not in one window.
        assert_eq!(busiest_window(&[0, 1_000, 2_000], 1_000), 1);
        assert_eq!(busiest_window(&[0, 999, 1_000, 1_500], 1_000), 3);
        assert_eq!(busiest_window(&[], 1_000), 0);
    }
}
