//! A sweep: one rule's condition with one of its numeric literals moved over a range of
//! values, each value backtested (all of them in one read of the window, `run_many`), so that
//! moderators pick a threshold from the reversals: per value, the rule's actions, the
//! reversals it saves, the actions it adds (and the judged ones among them: repeats of an action
//! moderators reversed or let stand) and its expected reversal rate.

use std::sync::Arc;

use serde::Serialize;

use super::{BacktestError, BacktestSemaphore, Estimate, Options, Report, run_many};
use crate::{
    rules::{RuleSet, RulesError},
    store::Store,
};

/// Values a sweep tries at most.
pub const MAX_VALUES: usize = 50;
/// Values tried by default: from half the literal to one and a half times it.
pub const DEFAULT_VALUES: usize = 10;

/// A number written in a condition: where it is and what it says.
#[derive(Debug, Clone, PartialEq)]
pub struct Literal {
    pub start: usize,
    pub end: usize,
    pub value: f64,
    /// Written without a decimal point: CEL reads it as an int, so it is swept over ints.
    pub integer: bool,
}

/// The numeric literals of a condition, in order, outside its string literals.
pub fn numeric_literals(when: &str) -> Vec<Literal> {
    let bytes = when.as_bytes();
    let mut literals = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'"' || c == b'\'' {
            // Skip the string, with its escapes.
            i += 1;
            while i < bytes.len() && bytes[i] != c {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        let after_name = i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if c.is_ascii_digit() && !after_name {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let integer =
                !(i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit());
            if !integer {
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if let Ok(value) = when[start..i].parse::<f64>() {
                literals.push(Literal {
                    start,
                    end: i,
                    value,
                    integer,
                });
            }
            continue;
        }
        i += 1;
    }
    literals
}

/// `when` with `literal` written as `value` (an int for an int literal).
pub fn with_value(when: &str, literal: &Literal, value: f64) -> String {
    let written = if literal.integer {
        format!("{}", value.round() as i64)
    } else {
        let text = format!("{value:.6}");
        let text = text.trim_end_matches('0');
        if text.ends_with('.') {
            format!("{text}0")
        } else {
            text.to_owned()
        }
    };
    format!(
        "{}{written}{}",
        &when[..literal.start],
        &when[literal.end..]
    )
}

/// `count` values evenly spaced from half the literal to one and a half times it (ints
/// rounded, each value once), and the literal's own when it is not one of them.
pub fn default_values(literal: &Literal, count: usize) -> Vec<f64> {
    let (low, high) = (literal.value * 0.5, literal.value * 1.5);
    let mut values: Vec<f64> = (0..count.max(2))
        .map(|i| low + (high - low) * i as f64 / (count.max(2) - 1) as f64)
        .map(|v| {
            if literal.integer {
                v.round()
            } else {
                (v * 1e6).round() / 1e6
            }
        })
        .collect();
    values.push(literal.value);
    values.sort_by(f64::total_cmp);
    values.dedup();
    values
}

/// What one value would have done.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct SweepRow {
    pub value: f64,
    /// The rule's condition with this value.
    pub when: String,
    /// The rule's actions, and how they compare with those of the rules in force.
    pub actions: u64,
    pub kept: u64,
    pub added: u64,
    pub removed: u64,
    pub reversals_saved: u64,
    pub reversals_repeated: u64,
    pub repeats_let_stand: u64,
    pub expected_reversal_rate: Option<Estimate>,
    /// The whole set's actions (all rules) added and removed.
    pub overall_added: u64,
    pub overall_removed: u64,
}

/// The sweep's report.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct SweepReport {
    pub rule: String,
    /// The condition as it is, and the literal moved (0-based, in the order written).
    pub when: String,
    pub literal: usize,
    pub literal_value: f64,
    pub rows: Vec<SweepRow>,
    pub evaluations: u64,
    /// The values' backtest warnings: one that every value gave, as it is; one that only some
    /// gave, once per value, as `at value V: ...` (its figures are that value's).
    pub warnings: Vec<String>,
    pub elapsed_ms: u64,
}

/// Why a sweep cannot run as asked.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("rule {0:?} is not in the rules")]
    NoRule(String),
    #[error(
        "the condition of {rule:?} has {count} numeric literals; literal {literal} is not one of them"
    )]
    NoLiteral {
        rule: String,
        count: usize,
        literal: usize,
    },
    #[error("between 1 and {MAX_VALUES} values")]
    Values,
    #[error(transparent)]
    Rules(#[from] RulesError),
    #[error(transparent)]
    Backtest(#[from] BacktestError),
}

/// What a sweep varies: the number `literal` (counted from 0) of rule `rule` of `rules`, over
/// `values` (the default range when empty).
#[derive(Debug, Clone, Copy)]
pub struct Swept<'a> {
    pub rules: &'a RuleSet,
    pub rule: &'a str,
    pub literal: usize,
    pub values: &'a [f64],
}

