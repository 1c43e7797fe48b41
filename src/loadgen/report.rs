//! What a run measured, and its one-figure-per-line summary.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Scenario;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Quantiles {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Quantiles {
    pub(super) fn of(values: &mut [f64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_by(f64::total_cmp);
        let pick = |q: f64| values[((q * values.len() as f64) as usize).min(values.len() - 1)];
        Self {
            p50: pick(0.5),
            p99: pick(0.99),
            max: values[values.len() - 1],
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: Scenario,
    pub run_id: String,
    pub events_sent: usize,
    pub events_accepted: u64,
    pub duplicates: u64,
    pub requests: u64,
    pub batch: usize,
    pub connections: usize,
    pub send_seconds: f64,
    /// New events accepted per second of the send.
    pub events_per_second: f64,
    /// Events answered per second, new and duplicates: the rate a sender that retries sees.
    pub answered_per_second: f64,
    pub http_latency_ms: Quantiles,
    pub errors_by_status: BTreeMap<String, u64>,
    /// Events accepted in each second of the run.
    pub accepted_per_second: Vec<u64>,
    pub drain: Option<Drain>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Drain {
    pub drained: bool,
    /// From the last request to the last evaluation that covered every event.
    pub drain_seconds: f64,
    pub entities: usize,
    pub evaluations: u64,
    pub evaluations_per_entity: f64,
    pub entities_evaluated_more_than_once: u64,
    pub evaluations_per_event: f64,
    pub fire_delay_ms: Quantiles,
    /// Evaluations finished in the busiest one-second window (any start, not only whole
    /// seconds of the clock), and the mean over the span they finished in (at least a second).
    pub evaluations_per_second_peak: u64,
    pub evaluations_per_second_mean: f64,
    pub actions: u64,
    /// The same action applied twice to one entity.
    pub duplicate_actions: u64,
    /// Entities whose final status differs from what the rules give on their final counts.
    pub wrong_actions: u64,
    /// Entities the rules act on, given their final counts.
    pub expected_actions: u64,
    /// (seconds since the run started, fire delay ms) of every evaluation, for plots.
    pub fire_delays: Vec<(f64, f64)>,
}

impl Report {
    /// A human summary, one figure per line.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "scenario {:?} run {}\n  sent {} events in {} requests ({} per request, {} connections) in {:.2}s\n  accepted {} new + {} duplicates: {:.0} new events/s, {:.0} answered/s\n  HTTP latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms\n  errors: {}\n",
            self.scenario,
            self.run_id,
            self.events_sent,
            self.requests,
            self.batch,
            self.connections,
            self.send_seconds,
            self.events_accepted,
            self.duplicates,
            self.events_per_second,
            self.answered_per_second,
            self.http_latency_ms.p50,
            self.http_latency_ms.p99,
            self.http_latency_ms.max,
            if self.errors_by_status.is_empty() {
                "none".to_owned()
            } else {
                format!("{:?}", self.errors_by_status)
            },
        );
        if let Some(d) = &self.drain {
            out.push_str(&format!(
                "  drained: {} ({:.2}s after the last request)\n  evaluations: {} for {} entities = {:.2} per entity ({} entities more than once), {:.4} per event\n  fire delay p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms\n  evaluations/s: busiest one-second window {}, mean {:.0}\n  actions {} (expected {}), duplicates {}, wrong {}\n",
                d.drained,
                d.drain_seconds,
                d.evaluations,
                d.entities,
                d.evaluations_per_entity,
                d.entities_evaluated_more_than_once,
                d.evaluations_per_event,
                d.fire_delay_ms.p50,
                d.fire_delay_ms.p99,
                d.fire_delay_ms.max,
                d.evaluations_per_second_peak,
                d.evaluations_per_second_mean,
                d.actions,
                d.expected_actions,
                d.duplicate_actions,
                d.wrong_actions,
            ));
        }
        out
    }
}
