//! `quiesce deliveries`: list the webhook deliveries given up, or deliver them again.

use clap::Subcommand;

use crate::{
    settings::ConfigArgs,
    startup::{connect_postgres, load_report_settings},
};

#[derive(Subcommand)]
pub(super) enum DeliveriesCommand {
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

pub(super) async fn run(command: DeliveriesCommand) -> anyhow::Result<()> {
    let config = match &command {
        DeliveriesCommand::Failed { config, .. } | DeliveriesCommand::Redrive { config, .. } => {
            config
        }
    };
    let settings = load_report_settings(config)?;
    let store = connect_postgres(&settings).await?;
    match command {
        DeliveriesCommand::Failed { limit, .. } => {
            let failed = store.outbox().failed_deliveries(limit).await?;
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
            println!(
                "redriven: {}",
                store.outbox().redrive_deliveries(ids).await?
            );
        }
    }
    Ok(())
}
