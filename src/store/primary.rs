//! The primary quiesce writes on. Behind one address (a proxy that follows the leader, a managed
//! database's endpoint) the server can change under a connection pool: a standby is promoted, an
//! old primary comes back read-only or in recovery, or, in a split brain, comes back writable on
//! the timeline it had before a standby was promoted past it. quiesce takes none of them for a
//! primary:
//! - every new connection asks what it reached ([`check_new_connection`]); a server in recovery,
//!   a read-only one, or a primary on an older timeline than one this process has written on
//!   (Postgres raises the timeline at every promotion) is refused, which its callers see as an
//!   outage (503, a paused worker), never as an entity's failure;
//! - an error that shows a pooled connection reaches a server that cannot write (SQLSTATE 25006,
//!   or the breaker's probe finding it read-only) retires every connection opened before it
//!   ([`Fence::retire`]): the pool drops them at their next acquire and connects again,
//!   through the same address, to whatever is the primary now.
//!
//! The fence belongs to the pool it guards ([`Fence`], made with the pool by `connect` and kept
//! by its `Store`): what one pool learns never retires another's connections. Its memory is per
//! database system (its `system_identifier`: a primary and its standbys share it, another
//! cluster does not).

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use sqlx::{PgConnection, pool::PoolConnectionMetadata};

/// Why a connection's server is not taken for the primary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotPrimary {
    #[error("the database server is in recovery (a standby): it takes no writes")]
    InRecovery,
    #[error("the database server is read-only (default_transaction_read_only is on)")]
    ReadOnly,
    #[error(
        "the database server is a stale primary: it is on timeline {found}, and this process has written on timeline {written} of the same database system; refused until the address leads to the current primary"
    )]
    StaleTimeline { found: u32, written: u32 },
}

/// What a connection's server says of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ServerRole {
    pub(super) system: i64,
    pub(super) in_recovery: bool,
    pub(super) read_only: bool,
    /// The timeline it writes on; none in recovery.
    pub(super) timeline: Option<u32>,
}

/// One pool's fence: the highest timeline seen per database system, and the instant before
/// which every connection of the pool is retired.
pub(super) struct Fence {
    highest: Mutex<HashMap<i64, u32>>,
    /// The last refusal, logged once until a primary is admitted again.
    refused: Mutex<Option<NotPrimary>>,
    epoch: Instant,
    /// Nanoseconds since `epoch`: connections opened before it are closed at their next acquire.
    retired_before: AtomicU64,
    /// Nanoseconds since `epoch` of the last refusal (a connection refused, or a read-only
    /// answer): what tells a caller that waited meanwhile that the primary was away.
    last_refused: AtomicU64,
}

impl Fence {
    pub(super) fn new() -> Self {
        Self {
            highest: Mutex::new(HashMap::new()),
            refused: Mutex::new(None),
            epoch: Instant::now(),
            retired_before: AtomicU64::new(0),
            last_refused: AtomicU64::new(0),
        }
    }

    /// Takes a server's answer: a primary on the highest timeline seen (raising it when higher:
    /// connections opened before it reached the old one, so they are retired), or the refusal.
    fn admit(&self, role: ServerRole) -> Result<(), NotPrimary> {
        if role.in_recovery {
            return Err(NotPrimary::InRecovery);
        }
        if role.read_only {
            return Err(NotPrimary::ReadOnly);
        }
        let Some(found) = role.timeline else {
            return Err(NotPrimary::InRecovery);
        };
        let mut highest = self.highest.lock().expect("not poisoned");
        let written = highest.entry(role.system).or_insert(found);
        if found < *written {
            return Err(NotPrimary::StaleTimeline {
                found,
                written: *written,
            });
        }
        if found > *written {
            tracing::warn!(
                from = *written,
                to = found,
                "the database moved to a new timeline (a standby was promoted); connections to the old primary are retired"
            );
            *written = found;
            self.retire();
        }
        Ok(())
    }

    /// Logs a refusal when it differs from the last one, and the primary's return once.
    fn log(&self, verdict: &Result<(), NotPrimary>) {
        let mut refused = self.refused.lock().expect("not poisoned");
        match verdict {
            Err(refusal) if refused.as_ref() != Some(refusal) => {
                tracing::warn!(%refusal, "connection refused: not the primary; retrying through the same address");
                *refused = Some(refusal.clone());
            }
            Err(_) => {}
            Ok(()) => {
                if refused.take().is_some() {
                    tracing::info!("connected to a primary again");
                }
            }
        }
    }

    /// Every connection opened until now is closed at its next acquire.
    pub(super) fn retire(&self) {
        let now = self.epoch.elapsed().as_nanos() as u64;
        self.retired_before.fetch_max(now, Ordering::Relaxed);
        self.refused();
    }

    fn refused(&self) {
        let now = self.epoch.elapsed().as_nanos() as u64;
        self.last_refused.fetch_max(now, Ordering::Relaxed);
    }

