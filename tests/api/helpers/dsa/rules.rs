//! One statement of reasons checked the way the Commission's Transparency Database checks it:
//! the rules of its `StatementStoreRequest` (digital-services-act/transparency-database at
//! 006d22e9), the enumeration keys of its `Statement` model at the same commit, the country
//! codes of its `EuropeanCountriesService` (0f6fa115) and the puid pattern its bulk validation
//! added later (`GroupedSubmissionsService`, 242ba47f). Messages are Laravel's as that
//! commit's own tests assert them ("does not match the format Y-m-d-H").

use serde_json::{Map, Value};

use super::dates;

pub const DECISION_VISIBILITIES: &[&str] = &[
    "DECISION_VISIBILITY_CONTENT_REMOVED",
    "DECISION_VISIBILITY_CONTENT_DISABLED",
    "DECISION_VISIBILITY_CONTENT_DEMOTED",
    "DECISION_VISIBILITY_OTHER",
];
pub const DECISION_MONETARIES: &[&str] = &[
    "DECISION_MONETARY_SUSPENSION",
    "DECISION_MONETARY_TERMINATION",
    "DECISION_MONETARY_OTHER",
];
pub const DECISION_PROVISIONS: &[&str] = &[
    "DECISION_PROVISION_PARTIAL_SUSPENSION",
    "DECISION_PROVISION_TOTAL_SUSPENSION",
    "DECISION_PROVISION_PARTIAL_TERMINATION",
    "DECISION_PROVISION_TOTAL_TERMINATION",
];
pub const DECISION_ACCOUNTS: &[&str] =
    &["DECISION_ACCOUNT_SUSPENDED", "DECISION_ACCOUNT_TERMINATED"];
pub const ACCOUNT_TYPES: &[&str] = &["ACCOUNT_TYPE_BUSINESS", "ACCOUNT_TYPE_PRIVATE"];
pub const DECISION_GROUNDS: &[&str] = &[
    "DECISION_GROUND_ILLEGAL_CONTENT",
    "DECISION_GROUND_INCOMPATIBLE_CONTENT",
];
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
pub const SOURCE_TYPES: &[&str] = &[
    "SOURCE_ARTICLE_16",
    "SOURCE_TRUSTED_FLAGGER",
    "SOURCE_VOLUNTARY",
];
/// automated_detection, automated_decision and incompatible_content_illegal take these values
/// themselves: the model lists them without keys.
pub const YES_NO: &[&str] = &["Yes", "No"];
pub const COUNTRY_CODES: &[&str] = &[
    "AT", "BE", "BG", "CY", "CZ", "DE", "DK", "EE", "ES", "FI", "FR", "GR", "HR", "HU", "IE", "IS",
    "IT", "LI", "LT", "LU", "LV", "MT", "NL", "NO", "PL", "PT", "RO", "SE", "SI", "SK",
];

const ILLEGAL: &str = "DECISION_GROUND_ILLEGAL_CONTENT";
const INCOMPATIBLE: &str = "DECISION_GROUND_INCOMPATIBLE_CONTENT";

enum Rule {
    Required,
    /// `required_if:field,value`, with the request's own message.
    RequiredIf(&'static str, &'static str, &'static str),
    RequiredWithoutAll(&'static [&'static str]),
    /// `Rule::requiredIf` on CONTENT_TYPE_OTHER being among the content types: plain `required`.
    RequiredWithOtherContentType,
    /// `exclude_unless:field,value`: otherwise the field's later rules are skipped and it is
    /// not kept.
    ExcludeUnless(&'static str, &'static str),
    ExcludeWithoutOtherContentType,
    Nullable,
    Array,
    /// `in:` the keys; with `or_null` the literal string "null" too (`in:null,...`).
    In(&'static [&'static str], bool),
    Max(usize),
    /// `date_format:Y-m-d-H`.
    DateFormat,
    /// `after:2020-01-01`: strictly after its midnight.
    AfterStart,
    AfterOrEqual(&'static str),
    /// `regex:/^[a-zA-Z0-9-_]+$/D`.
    PuidPattern,
}

