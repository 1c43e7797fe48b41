//! Backtest: a moderator edits a candidate rule set (the rules in force to start with, or
//! those with one shadow rule turned live, from the Quality page) and sees what it would have
//! done over a window's evaluations: actions added and removed per rule, the reversals it would
//! have saved, its expected reversal rate, the entities whose final status would differ, and a
//! sample of the added actions with their snapshots. The run reads only (`crate::backtest`);
//! it is a POST, with the console's CSRF token, as every form of the console is. Under the
//! report, an admin can publish the candidate (`rules.rs` publishes it).

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use axum::{extract::State, http::StatusCode};
use maud::{Markup, html};
use serde::Deserialize;

use super::{
    ConsoleState, SignedInSession, csrf,
    entity::signals_table,
    errors::PageError,
    forms::{Form, PageQuery, Window, window},
    layout::{self, Section},
};
use crate::{
    backtest::{self, BacktestError, DEFAULT_SAMPLE, MAX_SAMPLE, Options, Report, RuleReport},
    domain::SignalStats,
    request::fields,
    rules::RuleSet,
};

/// Windows offered as suggestions; any duration up to 90 days is taken (evaluation records
/// are kept for `retention`, 7 days by default: a longer window holds what is left).
const WINDOWS: [(&str, &str); 4] = [
    ("24h", "last 24 hours"),
    ("7days", "last 7 days"),
    ("30days", "last 30 days"),
    ("90days", "last 90 days"),
];

/// The `sample` field: the number of added actions (and of differing entities) to sample, 0
/// to [`MAX_SAMPLE`].
fn sample<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    fields::parsed(d, |raw| {
        raw.parse::<usize>()
            .ok()
            .filter(|n| *n <= MAX_SAMPLE)
            .ok_or_else(|| format!("must be a whole number from 0 to {MAX_SAMPLE}"))
    })
}

fn default_sample() -> usize {
    DEFAULT_SAMPLE
}

/// The page's query: a shadow rule to promote, the window and the sample.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageParams {
    #[serde(default, deserialize_with = "fields::optional_string")]
    promote: Option<String>,
    #[serde(default, deserialize_with = "window")]
    window: Window,
    #[serde(default = "default_sample", deserialize_with = "sample")]
    sample: usize,
}

/// The backtest form: the candidate rules, the window, the sample, and the shadow rule it
/// promotes (to show that rule's matches beside the report).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunForm {
    #[serde(deserialize_with = "fields::parsed_string")]
    rules: String,
    #[serde(default, deserialize_with = "window")]
    window: Window,
    #[serde(default = "default_sample", deserialize_with = "sample")]
    sample: usize,
    #[serde(default, deserialize_with = "fields::optional_string")]
    promote: Option<String>,
}

/// The candidate's form, filled with `rules`.
fn form(
    signed_in: &SignedInSession,
    rules: &str,
    window: &str,
    sample: usize,
    promote: Option<&str>,
) -> Markup {
    html! {
        section.card aria-labelledby="candidate-title" {
            h2 #candidate-title { "Candidate rules" }
            p.muted {
                "A rules file, as " code { "quiesce rules check" } " takes it. It starts as the rules in force "
                "(without their file's comments); change a threshold, add or remove a rule. The backtest replays it over "
                "every evaluation of the window, on the snapshot each one decided on, and only reads: nothing is applied."
            }
            form.stack.wide method="post" action="/console/backtest" {
                (csrf::field(&signed_in.session))
                @if let Some(promote) = promote { input type="hidden" name="promote" value=(promote); }
                div.field {
                    label for="backtest-rules" { "Rules (TOML)" }
                    textarea.code #backtest-rules name="rules" required spellcheck="false" { (rules) }
                }
                div.field {
                    label for="backtest-window" { "Window (up to 90 days: 24h, 7days, 36h...)" }
                    input #backtest-window type="text" name="window" value=(window) list="backtest-windows" required;
                    datalist #backtest-windows {
                        @for (name, label) in WINDOWS { option value=(name) { (label) } }
                    }
                }
                div.field {
                    label for="backtest-sample" { "Sample size (added actions and differing entities shown)" }
                    input #backtest-sample type="number" name="sample" min="0" max=(MAX_SAMPLE) value=(sample);
                }
                div { button type="submit" { "Run backtest" } }
            }
        }
    }
}

