//! Retention: events, evaluation records and minute buckets past their keep leave with their
//! whole partition (`partitions.rs`); delivered outbox rows past the window are deleted in
//! bounded batches (one row per action: a small table), and attribute minute buckets past the
//! longest window likewise; totals, actions and moderator decisions are kept.

use sqlx::postgres::PgQueryResult;

use super::{Dropped, Partitioned, Result, Store, interval};

/// Most partitions one pass analyzes: a pass stays short after a long outage of the passes
/// (every table's ended partitions are then due at once); the next passes take the rest.
const ANALYZED_PER_PASS: i64 = 4;

/// What one retention pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Purged {
    /// Events partitions sealed by this pass (usually ingest seals them first).
    pub sealed: u32,
    /// Partitions whose time is over analyzed by this pass (each once).
    pub analyzed: u32,
    /// Partitions made ahead of time, per table.
    pub made: Vec<(Partitioned, u32)>,
    pub dropped: Dropped,
    /// Delivered outbox rows deleted.
    pub outbox: u64,
    /// Attribute minute buckets past the longest window deleted.
    pub attribute_buckets: u64,
}

/// The store's handle on retention's drops (`Store::retention`).
#[derive(Clone, Copy)]
pub struct Retention<'a> {
    pub(super) store: &'a Store,
}

impl Retention<'_> {
    /// One retention pass: seals the events partitions whose time is over, makes the
    /// partitions missing ahead of time, drops those past their keep (minute buckets are kept
    /// at least 25 h, for the 24 h windows), analyzes those whose time is over (a few a pass)
    /// and deletes delivered outbox rows past the retention, in statements of at most `batch`
    /// rows, at most `max_batches` of them.
    pub async fn purge_expired(self, batch: usize, max_batches: usize) -> Result<Purged> {
        let sealed = self.store.partitions().seal_due_partitions().await?;
        let made = self.store.partitions().extend_partitions().await?;
        let dropped = self.store.partitions().drop_expired_partitions().await?;
        // After the drops: a partition past its keep is not analyzed on its way out.
        let analyzed = self
            .store
            .partitions()
            .analyze_ended_partitions(ANALYZED_PER_PASS)
            .await?;
        let age = interval(self.store.partitions.retention);
        let limit = batch as i64;
        let outbox = in_batches(batch, max_batches, || {
            sqlx::query!(
                "DELETE FROM outbox WHERE id IN (
                     SELECT id FROM outbox WHERE delivered_at < now() - $1::interval
                     ORDER BY id LIMIT $2)",
                age,
                limit,
            )
            .execute(&self.store.pool)
        })
        .await?;
        let buckets_age = interval(super::partitions::BUCKETS_KEPT);
        let attribute_buckets = in_batches(batch, max_batches, || {
            sqlx::query!(
                "DELETE FROM attribute_buckets WHERE ctid = ANY(ARRAY(
                     SELECT ctid FROM attribute_buckets
                     WHERE bucket_start < now() - $1::interval LIMIT $2))",
                buckets_age.clone(),
                limit,
            )
            .execute(&self.store.pool)
        })
        .await?;
        Ok(Purged {
            sealed,
            analyzed,
            made,
            dropped,
            outbox,
            attribute_buckets,
        })
    }
}

/// Runs a bounded DELETE (`delete`) up to `max_batches` times, stopping after one that deleted
/// fewer than `batch` rows (nothing more is due); returns how many rows went.
async fn in_batches<F, Fut>(batch: usize, max_batches: usize, mut delete: F) -> Result<u64>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = sqlx::Result<PgQueryResult>>,
{
    let mut deleted = 0;
    for _ in 0..max_batches {
        let done = delete().await?.rows_affected();
        deleted += done;
        if done < batch as u64 {
            break;
        }
    }
    Ok(deleted)
}
