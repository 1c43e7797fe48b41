//! Readers (`#[serde(deserialize_with)]`) for the fields of request bodies, forms and queries:
//! each refusal in the API's own words, which the API's extractors and the console's answer
//! with the field's path. A body
//! field left out is the extractor's "is required"; a query's words follow the parameter's name
//! ("limit must be ...").

use serde::{
    Deserialize, Deserializer,
    de::{Error, IgnoredAny, MapAccess, SeqAccess},
};
use utoipa::openapi::{
    RefOr, Schema,
    schema::{ObjectBuilder, Type},
};

use crate::{
    domain::{ReviewDecision, Status},
    moderation::{TEXT_RULE, acceptable_text},
    store::AppealDecision,
};

/// A body field's value as its reader judges it: null, a string, a whole number, or anything
/// else (which every reader refuses).
enum Loose {
    Null,
    Str(String),
    Whole(i128),
    Other,
}

impl<'de> Deserialize<'de> for Loose {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Loose;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_unit<E>(self) -> Result<Loose, E> {
                Ok(Loose::Null)
            }

            fn visit_str<E>(self, v: &str) -> Result<Loose, E> {
                Ok(Loose::Str(v.to_owned()))
            }

            fn visit_string<E>(self, v: String) -> Result<Loose, E> {
                Ok(Loose::Str(v))
            }

            fn visit_i64<E>(self, v: i64) -> Result<Loose, E> {
                Ok(Loose::Whole(v.into()))
            }

            fn visit_u64<E>(self, v: u64) -> Result<Loose, E> {
                Ok(Loose::Whole(v.into()))
            }

            fn visit_f64<E>(self, _: f64) -> Result<Loose, E> {
                Ok(Loose::Other)
            }

            fn visit_bool<E>(self, _: bool) -> Result<Loose, E> {
                Ok(Loose::Other)
            }

            // Refused whatever they hold: their contents are skipped, not read.
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Loose, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Loose::Other)
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Loose, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Loose::Other)
            }
        }

        deserializer.deserialize_any(Visitor)
    }
}

/// A moderator's free text (a name, a reason), as [`acceptable_text`] allows.
#[derive(Debug)]
pub struct Text(pub String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Loose::deserialize(deserializer)? {
            Loose::Null => Err(D::Error::custom("is required")),
            Loose::Str(text) if acceptable_text(&text) => Ok(Text(text)),
            _ => Err(D::Error::custom(format!("a string that {TEXT_RULE}"))),
        }
    }
}

impl std::ops::Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl utoipa::PartialSchema for Text {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .max_length(Some(crate::moderation::MAX_TEXT))
            .pattern(Some(
                r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x20\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$",
            ))
            .description(Some(format!("Text that {TEXT_RULE}")))
            .into()
    }
}

impl utoipa::ToSchema for Text {}

/// A required status: visible, flagged, hidden or suspended.
pub fn status<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Status, D::Error> {
    parsed(deserializer, |raw| {
        Status::parse(raw).map_err(|_| "must be visible, flagged, hidden or suspended".to_owned())
    })
}

/// A review item's decision: approve, hide, dismiss or escalate.
pub fn review_decision<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ReviewDecision, D::Error> {
    parsed(deserializer, |raw| {
        ReviewDecision::parse(raw)
            .map_err(|_| "must be approve, hide, dismiss or escalate".to_owned())
    })
}

/// An appeal's outcome: upheld (the decision is reversed) or rejected (it stands).
pub fn appeal_outcome<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<AppealDecision, D::Error> {
    parsed(deserializer, |raw| match raw {
        "upheld" => Ok(AppealDecision::Upheld),
        "rejected" => Ok(AppealDecision::Rejected),
        _ => Err("must be upheld or rejected".to_owned()),
    })
}

/// A required string, turned into `T` by `parse` (whose error is the message); null is
/// "is required", any other value "must be a string".
pub fn parsed<'de, D: Deserializer<'de>, T>(
    deserializer: D,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, D::Error> {
    match Loose::deserialize(deserializer)? {
        Loose::Null => Err(D::Error::custom("is required")),
        Loose::Str(text) => parse(&text).map_err(D::Error::custom),
        _ => Err(D::Error::custom("must be a string")),
    }
}

/// A required string as it is.
pub fn parsed_string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    parsed(deserializer, |raw| Ok(raw.to_owned()))
}

