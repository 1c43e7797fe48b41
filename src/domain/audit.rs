//! Who made a human or admin decision, from where, and the entry the audit trail keeps of it.

use serde::Serialize;
use serde_json::Value;

/// Who acts, and how they proved it. Never holds a secret: a token appears only as its label
/// (`token:<first 8 hex digits of its SHA-256>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Actor {
    /// The name the person gave (`mod:ana`, a console sign-in name), or what acted
    /// (`signal:SIGHUP`, `cli:<user>`).
    pub name: String,
    pub credential: Option<String>,
    pub role: Option<String>,
    /// The connection's peer address.
    pub address: Option<String>,
    /// `X-Forwarded-For` as the proxy in front said it (not checked).
    pub forwarded_for: Option<String>,
}

impl Actor {
    /// Someone acting for nobody in particular: a signal, the command line.
    pub fn named(name: impl Into<String>, credential: Option<&str>) -> Self {
        Self {
            name: name.into(),
            credential: credential.map(str::to_owned),
            ..Self::default()
        }
    }
}

/// One decision for the audit trail: what was done to what, with the state before and after.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    pub action: AuditAction,
    /// What it was done to: an entity, an action (`action:42`), `rules`, `shards`, a session.
    pub subject: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

/// The decisions the audit trail records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub enum AuditAction {
    #[serde(rename = "action.reverse")]
    Reverse,
    #[serde(rename = "entity.override")]
    Override,
    #[serde(rename = "timer.end")]
    TimerEnd,
    #[serde(rename = "dead_letter.redrive")]
    Redrive,
    #[serde(rename = "rules.reload")]
    RulesReload,
    #[serde(rename = "rules.publish")]
    RulesPublish,
    #[serde(rename = "rules.rollback")]
    RulesRollback,
    /// The guard turned a rule to shadow (its actor is quiesce-guard).
    #[serde(rename = "rules.guard")]
    RulesGuard,
    #[serde(rename = "shards.move")]
    ShardsMove,
    #[serde(rename = "console.sign_in")]
    SignIn,
    #[serde(rename = "console.sign_out")]
    SignOut,
    /// A moderator's decision on a review queue item (approve, hide, dismiss, escalate).
    #[serde(rename = "review.decide")]
    ReviewDecide,
    /// An appeal the platform forwarded.
    #[serde(rename = "appeal.submit")]
    AppealSubmit,
    /// A moderator's decision on an appeal (upheld or rejected).
    #[serde(rename = "appeal.decide")]
    AppealDecide,
}

impl AuditAction {
    pub const ALL: [AuditAction; 14] = [
        AuditAction::Reverse,
        AuditAction::Override,
        AuditAction::TimerEnd,
        AuditAction::Redrive,
        AuditAction::RulesReload,
        AuditAction::RulesPublish,
        AuditAction::RulesRollback,
        AuditAction::RulesGuard,
        AuditAction::ShardsMove,
        AuditAction::SignIn,
        AuditAction::SignOut,
        AuditAction::ReviewDecide,
        AuditAction::AppealSubmit,
        AuditAction::AppealDecide,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::Reverse => "action.reverse",
            AuditAction::Override => "entity.override",
            AuditAction::TimerEnd => "timer.end",
            AuditAction::Redrive => "dead_letter.redrive",
            AuditAction::RulesReload => "rules.reload",
            AuditAction::RulesPublish => "rules.publish",
            AuditAction::RulesRollback => "rules.rollback",
            AuditAction::RulesGuard => "rules.guard",
            AuditAction::ShardsMove => "shards.move",
            AuditAction::SignIn => "console.sign_in",
            AuditAction::SignOut => "console.sign_out",
            AuditAction::ReviewDecide => "review.decide",
            AuditAction::AppealSubmit => "appeal.submit",
            AuditAction::AppealDecide => "appeal.decide",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_reads_back_from_its_name_and_serializes_as_it() {
        for action in AuditAction::ALL {
            assert_eq!(AuditAction::parse(action.as_str()), Some(action));
            assert_eq!(
                serde_json::to_value(action).unwrap(),
                Value::String(action.as_str().into())
            );
        }
        assert_eq!(AuditAction::parse("rules.delete"), None);
    }
}
