//! One event as quiesce records it.

use serde::{Deserialize, Serialize};

use super::{
    EntityId, EventId, Signal,
    attributes::{Attributes, attributes_from_json},
};

/// Critical events skip the debounce window and fire at once. Ordered by urgency (critical
/// above normal): an entity's events make it as urgent as the most urgent of them.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Default,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    #[default]
    Normal,
    Critical,
}

impl Priority {
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Normal => "normal",
            Priority::Critical => "critical",
        }
    }
}

/// One validated event, ready to be recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: EventId,
    pub entity: EntityId,
    pub signal: Signal,
    pub actor: Option<String>,
    pub weight: f64,
    pub occurred_at: Option<chrono::DateTime<chrono::Utc>>,
    pub priority: Priority,
    /// Who wrote the entity (`user:77`); automated actions on the entity feed back to it.
    pub author: Option<EntityId>,
    /// Scalar facts about the event (`reason`, `score`), as declared by the rules in force;
    /// `None` when it carries none. Their declaration is checked by ingest, not here.
    pub attributes: Option<Attributes>,
}

/// Longest actor, in characters.
pub const MAX_ACTOR_LEN: usize = 128;
/// Largest weight an event may carry.
pub const MAX_WEIGHT: f64 = 1000.0;

/// One event as a sender writes it: the JSON the API takes and its OpenAPI schema, from one
/// definition. Any other field is refused; an optional field set to null counts as absent.
/// Reading one never fails on a field's value: [`EventBody::into_event`] checks each field in
/// a fixed order and names the first that is wrong.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(
    as = Event,
    description = "One event. Any other field is refused; an optional field set to null counts as absent."
)]
pub struct EventBody {
    // The fields whose schema is built by a function are documented there.
    #[serde(default)]
    #[schema(schema_with = author_schema)]
    author: Raw,
    #[serde(default)]
    #[schema(schema_with = id_schema, required = true)]
    id: Raw,
    #[serde(default)]
    #[schema(schema_with = entity_schema, required = true)]
    entity: Raw,
    #[serde(default, rename = "type")]
    #[schema(schema_with = signal_schema, required = true)]
    signal: Raw,
    #[serde(default)]
    #[schema(schema_with = actor_schema)]
    actor: Raw,
    #[serde(default)]
    #[schema(schema_with = weight_schema)]
    weight: Raw,
    /// RFC 3339; stored, scheduling uses Redis time.
    #[serde(default)]
    #[schema(value_type = Option<chrono::DateTime<chrono::Utc>>)]
    occurred_at: Raw,
    /// `critical` makes the entity due at once.
    #[serde(default)]
    #[schema(value_type = Option<Priority>)]
    priority: Raw,
    #[serde(default)]
    #[schema(schema_with = attributes_schema)]
    attributes: Option<serde_json::Value>,
}

/// Which field of an event is wrong, and how; `None`: the event as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: Option<String>,
    pub message: String,
}

impl FieldError {
    fn new(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: Some(field.to_owned()),
            message: message.into(),
        }
    }
}

impl EventBody {
    /// The JSON names of the fields, as the type declares them.
    pub fn fields() -> &'static [&'static str] {
        static FIELDS: std::sync::OnceLock<&'static [&'static str]> = std::sync::OnceLock::new();
        FIELDS.get_or_init(super::introspect::field_names::<EventBody>)
    }

    /// Checks the fields in order (id, entity, type, actor, weight, occurred_at, priority,
    /// author, attributes) and builds the event. An attribute is named as
    /// `attributes.<name>`; whether it is declared is ingest's check.
    pub fn into_event(self) -> Result<Event, FieldError> {
        let id =
            EventId::parse(self.id.required_str("id")?).map_err(|e| FieldError::new("id", e.0))?;
        let entity = EntityId::parse(self.entity.required_str("entity")?)
            .map_err(|e| FieldError::new("entity", e.0))?;
        let signal = Signal::parse(self.signal.required_str("type")?)
            .map_err(|e| FieldError::new("type", e.0))?;
        let actor = match self.actor {
            Raw::Absent => None,
            Raw::Str(actor)
                if (1..=MAX_ACTOR_LEN).contains(&actor.chars().count())
                    && !actor.chars().any(char::is_control) =>
            {
                Some(actor)
            }
            _ => {
                return Err(FieldError::new(
                    "actor",
                    format!(
                        "must be a string of 1-{MAX_ACTOR_LEN} characters without control characters"
                    ),
                ));
            }
        };
        let weight = match self.weight {
            Raw::Absent => 1.0,
            Raw::Num(w) if w.is_finite() && w > 0.0 && w <= MAX_WEIGHT => w,
            _ => {
                return Err(FieldError::new(
                    "weight",
                    format!("must be a number greater than 0 and at most {MAX_WEIGHT}"),
                ));
            }
        };
        let occurred_at = match self.occurred_at {
            Raw::Absent => None,
            Raw::Str(raw) => Some(
                chrono::DateTime::parse_from_rfc3339(&raw)
                    .map_err(|e| {
                        FieldError::new(
                            "occurred_at",
                            format!("must be an RFC 3339 timestamp: {e}"),
                        )
                    })?
                    .with_timezone(&chrono::Utc),
            ),
            _ => {
                return Err(FieldError::new(
                    "occurred_at",
                    "must be an RFC 3339 timestamp string",
                ));
            }
        };
        let priority = match self.priority {
            Raw::Absent => Priority::Normal,
            Raw::Str(p) if p == "normal" => Priority::Normal,
            Raw::Str(p) if p == "critical" => Priority::Critical,
            _ => {
                return Err(FieldError::new(
                    "priority",
                    "must be \"normal\" or \"critical\"",
                ));
            }
        };
        let author = match self.author {
            Raw::Absent => None,
            Raw::Str(raw) => {
                Some(EntityId::parse(&raw).map_err(|e| FieldError::new("author", e.0))?)
            }
            _ => {
                return Err(FieldError::new(
                    "author",
                    "must be an entity id such as user:77",
                ));
            }
        };
        let attributes = match &self.attributes {
            None => None,
            Some(value) => attributes_from_json(value).map_err(|e| match e.attribute {
                Some(name) => FieldError::new(&format!("attributes.{name}"), e.message),
                None => FieldError::new("attributes", e.message),
            })?,
        };
        Ok(Event {
            id,
            entity,
            signal,
            actor,
            weight,
            occurred_at,
            priority,
            author,
            attributes,
        })
    }
}

