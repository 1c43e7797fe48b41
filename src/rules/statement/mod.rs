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
//!
//! Here the tables as a rules file writes them, checked and resolved into each rule's
//! statement; `draft.rs` makes a decision's statement from them.

mod draft;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::statement_values::{self as values, StatementError};
use crate::domain::{Classification, Ground, LabelVisibility, dsa_schema::category_for_2023};

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
}
