//! Rules versions, and a rule's hits.

use chrono::{DateTime, Utc};

use super::wire;
use crate::store;

wire! {
    /// One stored version, with its text, as `GET /v1/rules` shows the active one.
    pub struct RulesVersion from store::RulesVersion {
        pub version: i64,
        /// Hex SHA-256 of `text`.
        pub hash: String,
        pub author: String,
        pub message: String,
        pub created_at: DateTime<Utc>,
        /// The backtest report it was published with, if any.
        #[schema(value_type = Option<Object>)]
        pub backtest: Option<serde_json::Value>,
        pub text: String,
    }
}

wire! {
    /// A version as the versions list shows it: without its text.
    pub struct RulesVersionSummary from store::RulesVersionSummary {
        pub version: i64,
        pub hash: String,
        pub author: String,
        pub message: String,
        pub created_at: DateTime<Utc>,
        /// Whether it is the active one.
        pub active: bool,
        #[schema(value_type = Option<Object>)]
        pub backtest: Option<serde_json::Value>,
    }
}

wire! {
    /// How often a rule held in a window's evaluations: live (it acted, or would have but for the
    /// status or an override), in shadow, and exempted (it held, and so did its `unless`).
    pub struct RuleHits from store::RuleHits {
        pub live: i64,
        pub shadow: i64,
        pub exempted: i64,
    }
}
