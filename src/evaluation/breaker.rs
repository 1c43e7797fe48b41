//! The Postgres circuit breaker: an evaluation that finds Postgres unreachable trips it, and the
//! worker's poll loop (`worker/poll.rs`) stops claiming while it is open.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use crate::telemetry::names;

/// Longest pause of the breaker between probes: a probe is one cheap statement (four a second
/// per process in an outage), and claiming resumes at most this long after the primary takes
/// writes again: a failover's backlog waits on it, then on the workers' capacity.
const MAX_BREAKER_PAUSE: Duration = Duration::from_millis(250);

/// Stops claiming while Postgres is unreachable, so that workers neither churn through claims
/// nor hammer a database that is down. Opens on an evaluation that found Postgres unreachable, or
/// before a claim when any connection of the process met a primary refusing writes;
/// after an exponential, jittered pause, whether the primary takes writes decides whether it
/// closes or stays open.
#[derive(Debug, Default)]
pub struct Breaker {
    state: Mutex<BreakerState>,
}

#[derive(Debug, Default)]
struct BreakerState {
    trips: u32,
    open_until: Option<Instant>,
}

impl Breaker {
    pub fn trip(&self, base: Duration) {
        let mut state = self.state.lock().expect("not poisoned");
        state.trips = state.trips.saturating_add(1);
        let exponent = state.trips.min(16) - 1;
        let pause = (base * 2u32.pow(exponent)).min(MAX_BREAKER_PAUSE);
        let jittered = pause.mul_f64(0.5 + rand::random::<f64>() / 2.0);
        state.open_until = Some(Instant::now() + jittered);
        metrics::gauge!(names::POSTGRES_BREAKER_OPEN).set(1.0);
    }

    /// How long the breaker stays open, if it is.
    pub fn open_for(&self) -> Option<Duration> {
        let state = self.state.lock().expect("not poisoned");
        state
            .open_until
            .and_then(|until| until.checked_duration_since(Instant::now()))
            .filter(|d| !d.is_zero())
    }

    /// Tripped and its pause is over: the next step is a probe.
    pub fn needs_probe(&self) -> bool {
        let tripped = self.state.lock().expect("not poisoned").trips > 0;
        tripped && self.open_for().is_none()
    }

    pub fn close(&self) {
        let mut state = self.state.lock().expect("not poisoned");
        if state.trips > 0 {
            tracing::info!("Postgres is reachable again; claiming resumes");
        }
        *state = BreakerState::default();
        metrics::gauge!(names::POSTGRES_BREAKER_OPEN).set(0.0);
    }
}

impl Breaker {
    /// Whether it has tripped and not closed since.
    pub fn is_open(&self) -> bool {
        self.state.lock().expect("not poisoned").trips > 0
    }
}
