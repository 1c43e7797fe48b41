//! One statement of a batch checked the way the Commission's Transparency Database checks it:
//! the rules of `GroupedSubmissionsService::multi_rules` and its messages (`multi_messages`),
//! in digital-services-act/transparency-database at 69e80a0b (main, 2026-06-24), with the
//! enumerations of `enums.rs`. Messages not of `multi_messages` are Laravel 12's own (the
//! application publishes none of its own). Then what the controller does with a valid one:
//! `validated()`, the territories filtered and sorted, and the row `sanitizePayloadStatement`
//! stores.
//!
//! Laravel's order is kept: a field's rules run in turn; an absent field meets only the
//! implicit ones (`required*`), a null one is skipped by the others when the field is
//! `nullable`; an exclusion ends the field's rules and drops it, but what failed before it
//! still refuses the statement; a failed implicit rule ends the field's rules.

use serde_json::{Map, Value};

use super::{dates, enums::*};

const ILLEGAL: &str = "DECISION_GROUND_ILLEGAL_CONTENT";
const INCOMPATIBLE: &str = "DECISION_GROUND_INCOMPATIBLE_CONTENT";

enum Rule {
    Required,
    /// `Rule::requiredIf($flag)`: required when the list field holds the value (the flag is
    /// `in_array(value, field, true)` on the field when it is an array).
    RequiredWhenListHolds(&'static str, &'static str),
    /// `Rule::excludeIf(! $flag)`, the same flag.
    ExcludeUnlessListHolds(&'static str, &'static str),
    /// `required_if:field,value`, with `multi_messages`' message.
    RequiredIf(&'static str, &'static str, &'static str),
    RequiredWithoutAll(&'static [&'static str]),
    /// `exclude_unless:field,value`.
    ExcludeUnless(&'static str, &'static str),
    Nullable,
    Array,
    /// `in:` the keys; with `true` the literal string "null" too (`in:null,...`).
    In(&'static [&'static str], bool),
    Max(usize),
    /// `date_format:Y-m-d`, with `multi_messages`' message.
    DateFormat(&'static str),
    AfterOrEqual(&'static str),
    BeforeOrEqual(&'static str),
    Url,
    /// `string`.
    IsString,
    /// `regex:/^[a-zA-Z0-9-_]+$/D`, with `multi_messages`' message.
    Puid,
    /// `regex:/^[0-9]{13}$/`.
    Ean13,
}

use Rule::*;

const LAST: &str = "2038-01-01";

/// `multi_rules`, in its order (Laravel reports in that order).
const RULES: &[(&str, &[Rule])] = &[
    (
        "decision_visibility",
        &[
            Array,
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
            Max(500),
            RequiredWhenListHolds("decision_visibility", "DECISION_VISIBILITY_OTHER"),
            ExcludeUnlessListHolds("decision_visibility", "DECISION_VISIBILITY_OTHER"),
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
    (
        "category_specification",
        &[Array, In(KEYWORDS, true), Nullable],
    ),
    ("category_specification_other", &[Max(500)]),
    ("decision_ground", &[Required, In(DECISION_GROUNDS, false)]),
    ("decision_ground_reference_url", &[Url, Nullable, Max(500)]),
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
            RequiredIf(
                "decision_ground",
                ILLEGAL,
                "The illegal content explanation field is required when decision ground is illegal content.",
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
            In(INCOMPATIBLE_CONTENT_ILLEGALS, false),
            ExcludeUnless("decision_ground", INCOMPATIBLE),
        ],
    ),
    ("content_type", &[Array, Required, In(CONTENT_TYPES, false)]),
    (
        "content_type_other",
        &[
            Max(500),
            RequiredWhenListHolds("content_type", "CONTENT_TYPE_OTHER"),
            ExcludeUnlessListHolds("content_type", "CONTENT_TYPE_OTHER"),
        ],
    ),
    ("category", &[Required, In(CATEGORIES, false)]),
    ("category_addition", &[Array, In(CATEGORIES, false)]),
    (
        "territorial_scope",
        &[Array, Nullable, In(COUNTRY_CODES, false)],
    ),
    ("content_language", &[In(LANGUAGES, false), Nullable]),
    (
        "content_date",
        &[
            Required,
            DateFormat("The content date does not match the format YYYY-MM-DD."),
            AfterOrEqual("2000-01-01"),
            BeforeOrEqual(LAST),
        ],
    ),
    (
        "application_date",
        &[
            Required,
            DateFormat("The application date does not match the format YYYY-MM-DD."),
            AfterOrEqual("2020-01-01"),
            BeforeOrEqual(LAST),
        ],
    ),
    (
        "end_date_account_restriction",
        &[
            DateFormat("The end date of account restriction does not match the format YYYY-MM-DD."),
            Nullable,
            BeforeOrEqual(LAST),
        ],
    ),
    (
        "end_date_monetary_restriction",
        &[
            DateFormat(
                "The end date of monetary restriction does not match the format YYYY-MM-DD.",
            ),
            Nullable,
            BeforeOrEqual(LAST),
        ],
    ),
    (
        "end_date_service_restriction",
        &[
            DateFormat("The end date of service restriction does not match the format YYYY-MM-DD."),
            Nullable,
            BeforeOrEqual(LAST),
        ],
    ),
    (
        "end_date_visibility_restriction",
        &[
            DateFormat(
                "The end date of visibility restriction does not match the format YYYY-MM-DD.",
            ),
            Nullable,
            BeforeOrEqual(LAST),
        ],
    ),
    ("decision_facts", &[Required, Max(5000)]),
    ("source_type", &[Required, In(SOURCE_TYPES, false)]),
    ("source_identity", &[Max(500), Nullable]),
    (
        "automated_detection",
        &[Required, In(AUTOMATED_DETECTIONS, false)],
    ),
    (
        "automated_decision",
        &[Required, In(AUTOMATED_DECISIONS, false)],
    ),
    ("puid", &[Required, Max(500), Puid]),
    ("content_id", &[Array, Nullable]),
    ("content_id.EAN-13", &[IsString, Ean13]),
];

/// Every field the batch endpoint knows: any other key of a statement is dropped.
pub fn fields() -> impl Iterator<Item = &'static str> {
    RULES
        .iter()
        .map(|(field, _)| *field)
        .filter(|field| !field.contains('.'))
}

/// The field's value: `a.b` reads `b` of the object `a` (Laravel's `data_get`).
fn get<'a>(statement: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    match field.split_once('.') {
        Some((outer, inner)) => statement.get(outer)?.as_object()?.get(inner),
        None => statement.get(field),
    }
}

