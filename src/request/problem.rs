//! What is wrong with a body, a form or a query that reads but is not the request: which field
//! (its path, `serde_path_to_error`'s) and what about it. Each edge words it its own way: the
//! API's JSON error, the console's page.

use serde_path_to_error::Segment;

/// What is wrong with a body (or a query) that is well-formed but not the request.
#[derive(Debug)]
pub struct Problem {
    /// Where: the field's path; empty for the body as a whole.
    pub path: Vec<Segment>,
    pub kind: ProblemKind,
}

#[derive(Debug)]
pub enum ProblemKind {
    /// A field the request does not have.
    Unknown,
    /// A required field left out.
    Missing,
    /// A field given twice.
    Repeated,
    /// A value refused, and why (the reader's own words).
    Invalid(String),
}

impl Problem {
    /// The path as the error's `field` gives it: `moderator`, `[1].weight`; `None` for the body.
    pub fn field(&self) -> Option<String> {
        let mut field = String::new();
        for segment in &self.path {
            if !field.is_empty() && !matches!(segment, Segment::Seq { .. }) {
                field.push('.');
            }
            field.push_str(&segment.to_string());
        }
        (!field.is_empty()).then_some(field)
    }

    /// Reads serde's error: which field, and what about it. Serde names a missing or repeated
    /// field in its message, its path stopping at the object that holds it.
    pub fn of(path: &serde_path_to_error::Path, message: String) -> Self {
        let mut path: Vec<Segment> = path.iter().cloned().collect();
        let named = |prefix: &str| {
            message
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix('`'))
                .map(|name| Segment::Map {
                    key: name.to_owned(),
                })
        };
        let kind = if let Some(name) = named("missing field `") {
            path.push(name);
            ProblemKind::Missing
        } else if let Some(name) = named("duplicate field `") {
            path.push(name);
            ProblemKind::Repeated
        } else if message.starts_with("unknown field `") {
            ProblemKind::Unknown
        } else {
            ProblemKind::Invalid(message)
        };
        Self { path, kind }
    }
}
