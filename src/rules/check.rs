//! What a condition may call and which windows it may name, checked when the rules load so
//! that a typo fails then, even in a branch an empty snapshot never reaches.

use cel::Program;

use crate::domain::{DAY_WINDOWS, WINDOWS};

/// Functions a condition may call besides CEL's own.
pub(super) const QUIESCE_FUNCTIONS: [&str; 8] = [
    "count",
    "weight",
    "actors",
    "share",
    "ratio",
    "count_in",
    "weight_in",
    "decayed",
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

/// Checks what a compiled condition calls, and the windows it names, so that a typo fails at
/// load time even in a branch that an empty snapshot never reaches.
pub(super) fn check_names(source: &str, program: &Program) -> Result<(), String> {
    for function in program.references().functions() {
        let operator =
            function.starts_with('_') || function.starts_with('@') || function.starts_with('!');
        if !operator
            && !QUIESCE_FUNCTIONS.contains(&function)
            && !super::attributes::FUNCTIONS.contains(&function)
            && !CEL_FUNCTIONS.contains(&function)
        {
            let at = source
                .find(function)
                .map_or_else(String::new, |o| format!(" at {}", position(source, o)));
            return Err(format!(
                "unknown function {function}(){at}; quiesce offers {}, {}",
                QUIESCE_FUNCTIONS.join(", "),
                super::attributes::FUNCTIONS.join(", ")
            ));
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
                let names: Vec<&str> = WINDOWS.iter().chain(&DAY_WINDOWS).map(|w| w.0).collect();
                return Err(format!(
                    "unknown window {window:?} at {}; use one of {}",
                    position(source, start),
                    names.join(", ")
                ));
            }
        }
    }
    Ok(())
}
