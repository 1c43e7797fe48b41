//! A form body or a query string read into the route's own type: each field at most once, the
//! values as a browser's inputs send them (trimmed; one left blank is a field not given), read
//! by the field readers of [`super::fields`]. A refusal is a [`Problem`] naming the field.

use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;

use super::problem::{Problem, ProblemKind};

/// The fields of `raw` (`application/x-www-form-urlencoded`, as a form body or a query string
/// is), each name once: a name given twice is refused.
pub fn pairs(raw: &[u8]) -> Result<Vec<(String, String)>, Problem> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (name, value) in form_urlencoded::parse(raw) {
        if pairs.iter().any(|(seen, _)| *seen == name) {
            return Err(Problem {
                path: vec![Segment::Map {
                    key: name.into_owned(),
                }],
                kind: ProblemKind::Repeated,
            });
        }
        pairs.push((name.into_owned(), value.into_owned()));
    }
    Ok(pairs)
}

/// `pairs` read into `T`, each value trimmed and a blank one left out (as a browser's form
/// sends an input left blank).
pub fn read<T: DeserializeOwned>(pairs: &[(String, String)]) -> Result<T, Problem> {
    deserialize(
        pairs
            .iter()
            .map(|(name, value)| (name.as_str(), value.trim()))
            .filter(|(_, value)| !value.is_empty()),
    )
}

/// `pairs` read into `T` as they are, as `serde_urlencoded` reads a form.
pub fn deserialize<'a, T: DeserializeOwned>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<T, Problem> {
    let encoded = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    let deserializer =
        serde_urlencoded::Deserializer::new(form_urlencoded::parse(encoded.as_bytes()));
    serde_path_to_error::deserialize(deserializer)
        .map_err(|error| Problem::of(error.path(), error.inner().to_string()))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::request::fields::{self, Text};

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Reverse {
        reason: Text,
        #[serde(default, deserialize_with = "fields::optional_string")]
        note: Option<String>,
    }

    fn refused(raw: &str) -> (Option<String>, String) {
        let problem = pairs(raw.as_bytes())
            .and_then(|pairs| read::<Reverse>(&pairs))
            .unwrap_err();
        let field = problem.field();
        let kind = match problem.kind {
            ProblemKind::Unknown => "unknown".to_owned(),
            ProblemKind::Missing => "missing".to_owned(),
            ProblemKind::Repeated => "repeated".to_owned(),
            ProblemKind::Invalid(message) => message,
        };
        (field, kind)
    }

    #[test]
    fn a_form_reads_with_the_apis_readers_and_names_the_field_it_refuses() {
        let form: Reverse = read(&pairs(b"reason=+spam+&note=").unwrap()).unwrap();
        assert_eq!((&*form.reason, form.note), ("spam", None));
        let field = |name: &str| Some(name.to_owned());
        assert_eq!(
            refused("reason=a&reason=b"),
            (field("reason"), "repeated".into())
        );
        assert_eq!(refused("reason=+++"), (field("reason"), "missing".into()));
        assert_eq!(refused("note=x"), (field("reason"), "missing".into()));
        assert_eq!(
            refused("reason=a&mood=x"),
            (field("mood"), "unknown".into())
        );
        let (named, message) = refused("reason=a%07b");
        assert_eq!(named, field("reason"));
        assert!(message.contains("control characters"), "{message}");
    }
}