use Rule::*;

/// The fields in the order of the request's rules (Laravel reports in that order).
const RULES: &[(&str, &[Rule])] = &[
    (
        "decision_visibility",
        &[
            In(DECISION_VISIBILITIES, true),
            RequiredWithoutAll(&[
                "decision_monetary",
                "decision_provision",
                "decision_account",
            ]),
            Nullable,
        ],
    ),
    (
        "decision_visibility_other",
        &[
            RequiredIf(
                "decision_visibility",
                "DECISION_VISIBILITY_OTHER",
                "The decision visibility other field is required when decision visibility is other.",
            ),
            ExcludeUnless("decision_visibility", "DECISION_VISIBILITY_OTHER"),
            Max(500),
        ],
    ),
    (
        "decision_monetary",
        &[
            In(DECISION_MONETARIES, true),
            RequiredWithoutAll(&[
                "decision_visibility",
                "decision_provision",
                "decision_account",
            ]),
            Nullable,
        ],
    ),
    (
        "decision_monetary_other",
        &[
            RequiredIf(
                "decision_monetary",
                "DECISION_MONETARY_OTHER",
                "The decision monetary other field is required when decision monetary is other.",
            ),
            ExcludeUnless("decision_monetary", "DECISION_MONETARY_OTHER"),
            Max(500),
        ],
    ),
    (
        "decision_provision",
        &[
            In(DECISION_PROVISIONS, true),
            RequiredWithoutAll(&[
                "decision_visibility",
                "decision_monetary",
                "decision_account",
            ]),
            Nullable,
        ],
    ),
    (
        "decision_account",
        &[
            In(DECISION_ACCOUNTS, true),
            RequiredWithoutAll(&[
                "decision_visibility",
                "decision_monetary",
                "decision_provision",
            ]),
            Nullable,
        ],
    ),
    ("account_type", &[In(ACCOUNT_TYPES, true), Nullable]),
    ("decision_ground", &[Required, In(DECISION_GROUNDS, false)]),
    (
        "illegal_content_legal_ground",
        &[
            RequiredIf(
                "decision_ground",
                ILLEGAL,
                "The illegal content legal ground field is required when decision ground is illegal content.",
            ),
            ExcludeUnless("decision_ground", ILLEGAL),
            Max(500),
        ],
    ),
    (
        "illegal_content_explanation",
        &[
            // The request's message for this field names the legal ground (sic).
            RequiredIf(
                "decision_ground",
                ILLEGAL,
                "The illegal content legal ground field is required when decision ground is illegal content.",
            ),
            ExcludeUnless("decision_ground", ILLEGAL),
            Max(2000),
        ],
    ),
    (
        "incompatible_content_ground",
        &[
            RequiredIf(
                "decision_ground",
                INCOMPATIBLE,
                "The incompatible content ground field is required when decision ground is incompatible content.",
            ),
            ExcludeUnless("decision_ground", INCOMPATIBLE),
            Max(500),
        ],
    ),
    (
        "incompatible_content_explanation",
        &[
            RequiredIf(
                "decision_ground",
                INCOMPATIBLE,
                "The incompatible content explanation field is required when decision ground is incompatible content.",
            ),
            ExcludeUnless("decision_ground", INCOMPATIBLE),
            Max(2000),
        ],
    ),
    (
        "incompatible_content_illegal",
        &[
            In(YES_NO, false),
            ExcludeUnless("decision_ground", INCOMPATIBLE),
        ],
    ),
    ("content_type", &[Array, Required, In(CONTENT_TYPES, false)]),
    (
        "content_type_other",
        &[
            Max(500),
            RequiredWithOtherContentType,
            ExcludeWithoutOtherContentType,
        ],
    ),
    ("category", &[Required, In(CATEGORIES, false)]),
    (
        "territorial_scope",
        &[Array, Nullable, In(COUNTRY_CODES, false)],
    ),
    ("application_date", &[Required, DateFormat, AfterStart]),
    (
        "end_date",
        &[DateFormat, Nullable, AfterOrEqual("application_date")],
    ),
    ("decision_facts", &[Required, Max(5000)]),
    ("source_type", &[Required, In(SOURCE_TYPES, false)]),
    ("source", &[Max(500)]),
    ("automated_detection", &[Required, In(YES_NO, false)]),
    ("automated_decision", &[Required, In(YES_NO, false)]),
    ("url", &[Required, Max(500)]),
    ("puid", &[Required, Max(500), PuidPattern]),
];

