//! `quiesce rules`: check a rules file, backtest it, publish it as the next rules version, or
//! roll back to an earlier one.

use std::{path::PathBuf, sync::Arc};

use anyhow::Context;
use clap::Subcommand;

use crate::{
    active_rules, audit,
    backtest::{self, DEFAULT_SAMPLE, MAX_SAMPLE},
    rules::RuleSet,
    settings::{ConfigArgs, Settings},
    startup::{connect_postgres, connect_store, load_report_settings, load_rules},
    store::Store,
};

// Parsed once per run: the size of the backtest's settings does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub(super) enum RulesCommand {
    /// Validate a rules file; exits non-zero with the rule and the problem if it is invalid.
    Check {
        /// The rules file (TOML).
        file: PathBuf,
    },
    /// Publish a rules file as the next rules version and make it active: validated first
    /// (exits non-zero with the rule and the problem, storing nothing, if it is invalid), then
    /// stored in Postgres with its hash, the author (cli:<the user of the process's uid>) and
    /// the message, and recorded in the audit trail. Every serve and worker process puts it in
    /// force within moments. Prints the new version and its hash as JSON:
    /// {"version":2,"hash":"..."}.
    Publish {
        #[command(flatten)]
        config: ConfigArgs,
        /// The rules file (TOML).
        file: PathBuf,
        /// Why this version.
        #[arg(short, long)]
        message: String,
    },
    /// Make an earlier rules version active again (a new activation in the history, recorded
    /// in the audit trail); every process puts it in force within moments. Prints it as JSON.
    Rollback {
        #[command(flatten)]
        config: ConfigArgs,
        /// The version to make active.
        version: i64,
        /// Why (default: "rolled back to version N").
        #[arg(short, long)]
        message: Option<String>,
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
    /// Pick a threshold from the reversals: replay the rules file with one numeric literal of
    /// one rule's condition moved over a range of values (by default 10 values evenly spaced from
    /// half to one and a half times it, plus its own), all in one read of the window, and print per
    /// value the rule's actions, the actions it keeps, adds and removes, the reversals it saves
    /// and its expected reversal rate with a 95% interval. Reads Postgres only.
    Sweep {
        #[command(flatten)]
        config: ConfigArgs,
        /// The rules file (TOML) whose rule is swept.
        file: PathBuf,
        /// The rule whose condition is swept.
        #[arg(long)]
        rule: String,
        /// Which numeric literal of its condition, counted from 0 in the order written.
        #[arg(long, default_value_t = 0)]
        literal: usize,
        /// The values to try, comma-separated (at most 50); default: 10 around the literal, and the literal.
        #[arg(long, value_delimiter = ',')]
        values: Vec<f64>,
        /// How far back, as for backtest.
        #[arg(long, default_value = "7d", value_parser = backtest::parse_window)]
        since: std::time::Duration,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The rules a candidate is compared with: the active rules version, or the rules file when
/// no version is stored yet.
async fn in_force(settings: &Settings, store: &Store) -> anyhow::Result<Arc<RuleSet>> {
    let rules = load_rules(settings)?;
    active_rules::sync(store, &rules).await?;
    Ok(rules.current())
}

pub(super) async fn run(command: RulesCommand) -> anyhow::Result<()> {
    match command {
        RulesCommand::Publish {
            config,
            file,
            message,
        } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read the rules file {}", file.display()))?;
            let settings = load_report_settings(&config)?;
            let store = connect_postgres(&settings).await?;
            let version =
                active_rules::publish(&store, None, &audit::command_line(), &text, &message, None)
                    .await?;
            let published = active_rules::Published::new(version, &text);
            println!("{}", serde_json::to_string(&published)?);
            Ok(())
        }
        RulesCommand::Rollback {
            config,
            version,
            message,
        } => {
            let settings = load_report_settings(&config)?;
            let store = connect_postgres(&settings).await?;
            let message = message.unwrap_or_else(|| format!("rolled back to version {version}"));
            active_rules::rollback(&store, None, &audit::command_line(), version, &message).await?;
            println!("{}", serde_json::json!({ "version": version }));
            Ok(())
        }
        RulesCommand::Backtest {
            config,
            file,
            since,
            json,
            sample,
        } => {
            let candidate = RuleSet::from_file(&file)?;
            let settings = load_report_settings(&config)?;
            let store = replica_store(&settings).await?;
            let in_force = in_force(&settings, &store).await?;
            let report = backtest::run(
                &store,
                &backtest::BacktestSemaphore::default(),
                Arc::new(candidate),
                &in_force,
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
        RulesCommand::Sweep {
            config,
            file,
            rule,
            literal,
            values,
            since,
            json,
        } => {
            let rules = RuleSet::from_file(&file)?;
            let settings = load_report_settings(&config)?;
            let store = replica_store(&settings).await?;
            let in_force = in_force(&settings, &store).await?;
            let report = backtest::sweep::sweep(
                &store,
                &backtest::BacktestSemaphore::default(),
                backtest::sweep::Swept {
                    rules: &rules,
                    rule: &rule,
                    literal,
                    values: &values,
                },
                &in_force,
                backtest::Options {
                    window: since,
                    sample: 0,
                },
            )
            .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", backtest::render_sweep(&report));
            }
            Ok(())
        }
        RulesCommand::Check { file } => {
            let rules = RuleSet::from_file(&file)?;
            for rule in rules.rules() {
                println!(
                    "{}\t{}{}\tkinds={:?}\twhen: {}",
                    rule.name,
                    rule.effects(),
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

/// The store a backtest or a sweep reads through: from the read replica when one is set and
/// keeps up (checked once, now), else from the primary.
async fn replica_store(settings: &Settings) -> anyhow::Result<Store> {
    let store = connect_store(settings).await?;
    if let Some(replica) = store.replica() {
        replica.check().await;
    }
    Ok(store)
}
