//! The Backtest page's sweep (`POST /console/backtest/sweep`): one literal of a rule in force
//! moved over a range of values, each value backtested (`crate::backtest::sweep`), shown as a
//! chart of the expected reversal rate and a table per value.

use axum::extract::State;
use maud::{Markup, html};
use serde::Deserialize;

use super::{
    ConsoleState, SignedInSession, charts, csrf,
    errors::PageError,
    forms::{Form, Window, window},
    layout::{self, Section},
};
use crate::{
    backtest::{
        self, BacktestError, Options,
        sweep::{MAX_VALUES, SweepError, SweepReport, numeric_literals},
    },
    request::fields::{self, Text},
};

/// The sweep's form: a rule in force (those with a number in their condition), which of its
/// numbers, the values (empty: ten around it) and the window.
pub fn form(signed_in: &SignedInSession, rules: &[(String, String)], window: &str) -> Markup {
    html! {
        section.card aria-labelledby="sweep-title" {
            h2 #sweep-title { "Sweep a threshold" }
            p.muted {
                "Moves one number of a rule's condition over a range of values and backtests each value in the same read: "
                "the actions, the reversals saved and the expected reversal rate at each, to pick a threshold from the moderators' verdicts."
            }
            form.stack.wide method="post" action="/console/backtest/sweep" {
                (csrf::field(&signed_in.session))
                div.field {
                    label for="sweep-rule" { "Rule (its condition)" }
                    select #sweep-rule name="rule" {
                        @for (name, when) in rules { option value=(name) { (name) ": " (when) } }
                    }
                }
                div.field {
                    label for="sweep-literal" { "Which number of the condition (0 is the first)" }
                    input #sweep-literal type="number" name="literal" min="0" value="0";
                }
                div.field {
                    label for="sweep-values" { "Values, comma-separated (empty: ten from half to one and a half times it)" }
                    input #sweep-values type="text" name="values";
                }
                div.field {
                    label for="sweep-window" { "Window (up to 90 days)" }
                    input #sweep-window type="text" name="window" value=(window) required;
                }
                div { button type="submit" { "Run sweep" } }
            }
        }
    }
}

/// The rules in force that a sweep can move: those with a number in their condition.
pub fn sweepable(rules: &crate::rules::RuleSet) -> Vec<(String, String)> {
    rules
        .rules()
        .iter()
        .filter(|r| !numeric_literals(&r.when).is_empty())
        .map(|r| (r.name.clone(), r.when.clone()))
        .collect()
}

/// The sweep form: a rule in force, which of its numbers (from 0), the values (none: ten
/// around it) and the window.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepForm {
    rule: Text,
    #[serde(default, deserialize_with = "literal")]
    literal: usize,
    #[serde(default, deserialize_with = "values")]
    values: Vec<f64>,
    #[serde(default, deserialize_with = "window")]
    window: Window,
}

fn literal<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    fields::parsed(d, |raw| {
        raw.parse::<usize>()
            .map_err(|_| "must be a whole number from 0".to_owned())
    })
}

fn values<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    fields::parsed(d, |raw| {
        raw.split(',')
            .map(|v| v.trim().parse::<f64>().ok().filter(|v| v.is_finite()))
            .collect::<Option<Vec<f64>>>()
            .filter(|v| v.len() <= MAX_VALUES)
            .ok_or_else(|| format!("must be up to {MAX_VALUES} numbers separated by commas"))
    })
}

/// `POST /console/backtest/sweep` with `csrf`, `rule`, `literal`, `values` and `window`.
pub async fn run(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    Form(SweepForm {
        rule,
        literal,
        values,
        window: Window {
            name: window_name,
            span: window,
        },
    }): Form<SweepForm>,
) -> Result<Markup, PageError> {
    let window_name = window_name.as_str();
    let in_force = state.app.rules.current();
    let report = backtest::sweep::sweep(
        &state.app.store,
        &state.app.backtests,
        backtest::sweep::Swept {
            rules: &in_force,
            rule: &rule,
            literal,
            values: &values,
        },
        &in_force,
        Options { window, sample: 0 },
    )
    .await
    .map_err(|error| match error {
        SweepError::NoRule(_) => PageError::bad_field("rule", "is not a rule in force"),
        SweepError::NoLiteral { count, .. } => PageError::bad_field(
            "literal",
            &format!("the condition has {count} numbers, counted from 0"),
        ),
        SweepError::Values => PageError::bad_field("values", "must be 1 to 50 numbers"),
        SweepError::Rules(error) => {
            PageError::bad_field("values", &format!("make the rule invalid: {error}"))
        }
        SweepError::Backtest(BacktestError::Store(error)) => PageError::from(error),
        SweepError::Backtest(error) => PageError::new(
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            "Busy",
            error.to_string(),
        ),
    })?;
    let body = html! {
        h1 { "Backtest" }
        (view(&report))
        (form(&signed_in, &sweepable(&in_force), window_name))
    };
    Ok(layout::page(&signed_in, Section::Quality, "Sweep", body))
}

fn view(report: &SweepReport) -> Markup {
    html! {
        section.card #sweep aria-labelledby="sweep-report-title" {
            h2 #sweep-report-title { "Sweep of " code { (report.rule) } }
            p.muted {
                "Number " (report.literal) " (" (report.literal_value) ") of " code { (report.when) } ", over "
                (report.evaluations) " evaluations, replayed in " (format!("{:.1}", report.elapsed_ms as f64 / 1000.0)) " s."
            }
            @for warning in &report.warnings { p.notice.error role="status" { (warning) } }
            (charts::sweep_reversal_rate(&report.rows))
            div.table-wrap {
                table.cards #sweep-table {
                    thead {
                        tr {
                            th.num scope="col" { "Value" } th.num scope="col" { "Actions" } th.num scope="col" { "Kept" }
                            th.num scope="col" { "Added" } th.num scope="col" { "Removed" } th.num scope="col" { "Reversals saved" }
                            th scope="col" { "Expected reversal rate" }
                        }
                    }
                    tbody {
                        @for row in &report.rows {
                            tr data-value=(row.value) {
                                td.num data-label="Value" {
                                    (row.value) @if row.value == report.literal_value { " " span.tag { "in force" } }
                                }
                                td.num data-label="Actions" { (row.actions) }
                                td.num data-label="Kept" { (row.kept) }
                                td.num data-label="Added" { (row.added) }
                                td.num data-label="Removed" { (row.removed) }
                                td.num data-label="Reversals saved" { (row.reversals_saved) }
                                td data-label="Expected reversal rate" { (layout::estimate(row.expected_reversal_rate)) }
                            }
                        }
                    }
                }
            }
        }
    }
}