/// The publish form under a backtest's report: admins publish the candidate (its text and
/// window carried along), moderators are told who can.
pub fn publish_form(signed_in: &SignedInSession, rules: &str, window: &str) -> Markup {
    html! {
        section.card #publish aria-labelledby="publish-title" {
            h2 #publish-title { "Publish this candidate" }
            @if signed_in.user.is_admin() {
                p.muted {
                    "As the next rules version, active in every serve and worker process at once. The backtest is run "
                    "again over the same window as it is published, and its figures (without the samples) are kept with the version."
                }
                form.stack.wide method="post" action="/console/backtest/publish" {
                    (csrf::field(&signed_in.session))
                    input type="hidden" name="rules" value=(rules);
                    input type="hidden" name="window" value=(window);
                    div.field {
                        label for="publish-message" { "Why (kept with the version and in the audit trail)" }
                        input #publish-message type="text" name="message" required maxlength=(crate::active_rules::MAX_MESSAGE);
                    }
                    div { button type="submit" { "Publish" } }
                }
            } @else {
                p.muted #publish-admins { "An admin can publish this candidate as the next rules version." }
            }
        }
    }
}

/// `GET /console/backtest?promote=<shadow rule>&window=7days`: the form, with the rules in
/// force (and that shadow rule turned live).
pub async fn page(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PageQuery(query): PageQuery<PageParams>,
) -> Result<Markup, PageError> {
    let window = query.window.name.as_str();
    let sample = query.sample;
    let rules = state.app.rules.current();
    let promote = query.promote.as_deref();
    let candidate = match promote {
        Some(name) => rules.promoting(name).ok_or_else(|| {
            PageError::bad_query(PageError::bad_field(
                "promote",
                "names no shadow rule of the rules in force",
            ))
        })?,
        None => RuleSet::from_toml(&rules.to_toml()).expect("the rules in force load again"),
    };
    let body = html! {
        h1 { "Backtest" }
        @if let Some(name) = promote {
            p #promoting { "The rules in force, with the shadow rule " code { (name) } " turned live: what promoting it would have done." }
        }
        (form(&signed_in, &candidate.to_toml(), window, sample, promote))
        (super::sweep::form(&signed_in, &super::sweep::sweepable(&rules), window))
    };
    Ok(layout::page(&signed_in, Section::Quality, "Backtest", body))
}

/// `POST /console/backtest` with `csrf`, `rules`, `window` (and `promote`, to show that
/// shadow rule's matches beside the report): the report, and the form again.
pub async fn run(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    Form(run): Form<RunForm>,
) -> Result<Markup, PageError> {
    let text = run.rules.as_str();
    let window_name = run.window.name.as_str();
    let window = run.window.span;
    let sample = run.sample;
    let promote = run.promote.as_deref();
    let report = backtest_candidate(&state, text, window, sample).await?;
    let shadow_hits = match promote {
        Some(name) => Some((
            name,
            state
                .app
                .store
                .read()
                .rule_hits(window)
                .await?
                .get(name)
                .map_or(0, |hits| hits.shadow),
        )),
        None => None,
    };
    let body = html! {
        h1 { "Backtest" }
        (report_view(&report, shadow_hits))
        (publish_form(&signed_in, text, window_name))
        (form(&signed_in, text, window_name, sample, promote))
    };
    Ok(layout::page(&signed_in, Section::Quality, "Backtest", body))
}

/// The backtest of the posted candidate `text` over `window`, against the rules in force.
pub(super) async fn backtest_candidate(
    state: &ConsoleState,
    text: &str,
    window: Duration,
    sample: usize,
) -> Result<Report, PageError> {
    let candidate = RuleSet::from_toml(text)
        .map_err(|error| PageError::bad_field("rules", &format!("do not load: {error}")))?;
    backtest::run(
        &state.app.store,
        &state.app.backtests,
        Arc::new(candidate),
        &state.app.rules.current(),
        Options { window, sample },
    )
    .await
    .map_err(backtest_failed)
}

/// A backtest that could not run, as a page.
fn backtest_failed(error: BacktestError) -> PageError {
    match error {
        BacktestError::Store(error) => PageError::from(error),
        BacktestError::Busy => PageError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "Busy",
            "A backtest is already running in this process. Nothing was changed; try again when it is done.",
        ),
        BacktestError::Replay(_) => PageError::internal(error),
    }
}

fn rule_row(r: &RuleReport, overall: bool) -> Markup {
    html! {
        tr data-rule=(r.rule) {
            th scope="row" data-label="Rule" {
                @if overall { strong { "All rules" } } @else { code { (r.rule) } }
                @match r.candidate_mode.as_deref() {
                    Some("shadow") => { " " span.tag { "shadow" } }
                    None if !overall => { " " span.tag { "not in candidate" } }
                    _ => {}
                }
            }
            td.num data-label="In force" { (r.in_force_actions) }
            td.num data-label="Reversed" { (r.in_force_reversed) }
            td.num data-label="Backtest" { (r.backtest_actions) }
            td.num data-label="Kept" { (r.kept) }
            td.num.added data-label="Added" { (r.added) }
            td.num.removed data-label="Removed" { (r.removed) }
            td.num.saved data-label="Reversals saved" { (r.reversals_saved) }
            td.num.repeated data-label="Reversals repeated" { (r.reversals_repeated) }
            td.num.stood data-label="Repeats let stand" { (r.repeats_let_stand) }
            td data-label="Expected reversal rate" { (layout::estimate(r.expected_reversal_rate)) }
        }
    }
}

