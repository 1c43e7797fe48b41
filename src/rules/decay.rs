//! Long windows and decayed counts in conditions: which trailing figures a rule set reads (so
//! that a snapshot reads those and no others), the check of the half-lives it names, and the
//! `decayed(signal, half_life)` function over a snapshot.
//!
//! `decayed("auto.hide", "30d")` is a count in which each event weighs 0.5^(age / half-life):
//! a strike weighs 1 when it happens, 0.5 after 30 days, 0.25 after 60. The snapshot reads it
//! in Postgres from the minute buckets of the current UTC day and the day buckets of the 90
//! days before, each aged from the start of its bucket to the start of the current minute:
//! whole minutes, so this minute's events weigh exactly 1 (three strikes are 3.0 and `>= 3`
//! holds) and the figure does not drift within a minute. The snapshot keeps the value, so a
//! backtest replays exactly what the rules saw.

use std::{collections::BTreeMap, sync::Arc};

use cel::{Context, DeclarationError, ExecutionError};

use crate::domain::{DAY_WINDOWS, Invalid, SignalStats, WINDOWS, Windows, parse_half_life};

/// The second argument of each call of `function` in a condition, as written (trimmed):
/// `count_in("flag", "1h")` gives `"1h"` with its quotes. The offset is the call's.
pub(super) fn second_arguments<'a>(source: &'a str, function: &str) -> Vec<(usize, &'a str)> {
    let call = format!("{function}(");
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = source[from..].find(&call) {
        let start = from + at;
        from = start + call.len();
        // Not the tail of a longer name (`my_decayed(`).
        let preceded = source[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if preceded {
            continue;
        }
        if let Some(argument) = source[from..].split(',').nth(1) {
            found.push((start, argument.split(')').next().unwrap_or("").trim()));
        }
    }
    found
}

/// A string literal's text (`"30d"` or `'30d'`), if the argument is one.
fn literal(argument: &str) -> Option<&str> {
    ["\"", "'"].into_iter().find_map(|quote| {
        argument
            .strip_prefix(quote)
            .and_then(|rest| rest.strip_suffix(quote))
    })
}

/// A half-life of `decayed()` that cannot be read at load; `at` is where (`line:column`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HalfLifeError {
    #[error("decayed() at {at}: the half-life must be a string literal such as \"30d\"")]
    NotLiteral { at: String },
    #[error("decayed() at {at}: {invalid}")]
    Invalid { at: String, invalid: Invalid },
}

/// What a condition reads of the trailing figures: its minute windows, day windows and the
/// half-lives of its decayed counts (each a string literal of 1h to 90d, or the condition is
/// refused, with the position).
pub(super) fn reads(source: &str) -> Result<Windows, HalfLifeError> {
    let mut windows = Windows::NONE;
    for function in ["count_in", "weight_in"] {
        for (_, argument) in second_arguments(source, function) {
            let name = literal(argument).unwrap_or(argument);
            windows.minutes |= WINDOWS.iter().any(|(w, _)| *w == name);
            windows.days |= DAY_WINDOWS.iter().any(|(w, _)| *w == name);
        }
    }
    for (at, argument) in second_arguments(source, "decayed") {
        let at = super::check::position(source, at);
        let Some(half_life) = literal(argument) else {
            return Err(HalfLifeError::NotLiteral { at });
        };
        parse_half_life(half_life).map_err(|invalid| HalfLifeError::Invalid { at, invalid })?;
        windows.half_lives.push(half_life.to_owned());
    }
    Ok(windows)
}

/// The reads of several conditions together.
pub(super) fn union(all: impl IntoIterator<Item = Windows>) -> Windows {
    let mut union = Windows::NONE;
    for windows in all {
        union.minutes |= windows.minutes;
        union.days |= windows.days;
        union.half_lives.extend(windows.half_lives);
    }
    union.half_lives.sort();
    union.half_lives.dedup();
    union
}

/// The reads of a rule set's conditions, by the entity kinds their rules apply to: an entity's
/// snapshot reads only what the rules of its kind use (the default rules' decayed count of a
/// user's strikes is not read for posts).
#[derive(Debug, Clone, Default)]
pub(super) struct ReadsByKind {
    /// Every rule's reads together.
    all: Windows,
    /// The reads of the rules that apply to every kind.
    any_kind: Windows,
    /// For each kind a rule names, its rules' reads and those of the rules for every kind.
    by_kind: BTreeMap<String, Windows>,
}

impl ReadsByKind {
    /// From each rule's kinds (empty: every kind) and reads.
    pub(super) fn new(rules: Vec<(Vec<String>, Windows)>) -> Self {
        let any_kind = union(
            rules
                .iter()
                .filter(|(kinds, _)| kinds.is_empty())
                .map(|(_, read)| read.clone()),
        );
        let mut by_kind: BTreeMap<String, Windows> = BTreeMap::new();
        for (kinds, read) in &rules {
            for kind in kinds {
                let entry = by_kind.entry(kind.clone()).or_insert(any_kind.clone());
                *entry = union([entry.clone(), read.clone()]);
            }
        }
        Self {
            all: union(rules.into_iter().map(|(_, read)| read)),
            any_kind,
            by_kind,
        }
    }

