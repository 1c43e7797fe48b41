//! Statements of reasons, and appeals against them.

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::wire;
use crate::store;

wire! {
    /// A stored statement.
    pub struct StatementRecord from store::StatementRecord {
        pub id: i64,
        /// The platform unique identifier the Transparency Database knows it by.
        pub puid: String,
        pub entity: String,
        /// The action it explains; none for a moderator's override, a reversal or a label.
        pub action_id: Option<i64>,
        /// The rule that decided; none for a moderator.
        pub rule: Option<String>,
        /// `automated`, `review`, `override` or `reversal` ([`DecidedBy`]).
        pub decided_by: String,
        pub previous_status: String,
        /// The status the decision set.
        pub status: String,
        pub created_at: DateTime<Utc>,
        /// The statement in the Transparency Database's schema in force (API v1 since 2025-07-01),
        /// and quiesce's own `quiesce_url`, `quiesce_ends_at` and `quiesce_keywords` (never sent
        /// to the database). A statement written before quiesce wrote that schema is shown as it
        /// was written (the 2023 schema) and converted when it is sent.
        #[schema(schema_with = crate::domain::dsa_schema::statement_openapi)]
        pub statement: serde_json::Value,
    }
}

wire! {
    /// An appeal, with what it contests.
    pub struct AppealRecord from store::AppealRecord {
        pub id: i64,
        pub statement_id: i64,
        pub action_id: Option<i64>,
        pub entity: String,
        pub rule: Option<String>,
        /// Who took the decision contested: `automated`, `review`, `override` or `reversal`.
        pub decided_by: String,
        /// What the decision set, and what it found.
        pub status: String,
        pub previous_status: String,
        /// The label contested, for a restricting label's statement.
        pub label: Option<String>,
        pub appellant: String,
        pub text: String,
        pub created_at: DateTime<Utc>,
        pub claimed_by: Option<String>,
        pub claim_until: Option<DateTime<Utc>>,
        pub decided_at: Option<DateTime<Utc>>,
        pub decided_by_moderator: Option<String>,
        /// `upheld` or `rejected`, once decided.
        pub outcome: Option<String>,
        pub decision_reason: Option<String>,
    }
}

/// A moderator's decision on an appeal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AppealDecision {
    /// The appellant is right: the decision is reversed.
    Upheld,
    /// The decision stands.
    Rejected,
}

impl From<store::AppealDecision> for AppealDecision {
    fn from(decision: store::AppealDecision) -> Self {
        match decision {
            store::AppealDecision::Upheld => Self::Upheld,
            store::AppealDecision::Rejected => Self::Rejected,
        }
    }
}

impl From<AppealDecision> for store::AppealDecision {
    fn from(decision: AppealDecision) -> Self {
        match decision {
            AppealDecision::Upheld => Self::Upheld,
            AppealDecision::Rejected => Self::Rejected,
        }
    }
}
