//! The statement of reasons a rule's restricting decision gets (`domain/statement.rs`): the
//! rules file's `[statement]` defaults and each rule's own `statement` table, checked at load
//! against the Transparency Database's lists in force (`statement_values.rs`: a value outside
//! them is refused, naming the rule and the values the field takes), and the draft built from
//! them, the decision and the snapshot it was taken on.
//!
//! Where each field may be said, as a platform would say it: what classifies a decision
//! (ground, category, specification, the reference URL, territorial scope) on a rule and as
//! the file's default; what the content is (content type, language, the account's type) on a
//! kind and as the file's default, since a rule's condition does not change what the content
//! it acts on is.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{
    Decision, Verdict,
    condition::render_reason,
    statement_values::{self as values, StatementError},
};
use crate::domain::{
    Automation, Classification, EntityId, Ground, LabelVisibility, Restriction, Snapshot, Source,
    StatementDraft, Status, dsa_schema::category_for_2023, new_puid,
};

/// A rule's `statement` table: every field optional. Names of the database's own fields are
/// the database's (`category_addition`, `decision_ground_reference_url`, ...).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StatementSpec {
    /// `illegal` or `incompatible`: read as text so that a wrong one names its rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ground: Option<String>,
    /// The law relied on, for `ground = "illegal"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    legal_ground: Option<String>,
    /// The terms relied on, for `ground = "incompatible"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    contractual_ground: Option<String>,
    /// A template as `reason` is; without one, the rule's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    explanation: Option<String>,
    /// One of the database's categories (`STATEMENT_CATEGORY_...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    category: Option<String>,
    /// More categories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    category_addition: Option<Vec<String>>,
    /// The database's keywords (`KEYWORD_...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    category_specification: Option<Vec<String>>,
    /// The specification in words, with `KEYWORD_OTHER`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    category_specification_other: Option<String>,
    /// Where the terms or the law relied on can be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    decision_ground_reference_url: Option<String>,
    /// The countries the decision applies in (EU and EEA codes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    territorial_scope: Option<Vec<String>>,
    /// quiesce's own words for the decision, for the platform (never sent to the database).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    keywords: Vec<String>,
    /// For a ground of incompatibility: the content is considered illegal too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    illegal: Option<bool>,
    /// The rule's labels restrict the content (hide it behind a warning, demote it): each
    /// label it gives gets a statement of its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    labels_restrict: bool,
    /// How its labels restrict the content (`labelled`, the default, `demoted`,
    /// `age_restricted`, `interaction_restricted`); saying it says they restrict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    labels_visibility: Option<String>,
}

/// What classifies a decision, on a rule or as the file's default (the same fields of both
/// tables, read together).
#[derive(Debug, Clone, Default)]
struct ClassificationSpec {
    category: Option<String>,
    category_addition: Option<Vec<String>>,
    category_specification: Option<Vec<String>>,
    category_specification_other: Option<String>,
    decision_ground_reference_url: Option<String>,
    territorial_scope: Option<Vec<String>>,
}

/// The classification fields of a `statement` table, as one.
macro_rules! classification_spec {
    ($table:expr) => {
        ClassificationSpec {
            category: $table.category.clone(),
            category_addition: $table.category_addition.clone(),
            category_specification: $table.category_specification.clone(),
            category_specification_other: $table.category_specification_other.clone(),
            decision_ground_reference_url: $table.decision_ground_reference_url.clone(),
            territorial_scope: $table.territorial_scope.clone(),
        }
    };
}

/// Replaces the 2023 categories of a `statement` table (a stored rules version written before
/// the schema changed) by those in force, saying which (`at` names the table).
fn upgrade_2023(
    at: &str,
    category: &mut Option<String>,
    addition: &mut Option<Vec<String>>,
    mapped: &mut Vec<CategoryMapped>,
) {
    let mut upgrade = |field: &str, value: &mut String| {
        if let Some(to) = category_for_2023(value) {
            mapped.push(CategoryMapped {
                field: format!("{at}.{field}"),
                from: std::mem::replace(value, to.to_owned()),
                to,
            });
        }
    };
    if let Some(category) = category {
        upgrade("category", category);
    }
    for category in addition.iter_mut().flatten() {
        upgrade("category_addition", category);
    }
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
    /// The content's language (`DE`, `FR`, ...); else the file's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content_language: Option<String>,
    /// `ACCOUNT_TYPE_BUSINESS` or `ACCOUNT_TYPE_PRIVATE`: whose content this kind is; else the
    /// file's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    account_type: Option<String>,
}

/// The rules file's `[statement]` table: the defaults of every rule's statement, what each kind
/// is, and which signals are notices.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StatementFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ground: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    legal_ground: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    contractual_ground: Option<String>,
    // The classification fields of a rule's table, again: serde's `flatten` does not go with
    // `deny_unknown_fields`, which is what names a misspelt field.
    /// One of the database's categories (`STATEMENT_CATEGORY_...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    category: Option<String>,
    /// More categories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    category_addition: Option<Vec<String>>,
    /// The database's keywords (`KEYWORD_...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    category_specification: Option<Vec<String>>,
    /// The specification in words, with `KEYWORD_OTHER`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    category_specification_other: Option<String>,
    /// Where the terms or the law relied on can be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    decision_ground_reference_url: Option<String>,
    /// The countries the decision applies in (EU and EEA codes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    territorial_scope: Option<Vec<String>>,
    /// The content's language, for every kind without its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content_language: Option<String>,
    /// The account type, for every kind without its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    account_type: Option<String>,
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

