//! What the rules concluded about one snapshot, and which decision automation may apply.

use serde::{Deserialize, Serialize};

use crate::domain::{Action, Status};

/// One rule's verdict on a snapshot.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Decision {
    pub rule: String,
    pub action: Action,
    pub reason: String,
    /// A timed action's length in seconds (the rule's `duration`); `None`: not timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_secs: Option<u64>,
}

/// A label a live rule gave (`labels` on the rule): recorded on the entity once, without
/// changing its status.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct LabelDecision {
    pub rule: String,
    pub label: String,
    pub reason: String,
}

/// Everything the rules concluded about one snapshot.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Verdict {
    /// Live rules whose condition held, in file order.
    pub matched: Vec<Decision>,
    /// Shadow rules whose condition held: what they would have done.
    #[serde(default)]
    pub shadow: Vec<Decision>,
    /// Live rules that could not be evaluated on this snapshot, with the error.
    pub errors: Vec<(String, String)>,
    /// Labels the matched live rules give, in file order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<LabelDecision>,
    /// Live rules whose condition held but whose exemption (`unless`) held too: they did not
    /// act.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exempted: Vec<String>,
    /// Shadow rules that could not be evaluated: recorded, never a reason to fail.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadow_errors: Vec<(String, String)>,
    /// The rules version that concluded it (`None`: rules not from a stored version). Stored
    /// in its own column of the evaluation and the action, not in this JSON.
    #[serde(skip)]
    pub rules_version: Option<i64>,
}

impl Verdict {
    /// The strongest matched live action: among equal actions the longest (an untimed one is
    /// longer than any timed one), then the first rule in file order.
    pub fn strongest(&self) -> Option<&Decision> {
        self.matched
            .iter()
            .rev()
            .max_by_key(|decision| (decision.action, decision.duration_secs.unwrap_or(u64::MAX)))
    }

    /// The decision to apply: the strongest one, if it escalates the current status and does
    /// not go past a moderator's override (`cap`), which automation never overrules.
    pub fn to_apply(&self, current: Status, cap: Option<Status>) -> Option<&Decision> {
        self.strongest()
            .filter(|d| d.action.status() > current)
            .filter(|d| cap.is_none_or(|cap| d.action.status() <= cap))
    }
}