/// An optional string turned into `T` by `parse`; null is absent, another value than a string
/// is `not_string`.
pub fn optional<'de, D: Deserializer<'de>, T>(
    deserializer: D,
    not_string: &str,
    parse: impl FnOnce(String) -> Result<T, String>,
) -> Result<Option<T>, D::Error> {
    match Loose::deserialize(deserializer)? {
        Loose::Null => Ok(None),
        Loose::Str(text) => parse(text).map(Some).map_err(D::Error::custom),
        _ => Err(D::Error::custom(not_string)),
    }
}

/// An optional string as it is; null is absent.
pub fn optional_string<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    optional(deserializer, "must be a string", Ok)
}

/// A whole number from `min` to `max`, `refused` otherwise; null is absent.
pub fn optional_whole<'de, D: Deserializer<'de>>(
    deserializer: D,
    range: std::ops::RangeInclusive<i128>,
    refused: &str,
) -> Result<Option<i128>, D::Error> {
    match Loose::deserialize(deserializer)? {
        Loose::Null => Ok(None),
        Loose::Whole(n) if range.contains(&n) => Ok(Some(n)),
        _ => Err(D::Error::custom(refused)),
    }
}

/// A query parameter turned into `T` by `parse`, whose error follows the parameter's name.
pub fn param<'de, D: Deserializer<'de>, T>(
    deserializer: D,
    parse: impl FnOnce(String) -> Result<T, String>,
) -> Result<Option<T>, D::Error> {
    parse(String::deserialize(deserializer)?)
        .map(Some)
        .map_err(D::Error::custom)
}

/// `limit`: a whole number from 1 to `MAX`.
pub fn limit<'de, D: Deserializer<'de>, const MAX: i64>(
    deserializer: D,
) -> Result<Option<i64>, D::Error> {
    param(deserializer, |raw| {
        raw.parse::<i64>()
            .ok()
            .filter(|n| (1..=MAX).contains(n))
            .ok_or_else(|| format!("must be a whole number from 1 to {MAX}"))
    })
}

/// `cursor` of an id-keyed page: the `next_cursor` of the page before.
pub fn id_cursor<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    param(deserializer, |raw| {
        raw.parse::<i64>().map_err(|_| CURSOR.to_owned())
    })
}

/// What a cursor no page gave is told.
pub const CURSOR: &str = "must be a next_cursor from an earlier page";

/// An action's kind: flag, hide or suspend.
pub fn action<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    param(deserializer, |raw| match raw.as_str() {
        "flag" | "hide" | "suspend" => Ok(raw),
        _ => Err("must be flag, hide or suspend".to_owned()),
    })
}

/// An age: a duration such as `10m` or `2h`.
pub fn age<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<chrono::Duration>, D::Error> {
    param(deserializer, |raw| {
        humantime::parse_duration(&raw)
            .ok()
            .and_then(|age| chrono::Duration::from_std(age).ok())
            .ok_or_else(|| "must be a duration such as 10m or 2h".to_owned())
    })
}

/// A whole number; `refused` otherwise.
pub fn whole<'de, D: Deserializer<'de>>(
    deserializer: D,
    refused: &str,
) -> Result<Option<i64>, D::Error> {
    param(deserializer, |raw| {
        raw.parse::<i64>().map_err(|_| refused.to_owned())
    })
}

/// A keyset position a page's link gave: a whole number from 1; `refused` otherwise.
pub fn position<'de, D: Deserializer<'de>>(
    deserializer: D,
    refused: &str,
) -> Result<Option<i64>, D::Error> {
    param(deserializer, |raw| {
        raw.parse::<i64>()
            .ok()
            .filter(|id| *id > 0)
            .ok_or_else(|| refused.to_owned())
    })
}

/// `true` or `false`.
pub fn flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<bool>, D::Error> {
    param(deserializer, |raw| match raw.as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("must be true or false".to_owned()),
    })
}

/// A filter's text: at most `MAX` characters, without NUL (which Postgres text cannot hold).
pub fn filter_text<'de, D: Deserializer<'de>, const MAX: usize>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    param(deserializer, |raw| {
        if raw.contains('\0') || raw.chars().count() > MAX {
            Err(format!("must be at most {MAX} characters without NUL"))
        } else {
            Ok(raw)
        }
    })
}
