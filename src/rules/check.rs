//! What a condition may call and which windows it may name, checked when the rules load so
//! that a typo fails then, even in a branch an empty snapshot never reaches.

use cel::Program;

use crate::domain::{DAY_WINDOWS, WINDOWS};

/// Every function a condition may call besides CEL's own: the one list of quiesce's rule
/// functions, which the load-time check allows and its error names. A new function is added to
/// the condition's context (`condition.rs`, `attributes.rs` or `decay.rs`) and named here;
/// `every_listed_function_is_in_a_conditions_context` fails for a name with no function
/// behind it, and a rule calling a function left out of the list does not load.
pub(super) const FUNCTIONS: [&str; 15] = [
    // condition.rs: counts, weights, actors, shares, ratios, trailing windows.
    "count",
    "weight",
    "actors",
    "share",
    "ratio",
    "count_in",
    "weight_in",
    // decay.rs
    "decayed",
    // attributes.rs: aggregates of event attributes and the entity's context (`max` is
    // CEL's own name already, and `count`'s filter form is there too).
    "latest",
    "distinct",
    "max_in",
    "latest_in",
    "distinct_in",
    "attr",
    "has_attr",
];
/// CEL's standard functions and macros, as the expression parser names them.
const CEL_FUNCTIONS: [&str; 30] = [
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "duration",
    "timestamp",
    "has",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
    "max",
    "min",
    "type",
    "dyn",
    "getFullYear",
    "getMonth",
    "getDayOfMonth",
    "getHours",
    "getMinutes",
    "getSeconds",
    "abs",
];

/// `line:column` (1-based) of a byte offset in a condition.
pub(super) fn position(source: &str, offset: usize) -> String {
    let before = &source[..offset.min(source.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("{line}:{column}")
}

/// A function or window a condition names that quiesce does not offer; `at` is where
/// (`line:column`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnknownName {
    #[error(
        "unknown function {function}(){}; quiesce offers {}",
        at.as_ref().map(|at| format!(" at {at}")).unwrap_or_default(),
        FUNCTIONS.join(", ")
    )]
    Function {
        function: String,
        at: Option<String>,
    },
    #[error("unknown window {window:?} at {at}; use one of {}", window_names().join(", "))]
    Window { window: String, at: String },
}

/// Every window a condition may name.
fn window_names() -> Vec<&'static str> {
    WINDOWS.iter().chain(&DAY_WINDOWS).map(|w| w.0).collect()
}

/// Checks what a compiled condition calls, and the windows it names, so that a typo fails at
/// load time even in a branch that an empty snapshot never reaches.
pub(super) fn check_names(source: &str, program: &Program) -> Result<(), UnknownName> {
    for function in program.references().functions() {
        let operator =
            function.starts_with('_') || function.starts_with('@') || function.starts_with('!');
        if !operator && !FUNCTIONS.contains(&function) && !CEL_FUNCTIONS.contains(&function) {
            return Err(UnknownName::Function {
                function: function.to_owned(),
                at: source.find(function).map(|o| position(source, o)),
            });
        }
    }
    for call in ["count_in(", "weight_in("] {
        let mut from = 0;
        while let Some(found) = source[from..].find(call) {
            let start = from + found;
            from = start + call.len();
            // A filter second (`count_in("flag", {"reason": "spam"}, "1h")`): checked with the
            // attribute functions (rules/attributes.rs).
            if source[from..]
                .split(',')
                .nth(1)
                .is_some_and(|arg| arg.trim_start().starts_with('{'))
            {
                continue;
            }
            let window = source[from..].split(',').nth(1).map(|w| {
                w.split(')')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .trim_matches(['"', '\''])
            });
            if let Some(window) = window
                && !WINDOWS
                    .iter()
                    .chain(&DAY_WINDOWS)
                    .any(|(name, _)| *name == window)
            {
                return Err(UnknownName::Window {
                    window: window.to_owned(),
                    at: position(source, start),
                });
            }
        }
    }
    Ok(())
}
