//! `quiesce dead-letters`: list dead letters, or redrive them.

use clap::Subcommand;

use crate::{
    audit, dead_letters,
    domain::EntityId,
    queue::Queue,
    settings::ConfigArgs,
    startup::{connect_postgres, connect_redis, keyspace, load_report_settings},
};

#[derive(Subcommand)]
pub(super) enum DeadLettersCommand {
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

pub(super) async fn run(command: DeadLettersCommand) -> anyhow::Result<()> {
    let config = match &command {
        DeadLettersCommand::List { config, .. } | DeadLettersCommand::Redrive { config, .. } => {
            config
        }
    };
    let settings = load_report_settings(config)?;
    let queue = Queue::new(
        connect_redis(&settings).await?.0,
        keyspace(&settings),
        settings.schedule.timing(),
    );
    let store = connect_postgres(&settings).await?;
    match command {
        DeadLettersCommand::List { limit, .. } => {
            let page = store.dead_letters().page(None, limit).await?;
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
                    usize::from(
                        dead_letters::redrive(&store, &queue, &entity, &audit::command_line())
                            .await?,
                    )
                }
                None => {
                    let by = audit::command_line();
                    dead_letters::redrive_all(&store, &queue, reason.as_deref(), &by).await?
                }
            };
            println!("redriven: {redriven}");
        }
    }
    Ok(())
}
