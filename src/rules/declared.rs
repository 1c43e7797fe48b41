//! The check at load of what a rule reads of attributes: every attribute, signal, filter and
//! window it names is a literal, declared under `[attributes]`, of a type the function takes;
//! and which figures the snapshot must then read (aggregates, context, windows).

use cel::{
    IdedExpr, Program,
    common::ast::{CallExpr, EntryExpr, Expr, LiteralValue},
};

use crate::domain::{AttributeReads, AttributeType, Declarations, Scope, WINDOWS};

/// The windows an attribute aggregate may name: the minute windows (its buckets are kept 25 h).
pub(super) fn attribute_window(name: &str) -> bool {
    WINDOWS
        .iter()
        .any(|(window, seconds)| *window == name && *seconds <= 86_400)
}

/// Why a condition's read of attributes was refused at load, naming the function (`function`)
/// and what it reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttributeReadError {
    #[error("{function}() names its attribute with a string literal, e.g. \"score\"")]
    AttributeNotLiteral { function: String },
    #[error("{function}() reads the attribute {attribute:?}, which is not declared under [attributes.{}]", scope.as_str())]
    Undeclared {
        function: String,
        attribute: String,
        scope: Scope,
    },
    #[error("{function}() takes {arguments} arguments")]
    Arity { function: String, arguments: usize },
    #[error("{function}() names its signal with a string literal, e.g. \"flag\"")]
    SignalNotLiteral { function: String },
    #[error("{function}() reads a number attribute; {attribute:?} is a {}", kind.as_str())]
    NotNumber {
        function: String,
        attribute: String,
        kind: AttributeType,
    },
    #[error("{function}() reads a string or boolean attribute; {attribute:?} is a {}", kind.as_str())]
    NotStringOrBoolean {
        function: String,
        attribute: String,
        kind: AttributeType,
    },
    #[error(
        "attr() takes the attribute and a default, the value it reads as when unset, e.g. attr(\"account_age_days\", 0)"
    )]
    AttrWithoutDefault,
    #[error("attr({attribute:?}, ...)'s default is a {} literal", kind.as_str())]
    AttrDefault {
        attribute: String,
        kind: AttributeType,
    },
    /// `example`: the filter's form is shown (the filter is not a map at all).
    #[error("{function}()'s filter is a map literal{}", if *example { ", e.g. {\"reason\": \"spam\"}" } else { "" })]
    FilterNotMap { function: String, example: bool },
    #[error("{function}()'s filter names exactly one attribute")]
    FilterNotOne { function: String },
    #[error("{function}() filters {attribute:?} on {value:?}, which is not among its values ({})", values.join(", "))]
    FilterValueUndeclared {
        function: String,
        attribute: String,
        value: String,
        values: Vec<String>,
    },
    #[error(
        "{function}() filters on a string or boolean attribute; {attribute:?} is a number (use max or latest)"
    )]
    FilterOnNumber { function: String, attribute: String },
    #[error("{function}() filters {attribute:?} on a {} literal", kind.as_str())]
    FilterValueType {
        function: String,
        attribute: String,
        kind: AttributeType,
    },
    #[error("{function}() names its window with a literal among {}", attribute_windows().join(", "))]
    Window { function: String },
}

/// The windows an attribute aggregate may name, by name.
fn attribute_windows() -> Vec<&'static str> {
    WINDOWS
        .iter()
        .filter(|(w, _)| attribute_window(w))
        .map(|(w, _)| *w)
        .collect()
}

