//! Background upkeep: the retention of events and the repair sweep.

use std::time::Duration;

use super::declare::{nonzero, section, within};

section! {
    /// Background upkeep: the retention of events and the repair sweep.
    pub struct Maintenance("maintenance", heading "Maintenance"), flags MaintenanceFlags {
        /// How long events are kept, and so how long event ids are remembered for dedup
        /// (senders retry for about 3 days). Events, evaluation records and minute buckets
        /// (those kept at least 25h) leave with whole time partitions, at most
        /// retention/retention_partitions after the window; delivered outbox rows are deleted;
        /// totals, actions and moderator decisions stay; at least 1h (test_short_retention
        /// aside).
        retention: Duration = Duration::from_secs(7 * 24 * 3600), check nonzero;
        /// How many partitions the retention window is cut into: more leave old events closer
        /// to the retention, fewer make each new event's dedup check probe fewer partitions
        /// (about this many); 1 to 32.
        retention_partitions: u32 = 4, check within(1, 32);
        /// TEST ONLY, never in production: lets retention go down to 1 minute (the retention
        /// run, tests); a process started with it warns.
        test_short_retention: bool = false;
        /// How often a retention pass runs: it makes partitions ahead of time (for two passes
        /// and one partition more), seals the events partitions whose time is over and drops
        /// those past the retention.
        retention_interval: Duration = Duration::from_secs(600), check nonzero;
        /// Most delivered outbox rows one delete statement removes (a pass runs at most 10).
        retention_batch: usize = 10_000, check nonzero;
        /// How long the audit trail keeps a decision (GET /v1/audit); the retention pass
        /// removes older ones; at least 1 day.
        audit_retention: Duration = Duration::from_secs(400 * 24 * 3600), check nonzero;
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
