//! Identifiers that parse at the edge: an entity, a signal, an event id.

use std::fmt;

use serde::Serialize;

use super::{Invalid, invalid};

/// `<kind>:<id>`, e.g. `post:9842`: kind `[a-z][a-z0-9_]{0,31}`, id 1-128 of `[A-Za-z0-9_.:-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct EntityId(String);

impl EntityId {
    /// What [`EntityId::parse`] accepts, as the API's schema states it (a test holds the two
    /// to each other).
    pub const PATTERN: &'static str = r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.:-]{1,128}$";

    pub fn parse(raw: &str) -> Result<Self, Invalid> {
        let (kind, id) = raw
            .split_once(':')
            .ok_or_else(|| invalid("must be <kind>:<id>, e.g. post:9842"))?;
        let mut kind_chars = kind.chars();
        let kind_ok = kind.len() <= 32
            && kind_chars.next().is_some_and(|c| c.is_ascii_lowercase())
            && kind_chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !kind_ok {
            return Err(invalid(
                "kind must match [a-z][a-z0-9_]{0,31} (e.g. post, comment, user)",
            ));
        }
        let id_ok = (1..=128).contains(&id.len())
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'));
        if !id_ok {
            return Err(invalid("id must be 1-128 characters of [A-Za-z0-9_.:-]"));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The part before the first colon: `post` for `post:9842`.
    pub fn kind(&self) -> &str {
        self.0.split_once(':').map_or("", |(kind, _)| kind)
    }
}

impl fmt::Display for EntityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A signal name such as `upvote`, `flag` or `report.spam`: `[a-z][a-z0-9_.]{0,63}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Signal(String);

impl Signal {
    /// What [`Signal::parse`] accepts, as the API's schema states it.
    pub const PATTERN: &'static str = r"^[a-z][a-z0-9_.]{0,63}$";

    pub fn parse(raw: &str) -> Result<Self, Invalid> {
        let mut chars = raw.chars();
        let ok = raw.len() <= 64
            && chars.next().is_some_and(|c| c.is_ascii_lowercase())
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.');
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(invalid(
                "must match [a-z][a-z0-9_.]{0,63} (e.g. upvote, flag, report.spam)",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An event id: 1-128 visible ASCII characters; the sender's idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct EventId(String);

impl EventId {
    /// What [`EventId::parse`] accepts, as the API's schema states it.
    pub const PATTERN: &'static str = r"^[!-~]{1,128}$";

    pub fn parse(raw: &str) -> Result<Self, Invalid> {
        if (1..=128).contains(&raw.len()) && raw.bytes().all(|b| b.is_ascii_graphic()) {
            Ok(Self(raw.to_owned()))
        } else {
            Err(invalid("must be 1-128 visible ASCII characters"))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_ids_follow_the_documented_grammar() {
        for ok in ["post:9842", "comment:a.b:c-d_e", "u:x", "user_2:77"] {
            assert!(EntityId::parse(ok).is_ok(), "{ok}");
        }
        let long_kind = format!("{}:1", "a".repeat(33));
        let long_id = format!("post:{}", "1".repeat(129));
        for bad in [
            "post", "Post:1", "1post:1", "post:", "post:a b", ":1", &long_kind, &long_id,
        ] {
            assert!(EntityId::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(EntityId::parse("post:1:2").unwrap().kind(), "post");
    }

    #[test]
    fn signals_and_event_ids_follow_the_documented_grammar() {
        assert!(Signal::parse("report.spam").is_ok());
        assert!(Signal::parse("Flag").is_err());
        assert!(Signal::parse(&"a".repeat(65)).is_err());
        assert!(EventId::parse("evt-1").is_ok());
        assert!(EventId::parse("has space").is_err());
        assert!(EventId::parse("").is_err());
        assert!(EventId::parse(&"x".repeat(129)).is_err());
    }

    /// Each parser accepts exactly what its pattern states, on strings near the grammar's edges.
    #[test]
    fn the_patterns_state_what_the_parsers_accept() {
        use proptest::{prelude::*, test_runner::TestRunner};
        let mut runner = TestRunner::default();
        let near = "[a-zA-Z0-9_.:\\- !~\\x7f\\x00é]{0,140}";
        for (pattern, parses) in [
            (
                EntityId::PATTERN,
                (|s: &str| EntityId::parse(s).is_ok()) as fn(&str) -> bool,
            ),
            (Signal::PATTERN, |s: &str| Signal::parse(s).is_ok()),
            (EventId::PATTERN, |s: &str| EventId::parse(s).is_ok()),
        ] {
            let regex = regex::Regex::new(pattern).unwrap();
            // Strings the pattern generates all parse ...
            runner
                .run(
                    &proptest::string::string_regex(&pattern[1..pattern.len() - 1]).unwrap(),
                    |s| {
                        prop_assert!(parses(&s), "{pattern} generated {s:?}");
                        Ok(())
                    },
                )
                .unwrap();
            // ... and on strings near the grammar, parsing and matching agree.
            runner
                .run(&prop_oneof![near, "post:[a-z0-9]{1,130}"], |s| {
                    prop_assert_eq!(parses(&s), regex.is_match(&s), "{} on {:?}", pattern, s);
                    Ok(())
                })
                .unwrap();
        }
    }
}
