//! Quality: the share of automated actions moderators reversed within 24h, over a chosen
//! window, per day and per rule (the same counts as `GET /v1/stats/reversal-rate`); live, shadow
//! and exempted matches per rule (what a moderator weighs before promoting a shadow rule, and
//! how often an `unless` kept a live rule from acting), each shadow rule linked to its backtest
//! (the rules in force with it turned live); canaries' two groups (`console/canaries.rs`); and
//! the rules in force.

use std::{collections::BTreeMap, time::Duration};

use axum::extract::State;
use chrono::Utc;
use maud::{Markup, html};
use serde::Deserialize;

use super::{
    ConsoleState, SignedInSession, canaries, charts,
    errors::PageError,
    forms::PageQuery,
    layout::{self, Section, rate},
};
use crate::{
    request::fields,
    store::{ReversalCounts, RuleHits},
};

/// The windows a moderator may choose.
const WINDOWS: [(&str, &str); 4] = [
    ("24h", "last 24 hours"),
    ("7days", "last 7 days"),
    ("30days", "last 30 days"),
    ("90days", "last 90 days"),
];

/// One row of the per-rule table.
#[derive(Default)]
struct RuleRow {
    in_force: Option<(String, bool)>,
    counts: ReversalCounts,
    hits: RuleHits,
}

/// The query of a shadow rule's backtest link.
fn backtest_query(rule: &str, window: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("promote", rule)
        .append_pair("window", window)
        .finish()
}

/// The page's query: the window, one of [`WINDOWS`] (`7days` when none is given).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualityQuery {
    #[serde(default, deserialize_with = "listed_window")]
    window: Option<(&'static str, &'static str)>,
}

fn listed_window<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<(&'static str, &'static str)>, D::Error> {
    fields::param(d, |raw| {
        WINDOWS
            .iter()
            .find(|(name, _)| *name == raw)
            .copied()
            .ok_or_else(|| "must be 24h, 7days, 30days or 90days".to_owned())
    })
}

