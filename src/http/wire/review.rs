//! The review queue: an item, and a decision on it.

use chrono::{DateTime, Utc};

use super::wire;
use crate::{domain::ReviewDecision, store};

wire! {
    /// One waiting item, with the entity as it is now.
    pub struct ReviewItem from store::ReviewItem {
        /// The flag action's id, which is the item's.
        pub id: i64,
        pub entity: String,
        pub rule: String,
        pub reason: String,
        /// When automation flagged it: the item waits from then.
        pub flagged_at: DateTime<Utc>,
        /// The entity's status and version now; a decision names the version it was made on.
        pub status: String,
        pub moderation_version: i64,
        /// Who holds the claim, while it lasts.
        pub claimed_by: Option<String>,
        pub claim_until: Option<DateTime<Utc>>,
        /// Escalated to an admin: only an admin may claim it now.
        pub escalated_at: Option<DateTime<Utc>>,
    }
}

wire! {
    /// A decision as recorded.
    pub struct ReviewOutcome from store::ReviewOutcome {
        pub item: i64,
        pub entity: String,
        pub decision: ReviewDecision,
        /// The moderator's action, when the decision changed the status (not for `escalate`).
        pub action_id: Option<i64>,
        pub status: String,
        pub moderation_version: i64,
    }
}