/// Sweeps what `swept` names, every value backtested over the window in one read against the
/// rules in force.
pub async fn sweep(
    store: &Store,
    semaphore: &BacktestSemaphore,
    swept: Swept<'_>,
    in_force: &RuleSet,
    options: Options,
) -> Result<SweepReport, SweepError> {
    let Swept {
        rules,
        rule,
        literal,
        values,
    } = swept;
    let when = rules
        .rules()
        .iter()
        .find(|r| r.name == rule)
        .map(|r| r.when.clone())
        .ok_or_else(|| SweepError::NoRule(rule.to_owned()))?;
    let literals = numeric_literals(&when);
    let chosen = literals
        .get(literal)
        .cloned()
        .ok_or(SweepError::NoLiteral {
            rule: rule.to_owned(),
            count: literals.len(),
            literal,
        })?;
    let values = if values.is_empty() {
        default_values(&chosen, DEFAULT_VALUES)
    } else {
        values.to_vec()
    };
    if values.is_empty() || values.len() > MAX_VALUES {
        return Err(SweepError::Values);
    }
    let mut conditions = Vec::with_capacity(values.len());
    let mut candidates = Vec::with_capacity(values.len());
    for value in &values {
        let condition = with_value(&when, &chosen, *value);
        candidates.push(Arc::new(rules.with_condition(rule, &condition)?));
        conditions.push(condition);
    }
    let reports = run_many(store, semaphore, candidates, in_force, options).await?;
    let rows = values
        .iter()
        .zip(conditions)
        .zip(&reports)
        .map(|((value, when), report)| row(*value, when, rule, report))
        .collect();
    let warnings = by_value(
        &values,
        &reports
            .iter()
            .map(|r| r.warnings.clone())
            .collect::<Vec<_>>(),
    );
    let first = reports.first();
    Ok(SweepReport {
        rule: rule.to_owned(),
        when,
        literal,
        literal_value: chosen.value,
        rows,
        evaluations: first.map_or(0, |r| r.coverage.evaluations),
        warnings,
        elapsed_ms: first.map_or(0, |r| r.elapsed_ms),
    })
}

/// The warnings of the values' backtests: one that every value gave, once as it is; each
/// other with the value whose backtest gave it (`at value 4: ...`: the figures it names are
/// that value's), in the order first given.
fn by_value(values: &[f64], warnings: &[Vec<String>]) -> Vec<String> {
    let mut merged: Vec<String> = Vec::new();
    for (value, given) in values.iter().zip(warnings) {
        for warning in given {
            let line = if warnings.iter().all(|w| w.contains(warning)) {
                warning.clone()
            } else {
                format!("at value {value}: {warning}")
            };
            if !merged.contains(&line) {
                merged.push(line);
            }
        }
    }
    merged
}

fn row(value: f64, when: String, rule: &str, report: &Report) -> SweepRow {
    let line = report.rules.iter().find(|r| r.rule == rule);
    let figure = |f: fn(&super::RuleReport) -> u64| line.map_or(0, f);
    SweepRow {
        value,
        when,
        actions: figure(|r| r.backtest_actions),
        kept: figure(|r| r.kept),
        added: figure(|r| r.added),
        removed: figure(|r| r.removed),
        reversals_saved: figure(|r| r.reversals_saved),
        reversals_repeated: figure(|r| r.reversals_repeated),
        repeats_let_stand: figure(|r| r.repeats_let_stand),
        expected_reversal_rate: line.and_then(|r| r.expected_reversal_rate),
        overall_added: report.overall.added,
        overall_removed: report.overall.removed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_numbers_of_a_condition_are_found_outside_its_strings() {
        let when = r#"weight("flag") >= 8.3 && share("flag", "upvote") >= 0.25 || count_in("x1", "5m") > 12"#;
        let found: Vec<(f64, bool)> = numeric_literals(when)
            .iter()
            .map(|l| (l.value, l.integer))
            .collect();
        assert_eq!(found, [(8.3, false), (0.25, false), (12.0, true)]);
        let literals = numeric_literals(when);
        assert_eq!(
            with_value(when, &literals[0], 12.0),
            when.replace("8.3", "12.0")
        );
        assert_eq!(
            with_value(when, &literals[2], 7.6),
            when.replace("> 12", "> 8")
        );
    }

    #[test]
    fn a_warning_of_some_values_only_names_the_value() {
        let common = "3 evaluations kept no snapshot".to_owned();
        let at = |added: u32| {
            format!("r reads auto.hide: ... {added} added and {added} removed actions")
        };
        let warnings = by_value(
            &[4.0, 8.3, 12.0],
            &[
                vec![common.clone(), at(18)],
                vec![common.clone()],
                vec![common.clone(), at(5)],
            ],
        );
        assert_eq!(
            warnings,
            [
                common,
                format!("at value 4: {}", at(18)),
                format!("at value 12: {}", at(5)),
            ]
        );
    }

    #[test]
    fn the_default_values_hold_the_literal_and_ints_stay_ints() {
        let literal = numeric_literals("count(\"report\") >= 5")[0].clone();
        let values = default_values(&literal, 10);
        assert!(values.contains(&5.0), "{values:?}");
        assert!(values.iter().all(|v| v.fract() == 0.0), "{values:?}");
        assert_eq!(values.first(), Some(&3.0));
        assert_eq!(values.last(), Some(&8.0));
    }
}