fn report_view(report: &Report, shadow_hits: Option<(&str, i64)>) -> Markup {
    let c = &report.coverage;
    html! {
        section.card #report aria-labelledby="report-title" {
            h2 #report-title { "Report" }
            p.muted {
                "Evaluations finished from " (layout::time(report.since)) " to " (layout::time(report.until))
                ", replayed in " (format!("{:.1}", report.elapsed_ms as f64 / 1000.0)) " s."
            }
            @for warning in &report.warnings { p.notice.error role="status" { (warning) } }
            ul.figures aria-label="Figures of the backtest" {
                li { span.muted { "Evaluations replayed" } strong #replayed { (c.replayed) " of " (c.evaluations) } }
                li { span.muted { "Entities" } strong { (c.entities) } }
                li { span.muted { "Actions added" } strong #added { (report.overall.added) } }
                li { span.muted { "Actions removed" } strong #removed { (report.overall.removed) } }
                li { span.muted { "Reversals saved" } strong #saved { (report.overall.reversals_saved) } }
                li { span.muted { "Final status differs" } strong #differs { (report.final_status_differs) } }
                @if let Some((name, hits)) = shadow_hits {
                    li { span.muted { "Shadow matches of " code { (name) } } strong #shadow-hits { (hits) } }
                }
            }
            p.muted {
                "Kept: taken by both on the same evaluation by the same rule. Reversals saved: removed actions moderators had reversed within 24h, "
                "which the candidate never takes on that entity before the reversal. Reversals repeated: added actions that take a reversed action "
                "again before its reversal (sooner or later than the rules in force did). Repeats let stand: added actions that take again an action "
                "moderators let stand (not reversed within 24h). "
                "The expected reversal rate is the reversed share of the kept and repeated actions (both kinds), the ones of the candidate a moderator "
                "has judged, with its 95% interval; it takes the other added actions to be reversed as often."
            }
            div.table-wrap {
                table.cards #backtest-rules-table {
                    thead {
                        tr {
                            th scope="col" { "Rule" }
                            th.num scope="col" { "In force" }
                            th.num scope="col" { "Reversed" }
                            th.num scope="col" { "Backtest" }
                            th.num scope="col" { "Kept" }
                            th.num scope="col" { "Added" }
                            th.num scope="col" { "Removed" }
                            th.num scope="col" { "Reversals saved" }
                            th.num scope="col" { "Reversals repeated" }
                            th.num scope="col" { "Repeats let stand" }
                            th scope="col" { "Expected reversal rate" }
                        }
                    }
                    tbody {
                        @for r in &report.rules { (rule_row(r, false)) }
                        (rule_row(&report.overall, true))
                    }
                }
            }
        }
        section.card aria-labelledby="final-title" {
            h2 #final-title { "Final status" }
            @if report.final_status_transitions.is_empty() {
                p.muted #no-differences { "Every entity would end the window in the status it ended in." }
            } @else {
                div.table-wrap {
                    table #transitions {
                        thead { tr { th { "In force" } th { "Backtest" } th.num { "Entities" } } }
                        tbody {
                            @for t in &report.final_status_transitions {
                                tr { td { (layout::status(t.in_force.as_str())) } td { (layout::status(t.backtest.as_str())) } td.num { (t.entities) } }
                            }
                        }
                    }
                }
                p { "For example: "
                    @for (i, d) in report.final_status_sample.iter().enumerate() {
                        @if i > 0 { ", " }
                        (layout::entity_link(&d.entity))
                    }
                }
            }
        }
        section.card aria-labelledby="added-title" {
            h2 #added-title { "Added actions to judge" }
            @if report.added_sample.is_empty() {
                p.muted { "The candidate adds no action." }
            } @else {
                p.muted { (report.added_sample.len()) " of " (report.overall.added) ", sampled at random, each with the signals it would have acted on." }
                @for (i, a) in report.added_sample.iter().enumerate() {
                    article.added {
                        h3 {
                            (a.action.as_str()) " by " code { (a.rule) } " on " (layout::entity_link(&a.entity))
                        }
                        p {
                            (layout::time(a.evaluated_at)) ", status " (layout::status(a.status_before.as_str()))
                            ": " (a.reason) ". In force: " (a.in_force_took.as_deref().unwrap_or("nothing")) "."
                        }
                        @let signals: BTreeMap<String, SignalStats> = serde_json::from_value(a.snapshot["signals"].clone()).unwrap_or_default();
                        (signals_table(&format!("added-{i}"), &signals))
                    }
                }
            }
        }
    }
}
