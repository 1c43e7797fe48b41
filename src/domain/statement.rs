//! A statement of reasons (Digital Services Act, Art. 17): what a restricting decision tells the
//! author, and what the Commission's Transparency Database takes (Art. 24(5)). The fields and
//! their values are the database's own (`docs/statements.md` maps quiesce's decisions to them);
//! nothing here names a person: the facts are figures and rule names.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The longest explanation the database takes.
pub const MAX_EXPLANATION: usize = 2000;
/// The longest ground, URL, `*_other` text the database takes.
pub const MAX_SHORT_TEXT: usize = 500;
/// The longest facts text the database takes.
pub const MAX_FACTS: usize = 5000;

/// The statement categories the database lists.
pub const CATEGORIES: &[&str] = &[
    "STATEMENT_CATEGORY_PIRACY",
    "STATEMENT_CATEGORY_DISCRIMINATION",
    "STATEMENT_CATEGORY_COUNTERFEIT",
    "STATEMENT_CATEGORY_FRAUD",
    "STATEMENT_CATEGORY_TERRORISM",
    "STATEMENT_CATEGORY_CHILD_SAFETY",
    "STATEMENT_CATEGORY_NON_CONSENT",
    "STATEMENT_CATEGORY_MISINFORMATION",
    "STATEMENT_CATEGORY_VIOLATION_TOS",
    "STATEMENT_CATEGORY_UNCATEGORISED",
];

/// The content types the database lists.
pub const CONTENT_TYPES: &[&str] = &[
    "CONTENT_TYPE_APP",
    "CONTENT_TYPE_AUDIO",
    "CONTENT_TYPE_IMAGE",
    "CONTENT_TYPE_PRODUCT",
    "CONTENT_TYPE_SYNTHETIC_MEDIA",
    "CONTENT_TYPE_TEXT",
    "CONTENT_TYPE_VIDEO",
    "CONTENT_TYPE_OTHER",
];

/// Why the decision was taken: the law, or the platform's terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ground {
    /// Illegal content: the legal ground relied on.
    Illegal,
    /// Incompatible with the terms and conditions: the contractual ground relied on.
    Incompatible,
}

/// What the decision restricts, in the database's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restriction {
    /// The content is hidden (quiesce's `hide`).
    ContentDisabled,
    /// The account is suspended (`suspend` of an account kind).
    AccountSuspended,
    /// Content suspended that is not an account: the service to it is suspended.
    ProvisionSuspended,
    /// A label that restricts the content (its rule says so): "other" in the database's terms,
    /// named with the label.
    ContentLabelled,
}

/// Where the decision came from (`source_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Source {
    /// A notice (Art. 16): the events that triggered it were reports the platform marks as
    /// notices.
    #[serde(rename = "SOURCE_ARTICLE_16")]
    Notice,
    /// A notice from a trusted flagger (Art. 22).
    #[serde(rename = "SOURCE_TRUSTED_FLAGGER")]
    TrustedFlagger,
    /// The platform's own initiative.
    #[serde(rename = "SOURCE_VOLUNTARY")]
    Voluntary,
}

/// Everything a statement says, as quiesce decides it (the rules file's `statement` tables, the
/// entity's kind, the decision). [`StatementDraft::body`] is the database's statement.
#[derive(Debug, Clone, PartialEq)]
pub struct StatementDraft {
    pub puid: String,
    pub restriction: Restriction,
    pub ground: Ground,
    /// The legal or contractual ground, as the ground says.
    pub ground_reference: String,
    pub explanation: String,
    /// For a ground of incompatibility: whether the content is considered illegal too.
    pub also_illegal: bool,
    pub content_types: Vec<String>,
    /// The content type in words when it is `CONTENT_TYPE_OTHER`.
    pub content_type_other: Option<String>,
    pub category: String,
    pub keywords: Vec<String>,
    pub facts: String,
    pub source: Source,
    pub automated_detection: bool,
    pub automated_decision: bool,
    pub url: String,
    pub applied_at: DateTime<Utc>,
    pub ends_at: Option<DateTime<Utc>>,
    /// The label, for [`Restriction::ContentLabelled`].
    pub label: Option<String>,
}

