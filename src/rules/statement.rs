//! The statement of reasons a rule's restricting decision gets (`domain/statement.rs`): the
//! rules file's `[statement]` defaults and each rule's own `statement` table, checked at load
//! (an unknown category, ground or content type is refused, naming the rule), and the draft
//! built from them, the decision and the snapshot it was taken on.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Decision, Verdict, condition::render_reason};
use crate::domain::{
    CATEGORIES, CONTENT_TYPES, EntityId, Ground, Restriction, Snapshot, Source, StatementDraft,
    Status, new_puid,
};

/// A rule's `statement` table (or the defaults' part of `[statement]`): every field optional.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StatementSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ground: Option<Ground>,
    /// The law relied on, for `ground = "illegal"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    legal_ground: Option<String>,
    /// The terms relied on, for `ground = "incompatible"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    contractual_ground: Option<String>,
    /// A template as `reason` is; without one, the rule's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    explanation: Option<String>,
    /// One of the Transparency Database's categories (`STATEMENT_CATEGORY_...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    category: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    keywords: Vec<String>,
    /// For a ground of incompatibility: the content is considered illegal too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    illegal: Option<bool>,
    /// The rule's labels restrict the content (hide it behind a warning, demote it): each
    /// label it gives gets a statement of its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    labels_restrict: bool,
}

/// What a kind of entity is, for its statements.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KindSpec {
    /// The Transparency Database's content types (`CONTENT_TYPE_TEXT`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    content_type: Vec<String>,
    /// The content in words, with `CONTENT_TYPE_OTHER`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content_type_other: Option<String>,
    /// Where the content is (`{entity}`, `{kind}`, `{id}`); else the file's `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
}

/// The rules file's `[statement]` table: the defaults of every rule's statement, what each kind
/// is, and which signals are notices.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StatementFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ground: Option<Ground>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    legal_ground: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    contractual_ground: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    category: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    illegal: Option<bool>,
    /// Signals that are notices (Art. 16) when they triggered a decision; default `report`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    notice_signals: Option<Vec<String>>,
    /// Signals a sender gives a trusted flagger's notice (Art. 22).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    trusted_flagger_signals: Vec<String>,
    /// Kinds that are accounts: a suspension of one suspends the account; default `user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    account_kinds: Option<Vec<String>>,
    /// Where an entity is, for every kind without its own (`{entity}`, `{kind}`, `{id}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    kinds: BTreeMap<String, KindSpec>,
}

/// Why a statement table was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatementError {
    #[error("`statement.category` {0:?} is not one of the Transparency Database's categories ({list})", list = CATEGORIES.join(", "))]
    Category(String),
    #[error("`statement.ground = \"illegal\"` needs `legal_ground` (the law relied on)")]
    NoLegalGround,
    #[error(
        "`statement.ground = \"incompatible\"` needs `contractual_ground` (the terms relied on)"
    )]
    NoContractualGround,
    #[error("`statement.kinds.{kind}.content_type` {value:?} is not one of {list}", list = CONTENT_TYPES.join(", "))]
    ContentType { kind: String, value: String },
    #[error("`statement.kinds.{0}`: `CONTENT_TYPE_OTHER` needs `content_type_other`")]
    ContentTypeOther(String),
    #[error("`statement`: {0} must be 1-500 characters")]
    Length(&'static str),
}

/// The terms quiesce assumes when a rules file names none.
const DEFAULT_TERMS: &str = "The platform's terms of service";
const DEFAULT_CATEGORY: &str = "STATEMENT_CATEGORY_VIOLATION_TOS";

/// A rule's statement, its defaults applied and checked.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RuleStatement {
    ground: Ground,
    reference: String,
    explanation: Option<String>,
    category: String,
    keywords: Vec<String>,
    illegal: bool,
    labels_restrict: bool,
}

fn short(value: &str, what: &'static str) -> Result<(), StatementError> {
    let n = value.chars().count();
    if n == 0 || n > 500 {
        return Err(StatementError::Length(what));
    }
    Ok(())
}

impl StatementFile {
    /// Checks what the file declares for every rule (its kinds' content types).
    pub(super) fn check(&self) -> Result<(), StatementError> {
        for (kind, spec) in &self.kinds {
            for value in &spec.content_type {
                if !CONTENT_TYPES.contains(&value.as_str()) {
                    return Err(StatementError::ContentType {
                        kind: kind.clone(),
                        value: value.clone(),
                    });
                }
            }
            if spec.content_type.iter().any(|c| c == "CONTENT_TYPE_OTHER")
                && spec.content_type_other.is_none()
            {
                return Err(StatementError::ContentTypeOther(kind.clone()));
            }
        }
        Ok(())
    }

