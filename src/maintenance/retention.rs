//! Retention: events, evaluation records and minute buckets leave with whole partitions once
//! past their keep (their totals stay); partitions are made ahead of time and events
//! partitions sealed when their time is over, and analyzed once it is; delivered outbox rows go
//! in bounded batches.

use super::Maintenance;
use crate::{store::StoreError, telemetry::names};

/// Delete statements of outbox rows one pass runs at most (each of `retention_batch` rows).
const PURGE_BATCHES_PER_PASS: usize = 10;

impl Maintenance {
    /// One retention pass; returns the events that left (totals stay as they are).
    pub async fn purge_once(&self) -> Result<u64, StoreError> {
        let purged = self
            .store
            .retention()
            .purge_expired(self.settings.retention_batch, PURGE_BATCHES_PER_PASS)
            .await?;
        let events = purged.dropped.events;
        for (table, made) in &purged.made {
            if *made > 0 {
                metrics::counter!(names::PARTITIONS_MADE, "table" => table.table())
                    .increment(u64::from(*made));
            }
        }
        for (table, name) in &purged.dropped.partitions {
            metrics::counter!(names::PARTITIONS_DROPPED, "table" => table.table()).increment(1);
            tracing::info!(table = table.table(), partition = %name, "dropped a partition past the retention window");
        }
        if purged.analyzed > 0 {
            tracing::info!(
                partitions = purged.analyzed,
                "analyzed partitions whose time is over"
            );
        }
        if events > 0 {
            metrics::counter!(names::EVENTS_PURGED).increment(events);
            tracing::info!(events, "events left with their partitions");
        }
        let audit = self
            .store
            .audit()
            .expire_audit(self.settings.audit_retention)
            .await?;
        if audit > 0 {
            tracing::info!(
                rows = audit,
                "audit trail entries past audit_retention removed"
            );
        }
        if purged.outbox > 0 {
            tracing::info!(
                rows = purged.outbox,
                "deleted delivered outbox rows past the retention window"
            );
        }
        Ok(events)
    }
}
