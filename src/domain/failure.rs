//! What a failing entity carries: its failure history while it is retried, and the dead
//! letter it ends in. Redis holds a copy (the fast check), Postgres the durable record.

use super::{EntityId, Invalid, invalid};

/// Why an entity was dead-lettered.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DeadReason {
    /// A failure no retry mends (an unknown entity, rules that cannot evaluate it).
    Fatal,
    /// Every allowed attempt failed.
    AttemptsExhausted,
}

impl DeadReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DeadReason::Fatal => "fatal",
            DeadReason::AttemptsExhausted => "attempts_exhausted",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, Invalid> {
        match raw {
            "fatal" => Ok(DeadReason::Fatal),
            "attempts_exhausted" => Ok(DeadReason::AttemptsExhausted),
            _ => Err(invalid(
                "a dead-letter reason is fatal or attempts_exhausted",
            )),
        }
    }
}

impl std::fmt::Display for DeadReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The failure history an entity carries while retried, and into the dead letters.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct FailureRecord {
    /// Set for dead letters.
    #[serde(default)]
    pub reason: Option<DeadReason>,
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
    #[schema(value_type = String, example = "post:9842")]
    pub entity: EntityId,
    pub dead_lettered_at_ms: i64,
    #[serde(flatten)]
    pub record: FailureRecord,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_reads_back_what_it_writes_in_text_and_json() {
        for reason in [DeadReason::Fatal, DeadReason::AttemptsExhausted] {
            assert_eq!(DeadReason::parse(reason.as_str()), Ok(reason));
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, format!("\"{}\"", reason.as_str()));
        }
        assert!(DeadReason::parse("gone").is_err());
    }
}
