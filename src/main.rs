use std::{path::PathBuf, process::ExitCode, sync::Arc};

use clap::{Parser, Subcommand};
use quiesce::{
    backtest::{self, DEFAULT_SAMPLE, MAX_SAMPLE},
    dead_letters,
    domain::EntityId,
    queue::Queue,
    rules::RuleSet,
    settings::{ConfigArgs, Loaded, Settings},
    startup::{self, Application, Backends},
    store::Store,
    telemetry,
};

/// Moderation debounce scheduler: records every event, waits until an entity is quiet, then
/// evaluates the rules once on a consistent snapshot and applies at most one action.
///
/// Every setting can come from a TOML file (--config), a QUIESCE_* environment variable, or
/// the flag of the same name; a flag beats its variable, which beats the file. `quiesce config`
/// prints each setting's value and where it came from.
#[derive(Parser)]
#[command(name = "quiesce", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP API and the workers in one process (applies migrations first).
    Serve(ConfigArgs),
    /// Run workers only; start as many processes as you like against the same Redis and Postgres.
    Worker(ConfigArgs),
    /// Create the database if needed and apply pending migrations, then exit.
    Migrate(ConfigArgs),
    /// List or redrive dead-lettered entities.
    DeadLetters {
        #[command(subcommand)]
        command: DeadLettersCommand,
    },
    /// List or redrive webhook deliveries that were given up.
    Deliveries {
        #[command(subcommand)]
        command: DeliveriesCommand,
    },
    /// Print the effective settings, each with where it came from (default, file, environment,
    /// flag); secrets are redacted.
    Config(ConfigArgs),
    /// Print what each shard layout of the schedule holds (due, pending, in flight, dead):
    /// the current one and, during a shard count change, the one draining; says when the
    /// draining one is empty and previous_shards can go back to 0.
    Shards {
        #[command(flatten)]
        config: ConfigArgs,
        /// Move the draining layout's dead letters to the current one first; only once every
        /// process runs the new shard count (until then, old processes look for them there).
        #[arg(long)]
        move_dead_letters: bool,
    },
    /// Check a rules file and print its rules, or backtest it against the evaluations of a window.
    Rules {
        #[command(subcommand)]
        command: RulesCommand,
    },
}

#[derive(Subcommand)]
enum DeadLettersCommand {
    /// Print dead letters not yet redriven, oldest first, from Postgres: entity, reason,
    /// attempts, last failure, last error.
    List {
        #[command(flatten)]
        config: ConfigArgs,
        /// Most entries to print.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Make dead-lettered entities due again with fresh attempts (marked redriven by `cli` in
    /// Postgres).
    #[command(group = clap::ArgGroup::new("which").required(true).args(["entity", "all", "reason"]))]
    Redrive {
        #[command(flatten)]
        config: ConfigArgs,
        /// One entity, e.g. post:9842.
        #[arg(long)]
        entity: Option<String>,
        /// Every dead letter.
        #[arg(long)]
        all: bool,
        /// Every dead letter of this reason: fatal or attempts_exhausted.
        #[arg(long, value_parser = ["fatal", "attempts_exhausted"])]
        reason: Option<String>,
    },
}

#[derive(Subcommand)]
enum DeliveriesCommand {
    /// Print deliveries given up after the horizon: id, topic, webhook-id, attempts, last error.
    Failed {
        #[command(flatten)]
        config: ConfigArgs,
        /// Most entries to print.
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// Deliver given-up webhooks again, with a new horizon.
    #[command(group = clap::ArgGroup::new("which").required(true).args(["id", "all"]))]
    Redrive {
        #[command(flatten)]
        config: ConfigArgs,
        /// One outbox row (repeat for several).
        #[arg(long)]
        id: Vec<i64>,
        /// Every failed delivery.
        #[arg(long)]
        all: bool,
    },
}

// Parsed once per run: the size of the backtest's settings does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum RulesCommand {
    /// Validate a rules file; exits non-zero with the rule and the problem if it is invalid.
    Check {
        /// The rules file (TOML).
        file: PathBuf,
    },
    /// Replay a candidate rules file over the evaluations of the last --since (each on the
    /// snapshot the rules saw, in order per entity, with moderators' overrides and reversals as
    /// they stood) and report, per rule and overall, the actions it would have added and
    /// removed compared with the rules in force, the reversals it would have saved, its
    /// expected reversal rate with a 95% interval, the entities whose final status would
    /// differ, and a sample of the added actions. Reads Postgres only: nothing is written, no
    /// status changes, no webhook is sent.
    Backtest {
        #[command(flatten)]
        config: ConfigArgs,
        /// The candidate rules file (TOML).
        file: PathBuf,
        /// How far back: evaluations finished in this last stretch, e.g. 24h, 7d (at most 90 days).
        #[arg(long, default_value = "7d", value_parser = backtest::parse_window)]
        since: std::time::Duration,
        /// Print the report as JSON (the shape POST /v1/rules/backtest answers).
        #[arg(long)]
        json: bool,
        /// Added actions to sample, with their snapshots (0 to 100).
        #[arg(long, default_value_t = DEFAULT_SAMPLE as u64, value_parser = clap::value_parser!(u64).range(0..=MAX_SAMPLE as u64))]
        sample: u64,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // Whatever a library put in its message, no address leaves with its password.
            eprintln!(
                "quiesce: {}",
                quiesce::credentials::redact_passwords(&format!("{error:#}"))
            );
            ExitCode::FAILURE
        }
    }
}