/// A platform unique identifier: never reused (a random UUID), in the database's alphabet.
pub fn new_puid() -> String {
    format!("quiesce-{}", uuid::Uuid::new_v4())
}

/// The database's hour format (`Y-m-d-H`, UTC).
fn hour(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d-%H").to_string()
}

fn yes_no(value: bool) -> &'static str {
    if value { "Yes" } else { "No" }
}

/// Cuts a text to at most `max` characters (the database counts characters); borrowed when it
/// fits, as nearly every one does.
pub fn clip(text: &str, max: usize) -> Cow<'_, str> {
    if text.chars().count() <= max {
        return Cow::Borrowed(text);
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    Cow::Owned(out)
}

/// A statement's fields as the database names them, borrowed from its draft: what is written
/// with a decision, serialized once without an intermediate JSON tree (statements are written
/// on the evaluations' hot path: BENCHMARKS.md).
#[derive(Debug, Serialize)]
pub struct StatementBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    decision_visibility: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision_visibility_other: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision_account: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision_provision: Option<&'static str>,
    decision_ground: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    illegal_content_legal_ground: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    illegal_content_explanation: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    incompatible_content_ground: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    incompatible_content_explanation: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    incompatible_content_illegal: Option<&'static str>,
    content_type: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    content_type_other: Option<Cow<'a, str>>,
    category: &'a str,
    application_date: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_date: Option<String>,
    decision_facts: Cow<'a, str>,
    source_type: Source,
    automated_detection: &'static str,
    automated_decision: &'static str,
    url: Cow<'a, str>,
    puid: &'a str,
    /// quiesce's own: the rule's keywords (the database's schema has no field for them).
    #[serde(skip_serializing_if = "Option::is_none")]
    quiesce_keywords: Option<&'a [String]>,
}

impl StatementDraft {
    /// The statement as the Transparency Database's API takes it (one item of a batch).
    pub fn body(&self) -> serde_json::Value {
        serde_json::to_value(self.fields(false)).expect("a statement serializes")
    }