    /// A rule's statement: its own table over the file's defaults over quiesce's.
    pub(super) fn resolve(
        &self,
        spec: Option<&StatementSpec>,
    ) -> Result<RuleStatement, StatementError> {
        let own = spec.cloned().unwrap_or_default();
        let ground = own
            .ground
            .or(self.ground.clone())
            .unwrap_or(Ground::Incompatible);
        let reference = match ground {
            Ground::Illegal => own
                .legal_ground
                .or(self.legal_ground.clone())
                .ok_or(StatementError::NoLegalGround)?,
            Ground::Incompatible => own
                .contractual_ground
                .or(self.contractual_ground.clone())
                .unwrap_or_else(|| DEFAULT_TERMS.to_owned()),
        };
        short(&reference, "the ground")?;
        let category = own
            .category
            .or(self.category.clone())
            .unwrap_or_else(|| DEFAULT_CATEGORY.to_owned());
        if !CATEGORIES.contains(&category.as_str()) {
            return Err(StatementError::Category(category));
        }
        for keyword in &own.keywords {
            short(keyword, "a keyword")?;
        }
        Ok(RuleStatement {
            ground,
            reference,
            explanation: own.explanation,
            category,
            keywords: own.keywords,
            illegal: own.illegal.or(self.illegal).unwrap_or(false),
            labels_restrict: own.labels_restrict,
        })
    }

    fn is_account(&self, kind: &str) -> bool {
        match &self.account_kinds {
            Some(kinds) => kinds.iter().any(|k| k == kind),
            None => kind == "user",
        }
    }

    /// The restriction a status sets on an entity of this kind; `None`: it restricts nothing.
    fn restriction(&self, kind: &str, status: Status) -> Option<Restriction> {
        match status {
            Status::Visible | Status::Flagged => None,
            Status::Hidden => Some(Restriction::ContentDisabled),
            Status::Suspended if self.is_account(kind) => Some(Restriction::AccountSuspended),
            Status::Suspended => Some(Restriction::ProvisionSuspended),
        }
    }

    /// Where the decision came from, by the signals the entity received.
    fn source(&self, snapshot: &Snapshot) -> Source {
        let received = |signal: &String| snapshot.signals.get(signal).is_some_and(|s| s.count > 0);
        if self.trusted_flagger_signals.iter().any(received) {
            return Source::TrustedFlagger;
        }
        let notices = self.notice_signals.as_deref().unwrap_or(&[]);
        let default_notice = self.notice_signals.is_none() && received(&"report".to_owned());
        if default_notice || notices.iter().any(received) {
            Source::Notice
        } else {
            Source::Voluntary
        }
    }

    fn content(&self, entity: &EntityId, kind: &str) -> (Vec<String>, Option<String>, String) {
        let spec = self.kinds.get(kind);
        let (types, other) = match spec.filter(|s| !s.content_type.is_empty()) {
            Some(spec) => (spec.content_type.clone(), spec.content_type_other.clone()),
            // A kind the file says nothing of: its name says what it is.
            None => (vec!["CONTENT_TYPE_OTHER".to_owned()], Some(kind.to_owned())),
        };
        let template = spec
            .and_then(|s| s.url.as_deref())
            .or(self.url.as_deref())
            .unwrap_or("{entity}");
        let id = entity.as_str().split_once(':').map_or("", |(_, id)| id);
        let url = template
            .replace("{entity}", entity.as_str())
            .replace("{kind}", kind)
            .replace("{id}", id);
        (types, other, url)
    }

    /// The statement of a rule's automated decision, or `None` when it restricts nothing.
    pub(super) fn automated(
        &self,
        rule: &RuleOf<'_>,
        decision: &Decision,
        snapshot: &Snapshot,
    ) -> Option<StatementDraft> {
        let restriction = self.restriction(&snapshot.kind, decision.action.status())?;
        let ends_at = decision
            .duration_secs
            .map(|secs| Utc::now() + chrono::Duration::seconds(secs as i64));
        Some(self.by_rule(rule, &decision.rule, restriction, snapshot, ends_at, None))
    }

    /// The statement of a label a rule gave, when its rule says its labels restrict.
    pub(super) fn labelled(
        &self,
        rule: &RuleOf<'_>,
        name: &str,
        label: &str,
        snapshot: &Snapshot,
    ) -> Option<StatementDraft> {
        rule.statement.labels_restrict.then(|| {
            self.by_rule(
                rule,
                name,
                Restriction::ContentLabelled,
                snapshot,
                None,
                Some(label.to_owned()),
            )
        })
    }

