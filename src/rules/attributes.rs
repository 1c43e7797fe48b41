//! Rules over attributes, as they run: the functions a condition calls on the attribute
//! aggregates of an entity's events (`count` with a filter, `max`, `latest`, `distinct`, and
//! `count_in`, `max_in`, `distinct_in` over a window) and on context (`attr`, `has_attr`, on the
//! entity or, as member calls, on `author`). What a rule may name is checked when the rules load
//! (`declared.rs`).
//!
//! `attr` takes a default (`attr("account_age_days", 0)`): an attribute the platform never set
//! reads as it, so a missing value is never an error that fails an evaluation.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use cel::{
    Context, DeclarationError, ExecutionError, FunctionContext, Value,
    extractors::Arguments,
    objects::{Key, Map},
};

use super::declared::attribute_window;
use crate::domain::{
    AttributeStats, Attributes, Scalar, SignalStats, SnapshotAttributes, WindowStats,
};

/// A scalar as CEL sees it.
fn cel_value(value: &Scalar) -> Value {
    match value {
        Scalar::Bool(b) => Value::Bool(*b),
        Scalar::Num(n) => Value::Float(*n),
        Scalar::Str(s) => Value::String(Arc::new(s.clone())),
    }
}

/// A map key or literal as an attribute value's key (`spam`, `true`).
fn value_key(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn text(ftx: &FunctionContext, args: &[Value], index: usize) -> Result<String, ExecutionError> {
    match args.get(index) {
        Some(Value::String(s)) => Ok(s.to_string()),
        _ => Err(ftx.error(format!("argument {} must be a string", index + 1))),
    }
}

/// The `author` variable: `id` and `status` (both "" when the entity has no author).
pub(super) fn author_value(attributes: &SnapshotAttributes) -> Value {
    let (id, status) = attributes
        .author
        .as_ref()
        .map_or(("", ""), |a| (a.id.as_str(), a.status.as_str()));
    let map: HashMap<Key, Value> = [
        (
            Key::from("id".to_owned()),
            Value::String(Arc::new(id.to_owned())),
        ),
        (
            Key::from("status".to_owned()),
            Value::String(Arc::new(status.to_owned())),
        ),
    ]
    .into_iter()
    .collect();
    Value::Map(Map { map: Arc::new(map) })
}

/// The attribute and value key of a filter (`{"reason": "spam"}`).
fn filter_of(ftx: &FunctionContext, filter: &Value) -> Result<(String, String), ExecutionError> {
    let Value::Map(filter) = filter else {
        return Err(ftx.error("the filter must be a map"));
    };
    let Some((Key::String(attribute), value)) = filter.map.iter().next() else {
        return Err(ftx.error("the filter names one attribute"));
    };
    let key =
        value_key(value).ok_or_else(|| ftx.error("a filter value is a string or a boolean"))?;
    Ok((attribute.to_string(), key))
}

/// The window of an attribute aggregate's call (its last argument).
fn window_of<'a>(
    ftx: &FunctionContext,
    attributes: &'a SnapshotAttributes,
    signal: &str,
    attribute: &str,
    window: &str,
) -> Result<Option<&'a crate::domain::WindowStats>, ExecutionError> {
    if !attribute_window(window) {
        return Err(ftx.error(format!("unknown window {window:?}")));
    }
    Ok(attributes
        .events
        .get(signal)
        .and_then(|by| by.get(attribute))
        .and_then(|stats| stats.windows.get(window)))
}

/// `count_in("flag", {"reason": "spam"}, "1h")`: events of the signal with that value over the
/// window (called by `count_in`, whose two-argument form counts the signal's events).
pub(super) fn count_in(
    ftx: &FunctionContext,
    args: &[Value],
    attributes: &SnapshotAttributes,
) -> Result<Value, ExecutionError> {
    let (signal, window) = (text(ftx, args, 0)?, text(ftx, args, 2)?);
    let (attribute, key) = filter_of(ftx, &args[1])?;
    let stats = window_of(ftx, attributes, &signal, &attribute, &window)?;
    let count = stats.and_then(|w| w.values.get(&key)).copied();
    Ok(Value::Int(count.unwrap_or(0)))
}

