//! The poll loop: wait out the breaker, claim while permits are free, start an evaluation per
//! claim, sleep until the earliest due entity (at most the poll interval) or a wake-up, and on
//! shutdown drain. Each step is a function of its own, so that [`Worker::run`] reads at once.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tokio::{
    sync::{Notify, Semaphore},
    task::{JoinError, JoinSet},
};
use tokio_util::sync::CancellationToken;

use super::{ClaimRound, MAX_POLL_BACKOFF, READ_GAP, Worker};
use crate::{evaluation::jittered, queue::Claim, telemetry::Chain};

/// What the poll loop carries from one turn to the next.
struct Polling {
    /// One per evaluation that may run at once (`workers`).
    permits: Arc<Semaphore>,
    /// The claims being evaluated, by token: given back if the drain times out.
    running: Arc<Mutex<HashMap<String, Claim>>>,
    /// The evaluations, reaped at every turn and awaited by the drain.
    tasks: JoinSet<()>,
    /// The pause after a failed claim, doubled at each failure in a row.
    backoff: Duration,
    /// The due index's time this process sleeps until, when it sleeps for one.
    expected: Option<i64>,
    /// When the primary's refusals were last read (`Store::primary_refused_since`).
    fence_read: Instant,
}

/// How a turn's wait ended.
enum Woken {
    /// Time to poll again (the sleep ended, a wake-up, or a permit freed).
    Poll,
    Shutdown,
}

impl Worker {
    /// The poll loop: claims while permits are free, sleeps until the earliest due entity (at
    /// most the poll interval) or a wake-up, and on shutdown stops claiming, waits for running
    /// evaluations, and gives back what did not finish in time. Other processes' wake-ups are
    /// forwarded beside it until it has drained. Maintenance (the reaper among it) runs beside
    /// it, started with it by `startup`.
    pub async fn run(self, shutdown: CancellationToken) {
        let listening = shutdown.child_token();
        let forwarding = async {
            if let Some(wakeups) = self.wakeups.clone() {
                wakeups
                    .forward(Arc::clone(&self.wakeup), listening.clone())
                    .await;
            }
        };
        let polling = async {
            self.poll(&shutdown).await;
            listening.cancel();
        };
        tokio::join!(polling, forwarding);
    }

    async fn poll(&self, shutdown: &CancellationToken) {
        let mut polling = Polling::new(&self.settings);
        while !shutdown.is_cancelled() {
            polling.reap();
            self.pause_if_primary_refused(&mut polling.fence_read);
            let available = polling.permits.available_permits();
            let sleep_for = match self.breaker_pause(&mut polling.fence_read).await {
                Some(pause) => pause,
                None if available > 0 => self.claim_and_start(&mut polling, available).await,
                None => self.settings.poll_interval,
            };
            if let Woken::Shutdown = polling.wait(&self.wakeup, sleep_for, shutdown).await {
                break;
            }
        }
        self.drain(polling).await;
    }

    /// Any of the pool's connections may learn first that the primary takes no writes (the
    /// outbox's, a scrape's writability check, one the fence refused): claims pause then,
    /// rather than take entities only to give them back.
    fn pause_if_primary_refused(&self, fence_read: &mut Instant) {
        let reading = Instant::now();
        let breaker = self.evaluator.breaker();
        if !breaker.is_open() && self.store.primary_refused_since(*fence_read) {
            tracing::warn!("the primary refused a connection or a write; pausing claims");
            breaker.trip(self.settings.poll_interval);
        }
        *fence_read = reading;
    }

    /// How long to wait before claiming while the breaker is open (`None`: claim now). Once its
    /// pause is over, one probe of the primary decides whether it closes or stays open.
    async fn breaker_pause(&self, fence_read: &mut Instant) -> Option<Duration> {
        let breaker = self.evaluator.breaker();
        if let Some(pause) = breaker.open_for() {
            return Some(pause);
        }
        if !breaker.needs_probe() {
            return None;
        }
        self.stats
            .probes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let probe_limit = self.settings.poll_interval.max(Duration::from_secs(1));
        match tokio::time::timeout(probe_limit, self.store.writable()).await {
            Ok(Ok(())) => {
                breaker.close();
                // The primary takes writes now: a refusal met before this probe (the old
                // primary's, or the promotion's retirement) must not pause again.
                *fence_read = Instant::now();
                None
            }
            _ => {
                breaker.trip(self.settings.poll_interval);
                Some(breaker.open_for().unwrap_or(self.settings.poll_interval))
            }
        }
    }

    /// Claims up to `available` entities and starts an evaluation for each; how long to sleep
    /// before the next poll.
    async fn claim_and_start(&self, polling: &mut Polling, available: usize) -> Duration {
        let round = match self.claim_once(available).await {
            Ok(round) => round,
            Err(error) => {
                polling.expected = None;
                tracing::warn!(error = %Chain(&error), "claim failed; backing off");
                polling.backoff = (polling.backoff * 2).min(MAX_POLL_BACKOFF);
                return jittered(polling.backoff);
            }
        };
        polling.backoff = self.settings.poll_interval;
        let (sleep_for, expected) = self.after_round(&round, available, polling.expected);
        polling.expected = expected;
        for claim in round.claims {
            polling.start(self.clone(), claim);
        }
        sleep_for
    }

