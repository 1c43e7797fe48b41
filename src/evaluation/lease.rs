//! Leases: how long a claim (and its entity lock) lives, estimated from measured evaluation
//! times, and its renewal while an evaluation runs.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use crate::queue::{Claim, Queue};

/// Evaluation times kept for the lease estimate.
const LEASE_SAMPLES: usize = 512;
/// Measurements needed before the estimate replaces the configured lease.
const LEASE_MIN_SAMPLES: usize = 20;
/// Added to twice the p99 evaluation time.
const LEASE_MARGIN: Duration = Duration::from_secs(1);

/// The lease (and lock TTL) from measured evaluation times: p99 x 2 + margin, between the
/// floor and the configured lease. A short lease lets the reaper rescue a dead worker's
/// entities sooner; renewal keeps a slow evaluation's claim whatever the estimate.
#[derive(Debug)]
pub struct LeaseEstimator {
    samples: Mutex<VecDeque<Duration>>,
    floor: Duration,
    ceiling: Duration,
}

impl LeaseEstimator {
    pub fn new(floor: Duration, ceiling: Duration) -> Self {
        Self {
            samples: Mutex::new(VecDeque::with_capacity(LEASE_SAMPLES)),
            floor: floor.min(ceiling),
            ceiling,
        }
    }

    pub fn record(&self, took: Duration) {
        let mut samples = self.samples.lock().expect("not poisoned");
        if samples.len() == LEASE_SAMPLES {
            samples.pop_front();
        }
        samples.push_back(took);
    }

    /// The lease to give the next claims.
    pub fn current(&self) -> Duration {
        let samples = self.samples.lock().expect("not poisoned");
        if samples.len() < LEASE_MIN_SAMPLES {
            return self.ceiling;
        }
        let mut sorted: Vec<Duration> = samples.iter().copied().collect();
        drop(samples);
        sorted.sort_unstable();
        let p99 = sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)];
        (p99 * 2 + LEASE_MARGIN).clamp(self.floor, self.ceiling)
    }
}

/// The renewal of a claim's lease and entity lock while its evaluation runs: every third of the
/// lease, until [`Renewal::stop`] or the drop (a return, a timeout, a panic).
pub(super) struct Renewal {
    task: tokio::task::JoinHandle<()>,
    /// Set if the lease or the lock was found lost.
    lost: Arc<AtomicBool>,
}

impl Renewal {
    pub(super) fn start(queue: Queue, claim: Claim) -> Self {
        let lost = Arc::new(AtomicBool::new(false));
        let period = Duration::from_millis(claim.lease_ms / 3).max(Duration::from_millis(1));
        let flag = Arc::clone(&lost);
        let task = tokio::spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                match queue.renew(&claim).await {
                    Ok(true) => {}
                    Ok(false) => {
                        flag.store(true, Ordering::Relaxed);
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(error = %crate::telemetry::Chain(&error), "lease renewal failed; will try again")
                    }
                }
            }
        });
        Self { task, lost }
    }

    /// Stops renewing: a claim is never renewed past its evaluation.
    pub(super) fn stop(&self) {
        self.task.abort();
    }

    /// Whether the lease or the lock was lost while it ran.
    pub(super) fn lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::LeaseEstimator;

    #[test]
    fn the_lease_is_twice_the_p99_plus_a_margin_within_floor_and_ceiling() {
        let leases = LeaseEstimator::new(Duration::from_secs(1), Duration::from_secs(30));
        assert_eq!(
            leases.current(),
            Duration::from_secs(30),
            "no measurements yet"
        );
        for _ in 0..99 {
            leases.record(Duration::from_millis(100));
        }
        leases.record(Duration::from_millis(2_000));
        // p99 of 99 x 100ms and one 2s is 2s: 2 x 2s + 1s.
        assert_eq!(leases.current(), Duration::from_secs(5));
        for _ in 0..600 {
            leases.record(Duration::from_millis(1));
        }
        assert_eq!(leases.current(), Duration::from_millis(1_002));
        for _ in 0..600 {
            leases.record(Duration::from_secs(60));
        }
        assert_eq!(
            leases.current(),
            Duration::from_secs(30),
            "capped at the configured lease"
        );
        let tight = LeaseEstimator::new(Duration::from_secs(5), Duration::from_secs(2));
        for _ in 0..100 {
            tight.record(Duration::from_millis(1));
        }
        assert_eq!(
            tight.current(),
            Duration::from_secs(2),
            "the floor never exceeds the lease"
        );
    }
}
