//! The audit trail as `GET /v1/audit` shows it.

use chrono::{DateTime, Utc};

use super::wire;
use crate::store;

wire! {
    /// One recorded decision, as `GET /v1/audit` and `quiesce audit` show it.
    pub struct AuditRecord from store::AuditRecord {
        pub id: i64,
        pub at: DateTime<Utc>,
        pub actor: String,
        pub credential: Option<String>,
        pub role: Option<String>,
        pub address: Option<String>,
        pub forwarded_for: Option<String>,
        pub action: String,
        pub subject: String,
        #[schema(value_type = Option<Object>)]
        pub before: Option<serde_json::Value>,
        #[schema(value_type = Option<Object>)]
        pub after: Option<serde_json::Value>,
    }
}
