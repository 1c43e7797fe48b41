//! The load generator behind `quiesce-loadgen`: sends a scenario's events to a running quiesce,
//! measures what ingest accepted and how fast, then (with database access) waits for the drain
//! and checks the outcome: evaluations per entity (how bursts collapse), fire delay (evaluation
//! start minus due time, as recorded by each evaluation), and duplicate or wrong actions, where
//! the right action is what the rules give on each entity's final counts.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use rand::Rng;
use serde::Serialize;
use serde_json::{Value, json};

use crate::{credentials::WebhookSecret, rules::RuleSet};

mod outcome;
mod plan;
mod report;

pub use self::report::{Drain, Quantiles, Report};
use self::{
    outcome::drain,
    plan::{Planned, entity_name, plan, request_order},
};

/// How events are spread over entities and signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Zipf-distributed entities (a few hot, a long tail), mixed signals.
    Steady,
    /// Every entity receives its events in one burst, entities interleaved, mixed signals.
    Burst,
    /// A vote storm on a viral post: 10 entities receive 90% of the events (in turn), the others
    /// share the rest (in turn), mixed signals.
    Hot,
    /// Many entities, flags only: a spam wave the rules should hide.
    SpamWave,
    /// Valid posts buried in upvotes with a few early flags: nothing should happen.
    Sloan,
    /// Each request's events come from entities drawn at random (uniformly), 1 to 4 events
    /// each, mixed signals: a platform sending events as they happen on many posts at once.
    Random,
}

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
    /// Stop sending new requests after this long (the events not sent by then are left out of
    /// the report and the checks); `None`: send them all.
    pub send_for: Option<Duration>,
    /// Each connection waits a random time between zero and this after each request.
    pub pause: Duration,
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
    /// Put attributes on every event ([`plan::attributes_of`]: a `reason` among three and a
    /// `score`); the server's rules must declare them (bench/ingest/attributes.toml).
    pub attributes: bool,
    /// The share of the requests (0 to 0.9) that re-send an earlier request whole, as a
    /// sender does after a timeout or a 503 ([`plan::requests`]); `events` counts them.
    pub duplicates: f64,
}

#[derive(Default)]
struct Tally {
    latencies_ms: Vec<f64>,
    errors: BTreeMap<String, u64>,
}

/// Runs the scenario and, with a database URL, the drain and outcome checks.
pub async fn run(config: LoadConfig) -> anyhow::Result<Report> {
    let duplicates_share = config.duplicates.clamp(0.0, 0.9);
    // `events` counts the re-sent ones: the plan holds the events sent fresh.
    let fresh = (config.events as f64 * (1.0 - duplicates_share)).round() as usize;
    let planned = Arc::new(plan(&LoadConfig {
        events: fresh,
        ..config.clone()
    }));
    // A re-send comes after about as many requests as are in flight, so the first send is
    // usually answered by then (a retry after a timeout).
    let sent_requests = Arc::new(request_order(
        planned.len(),
        config.batch,
        duplicates_share,
        config.connections,
        config.seed,
    ));
    let batches = sent_requests.len();
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
        indicatif::ProgressBar::new(sent_requests.iter().map(|r| r.len() as u64).sum())
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
        let (planned, sent_requests) = (Arc::clone(&planned), Arc::clone(&sent_requests));
        let (next, accepted, duplicates, requests, tally, per_second, bar) = (
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
        let (batch, rate, attributes) = (config.batch.max(1), config.rate, config.attributes);
        let (send_for, pause) = (config.send_for, config.pause);
        senders.spawn(async move {
            loop {
                // Checked before taking a request: every request taken is sent, so the events
                // sent are the plan's first ones.
                if send_for.is_some_and(|limit| started.elapsed() >= limit) {
                    return;
                }
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
                let range = sent_requests[index].clone();
                let events: Vec<Value> = range
                    .map(|i| {
                        let p = planned[i];
                        let mut event = json!({
                            "id": format!("{run_id}-{i}"),
                            "entity": entity_name(&run_id, p.entity),
                            "type": p.signal,
                            "actor": format!("user:{}", i % 997),
                        });
                        if attributes {
                            event["attributes"] = plan::attributes_of(i);
                        }
                        event
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
                {
                    let mut tally = tally.lock().expect("tally lock");
                    tally.latencies_ms.push(elapsed_ms);
                    if let Some(error) = outcome {
                        *tally.errors.entry(error).or_default() += 1;
                    }
                }
                bar.inc(count as u64);
                if !pause.is_zero() {
                    let wait = rand::rng().random_range(0..=pause.as_micros() as u64);
                    tokio::time::sleep(Duration::from_micros(wait)).await;
                }
            }
        });
    }
    while let Some(joined) = senders.join_next().await {
        joined.context("a sender task failed")?;
    }
    let send_seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    // The plan's first requests, all of them unless `send_for` stopped the send; the events
    // sent fresh are the plan's first ones, up to the furthest request sent.
    let taken = &sent_requests[..next.load(Ordering::Relaxed).min(sent_requests.len())];
    let events_sent: usize = taken.iter().map(|r| r.len()).sum();
    let fresh_sent = taken.iter().map(|r| r.end).max().unwrap_or(0);
    let mut tally = std::mem::take(&mut *tally.lock().expect("tally lock"));
    let accepted = accepted.load(Ordering::Relaxed);
    let per_second = std::mem::take(&mut *per_second.lock().expect("tally lock"));

    let drain = match &config.database_url {
        Some(url) => Some(drain(&config, url, &planned[..fresh_sent], accepted, started).await?),
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
        answered_per_second: (accepted + duplicates.load(Ordering::Relaxed)) as f64
            / send_seconds.max(1e-9),
        http_latency_ms: Quantiles::of(&mut tally.latencies_ms),
        errors_by_status: tally.errors,
        accepted_per_second: per_second,
        drain,
    })
}
