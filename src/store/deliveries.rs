//! GitHub-signed deliveries already accepted: what makes a replay of one a duplicate however
//! long after its events left retention (the scheme has no signed timestamp).

use super::{Result, Store};

impl Store {
    /// Whether a GitHub-signed request of `source` with this delivery id, or with this body,
    /// was accepted before.
    pub async fn github_delivery_seen(
        &self,
        source: &str,
        delivery_id: &str,
        body_sha256: &[u8],
    ) -> Result<bool> {
        let seen = sqlx::query_scalar!(
            r#"SELECT EXISTS (
                   SELECT 1 FROM github_deliveries
                   WHERE source = $1 AND (delivery_id = $2 OR body_sha256 = $3)
               ) AS "seen!""#,
            source,
            delivery_id,
            body_sha256,
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(seen)
    }

    /// Remembers an accepted GitHub-signed request; remembering it twice changes nothing.
    pub async fn remember_github_delivery(
        &self,
        source: &str,
        delivery_id: &str,
        body_sha256: &[u8],
    ) -> Result<()> {
        sqlx::query!(
            "INSERT INTO github_deliveries (source, delivery_id, body_sha256)
             VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING",
            source,
            delivery_id,
            body_sha256,
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
