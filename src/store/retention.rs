//! Retention: events past the retention window go, with old minute buckets, evaluation records
//! and delivered outbox rows; totals, actions and moderator decisions are kept.

use sqlx::postgres::PgQueryResult;

use super::{Result, Store, interval};

/// Minute buckets outlive a shorter retention: the longest window needs 24 hours of them.
const BUCKETS_KEPT: std::time::Duration = std::time::Duration::from_secs(25 * 3600);

impl Store {
    /// Deletes events received more than `retention` ago, in statements of at most `batch`
    /// rows, at most `max_batches` of them, and one batch each of old minute buckets,
    /// evaluation records and delivered outbox rows; totals are not touched. Returns the
    /// number of events deleted.
    pub async fn purge_expired_events(
        &self,
        retention: std::time::Duration,
        batch: usize,
        max_batches: usize,
    ) -> Result<u64> {
        let age = interval(retention);
        let limit = batch as i64;
        // SKIP LOCKED: processes purging at the same time take different rows.
        let deleted = in_batches(batch, max_batches, || {
            sqlx::query!(
                "DELETE FROM events WHERE id IN (
                     SELECT id FROM events WHERE received_at < now() - $1::interval
                     ORDER BY received_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
                age,
                limit,
            )
            .execute(&self.pool)
        })
        .await?;
        // Minute buckets (kept at least 25h, for the 24h windows), evaluation records and
        // delivered outbox rows past the window go too, in the same bounded batches; actions
        // and moderator decisions are kept.
        let bucket_age = interval(retention.max(BUCKETS_KEPT));
        in_batches(batch, max_batches, || {
            sqlx::query!(
                "DELETE FROM signal_buckets WHERE ctid IN (
                     SELECT ctid FROM signal_buckets WHERE bucket_start < now() - $1::interval LIMIT $2)",
                bucket_age,
                limit,
            )
            .execute(&self.pool)
        })
        .await?;
        in_batches(batch, max_batches, || {
            sqlx::query!(
                "DELETE FROM evaluations WHERE id IN (
                     SELECT id FROM evaluations WHERE finished_at < now() - $1::interval
                     ORDER BY id LIMIT $2)",
                age,
                limit,
            )
            .execute(&self.pool)
        })
        .await?;
        in_batches(batch, max_batches, || {
            sqlx::query!(
                "DELETE FROM outbox WHERE id IN (
                     SELECT id FROM outbox WHERE delivered_at < now() - $1::interval
                     ORDER BY id LIMIT $2)",
                age,
                limit,
            )
            .execute(&self.pool)
        })
        .await?;
        Ok(deleted)
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
