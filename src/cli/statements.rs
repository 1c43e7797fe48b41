//! `quiesce statements export`: the statements of reasons issued since a time, as JSON lines
//! (for the platform's own records, or a submission by other means than the API).

use chrono::{DateTime, Utc};
use clap::Subcommand;

use crate::{
    settings::ConfigArgs,
    startup::{connect_postgres, load_report_settings},
    store::StatementFilter,
};

/// Statements read per query.
const PAGE: i64 = 1000;

#[derive(Subcommand)]
pub(super) enum StatementsCommand {
    /// Print every statement issued at or after --since, oldest first: one JSON object per
    /// line (id, puid, entity, action_id, rule, decided_by, previous_status, status,
    /// created_at, statement), nothing when there is none.
    Export {
        #[command(flatten)]
        config: ConfigArgs,
        /// RFC 3339 time, e.g. 2026-12-01T00:00:00Z.
        #[arg(long, value_parser = parse_since)]
        since: DateTime<Utc>,
        /// Only this entity's statements.
        #[arg(long)]
        entity: Option<String>,
        /// Only this rule's statements.
        #[arg(long)]
        rule: Option<String>,
    },
}

fn parse_since(raw: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(raw)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| "expected an RFC 3339 time such as 2026-12-01T00:00:00Z".to_owned())
}

pub(super) async fn run(command: StatementsCommand) -> anyhow::Result<()> {
    let StatementsCommand::Export {
        config,
        since,
        entity,
        rule,
    } = command;
    let settings = load_report_settings(&config)?;
    let store = connect_postgres(&settings).await?;
    let mut filter = StatementFilter {
        entity,
        rule,
        decided_by: None,
        since: Some(since),
        after: None,
        limit: PAGE,
    };
    loop {
        let page = store.statements().list(&filter).await?;
        for statement in &page {
            println!("{}", serde_json::to_string(statement)?);
        }
        match page.last() {
            Some(last) if page.len() as i64 == PAGE => filter.after = Some(last.id),
            _ => return Ok(()),
        }
    }
}
