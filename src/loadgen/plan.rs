//! What a scenario sends: the entity and signal of every event, in order.

use std::ops::Range;

use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::{Distribution, Zipf};

use super::{LoadConfig, Scenario};

/// Upvotes and flags a Sloan post receives: 10 flags first, then 500 upvotes.
const SLOAN_FLAGS: usize = 10;
const SLOAN_UPVOTES: usize = 500;
/// The `hot` scenario's hot entities and the share of the events they receive, in tenths.
const HOT_ENTITIES: usize = 10;
const HOT_TENTHS: usize = 9;
/// Most events the `random` scenario gives one entity in one request.
const RANDOM_MAX_EVENTS: usize = 4;
/// One event to send: which entity (index) and which signal.
#[derive(Debug, Clone, Copy)]
pub(super) struct Planned {
    pub entity: u32,
    pub signal: &'static str,
}

fn mixed_signal(rng: &mut StdRng) -> &'static str {
    match rng.random_range(0..100) {
        0..70 => "upvote",
        70..95 => "flag",
        _ => "report",
    }
}

pub(super) fn plan(config: &LoadConfig) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(config.seed);
    let entities = config.entities.max(1);
    match config.scenario {
        Scenario::Steady => {
            let zipf = Zipf::new(entities as f64, 1.07).expect("valid Zipf parameters");
            (0..config.events)
                .map(|_| Planned {
                    entity: zipf.sample(&mut rng) as u32 - 1,
                    signal: mixed_signal(&mut rng),
                })
                .collect()
        }
        Scenario::Burst => (0..config.events)
            .map(|i| Planned {
                entity: (i % entities) as u32,
                signal: mixed_signal(&mut rng),
            })
            .collect(),
        Scenario::Hot => (0..config.events)
            .map(|i| Planned {
                entity: hot_entity(i, entities) as u32,
                signal: mixed_signal(&mut rng),
            })
            .collect(),
        Scenario::SpamWave => (0..config.events)
            .map(|i| Planned {
                entity: (i % entities) as u32,
                signal: "flag",
            })
            .collect(),
        Scenario::Sloan => {
            // Each post's flags come first, then its upvotes, posts interleaved.
            let mut planned = Vec::with_capacity(entities * (SLOAN_FLAGS + SLOAN_UPVOTES));
            for n in 0..SLOAN_FLAGS + SLOAN_UPVOTES {
                for entity in 0..entities {
                    planned.push(Planned {
                        entity: entity as u32,
                        signal: if n < SLOAN_FLAGS { "flag" } else { "upvote" },
                    });
                }
            }
            planned
        }
        Scenario::Random => random(config.events, entities, config.batch.max(1), &mut rng),
    }
}

/// The `random` scenario: request by request, entities drawn uniformly with 1 to
/// [`RANDOM_MAX_EVENTS`] events each (the last one of a request cut to fit).
fn random(events: usize, entities: usize, batch: usize, rng: &mut StdRng) -> Vec<Planned> {
    let mut planned = Vec::with_capacity(events);
    while planned.len() < events {
        let request_end = (planned.len() + batch).min(events);
        while planned.len() < request_end {
            let entity = rng.random_range(0..entities) as u32;
            let count = rng
                .random_range(1..=RANDOM_MAX_EVENTS)
                .min(request_end - planned.len());
            for _ in 0..count {
                planned.push(Planned {
                    entity,
                    signal: mixed_signal(rng),
                });
            }
        }
    }
    planned
}

/// The entity of the `hot` scenario's event `i`: of every ten events, nine go to the hot
/// entities (0..10, in turn) and one to the others (10.., in turn). With 10 entities or fewer,
/// every entity is hot.
fn hot_entity(i: usize, entities: usize) -> usize {
    let hot = HOT_ENTITIES.min(entities);
    if entities <= hot {
        return i % entities;
    }
    let (round, slot) = (i / 10, i % 10);
    if slot < HOT_TENTHS {
        (round * HOT_TENTHS + slot) % hot
    } else {
        hot + round % (entities - hot)
    }
}

/// The attributes of event `i` with `--attributes`: a reason among three (declared with these
/// values) and a score in [0, 1).
pub(super) fn attributes_of(i: usize) -> serde_json::Value {
    const REASONS: [&str; 3] = ["spam", "abuse", "off_topic"];
    serde_json::json!({
        "reason": REASONS[i % REASONS.len()],
        "score": (i * 37 % 100) as f64 / 100.0,
    })
}