    pub(super) fn all(&self) -> &Windows {
        &self.all
    }

    pub(super) fn of(&self, kind: &str) -> &Windows {
        self.by_kind.get(kind).unwrap_or(&self.any_kind)
    }
}

/// Whether a snapshot's signal figures hold everything `reads` names (a signal without events
/// holds nothing and needs nothing).
pub(crate) fn has_all(stats: &SignalStats, reads: &Windows) -> bool {
    let minutes = WINDOWS.iter().filter(|_| reads.minutes);
    let days = DAY_WINDOWS.iter().filter(|_| reads.days);
    minutes
        .chain(days)
        .all(|(name, _)| stats.windows.contains_key(*name))
        && reads
            .half_lives
            .iter()
            .all(|h| stats.decayed.contains_key(h))
}

/// Adds `decayed(signal, half_life)` to a condition's context: the decayed count the snapshot
/// read (0 for a signal without events; a half-life the snapshot did not read is refused at
/// load time for live rules, and is 0 in a backtest's replay of an older snapshot).
pub(super) fn add_functions(
    context: &mut Context,
    signals: &Arc<BTreeMap<String, SignalStats>>,
) -> Result<(), DeclarationError> {
    let s = Arc::clone(signals);
    context.add_function(
        "decayed",
        move |signal: Arc<String>, half_life: Arc<String>| -> Result<f64, ExecutionError> {
            parse_half_life(&half_life)
                .map_err(|e| ExecutionError::function_error("decayed", e.to_string()))?;
            Ok(s.get(signal.as_str())
                .and_then(|stats| stats.decayed.get(half_life.as_str()))
                .copied()
                .unwrap_or(0.0))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_set_reads_the_windows_and_half_lives_it_names() {
        let read =
            reads(r#"count_in("flag", "1h") > 1 && decayed("auto.hide", '30d') >= 2.5"#).unwrap();
        assert_eq!(
            read,
            Windows {
                minutes: true,
                days: false,
                half_lives: vec!["30d".into()],
            }
        );
        let read = reads(r#"weight_in("flag", "90d") > 1"#).unwrap();
        assert!(read.days && !read.minutes && read.half_lives.is_empty());
        assert_eq!(reads("count(\"flag\") > 1").unwrap(), Windows::NONE);
        let both = union([
            reads(r#"decayed("a", "30d") > 1.0"#).unwrap(),
            reads(r#"decayed("b", "1h") > 1.0 || decayed("a", "30d") > 2.0"#).unwrap(),
        ]);
        assert_eq!(both.half_lives, ["1h", "30d"]);
    }

    /// A user with these decayed counts of automated hides and of their reversals.
    fn user(hides: f64, reversed: f64) -> crate::domain::Snapshot {
        let mut snapshot = crate::domain::Snapshot::with_counts(
            crate::domain::EntityId::parse("user:1").unwrap(),
            [("auto.hide", 9), ("auto.hide.reversed", 1)],
        );
        for (signal, value) in [("auto.hide", hides), ("auto.hide.reversed", reversed)] {
            let stats = snapshot.signals.get_mut(signal).unwrap();
            stats.decayed.insert("30d".into(), value);
        }
        snapshot
    }

    #[test]
    fn the_default_repeat_offender_rule_counts_strikes_that_have_not_expired() {
        let rules = super::super::RuleSet::default_rules();
        let suspends = |snapshot| {
            let verdict = rules.evaluate(&snapshot);
            assert!(verdict.errors.is_empty(), "{verdict:?}");
            verdict
                .to_apply(crate::domain::Status::Visible, None)
                .map(|d| (d.rule.clone(), d.action))
        };
        // Three fresh hides (a few minutes old) suspend, whatever the lifetime count.
        assert_eq!(
            suspends(user(3.0 * 0.999, 0.0)),
            Some((
                "suspend_repeat_offender".into(),
                crate::domain::Action::Suspend
            ))
        );
        // Three hides a month old weigh 1.5: expired strikes do not suspend.
        assert_eq!(suspends(user(1.5, 0.0)), None);
        // A reversed hide does not count.
        assert_eq!(suspends(user(3.0, 1.0)), None);
    }

    #[test]
    fn a_half_life_must_be_a_literal_within_bounds() {
        let err = reads(r#"count("x") > 1 && decayed("x", "91d") > 1.0"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("1:19") && err.contains("91d"), "{err}");
        let err = reads(r#"decayed("x", kind) > 1.0"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("string literal"), "{err}");
        assert!(reads(r#"my_decayed("x", kind) > 1.0"#).is_ok());
    }
}
