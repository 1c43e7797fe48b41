//! The repair sweep: Postgres knows which entities are owed an evaluation; those Redis holds
//! neither due nor in flight (a flush, a failover, a lost schedule call) are scheduled again.

use std::sync::atomic::Ordering;

use super::Maintenance;
use crate::{
    dead_letters::{self, DeadLetterError, ShardWalk},
    domain::EntityId,
    queue::QueueError,
    store::{StoreError, Sweep, SweepCursor, Timers},
    telemetry::{Timed, names},
};

/// Most shards whose dead set one pass reads: what bounds a pass's cost, whatever the shard
/// count (at the default 120 shards a pass reads them all).
pub const DEAD_LETTER_SHARDS_PER_PASS: u16 = 128;

/// Most receive time of events one pass reads for entities to mark owed: a pass after a long
/// stop catches up this much at a time.
pub const MARK_SPAN: std::time::Duration = std::time::Duration::from_secs(300);

/// What one repair-sweep pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// False when another process held the sweep lock, so this pass did nothing.
    pub ran: bool,
    /// Entities owed an evaluation (or the restore of a timed action that has ended) that the
    /// pass looked up in Redis.
    pub examined: usize,
    /// Of those, the ones Redis had lost and that are now due again.
    pub repaired: usize,
    /// Dead letters Redis held that Postgres had missed, now recorded there.
    pub dead_letters_recorded: usize,
    /// Dead letters Redis had lost, back in its dead set (and out of the due set).
    pub dead_letters_restored: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// The dead letters' reconciliation, which runs first.
    #[error(transparent)]
    DeadLetters(#[from] DeadLetterError),
}

impl Maintenance {
    /// One repair-sweep pass: entities that Postgres says are owed an evaluation and that
    /// Redis holds neither due nor in flight are scheduled again, due now. One process sweeps
    /// at a time (a Postgres advisory lock); a pass examines at most `sweep_batch` entities,
    /// continuing after `cursor`, and the dead sets of at most [`DEAD_LETTER_SHARDS_PER_PASS`]
    /// shards. Returns the report and where the next pass continues.
    pub async fn sweep_once(
        &self,
        cursor: Option<SweepCursor>,
    ) -> Result<(SweepReport, Option<SweepCursor>), SweepError> {
        let lock_name = format!("quiesce-sweep:{}", self.queue.keys().prefix());
        let Some(mut tx) = self.store.sweep().begin_sweep(&lock_name).await? else {
            return Ok((SweepReport::default(), cursor));
        };
        // Dead letters first: one Redis lost goes back in its dead set before the re-schedule
        // below, so a dead entity is not evaluated again until redriven. Redis' dead sets are
        // read a stretch of shards a pass, going on where the last pass ended.
        let walk = ShardWalk {
            from: self.dead_letter_shard.load(Ordering::Relaxed),
            count: DEAD_LETTER_SHARDS_PER_PASS,
        };
        let dead = dead_letters::sync(&self.store, &self.queue, walk).await?;
        self.dead_letter_shard
            .store(dead.next_shard, Ordering::Relaxed);
        if dead.recorded + dead.restored > 0 {
            tracing::warn!(
                recorded = dead.recorded,
                restored = dead.restored,
                "reconciled dead letters between Redis and Postgres"
            );
        }
        // Entities with events that arrived since the last pass and that no evaluation saw
        // are marked owed first (ingest marks only an entity's first event).
        let marked = self
            .store
            .sweep()
            .mark_unevaluated(&mut tx, self.settings.sweep_grace, MARK_SPAN)
            .timed_query("mark_unevaluated")
            .await?;
        if marked > 0 {
            tracing::debug!(marked, "marked entities with unevaluated events");
        }
        let owed = Sweep::owed_evaluations(
            &mut tx,
            self.settings.sweep_grace,
            cursor.as_ref(),
            self.settings.sweep_batch,
        )
        .timed_query("owed_evaluations")
        .await?;
        // Timers that have ended are owed their restore, whatever Redis lost of their schedule
        // (Postgres holds them; `store/timers.rs`).
        let ended = Timers::due_timers(&mut tx, self.settings.sweep_batch)
            .timed_query("due_timers")
            .await?;
        let ids = |raws: Vec<&String>| -> Vec<EntityId> {
            raws.into_iter()
                .filter_map(|raw| match EntityId::parse(raw) {
                    Ok(entity) => Some(entity),
                    Err(error) => {
                        // Every row is written from an entity id: one that is none is reported.
                        tracing::error!(entity = %raw, %error, "an entity owed an evaluation has no entity id; not re-scheduled");
                        None
                    }
                })
                .collect()
        };
        let entities = ids(owed.iter().map(|(_, raw)| raw).collect());
        let repaired = self.queue.repair(&entities).await?;
        // An ended timer is made due now even when Redis holds the entity due later (the
        // entry of a timer that a moderator replaced): never later than its end.
        let now_ms = chrono::Utc::now().timestamp_millis();
        let timers: Vec<(EntityId, i64)> = ids(ended.iter().collect())
            .into_iter()
            .map(|entity| (entity, now_ms))
            .collect();
        let repaired = repaired + self.queue.schedule_at(&timers, true).await?;
        tx.commit().await.map_err(StoreError::from)?;
        if repaired > 0 {
            metrics::counter!(names::SWEEP_REPAIRED).increment(repaired as u64);
            tracing::warn!(repaired, "re-scheduled entities that Redis had lost");
        }
        // A short page means the end was reached: the next pass starts from the oldest again.
        let next = (owed.len() >= self.settings.sweep_batch)
            .then(|| owed.last().cloned())
            .flatten();
        let report = SweepReport {
            ran: true,
            examined: owed.len() + ended.len(),
            repaired,
            dead_letters_recorded: dead.recorded,
            dead_letters_restored: dead.restored,
        };
        Ok((report, next))
    }
}