/// Checks what a condition reads of attributes against the declarations; returns which figures
/// the snapshot must read for it.
pub(super) fn check(
    program: &Program,
    declared: &Declarations,
) -> Result<AttributeReads, AttributeReadError> {
    let mut reads = AttributeReads::default();
    visit(program.expression(), &mut |expr| {
        match &expr.expr {
            Expr::Ident(name) if name == "author" => reads.context = true,
            Expr::Call(call) => check_call(call, declared, &mut reads)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(reads)
}

/// Calls `f` on every expression of the tree.
fn visit(
    expr: &IdedExpr,
    f: &mut impl FnMut(&IdedExpr) -> Result<(), AttributeReadError>,
) -> Result<(), AttributeReadError> {
    f(expr)?;
    match &expr.expr {
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                visit(target, f)?;
            }
            call.args.iter().try_for_each(|arg| visit(arg, f))
        }
        Expr::Comprehension(c) => [
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ]
        .into_iter()
        .try_for_each(|e| visit(e, f)),
        Expr::List(list) => list.elements.iter().try_for_each(|e| visit(e, f)),
        Expr::Map(map) => map.entries.iter().try_for_each(|entry| match &entry.expr {
            EntryExpr::MapEntry(e) => visit(&e.key, f).and_then(|()| visit(&e.value, f)),
            EntryExpr::StructField(e) => visit(&e.value, f),
        }),
        Expr::Struct(s) => s.entries.iter().try_for_each(|entry| match &entry.expr {
            EntryExpr::MapEntry(e) => visit(&e.key, f).and_then(|()| visit(&e.value, f)),
            EntryExpr::StructField(e) => visit(&e.value, f),
        }),
        Expr::Select(select) => visit(&select.operand, f),
        _ => Ok(()),
    }
}

fn literal(expr: &IdedExpr) -> Option<&LiteralValue> {
    match &expr.expr {
        Expr::Literal(value) => Some(value),
        _ => None,
    }
}

fn string_literal(expr: &IdedExpr) -> Option<&str> {
    match literal(expr)? {
        LiteralValue::String(s) => Some(s.inner()),
        _ => None,
    }
}

/// The declared type of an attribute named by a literal, or why it cannot be read.
fn declared_type(
    function: &str,
    arg: Option<&IdedExpr>,
    scope: Scope,
    declared: &Declarations,
) -> Result<(String, AttributeType), AttributeReadError> {
    let name =
        arg.and_then(string_literal)
            .ok_or_else(|| AttributeReadError::AttributeNotLiteral {
                function: function.to_owned(),
            })?;
    let declaration =
        declared
            .of(scope)
            .get(name)
            .ok_or_else(|| AttributeReadError::Undeclared {
                function: function.to_owned(),
                attribute: name.to_owned(),
                scope,
            })?;
    Ok((name.to_owned(), declaration.kind))
}

fn check_call(
    call: &CallExpr,
    declared: &Declarations,
    reads: &mut AttributeReads,
) -> Result<(), AttributeReadError> {
    let name = call.func_name.as_str();
    let function = || name.to_owned();
    let arity = |n: usize| {
        if call.args.len() == n {
            Ok(())
        } else {
            Err(AttributeReadError::Arity {
                function: function(),
                arguments: n,
            })
        }
    };
    let signal_literal = || {
        call.args
            .first()
            .and_then(string_literal)
            .map(|_| ())
            .ok_or_else(|| AttributeReadError::SignalNotLiteral {
                function: function(),
            })
    };
    match name {
        "count" if call.target.is_some() => {
            reads.context = true;
            arity(1)
        }
        "count" if call.args.len() == 2 => {
            signal_literal()?;
            reads.events = true;
            check_filter(name, call.args.get(1), declared)
        }
        "count_in" if call.args.len() == 3 && matches!(call.args[1].expr, Expr::Map(_)) => {
            signal_literal()?;
            reads.events = true;
            reads.windows = true;
            check_window(name, call.args.get(2))?;
            check_filter(name, call.args.get(1), declared)
        }
        "max_in" | "latest_in" => {
            arity(3)?;
            signal_literal()?;
            reads.events = true;
            reads.windows = true;
            check_window(name, call.args.get(2))?;
            let (attribute, kind) = declared_type(name, call.args.get(1), Scope::Event, declared)?;
            if kind == AttributeType::Number {
                Ok(())
            } else {
                Err(AttributeReadError::NotNumber {
                    function: function(),
                    attribute,
                    kind,
                })
            }
        }
        "max" | "latest" | "distinct" | "distinct_in" => {
            let windowed = name == "distinct_in";
            arity(if windowed { 3 } else { 2 })?;
            signal_literal()?;
            reads.events = true;
            if windowed {
                reads.windows = true;
                check_window(name, call.args.get(2))?;
            }
            let (attribute, kind) = declared_type(name, call.args.get(1), Scope::Event, declared)?;
            let numeric = !name.starts_with("distinct");
            match (numeric, kind) {
                (true, AttributeType::Number) => Ok(()),
                (false, AttributeType::String | AttributeType::Boolean) => Ok(()),
                (true, kind) => Err(AttributeReadError::NotNumber {
                    function: function(),
                    attribute,
                    kind,
                }),
                (false, kind) => Err(AttributeReadError::NotStringOrBoolean {
                    function: function(),
                    attribute,
                    kind,
                }),
            }
        }
        "attr" => {
            reads.context = true;
            if call.args.len() != 2 {
                return Err(AttributeReadError::AttrWithoutDefault);
            }
            let (attribute, kind) =
                declared_type(name, call.args.first(), Scope::Entity, declared)?;
            let default = literal(&call.args[1]);
            let fits = matches!(
                (kind, default),
                (AttributeType::String, Some(LiteralValue::String(_)))
                    | (AttributeType::Boolean, Some(LiteralValue::Boolean(_)))
                    | (
                        AttributeType::Number,
                        Some(
                            LiteralValue::Int(_) | LiteralValue::Double(_) | LiteralValue::UInt(_)
                        )
                    )
            );
            if fits {
                Ok(())
            } else {
                Err(AttributeReadError::AttrDefault { attribute, kind })
            }
        }
        "has_attr" => {
            reads.context = true;
            arity(1)?;
            declared_type(name, call.args.first(), Scope::Entity, declared).map(|_| ())
        }
        _ => Ok(()),
    }
}

/// A filter of `count` or `count_in`: a map literal naming one declared string or boolean
/// attribute and a literal value of its type (among its `values`).
fn check_filter(
    name: &str,
    filter: Option<&IdedExpr>,
    declared: &Declarations,
) -> Result<(), AttributeReadError> {
    let function = || name.to_owned();
    let Some(Expr::Map(filter)) = filter.map(|a| &a.expr) else {
        return Err(AttributeReadError::FilterNotMap {
            function: function(),
            example: true,
        });
    };
    let [entry] = filter.entries.as_slice() else {
        return Err(AttributeReadError::FilterNotOne {
            function: function(),
        });
    };
    let EntryExpr::MapEntry(entry) = &entry.expr else {
        return Err(AttributeReadError::FilterNotMap {
            function: function(),
            example: false,
        });
    };
    let (attribute, kind) = declared_type(name, Some(&entry.key), Scope::Event, declared)?;
    match (kind, literal(&entry.value)) {
        (AttributeType::String, Some(LiteralValue::String(value))) => {
            let values = &declared.event[&attribute].values;
            if let Some(values) = values
                && !values.iter().any(|v| v == value.inner())
            {
                return Err(AttributeReadError::FilterValueUndeclared {
                    function: function(),
                    attribute,
                    value: value.inner().to_owned(),
                    values: values.clone(),
                });
            }
            Ok(())
        }
        (AttributeType::Boolean, Some(LiteralValue::Boolean(_))) => Ok(()),
        (AttributeType::Number, _) => Err(AttributeReadError::FilterOnNumber {
            function: function(),
            attribute,
        }),
        (kind, _) => Err(AttributeReadError::FilterValueType {
            function: function(),
            attribute,
            kind,
        }),
    }
}

/// A window an attribute aggregate names: a literal among the minute windows.
fn check_window(name: &str, window: Option<&IdedExpr>) -> Result<(), AttributeReadError> {
    match window.and_then(string_literal) {
        Some(window) if attribute_window(window) => Ok(()),
        _ => Err(AttributeReadError::Window {
            function: name.to_owned(),
        }),
    }
}

/// A rule set of one rule, `when`, over these declarations: what the tests of the attribute
/// functions and of their check at load share.
#[cfg(test)]
pub(super) fn rule_over_declarations(when: &str) -> Result<super::RuleSet, super::RulesError> {
    const DECLARED: &str = r#"
[attributes.event.reason]
type = "string"
values = ["spam", "abuse"]
[attributes.event.score]
type = "number"
[attributes.event.trusted]
type = "boolean"
[attributes.entity.account_age_days]
type = "number"
[attributes.entity.role]
type = "string"
"#;
    super::RuleSet::from_toml(&format!(
        "{DECLARED}\n[[rule]]\nname = \"r\"\nwhen = '{when}'\naction = \"flag\"\nreason = \"x\"\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::rule_over_declarations as rule;
    use crate::rules::RuleSet;

    #[test]
    fn a_rule_that_reads_an_undeclared_attribute_is_refused_naming_it() {
        for (when, wanted) in [
            (r#"count("flag", {"colour": "red"}) > 1"#, "colour"),
            (r#"max("flag", "toxicity") > 0.5"#, "toxicity"),
            (r#"false && latest("flag", "toxicity") > 0.5"#, "toxicity"),
            (r#"distinct("flag", "score") > 1"#, "number"),
            (r#"max("flag", "reason") > 1.0"#, "string"),
            (r#"count("flag", {"reason": "spma"}) > 1"#, "spma"),
            (
                r#"count("flag", {"reason": "spam", "trusted": true}) > 1"#,
                "exactly one",
            ),
            (r#"count("flag", {"score": 1}) > 1"#, "number"),
            (r#"attr("account_age_days") < 7"#, "default"),
            (r#"attr("account_age_days", "x") < 7"#, "number literal"),
            (r#"author.attr("verified", false)"#, "verified"),
            (r#"attr("reason", "spam") == "spam""#, "reason"),
            (r#"has_attr("verified")"#, "verified"),
            (
                r#"count_in("flag", {"reason": "spam"}, "2h") > 1"#,
                "window",
            ),
            (r#"count_in("flag", {"colour": "red"}, "1h") > 1"#, "colour"),
            (r#"max_in("flag", "reason", "1h") > 1.0"#, "string"),
            (r#"max_in("flag", "score") > 1.0"#, "3 arguments"),
            (r#"latest_in("flag", "reason", "1h") > 1.0"#, "string"),
            (r#"latest_in("flag", "score", "7d") > 1.0"#, "window"),
            (r#"distinct_in("flag", "score", "1h") > 1"#, "number"),
            (r#"distinct_in("flag", "reason", "7d") > 1"#, "window"),
        ] {
            let error = rule(when)
                .err()
                .unwrap_or_else(|| panic!("{when} loaded"))
                .to_string();
            assert!(error.contains("\"r\""), "{when}: {error}");
            assert!(error.contains(wanted), "{when}: {error}");
        }
        let error =
            RuleSet::from_toml("[attributes.event.score]\ntype = \"number\"\nvalues = [\"1\"]\n")
                .err()
                .unwrap()
                .to_string();
        assert!(error.contains("attributes.event.score"), "{error}");
    }

    #[test]
    fn only_rules_that_read_attributes_make_the_snapshot_read_them() {
        let plain = rule(r#"count("flag") > 1"#).unwrap().attribute_reads();
        assert!(!plain.events && !plain.context);
        let events = rule(r#"max("flag", "score") > 0.5"#)
            .unwrap()
            .attribute_reads();
        assert!(events.events && !events.context);
        let context = rule(r#"author.status == "visible""#)
            .unwrap()
            .attribute_reads();
        assert!(!context.events && context.context && !context.windows);
        let windows = rule(r#"count_in("flag", {"reason": "spam"}, "1h") > 1"#)
            .unwrap()
            .attribute_reads();
        assert!(windows.events && windows.windows && !windows.context);
        let plain_window = rule(r#"count_in("flag", "1h") > 1"#)
            .unwrap()
            .attribute_reads();
        assert!(!plain_window.windows);
        // The declarations travel with the rules: a round trip through TOML keeps them.
        let set = rule(r#"attr("role", "") == "staff""#).unwrap();
        let again = RuleSet::from_toml(&set.to_toml()).unwrap();
        assert_eq!(again.declarations(), set.declarations());
        assert!(again.attribute_reads().context);
    }
}
