//! `quiesce audit`: the audit trail of a window, newest first, as a table or JSON lines.

use clap::Args;

use crate::{
    audit::parse_since,
    domain::AuditAction,
    settings::ConfigArgs,
    startup::{connect_postgres, load_report_settings},
    store::AuditFilter,
};

/// Entries read per statement.
const PAGE: i64 = 1000;

/// How the table writes a time.
const TIME: &str = "%Y-%m-%d %H:%M:%S UTC";

/// The table's columns, tab-separated as its rows.
const HEADER: [&str; 6] = ["at", "action", "subject", "actor", "credential", "address"];

#[derive(Args)]
pub struct AuditArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// How far back: a duration (7d, 24h) or an RFC 3339 time.
    #[arg(long, default_value = "7d", value_parser = |raw: &str| parse_since(raw, chrono::Utc::now()))]
    since: chrono::DateTime<chrono::Utc>,
    /// Only this actor's decisions (the name recorded).
    #[arg(long)]
    actor: Option<String>,
    /// Only this kind of decision: action.reverse, entity.override, timer.end, dead_letter.redrive,
    /// rules.reload, shards.move, console.sign_in, console.sign_out.
    #[arg(long, value_parser = |raw: &str| AuditAction::parse(raw).ok_or_else(|| "not a kind of decision the audit trail records".to_owned()))]
    action: Option<AuditAction>,
    /// Only decisions on this subject (an entity, action:<id>, rules, shards, dead_letters).
    #[arg(long)]
    subject: Option<String>,
    /// At most this many entries.
    #[arg(long, default_value_t = 10_000)]
    limit: usize,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

pub(super) async fn run(args: AuditArgs) -> anyhow::Result<()> {
    let settings = load_report_settings(&args.config)?;
    let store = connect_postgres(&settings).await?;
    let mut filter = AuditFilter {
        actor: args.actor,
        action: args.action.map(|a| a.as_str().to_owned()),
        subject: args.subject,
        since: Some(args.since),
        before: None,
        limit: PAGE,
    };
    if !args.json {
        println!("{}", HEADER.join("\t"));
    }
    let mut printed = 0;
    'pages: loop {
        let page = store.audit().audit_page(&filter).await?;
        for entry in &page {
            if printed == args.limit {
                break 'pages;
            }
            if args.json {
                println!("{}", serde_json::to_string(entry)?);
            } else {
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}",
                    entry.at.format(TIME),
                    entry.action,
                    entry.subject,
                    entry.actor,
                    entry.credential.as_deref().unwrap_or("-"),
                    entry.address.as_deref().unwrap_or("-"),
                );
            }
            printed += 1;
        }
        match page.last() {
            Some(last) if page.len() as i64 == PAGE => filter.before = Some(last.id),
            _ => break,
        }
    }
    // JSON lines stay JSON lines: nothing at all is an empty list.
    if printed == 0 && !args.json && args.limit > 0 {
        let filtered =
            filter.actor.is_some() || filter.action.is_some() || filter.subject.is_some();
        println!(
            "no entries since {}{}",
            args.since.format(TIME),
            if filtered {
                " that match the filters"
            } else {
                ""
            }
        );
    }
    Ok(())
}
