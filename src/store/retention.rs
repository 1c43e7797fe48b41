//! Retention: events past the retention window go, with old minute buckets, evaluation records
//! and delivered outbox rows; totals, actions and moderator decisions are kept.

use super::{Result, Store};

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
        let age = format!("{} milliseconds", retention.as_millis());
        let mut deleted = 0;
        for _ in 0..max_batches {
            // SKIP LOCKED: processes purging at the same time take different rows.
            let done = sqlx::query(
                "DELETE FROM events WHERE id IN (
                     SELECT id FROM events WHERE received_at < now() - $1::interval
                     ORDER BY received_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
            )
            .bind(&age)
            .bind(batch as i64)
            .execute(&self.pool)
            .await?
            .rows_affected();
            deleted += done;
            if done < batch as u64 {
                break;
            }
        }
        // Minute buckets (kept at least 25h, for the 24h windows), evaluation records and
        // delivered outbox rows past the window go too, in the same bounded batches; actions
        // and moderator decisions are kept.
        let bucket_age = format!("{} milliseconds", retention.max(BUCKETS_KEPT).as_millis());
        for (statement, age) in [
            (
                "DELETE FROM signal_buckets WHERE ctid IN (
                     SELECT ctid FROM signal_buckets WHERE bucket_start < now() - $1::interval LIMIT $2)",
                &bucket_age,
            ),
            (
                "DELETE FROM evaluations WHERE id IN (
                     SELECT id FROM evaluations WHERE finished_at < now() - $1::interval
                     ORDER BY id LIMIT $2)",
                &age,
            ),
            (
                "DELETE FROM outbox WHERE id IN (
                     SELECT id FROM outbox WHERE delivered_at < now() - $1::interval
                     ORDER BY id LIMIT $2)",
                &age,
            ),
        ] {
            for _ in 0..max_batches {
                let done = sqlx::query(statement)
                    .bind(age)
                    .bind(batch as i64)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                if done < batch as u64 {
                    break;
                }
            }
        }
        Ok(deleted)
    }
}