/// Registers `count` (plain, with a filter, on `author`), `max`, `latest`, `distinct`, `attr`
/// and `has_attr` on a condition's context.
pub(super) fn register(
    context: &mut Context<'_, '_>,
    signals: &Arc<BTreeMap<String, SignalStats>>,
    attributes: &Arc<SnapshotAttributes>,
) -> Result<(), DeclarationError> {
    let (s, a) = (Arc::clone(signals), Arc::clone(attributes));
    context.add_function(
        "count",
        move |ftx: &FunctionContext, Arguments(args): Arguments| -> Result<Value, ExecutionError> {
            let signal = text(ftx, &args, 0)?;
            if ftx.this.is_some() {
                let count = a
                    .author
                    .as_ref()
                    .and_then(|author| author.counts.get(&signal));
                return Ok(Value::Int(count.copied().unwrap_or(0)));
            }
            let Some(filter) = args.get(1) else {
                return Ok(Value::Int(s.get(&signal).map_or(0, |t| t.count)));
            };
            let (attribute, key) = filter_of(ftx, filter)?;
            let count = a
                .events
                .get(&signal)
                .and_then(|by| by.get(&attribute))
                .and_then(|stats| stats.values.get(&key));
            Ok(Value::Int(count.copied().unwrap_or(0)))
        },
    )?;
    fn max(stats: &AttributeStats) -> Option<f64> {
        stats.max
    }
    fn latest(stats: &AttributeStats) -> Option<f64> {
        stats.latest
    }
    for (name, pick) in [
        ("max", max as fn(&AttributeStats) -> Option<f64>),
        ("latest", latest),
    ] {
        let a = Arc::clone(attributes);
        context.add_function(
            name,
            move |ftx: &FunctionContext,
                  Arguments(args): Arguments|
                  -> Result<Value, ExecutionError> {
                let (signal, attribute) = (text(ftx, &args, 0)?, text(ftx, &args, 1)?);
                let stats = a.events.get(&signal).and_then(|by| by.get(&attribute));
                Ok(Value::Float(stats.and_then(pick).unwrap_or(0.0)))
            },
        )?;
    }
    // The same over a trailing window.
    fn max_in(stats: &WindowStats) -> Option<f64> {
        stats.max
    }
    fn latest_in(stats: &WindowStats) -> Option<f64> {
        stats.latest
    }
    for (name, pick) in [
        ("max_in", max_in as fn(&WindowStats) -> Option<f64>),
        ("latest_in", latest_in),
    ] {
        let a = Arc::clone(attributes);
        context.add_function(
            name,
            move |ftx: &FunctionContext,
                  Arguments(args): Arguments|
                  -> Result<Value, ExecutionError> {
                let (signal, attribute) = (text(ftx, &args, 0)?, text(ftx, &args, 1)?);
                let window = text(ftx, &args, 2)?;
                let stats = window_of(ftx, &a, &signal, &attribute, &window)?;
                Ok(Value::Float(stats.and_then(pick).unwrap_or(0.0)))
            },
        )?;
    }
    let a = Arc::clone(attributes);
    context.add_function(
        "distinct",
        move |ftx: &FunctionContext, Arguments(args): Arguments| -> Result<Value, ExecutionError> {
            let (signal, attribute) = (text(ftx, &args, 0)?, text(ftx, &args, 1)?);
            let stats = a.events.get(&signal).and_then(|by| by.get(&attribute));
            let distinct = stats.map_or(0, |s| s.values.values().filter(|n| **n > 0).count());
            Ok(Value::Int(distinct as i64))
        },
    )?;
    let a = Arc::clone(attributes);
    context.add_function(
        "distinct_in",
        move |ftx: &FunctionContext, Arguments(args): Arguments| -> Result<Value, ExecutionError> {
            let (signal, attribute) = (text(ftx, &args, 0)?, text(ftx, &args, 1)?);
            let window = text(ftx, &args, 2)?;
            let stats = window_of(ftx, &a, &signal, &attribute, &window)?;
            let distinct = stats.map_or(0, |w| w.values.values().filter(|n| **n > 0).count());
            Ok(Value::Int(distinct as i64))
        },
    )?;
    let a = Arc::clone(attributes);
    context.add_function(
        "attr",
        move |ftx: &FunctionContext, Arguments(args): Arguments| -> Result<Value, ExecutionError> {
            let name = text(ftx, &args, 0)?;
            let default = args.get(1).cloned().unwrap_or(Value::Null);
            Ok(context_of(ftx, &a)
                .and_then(|context| context.get(&name))
                .map_or(default, cel_value))
        },
    )?;
    let a = Arc::clone(attributes);
    context.add_function(
        "has_attr",
        move |ftx: &FunctionContext, Arguments(args): Arguments| -> Result<Value, ExecutionError> {
            let name = text(ftx, &args, 0)?;
            Ok(Value::Bool(
                context_of(ftx, &a).is_some_and(|context| context.contains_key(&name)),
            ))
        },
    )?;
    Ok(())
}