    /// What quiesce stores and sends the platform: the database's statement, and the keywords
    /// the rule named.
    pub fn stored(&self) -> StatementBody<'_> {
        self.fields(true)
    }

    fn fields(&self, keywords: bool) -> StatementBody<'_> {
        let (mut visibility, mut visibility_other, mut account, mut provision) =
            (None, None, None, None);
        match self.restriction {
            Restriction::ContentDisabled => {
                visibility = Some("DECISION_VISIBILITY_CONTENT_DISABLED")
            }
            Restriction::AccountSuspended => account = Some("DECISION_ACCOUNT_SUSPENDED"),
            Restriction::ProvisionSuspended => {
                provision = Some("DECISION_PROVISION_PARTIAL_SUSPENSION")
            }
            Restriction::ContentLabelled => {
                visibility = Some("DECISION_VISIBILITY_OTHER");
                let label = self.label.as_deref().unwrap_or("a label");
                let text = format!("Content labelled \"{label}\"");
                visibility_other = Some(clip(&text, MAX_SHORT_TEXT).into_owned());
            }
        }
        let reference = clip(&self.ground_reference, MAX_SHORT_TEXT);
        let explanation = clip(&self.explanation, MAX_EXPLANATION);
        let illegal = self.ground == Ground::Illegal;
        StatementBody {
            decision_visibility: visibility,
            decision_visibility_other: visibility_other,
            decision_account: account,
            decision_provision: provision,
            decision_ground: if illegal {
                "DECISION_GROUND_ILLEGAL_CONTENT"
            } else {
                "DECISION_GROUND_INCOMPATIBLE_CONTENT"
            },
            illegal_content_legal_ground: illegal.then(|| reference.clone()),
            illegal_content_explanation: illegal.then(|| explanation.clone()),
            incompatible_content_illegal: (!illegal).then(|| yes_no(self.also_illegal)),
            incompatible_content_ground: (!illegal).then_some(reference),
            incompatible_content_explanation: (!illegal).then_some(explanation),
            content_type: &self.content_types,
            content_type_other: self
                .content_type_other
                .as_deref()
                .map(|other| clip(other, MAX_SHORT_TEXT)),
            category: &self.category,
            application_date: hour(self.applied_at),
            end_date: self.ends_at.map(hour),
            decision_facts: clip(&self.facts, MAX_FACTS),
            source_type: self.source,
            automated_detection: yes_no(self.automated_detection),
            automated_decision: yes_no(self.automated_decision),
            url: clip(&self.url, MAX_SHORT_TEXT),
            puid: &self.puid,
            quiesce_keywords: (keywords && !self.keywords.is_empty())
                .then_some(self.keywords.as_slice()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft() -> StatementDraft {
        StatementDraft {
            puid: new_puid(),
            restriction: Restriction::ContentDisabled,
            ground: Ground::Incompatible,
            ground_reference: "Community guidelines, section 2".into(),
            explanation: "5 reports".into(),
            also_illegal: false,
            content_types: vec!["CONTENT_TYPE_TEXT".into()],
            content_type_other: None,
            category: "STATEMENT_CATEGORY_VIOLATION_TOS".into(),
            keywords: vec!["spam".into()],
            facts: "rule remove_reported: report 5".into(),
            source: Source::Notice,
            automated_detection: true,
            automated_decision: true,
            url: "https://forum.example/p/1".into(),
            applied_at: "2026-12-06T09:41:00Z".parse().unwrap(),
            ends_at: Some("2026-12-07T09:41:00Z".parse().unwrap()),
            label: None,
        }
    }

    #[test]
    fn a_hide_on_the_terms_fills_the_incompatible_fields_and_the_hour_dates() {
        let draft = draft();
        let body = draft.body();
        assert_eq!(
            body["decision_visibility"],
            "DECISION_VISIBILITY_CONTENT_DISABLED"
        );
        assert_eq!(
            body["decision_ground"],
            "DECISION_GROUND_INCOMPATIBLE_CONTENT"
        );
        assert_eq!(
            body["incompatible_content_ground"],
            "Community guidelines, section 2"
        );
        assert_eq!(body["incompatible_content_illegal"], "No");
        assert_eq!(body["application_date"], "2026-12-06-09");
        assert_eq!(body["end_date"], "2026-12-07-09");
        assert_eq!(body["source_type"], "SOURCE_ARTICLE_16");
        assert!(body.get("illegal_content_legal_ground").is_none());
        assert!(body.get("quiesce_keywords").is_none());
        let mut stored = serde_json::to_value(draft.stored()).unwrap();
        assert_eq!(stored["quiesce_keywords"][0], "spam");
        // What the Transparency Database is sent: the stored statement without quiesce's keys.
        stored.as_object_mut().unwrap().remove("quiesce_keywords");
        assert_eq!(stored, body);
    }

    #[test]
    fn a_restricting_label_is_an_other_visibility_restriction_named_with_its_label() {
        let mut labelled = draft();
        labelled.restriction = Restriction::ContentLabelled;
        labelled.label = Some("graphic".into());
        let body = labelled.body();
        assert_eq!(body["decision_visibility"], "DECISION_VISIBILITY_OTHER");
        assert_eq!(
            body["decision_visibility_other"],
            "Content labelled \"graphic\""
        );
    }

    #[test]
    fn puids_are_never_the_same_and_use_the_databases_alphabet() {
        let (a, b) = (new_puid(), new_puid());
        assert_ne!(a, b);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
    }

    #[test]
    fn long_texts_are_clipped_to_the_databases_lengths() {
        let mut long = draft();
        long.explanation = "x".repeat(3000);
        long.ground = Ground::Illegal;
        let body = long.body();
        let explanation = body["illegal_content_explanation"].as_str().unwrap();
        assert_eq!(explanation.chars().count(), MAX_EXPLANATION);
        assert!(body.get("incompatible_content_illegal").is_none());
    }
}
