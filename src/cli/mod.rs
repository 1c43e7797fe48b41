//! The command line: the commands and their flags (clap), each family of subcommands in a file
//! of its own; `serve` and `worker` hand over to [`crate::startup`].

mod audit;
mod dead_letters;
mod deliveries;
mod healthcheck;
mod rules;
mod shards;
mod statements;

use clap::{Parser, Subcommand};

use self::{dead_letters::DeadLettersCommand, deliveries::DeliveriesCommand, rules::RulesCommand};
use crate::{
    settings::{ConfigArgs, Loaded},
    startup::{self, load_settings},
};

/// Moderation debounce scheduler: records every event, waits until an entity is quiet, then
/// evaluates the rules once on a consistent snapshot and applies at most one action.
///
/// Every setting can come from a TOML file (--config), a QUIESCE_* environment variable, or
/// the flag of the same name; a flag beats its variable, which beats the file. `quiesce config`
/// prints each setting's value and where it came from.
#[derive(Parser)]
#[command(name = "quiesce", version, about, long_about)]
pub struct Cli {
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
    /// Ask the quiesce process on this host whether it is alive (GET /healthz on its metrics
    /// listener, or --url): exit 0 when it answers 2xx, 1 otherwise. The container image's
    /// health command.
    Healthcheck(healthcheck::HealthcheckArgs),
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
    /// Print the audit trail (reversals, overrides, redrives, rules reloads, shard moves,
    /// console sign-ins and sign-outs: who, from where, before and after), newest first: a
    /// table under a header line (saying so when there is no entry), or one JSON object per
    /// line with --json (nothing when there is none).
    Audit(audit::AuditArgs),
    /// Check a rules file and print its rules, backtest it against the evaluations of a window,
    /// publish it as the next rules version, or roll back to an earlier version.
    Rules {
        #[command(subcommand)]
        command: RulesCommand,
    },
    /// Export the statements of reasons issued (DSA Art. 17), oldest first, one JSON object per
    /// line.
    Statements {
        #[command(subcommand)]
        command: statements::StatementsCommand,
    },
}

/// Runs the command; its output goes to stdout, its logs to stderr.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => startup::serve(load_settings(&args)?).await,
        Command::Worker(args) => startup::work(load_settings(&args)?).await,
        Command::Migrate(args) => {
            let settings = load_settings(&args)?;
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
        } => shards::run(&startup::load_report_settings(&config)?, move_dead_letters).await,
        Command::DeadLetters { command } => dead_letters::run(command).await,
        Command::Deliveries { command } => deliveries::run(command).await,
        Command::Rules { command } => rules::run(command).await,
        Command::Audit(args) => audit::run(args).await,
        Command::Statements { command } => statements::run(command).await,
        Command::Healthcheck(args) => healthcheck::run(args).await,
    }
}
