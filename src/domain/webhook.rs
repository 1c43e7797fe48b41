//! The outbound webhooks: every topic an outbox row may carry, with its name on the wire (and
//! in the outbox's `topic` column), and the payload each one carries as a type. A topic's name
//! is written here and nowhere else; `tests/readme.rs` holds the README's list to [`Topic::ALL`].

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{EntityId, ReviewDecision, Status};

/// What an outbox row tells its receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Topic {
    ActionApplied,
    ActionReversed,
    EntityOverridden,
    LabelApplied,
    LabelRemoved,
    ReviewEscalated,
    RulesDemoted,
    StatementIssued,
    AppealDecided,
    /// A statement of reasons for the Transparency Database (receiver `dsa`), not a webhook.
    StatementSubmitted,
}

/// Who an outbox row is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receiver {
    /// The platform's webhook.
    Platform,
    /// The Transparency Database.
    Dsa,
}

impl Receiver {
    pub fn as_str(self) -> &'static str {
        match self {
            Receiver::Platform => "platform",
            Receiver::Dsa => "dsa",
        }
    }
}

impl Topic {
    pub const ALL: [Topic; 10] = [
        Topic::ActionApplied,
        Topic::ActionReversed,
        Topic::EntityOverridden,
        Topic::LabelApplied,
        Topic::LabelRemoved,
        Topic::ReviewEscalated,
        Topic::RulesDemoted,
        Topic::StatementIssued,
        Topic::AppealDecided,
        Topic::StatementSubmitted,
    ];

    /// The topic's name, as the outbox stores it and the webhook's `type` carries it.
    pub const fn name(self) -> &'static str {
        match self {
            Topic::ActionApplied => "action.applied",
            Topic::ActionReversed => "action.reversed",
            Topic::EntityOverridden => "entity.overridden",
            Topic::LabelApplied => "label.applied",
            Topic::LabelRemoved => "label.removed",
            Topic::ReviewEscalated => "review.escalated",
            Topic::RulesDemoted => "rules.demoted",
            Topic::StatementIssued => "statement.issued",
            Topic::AppealDecided => "appeal.decided",
            Topic::StatementSubmitted => "statement.submitted",
        }
    }

    pub fn parse(name: &str) -> Option<Topic> {
        Topic::ALL.into_iter().find(|topic| topic.name() == name)
    }

    pub const fn receiver(self) -> Receiver {
        match self {
            Topic::StatementSubmitted => Receiver::Dsa,
            _ => Receiver::Platform,
        }
    }
}

/// A payload of one topic: what [`Payload::TOPIC`]'s rows carry as their `data`.
pub trait Payload: Serialize {
    const TOPIC: Topic;
}

/// `action.applied`: an action changed an entity's status, outside the rules. The rules'
/// actions carry the same fields with `ends_at` and `rules_version` ([`RulesActionApplied`]).
#[derive(Debug, Clone, Serialize)]
pub struct ActionApplied {
    pub action_id: i64,
    pub entity: String,
    pub action: String,
    pub rule: String,
    pub reason: String,
    pub status: Status,
    /// The entity's version after the action.
    pub moderation_version: i64,
    #[serde(flatten)]
    pub by: AppliedBy,
}

/// Who applied an action outside the rules, as its payload tells.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum AppliedBy {
    /// A moderator's decision on a review queue item.
    Review {
        decision: ReviewDecision,
        review_item: i64,
    },
    /// A restore: a timer's end, applied now.
    Restore {},
}

/// A rules' `action.applied` as Rust knows it before the fenced statement (`store/fenced.rs`)
/// writes the action: bound to that statement, which adds the two fields the database gives,
/// `action_id` and `ends_at` (a timed action's end, null otherwise).
#[derive(Debug, Clone, Serialize)]
pub struct RulesActionApplied<'a> {
    pub entity: &'a str,
    pub action: &'a str,
    pub rule: &'a str,
    pub reason: &'a str,
    pub status: &'a str,
    /// The entity's version after the action.
    pub moderation_version: i64,
    /// The rules version that decided it.
    pub rules_version: Option<i64>,
}

/// `action.reversed`: a moderator (or an upheld appeal) undid an action.
#[derive(Debug, Clone, Serialize)]
pub struct ActionReversed {
    pub action_id: i64,
    pub entity: String,
    pub action: String,
    pub rule: String,
    /// The status put back.
    pub status: String,
    pub moderator: String,
    pub reason: String,
    pub moderation_version: i64,
    /// `review`: the moderator's own reversal; `appeal`: an upheld appeal's.
    pub source: &'static str,
}