/// The statement's fields as the API keeps them (only fields it has rules for, without the
/// excluded ones), or its errors: field -> messages.
pub fn validate(statement: &Map<String, Value>) -> Result<Map<String, Value>, Map<String, Value>> {
    let mut kept = Map::new();
    let mut errors = Map::new();
    for (field, rules) in RULES {
        let value = statement.get(*field);
        let nullable = rules.iter().any(|rule| matches!(rule, Nullable));
        let mut messages = Vec::new();
        let mut excluded = false;
        for rule in *rules {
            // Laravel goes through the rules in order: an exclusion ends the field's checks
            // and drops it, but what failed before it still refuses the statement (a null
            // incompatible_content_illegal on an illegal-content statement does).
            if excludes(rule, statement) {
                excluded = true;
                break;
            }
            let implicit = matches!(
                rule,
                Required | RequiredIf(..) | RequiredWithoutAll(_) | RequiredWithOtherContentType
            );
            // Laravel runs a rule on an absent field only if it is implicit, and skips null
            // values of nullable fields.
            let skipped =
                !implicit && (value.is_none() || (nullable && value == Some(&Value::Null)));
            if skipped {
                continue;
            }
            if let Some(message) = check(rule, field, value, statement, rules) {
                messages.push(Value::String(message));
                // A failed implicit rule ends the field's validation.
                if implicit {
                    break;
                }
            }
        }
        if !messages.is_empty() {
            errors.insert((*field).to_owned(), Value::Array(messages));
        } else if let Some(value) = value.filter(|_| !excluded) {
            kept.insert((*field).to_owned(), value.clone());
        }
    }
    if errors.is_empty() {
        Ok(kept)
    } else {
        Err(errors)
    }
}

fn excludes(rule: &Rule, statement: &Map<String, Value>) -> bool {
    match rule {
        ExcludeUnless(other, wanted) => !equals(statement.get(*other), wanted),
        ExcludeWithoutOtherContentType => !other_content_type(statement),
        _ => false,
    }
}

