//! The open-files limit against what the API may hold open. Each connection is a file; past
//! the limit, accept() fails with EMFILE and a loaded process stops taking connections with
//! nothing but a log line. So `serve` checks at startup: it raises its soft limit as far as
//! needed (the hard limit allows that without privilege), or refuses to start with what to
//! change.

use anyhow::bail;
use rlimit::Resource;

use crate::settings::Settings;

/// Files besides the API's connections and the Postgres pool: Redis connections, the metrics
/// listener, outbound webhook connections, the process' own files.
const RESERVED_FILES: u64 = 256;

/// Open files `serve` may need with these settings.
pub fn files_needed(settings: &Settings) -> u64 {
    settings.http.max_connections as u64
        + u64::from(settings.database.db_max_connections)
        + RESERVED_FILES
}

/// Raises the soft open-files limit to what `settings` need, within the hard limit; an error
/// when the hard limit is below it. Returns the soft limit in force.
pub fn ensure_open_files(settings: &Settings) -> anyhow::Result<u64> {
    let needed = files_needed(settings);
    let (soft, hard) = Resource::NOFILE.get()?;
    if soft >= needed {
        return Ok(soft);
    }
    if hard < needed {
        bail!(
            "max_connections ({max}, QUIESCE_MAX_CONNECTIONS) and the database pool ({pool}, \
             QUIESCE_DB_MAX_CONNECTIONS) need {needed} open files, and this process may open at \
             most {hard} (its hard limit; soft {soft}): raise the limit (LimitNOFILE= in a \
             systemd unit, ulimit -n in a shell, --ulimit nofile= for a container) or lower \
             max_connections",
            max = settings.http.max_connections,
            pool = settings.database.db_max_connections,
        );
    }
    Resource::NOFILE.set(needed, hard)?;
    tracing::info!(
        from = soft,
        to = needed,
        hard,
        "raised the open-files limit for max_connections"
    );
    Ok(needed)
}
