//! GitHub-signed deliveries already accepted: what makes a replay of one a duplicate however
//! long after its events left retention (the scheme has no signed timestamp). A delivery is
//! remembered by the statement that records its events (`store/events.rs`), so it is remembered
//! exactly when they are durable.

use super::{Result, Store};

/// An accepted GitHub-signed request, as its source remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubDelivery {
    pub source: String,
    pub delivery_id: String,
    pub body_sha256: [u8; 32],
}

/// The store's handle on GitHub deliveries already accepted (`Store::deliveries`).
#[derive(Clone, Copy)]
pub struct Deliveries<'a> {
    pub(super) store: &'a Store,
}

impl Deliveries<'_> {
    /// Whether a GitHub-signed request of `source` with this delivery id, or with this body,
    /// was accepted before.
    pub async fn github_delivery_seen(
        self,
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
        .fetch_one(&self.store.pool)
        .await?;
        Ok(seen)
    }
}
