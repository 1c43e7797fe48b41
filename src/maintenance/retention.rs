//! Retention: events past the retention window are deleted in bounded batches (their totals
//! stay), with old minute buckets, evaluation records and delivered outbox rows.

use super::Maintenance;
use crate::{store::StoreError, telemetry::names};

/// Delete statements one pass runs at most (each of `retention_batch` rows).
const PURGE_BATCHES_PER_PASS: usize = 10;

impl Maintenance {
    /// Deletes events older than the retention (bounded per pass); totals stay as they are.
    pub async fn purge_once(&self) -> Result<u64, StoreError> {
        let deleted = self
            .store
            .purge_expired_events(
                self.settings.retention,
                self.settings.retention_batch,
                PURGE_BATCHES_PER_PASS,
            )
            .await?;
        if deleted > 0 {
            metrics::counter!(names::EVENTS_PURGED).increment(deleted);
            tracing::info!(deleted, "deleted events past the retention window");
        }
        Ok(deleted)
    }
}