fn settings(args: &ConfigArgs) -> anyhow::Result<Settings> {
    let settings = Settings::load(args)?;
    telemetry::init_tracing(
        settings.telemetry.log_format,
        "info,sqlx=warn,tower_http=warn",
    );
    if settings.maintenance.test_short_retention {
        tracing::warn!(
            retention = %humantime::format_duration(settings.maintenance.retention),
            "test_short_retention is set: a TEST ONLY setting (retention below 1h); never in production"
        );
    }
    Ok(settings)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let settings = settings(&args)?;
            settings
                .security
                .check_serving()
                .map_err(anyhow::Error::msg)?;
            if settings.security.insecure_dev {
                tracing::warn!("--insecure-dev: the API runs without tokens or inbound signatures");
            }
            let rules = Arc::new(startup::load_rules(&settings)?);
            startup::prepare_database(&settings).await?;
            let backends = Backends::connect(&settings, rules).await?;
            backends.check_redis_durability().await;
            backends.check_schedule_matches_database(&settings).await?;
            let worker = backends.worker(&settings);
            let app = Application::build(&settings, &backends, Some(worker)).await?;
            let rule_count = backends.rules.current().rules().len();
            startup::reload_rules_on_sighup(Arc::clone(&backends.rules));
            tracing::info!(
                address = %app.address(),
                metrics = %app.metrics_address().map_or_else(|| "off".to_owned(), |a| a.to_string()),
                rules = rule_count,
                "quiesce is serving"
            );
            let shutdown = startup::shutdown_on_signal();
            let dispatcher = startup::spawn_dispatcher(&settings, &backends, shutdown.clone());
            app.run_until_stopped(shutdown).await?;
            if let Some(dispatcher) = dispatcher {
                dispatcher.await?;
            }
            Ok(())
        }
        Command::Worker(args) => {
            let settings = settings(&args)?;
            let rules = Arc::new(startup::load_rules(&settings)?);
            startup::prepare_database(&settings).await?;
            let backends = Backends::connect(&settings, rules).await?;
            backends.check_redis_durability().await;
            backends.check_schedule_matches_database(&settings).await?;
            let _ = telemetry::metrics_handle();
            startup::reload_rules_on_sighup(Arc::clone(&backends.rules));
            let shutdown = startup::shutdown_on_signal();
            let metrics = startup::spawn_metrics_listener(&settings, &backends, shutdown.clone());
            let metrics = metrics.await?;
            // The banner once every listener is bound.
            tracing::info!(workers = settings.worker.workers, "quiesce worker started");
            let dispatcher = startup::spawn_dispatcher(&settings, &backends, shutdown.clone());
            startup::run_workers(
                backends.worker(&settings),
                backends.maintenance(&settings),
                shutdown,
            )
            .await;
            if let Some(dispatcher) = dispatcher {
                dispatcher.await?;
            }
            if let Some(metrics) = metrics {
                metrics.await?;
            }
            Ok(())
        }
        Command::Migrate(args) => {
            let settings = settings(&args)?;
            startup::prepare_database(&settings).await?;
            println!("migrations applied");
            Ok(())
        }
        Command::Config(args) => {
            let loaded = Loaded::load(&args, &|name| std::env::var(name).ok())?;
            print!("{}", loaded.report());
            Ok(())
        }
        Command::Shards {
            config,
            move_dead_letters,
        } => shards(&settings(&config)?, move_dead_letters).await,
        Command::DeadLetters { command } => dead_letters(command).await,
        Command::Deliveries { command } => deliveries(command).await,
        Command::Rules {
            command:
                RulesCommand::Backtest {
                    config,
                    file,
                    since,
                    json,
                    sample,
                },
        } => {
            let candidate = RuleSet::from_file(&file)?;
            let settings = settings(&config)?;
            let store = Store::new(startup::connect_postgres(&settings).await?);
            let report = backtest::run(
                &store,
                &backtest::Gate::default(),
                Arc::new(candidate),
                backtest::Options {
                    window: since,
                    sample: sample as usize,
                },
            )
            .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!(
                    "{}",
                    backtest::render_text(&report, &file.display().to_string())
                );
            }
            Ok(())
        }
        Command::Rules {
            command: RulesCommand::Check { file },
        } => {
            let rules = RuleSet::from_file(&file)?;
            for rule in rules.rules() {
                println!(
                    "{}\t{}{}\tkinds={:?}\twhen: {}",
                    rule.name,
                    rule.action.as_str(),
                    if rule.shadow { " (shadow)" } else { "" },
                    rule.kinds,
                    rule.when
                );
            }
            println!("{}: {} rules, valid", file.display(), rules.rules().len());
            Ok(())
        }
    }
}

