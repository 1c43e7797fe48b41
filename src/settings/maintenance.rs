//! Background upkeep: the retention of events and the repair sweep.

use std::time::Duration;

use super::declare::{at_least, nonzero, section};

section! {
    /// Background upkeep: the retention of events and the repair sweep.
    pub struct Maintenance("maintenance", heading "Maintenance"), flags MaintenanceFlags {
        /// How long event ids are kept for dedup (senders retry for about 3 days); older
        /// events, minute buckets, evaluation records and delivered outbox rows are deleted,
        /// totals stay; at least 1h.
        retention: Duration = Duration::from_secs(7 * 24 * 3600), check at_least(Duration::from_secs(3600));
        /// How often expired events are deleted.
        retention_interval: Duration = Duration::from_secs(600), check nonzero;
        /// Most events one delete statement removes (a pass runs at most 10).
        retention_batch: usize = 10_000, check nonzero;
        /// How often the repair sweep looks in Postgres for entities owed an evaluation that
        /// Redis lost.
        sweep_interval: Duration = Duration::from_secs(30), check nonzero;
        /// Most entities one sweep pass examines; the next pass continues after the last.
        sweep_batch: usize = 1000, check nonzero;
        /// How long after its last event an entity may be missing from Redis before the sweep
        /// repairs it; at least backend_timeout.
        sweep_grace: Duration = Duration::from_secs(10);
    }
}
