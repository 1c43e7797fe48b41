//! What was done to an entity: applied actions, a reversal, a timer ended early, a moderator's
//! override, a rule's label.

use chrono::{DateTime, Utc};

use super::wire;
use crate::{domain::Status, store};

wire! {
    pub struct ActionRecord from store::ActionRecord {
        pub id: i64,
        pub entity: String,
        pub action: String,
        pub rule: String,
        pub reason: String,
        pub previous_status: String,
        pub new_status: String,
        pub applied_version: i64,
        pub dedup_key: String,
        pub created_at: DateTime<Utc>,
        /// The snapshot the rules decided on.
        #[schema(value_type = Object)]
        pub snapshot: serde_json::Value,
        pub reversed_at: Option<DateTime<Utc>>,
        pub reversed_by: Option<String>,
        pub reversal_reason: Option<String>,
        /// Once reversed, where the reversal came from: `review` (a moderator's own) or `appeal`
        /// (an upheld appeal).
        pub reversal_source: Option<String>,
        /// The rules version in force when an evaluation applied it (null: applied before rules
        /// versions, or not by an evaluation: a review decision, a timer ended early).
        pub rules_version: Option<i64>,
    }
}

wire! {
    /// A reversal as recorded: the action, and the entity's state after it.
    pub struct Reversal from store::Reversal {
        pub action: ActionRecord,
        pub status: Status,
        pub moderation_version: i64,
        pub override_until: DateTime<Utc>,
    }
}

wire! {
    /// A moderator's early end of a timer, as recorded: the restore action and the entity's state.
    pub struct EndedTimer from store::EndedTimer {
        /// The restore action.
        pub action_id: i64,
        pub status: Status,
        pub moderation_version: i64,
        /// When the timer would have ended.
        pub was_to_end_at: DateTime<Utc>,
    }
}

wire! {
    /// A moderator's decision that automation does not escalate past until it expires.
    pub struct Override from store::Override {
        pub status: Status,
        pub until: DateTime<Utc>,
        pub by: String,
        pub reason: String,
    }
}

wire! {
    /// A label a live rule recorded on an entity: once, without changing its status.
    pub struct LabelRecord from store::LabelRecord {
        pub label: String,
        pub rule: String,
        pub reason: String,
        pub created_at: DateTime<Utc>,
    }
}