/// The context a call reads: the author's for a member call (`author.attr(...)`), else the
/// entity's own.
fn context_of<'a>(
    ftx: &FunctionContext,
    attributes: &'a SnapshotAttributes,
) -> Option<&'a Attributes> {
    if ftx.this.is_some() {
        attributes.author.as_ref().map(|author| &author.attributes)
    } else {
        Some(&attributes.context)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::{
        domain::{AttributeStats, AuthorContext, Scalar, Snapshot, SnapshotAttributes, Status},
        rules::declared::rule_over_declarations as rule,
    };

    /// Flags with reasons (3 spam, 1 abuse) and scores (max 0.95, latest 0.4); the entity's
    /// context and its author's.
    fn snapshot() -> Snapshot {
        let mut snapshot = Snapshot::with_counts(
            crate::domain::EntityId::parse("post:1").unwrap(),
            [("flag", 4)],
        );
        let mut flag = BTreeMap::new();
        flag.insert(
            "reason".to_owned(),
            AttributeStats {
                values: [("spam".to_owned(), 3), ("abuse".to_owned(), 1)].into(),
                ..Default::default()
            },
        );
        let window = |values: &[(&str, i64)], max: Option<f64>| crate::domain::WindowStats {
            values: values.iter().map(|(v, n)| (v.to_string(), *n)).collect(),
            max,
            latest: max.map(|m| m / 2.0),
        };
        flag.insert(
            "score".to_owned(),
            AttributeStats {
                max: Some(0.95),
                latest: Some(0.4),
                windows: [
                    ("5m".to_owned(), window(&[], Some(0.5))),
                    ("24h".to_owned(), window(&[], Some(0.95))),
                ]
                .into(),
                ..Default::default()
            },
        );
        flag.get_mut("reason").unwrap().windows =
            [("1h".to_owned(), window(&[("spam", 2)], None))].into();
        flag.insert(
            "trusted".to_owned(),
            AttributeStats {
                values: [("true".to_owned(), 2)].into(),
                ..Default::default()
            },
        );
        snapshot.attributes = SnapshotAttributes {
            read: crate::domain::AttributeReads::ALL,
            events: [("flag".to_owned(), flag)].into(),
            context: [("role".to_owned(), Scalar::Str("staff".into()))].into(),
            author: Some(AuthorContext {
                id: "user:7".into(),
                status: Status::Flagged,
                attributes: [("account_age_days".to_owned(), Scalar::Num(3.0))].into(),
                counts: [("auto.hide".to_owned(), 2)].into(),
            }),
        };
        snapshot
    }
    #[test]
    fn each_function_reads_the_snapshot() {
        let cases = [
            (r#"count("flag") == 4"#, true),
            (r#"count("flag", {"reason": "spam"}) == 3"#, true),
            (r#"count("flag", {"reason": "abuse"}) == 1"#, true),
            (r#"count("flag", {"trusted": true}) == 2"#, true),
            (r#"count("report", {"reason": "spam"}) == 0"#, true),
            (r#"max("flag", "score") > 0.9"#, true),
            (r#"latest("flag", "score") == 0.4"#, true),
            (r#"max("report", "score") == 0.0"#, true),
            (r#"distinct("flag", "reason") == 2"#, true),
            (r#"attr("role", "member") == "staff""#, true),
            (r#"attr("account_age_days", -1) == -1"#, true),
            (r#"has_attr("role") && !has_attr("account_age_days")"#, true),
            (r#"author.attr("account_age_days", 9999) < 7"#, true),
            (r#"author.has_attr("role")"#, false),
            (
                r#"author.status == "flagged" && author.id == "user:7""#,
                true,
            ),
            (r#"author.count("auto.hide") == 2"#, true),
            (r#"count_in("flag", {"reason": "spam"}, "1h") == 2"#, true),
            (r#"count_in("flag", {"reason": "spam"}, "5m") == 0"#, true),
            (r#"count_in("flag", "1h") == 0"#, true),
            (r#"max_in("flag", "score", "5m") == 0.5"#, true),
            (r#"max_in("flag", "score", "24h") > 0.9"#, true),
            (r#"max_in("flag", "score", "1m") == 0.0"#, true),
            (r#"latest_in("flag", "score", "5m") == 0.25"#, true),
            (r#"latest_in("flag", "score", "24h") == 0.475"#, true),
            (r#"latest_in("flag", "score", "1m") == 0.0"#, true),
            (r#"distinct_in("flag", "reason", "1h") == 1"#, true),
            (r#"distinct_in("flag", "reason", "5m") == 0"#, true),
        ];
        for (when, expected) in cases {
            let verdict = rule(when).unwrap().evaluate(&snapshot());
            assert!(verdict.errors.is_empty(), "{when}: {verdict:?}");
            assert_eq!(!verdict.matched.is_empty(), expected, "{when}: {verdict:?}");
        }
        // Without an author, its status and id are "" and its attributes read as the default.
        let mut alone = snapshot();
        alone.attributes.author = None;
        let verdict = rule(r#"author.status == "" && author.attr("account_age_days", 5) == 5 && author.count("auto.hide") == 0"#)
            .unwrap()
            .evaluate(&alone);
        assert_eq!(verdict.matched.len(), 1, "{verdict:?}");
    }
}
