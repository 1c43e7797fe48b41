use std::{path::PathBuf, process::ExitCode, sync::Arc};

use clap::{Parser, Subcommand};
use quiesce::{
    config::{ConfigArgs, Settings},
    rules::RuleSet,
    startup::{self, Application, Backends},
    telemetry,
};

/// Moderation debounce scheduler: records every event, waits until an entity is quiet, then
/// evaluates the rules once on a consistent snapshot and applies at most one action.
///
/// Every setting can come from a TOML file (--config), a QUIESCE_* environment variable, or
/// the flag of the same name; a flag beats its variable, which beats the file.
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
    /// Check a rules file and print its rules.
    Rules {
        #[command(subcommand)]
        command: RulesCommand,
    },
}

#[derive(Subcommand)]
enum RulesCommand {
    /// Validate a rules file; exits non-zero with the rule and the problem if it is invalid.
    Check {
        /// The rules file (TOML).
        file: PathBuf,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("quiesce: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn settings(args: &ConfigArgs) -> anyhow::Result<Settings> {
    let settings = Settings::load(args)?;
    telemetry::init_tracing(settings.log_format, "info,sqlx=warn,tower_http=warn");
    Ok(settings)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let settings = settings(&args)?;
            let rules = Arc::new(startup::load_rules(&settings)?);
            startup::prepare_database(&settings).await?;
            let backends = Backends::connect(&settings, rules).await?;
            let worker = backends.worker(&settings);
            let app = Application::build(&settings, &backends, Some(worker)).await?;
            let rule_count = backends.rules.rules().len();
            tracing::info!(address = %app.address(), rules = rule_count, "quiesce is serving");
            let shutdown = startup::shutdown_on_signal();
            let metrics = startup::spawn_metrics_listener(&settings, &backends, shutdown.clone());
            let metrics = metrics.await?;
            app.run_until_stopped(shutdown).await?;
            if let Some(metrics) = metrics {
                metrics.await?;
            }
            Ok(())
        }
        Command::Worker(args) => {
            let settings = settings(&args)?;
            let rules = Arc::new(startup::load_rules(&settings)?);
            startup::prepare_database(&settings).await?;
            let backends = Backends::connect(&settings, rules).await?;
            let _ = telemetry::metrics_handle();
            tracing::info!(workers = settings.workers, "quiesce worker started");
            let shutdown = startup::shutdown_on_signal();
            let metrics = startup::spawn_metrics_listener(&settings, &backends, shutdown.clone());
            let metrics = metrics.await?;
            backends.worker(&settings).run(shutdown).await;
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
        Command::Rules {
            command: RulesCommand::Check { file },
        } => {
            let rules = RuleSet::from_file(&file)?;
            for rule in rules.rules() {
                println!(
                    "{}\t{}\tkinds={:?}\twhen: {}",
                    rule.name,
                    rule.action.as_str(),
                    rule.kinds,
                    rule.when
                );
            }
            println!("{}: {} rules, valid", file.display(), rules.rules().len());
            Ok(())
        }
    }
}
