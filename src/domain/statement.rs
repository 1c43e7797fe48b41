//! A statement of reasons (Digital Services Act, Art. 17): what a restricting decision tells the
//! author, and what the Commission's Transparency Database takes (Art. 24(5)). The fields and
//! their values are those of the database's schema in force (API v1 since 2025-07-01:
//! `dsa_schema.rs`; `docs/statements.md` maps quiesce's decisions to them); nothing here names a
//! person: the facts are figures and rule names.

use std::borrow::Cow;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use super::dsa_schema::{MAX_EXPLANATION, MAX_FACTS, MAX_SHORT_TEXT};

/// Why the decision was taken: the law, or the platform's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ground {
    /// Illegal content: the legal ground relied on.
    Illegal,
    /// Incompatible with the terms and conditions: the contractual ground relied on.
    Incompatible,
}

impl Ground {
    /// The values a rules file writes.
    pub const NAMES: &[&str] = &["illegal", "incompatible"];

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "illegal" => Some(Ground::Illegal),
            "incompatible" => Some(Ground::Incompatible),
            _ => None,
        }
    }
}

/// How a restricting label restricts the content (a rule's `labels_visibility`): the
/// database's visibility restriction it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LabelVisibility {
    /// Shown with the label (`DECISION_VISIBILITY_CONTENT_LABELLED`).
    #[default]
    Labelled,
    /// Ranked lower (`DECISION_VISIBILITY_CONTENT_DEMOTED`).
    Demoted,
    /// Shown to adults only (`DECISION_VISIBILITY_CONTENT_AGE_RESTRICTED`).
    AgeRestricted,
    /// No replies, votes or shares (`DECISION_VISIBILITY_CONTENT_INTERACTION_RESTRICTED`).
    InteractionRestricted,
}

impl LabelVisibility {
    /// The values a rules file writes, in the order of the variants.
    pub const NAMES: &[&str] = &[
        "labelled",
        "demoted",
        "age_restricted",
        "interaction_restricted",
    ];

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "labelled" => LabelVisibility::Labelled,
            "demoted" => LabelVisibility::Demoted,
            "age_restricted" => LabelVisibility::AgeRestricted,
            "interaction_restricted" => LabelVisibility::InteractionRestricted,
            _ => return None,
        })
    }

    fn field(self) -> &'static str {
        match self {
            LabelVisibility::Labelled => "DECISION_VISIBILITY_CONTENT_LABELLED",
            LabelVisibility::Demoted => "DECISION_VISIBILITY_CONTENT_DEMOTED",
            LabelVisibility::AgeRestricted => "DECISION_VISIBILITY_CONTENT_AGE_RESTRICTED",
            LabelVisibility::InteractionRestricted => {
                "DECISION_VISIBILITY_CONTENT_INTERACTION_RESTRICTED"
            }
        }
    }
}

/// What the decision restricts, in the database's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restriction {
    /// The content is hidden (quiesce's `hide`): access to it is disabled.
    ContentDisabled,
    /// The account is suspended (`suspend` of an account kind).
    AccountSuspended,
    /// Content suspended that is not an account: the service to it is suspended.
    ProvisionSuspended,
    /// A label that restricts the content (its rule says so), as its rule says it shows.
    ContentLabelled(LabelVisibility),
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

/// How far the decision itself (not the detection) was automated (`automated_decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Automation {
    /// A rule decided: no person took part.
    Fully,
    /// A moderator decided on what a rule sent them (a review queue decision): a rule weighed
    /// the figures, a person decided.
    Partially,
    /// A moderator decided on their own (an override, a reversal that restricts again).
    NotAutomated,
}

impl Automation {
    fn field(self) -> &'static str {
        match self {
            Automation::Fully => "AUTOMATED_DECISION_FULLY",
            Automation::Partially => "AUTOMATED_DECISION_PARTIALLY",
            Automation::NotAutomated => "AUTOMATED_DECISION_NOT_AUTOMATED",
        }
    }
}

