//! The values a rules file's `statement` tables give the Transparency Database, checked at
//! load against its lists in force (`domain/dsa_schema.rs`): a value not in them is refused with
//! the field and the values it takes; a category of the 2023 schema, with the one to write now.

use crate::domain::dsa_schema::{
    ACCOUNT_TYPES, CATEGORIES, CONTENT_TYPES, COUNTRY_CODES, KEYWORD_OTHER, KEYWORDS, LANGUAGES,
    MAX_SHORT_TEXT, category_for_2023,
};

/// Why a statement table was refused. `field` is named as the rules file writes it
/// (`statement.category`, `statement.kinds.post.content_type`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatementError {
    #[error("`{field}` {value:?} is not one of the values it takes: {}", allowed.join(", "))]
    NotAllowed {
        field: String,
        value: String,
        allowed: &'static [&'static str],
    },
    #[error(
        "`{field}` {value:?} is a category of the Transparency Database's 2023 schema, which it refuses since 2025-07-01 (the schema changed): write {new:?} instead (docs/statements.md maps every old category)"
    )]
    Schema2023 {
        field: String,
        value: String,
        new: &'static str,
    },
    #[error("`statement.ground = \"illegal\"` needs `legal_ground` (the law relied on)")]
    NoLegalGround,
    #[error("`statement.kinds.{0}`: `CONTENT_TYPE_OTHER` needs `content_type_other`")]
    ContentTypeOther(String),
    #[error(
        "`statement.category_specification` has `KEYWORD_OTHER`: it needs `category_specification_other`, the specification in words"
    )]
    SpecificationOther,
    #[error(
        "`statement.decision_ground_reference_url` {0:?} must be an http or https URL of at most 500 characters"
    )]
    Url(String),
    #[error("`statement`: {0} must be 1-500 characters")]
    Length(&'static str),
}

/// `value` if it is one of `allowed`, for `field`.
pub(super) fn one_of(
    field: &str,
    value: &str,
    allowed: &'static [&'static str],
) -> Result<(), StatementError> {
    if allowed.contains(&value) {
        return Ok(());
    }
    Err(StatementError::NotAllowed {
        field: field.to_owned(),
        value: value.to_owned(),
        allowed,
    })
}

/// A category in force; a 2023 one is refused with the one to write now.
pub(super) fn category(field: &str, value: &str) -> Result<(), StatementError> {
    if let Some(new) = category_for_2023(value) {
        return Err(StatementError::Schema2023 {
            field: field.to_owned(),
            value: value.to_owned(),
            new,
        });
    }
    one_of(field, value, CATEGORIES)
}

pub(super) fn categories(field: &str, values: &[String]) -> Result<(), StatementError> {
    values.iter().try_for_each(|value| category(field, value))
}

pub(super) fn content_types(kind: &str, values: &[String]) -> Result<(), StatementError> {
    let field = format!("statement.kinds.{kind}.content_type");
    values
        .iter()
        .try_for_each(|value| one_of(&field, value, CONTENT_TYPES))
}

/// The specification and, with `KEYWORD_OTHER`, its words.
pub(super) fn specification(values: &[String], other: Option<&str>) -> Result<(), StatementError> {
    for value in values {
        one_of("statement.category_specification", value, KEYWORDS)?;
    }
    if values.iter().any(|v| v == KEYWORD_OTHER) {
        let other = other.ok_or(StatementError::SpecificationOther)?;
        short(other, "`category_specification_other`")?;
    }
    Ok(())
}

pub(super) fn territorial_scope(values: &[String]) -> Result<(), StatementError> {
    values
        .iter()
        .try_for_each(|value| one_of("statement.territorial_scope", value, COUNTRY_CODES))
}

pub(super) fn content_language(field: &str, value: &str) -> Result<(), StatementError> {
    one_of(field, value, LANGUAGES)
}

pub(super) fn account_type(field: &str, value: &str) -> Result<(), StatementError> {
    one_of(field, value, ACCOUNT_TYPES)
}

/// The database takes a URL (Laravel's `url`) of at most 500 characters; quiesce asks for an
/// http or https one with a host.
pub(super) fn reference_url(value: &str) -> Result<(), StatementError> {
    let valid = value.chars().count() <= MAX_SHORT_TEXT
        && reqwest::Url::parse(value).is_ok_and(|url| {
            matches!(url.scheme(), "http" | "https")
                && url.host_str().is_some_and(|h| !h.is_empty())
        });
    if valid {
        Ok(())
    } else {
        Err(StatementError::Url(value.to_owned()))
    }
}

/// A text of 1 to 500 characters.
pub(super) fn short(value: &str, what: &'static str) -> Result<(), StatementError> {
    let n = value.chars().count();
    if n == 0 || n > MAX_SHORT_TEXT {
        return Err(StatementError::Length(what));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_outside_the_lists_is_refused_with_the_values_it_takes() {
        let error = category("statement.category", "STATEMENT_CATEGORY_SPAM").unwrap_err();
        let message = error.to_string();
        assert!(message.contains("`statement.category` \"STATEMENT_CATEGORY_SPAM\""));
        assert!(message.contains("STATEMENT_CATEGORY_OTHER_VIOLATION_TC"));
        assert!(content_language("statement.content_language", "de").is_err());
        assert!(content_language("statement.content_language", "DE").is_ok());
        assert!(territorial_scope(&["DE".into(), "US".into()]).is_err());
        assert!(account_type("statement.account_type", "ACCOUNT_TYPE_BUSINESS").is_ok());
    }

    #[test]
    fn an_old_category_says_the_schema_changed_and_what_to_write() {
        let message = category("statement.category", "STATEMENT_CATEGORY_VIOLATION_TOS")
            .unwrap_err()
            .to_string();
        assert!(message.contains("2023 schema"), "{message}");
        assert!(
            message.contains("\"STATEMENT_CATEGORY_OTHER_VIOLATION_TC\""),
            "{message}"
        );
    }

    #[test]
    fn keyword_other_needs_its_words_and_a_url_is_http() {
        let other = vec!["KEYWORD_OTHER".to_owned()];
        assert_eq!(
            specification(&other, None),
            Err(StatementError::SpecificationOther)
        );
        assert!(specification(&other, Some("Fake giveaways")).is_ok());
        assert!(specification(&["KEYWORD_SPAM".into()], None).is_err());
        assert!(reference_url("https://forum.example/terms#4").is_ok());
        assert!(reference_url("forum.example/terms").is_err());
        assert!(reference_url("javascript:alert(1)").is_err());
        assert!(reference_url(&format!("https://x.example/{}", "a".repeat(500))).is_err());
    }
}
