//! What a scenario sends: the entity and signal of every event, in order.

use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::{Distribution, Zipf};

use super::{LoadConfig, Scenario};

/// Upvotes and flags a Sloan post receives: 10 flags first, then 500 upvotes.
const SLOAN_FLAGS: usize = 10;
const SLOAN_UPVOTES: usize = 500;
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

pub(super) fn entity_name(run_id: &str, index: u32) -> String {
    format!("post:{run_id}-{index}")
}