/// What a rule (or the rules file's defaults) says of its statements' classification: checked
/// against the database's lists when the rules load (`rules/statement.rs`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Classification {
    pub category: String,
    pub category_addition: Vec<String>,
    pub category_specification: Vec<String>,
    /// The specification in words, with `KEYWORD_OTHER`.
    pub category_specification_other: Option<String>,
    /// Where the terms or the law relied on can be read.
    pub ground_reference_url: Option<String>,
    pub territorial_scope: Vec<String>,
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
    pub classification: Classification,
    pub content_language: Option<String>,
    pub account_type: Option<String>,
    /// quiesce's own: the rule's keywords (free words; the database's are the specification).
    pub keywords: Vec<String>,
    pub facts: String,
    pub source: Source,
    pub automated_detection: bool,
    pub automated_decision: Automation,
    /// quiesce's own: where the content is, for the platform (the database has no such field).
    pub url: String,
    pub applied_at: DateTime<Utc>,
    /// The day the content was posted: the sender's, else its entity's first event's. `None`
    /// for a moderator's decision: the statement that writes it reads it from the entity's
    /// row (`store/statements.rs`).
    pub content_date: Option<NaiveDate>,
    /// When a timed restriction ends.
    pub ends_at: Option<DateTime<Utc>>,
}

/// A platform unique identifier: never reused (a random UUID), in the database's alphabet.
pub fn new_puid() -> String {
    format!("quiesce-{}", uuid::Uuid::new_v4())
}

