//! Attributes: the scalar facts an event carries (`reason`, `score`) or the platform knows of an
//! entity (`account_age_days`, `role`). The rules file declares each one it reads, with its type
//! and, for a string, the values it may take; ingest and the context endpoint refuse anything
//! else, within bounds the settings give ([`AttributeLimits`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One attribute's value: a string, a number or a boolean (nothing nested).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum Scalar {
    Bool(bool),
    Num(f64),
    Str(String),
}

// By hand rather than `untagged`: every snapshot reads its events' attributes, and an untagged
// enum buffers each value and builds an error for every variant it tries first.
impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string, a number or a boolean")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Num(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::Num(v as f64))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Num(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Scalar, E> {
                Ok(Scalar::Str(v))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl Scalar {
    /// Reads a JSON value; `None` for an array, an object or null.
    pub fn from_json(value: &serde_json::Value) -> Option<Self> {
        match value {
            serde_json::Value::String(s) => Some(Scalar::Str(s.clone())),
            serde_json::Value::Number(n) => n.as_f64().map(Scalar::Num),
            serde_json::Value::Bool(b) => Some(Scalar::Bool(*b)),
            _ => None,
        }
    }

    fn kind(&self) -> AttributeType {
        match self {
            Scalar::Bool(_) => AttributeType::Boolean,
            Scalar::Num(_) => AttributeType::Number,
            Scalar::Str(_) => AttributeType::String,
        }
    }

    /// The value as aggregates key it: a string as is, a boolean as `true`/`false`.
    pub fn key(&self) -> String {
        match self {
            Scalar::Bool(b) => b.to_string(),
            Scalar::Num(n) => n.to_string(),
            Scalar::Str(s) => s.clone(),
        }
    }
}

/// Attributes by name, in name order.
pub type Attributes = BTreeMap<String, Scalar>;

/// The type a declaration gives an attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AttributeType {
    String,
    Number,
    Boolean,
}

impl AttributeType {
    pub fn as_str(self) -> &'static str {
        match self {
            AttributeType::String => "string",
            AttributeType::Number => "number",
            AttributeType::Boolean => "boolean",
        }
    }
}

/// One declared attribute: `[attributes.event.reason] type = "string", values = [...]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Declared {
    #[serde(rename = "type")]
    pub kind: AttributeType,
    /// For a string: the values it may take (absent: any string within the length bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
}

/// A declaration, named as the rules file writes it: `attributes.<scope>.<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclarationAt {
    pub scope: Scope,
    pub name: String,
}

impl std::fmt::Display for DeclarationAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "attributes.{}.{}", self.scope.as_str(), self.name)
    }
}

/// Why a declaration under `[attributes]` was refused when the rules load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidDeclaration {
    #[error("{0}: a name is a letter or _, then letters, digits or _ (at most {MAX_NAME_LEN})")]
    Name(DeclarationAt),
    #[error(
        "{0}: quiesce's own attribute (the content's date, for statements of reasons), never declared"
    )]
    Reserved(DeclarationAt),
    #[error("{0}: `values` lists no value")]
    NoValues(DeclarationAt),
    #[error("{at}: `values` is for strings, not a {}", kind.as_str())]
    ValuesNotString {
        at: DeclarationAt,
        kind: AttributeType,
    },
}

/// Where an attribute is declared: on events, or on entities (their context).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Event,
    Entity,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Event => "event",
            Scope::Entity => "entity",
        }
    }
}

/// The `[attributes]` table of a rules file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Declarations {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub event: BTreeMap<String, Declared>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub entity: BTreeMap<String, Declared>,
}

/// The bounds an attribute object is held to (settings `max_attributes`, `max_attribute_len`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttributeLimits {
    /// Most attributes in one object.
    pub max_attributes: usize,
    /// Longest string value, in characters.
    pub max_len: usize,
}

/// What is wrong with an attribute object: the attribute (`None`: the object as a whole) and
/// the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributeError {
    pub attribute: Option<String>,
    pub message: String,
}

impl AttributeError {
    fn of(attribute: &str, message: impl Into<String>) -> Self {
        Self {
            attribute: Some(attribute.to_owned()),
            message: message.into(),
        }
    }
}

/// The event attribute that says when the entity's content was posted (`YYYY-MM-DD`): quiesce's
/// own, never declared, the `content_date` of the entity's statements of reasons (the latest
/// one sent wins); not a figure the rules read.
pub const CONTENT_DATE: &str = "content_date";

/// A `content_date` attribute's value: a day the Transparency Database takes.
fn content_date(value: &Scalar) -> Result<(), String> {
    match value {
        Scalar::Str(text) => super::dsa_schema::parse_content_date(text).map(|_| ()),
        _ => Err("must be a date written YYYY-MM-DD (a string)".into()),
    }
}

/// Longest attribute name, in characters.
pub const MAX_NAME_LEN: usize = 64;

/// An attribute name: a letter or `_`, then letters, digits and `_` (a CEL identifier).
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= MAX_NAME_LEN
}

