//! Leases: how long a claim (and its entity lock) lives, estimated from measured evaluation
//! times, and its renewal while an evaluation runs.

use std::{collections::VecDeque, future::Future, sync::Mutex, time::Duration};

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

/// Runs `evaluation` while renewing the claim's lease and entity lock every third of the lease,
/// in the same task: the renewal ends with the evaluation (a claim is never renewed past it),
/// however it ends (a return, a timeout, a panic). Its output, and whether the lease or the lock
/// was found lost meanwhile.
pub(super) async fn renewing<T>(
    queue: &Queue,
    claim: &Claim,
    evaluation: impl Future<Output = T>,
) -> (T, bool) {
    let renewal = renew_until_lost(queue, claim);
    tokio::pin!(evaluation, renewal);
    tokio::select! {
        biased;
        evaluated = &mut evaluation => (evaluated, false),
        () = &mut renewal => (evaluation.await, true),
    }
}

/// Renews the claim every third of its lease; returns when the lease or the lock is lost.
async fn renew_until_lost(queue: &Queue, claim: &Claim) {
    let period = Duration::from_millis(claim.lease_ms / 3).max(Duration::from_millis(1));
    let mut ticker = tokio::time::interval(period);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        match queue.renew(claim).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(error) => {
                tracing::warn!(error = %crate::telemetry::Chain(&error), "lease renewal failed; will try again")
            }
        }
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