    fn by_rule(
        &self,
        rule: &RuleOf<'_>,
        name: &str,
        restriction: Restriction,
        snapshot: &Snapshot,
        ends_at: Option<DateTime<Utc>>,
        label: Option<String>,
    ) -> StatementDraft {
        let now = Utc::now();
        let RuleOf {
            statement: rule,
            reason: rule_reason,
            condition,
            rules_version,
        } = *rule;
        let (content_types, content_type_other, url) =
            self.content(&snapshot.entity, &snapshot.kind);
        let explanation =
            render_reason(rule.explanation.as_deref().unwrap_or(rule_reason), snapshot);
        let version = rules_version.map_or(String::new(), |v| format!(" (rules version {v})"));
        let figures: Vec<String> = snapshot
            .signals
            .iter()
            .map(|(signal, stats)| format!("{signal} {}", stats.count))
            .collect();
        let facts = format!(
            "Rule {name}{version} decided automatically when `{condition}` held. Figures: {}.",
            if figures.is_empty() {
                "none".to_owned()
            } else {
                figures.join(", ")
            },
        );
        StatementDraft {
            puid: new_puid(),
            restriction,
            ground: rule.ground.clone(),
            ground_reference: rule.reference.clone(),
            explanation,
            also_illegal: rule.illegal,
            content_types,
            content_type_other,
            category: rule.category.clone(),
            keywords: rule.keywords.clone(),
            facts,
            source: self.source(snapshot),
            automated_detection: true,
            automated_decision: true,
            url,
            applied_at: now,
            ends_at,
            label,
        }
    }

    /// The statement of a moderator's decision setting `status`, on the file's defaults, or
    /// `None` when it restricts nothing. `detected`: automation brought it to them (a review).
    pub(super) fn by_moderator(
        &self,
        entity: &EntityId,
        status: Status,
        reason: &str,
        detected: bool,
        ends_at: Option<DateTime<Utc>>,
    ) -> Option<StatementDraft> {
        let kind = entity.as_str().split_once(':').map_or("", |(kind, _)| kind);
        let restriction = self.restriction(kind, status)?;
        let defaults = self.resolve(None).ok()?;
        let (content_types, content_type_other, url) = self.content(entity, kind);
        let now = Utc::now();
        Some(StatementDraft {
            puid: new_puid(),
            restriction,
            ground: defaults.ground,
            ground_reference: defaults.reference,
            explanation: reason.to_owned(),
            also_illegal: defaults.illegal,
            content_types,
            content_type_other,
            category: defaults.category,
            keywords: Vec::new(),
            facts: format!(
                "A moderator decided to set the {kind} {}{}.",
                status.as_str(),
                if detected {
                    ", after automation sent it for review"
                } else {
                    ""
                }
            ),
            source: Source::Voluntary,
            automated_detection: detected,
            automated_decision: false,
            url,
            applied_at: now,
            ends_at,
            label: None,
        })
    }
}

/// What a rule's statements are drawn from: its `statement` table resolved, its reason (the
/// default explanation), its condition and the rules version it is in.
#[derive(Clone, Copy)]
pub(super) struct RuleOf<'a> {
    pub statement: &'a RuleStatement,
    pub reason: &'a str,
    pub condition: &'a str,
    pub rules_version: Option<i64>,
}

/// The statements of reasons of the decisions a rule set takes.
impl super::RuleSet {
    /// The statement of reasons of a decision these rules took on `snapshot`; `None` when it
    /// restricts nothing (a flag for review) or its rule is not in the set.
    pub fn statement_for(
        &self,
        decision: &Decision,
        snapshot: &Snapshot,
    ) -> Option<StatementDraft> {
        let rule = self.rules.iter().find(|r| r.name == decision.rule)?;
        self.statements
            .automated(&self.rule_of(rule), decision, snapshot)
    }

    /// The statements of the labels a verdict gives whose rules say their labels restrict, by
    /// label.
    pub fn label_statements(
        &self,
        verdict: &Verdict,
        snapshot: &Snapshot,
    ) -> Vec<(String, StatementDraft)> {
        verdict
            .labels
            .iter()
            .filter_map(|given| {
                let rule = self.rules.iter().find(|r| r.name == given.rule)?;
                let draft = self.statements.labelled(
                    &self.rule_of(rule),
                    &rule.name,
                    &given.label,
                    snapshot,
                )?;
                Some((given.label.clone(), draft))
            })
            .collect()
    }

    fn rule_of<'a>(&self, rule: &'a super::Rule) -> RuleOf<'a> {
        RuleOf {
            statement: &rule.statement,
            reason: &rule.reason,
            condition: &rule.when,
            rules_version: self.version,
        }
    }

    /// The statement of reasons of a moderator's decision setting `status`, on the rules file's
    /// defaults; `None` when it restricts nothing. `detected`: automation sent it to them.
    pub fn moderator_statement(
        &self,
        entity: &EntityId,
        status: Status,
        reason: &str,
        detected: bool,
        ends_at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Option<StatementDraft> {
        self.statements
            .by_moderator(entity, status, reason, detected, ends_at)
    }
}
