//! `quiesce-loadgen`: bursts of events against a running quiesce, then the drain and outcome
//! checks. See `quiesce-loadgen --help` and BENCHMARKS.md.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::Parser;
use quiesce::{
    loadgen::{self, LoadConfig, Scenario},
    rules::RuleSet,
};

/// Load generator for quiesce: sends a scenario's events, reports ingest throughput and HTTP
/// latency, and with --database-url waits for the drain and reports evaluations per entity,
/// fire delay (evaluation start - due time) and duplicate or wrong actions.
#[derive(Parser)]
#[command(name = "quiesce-loadgen", version, about, long_about)]
struct Args {
    /// Base URL of the quiesce API.
    #[arg(
        long,
        default_value = "http://127.0.0.1:8080",
        env = "QUIESCE_LOADGEN_URL"
    )]
    url: String,
    /// steady (Zipf entities), burst (each entity one burst), hot (10 entities get 90% of the events: a viral post under a vote storm), spam-wave (flags only), sloan (posts buried in upvotes with a few early flags) or random (each request from entities drawn at random, 1-4 events each).
    #[arg(long, value_enum, default_value = "burst")]
    scenario: Scenario,
    /// Events to send (sloan: ignored; each post gets 10 flags and 500 upvotes).
    #[arg(long, default_value_t = 100_000)]
    events: usize,
    /// Distinct entities.
    #[arg(long, default_value_t = 10_000)]
    entities: usize,
    /// Events per second to pace at [default: as fast as the server takes them].
    #[arg(long)]
    rate: Option<u32>,
    /// Send for this long (e.g. 30s): with --rate, rate x duration events; without, requests
    /// until then (the events not sent are left out of the checks). At most --events either way.
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Each connection waits a random time between zero and this after each request (e.g. 20ms).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pause: Duration,
    /// Events per request.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// The server's debounce window (the drain check waits it out once more).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    window: Duration,
    /// Bearer token (an ingest token) for /v1/events.
    #[arg(long, env = "QUIESCE_LOADGEN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Standard Webhooks secret (whsec_...) to sign every request with.
    #[arg(long, env = "QUIESCE_LOADGEN_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// Send to the named source's endpoint, /v1/sources/{source}/events.
    #[arg(long)]
    source: Option<String>,
    /// The server's Postgres: enables the drain and outcome checks.
    #[arg(long, env = "QUIESCE_LOADGEN_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Longest wait for the drain.
    #[arg(long, default_value = "120s", value_parser = humantime::parse_duration)]
    drain_timeout: Duration,
    /// The server's rules file, for the expected actions [default: the shipped default rules].
    #[arg(long)]
    rules: Option<PathBuf>,
    /// Prefix of every id and entity of this run [default: random].
    #[arg(long)]
    run_id: Option<String>,
    /// Seed of the scenario's random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON (on standard output) instead of a summary.
    #[arg(long)]
    json: bool,
    /// Exit non-zero if any duplicate or wrong action is found.
    #[arg(long)]
    check: bool,
    /// Put attributes on every event: a `reason` (spam, abuse or off_topic) and a `score` in
    /// [0, 1); the server's rules must declare them (bench/ingest/attributes.toml).
    #[arg(long)]
    attributes: bool,
    /// The share of requests (0 to 0.9) that re-send an earlier request whole, as a sender
    /// retrying after a timeout or a 503: its events are duplicates. --events counts them.
    #[arg(long, default_value_t = 0.0)]
    duplicates: f64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let rules = match &args.rules {
        Some(path) => match RuleSet::from_file(path) {
            Ok(rules) => rules,
            Err(error) => {
                eprintln!("quiesce-loadgen: {error}");
                return ExitCode::FAILURE;
            }
        },
        None => RuleSet::default_rules(),
    };
    let events = match (args.duration, args.rate) {
        // A duration at a rate bounds the events; without a rate it cannot be planned.
        (Some(duration), Some(rate)) => args
            .events
            .min((duration.as_secs_f64() * rate as f64) as usize),
        _ => args.events,
    };
    let config = LoadConfig {
        url: args.url.trim_end_matches('/').to_owned(),
        scenario: args.scenario,
        events,
        entities: args.entities,
        rate: args.rate,
        // With a rate the duration bounds the events (above); without, the send's time.
        send_for: args.duration.filter(|_| args.rate.is_none()),
        pause: args.pause,
        batch: args.batch,
        connections: args.connections,
        token: args.token,
        secret: args.secret,
        source: args.source,
        database_url: args.database_url,
        drain_timeout: args.drain_timeout,
        window: args.window,
        run_id: args
            .run_id
            .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()),
        rules: std::sync::Arc::new(rules),
        seed: args.seed,
        progress: !args.json,
        attributes: args.attributes,
        duplicates: args.duplicates,
    };
    match loadgen::run(config).await {
        Ok(report) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string(&report).expect("report serializes")
                );
            } else {
                print!("{}", report.summary());
            }
            let bad = report
                .drain
                .as_ref()
                .is_some_and(|d| d.duplicate_actions > 0 || d.wrong_actions > 0 || !d.drained);
            if args.check && bad {
                eprintln!("quiesce-loadgen: duplicate or wrong actions, or not drained");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("quiesce-loadgen: {error:#}");
            ExitCode::FAILURE
        }
    }
}
