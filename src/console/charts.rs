//! The console's charts, drawn by plotters' SVG backend (which escapes every label it writes)
//! and inlined in the page. Each chart comes with its legend and its figures as a table, so
//! what it shows can be read without seeing it.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, DurationRound, Utc};
use maud::{Markup, PreEscaped, html};
use plotters::prelude::*;

use crate::{
    backtest::{Estimate, sweep::SweepRow},
    store::{DailyReversals, MinuteCount},
};

const WIDTH: u32 = 760;
const HEIGHT: u32 = 280;
const FONT: &str = "sans-serif";

/// The series colours; the stylesheet's `.swatch.c0` ... `.c7` are the same.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0x1d, 0x4e, 0xd8),
    RGBColor(0xdc, 0x26, 0x26),
    RGBColor(0x16, 0xa3, 0x4a),
    RGBColor(0x93, 0x33, 0xea),
    RGBColor(0xea, 0x58, 0x0c),
    RGBColor(0x08, 0x91, 0xb2),
    RGBColor(0x4b, 0x55, 0x63),
    RGBColor(0xbe, 0x18, 0x5d),
];

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// One line of a chart: its name and its points (x, y).
struct Line {
    name: String,
    points: Vec<(i64, f64)>,
}

/// Draws lines over x in `0..=x_max`, y in `0..=y_max`, as SVG.
fn draw(
    lines: &[Line],
    x_max: i64,
    y_max: f64,
    x_label: &dyn Fn(&i64) -> String,
    y_label: &dyn Fn(&f64) -> String,
    dots: bool,
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(28)
            .y_label_area_size(48)
            .build_cartesian_2d(0i64..x_max.max(1), 0f64..y_max.max(1.0))
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_labels(8)
            .y_labels(5)
            .x_label_formatter(x_label)
            .y_label_formatter(y_label)
            .label_style((FONT, 13))
            .light_line_style(RGBColor(0xee, 0xf1, 0xf4))
            .bold_line_style(RGBColor(0xd9, 0xe2, 0xec))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, line) in lines.iter().enumerate() {
            let style = colour(i).stroke_width(2);
            chart
                .draw_series(LineSeries::new(line.points.iter().copied(), style))
                .map_err(|e| e.to_string())?;
            if dots {
                chart
                    .draw_series(
                        line.points
                            .iter()
                            .map(|point| Circle::new(*point, 3, colour(i).filled())),
                    )
                    .map_err(|e| e.to_string())?;
            }
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The chart, its legend and its caption; a note in its place if it could not be drawn.
fn figure(label: &str, caption: &str, lines: &[Line], svg: Result<String, String>) -> Markup {
    html! {
        figure.chart {
            @match svg {
                Ok(svg) => div role="img" aria-label=(label) { (PreEscaped(svg)) },
                Err(error) => p.muted { "The chart could not be drawn (" (error) "); the figures are below." },
            }
            ul.legend aria-label="Legend" {
                @for (i, line) in lines.iter().enumerate() {
                    li { span class={ "swatch c" (i % PALETTE.len()) } {} (line.name) }
                }
            }
            figcaption { (caption) }
        }
    }
}

/// Events per minute per signal of one entity, over the minutes from `from` to `to`.
pub fn events_per_minute(
    minutes: &[MinuteCount],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Markup {
    let from = from.duration_trunc(Duration::minutes(1)).unwrap_or(from);
    let span = (to - from).num_minutes().max(1);
    let mut by_signal: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for m in minutes {
        let at = (m.minute - from).num_minutes();
        if (0..=span).contains(&at) {
            by_signal
                .entry(m.signal.as_str())
                .or_insert_with(|| vec![0; span as usize + 1])[at as usize] += m.count;
        }
    }
    let lines: Vec<Line> = by_signal
        .iter()
        .map(|(signal, counts)| Line {
            name: (*signal).to_owned(),
            points: counts
                .iter()
                .enumerate()
                .map(|(i, c)| (i as i64, *c as f64))
                .collect(),
        })
        .collect();
    let peak = by_signal.values().flatten().copied().max().unwrap_or(0) as f64;
    let x_label = |x: &i64| (from + Duration::minutes(*x)).format("%H:%M").to_string();
    let y_label = |y: &f64| format!("{y:.0}");
    let svg = draw(&lines, span, (peak * 1.1).ceil(), &x_label, &y_label, false);
    let caption = format!(
        "Events per minute per signal, {} to {} UTC (by the minute they were received).",
        from.format("%Y-%m-%d %H:%M"),
        to.format("%H:%M")
    );
    html! {
        @if lines.is_empty() {
            p.muted #events-chart-empty { "No events in this period." }
        } @else {
            (figure("Events per minute per signal", &caption, &lines, svg))
            details {
                summary { "The figures" }
                div.table-wrap {
                    table {
                        thead { tr { th { "Minute (UTC)" } th { "Signal" } th.num { "Events" } } }
                        tbody {
                            @for m in minutes {
                                tr {
                                    td { (m.minute.format("%Y-%m-%d %H:%M")) }
                                    td { (m.signal) }
                                    td.num { (m.count) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The share of automated actions reversed within 24h, per UTC day, overall and per rule.
pub fn reversal_rate_per_day(
    days: &[DailyReversals],
    first: DateTime<Utc>,
    last: DateTime<Utc>,
) -> Markup {
    let first = first.duration_trunc(Duration::days(1)).unwrap_or(first);
    let span = (last - first).num_days().max(1);
    let mut overall: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let mut by_rule: BTreeMap<&str, Vec<(i64, f64)>> = BTreeMap::new();
    for day in days {
        let at = (day.day - first).num_days();
        let total = overall.entry(at).or_default();
        total.0 += day.actions;
        total.1 += day.reversed;
        if day.actions > 0 {
            by_rule
                .entry(day.rule.as_str())
                .or_default()
                .push((at, 100.0 * day.reversed as f64 / day.actions as f64));
        }
    }
    let mut lines = vec![Line {
        name: "all rules".into(),
        points: overall
            .iter()
            .filter(|(_, (actions, _))| *actions > 0)
            .map(|(at, (actions, reversed))| (*at, 100.0 * *reversed as f64 / *actions as f64))
            .collect(),
    }];
    lines.extend(by_rule.into_iter().map(|(rule, points)| Line {
        name: rule.to_owned(),
        points,
    }));
    let x_label = |x: &i64| (first + Duration::days(*x)).format("%m-%d").to_string();
    let y_label = |y: &f64| format!("{y:.0}%");
    let svg = draw(&lines, span, 100.0, &x_label, &y_label, true);
    let caption = "Share of the automated actions applied each day (UTC) that a moderator reversed within 24 hours; a day without actions has no point.";
    html! {
        @if days.is_empty() {
            p.muted #reversal-chart-empty { "No automated actions in this window." }
        } @else {
            (figure("Reversal rate per day, overall and per rule", caption, &lines, svg))
        }
    }
}

/// A sweep's expected reversal rate per value, with its 95% interval.
pub fn sweep_reversal_rate(rows: &[SweepRow]) -> Markup {
    let judged: Vec<(usize, Estimate)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.expected_reversal_rate.map(|e| (i, e)))
        .collect();
    let line = |name: &str, pick: fn(&Estimate) -> f64| Line {
        name: name.to_owned(),
        points: judged
            .iter()
            .map(|(i, e)| (*i as i64, 100.0 * pick(e)))
            .collect(),
    };
    let lines = [
        line("expected reversal rate", |e| e.rate),
        line("95% interval, low", |e| e.low),
        line("95% interval, high", |e| e.high),
    ];
    let values: Vec<f64> = rows.iter().map(|r| r.value).collect();
    let x_label = |x: &i64| {
        values
            .get(*x as usize)
            .map_or_else(String::new, |v| v.to_string())
    };
    let y_label = |y: &f64| format!("{y:.0}%");
    let svg = draw(
        &lines,
        rows.len().saturating_sub(1) as i64,
        100.0,
        &x_label,
        &y_label,
        true,
    );
    let caption = "The candidate's expected reversal rate at each value (the reversed share of its actions a moderator has judged), with its 95% interval; a value with no judged action has no point.";
    html! {
        @if judged.is_empty() {
            p.muted #sweep-chart-empty { "No value has an action a moderator judged: there is no rate to draw." }
        } @else {
            (figure("Expected reversal rate per value", caption, &lines, svg))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_their_labels_escaped() {
        let at = DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
            .unwrap()
            .to_utc();
        let minutes = vec![
            MinuteCount {
                signal: "flag".into(),
                minute: at,
                count: 11,
            },
            MinuteCount {
                signal: "upvote".into(),
                minute: at + Duration::minutes(2),
                count: 3,
            },
        ];
        let chart = events_per_minute(
            &minutes,
            at - Duration::minutes(5),
            at + Duration::minutes(5),
        )
        .into_string();
        assert!(chart.contains("<svg"), "{chart}");
        assert!(chart.contains("upvote"));
        let days = vec![DailyReversals {
            day: at,
            rule: "<script>x</script>".into(),
            actions: 4,
            reversed: 1,
        }];
        let chart = reversal_rate_per_day(&days, at - Duration::days(6), at).into_string();
        assert!(chart.contains("<svg"));
        assert!(!chart.contains("<script>"), "{chart}");
        assert!(chart.contains("&lt;script&gt;"));
    }
}
