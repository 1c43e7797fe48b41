//! The review queue, as the API and the console work it: list what waits, claim an item,
//! decide it. The rules of who may claim or decide are here, as typed refusals the edges map
//! to their answers: each step is one transaction this module holds, in which the store locks
//! the item's row, shows it, and writes. This adds
//! what every caller shares too: the claim's length, the override's, and the counts.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::{
    domain::{Actor, EntityId, ReviewDecision},
    rules::RuleSet,
    store::{LockedReviewItem, ReviewDecided, ReviewItem, ReviewOutcome, Store, StoreError},
    telemetry::names,
};

/// The step of the queue an escalated item keeps for admins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewStep {
    Claim,
    Decide,
}

impl ReviewStep {
    fn verb(self) -> &'static str {
        match self {
            ReviewStep::Claim => "claims",
            ReviewStep::Decide => "decides",
        }
    }
}

/// Why a moderator may not claim or decide an item as it is now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewRefusal {
    #[error("review item {item} was escalated; an admin {}", step.verb())]
    Escalated { item: i64, step: ReviewStep },
    /// A claim refused: another moderator's claim lasts.
    #[error("review item {item} is claimed by {by} until {}", until.map(|t| t.to_rfc3339()).unwrap_or_default())]
    ClaimedByAnother {
        item: i64,
        by: String,
        until: Option<DateTime<Utc>>,
    },
    /// A claim refused: the item was decided or its flag reversed.
    #[error("review item {item} is not waiting: it was decided or its flag reversed")]
    NotWaiting { item: i64 },
    #[error("review item {item} is decided already")]
    AlreadyDecided { item: i64 },
    #[error("the flag of review item {item} was reversed; nothing is left to decide")]
    FlagReversed { item: i64 },
    /// A decision refused: the moderator holds no live claim (`holder`: who does).
    #[error("{}", match holder {
        Some(holder) => format!("review item {item} is claimed by {holder}"),
        None => format!("claim review item {item} before deciding it"),
    })]
    NotClaimed { item: i64, holder: Option<String> },
    /// A decision refused: the entity moved on from the version the moderator saw.
    #[error("moderation version changed since the snapshot (read {read})")]
    EntityChanged { read: i64 },
}

/// Why a claim or a decision was not made: the rule refused, or the store failed.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error(transparent)]
    Refused(#[from] ReviewRefusal),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `by` claims item `id` for `claim_for`; an admin may claim an escalated item.
pub async fn claim(
    store: &Store,
    id: i64,
    by: &Actor,
    claim_for: Duration,
) -> Result<ReviewItem, ReviewError> {
    let mut tx = store.begin().await?;
    let locked = tx.lock_review_item(id).await?;
    may_claim(&locked, &by.name, is_admin(by))?;
    tx.claim_review(id, &by.name, claim_for).await?;
    tx.commit().await?;
    Ok(store.review().existing_review_item(id).await?)
}

/// A moderator's decision on a review item, as they ask it: `by` decides item `id` on the
/// entity as it was at `seen_version`; approve and hide hold automation off for `override_for`.
#[derive(Debug, Clone, Copy)]
pub struct ItemDecision<'a> {
    pub id: i64,
    pub by: &'a Actor,
    pub decision: ReviewDecision,
    pub reason: &'a str,
    pub seen_version: i64,
    pub override_for: Duration,
}

/// Decides an item as `request` asks, if the rule allows it on the item and its entity as
/// their locked rows hold them; a hide gets its statement of reasons on `rules`.
pub async fn decide(
    store: &Store,
    rules: &RuleSet,
    request: ItemDecision<'_>,
) -> Result<ReviewOutcome, ReviewError> {
    let ItemDecision {
        id,
        by,
        decision,
        reason,
        seen_version,
        override_for,
    } = request;
    let mut tx = store.begin().await?;
    let mut locked = tx.lock_review_item(id).await?;
    tx.lock_review_entity(&mut locked).await?;
    may_decide(&locked, &by.name, is_admin(by), seen_version)?;
    // A hide is the moderator's restricting decision, brought to them by automation.
    let statement = decision.sets().and_then(|status| {
        let entity = EntityId::parse(&locked.item.entity).ok()?;
        rules.moderator_statement(&entity, status, reason, true, None)
    });
    let decided = ReviewDecided {
        by,
        decision,
        reason,
        override_for,
        statement: statement.as_ref(),
    };
    let outcome = tx.decide_review(&locked.item, &decided).await?;
    tx.commit().await?;
    metrics::counter!(names::REVIEW_DECISIONS, "decision" => decision.as_str()).increment(1);
    Ok(outcome)
}

/// A claim waits on an item not decided, its flag standing, held by no one else (claiming
/// again extends one's own claim), and escalated only for an admin.
fn may_claim(locked: &LockedReviewItem, moderator: &str, admin: bool) -> Result<(), ReviewRefusal> {
    let item = &locked.item;
    let escalated = item.escalated_at.is_some() && !admin;
    let held = item.claimed_by.as_deref().filter(|by| *by != moderator);
    if escalated {
        return Err(ReviewRefusal::Escalated {
            item: item.id,
            step: ReviewStep::Claim,
        });
    }
    if let Some(holder) = held {
        return Err(ReviewRefusal::ClaimedByAnother {
            item: item.id,
            by: holder.to_owned(),
            until: item.claim_until,
        });
    }
    if locked.decided || locked.flag_reversed {
        return Err(ReviewRefusal::NotWaiting { item: item.id });
    }
    Ok(())
}

/// A decision is made on an item still waiting (escalated: by an admin), by the moderator who
/// holds its claim, on the entity's version they saw.
fn may_decide(
    locked: &LockedReviewItem,
    moderator: &str,
    admin: bool,
    seen_version: i64,
) -> Result<(), ReviewRefusal> {
    let item = &locked.item;
    if locked.decided {
        return Err(ReviewRefusal::AlreadyDecided { item: item.id });
    }
    if locked.flag_reversed {
        return Err(ReviewRefusal::FlagReversed { item: item.id });
    }
    if item.escalated_at.is_some() && !admin {
        return Err(ReviewRefusal::Escalated {
            item: item.id,
            step: ReviewStep::Decide,
        });
    }
    if item.claimed_by.as_deref() != Some(moderator) {
        return Err(ReviewRefusal::NotClaimed {
            item: item.id,
            holder: item.claimed_by.clone(),
        });
    }
    if item.moderation_version != seen_version {
        return Err(ReviewRefusal::EntityChanged {
            read: item.moderation_version,
        });
    }
    Ok(())
}

/// An admin, or anyone where no API tokens are enforced (`--insecure-dev`: no role at all).
fn is_admin(by: &Actor) -> bool {
    matches!(by.role.as_deref(), None | Some("admin"))
}
