//! What moderation does to an entity: its status, and the actions that set it.

use serde::{Deserialize, Serialize};

use super::{Invalid, invalid};

/// An entity's moderation status, ordered by severity; automation only escalates.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Visible,
    Flagged,
    Hidden,
    Suspended,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Visible => "visible",
            Status::Flagged => "flagged",
            Status::Hidden => "hidden",
            Status::Suspended => "suspended",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, Invalid> {
        match raw {
            "visible" => Ok(Status::Visible),
            "flagged" => Ok(Status::Flagged),
            "hidden" => Ok(Status::Hidden),
            "suspended" => Ok(Status::Suspended),
            other => Err(invalid(format!("unknown status {other:?}"))),
        }
    }
}

/// What a rule may do to an entity; each sets a status, never adds to one.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Flag,
    Hide,
    Suspend,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Flag => "flag",
            Action::Hide => "hide",
            Action::Suspend => "suspend",
        }
    }

    /// The status this action sets.
    pub fn status(self) -> Status {
        match self {
            Action::Flag => Status::Flagged,
            Action::Hide => Status::Hidden,
            Action::Suspend => Status::Suspended,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_ordered_by_severity() {
        assert!(Status::Visible < Status::Flagged);
        assert!(Status::Flagged < Status::Hidden);
        assert!(Status::Hidden < Status::Suspended);
        assert_eq!(Action::Hide.status(), Status::Hidden);
    }
}

/// A moderator's decision on an item of the review queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReviewDecision {
    /// The content is fine: visible, and automation does not flag it again for a while.
    Approve,
    /// The content goes: hidden, and automation does not undo it for a while.
    Hide,
    /// The flags were not worth acting on: visible, and automation is free to act again.
    Dismiss,
    /// An admin should decide: the item stays waiting, for admins only.
    Escalate,
}

impl ReviewDecision {
    pub const ALL: [ReviewDecision; 4] = [
        ReviewDecision::Approve,
        ReviewDecision::Hide,
        ReviewDecision::Dismiss,
        ReviewDecision::Escalate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReviewDecision::Approve => "approve",
            ReviewDecision::Hide => "hide",
            ReviewDecision::Dismiss => "dismiss",
            ReviewDecision::Escalate => "escalate",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, Invalid> {
        Self::ALL
            .into_iter()
            .find(|d| d.as_str() == raw)
            .ok_or_else(|| invalid(format!("unknown decision {raw:?}")))
    }

    /// The status the decision sets (`None`: escalate sets none).
    pub fn sets(self) -> Option<Status> {
        match self {
            ReviewDecision::Approve | ReviewDecision::Dismiss => Some(Status::Visible),
            ReviewDecision::Hide => Some(Status::Hidden),
            ReviewDecision::Escalate => None,
        }
    }

    /// Whether the decision holds automation off with an override.
    pub fn keeps_automation_off(self) -> bool {
        matches!(self, ReviewDecision::Approve | ReviewDecision::Hide)
    }
}
