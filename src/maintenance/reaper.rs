//! The reaper: claims whose lease expired (their worker died or stalled) go back to the due
//! set, or to the dead letters on their last attempt.

use super::Maintenance;
use crate::{
    queue::{QueueError, Reaped},
    telemetry::names,
};

/// Most expired leases returned per shard in one pass.
const REAP_BATCH: usize = 256;

impl Maintenance {
    /// Returns every expired lease to the due set (or, on its last attempt, to the dead
    /// letters).
    pub async fn reap_once(&self) -> Result<Reaped, QueueError> {
        let mut total = Reaped::default();
        for shard in 0..self.queue.keys().shards() {
            let reaped = self.queue.reap(shard, REAP_BATCH).await?;
            total.returned += reaped.returned;
            total.dead_lettered += reaped.dead_lettered;
        }
        if total.returned + total.dead_lettered > 0 {
            metrics::counter!(names::LEASES_REAPED)
                .increment((total.returned + total.dead_lettered) as u64);
            metrics::counter!(names::DEAD_LETTERED, "reason" => "attempts_exhausted")
                .increment(total.dead_lettered as u64);
            tracing::warn!(
                returned = total.returned,
                dead_lettered = total.dead_lettered,
                "entities whose worker lease expired"
            );
        }
        Ok(total)
    }
}
