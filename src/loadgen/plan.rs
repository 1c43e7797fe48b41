//! What a scenario sends: the entity and signal of every event, in order.

use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::{Distribution, Zipf};

use super::{LoadConfig, Scenario};

/// Upvotes and flags a Sloan post receives: 10 flags first, then 500 upvotes.
const SLOAN_FLAGS: usize = 10;
const SLOAN_UPVOTES: usize = 500;
/// The `hot` scenario's hot entities and the share of the events they receive, in tenths.
const HOT_ENTITIES: usize = 10;
const HOT_TENTHS: usize = 9;
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
    }
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

pub(super) fn entity_name(run_id: &str, index: u32) -> String {
    format!("post:{run_id}-{index}")
}

#[cfg(test)]
mod tests {
    use super::{HOT_ENTITIES, hot_entity};

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