async fn dead_letters(command: DeadLettersCommand) -> anyhow::Result<()> {
    let config = match &command {
        DeadLettersCommand::List { config, .. } | DeadLettersCommand::Redrive { config, .. } => {
            config
        }
    };
    let settings = settings(config)?;
    let queue = Queue::new(
        startup::connect_redis(&settings).await?.0,
        startup::keyspace(&settings),
        settings.schedule.timing(),
    );
    let store = Store::new(startup::connect_postgres(&settings).await?);
    match command {
        DeadLettersCommand::List { limit, .. } => {
            let page = store.dead_letters(None, limit).await?;
            if page.entries.is_empty() {
                println!("no dead letters");
            }
            for dead in &page.entries {
                let at = chrono::DateTime::from_timestamp_millis(dead.record.last_failure_ms)
                    .map(|t| t.to_rfc3339())
                    .unwrap_or_default();
                println!(
                    "{}\t{}\tattempts={}\tlast_failure={}\t{}",
                    dead.entity,
                    dead.record.reason.map_or("-", |r| r.as_str()),
                    dead.record.attempts,
                    at,
                    dead.record.last_error
                );
            }
            if page.next.is_some() {
                println!("(more than {limit}; raise --limit or use GET /v1/dead-letters)");
            }
        }
        DeadLettersCommand::Redrive { entity, reason, .. } => {
            let redriven = match entity {
                Some(raw) => {
                    let entity = EntityId::parse(&raw)
                        .map_err(|e| anyhow::anyhow!("invalid --entity {raw:?}: {e}"))?;
                    usize::from(dead_letters::redrive(&store, &queue, &entity, "cli").await?)
                }
                None => dead_letters::redrive_all(&store, &queue, reason.as_deref(), "cli").await?,
            };
            println!("redriven: {redriven}");
        }
    }
    Ok(())
}

async fn shards(settings: &Settings, move_dead_letters: bool) -> anyhow::Result<()> {
    let queue = Queue::new(
        startup::connect_redis(settings).await?.0,
        startup::keyspace(settings),
        settings.schedule.timing(),
    );
    if move_dead_letters {
        let store = Store::new(startup::connect_postgres(settings).await?);
        let moved = dead_letters::move_draining(&store, &queue).await?;
        println!(
            "dead letters moved to the current layout: {} ({} recorded in Postgres first; {} left the draining layout)",
            moved.moved, moved.recorded, moved.forgotten
        );
    }
    let layouts = queue.layout_depths().await?;
    for layout in &layouts {
        println!(
            "{} shards{}\tdue={}\tpending={}\tin_flight={}\tdead={}",
            layout.shards,
            if layout.draining { " (draining)" } else { "" },
            layout.due,
            layout.pending,
            layout.inflight,
            layout.dead
        );
    }
    let current = layouts[0].shards;
    match layouts.iter().find(|l| l.draining) {
        Some(old) if old.is_drained() && old.dead == 0 => println!(
            "the {} shards drained are empty: set previous_shards to 0 on every process",
            old.shards
        ),
        Some(old) if old.is_drained() => println!(
            "the {} shards drained hold only {} dead letters: once every process runs {current} shards, \
             run quiesce shards --move-dead-letters, then set previous_shards to 0",
            old.shards, old.dead
        ),
        Some(old) => println!(
            "the {} shards drained still hold entities; they leave as they are evaluated",
            old.shards
        ),
        None => {}
    }
    Ok(())
}

async fn deliveries(command: DeliveriesCommand) -> anyhow::Result<()> {
    let config = match &command {
        DeliveriesCommand::Failed { config, .. } | DeliveriesCommand::Redrive { config, .. } => {
            config
        }
    };
    let settings = settings(config)?;
    let store = Store::new(startup::connect_postgres(&settings).await?);
    match command {
        DeliveriesCommand::Failed { limit, .. } => {
            let failed = store.failed_deliveries(limit).await?;
            if failed.is_empty() {
                println!("no failed deliveries");
            }
            for row in failed {
                println!(
                    "{}\t{}\t{}\tattempts={}\t{}",
                    row.id,
                    row.topic,
                    row.idempotency_key,
                    row.attempts,
                    row.last_error.unwrap_or_default()
                );
            }
        }
        DeliveriesCommand::Redrive { id, all, .. } => {
            let ids = (!all).then_some(id.as_slice());
            println!("redriven: {}", store.redrive_deliveries(ids).await?);
        }
    }
    Ok(())
}