/// The requests of a run, in the order they are sent: each a range of planned events (their
/// ids are their positions). With `duplicates` above zero, that share of the requests (spread
/// evenly) re-sends an earlier request whole, as a sender retries after a timeout or a 503: one
/// drawn at random among those sent at least `lag` requests before, so that its events are
/// usually recorded by then.
pub(super) fn request_order(
    events: usize,
    batch: usize,
    duplicates: f64,
    lag: usize,
    seed: u64,
) -> Vec<Range<usize>> {
    let batch = batch.max(1);
    let fresh: Vec<Range<usize>> = (0..events.div_ceil(batch))
        .map(|i| i * batch..((i + 1) * batch).min(events))
        .collect();
    if duplicates <= 0.0 {
        return fresh;
    }
    let resends = (fresh.len() as f64 * duplicates / (1.0 - duplicates)).round() as usize;
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_d0b1e5);
    let mut sent = Vec::with_capacity(fresh.len() + resends);
    let (mut next_fresh, mut resent) = (0, 0);
    while next_fresh < fresh.len() || resent < resends {
        let due = (resent + 1) as f64 <= duplicates * (sent.len() + 1) as f64;
        let eligible = next_fresh > lag || next_fresh == fresh.len();
        if resent < resends && (due || next_fresh == fresh.len()) && eligible {
            let again = rng.random_range(0..next_fresh.saturating_sub(lag).max(1));
            sent.push(fresh[again].clone());
            resent += 1;
        } else {
            sent.push(fresh[next_fresh].clone());
            next_fresh += 1;
        }
    }
    sent
}

pub(super) fn entity_name(run_id: &str, index: u32) -> String {
    format!("post:{run_id}-{index}")
}

#[cfg(test)]
mod tests {
    use rand::{SeedableRng, rngs::StdRng};

    use super::{HOT_ENTITIES, RANDOM_MAX_EVENTS, hot_entity, random, request_order};

    #[test]
    fn a_duplicate_share_resends_earlier_requests_whole_and_every_event_once_fresh() {
        let (events, batch, lag) = (50_000, 100, 64);
        let sent = request_order(events, batch, 0.5, lag, 7);
        let mut fresh_seen = 0;
        let (mut again, mut total) = (0, 0);
        for (position, request) in sent.iter().enumerate() {
            total += request.len();
            if request.start == fresh_seen * batch {
                fresh_seen += 1;
            } else {
                again += request.len();
                // An earlier request, at least `lag` fresh ones before this point.
                assert!(
                    request.end <= (fresh_seen - lag) * batch,
                    "request {position}"
                );
                assert_eq!(request.start % batch, 0);
            }
            if position == sent.len() / 2 {
                // Spread over the run, not bunched at its end.
                assert!((0.4..0.6).contains(&(again as f64 / total as f64)));
            }
        }
        assert_eq!(
            fresh_seen,
            events / batch,
            "every event sent fresh once, in order"
        );
        assert_eq!(
            (again, total),
            (events, 2 * events),
            "half the events re-sent"
        );
        assert_eq!(
            request_order(events, batch, 0.0, lag, 7).len(),
            events / batch
        );
    }

    #[test]
    fn the_random_scenario_gives_each_request_entities_drawn_at_random_with_one_to_four_events() {
        let (events, entities, batch) = (20_000, 1_000, 20);
        let planned = random(events, entities, batch, &mut StdRng::seed_from_u64(1));
        assert_eq!(planned.len(), events);
        let mut seen = vec![false; entities];
        let (mut runs, mut longer) = (0, 0);
        for request in planned.chunks(batch) {
            // Runs of one entity within a request: its events, 1 to 4, or more where the same
            // entity was drawn twice in a row (one draw in a thousand).
            for run in request.chunk_by(|a, b| a.entity == b.entity) {
                if run.len() > RANDOM_MAX_EVENTS {
                    longer += 1;
                }
                seen[run[0].entity as usize] = true;
                runs += 1;
            }
        }
        assert!(longer * 200 < runs, "{longer} of {runs} runs over 4 events");
        // About 2.5 events an entity, and nearly every entity drawn.
        let mean = events as f64 / runs as f64;
        assert!((2.2..=2.8).contains(&mean), "{mean}");
        assert!(seen.iter().filter(|s| **s).count() > 990);
    }

    #[test]
    fn the_hot_scenario_sends_nine_tenths_to_ten_entities_and_spreads_the_rest() {
        let (events, entities) = (100_000, 10_000);
        let mut per_entity = vec![0u32; entities];
        for i in 0..events {
            per_entity[hot_entity(i, entities)] += 1;
        }
        let hot: u32 = per_entity[..HOT_ENTITIES].iter().sum();
        assert_eq!(hot as usize, events * 9 / 10);
        assert!(per_entity[..HOT_ENTITIES].iter().all(|n| *n == 9_000));
        // The other tenth: one event each for 9,990 entities, and a second for ten of them.
        let cold = &per_entity[HOT_ENTITIES..];
        assert_eq!(cold.iter().sum::<u32>() as usize, events / 10);
        assert!(cold.iter().all(|n| (1..=2).contains(n)));
        // Fewer entities than hot ones: all of them share the events.
        assert!((0..50).all(|i| hot_entity(i, 3) < 3));
    }
}
