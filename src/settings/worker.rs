//! Evaluations: how many run at once, how claims are leased, and how long they may take.

use std::time::Duration;

use super::declare::{at_least, nonzero, section};

section! {
    /// Evaluations: how many run at once, how claims are leased, and how long they may take.
    pub struct Worker("worker", heading "Workers"), flags WorkerFlags {
        /// Evaluations this process runs at once; they share their Postgres statements, so more
        /// of them means fewer, larger statements.
        workers: usize = 1024, check nonzero;
        /// Longest lifetime of a claim and its entity lock without renewal; the lease in use is
        /// p99 evaluation time x 2 + 1s, within lease_floor..lease, renewed every third of it.
        lease: Duration = Duration::from_secs(30), check at_least(Duration::from_millis(300));
        /// Shortest lease, however fast evaluations are (capped at lease); the reaper runs every
        /// half of it.
        lease_floor: Duration = Duration::from_secs(1), check at_least(Duration::from_millis(300));
        /// Longest a worker sleeps when nothing is due sooner.
        poll_interval: Duration = Duration::from_millis(100), check nonzero;
        /// Most entities claimed from one shard in one script call.
        claim_batch: usize = 64, check nonzero;
        /// Base delay before a locked, busy or conflicted entity is tried again; jittered
        /// between half and all of it.
        retry_delay: Duration = Duration::from_millis(250), check nonzero;
        /// Longest one evaluation (snapshot, rules, write) may run before it is abandoned and
        /// the entity retried.
        evaluation_timeout: Duration = Duration::from_secs(10), check nonzero;
        /// How long shutdown waits for running evaluations before giving their claims back.
        shutdown_timeout: Duration = Duration::from_secs(30);
        /// Name recorded with each evaluation; the default is <hostname>-<pid>.
        #[value_name = "NAME"]
        worker_id: String = default_worker_id();
    }
}

fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "quiesce".to_owned());
    format!("{host}-{}", std::process::id())
}
