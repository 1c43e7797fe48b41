//! Postgres, the source of truth (and a read replica), and how long any backend call may take.

use std::time::Duration;

use crate::credentials::ServiceUrl;

use super::declare::{nonzero, section};

section! {
    /// Postgres, the source of truth, and how long any backend call may take.
    pub struct Database("database", heading "Postgres"), flags DatabaseFlags {
        /// Postgres connection URL, the source of truth; the database is created if missing.
        #[value_name = "URL"]
        database_url: ServiceUrl = ServiceUrl::from("postgres://postgres@127.0.0.1:5432/quiesce");
        /// Postgres pool size per process.
        db_max_connections: u32 = 16, check nonzero;
        /// Longest wait for Redis or Postgres before answering 503 or retrying; also Postgres'
        /// statement_timeout for every connection (migrations run without one).
        backend_timeout: Duration = Duration::from_secs(5), check nonzero;
        /// A streaming replica's Postgres URL (a proxy's read-only port, say): reads that may be
        /// a moment stale go there (the read API, the audit trail, the console's lists and
        /// charts, backtests and sweeps); none: every read on the primary.
        #[value_name = "URL"]
        database_read_url: Option<ServiceUrl> = None;
        /// Longest replay lag of the read replica: past it, or while it does not answer, its
        /// reads go to the primary until it catches up.
        read_max_lag: Duration = Duration::from_secs(5), check nonzero;
    }
}
