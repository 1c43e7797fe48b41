//! Upkeep beside the workers, each pass on its own timer and all under the workers' shutdown
//! token: the reaper returns the claims of workers that died, the index rescan repairs the
//! shard indexes (`queue::index`), the repair sweep re-schedules
//! from Postgres what Redis lost, and retention deletes what is past the retention window.
//! `startup` runs it in every process that runs workers.

mod reaper;
mod retention;
mod sweeper;

use std::{
    future::Future,
    sync::{Arc, atomic::AtomicU16},
    time::Duration,
};

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use self::sweeper::{SweepError, SweepReport};
use crate::{
    queue::{Queue, RESCAN_STEP},
    settings,
    store::Store,
};

#[derive(Clone)]
pub struct Maintenance {
    queue: Queue,
    store: Store,
    settings: settings::Maintenance,
    /// How often the reaper runs: half the shortest lease.
    reap_every: Duration,
    /// Where the repair sweep goes on reading Redis' dead sets (a few shards a pass; each
    /// process starts at a shard of its own).
    dead_letter_shard: Arc<AtomicU16>,
    /// Shards whose reaps failed lately, skipped for a moment.
    failing: Arc<crate::queue::FailingShards>,
    /// How long the index rescan takes to read every shard (a slice each second, by one
    /// process of all; longer when there are too many shards for a slice's limit).
    rescan_every: Duration,
}

impl Maintenance {
    /// `lease_floor` is the shortest lease workers give: the reaper runs every half of it, so
    /// a dead worker's claims come back soon after their leases expire. The shard indexes are
    /// rescanned a slice a second, by whichever process takes that second's lock, so that every
    /// shard is read once per `rescan_every` (`queue::Queue::rescan_index`).
    pub fn new(
        queue: Queue,
        store: Store,
        settings: &settings::Maintenance,
        lease_floor: Duration,
        rescan_every: Duration,
    ) -> Self {
        let start = rand::random::<u16>() % queue.keys().shards();
        Self {
            dead_letter_shard: Arc::new(AtomicU16::new(start)),
            failing: Arc::default(),
            queue,
            store,
            settings: settings.clone(),
            reap_every: (lease_floor / 2).max(Duration::from_millis(50)),
            rescan_every,
        }
    }

    /// Runs the reaper, the index rescan, the sweep and retention until `shutdown`. The reaper has a timer of
    /// its own, so a process whose evaluation slots are all busy still rescues what other
    /// processes left behind.
    pub async fn run(self, shutdown: CancellationToken) {
        let cursor = std::sync::Mutex::new(None);
        let (this, cursor) = (&self, &cursor);
        tokio::join!(
            every(self.reap_every, &shutdown, "reaper pass", || this
                .reap_once()),
            every(RESCAN_STEP, &shutdown, "shard index rescan", || this
                .queue
                .rescan_index(this.rescan_every)),
            every(
                self.settings.sweep_interval,
                &shutdown,
                "repair sweep",
                || async move {
                    let from = cursor.lock().expect("not poisoned").take();
                    let (_, next) = this.sweep_once(from).await?;
                    *cursor.lock().expect("not poisoned") = next;
                    Ok::<_, SweepError>(())
                }
            ),
            every(
                self.settings.retention_interval,
                &shutdown,
                "retention pass",
                || this.purge_once()
            ),
        );
    }
}

/// Runs `pass` every `period` (the first at once) until `shutdown`, each in a span named by
/// `what`; a failed pass is logged and the next one runs on time.
async fn every<T, E, F, Fut>(period: Duration, shutdown: &CancellationToken, what: &str, pass: F)
where
    E: std::error::Error + 'static,
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {
                let span = tracing::info_span!("maintenance", pass = what);
                if let Err(error) = pass().instrument(span.clone()).await {
                    span.in_scope(|| {
                        tracing::warn!(error = %crate::telemetry::Chain(&error), "{what} failed");
                    });
                }
            }
        }
    }
}
