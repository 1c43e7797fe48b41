//! A decision's statement of reasons drafted from the `statement` tables (`mod.rs`): what the
//! decision restricts, where it came from, what the content is, and the facts.

use chrono::{DateTime, Utc};

use super::{RuleStatement, StatementFile};
use crate::{
    domain::{
        Automation, EntityId, Restriction, Snapshot, Source, StatementDraft, Status, new_puid,
    },
    rules::{Decision, Rule, RuleSet, Verdict, condition::render_reason},
};

impl StatementFile {
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

    /// What an entity of this kind is: its content types, its language and account type, and
    /// where it is.
    fn content(&self, entity: &EntityId, kind: &str) -> Content {
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
        Content {
            types,
            other,
            language: spec
                .and_then(|s| s.content_language.clone())
                .or(self.content_language.clone()),
            account_type: spec
                .and_then(|s| s.account_type.clone())
                .or(self.account_type.clone()),
            url,
        }
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
        Some(self.by_rule(rule, &decision.rule, restriction, snapshot, ends_at))
    }

    /// The statement of a label a rule gave, when its rule says its labels restrict.
    pub(super) fn labelled(
        &self,
        rule: &RuleOf<'_>,
        name: &str,
        label: &str,
        snapshot: &Snapshot,
    ) -> Option<StatementDraft> {
        let shown = rule.statement.labels?;
        let mut draft = self.by_rule(
            rule,
            name,
            Restriction::ContentLabelled(shown),
            snapshot,
            None,
        );
        draft.facts = format!("{} It gave the label \"{label}\".", draft.facts);
        Some(draft)
    }

    fn by_rule(
        &self,
        rule: &RuleOf<'_>,
        name: &str,
        restriction: Restriction,
        snapshot: &Snapshot,
        ends_at: Option<DateTime<Utc>>,
    ) -> StatementDraft {
        let now = Utc::now();
        let RuleOf {
            statement: rule,
            reason: rule_reason,
            condition,
            rules_version,
        } = *rule;
        let content = self.content(&snapshot.entity, &snapshot.kind);
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
            ground: rule.ground,
            ground_reference: rule.reference.clone(),
            explanation,
            also_illegal: rule.illegal,
            content_types: content.types,
            content_type_other: content.other,
            classification: rule.classification.clone(),
            content_language: content.language,
            account_type: content.account_type,
            keywords: rule.keywords.clone(),
            facts,
            source: self.source(snapshot),
            automated_detection: true,
            automated_decision: Automation::Fully,
            url: content.url,
            applied_at: now,
            // The sender's, else the day of the entity's first event, else today's.
            content_date: snapshot
                .content_date
                .or(snapshot.first_event_at.map(|at| at.date_naive()))
                .or(Some(now.date_naive())),
            ends_at,
        }
    }

    /// The statement of a moderator's decision setting `status`, on the file's defaults, or
    /// `None` when it restricts nothing. `detected`: automation brought it to them (a review):
    /// a rule weighed the figures and a person decided, a partially automated decision.
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
        let content = self.content(entity, kind);
        let now = Utc::now();
        Some(StatementDraft {
            puid: new_puid(),
            restriction,
            ground: defaults.ground,
            ground_reference: defaults.reference,
            explanation: reason.to_owned(),
            also_illegal: defaults.illegal,
            content_types: content.types,
            content_type_other: content.other,
            classification: defaults.classification,
            content_language: content.language,
            account_type: content.account_type,
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
            automated_decision: if detected {
                Automation::Partially
            } else {
                Automation::NotAutomated
            },
            url: content.url,
            applied_at: now,
            // Read from the entity's row by the statement that writes it (`store/statements.rs`).
            content_date: None,
            ends_at,
        })
    }
}

/// What an entity's kind says of its content.
struct Content {
    types: Vec<String>,
    other: Option<String>,
    language: Option<String>,
    account_type: Option<String>,
    url: String,
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
impl RuleSet {
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

    fn rule_of<'a>(&self, rule: &'a Rule) -> RuleOf<'a> {
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