/// The terms quiesce assumes when a rules file names none.
const DEFAULT_TERMS: &str = "The platform's terms of service";
const DEFAULT_CATEGORY: &str = "STATEMENT_CATEGORY_OTHER_VIOLATION_TC";

/// A rule's statement, its defaults applied and checked.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RuleStatement {
    ground: Ground,
    reference: String,
    explanation: Option<String>,
    classification: Classification,
    keywords: Vec<String>,
    illegal: bool,
    /// `Some`: the rule's labels restrict, shown this way.
    labels: Option<LabelVisibility>,
}

/// A 2023 category replaced by the one in force, as `from` → `to` (`field` names it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CategoryMapped {
    pub field: String,
    pub from: String,
    pub to: &'static str,
}

impl StatementSpec {
    /// Replaces its 2023 categories by those in force (a stored version of the rule `rule`).
    pub(super) fn upgrade_2023(&mut self, rule: &str, mapped: &mut Vec<CategoryMapped>) {
        let at = format!("rule {rule:?}: statement");
        upgrade_2023(&at, &mut self.category, &mut self.category_addition, mapped);
    }
}

fn ground(value: &str) -> Result<Ground, StatementError> {
    Ground::parse(value).ok_or_else(|| StatementError::NotAllowed {
        field: "statement.ground".into(),
        value: value.to_owned(),
        allowed: Ground::NAMES,
    })
}

impl StatementFile {
    /// Replaces the 2023 categories of the file's defaults by those in force.
    pub(super) fn upgrade_2023(&mut self, mapped: &mut Vec<CategoryMapped>) {
        upgrade_2023(
            "[statement]",
            &mut self.category,
            &mut self.category_addition,
            mapped,
        );
    }

    /// Checks what the file declares for every rule (its kinds, its defaults for them).
    pub(super) fn check(&self) -> Result<(), StatementError> {
        if let Some(ground) = &self.ground {
            self::ground(ground)?;
        }
        if let Some(language) = &self.content_language {
            values::content_language("statement.content_language", language)?;
        }
        if let Some(account) = &self.account_type {
            values::account_type("statement.account_type", account)?;
        }
        for (kind, spec) in &self.kinds {
            values::content_types(kind, &spec.content_type)?;
            if spec.content_type.iter().any(|c| c == "CONTENT_TYPE_OTHER")
                && spec.content_type_other.is_none()
            {
                return Err(StatementError::ContentTypeOther(kind.clone()));
            }
            if let Some(language) = &spec.content_language {
                let field = format!("statement.kinds.{kind}.content_language");
                values::content_language(&field, language)?;
            }
            if let Some(account) = &spec.account_type {
                let field = format!("statement.kinds.{kind}.account_type");
                values::account_type(&field, account)?;
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
        let ground = match own.ground.as_deref().or(self.ground.as_deref()) {
            Some(text) => self::ground(text)?,
            None => Ground::Incompatible,
        };
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
        values::short(&reference, "the ground")?;
        let classification = self.classification(classification_spec!(own))?;
        for keyword in &own.keywords {
            values::short(keyword, "a keyword")?;
        }
        let labels =
            match own.labels_visibility.as_deref() {
                Some(text) => Some(LabelVisibility::parse(text).ok_or_else(|| {
                    StatementError::NotAllowed {
                        field: "statement.labels_visibility".into(),
                        value: text.to_owned(),
                        allowed: LabelVisibility::NAMES,
                    }
                })?),
                None => own.labels_restrict.then(LabelVisibility::default),
            };
        Ok(RuleStatement {
            ground,
            reference,
            explanation: own.explanation,
            classification,
            keywords: own.keywords,
            illegal: own.illegal.or(self.illegal).unwrap_or(false),
            labels,
        })
    }

    /// A rule's classification over the file's, checked against the database's lists.
    fn classification(&self, own: ClassificationSpec) -> Result<Classification, StatementError> {
        let file = classification_spec!(self);
        let category = own
            .category
            .or(file.category.clone())
            .unwrap_or_else(|| DEFAULT_CATEGORY.to_owned());
        values::category("statement.category", &category)?;
        let addition = own
            .category_addition
            .or(file.category_addition.clone())
            .unwrap_or_default();
        values::categories("statement.category_addition", &addition)?;
        let specification = own
            .category_specification
            .or(file.category_specification.clone())
            .unwrap_or_default();
        let other = own
            .category_specification_other
            .or(file.category_specification_other.clone());
        values::specification(&specification, other.as_deref())?;
        let url = own
            .decision_ground_reference_url
            .or(file.decision_ground_reference_url.clone());
        if let Some(url) = &url {
            values::reference_url(url)?;
        }
        let scope = own
            .territorial_scope
            .or(file.territorial_scope.clone())
            .unwrap_or_default();
        values::territorial_scope(&scope)?;
        // The words go with KEYWORD_OTHER only: the database drops them otherwise.
        let other = other.filter(|_| specification.iter().any(|k| k == "KEYWORD_OTHER"));
        Ok(Classification {
            category,
            category_addition: addition,
            category_specification: specification,
            category_specification_other: other,
            ground_reference_url: url,
            territorial_scope: scope,
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