/// The statement's fields as `validated()` gives them (only fields with rules, without the
/// excluded ones), or its errors: field -> messages.
pub fn validate(statement: &Map<String, Value>) -> Result<Map<String, Value>, Map<String, Value>> {
    let mut kept = Map::new();
    let mut errors = Map::new();
    for (field, rules) in RULES {
        let value = get(statement, field);
        let nullable = rules.iter().any(|rule| matches!(rule, Nullable));
        let mut messages = Vec::new();
        let mut excluded = false;
        for rule in *rules {
            let implicit = matches!(
                rule,
                Required | RequiredIf(..) | RequiredWithoutAll(_) | RequiredWhenListHolds(..)
            );
            // Laravel runs a rule on an absent field only if it is implicit, and skips null
            // values of nullable fields.
            let skipped =
                !implicit && (value.is_none() || (nullable && value == Some(&Value::Null)));
            if skipped {
                continue;
            }
            if excludes(rule, statement) {
                excluded = true;
                break;
            }
            if let Some(message) = check(rule, field, value, statement, rules) {
                messages.push(Value::String(message));
                if implicit {
                    break;
                }
            }
        }
        if !messages.is_empty() {
            errors.insert((*field).to_owned(), Value::Array(messages));
        } else if let Some(value) = value.filter(|_| !excluded) {
            keep(&mut kept, field, value);
        }
    }
    if errors.is_empty() {
        Ok(kept)
    } else {
        Err(errors)
    }
}

/// `validated()`'s `Arr::set`: a nested field goes under its parent.
fn keep(kept: &mut Map<String, Value>, field: &str, value: &Value) {
    match field.split_once('.') {
        Some((outer, inner)) => {
            let parent = kept
                .entry(outer)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(parent) = parent {
                parent.insert(inner.to_owned(), value.clone());
            }
        }
        None => {
            // A parent validated after its nested field keeps only what was validated in it
            // (`excludeUnvalidatedArrayKeys`).
            if !kept.contains_key(field) {
                let value = if RULES
                    .iter()
                    .any(|(f, _)| f.starts_with(&format!("{field}.")))
                {
                    match value {
                        Value::Object(_) => Value::Object(Map::new()),
                        other => other.clone(),
                    }
                } else {
                    value.clone()
                };
                kept.insert(field.to_owned(), value);
            }
        }
    }
}

