//! The review queue, as the API and the console work it: list what waits, claim an item,
//! decide it. The store keeps the rules (who may claim, what a decision writes); this adds
//! what every caller shares: the claim's length, the override's, and the counts.

use std::time::Duration;

use crate::{
    domain::{Actor, ReviewDecision},
    store::{ReviewItem, ReviewOutcome, Store, StoreError},
    telemetry::names,
};

/// `by` claims item `id` for `claim_for`; an admin may claim an escalated item.
pub async fn claim(
    store: &Store,
    id: i64,
    by: &Actor,
    claim_for: Duration,
) -> Result<ReviewItem, StoreError> {
    store
        .claim_review(id, &by.name, is_admin(by), claim_for)
        .await
}

/// `by` decides item `id` on the entity as it was at `seen_version`; approve and hide hold
/// automation off for `override_for`.
pub async fn decide(
    store: &Store,
    id: i64,
    by: &Actor,
    decision: ReviewDecision,
    reason: &str,
    seen_version: i64,
    override_for: Duration,
) -> Result<ReviewOutcome, StoreError> {
    let outcome = store
        .decide_review(
            id,
            by,
            is_admin(by),
            decision,
            reason,
            seen_version,
            override_for,
        )
        .await?;
    metrics::counter!(names::REVIEW_DECISIONS, "decision" => decision.as_str()).increment(1);
    Ok(outcome)
}

/// An admin, or anyone where no API tokens are enforced (`--insecure-dev`: no role at all).
fn is_admin(by: &Actor) -> bool {
    matches!(by.role.as_deref(), None | Some("admin"))
}
