//! After the send: waits until every event is covered by an evaluation, then reads what the
//! evaluations and actions of the run were and checks them against the rules.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use anyhow::Context;
use sqlx::PgPool;

use super::{Drain, LoadConfig, Planned, Quantiles, entity_name};
use crate::{
    domain::{EntityId, Snapshot, Status},
    rules::RuleSet,
    store,
};

/// The rules' verdict' verdict on an entity's final counts: the status it should end with.
fn expected_status(rules: &RuleSet, entity: &str, counts: &HashMap<&'static str, i64>) -> Status {
    let snapshot = Snapshot::with_counts(
        EntityId::parse(entity).expect("generated ids are valid"),
        counts.iter().map(|(signal, count)| (*signal, *count)),
    );
    let verdict = rules.evaluate(&snapshot);
    verdict
        .to_apply(Status::Visible, None)
        .map_or(Status::Visible, |d| d.action.status())
}

pub(super) async fn drain(
    config: &LoadConfig,
    url: &str,
    planned: &[Planned],
    accepted: u64,
    started: Instant,
) -> anyhow::Result<Drain> {
    let pool = PgPool::connect(url)
        .await
        .context("cannot connect to Postgres")?;
    let pattern = format!("post:{}-%", config.run_id);
    let mut counts: HashMap<u32, HashMap<&'static str, i64>> = HashMap::new();
    for p in planned {
        *counts
            .entry(p.entity)
            .or_default()
            .entry(p.signal)
            .or_default() += 1;
    }
    let entities = counts.len();
    let send_done = Instant::now();
    let deadline = send_done + config.drain_timeout;
    let mut drained = false;
    while Instant::now() < deadline {
        // The exact check reads every entity's unfolded events (hundreds of milliseconds of a
        // Postgres core for 50,000 entities): polled, it would take that from the evaluations
        // it measures. The entity rows alone tell when it can hold.
        let (recorded, covered) = store::loadgen::covered_events(&pool, &pattern).await?;
        if recorded as usize == entities && covered as u64 >= accepted {
            let (recorded, owed) = store::loadgen::drain_progress(&pool, &pattern).await?;
            if recorded as usize == entities && owed == 0 {
                drained = true;
                break;
            }
        }
        // Even the cheap read takes tens of milliseconds at 50,000 entities: a quarter second
        // between them keeps the harness's share small; no figure depends on when it sees the end.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let drain_seconds = send_done.elapsed().as_secs_f64();
    // Long enough for an evaluation that should not happen to show up.
    tokio::time::sleep(config.window + Duration::from_secs(1)).await;

    let run_started = chrono::Utc::now() - chrono::Duration::from_std(started.elapsed())?;
    let rows = store::loadgen::run_evaluations(&pool, &pattern).await?;
    let mut per_entity: HashMap<String, u64> = HashMap::new();
    let mut delays = Vec::with_capacity(rows.len());
    let mut fire_delays = Vec::with_capacity(rows.len());
    let mut finishes_ms = Vec::with_capacity(rows.len());
    for row in &rows {
        *per_entity.entry(row.entity.clone()).or_default() += 1;
        finishes_ms.push(row.finished_at.timestamp_millis());
        if let Some(delay) = row.delay_ms {
            delays.push(delay);
            let at = (row.started_at - run_started).num_milliseconds() as f64 / 1000.0;
            fire_delays.push((at, delay));
        }
    }
    let evaluations = rows.len() as u64;
    finishes_ms.sort_unstable();
    let span = match (finishes_ms.first(), finishes_ms.last()) {
        (Some(first), Some(last)) => ((last - first) as f64 / 1000.0).max(1.0),
        _ => 1.0,
    };

    let action_rows = store::loadgen::run_actions(&pool, &pattern).await?;
    let mut applied: HashMap<(String, String), u64> = HashMap::new();
    for row in &action_rows {
        *applied.entry(row.clone()).or_default() += 1;
    }
    let duplicate_actions = applied.values().map(|n| n.saturating_sub(1)).sum();
    let statuses: HashMap<String, String> = store::loadgen::run_statuses(&pool, &pattern)
        .await?
        .into_iter()
        .collect();
    let (mut wrong, mut expected_actions) = (0, 0);
    for (index, signals) in &counts {
        let name = entity_name(&config.run_id, *index);
        let expected = expected_status(&config.rules, &name, signals);
        if expected != Status::Visible {
            expected_actions += 1;
        }
        let actual = statuses.get(&name).map_or("visible", String::as_str);
        if actual != expected.as_str() {
            wrong += 1;
        }
    }
    pool.close().await;
    Ok(Drain {
        drained,
        drain_seconds,
        entities,
        evaluations,
        evaluations_per_entity: evaluations as f64 / entities.max(1) as f64,
        entities_evaluated_more_than_once: per_entity.values().filter(|n| **n > 1).count() as u64,
        evaluations_per_event: evaluations as f64 / planned.len().max(1) as f64,
        fire_delay_ms: Quantiles::of(&mut delays),
        evaluations_per_second_peak: busiest_window(&finishes_ms, 1_000),
        evaluations_per_second_mean: evaluations as f64 / span,
        actions: action_rows.len() as u64,
        duplicate_actions,
        wrong_actions: wrong,
        expected_actions,
        fire_delays,
    })
}

/// The most instants (sorted, in milliseconds) that fall in one window `[t, t + window_ms)`,
/// over every start `t`: the busiest window is never split by where a clock second begins.
fn busiest_window(sorted_ms: &[i64], window_ms: i64) -> u64 {
    debug_assert!(window_ms > 0, "an empty window would run past the end");
    let mut start = 0;
    let mut busiest = 0;
    for (end, at) in sorted_ms.iter().enumerate() {
        while sorted_ms[start] <= at - window_ms {
            start += 1;
        }
        busiest = busiest.max(end + 1 - start);
    }
    busiest as u64
}
#[cfg(test)]
mod tests {
    use super::busiest_window;

    #[test]
    fn the_busiest_window_is_found_across_a_clock_second() {
        // 600 finishes in 12:00:00.700..12:00:01.299 (one every millisecond) would count as 300
        // and 300 by clock seconds; any one-second window holds all of them.
        let burst: Vec<i64> = (0..600).map(|i| 700 + i).collect();
        assert_eq!(busiest_window(&burst, 1_000), 600);
        // A window is half-open: instants exactly one second apart are not in one window.
        assert_eq!(busiest_window(&[0, 1_000, 2_000], 1_000), 1);
        assert_eq!(busiest_window(&[0, 999, 1_000, 1_500], 1_000), 3);
        assert_eq!(busiest_window(&[], 1_000), 0);
    }
}