/// `entity.overridden`: a moderator set an entity's status.
#[derive(Debug, Clone, Serialize)]
pub struct EntityOverridden {
    pub entity: EntityId,
    pub status: Status,
    pub until: DateTime<Utc>,
    pub timed: bool,
    pub moderator: String,
    pub reason: String,
    pub moderation_version: i64,
}

/// `label.applied`: a rule gave an entity a label. The fenced statement writes it from the label
/// row it inserts (only a label the entity did not have yet), with these fields.
#[derive(Debug, Clone, Serialize)]
pub struct LabelApplied {
    pub entity: String,
    pub label: String,
    pub rule: String,
    pub reason: String,
}

/// `label.removed`: an upheld appeal of a restricting label took it off.
#[derive(Debug, Clone, Serialize)]
pub struct LabelRemoved {
    pub entity: String,
    pub label: String,
    pub appeal: i64,
    pub moderator: String,
    pub reason: String,
}

/// `review.escalated`: a moderator sent a review queue item to an admin.
#[derive(Debug, Clone, Serialize)]
pub struct ReviewEscalated {
    pub item: i64,
    pub entity: String,
    pub rule: String,
    pub moderator: String,
    pub reason: String,
}

/// `rules.demoted`: the guard turned a rule to shadow, as a new rules version.
#[derive(Debug, Clone, Serialize)]
pub struct RulesDemoted {
    pub rule: String,
    pub actions: i64,
    pub reversals: i64,
    pub rate: f64,
    pub threshold: f64,
    pub window_secs: u64,
    pub previous_rules_version: i64,
    pub message: String,
    /// The new version: the store sets it once published.
    pub rules_version: i64,
}

/// `statement.issued`: a statement of reasons, told to the platform. Written with the
/// statement's row, whose id the database gives; the dispatcher adds the `statement` itself.
#[derive(Debug, Clone, Serialize)]
pub struct StatementIssued {
    pub statement_id: i64,
    pub puid: String,
    pub entity: String,
    pub action_id: Option<i64>,
}

/// `statement.submitted`: a statement of reasons for the Transparency Database.
#[derive(Debug, Clone, Serialize)]
pub struct StatementSubmitted {
    pub statement_id: i64,
}

/// `appeal.decided`: a person decided an appeal.
#[derive(Debug, Clone, Serialize)]
pub struct AppealDecided {
    pub appeal: i64,
    pub statement_id: i64,
    pub puid: String,
    pub entity: String,
    pub action_id: Option<i64>,
    pub appellant: String,
    /// `upheld` or `rejected`.
    pub outcome: &'static str,
    pub reason: String,
    pub moderator: String,
    /// The action an upheld appeal reversed.
    pub reversal_of: Option<i64>,
}

macro_rules! payloads {
    ($($payload:ident => $topic:ident),* $(,)?) => {
        $(impl Payload for $payload { const TOPIC: Topic = Topic::$topic; })*
    };
}

payloads! {
    ActionApplied => ActionApplied,
    ActionReversed => ActionReversed,
    EntityOverridden => EntityOverridden,
    LabelApplied => LabelApplied,
    LabelRemoved => LabelRemoved,
    ReviewEscalated => ReviewEscalated,
    RulesDemoted => RulesDemoted,
    StatementIssued => StatementIssued,
    AppealDecided => AppealDecided,
    StatementSubmitted => StatementSubmitted,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_topic_reads_back_from_its_name() {
        for topic in Topic::ALL {
            assert_eq!(Topic::parse(topic.name()), Some(topic));
        }
        assert_eq!(Topic::parse("no.such"), None);
    }

    #[test]
    fn an_applied_action_carries_who_applied_it_beside_its_fields() {
        let applied = ActionApplied {
            action_id: 7,
            entity: "post:1".into(),
            action: "review".into(),
            rule: "review".into(),
            reason: "hide by m: spam".into(),
            status: Status::Hidden,
            moderation_version: 3,
            by: AppliedBy::Review {
                decision: ReviewDecision::Hide,
                review_item: 5,
            },
        };
        let json = serde_json::to_value(&applied).unwrap();
        assert_eq!(json["decision"], "hide");
        assert_eq!(json["review_item"], 5);
        assert_eq!(json["status"], "hidden");
        let restore = ActionApplied {
            by: AppliedBy::Restore {},
            ..applied
        };
        let json = serde_json::to_value(&restore).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys.len(),
            7,
            "a restore carries the action's fields only: {keys:?}"
        );
    }
}
