//! What a failing entity carries: its failure history while it is retried, and the dead
//! letter it ends in. Redis holds a copy (the fast check), Postgres the durable record.

/// The failure history an entity carries while retried, and into the dead letters.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct FailureRecord {
    /// `fatal` or `attempts_exhausted`, for dead letters.
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub last_error: String,
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub first_failure_ms: i64,
    #[serde(default)]
    pub last_failure_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct DeadLetter {
    pub entity: String,
    pub dead_lettered_at_ms: i64,
    #[serde(flatten)]
    pub record: FailureRecord,
}