    /// How long to sleep after a round, and the due time it sleeps for (if it sleeps for one).
    fn after_round(
        &self,
        round: &ClaimRound,
        available: usize,
        expected: Option<i64>,
    ) -> (Duration, Option<i64>) {
        let poll_interval = self.settings.poll_interval;
        if round.claims.len() == available {
            // More may be due; come back as soon as a permit frees.
            return (Duration::ZERO, None);
        }
        if round.beaten(expected) {
            // Every process sleeps until the same next time, and one takes what is due then.
            // Those that lost go back to the poll interval (or a wake-up) instead of each
            // reading the index at every due time for nothing: the winner follows the due
            // times, and a process that finds shards due in a poll follows them again.
            return (poll_interval, None);
        }
        let Some(next) = round.next_due_in else {
            return (poll_interval, None);
        };
        // Due times a few milliseconds apart are taken together: one read and one settle for
        // several shards, so the index's reads stay bounded however dense the due times get.
        // Something due now (a full read, a shard with more than a claim batch) is read again
        // at once.
        let gap = READ_GAP.min(poll_interval / 10);
        let sleep_for = if next.is_zero() {
            next
        } else {
            next.max(gap).min(poll_interval)
        };
        let expected = (next <= poll_interval)
            .then(|| round.next_due_at_ms())
            .flatten();
        (sleep_for, expected)
    }

    /// On shutdown: waits for running evaluations up to `shutdown_timeout`, then aborts the
    /// rest and gives their claims back.
    async fn drain(&self, mut polling: Polling) {
        let drained = tokio::time::timeout(self.settings.shutdown_timeout, async {
            while let Some(joined) = polling.tasks.join_next().await {
                evaluation_ended(joined);
            }
        })
        .await;
        if drained.is_ok() {
            return;
        }
        polling.tasks.abort_all();
        while let Some(joined) = polling.tasks.join_next().await {
            evaluation_ended(joined);
        }
        let unfinished: Vec<Claim> = polling
            .running
            .lock()
            .expect("not poisoned")
            .drain()
            .map(|(_, c)| c)
            .collect();
        tracing::warn!(
            count = unfinished.len(),
            "shutdown timeout: giving unfinished claims back"
        );
        for claim in unfinished {
            if let Err(error) = self.queue.retry(&claim, Duration::ZERO).await {
                tracing::warn!(error = %Chain(&error), entity = %claim.entity, "could not give a claim back; the reaper will when its lease expires");
            }
            if let Err(error) = self.queue.unlock(&claim).await {
                tracing::warn!(error = %Chain(&error), entity = %claim.entity, "could not release an entity's lock; it expires with its lease");
            }
        }
    }
}

impl Polling {
    fn new(settings: &crate::settings::Worker) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(settings.workers)),
            running: Arc::default(),
            tasks: JoinSet::new(),
            backoff: settings.poll_interval,
            expected: None,
            fence_read: Instant::now(),
        }
    }

    /// Starts the claim's evaluation on a free permit.
    fn start(&mut self, worker: Worker, claim: Claim) {
        let permit = Arc::clone(&self.permits)
            .try_acquire_owned()
            .expect("claimed no more than the free permits");
        self.running
            .lock()
            .expect("not poisoned")
            .insert(claim.token.clone(), claim.clone());
        let running = Arc::clone(&self.running);
        self.tasks.spawn(async move {
            let token = claim.token.clone();
            worker.evaluate_claim(claim).await;
            running.lock().expect("not poisoned").remove(&token);
            drop(permit);
        });
    }

    /// Reaps the evaluations that have ended.
    fn reap(&mut self) {
        while let Some(joined) = self.tasks.try_join_next() {
            evaluation_ended(joined);
        }
    }

    /// Sleeps for `sleep_for` (or, at capacity, until an evaluation ends), unless a wake-up
    /// or the shutdown comes first.
    async fn wait(
        &mut self,
        wakeup: &Notify,
        sleep_for: Duration,
        shutdown: &CancellationToken,
    ) -> Woken {
        let at_capacity = self.permits.available_permits() == 0;
        tokio::select! {
            _ = shutdown.cancelled() => Woken::Shutdown,
            _ = wakeup.notified() => Woken::Poll,
            _ = tokio::time::sleep(sleep_for), if !at_capacity => Woken::Poll,
            Some(joined) = self.tasks.join_next(), if at_capacity => {
                evaluation_ended(joined);
                Woken::Poll
            }
        }
    }
}

/// An evaluation's task ended: a panic is logged (its claim comes back when its lease expires,
/// or is given back by the drain); an abort is the drain's own doing.
fn evaluation_ended(joined: Result<(), JoinError>) {
    match joined {
        Ok(()) => {}
        Err(error) if error.is_cancelled() => {}
        Err(error) => {
            tracing::error!(error = %error, "an evaluation panicked; its claim comes back when its lease expires")
        }
    }
}
