//! Time partitions. `events` (by `received_at`), `evaluations` (by `finished_at`) and
//! `signal_buckets` (by `bucket_start`) are range-partitioned; the partitions are made ahead of
//! time and dropped whole once all of each is past its keep (no row-by-row delete, so neither
//! dead rows nor vacuum debt). The DDL is in SQL functions of the migration
//! (`20261215000001_partition_by_time.sql`); the `partitions` table lists what they made.
//!
//! Dedup across partitions. Postgres has no unique index on a partitioned table without the
//! partition key, so each events partition has its own unique index on `id`: two inserts of
//! one id into the same partition meet there (`ON CONFLICT DO NOTHING` takes the partition's
//! index as arbiter, and the later one waits for the earlier one's outcome). An id whose first
//! copy is in an older partition is found by the insert's check of the older partitions. That
//! check alone has a race at a boundary: a transaction received just before it (writing the old
//! partition) and one received just after (checking the old partition) would not see each
//! other's uncommitted row. The seal closes it: once a partition's time is over, it is sealed
//! (`partition_seal`: a lock that waits for every transaction still writing into it, then a
//! trigger that refuses any later insert, then `sealed_at`). Ingest's statement checks, in the
//! same snapshot as its dedup check, that every partition whose time is over is sealed; if one
//! is not, it inserts nothing and reports [`StoreError::Unsealed`], and the caller seals and
//! retries. So a transaction checking an older partition sees all its rows committed, and one
//! arriving at a sealed partition after the seal is refused (a serialization failure) and
//! retried into the new one. In steady state this costs nothing beyond the check's index
//! probes; at each boundary, one retried statement and one seal per process.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::{Result, Store, StoreError, interval};

/// The partitioned tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitioned {
    Events,
    Evaluations,
    SignalBuckets,
}

impl Partitioned {
    pub const ALL: [Partitioned; 3] = [
        Partitioned::Events,
        Partitioned::Evaluations,
        Partitioned::SignalBuckets,
    ];

    pub fn table(self) -> &'static str {
        match self {
            Partitioned::Events => "events",
            Partitioned::Evaluations => "evaluations",
            Partitioned::SignalBuckets => "signal_buckets",
        }
    }

    fn parse(table: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.table() == table)
    }
}

/// Minute buckets outlive a shorter retention: the longest window needs 24 hours of them.
pub const BUCKETS_KEPT: Duration = Duration::from_secs(25 * 3600);

/// Most partitions of one table made ahead of time.
const MAX_AHEAD: u32 = 16;

/// How the partitions are cut: derived from the retention (see [`PartitionPlan::new`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionPlan {
    /// How long events and evaluation records are kept.
    pub retention: Duration,
    /// Width of an events or evaluations partition.
    pub width: Duration,
    /// Width of a minute-bucket partition (whole minutes).
    pub bucket_width: Duration,
    /// How long the retention passes take to come round: partitions are made ahead for two
    /// of them and one partition more.
    pub upkeep_every: Duration,
}

impl PartitionPlan {
    /// The retention window cut into `slices` partitions (whole seconds; minute buckets: their
    /// keep of at least 25 h cut likewise, in whole minutes), made ahead of time for two
    /// retention passes (`upkeep_every` apart) and one partition more.
    pub fn new(retention: Duration, slices: u32, upkeep_every: Duration) -> Self {
        let slices = slices.max(1);
        let whole =
            |d: Duration, unit: u64| Duration::from_secs((d.as_secs() / unit).max(1) * unit);
        let width = whole(retention / slices, 1);
        let bucket_width = whole(retention.max(BUCKETS_KEPT) / slices, 60);
        Self {
            retention,
            width,
            bucket_width,
            upkeep_every,
        }
    }

    /// The plan the maintenance settings give.
    pub fn from_settings(settings: &crate::settings::Maintenance) -> Self {
        Self::new(
            settings.retention,
            settings.retention_partitions,
            settings.retention_interval,
        )
    }

    fn width_of(&self, table: Partitioned) -> Duration {
        match table {
            Partitioned::SignalBuckets => self.bucket_width,
            _ => self.width,
        }
    }

    /// How far past now partitions of `table` are made ahead of time: two passes' time and
    /// one partition more, but never more than 16 partitions (a short retention with a long
    /// pass interval; a write that finds none makes the next one).
    fn ahead_of(&self, table: Partitioned) -> Duration {
        let width = self.width_of(table);
        self.upkeep_every
            .saturating_mul(2)
            .min(width.saturating_mul(MAX_AHEAD - 1))
            + width
    }