/// Whether `list` is an array (a JSON list or object) that holds `wanted` (`in_array(..,
/// true)`: a string equal to it).
fn list_holds(statement: &Map<String, Value>, list: &str, wanted: &str) -> bool {
    let holds = |v: &Value| v.as_str() == Some(wanted);
    match statement.get(list) {
        Some(Value::Array(items)) => items.iter().any(holds),
        Some(Value::Object(items)) => items.values().any(holds),
        _ => false,
    }
}

fn excludes(rule: &Rule, statement: &Map<String, Value>) -> bool {
    match rule {
        ExcludeUnless(other, wanted) => !equals(statement.get(*other), wanted),
        ExcludeUnlessListHolds(list, wanted) => !list_holds(statement, list, wanted),
        _ => false,
    }
}

/// Laravel's displayable name: `Str::snake`, underscores as spaces (`content_id.EAN-13` is
/// "content id. e a n-13").
pub fn display(field: &str) -> String {
    let mut snake = String::new();
    let chars: Vec<char> = field.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if i > 0 && c.is_ascii_uppercase() {
            snake.push('_');
        }
        snake.push(c.to_ascii_lowercase());
    }
    snake.replace('_', " ")
}

/// The message of `rule` failing on `field`, if it does.
fn check(
    rule: &Rule,
    field: &str,
    value: Option<&Value>,
    statement: &Map<String, Value>,
    rules: &[Rule],
) -> Option<String> {
    let name = display(field);
    let fails = |failed: bool, message: String| failed.then_some(message);
    match rule {
        Required => fails(!filled(value), format!("The {name} field is required.")),
        RequiredWhenListHolds(list, wanted) => fails(
            list_holds(statement, list, wanted) && !filled(value),
            format!("The {name} field is required."),
        ),
        RequiredIf(other, wanted, message) => fails(
            equals(statement.get(*other), wanted) && !filled(value),
            (*message).to_owned(),
        ),
        RequiredWithoutAll(others) => {
            let none = others.iter().all(|other| !filled(statement.get(*other)));
            let others: Vec<String> = others.iter().map(|o| display(o)).collect();
            fails(
                none && !filled(value),
                format!(
                    "The {name} field is required when none of {} are present.",
                    others.join(" / ")
                ),
            )
        }
        ExcludeUnless(..) | ExcludeUnlessListHolds(..) | Nullable => None,
        Array => fails(
            !matches!(value, Some(Value::Array(_) | Value::Object(_))),
            format!("The {name} field must be an array."),
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
                format!("The {name} field must not have more than {max} items."),
            ),
            Some(Value::Object(items)) => fails(
                items.len() > *max,
                format!("The {name} field must not have more than {max} items."),
            ),
            Some(v) => fails(
                php_string(v).chars().count() > *max,
                format!("The {name} field must not be greater than {max} characters."),
            ),
            None => None,
        },
        DateFormat(message) => fails(!value.is_some_and(dates::in_format), (*message).to_owned()),
        AfterOrEqual(bound) => fails(
            value
                .and_then(dates::read)
                .is_none_or(|at| at < dates::bound(bound)),
            format!("The {name} field must be a date after or equal to {bound}."),
        ),
        BeforeOrEqual(bound) => fails(
            value
                .and_then(dates::read)
                .is_none_or(|at| at > dates::bound(bound)),
            format!("The {name} field must be a date before or equal to {bound}."),
        ),
        Url => fails(
            !value.and_then(Value::as_str).is_some_and(is_url),
            format!("The {name} field must be a valid URL."),
        ),
        IsString => fails(
            !matches!(value, Some(Value::String(_))),
            format!("The {name} field must be a string."),
        ),
        Puid => fails(
            !pattern(value, |c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "The puid format is invalid.".to_owned(),
        ),
        Ean13 => fails(
            !(pattern(value, |c| c.is_ascii_digit())
                && value.is_some_and(|v| php_string(v).len() == 13)),
            format!("The {name} field format is invalid."),
        ),
    }
}