/// Reads a JSON object of attributes (as an event or the context endpoint carries it): each
/// value a string, a number or a boolean. Null, or an empty object, is no attributes.
pub fn attributes_from_json(
    value: &serde_json::Value,
) -> Result<Option<Attributes>, AttributeError> {
    let object = match value {
        serde_json::Value::Null => return Ok(None),
        serde_json::Value::Object(object) => object,
        _ => {
            return Err(AttributeError {
                attribute: None,
                message: "must be an object of names to strings, numbers or booleans".into(),
            });
        }
    };
    let mut attributes = Attributes::new();
    for (name, value) in object {
        let scalar = Scalar::from_json(value).ok_or_else(|| {
            AttributeError::of(
                name,
                "must be a string, a number or a boolean (nothing nested)",
            )
        })?;
        attributes.insert(name.clone(), scalar);
    }
    Ok((!attributes.is_empty()).then_some(attributes))
}

impl Declarations {
    pub fn is_empty(&self) -> bool {
        self.event.is_empty() && self.entity.is_empty()
    }

    pub fn of(&self, scope: Scope) -> &BTreeMap<String, Declared> {
        match scope {
            Scope::Event => &self.event,
            Scope::Entity => &self.entity,
        }
    }

    /// Checks the declarations themselves when the rules load: names, and `values` only on
    /// strings, never empty.
    pub fn check(&self) -> Result<(), InvalidDeclaration> {
        for scope in [Scope::Event, Scope::Entity] {
            for (name, declared) in self.of(scope) {
                let at = || DeclarationAt {
                    scope,
                    name: name.clone(),
                };
                if !valid_name(name) {
                    return Err(InvalidDeclaration::Name(at()));
                }
                if scope == Scope::Event && name == CONTENT_DATE {
                    return Err(InvalidDeclaration::Reserved(at()));
                }
                match (&declared.values, declared.kind) {
                    (Some(values), AttributeType::String) if values.is_empty() => {
                        return Err(InvalidDeclaration::NoValues(at()));
                    }
                    (Some(_), kind) if kind != AttributeType::String => {
                        return Err(InvalidDeclaration::ValuesNotString { at: at(), kind });
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Checks attributes against what is declared in `scope` and the bounds: how many, each
    /// declared, of its type, among its values, not too long. Names the first attribute (in
    /// name order) that is wrong.
    pub fn validate(
        &self,
        scope: Scope,
        attributes: &Attributes,
        limits: AttributeLimits,
    ) -> Result<(), AttributeError> {
        if attributes.len() > limits.max_attributes {
            return Err(AttributeError {
                attribute: None,
                message: format!(
                    "{} attributes; at most {} are accepted",
                    attributes.len(),
                    limits.max_attributes
                ),
            });
        }
        let declared = self.of(scope);
        for (name, value) in attributes {
            if scope == Scope::Event && name == CONTENT_DATE {
                content_date(value).map_err(|message| AttributeError::of(name, message))?;
                continue;
            }
            let Some(declaration) = declared.get(name) else {
                let known: Vec<&str> = declared.keys().map(String::as_str).collect();
                let known = if known.is_empty() {
                    "none are declared".to_owned()
                } else {
                    format!("declared: {}", known.join(", "))
                };
                return Err(AttributeError::of(
                    name,
                    format!(
                        "not declared under [attributes.{}] in the rules in force ({known})",
                        scope.as_str()
                    ),
                ));
            };
            if value.kind() != declaration.kind {
                return Err(AttributeError::of(
                    name,
                    format!("must be a {}", declaration.kind.as_str()),
                ));
            }
            match value {
                Scalar::Str(s) if s.chars().count() > limits.max_len => {
                    return Err(AttributeError::of(
                        name,
                        format!("longer than {} characters", limits.max_len),
                    ));
                }
                // Postgres' jsonb cannot hold a NUL, and no control character is a fact.
                Scalar::Str(s) if s.chars().any(char::is_control) => {
                    return Err(AttributeError::of(
                        name,
                        "must not contain control characters",
                    ));
                }
                Scalar::Str(s)
                    if declaration
                        .values
                        .as_ref()
                        .is_some_and(|values| !values.contains(s)) =>
                {
                    let values = declaration.values.as_deref().unwrap_or_default();
                    return Err(AttributeError::of(
                        name,
                        format!("must be one of {}", values.join(", ")),
                    ));
                }
                Scalar::Num(n) if !n.is_finite() => {
                    return Err(AttributeError::of(name, "must be a finite number"));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declarations() -> Declarations {
        toml::from_str(
            r#"
            [event.reason]
            type = "string"
            values = ["spam", "abuse"]
            [event.score]
            type = "number"
            [event.note]
            type = "string"
            [entity.verified]
            type = "boolean"
            "#,
        )
        .unwrap()
    }

    const LIMITS: AttributeLimits = AttributeLimits {
        max_attributes: 3,
        max_len: 8,
    };

    fn check(scope: Scope, json: serde_json::Value) -> Result<(), AttributeError> {
        let attributes = attributes_from_json(&json)?.unwrap_or_default();
        declarations().validate(scope, &attributes, LIMITS)
    }

    fn named(result: Result<(), AttributeError>) -> (Option<String>, String) {
        let error = result.unwrap_err();
        (error.attribute, error.message)
    }

    #[test]
    fn declared_attributes_of_their_type_are_accepted() {
        check(
            Scope::Event,
            serde_json::json!({"reason": "spam", "score": 0.93, "note": "short"}),
        )
        .unwrap();
        check(Scope::Entity, serde_json::json!({"verified": true})).unwrap();
        assert_eq!(attributes_from_json(&serde_json::json!({})).unwrap(), None);
        assert_eq!(
            attributes_from_json(&serde_json::Value::Null).unwrap(),
            None
        );
    }

    #[test]
    fn each_problem_names_its_attribute() {
        let (name, message) = named(check(Scope::Event, serde_json::json!({"colour": "red"})));
        assert_eq!(name.as_deref(), Some("colour"));
        assert!(
            message.contains("not declared") && message.contains("reason"),
            "{message}"
        );
        let (name, message) = named(check(Scope::Event, serde_json::json!({"score": "high"})));
        assert_eq!(
            (name.as_deref(), message.as_str()),
            (Some("score"), "must be a number")
        );
        let (name, message) = named(check(Scope::Event, serde_json::json!({"reason": "rude"})));
        assert_eq!(name.as_deref(), Some("reason"));
        assert!(message.contains("spam, abuse"), "{message}");
        let (name, message) = named(check(
            Scope::Event,
            serde_json::json!({"note": "much too long"}),
        ));
        assert_eq!(name.as_deref(), Some("note"));
        assert!(message.contains("8 characters"), "{message}");
        let (name, message) = named(check(Scope::Event, serde_json::json!({"note": "a\u{0}b"})));
        assert_eq!(name.as_deref(), Some("note"));
        assert!(message.contains("control characters"), "{message}");
        let (name, _) = named(check(Scope::Event, serde_json::json!({"reason": ["spam"]})));
        assert_eq!(name.as_deref(), Some("reason"));
        let (name, _) = named(check(Scope::Entity, serde_json::json!({"reason": "spam"})));
        assert_eq!(
            name.as_deref(),
            Some("reason"),
            "an event attribute is not an entity's"
        );
        let four = serde_json::json!({"reason": "spam", "score": 1, "note": "n", "x": 1});
        let (name, message) = named(check(Scope::Event, four));
        assert_eq!(name, None);
        assert!(message.contains("at most 3"), "{message}");
        let (name, _) = named(check(Scope::Event, serde_json::json!("spam")));
        assert_eq!(name, None);
    }

    #[test]
    fn an_events_content_date_is_quiesces_own_a_day_and_never_declared() {
        check(
            Scope::Event,
            serde_json::json!({"content_date": "2026-11-30"}),
        )
        .unwrap();
        for bad in [
            serde_json::json!("2026-11-31"),
            serde_json::json!("30.11.2026"),
            serde_json::json!(20261130),
        ] {
            let (name, message) = named(check(
                Scope::Event,
                serde_json::json!({"content_date": bad}),
            ));
            assert_eq!(name.as_deref(), Some("content_date"));
            assert!(message.contains("YYYY-MM-DD"), "{message}");
        }
        // On an entity's context it is an attribute like any other.
        assert!(
            check(
                Scope::Entity,
                serde_json::json!({"content_date": "2026-11-30"})
            )
            .is_err()
        );
        let declared = toml::from_str::<Declarations>("[event.content_date]\ntype = \"string\"\n")
            .unwrap()
            .check()
            .unwrap_err()
            .to_string();
        assert!(declared.contains("quiesce's own"), "{declared}");
    }

    #[test]
    fn declarations_are_checked_when_they_load() {
        let bad = |text: &str| {
            toml::from_str::<Declarations>(text)
                .unwrap()
                .check()
                .unwrap_err()
                .to_string()
        };
        assert!(
            bad("[event.score]\ntype = \"number\"\nvalues = [\"1\"]\n").contains("event.score")
        );
        assert!(bad("[event.reason]\ntype = \"string\"\nvalues = []\n").contains("no value"));
        assert!(bad("[entity.\"2fa\"]\ntype = \"boolean\"\n").contains("entity.2fa"));
        assert!(toml::from_str::<Declarations>("[event.x]\ntype = \"date\"\n").is_err());
        declarations().check().unwrap();
    }

    #[test]
    fn a_scalar_reads_each_json_type_and_refuses_the_others() {
        let read = |json: &str| serde_json::from_str::<Scalar>(json);
        assert_eq!(read("true").unwrap(), Scalar::Bool(true));
        assert_eq!(read("3").unwrap(), Scalar::Num(3.0));
        assert_eq!(read("-2").unwrap(), Scalar::Num(-2.0));
        assert_eq!(read("0.93").unwrap(), Scalar::Num(0.93));
        assert_eq!(read("\"spam\"").unwrap(), Scalar::Str("spam".into()));
        for bad in ["null", "[1]", "{\"a\": 1}"] {
            let error = read(bad).unwrap_err().to_string();
            assert!(
                error.contains("a string, a number or a boolean"),
                "{bad}: {error}"
            );
        }
    }
}