    /// How long a partition of `table` is kept after its upper bound.
    fn keep_of(&self, table: Partitioned) -> Duration {
        match table {
            Partitioned::SignalBuckets => self.retention.max(BUCKETS_KEPT),
            _ => self.retention,
        }
    }
}

/// What one drop pass removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// Events in the dropped events partitions, as ANALYZE counted them (exact for partitions
    /// up to about 234 MB, estimated above).
    pub events: u64,
    /// Partitions dropped, per table.
    pub partitions: Vec<(Partitioned, String)>,
}

/// The store's handle on the time partitions: made, sealed, analyzed and dropped (`Store::partitions`).
#[derive(Clone, Copy)]
pub struct Partitions<'a> {
    pub(super) store: &'a Store,
}

impl Partitions<'_> {
    /// Makes the partitions each table lacks up to now + the plan's `ahead`; returns how many
    /// were made, per table.
    pub async fn extend_partitions(self) -> Result<Vec<(Partitioned, u32)>> {
        let mut made = Vec::new();
        for table in Partitioned::ALL {
            let n = sqlx::query_scalar!(
                r#"SELECT partitions_extend($1, $2, $3) AS "made!""#,
                table.table(),
                interval(self.store.partitions.width_of(table)),
                interval(self.store.partitions.ahead_of(table)),
            )
            .fetch_one(&self.store.pool)
            .await?;
            made.push((table, n.max(0) as u32));
        }
        Ok(made)
    }

    /// Makes and attaches the partition [`from`, `to`) of `table`; returns its name. Retention
    /// passes make the usual ones ([`Partitions::extend_partitions`]); this one is for a range of
    /// another time (tests put old rows there). It must not overlap an existing partition.
    pub async fn add_partition(
        self,
        table: Partitioned,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<String> {
        let name = sqlx::query_scalar!(
            r#"SELECT partition_add($1, $2, $3) AS "name!""#,
            table.table(),
            from,
            to,
        )
        .fetch_one(&self.store.pool)
        .await?;
        Ok(name)
    }

    /// Seals every events partition whose time is over and is not sealed yet, oldest first;
    /// returns how many this call sealed (another process may have sealed some).
    pub async fn seal_due_partitions(self) -> Result<u32> {
        let due = sqlx::query_scalar!(
            "SELECT name FROM partitions
             WHERE parent = 'events' AND upper_bound <= now() AND sealed_at IS NULL
             ORDER BY upper_bound"
        )
        .fetch_all(&self.store.pool)
        .await?;
        let mut sealed = 0;
        for name in due {
            // Its own transaction: it holds nothing while it waits for the partition's writers.
            let done = sqlx::query_scalar!(r#"SELECT partition_seal($1) AS "sealed!""#, name)
                .fetch_one(&self.store.pool)
                .await?;
            sealed += u32::from(done);
        }
        Ok(sealed)
    }

    /// Analyzes the partitions whose time is over (events ones once sealed) and that were not
    /// analyzed yet, oldest first, at most `at_most` of them; returns how many this call did.
    /// Their final size then reaches the planner and the plans cached while they were small
    /// are made again (the migration `20270126000002` says why quiesce does not leave it to
    /// autovacuum). A partition another process is analyzing is left to it.
    pub async fn analyze_ended_partitions(self, at_most: i64) -> Result<u32> {
        let due = sqlx::query_scalar!(
            "SELECT name FROM partitions
             WHERE analyzed_at IS NULL AND upper_bound <= now()
               AND (parent <> 'events' OR sealed_at IS NOT NULL)
             ORDER BY upper_bound LIMIT $1",
            at_most
        )
        .fetch_all(&self.store.pool)
        .await?;
        let mut analyzed = 0;
        for name in due {
            // Its own transaction: ANALYZE reads a sample of a partition no one writes to.
            let done = sqlx::query_scalar!(r#"SELECT partition_analyze($1) AS "done!""#, name)
                .fetch_one(&self.store.pool)
                .await?;
            analyzed += u32::from(done);
        }
        Ok(analyzed)
    }

    /// What a write that failed for want of a partition needs: due partitions sealed, missing
    /// ones made.
    pub async fn turn_over(self) -> Result<()> {
        self.seal_due_partitions().await?;
        self.extend_partitions().await?;
        Ok(())
    }

    /// Runs `attempt`, and again after [`Partitions::turn_over`] when it failed for want of a
    /// partition ([`StoreError::needs_turnover`]), at most three times in all: the store's own
    /// writes (the fold's buckets). A use case's transaction retries in the use case
    /// (`moderation::retried_at_turnover`).
    pub(super) async fn with_turnover<T, F, Fut>(self, mut attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut tries = 1;
        loop {
            match attempt().await {
                Err(error) if tries < 3 && error.needs_turnover() => {
                    tracing::debug!(error = %crate::telemetry::Chain(&error), "partition turnover, retrying");
                    self.turn_over().await?;
                    tries += 1;
                }
                outcome => return outcome,
            }
        }
    }

    /// Drops every partition whose upper bound is past its table's keep (events partitions
    /// only once sealed), oldest first. Each is counted (events only), detached concurrently
    /// (the parent stays open to inserts and reads meanwhile), then its table dropped. One
    /// process at a time (a session advisory lock); the others skip the drops.
    pub async fn drop_expired_partitions(self) -> Result<Dropped> {
        let mut connection = self.store.pool.acquire().await?;
        let taken = sqlx::query_scalar!(
            r#"SELECT pg_try_advisory_lock(hashtext('quiesce.partitions'), hashtext('drop'))
               AS "taken!""#
        )
        .fetch_one(&mut *connection)
        .await?;
        if !taken {
            return Ok(Dropped::default());
        }
        let dropped = self.drop_expired_on(&mut connection).await;
        let unlocked = sqlx::query_scalar!(
            r#"SELECT pg_advisory_unlock(hashtext('quiesce.partitions'), hashtext('drop'))
               AS "unlocked!""#
        )
        .fetch_one(&mut *connection)
        .await;
        if unlocked.is_err() {
            // Closing the connection lets go of the lock.
            connection.close_on_drop();
        }
        dropped
    }

    async fn drop_expired_on(self, connection: &mut PgConnection) -> Result<Dropped> {
        let plan = &self.store.partitions;
        let due = sqlx::query!(
            "SELECT name, parent FROM partitions
             WHERE upper_bound <= now() - CASE parent WHEN 'signal_buckets' THEN $2::interval
                                                      ELSE $1::interval END
               AND (parent <> 'events' OR sealed_at IS NOT NULL)
             ORDER BY upper_bound",
            interval(plan.keep_of(Partitioned::Events)),
            interval(plan.keep_of(Partitioned::SignalBuckets)),
        )
        .fetch_all(&mut *connection)
        .await?;
        let mut dropped = Dropped::default();
        for row in due {
            let table = Partitioned::parse(&row.parent).ok_or_else(|| {
                StoreError::Corrupt(super::Corruption {
                    what: format!("partition {} of unknown table {}", row.name, row.parent),
                    source: None,
                })
            })?;
            // An events partition goes only once every event in it is folded (sealed, it takes
            // no new rows, so that stays true). Its entities are folded here if need be; one a
            // fold could not finish (a row held, a transaction open since) waits a pass.
            if table == Partitioned::Events && !self.fold_partition(&row.name).await? {
                tracing::info!(partition = %row.name, "events partition kept: not all folded yet");
                continue;
            }
            if table == Partitioned::Events {
                let rows = sqlx::query_scalar!(r#"SELECT partition_rows($1) AS "rows!""#, row.name)
                    .fetch_one(&mut *connection)
                    .await?;
                dropped.events += rows.max(0) as u64;
            }
            detach(connection, table, &row.name).await?;
            sqlx::query!("SELECT partition_forget($1)", row.name)
                .execute(&mut *connection)
                .await?;
            dropped.partitions.push((table, row.name));
        }
        Ok(dropped)
    }
}

impl Partitions<'_> {
    /// Folds the entities with unfolded events in this events partition; true once none is
    /// left.
    async fn fold_partition(self, name: &str) -> Result<bool> {
        const PAGE: i64 = 1000;
        // A fold that could not fold everything met rows held elsewhere, or events of
        // transactions newer than one still open somewhere in the database: both end soon.
        const ROUNDS: u32 = 10;
        for round in 0..ROUNDS {
            // One walk over the partition's entities in id order, a page at a time.
            let mut after = String::new();
            loop {
                let entities = self.store.fold().unfolded_in(name, &after, PAGE).await?;
                let Some(last) = entities.last() else { break };
                after = last.clone();
                let names: Vec<&str> = entities.iter().map(String::as_str).collect();
                self.store.fold().entities(&names, 1).await?;
            }
            if self.store.fold().unfolded_in(name, "", 1).await?.is_empty() {
                return Ok(true);
            }
            tokio::time::sleep(Duration::from_millis(100 * u64::from(round + 1))).await;
        }
        Ok(false)
    }
}

/// Detaches a partition concurrently, or finishes a detach that was cut short.
async fn detach(connection: &mut PgConnection, table: Partitioned, name: &str) -> Result<()> {
    let state = sqlx::query_scalar!(r#"SELECT partition_state($1) AS "state!""#, name)
        .fetch_one(&mut *connection)
        .await?;
    let how = match state.as_str() {
        "attached" => "CONCURRENTLY",
        "detaching" => "FINALIZE",
        _ => return Ok(()),
    };
    // The only statement with a computed name: DETACH ... CONCURRENTLY cannot run in a
    // function (nor any transaction block). The name comes from the partitions table and is
    // checked to be one the migration's functions make.
    let statement = format!(
        "ALTER TABLE {} DETACH PARTITION {} {how}",
        table.table(),
        checked_name(table, name)?
    );
    sqlx::query(&statement).execute(&mut *connection).await?;
    Ok(())
}

/// A partition name as `partition_add` makes them (`<table>_p<digits>_<digits>`) or the
/// migration kept (`<table>_legacy`): nothing that needs quoting.
fn checked_name(table: Partitioned, name: &str) -> Result<String> {
    let rest = name.strip_prefix(table.table()).unwrap_or("");
    let ok = rest == "_legacy"
        || rest.strip_prefix("_p").is_some_and(|stamp| {
            let (day, time) = stamp.split_once('_').unwrap_or(("", ""));
            day.len() == 8
                && time.len() == 6
                && day.bytes().chain(time.bytes()).all(|b| b.is_ascii_digit())
        });
    if ok {
        Ok(name.to_owned())
    } else {
        Err(StoreError::Corrupt(super::Corruption {
            what: format!("the partition name {name:?} of {}", table.table()),
            source: None,
        }))
    }
}

/// An error that may say a write failed for want of a partition: the one who holds the attempt
/// (`moderation::retried_at_turnover`) then has the partitions turned over and tries again.
pub trait TurnoverRetry: std::error::Error {
    fn needs_turnover(&self) -> bool;
}

impl TurnoverRetry for StoreError {
    fn needs_turnover(&self) -> bool {
        StoreError::needs_turnover(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_cuts_the_retention_into_slices() {
        let day = Duration::from_secs(24 * 3600);
        let plan = PartitionPlan::new(7 * day, 7, Duration::from_secs(600));
        assert_eq!(plan.width, day);
        assert_eq!(plan.bucket_width, day);
        assert_eq!(
            plan.ahead_of(Partitioned::Events),
            Duration::from_secs(1200) + day
        );
        // A test retention of minutes: buckets keep their 25 h, cut in whole minutes.
        let plan = PartitionPlan::new(Duration::from_secs(180), 4, Duration::from_secs(5));
        assert_eq!(plan.width, Duration::from_secs(45));
        assert_eq!(plan.bucket_width, Duration::from_secs(6 * 3600 + 15 * 60));
        assert_eq!(plan.keep_of(Partitioned::SignalBuckets), BUCKETS_KEPT);
        assert_eq!(plan.ahead_of(Partitioned::Events), Duration::from_secs(55));
        // Never more than 16 partitions ahead.
        let plan = PartitionPlan::new(Duration::from_secs(60), 30, Duration::from_secs(600));
        assert_eq!(plan.width, Duration::from_secs(2));
        assert_eq!(plan.ahead_of(Partitioned::Events), Duration::from_secs(32));
    }

    #[test]
    fn only_names_the_functions_make_are_used_in_a_statement() {
        let events = Partitioned::Events;
        assert!(checked_name(events, "events_p20261201_210000").is_ok());
        assert!(checked_name(events, "events_legacy").is_ok());
        assert!(
            checked_name(
                Partitioned::SignalBuckets,
                "signal_buckets_p20261201_210000"
            )
            .is_ok()
        );
        for bad in [
            "events_p2026120_210000",
            "events_p20261201_21000x",
            "evaluations_p20261201_210000",
            "events_p20261201_210000; DROP TABLE entities",
            "events",
        ] {
            assert!(checked_name(events, bad).is_err(), "{bad}");
        }
    }
}