/// The database's date format (`Y-m-d`), of a moment in UTC.
fn day(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d").to_string()
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

fn is_empty(list: &[String]) -> bool {
    list.is_empty()
}

/// A statement's fields as the database names them, borrowed from its draft: what is written
/// with a decision, serialized once without an intermediate JSON tree (statements are written
/// on the evaluations' hot path: BENCHMARKS.md). The `quiesce_` keys are quiesce's own, for the
/// platform: the Transparency Database is sent the statement without them (`store/outbox.rs`).
#[derive(Debug, Serialize)]
pub struct StatementBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    decision_visibility: Option<[&'static str; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision_account: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision_provision: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    account_type: Option<&'a str>,
    #[serde(skip_serializing_if = "is_empty")]
    category_specification: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    category_specification_other: Option<Cow<'a, str>>,
    decision_ground: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision_ground_reference_url: Option<&'a str>,
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
    #[serde(skip_serializing_if = "is_empty")]
    category_addition: &'a [String],
    #[serde(skip_serializing_if = "is_empty")]
    territorial_scope: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    content_language: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_date: Option<String>,
    application_date: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_date_visibility_restriction: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_date_account_restriction: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_date_service_restriction: Option<String>,
    decision_facts: Cow<'a, str>,
    source_type: Source,
    automated_detection: &'static str,
    automated_decision: &'static str,
    puid: &'a str,
    /// Where the content is.
    #[serde(skip_serializing_if = "Option::is_none")]
    quiesce_url: Option<Cow<'a, str>>,
    /// When a timed restriction ends, to the second (the database takes its day).
    #[serde(skip_serializing_if = "Option::is_none")]
    quiesce_ends_at: Option<DateTime<Utc>>,
    /// The rule's keywords.
    #[serde(skip_serializing_if = "Option::is_none")]
    quiesce_keywords: Option<&'a [String]>,
}

impl StatementDraft {
    /// The statement as the Transparency Database's API takes it (one item of a batch).
    pub fn body(&self) -> serde_json::Value {
        serde_json::to_value(self.fields(false)).expect("a statement serializes")
    }

    /// What quiesce stores and sends the platform: the database's statement, and quiesce's own
    /// keys (`quiesce_url`, `quiesce_ends_at`, `quiesce_keywords`).
    pub fn stored(&self) -> StatementBody<'_> {
        self.fields(true)
    }

    fn fields(&self, own: bool) -> StatementBody<'_> {
        let (mut visibility, mut account, mut provision) = (None, None, None);
        let end = self.ends_at.map(day);
        let (mut visibility_end, mut account_end, mut service_end) = (None, None, None);
        match self.restriction {
            Restriction::ContentDisabled => {
                visibility = Some(["DECISION_VISIBILITY_CONTENT_DISABLED"]);
                visibility_end = end;
            }
            Restriction::AccountSuspended => {
                account = Some("DECISION_ACCOUNT_SUSPENDED");
                account_end = end;
            }
            Restriction::ProvisionSuspended => {
                provision = Some("DECISION_PROVISION_PARTIAL_SUSPENSION");
                service_end = end;
            }
            Restriction::ContentLabelled(shown) => {
                visibility = Some([shown.field()]);
                visibility_end = end;
            }
        }
        let reference = clip(&self.ground_reference, MAX_SHORT_TEXT);
        let explanation = clip(&self.explanation, MAX_EXPLANATION);
        let illegal = self.ground == Ground::Illegal;
        let classification = &self.classification;
        StatementBody {
            decision_visibility: visibility,
            decision_account: account,
            decision_provision: provision,
            account_type: self.account_type.as_deref(),
            category_specification: &classification.category_specification,
            category_specification_other: classification
                .category_specification_other
                .as_deref()
                .map(|other| clip(other, MAX_SHORT_TEXT)),
            decision_ground: if illegal {
                "DECISION_GROUND_ILLEGAL_CONTENT"
            } else {
                "DECISION_GROUND_INCOMPATIBLE_CONTENT"
            },
            decision_ground_reference_url: classification.ground_reference_url.as_deref(),
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
            category: &classification.category,
            category_addition: &classification.category_addition,
            territorial_scope: &classification.territorial_scope,
            content_language: self.content_language.as_deref(),
            content_date: self
                .content_date
                .map(|date| date.format("%Y-%m-%d").to_string()),
            application_date: day(self.applied_at),
            end_date_visibility_restriction: visibility_end,
            end_date_account_restriction: account_end,
            end_date_service_restriction: service_end,
            decision_facts: clip(&self.facts, MAX_FACTS),
            source_type: self.source,
            automated_detection: yes_no(self.automated_detection),
            automated_decision: self.automated_decision.field(),
            puid: &self.puid,
            quiesce_url: own.then(|| clip(&self.url, MAX_SHORT_TEXT)),
            quiesce_ends_at: self.ends_at.filter(|_| own),
            quiesce_keywords: (own && !self.keywords.is_empty())
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
            classification: Classification {
                category: "STATEMENT_CATEGORY_OTHER_VIOLATION_TC".into(),
                ..Classification::default()
            },
            content_language: None,
            account_type: None,
            keywords: vec!["spam".into()],
            facts: "rule remove_reported: report 5".into(),
            source: Source::Notice,
            automated_detection: true,
            automated_decision: Automation::Fully,
            url: "https://forum.example/p/1".into(),
            applied_at: "2026-12-06T09:41:00Z".parse().unwrap(),
            content_date: NaiveDate::from_ymd_opt(2026, 12, 1),
            ends_at: Some("2026-12-07T09:41:00Z".parse().unwrap()),
        }
    }

    #[test]
    fn a_timed_hide_on_the_terms_is_a_visibility_restriction_with_its_end_and_days() {
        let draft = draft();
        let body = draft.body();
        assert_eq!(
            body["decision_visibility"],
            serde_json::json!(["DECISION_VISIBILITY_CONTENT_DISABLED"])
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
        assert_eq!(body["application_date"], "2026-12-06");
        assert_eq!(body["content_date"], "2026-12-01");
        assert_eq!(body["end_date_visibility_restriction"], "2026-12-07");
        assert_eq!(body["automated_decision"], "AUTOMATED_DECISION_FULLY");
        assert_eq!(body["source_type"], "SOURCE_ARTICLE_16");
        for absent in [
            "illegal_content_legal_ground",
            "end_date",
            "url",
            "end_date_account_restriction",
            "category_addition",
            "quiesce_keywords",
            "quiesce_url",
        ] {
            assert!(body.get(absent).is_none(), "{absent}: {body}");
        }
        let mut stored = serde_json::to_value(draft.stored()).unwrap();
        assert_eq!(stored["quiesce_keywords"][0], "spam");
        assert_eq!(stored["quiesce_url"], "https://forum.example/p/1");
        assert_eq!(stored["quiesce_ends_at"], "2026-12-07T09:41:00Z");
        // What the Transparency Database is sent: the stored statement without quiesce's keys.
        let own = stored.as_object_mut().unwrap();
        own.retain(|key, _| !key.starts_with("quiesce_"));
        assert_eq!(stored, body);
    }

    #[test]
    fn each_restriction_has_its_decision_field_and_its_end_field() {
        let mut account = draft();
        account.restriction = Restriction::AccountSuspended;
        account.automated_decision = Automation::NotAutomated;
        let body = account.body();
        assert_eq!(body["decision_account"], "DECISION_ACCOUNT_SUSPENDED");
        assert_eq!(body["end_date_account_restriction"], "2026-12-07");
        assert!(body.get("decision_visibility").is_none());
        assert!(body.get("end_date_visibility_restriction").is_none());
        assert_eq!(
            body["automated_decision"],
            "AUTOMATED_DECISION_NOT_AUTOMATED"
        );

        let mut provision = draft();
        provision.restriction = Restriction::ProvisionSuspended;
        provision.ends_at = None;
        let body = provision.body();
        assert_eq!(
            body["decision_provision"],
            "DECISION_PROVISION_PARTIAL_SUSPENSION"
        );
        assert!(body.get("end_date_service_restriction").is_none());
    }

    #[test]
    fn a_restricting_label_is_labelled_content_or_the_visibility_its_rule_names() {
        let mut labelled = draft();
        labelled.restriction = Restriction::ContentLabelled(LabelVisibility::default());
        labelled.ends_at = None;
        let body = labelled.body();
        assert_eq!(
            body["decision_visibility"],
            serde_json::json!(["DECISION_VISIBILITY_CONTENT_LABELLED"])
        );
        assert!(body.get("decision_visibility_other").is_none());
        labelled.restriction = Restriction::ContentLabelled(LabelVisibility::Demoted);
        assert_eq!(
            labelled.body()["decision_visibility"],
            serde_json::json!(["DECISION_VISIBILITY_CONTENT_DEMOTED"])
        );
        for name in LabelVisibility::NAMES {
            assert!(LabelVisibility::parse(name).is_some(), "{name}");
        }
    }

    #[test]
    fn the_classification_is_sent_as_the_rule_gives_it() {
        let mut classified = draft();
        classified.classification = Classification {
            category: "STATEMENT_CATEGORY_SCAMS_AND_FRAUD".into(),
            category_addition: vec!["STATEMENT_CATEGORY_CONSUMER_INFORMATION".into()],
            category_specification: vec!["KEYWORD_OTHER".into()],
            category_specification_other: Some("Fake giveaways".into()),
            ground_reference_url: Some("https://forum.example/terms#2".into()),
            territorial_scope: vec!["DE".into(), "FR".into()],
        };
        classified.content_language = Some("DE".into());
        classified.account_type = Some("ACCOUNT_TYPE_PRIVATE".into());
        let body = classified.body();
        assert_eq!(
            body["category_addition"],
            serde_json::json!(["STATEMENT_CATEGORY_CONSUMER_INFORMATION"])
        );
        assert_eq!(
            body["category_specification"],
            serde_json::json!(["KEYWORD_OTHER"])
        );
        assert_eq!(body["category_specification_other"], "Fake giveaways");
        assert_eq!(
            body["decision_ground_reference_url"],
            "https://forum.example/terms#2"
        );
        assert_eq!(body["territorial_scope"], serde_json::json!(["DE", "FR"]));
        assert_eq!(body["content_language"], "DE");
        assert_eq!(body["account_type"], "ACCOUNT_TYPE_PRIVATE");
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