/// One field as sent, read without judging it: absent (or null), a string, a number, or any
/// other JSON value. [`EventBody::into_event`] decides what is acceptable.
#[derive(Debug, Default, Clone, PartialEq)]
enum Raw {
    #[default]
    Absent,
    Str(String),
    Num(f64),
    Other,
}

impl Raw {
    fn required_str(&self, field: &str) -> Result<&str, FieldError> {
        match self {
            Raw::Str(s) => Ok(s),
            Raw::Absent => Err(FieldError::new(field, "is required")),
            _ => Err(FieldError::new(field, "must be a string")),
        }
    }
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Raw;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_str<E>(self, v: &str) -> Result<Raw, E> {
                Ok(Raw::Str(v.to_owned()))
            }

            fn visit_string<E>(self, v: String) -> Result<Raw, E> {
                Ok(Raw::Str(v))
            }

            fn visit_i64<E>(self, v: i64) -> Result<Raw, E> {
                Ok(Raw::Num(v as f64))
            }

            fn visit_u64<E>(self, v: u64) -> Result<Raw, E> {
                Ok(Raw::Num(v as f64))
            }

            fn visit_f64<E>(self, v: f64) -> Result<Raw, E> {
                Ok(Raw::Num(v))
            }

            fn visit_bool<E>(self, _: bool) -> Result<Raw, E> {
                Ok(Raw::Other)
            }

            fn visit_unit<E>(self) -> Result<Raw, E> {
                Ok(Raw::Absent)
            }

            fn visit_none<E>(self) -> Result<Raw, E> {
                Ok(Raw::Absent)
            }

            fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Raw, D::Error> {
                Raw::deserialize(d)
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Raw::Other)
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Raw::Other)
            }
        }

        deserializer.deserialize_any(Visitor)
    }
}

/// A string schema with the pattern its parser follows.
fn string_schema(pattern: &str, nullable: bool, description: &str) -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    let kind = if nullable {
        SchemaType::from_iter([Type::String, Type::Null])
    } else {
        SchemaType::new(Type::String)
    };
    ObjectBuilder::new()
        .schema_type(kind)
        .pattern(Some(pattern))
        .description(Some(description))
        .build()
}

fn id_schema() -> utoipa::openapi::Object {
    string_schema(
        EventId::PATTERN,
        false,
        "The sender's idempotency key, unique across all entities.",
    )
}

fn entity_schema() -> utoipa::openapi::Object {
    string_schema(EntityId::PATTERN, false, "`<kind>:<id>`, e.g. `post:9842`.")
}

fn signal_schema() -> utoipa::openapi::Object {
    string_schema(
        Signal::PATTERN,
        false,
        "The signal, e.g. `upvote`, `flag`, `report.spam`.",
    )
}

fn author_schema() -> utoipa::openapi::Object {
    string_schema(
        EntityId::PATTERN,
        true,
        "The entity's author, e.g. `user:77`.",
    )
}

/// 1 to [`MAX_ACTOR_LEN`] characters, none of them a control character.
fn actor_schema() -> utoipa::openapi::Object {
    let mut schema = string_schema(
        r"^[^\x00-\x1f\x7f-\x9f]*$",
        true,
        "Who sent the signal; `actors()` counts distinct ones.",
    );
    schema.min_length = Some(1);
    schema.max_length = Some(MAX_ACTOR_LEN);
    schema
}

/// Greater than 0, at most [`MAX_WEIGHT`].
fn weight_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Number, Type::Null]))
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double)))
        .exclusive_minimum(Some(0.0))
        .maximum(Some(MAX_WEIGHT))
        .description(Some("Default 1."))
        .build()
}

/// A flat object of declared attributes; bounded by the settings `max_attributes` and
/// `max_attribute_len`.
fn attributes_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type};
    let scalar = OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(SchemaType::new(Type::String)))
        .item(ObjectBuilder::new().schema_type(SchemaType::new(Type::Number)))
        .item(ObjectBuilder::new().schema_type(SchemaType::new(Type::Boolean)))
        .build();
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .additional_properties(Some(Schema::OneOf(scalar)))
        .description(Some(
            "Scalar facts about the event, e.g. `{\"reason\": \"spam\", \"score\": 0.93}`: \
             each one declared under `[attributes.event.<name>]` in the rules in force, of its \
             declared type (and among its `values`), at most `max_attributes` of them (default \
             16), a string at most `max_attribute_len` characters (default 256) without control \
             characters. `content_date` is quiesce's own, never declared: the day the entity's \
             content was posted (`YYYY-MM-DD`, 2000-01-01 to 2038-01-01), the `content_date` of \
             its statements of reasons (the latest sent counts).",
        ))
        .build()
}