/// `GET /console/quality?window=7days`.
pub async fn page(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PageQuery(QualityQuery { window }): PageQuery<QualityQuery>,
) -> Result<Markup, PageError> {
    let (window_name, window_label) = window.unwrap_or(WINDOWS[1]);
    let window: Duration = humantime::parse_duration(window_name).expect("a listed window");
    let store = &state.app.store;
    let rules = state.app.rules.current();
    let ((total, by_rule), days, hits, canaries, queue) = tokio::try_join!(
        store.read().reversal_counts(window),
        store.console().daily_reversals(window),
        store.read().rule_hits(window),
        canaries::canary_rows(store, &rules, window),
        store.review().review_figures(window),
    )?;
    let reversals: BTreeMap<String, ReversalCounts> = by_rule.iter().cloned().collect();
    let mut rows: BTreeMap<String, RuleRow> = BTreeMap::new();
    for rule in rules.rules() {
        rows.entry(rule.name.clone()).or_default().in_force = Some((rule.effects(), rule.shadow));
    }
    for (rule, counts) in by_rule {
        rows.entry(rule).or_default().counts = counts;
    }
    for (rule, rule_hits) in &hits {
        rows.entry(rule.clone()).or_default().hits = *rule_hits;
    }
    let now = Utc::now();
    let first = now - chrono::Duration::from_std(window).unwrap_or_default();
    let body = html! {
        h1 { "Quality" }
        p { a #backtest-link href="/console/backtest" { "Backtest a rules file" } " against the evaluations of a window before you trust it." }
        form.filters.card method="get" action="/console/quality" {
            div.field {
                label for="window" { "Window" }
                select #window name="window" {
                    @for (name, label) in WINDOWS { option value=(name) selected[name == window_name] { (label) } }
                }
            }
            div { button.secondary type="submit" { "Show" } }
        }
        ul.figures aria-label={ "Figures over the " (window_label) } {
            li { span.muted { "Reversed within 24h" } strong #reversal-rate { (rate(total.reversed, total.actions)) } }
            li { span.muted { "Of them, by an upheld appeal" } strong #reversed-by-appeal { (total.reversed_by_appeal) } }
            li { span.muted { "Automated actions" } strong #action-count { (total.actions) } }
        }
        (review_queue_section(&queue, window, window_label))
        section.card aria-labelledby="per-day-title" {
            h2 #per-day-title { "Reversal rate per day" }
            (charts::reversal_rate_per_day(&days, first, now))
            @if !days.is_empty() {
                details {
                    summary { "The figures" }
                    div.table-wrap {
                        table #per-day {
                            thead { tr { th { "Day (UTC)" } th { "Rule" } th.num { "Actions" } th.num { "Reversed" } } }
                            tbody {
                                @for d in &days {
                                    tr { td { (d.day.format("%Y-%m-%d")) } td { code { (d.rule) } } td.num { (d.actions) } td.num { (d.reversed) } }
                                }
                            }
                        }
                    }
                }
            }
        }
        section.card aria-labelledby="per-rule-title" {
            h2 #per-rule-title { "Per rule" }
            p.muted {
                "Live matches are evaluations where the rule held; shadow matches are what a shadow rule would have done; "
                "exempted are evaluations where a live rule held but its exemption (unless) held too, so it took no effect. "
                "Before promoting a shadow rule, compare its matches with the live rules' and their reversal rate, "
                "and backtest it live: what it would have done over the window's evaluations, and how many of the actions it adds or removes moderators reversed."
            }
            div.table-wrap {
                table.cards #per-rule {
                    thead {
                        tr {
                            th scope="col" { "Rule" }
                            th scope="col" { "Mode" }
                            th.num scope="col" { "Live matches" }
                            th.num scope="col" { "Shadow matches" }
                            th.num scope="col" { "Exempted" }
                            th.num scope="col" { "Actions" }
                            th scope="col" { "Reversed within 24h" }
                            th.num scope="col" { "By appeal" }
                        }
                    }
                    tbody {
                        @for (rule, row) in &rows {
                            tr data-rule=(rule) {
                                th scope="row" data-label="Rule" { code { (rule) } }
                                td data-label="Mode" {
                                    @match &row.in_force {
                                        Some((action, true)) => {
                                            "shadow (" (action) ") "
                                            a.backtest href={ "/console/backtest?" (backtest_query(rule, window_name)) } { "backtest it live" }
                                        }
                                        Some((action, false)) => { "live (" (action) ")" }
                                        None => span.muted { "not in force" },
                                    }
                                }
                                td.num.live data-label="Live matches" { (row.hits.live) }
                                td.num.shadow data-label="Shadow matches" { (row.hits.shadow) }
                                td.num.exempted data-label="Exempted" { (row.hits.exempted) }
                                td.num data-label="Actions" { (row.counts.actions) }
                                td.rate data-label="Reversed" { (rate(row.counts.reversed, row.counts.actions)) }
                                td.num.appealed data-label="By appeal" { (row.counts.reversed_by_appeal) }
                            }
                        }
                    }
                }
            }
        }
        (canaries::section(&canaries, &hits, &reversals))
                section.card aria-labelledby="rules-title" {
            h2 #rules-title { "Rules in force" }
            p.muted #rules-version {
                (rules.rules().len()) " rules"
                @if let Some(version) = rules.version() { ", rules version " (version) }
                " (every process runs the active version). "
                a href="/console/rules" { "All rules versions" }
            }
            div.table-wrap {
                table.cards #rules {
                    thead { tr { th scope="col" { "Rule" } th scope="col" { "Kinds" } th scope="col" { "When" } th scope="col" { "Action" } } }
                    tbody {
                        @for rule in rules.rules() {
                            tr {
                                th scope="row" data-label="Rule" {
                                    code { (rule.name) }
                                    @if rule.shadow { " " span.tag { "shadow" } }
                                }
                                td data-label="Kinds" {
                                    @if rule.kinds.is_empty() { "every kind" } @else { (rule.kinds.join(", ")) }
                                }
                                td data-label="When" { code { (rule.when) } }
                                td data-label="Action" { (rule.effects()) }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(layout::page(&signed_in, Section::Quality, "Quality", body))
}

/// The review queue's figures: what waits now, and the window's decisions.
fn review_queue_section(
    queue: &crate::store::ReviewFigures,
    window: Duration,
    window_label: &str,
) -> Markup {
    let hours = window.as_secs_f64() / 3600.0;
    let oldest = queue.oldest_flagged_at.map(|at| {
        humantime::format_duration(Duration::from_secs(
            (Utc::now() - at).num_seconds().max(0) as u64
        ))
        .to_string()
    });
    html! {
        section.card aria-labelledby="queue-title" {
            h2 #queue-title { "Review queue" }
            ul.figures {
                li { span.muted { "Waiting now" } strong #queue-waiting { (queue.waiting) } }
                li { span.muted { "Oldest wait" } strong #queue-oldest { (oldest.as_deref().unwrap_or("none waits")) } }
                li {
                    span.muted { "Decisions agreeing with automation (hide), " (window_label) }
                    strong #queue-agreement { (rate(queue.agreed, queue.decided)) }
                }
            }
            @if queue.per_moderator.is_empty() {
                p.muted #queue-no-decisions { "No decision in the " (window_label) "." }
            } @else {
                div.table-wrap {
                    table #queue-moderators {
                        caption { "Decisions per moderator, " (window_label) }
                        thead { tr { th scope="col" { "Moderator" } th scope="col" { "Decisions" } th scope="col" { "Per hour" } } }
                        tbody {
                            @for (moderator, decided) in &queue.per_moderator {
                                tr {
                                    td data-label="Moderator" { (moderator) }
                                    td data-label="Decisions" { (decided) }
                                    td data-label="Per hour" { (format!("{:.2}", *decided as f64 / hours)) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