    /// Whether the primary refused a connection, or answered read-only, at or after `since`: a
    /// caller that waited that long waited on an outage, not on its own work.
    pub(super) fn refused_since(&self, since: Instant) -> bool {
        let refused = self.last_refused.load(Ordering::Relaxed);
        refused != 0 && refused >= since.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    /// Whether a connection of this age was opened before the last retirement.
    fn is_retired(&self, age: Duration) -> bool {
        let retired_before = self.retired_before.load(Ordering::Relaxed);
        if retired_before == 0 {
            return false;
        }
        let opened = self.epoch.elapsed().saturating_sub(age).as_nanos() as u64;
        opened <= retired_before
    }
}

/// The pool's `after_connect`: asks the new connection's server what it is and refuses it
/// unless it is the primary (see the module's comment).
pub(super) async fn check_new_connection(
    fence: &Fence,
    connection: &mut PgConnection,
) -> sqlx::Result<()> {
    let row = sqlx::query!(
        r#"SELECT system_identifier AS "system!",
                  pg_is_in_recovery() AS "in_recovery!",
                  current_setting('transaction_read_only') = 'on' AS "read_only!",
                  CASE WHEN pg_is_in_recovery() THEN NULL
                       ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int
                  END AS "timeline: i32"
           FROM pg_control_system()"#
    )
    .fetch_one(&mut *connection)
    .await?;
    let role = ServerRole {
        system: row.system,
        in_recovery: row.in_recovery,
        read_only: row.read_only,
        timeline: row.timeline.and_then(|t| u32::try_from(t).ok()),
    };
    // The pool retries a refused connection until its acquire timeout: logged once.
    let verdict = fence.admit(role);
    fence.log(&verdict);
    if verdict.is_err() {
        fence.refused();
    }
    verdict.map_err(|refusal| sqlx::Error::Io(std::io::Error::other(refusal)))
}

/// The pool's `before_acquire`: a connection opened before the last retirement is closed.
pub(super) fn still_current(fence: &Fence, meta: &PoolConnectionMetadata) -> bool {
    !fence.is_retired(meta.age)
}

impl Fence {
    /// An error that shows the connection reached a server that takes no writes: a read-only
    /// transaction refused a write (25006), or the server is shutting down or in recovery
    /// (57P01, 57P03). Its connection, and every one of the pool opened before it, is retired.
    pub(super) fn notice(&self, error: &sqlx::Error) {
        if let sqlx::Error::Database(db) = error
            && db
                .code()
                .is_some_and(|code| matches!(&*code, "25006" | "57P01" | "57P03"))
        {
            self.retire();
        }
    }
}

/// The refusal an error carries, if the fence refused its connection.
pub fn refusal(error: &sqlx::Error) -> Option<&NotPrimary> {
    match error {
        sqlx::Error::Io(io) => io.get_ref()?.downcast_ref::<NotPrimary>(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence() -> Fence {
        Fence::new()
    }

    fn primary(system: i64, timeline: u32) -> ServerRole {
        ServerRole {
            system,
            in_recovery: false,
            read_only: false,
            timeline: Some(timeline),
        }
    }

    #[test]
    fn a_primary_on_an_older_timeline_of_the_same_system_is_refused() {
        let fence = fence();
        assert_eq!(fence.admit(primary(7, 2)), Ok(()));
        assert_eq!(fence.admit(primary(7, 3)), Ok(()));
        assert_eq!(
            fence.admit(primary(7, 2)),
            Err(NotPrimary::StaleTimeline {
                found: 2,
                written: 3
            })
        );
        // Another database system (another cluster) has its own timelines.
        assert_eq!(fence.admit(primary(8, 1)), Ok(()));
        assert_eq!(fence.admit(primary(7, 3)), Ok(()));
    }

    #[test]
    fn a_standby_or_a_read_only_server_is_refused() {
        let fence = fence();
        let standby = ServerRole {
            in_recovery: true,
            timeline: None,
            ..primary(7, 1)
        };
        assert_eq!(fence.admit(standby), Err(NotPrimary::InRecovery));
        let read_only = ServerRole {
            read_only: true,
            ..primary(7, 1)
        };
        assert_eq!(fence.admit(read_only), Err(NotPrimary::ReadOnly));
    }

    #[test]
    fn a_new_timeline_retires_the_connections_opened_before_it() {
        let fence = fence();
        fence.admit(primary(7, 1)).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        assert!(!fence.is_retired(Duration::from_millis(1)));
        fence.admit(primary(7, 2)).unwrap();
        // Opened before the promotion was seen: retired; opened after: kept.
        assert!(fence.is_retired(Duration::from_millis(1)));
        assert!(!fence.is_retired(Duration::ZERO));
    }

    #[test]
    fn a_refusal_is_seen_by_whoever_waited_since_before_it() {
        let fence = fence();
        let before = Instant::now();
        assert!(!fence.refused_since(before));
        let standby = ServerRole {
            in_recovery: true,
            timeline: None,
            ..primary(7, 1)
        };
        assert!(fence.admit(standby).is_err());
        fence.refused();
        assert!(fence.refused_since(before));
        std::thread::sleep(Duration::from_millis(2));
        assert!(!fence.refused_since(Instant::now()));
    }

    #[test]
    fn the_refusal_is_found_again_in_the_error_it_becomes() {
        let error = sqlx::Error::Io(std::io::Error::other(NotPrimary::ReadOnly));
        assert_eq!(refusal(&error), Some(&NotPrimary::ReadOnly));
        assert!(super::super::is_unavailable(&error));
    }
}