/// `regex:/^[...]+$/` on a string or a number: one character or more, all of the class.
fn pattern(value: Option<&Value>, class: impl Fn(char) -> bool) -> bool {
    value.is_some_and(|v| {
        let text = php_string(v);
        matches!(v, Value::String(_) | Value::Number(_))
            && !text.is_empty()
            && text.chars().all(&class)
    })
}

/// Laravel's `url` (`Str::isUrl`), as far as a statement needs: a scheme and `://`, then a
/// host.
fn is_url(text: &str) -> bool {
    text.contains("://")
        && reqwest::Url::parse(text).is_ok_and(|url| url.host_str().is_some_and(|h| !h.is_empty()))
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

/// What the controller makes of a valid statement before it is stored: the territories kept
/// to the EU and EEA's, each once, sorted (`filterSortEuropeanCountries`, always set).
pub fn settle(validated: &mut Map<String, Value>) {
    let mut scope: Vec<String> = match validated.get("territorial_scope") {
        Some(Value::Array(items)) => items.iter().map(php_string).collect(),
        Some(Value::Object(items)) => items.values().map(php_string).collect(),
        _ => Vec::new(),
    };
    scope.retain(|code| COUNTRY_CODES.contains(&code.as_str()));
    scope.sort();
    scope.dedup();
    validated.insert("territorial_scope".into(), scope.into());
}

/// The fields the controller sets to null when a statement lacks them, both where it answers
/// (`initOptionalFields`) and where it stores (`initAllFields`), each of which adds a few.
pub const OPTIONAL_FIELDS: &[&str] = &[
    "decision_visibility_other",
    "decision_monetary",
    "decision_monetary_other",
    "decision_provision",
    "decision_account",
    "account_type",
    "decision_ground_reference_url",
    "content_type_other",
    "category_specification_other",
    "incompatible_content_ground",
    "incompatible_content_explanation",
    "incompatible_content_illegal",
    "content_language",
    "end_date_account_restriction",
    "end_date_monetary_restriction",
    "end_date_service_restriction",
    "end_date_visibility_restriction",
    "source_type",
    "source_identity",
    "content_date",
    "illegal_content_explanation",
];

/// The row the database keeps of a settled statement, as its model reads it back:
/// `sanitizePayloadStatement` (every optional field set, the `_other` fields and the
/// ground's fields only where they apply, the EAN-13 as `content_id_ean`).
pub fn stored(statement: &Map<String, Value>) -> Map<String, Value> {
    let mut row = statement.clone();
    // initAllFields
    let more = ["category_addition", "category_specification"];
    for field in OPTIONAL_FIELDS.iter().chain(&more) {
        row.entry(*field).or_insert(Value::Null);
    }
    let ean = row
        .remove("content_id")
        .and_then(|id| id.get("EAN-13").cloned())
        .unwrap_or(Value::Null);
    row.insert("content_id_ean".into(), ean);
    let other_within = |row: &mut Map<String, Value>, field: &str, needle: &str| {
        let other = format!("{field}_other");
        if row.get(field).is_none_or(Value::is_null) {
            row.insert(field.to_owned(), Value::Null);
            row.insert(other, Value::Null);
            return;
        }
        if !list_holds(row, field, needle) {
            row.insert(other, Value::Null);
        }
    };
    other_within(&mut row, "category_specification", "KEYWORD_OTHER");
    other_within(&mut row, "content_type", "CONTENT_TYPE_OTHER");
    other_within(&mut row, "decision_visibility", "DECISION_VISIBILITY_OTHER");
    if row.get("source_type").and_then(Value::as_str) == Some("SOURCE_VOLUNTARY") {
        row.insert("source_identity".into(), Value::Null);
    }
    let only_when = |row: &mut Map<String, Value>, field: &str, other: &str, needle: &str| {
        if row.get(field).and_then(Value::as_str) != Some(needle) {
            row.insert(other.to_owned(), Value::Null);
        }
    };
    only_when(
        &mut row,
        "decision_monetary",
        "decision_monetary_other",
        "DECISION_MONETARY_OTHER",
    );
    for (other, ground) in [
        ("illegal_content_legal_ground", ILLEGAL),
        ("illegal_content_explanation", ILLEGAL),
        ("incompatible_content_ground", INCOMPATIBLE),
        ("incompatible_content_explanation", INCOMPATIBLE),
        ("incompatible_content_illegal", INCOMPATIBLE),
    ] {
        only_when(&mut row, "decision_ground", other, ground);
    }
    row
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
