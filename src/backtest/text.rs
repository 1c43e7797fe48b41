//! The report as `quiesce rules backtest` prints it: the window and coverage, one line per rule
//! and overall, the final statuses that differ, a sample of the added actions with their
//! signals, and the warnings.

use std::fmt::Write;

use super::report::{Estimate, Report, RuleReport};

fn percent(rate: Option<f64>) -> String {
    rate.map_or_else(|| "-".to_owned(), |r| format!("{:.1}%", 100.0 * r))
}

fn estimate(e: Option<Estimate>) -> String {
    e.map_or_else(
        || "- (no action of both)".to_owned(),
        |e| {
            format!(
                "{:.1}% [{:.1}%, {:.1}%] of {}",
                100.0 * e.rate,
                100.0 * e.low,
                100.0 * e.high,
                e.basis
            )
        },
    )
}

fn row(r: &RuleReport) -> Vec<String> {
    let name = match r.candidate_mode.as_deref() {
        _ if r.rule == "(all rules)" => r.rule.clone(),
        Some("shadow") => format!("{} (shadow)", r.rule),
        Some(_) => r.rule.clone(),
        None => format!("{} (not in candidate)", r.rule),
    };
    vec![
        name,
        r.in_force_actions.to_string(),
        format!(
            "{} ({})",
            r.in_force_reversed,
            percent(r.in_force_reversal_rate)
        ),
        r.backtest_actions.to_string(),
        r.kept.to_string(),
        r.added.to_string(),
        r.removed.to_string(),
        r.reversals_saved.to_string(),
        r.reversals_repeated.to_string(),
        r.repeats_let_stand.to_string(),
        estimate(r.expected_reversal_rate),
    ]
}

/// The report as text; `label` names the candidate (its file).
pub fn render_text(report: &Report, label: &str) -> String {
    let mut out = String::new();
    let time = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    let c = &report.coverage;
    let _ = writeln!(
        out,
        "backtest of {label} over the evaluations finished from {} to {}",
        time(report.since),
        time(report.until)
    );
    let _ = writeln!(
        out,
        "evaluations: {} of {} entities ({} replayed, {} skipped without a snapshot), {} pages, {:.1} s",
        c.evaluations,
        c.entities,
        c.replayed,
        c.skipped_without_snapshot,
        c.pages,
        report.elapsed_ms as f64 / 1000.0
    );
    out.push('\n');
    let header: Vec<String> = [
        "rule",
        "in force",
        "reversed",
        "backtest",
        "kept",
        "added",
        "removed",
        "saved",
        "repeated",
        "let stand",
        "expected reversal rate [95% CI] of kept and repeated",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut rows = vec![header];
    rows.extend(report.rules.iter().map(row));
    rows.push(row(&report.overall));
    table(&mut out, &rows);
    for l in &report.labels {
        let _ = writeln!(
            out,
            "label {}: {} entities in force, {} in the backtest ({} kept, {} added, {} removed)",
            l.label, l.in_force, l.backtest, l.kept, l.added, l.removed
        );
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "final status would differ for {} entities",
        report.final_status_differs
    );
    for t in &report.final_status_transitions {
        let _ = writeln!(
            out,
            "  {} in force, {} in the backtest: {}",
            t.in_force.as_str(),
            t.backtest.as_str(),
            t.entities
        );
    }
    if !report.final_status_sample.is_empty() {
        let sample: Vec<String> = report
            .final_status_sample
            .iter()
            .map(|d| {
                format!(
                    "{} ({} -> {})",
                    d.entity,
                    d.in_force.as_str(),
                    d.backtest.as_str()
                )
            })
            .collect();
        let _ = writeln!(out, "  for example {}", sample.join(", "));
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "added actions: {} ({} sampled, with the signals they would have acted on)",
        report.overall.added,
        report.added_sample.len()
    );
    for a in &report.added_sample {
        let signals = a.snapshot["signals"]
            .as_object()
            .map(|signals| {
                signals
                    .iter()
                    .map(|(name, s)| {
                        format!(
                            "{name}={} (weight {})",
                            s["count"],
                            s["weight"]
                                .as_f64()
                                .map_or_else(String::new, |w| format!("{w:.1}"))
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {} evaluation {} at {}: {} by {} on {} ({}); in force: {}; signals: {}",
            a.entity,
            a.evaluation,
            time(a.evaluated_at),
            a.action.as_str(),
            a.rule,
            a.status_before.as_str(),
            a.reason,
            a.in_force_took.as_deref().unwrap_or("nothing"),
            signals
        );
    }
    if !report.warnings.is_empty() {
        out.push('\n');
        for w in &report.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
    }
    out
}

/// A sweep as the CLI prints it: a line per value.
pub fn render_sweep(report: &super::sweep::SweepReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "sweep of {} (literal {}: {}) over {} evaluations, {:.1} s",
        report.rule,
        report.literal,
        report.literal_value,
        report.evaluations,
        report.elapsed_ms as f64 / 1000.0
    );
    let _ = writeln!(out, "when: {}", report.when);
    out.push('\n');
    let mut rows = vec![
        [
            "value",
            "actions",
            "kept",
            "added",
            "removed",
            "saved",
            "repeated",
            "let stand",
            "expected reversal rate [95% CI] of kept and repeated",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for r in &report.rows {
        rows.push(vec![
            r.value.to_string(),
            r.actions.to_string(),
            r.kept.to_string(),
            r.added.to_string(),
            r.removed.to_string(),
            r.reversals_saved.to_string(),
            r.reversals_repeated.to_string(),
            r.repeats_let_stand.to_string(),
            estimate(r.expected_reversal_rate),
        ]);
    }
    table(&mut out, &rows);
    for w in &report.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

/// Rows as left-aligned columns two spaces apart.
fn table(out: &mut String, rows: &[Vec<String>]) {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
}