/// The message of `rule` failing on `field`, if it does.
fn check(
    rule: &Rule,
    field: &str,
    value: Option<&Value>,
    statement: &Map<String, Value>,
    rules: &[Rule],
) -> Option<String> {
    let name = field.replace('_', " ");
    let fails = |failed: bool, message: String| failed.then_some(message);
    match rule {
        Required => fails(!filled(value), format!("The {name} field is required.")),
        RequiredWithOtherContentType => fails(
            other_content_type(statement) && !filled(value),
            format!("The {name} field is required."),
        ),
        RequiredIf(other, wanted, message) => fails(
            equals(statement.get(*other), wanted) && !filled(value),
            (*message).to_owned(),
        ),
        RequiredWithoutAll(others) => {
            let none = others.iter().all(|other| !filled(statement.get(*other)));
            let others: Vec<String> = others.iter().map(|o| o.replace('_', " ")).collect();
            fails(
                none && !filled(value),
                format!(
                    "The {name} field is required when none of {} are present.",
                    others.join(" / ")
                ),
            )
        }
        ExcludeUnless(..) | ExcludeWithoutOtherContentType | Nullable => None,
        Array => fails(
            !matches!(value, Some(Value::Array(_) | Value::Object(_))),
            format!("The {name} must be an array."),
        ),
        In(keys, or_null) => {
            let allowed = |v: &Value| {
                let text = php_string(v);
                scalar(v) && (keys.contains(&text.as_str()) || *or_null && text == "null")
            };
            // Each item of a list is checked when the field is an `array` one.
            let list = rules.iter().any(|rule| matches!(rule, Array));
            let valid = match value {
                Some(Value::Array(items)) if list => items.iter().all(allowed),
                Some(Value::Object(items)) if list => items.values().all(allowed),
                Some(v) => allowed(v),
                None => true,
            };
            fails(!valid, format!("The selected {name} is invalid."))
        }
        Max(max) => match value {
            Some(Value::Array(items)) => fails(
                items.len() > *max,
                format!("The {name} must not have more than {max} items."),
            ),
            Some(Value::Object(items)) => fails(
                items.len() > *max,
                format!("The {name} must not have more than {max} items."),
            ),
            Some(v) => fails(
                php_string(v).chars().count() > *max,
                format!("The {name} must not be greater than {max} characters."),
            ),
            None => None,
        },
        DateFormat => fails(
            !value.is_some_and(dates::in_format),
            format!("The {name} does not match the format Y-m-d-H."),
        ),
        AfterStart => fails(
            value
                .and_then(dates::read)
                .is_none_or(|at| at <= dates::start()),
            format!("The {name} must be a date after 2020-01-01."),
        ),
        // Passes when the other date is missing; fails when either cannot be read.
        AfterOrEqual(other) => {
            let before = match statement.get(*other).filter(|v| !v.is_null()) {
                None => false,
                Some(since) => match (value.and_then(dates::read), dates::read(since)) {
                    (Some(at), Some(since)) => at < since,
                    _ => true,
                },
            };
            let other = other.replace('_', " ");
            fails(
                before,
                format!("The {name} must be a date after or equal to {other}."),
            )
        }
        PuidPattern => {
            let valid = value.is_some_and(|v| {
                let text = php_string(v);
                matches!(v, Value::String(_) | Value::Number(_))
                    && !text.is_empty()
                    && text
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            });
            fails(!valid, format!("The {name} format is invalid."))
        }
    }
}

/// Laravel's `required`: not null, not a blank string, not an empty array.
fn filled(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.trim().is_empty(),
        Some(Value::Array(items)) => !items.is_empty(),
        Some(Value::Object(items)) => !items.is_empty(),
        Some(_) => true,
    }
}

fn scalar(value: &Value) -> bool {
    !matches!(value, Value::Array(_) | Value::Object(_))
}

/// How PHP casts a JSON scalar to a string.
pub fn php_string(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(true) => "1".to_owned(),
        _ => String::new(),
    }
}

/// The dependent rules' comparison: a string or number equal to `wanted` (null and booleans
/// are compared strictly, so never).
fn equals(value: Option<&Value>, wanted: &str) -> bool {
    matches!(value, Some(v @ (Value::String(_) | Value::Number(_))) if php_string(v) == wanted)
}

/// CONTENT_TYPE_OTHER among the content types (a lone string counts as a one-item list).
fn other_content_type(statement: &Map<String, Value>) -> bool {
    let other = |v: &Value| v.as_str() == Some("CONTENT_TYPE_OTHER");
    match statement.get("content_type") {
        Some(Value::Array(items)) => items.iter().any(other),
        Some(Value::Object(items)) => items.values().any(other),
        Some(v) => other(v),
        None => false,
    }
}

/// The request as Laravel's global middleware leaves it: strings trimmed (TrimStrings) and
/// empty ones turned to null (ConvertEmptyStringsToNull), at every depth.
pub fn normalize(value: Value) -> Value {
    match value {
        Value::String(s) => {
            let trimmed =
                s.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}' || c == '\u{200b}');
            if trimmed.is_empty() {
                Value::Null
            } else {
                Value::String(trimmed.to_owned())
            }
        }
        Value::Array(items) => Value::Array(items.into_iter().map(normalize).collect()),
        Value::Object(items) => {
            Value::Object(items.into_iter().map(|(k, v)| (k, normalize(v))).collect())
        }
        other => other,
    }
}
