//! One rule's condition on one snapshot: the CEL context with quiesce's functions (counts,
//! weights, distinct actors, shares, ratios and trailing windows), and the reason rendered from
//! the snapshot.

use std::{collections::BTreeMap, sync::Arc};

use cel::{
    Context, DeclarationError, Env, ExecutionError, FunctionContext, Program, Value,
    extractors::Arguments,
};

use super::{Rule, RuleSet};
use crate::domain::{DAY_WINDOWS, SignalStats, SignalTotals, Snapshot, WINDOWS};

pub(super) type Signals = Arc<BTreeMap<String, SignalStats>>;

fn window_totals(
    signals: &Signals,
    signal: &str,
    window: &str,
) -> Result<SignalTotals, ExecutionError> {
    if !WINDOWS
        .iter()
        .chain(&DAY_WINDOWS)
        .any(|(name, _)| *name == window)
    {
        return Err(ExecutionError::function_error(
            "count_in",
            format!("unknown window {window:?}"),
        ));
    }
    Ok(signals
        .get(signal)
        .and_then(|s| s.windows.get(window))
        .copied()
        .unwrap_or_default())
}

/// Why a condition gave no answer on a snapshot.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConditionError {
    #[error("expected a boolean, got {0:?}")]
    NotBoolean(Value),
    #[error(transparent)]
    Execution(#[from] ExecutionError),
    /// quiesce's functions could not be added to the condition's context.
    #[error(transparent)]
    Declaration(#[from] DeclarationError),
}

/// Why a rule's exemption (`unless`) gave no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("`unless`: {0}")]
pub struct ExemptionError(pub ConditionError);

impl Rule {
    pub(super) fn matches(&self, context: &Context) -> Result<bool, ConditionError> {
        run(&self.program, context)
    }

    /// Whether the rule applies to entities of `kind` (no `kinds`: to every kind).
    pub fn applies_to(&self, kind: &str) -> bool {
        self.kinds.is_empty() || self.kinds.iter().any(|k| k == kind)
    }

    /// Whether its condition or reason reads distinct actors (a count over the entity's
    /// retained events, so a snapshot reads them only when needed).
    pub(super) fn reads_actors(&self) -> bool {
        self.when.contains("actors(") || self.reason.contains("{actors.")
    }
}

impl RuleSet {
    /// Whether the rules applying to entities of `kind` read distinct actors (the worker reads
    /// them for every kind when any rule does).
    pub fn uses_actors_for(&self, kind: &str) -> bool {
        self.rules
            .iter()
            .any(|r| r.applies_to(kind) && r.reads_actors())
    }
}

/// Runs a condition of a rule (`when`, or `unless`) in an evaluation's context.
pub(super) fn run(program: &Program, context: &Context) -> Result<bool, ConditionError> {
    match program.execute(context)? {
        Value::Bool(b) => Ok(b),
        other => Err(ConditionError::NotBoolean(other)),
    }
}

/// The CEL context every rule of one evaluation runs in: quiesce's functions over one copy of
/// the snapshot's figures, and its kind, status and entity. Built once per evaluation, not per
/// rule.
pub(super) fn context<'p>(
    env: &Arc<Env>,
    snapshot: &Snapshot,
) -> Result<Context<'p, 'static>, ConditionError> {
    // One copy of the snapshot's figures, shared by every function of every rule.
    let signals: &Signals = &Arc::new(snapshot.signals.clone());
    let attributes = &Arc::new(snapshot.attributes.clone());
    let mut context = Context::with_env(Arc::clone(env));
    // `count` (with its filter and author forms) and the attribute functions.
    super::attributes::register(&mut context, signals, attributes)?;
    context.add_variable_from_value("author", super::attributes::author_value(attributes));
    let s = Arc::clone(signals);
    context.add_function("weight", move |signal: Arc<String>| {
        s.get(signal.as_str()).map_or(0.0, |t| t.weight)
    })?;
    let s = Arc::clone(signals);
    context.add_function("actors", move |signal: Arc<String>| {
        s.get(signal.as_str()).and_then(|t| t.actors).unwrap_or(0)
    })?;
    let s = Arc::clone(signals);
    context.add_function("share", move |signal: Arc<String>, other: Arc<String>| {
        let count = |name: &str| s.get(name).map_or(0, |t| t.count) as f64;
        let (a, b) = (count(&signal), count(&other));
        if a + b == 0.0 { 0.0 } else { a / (a + b) }
    })?;
    let s = Arc::clone(signals);
    context.add_function("ratio", move |signal: Arc<String>, other: Arc<String>| {
        let count = |name: &str| s.get(name).map_or(0, |t| t.count) as f64;
        count(&signal) / count(&other).max(1.0)
    })?;
    let (s, a) = (Arc::clone(signals), Arc::clone(attributes));
    context.add_function(
        "count_in",
        move |ftx: &FunctionContext, Arguments(args): Arguments| {
            // With a filter: count_in("flag", {"reason": "spam"}, "1h").
            if args.len() == 3 {
                return super::attributes::count_in(ftx, &args, &a);
            }
            let (Some(Value::String(signal)), Some(Value::String(window))) =
                (args.first(), args.get(1))
            else {
                return Err(ftx.error("takes a signal and a window"));
            };
            window_totals(&s, signal, window).map(|t| Value::Int(t.count))
        },
    )?;
    let s = Arc::clone(signals);
    context.add_function(
        "weight_in",
        move |signal: Arc<String>, window: Arc<String>| {
            window_totals(&s, &signal, &window).map(|t| t.weight)
        },
    )?;
    super::decay::add_functions(&mut context, signals)?;
    // Strings as CEL values: adding them cannot fail.
    context.add_variable_from_value("kind", snapshot.kind.clone());
    context.add_variable_from_value("status", snapshot.status.as_str().to_owned());
    context.add_variable_from_value("entity", snapshot.entity.as_str().to_owned());
    Ok(context)
}

/// Fills `{entity}`, `{kind}`, `{count.<signal>}`, `{weight.<signal>}` and
/// `{actors.<signal>}` in a reason.
pub(super) fn render_reason(template: &str, snapshot: &Snapshot) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        let name = &rest[start + 1..start + len];
        let stats = |s: &str| snapshot.signals.get(s).cloned().unwrap_or_default();
        match name.split_once('.') {
            _ if name == "entity" => out.push_str(snapshot.entity.as_str()),
            _ if name == "kind" => out.push_str(&snapshot.kind),
            Some(("count", signal)) => out.push_str(&stats(signal).count.to_string()),
            Some(("weight", signal)) => out.push_str(&stats(signal).weight.to_string()),
            Some(("actors", signal)) => {
                out.push_str(&stats(signal).actors.unwrap_or(0).to_string())
            }
            _ => out.push_str(&rest[start..=start + len]),
        }
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{
        domain::{Action, EntityId, SignalStats, SignalTotals, Status},
        rules::RuleSet,
    };

    fn rule(when: &str) -> RuleSet {
        RuleSet::from_toml(&format!(
            "[[rule]]\nname = \"r\"\nwhen = '{when}'\naction = \"flag\"\nreason = \"x\"\n"
        ))
        .unwrap_or_else(|e| panic!("{when}: {e}"))
    }

    /// A post with flags (weight 2 each, from 3 actors, 4 of them in the last minute) and
    /// upvotes (from 20 actors, none recent).
    fn snapshot() -> Snapshot {
        let windows = |recent: i64, weight: f64| -> BTreeMap<String, SignalTotals> {
            WINDOWS
                .iter()
                .chain(&DAY_WINDOWS)
                .map(|(name, _)| {
                    let count = if *name == "1m" { recent } else { recent * 2 };
                    (
                        name.to_string(),
                        SignalTotals {
                            count,
                            weight: count as f64 * weight,
                        },
                    )
                })
                .collect()
        };
        let mut snapshot = Snapshot::empty_for_validation();
        snapshot.entity = EntityId::parse("post:7").unwrap();
        snapshot.status = Status::Flagged;
        snapshot.signals.insert(
            "flag".into(),
            SignalStats {
                count: 8,
                weight: 16.0,
                actors: Some(3),
                windows: windows(4, 2.0),
                decayed: BTreeMap::from([("30d".to_owned(), 2.5)]),
            },
        );
        snapshot.signals.insert(
            "upvote".into(),
            SignalStats {
                count: 20,
                weight: 20.0,
                actors: Some(20),
                windows: windows(0, 1.0),
                decayed: BTreeMap::new(),
            },
        );
        snapshot
    }

    #[test]
    fn every_listed_function_is_in_a_conditions_context() {
        let env = Arc::new(Env::stdlib());
        let context = context(&env, &snapshot()).unwrap();
        let undeclared = |source: &str| {
            let program = env.compile(source).unwrap();
            matches!(
                program.execute(&context),
                Err(ExecutionError::UndeclaredReference(_))
            )
        };
        for name in super::super::check::FUNCTIONS {
            // Called with no arguments: a declared function fails on them, not on its name.
            assert!(
                !undeclared(&format!("{name}()")),
                "{name} is listed but not declared"
            );
        }
        assert!(undeclared("no_such_function()"));
    }

    #[test]
    fn each_condition_kind_reads_the_snapshot() {
        let cases = [
            ("count(\"flag\") == 8", true),
            ("count(\"missing\") == 0", true),
            ("weight(\"flag\") == 16.0", true),
            ("weight(\"flag\") > 16.5", false),
            ("actors(\"flag\") == 3", true),
            ("actors(\"upvote\") >= 20", true),
            (
                "share(\"flag\", \"upvote\") > 0.28 && share(\"flag\", \"upvote\") < 0.29",
                true,
            ),
            ("share(\"none\", \"nothing\") == 0.0", true),
            ("ratio(\"upvote\", \"flag\") == 2.5", true),
            ("ratio(\"flag\", \"missing\") == 8.0", true),
            ("count_in(\"flag\", \"1m\") == 4", true),
            ("count_in(\"flag\", \"24h\") == 8", true),
            ("weight_in(\"flag\", \"5m\") == 16.0", true),
            ("count_in(\"upvote\", \"1h\") == 0", true),
            ("count_in(\"flag\", \"7d\") == 8", true),
            ("weight_in(\"flag\", \"90d\") == 16.0", true),
            ("decayed(\"flag\", \"30d\") == 2.5", true),
            ("decayed(\"upvote\", \"30d\") == 0.0", true),
            ("decayed(\"missing\", \"30d\") == 0.0", true),
            ("kind == \"post\"", true),
            ("kind == \"user\"", false),
            ("status == \"flagged\"", true),
            ("entity.startsWith(\"post:\")", true),
            ("count(\"flag\") >= 10 || actors(\"flag\") >= 3", true),
        ];
        for (when, expected) in cases {
            let verdict = rule(when).evaluate(&snapshot());
            assert_eq!(!verdict.matched.is_empty(), expected, "{when}: {verdict:?}");
            assert!(verdict.errors.is_empty(), "{when}: {verdict:?}");
        }
    }

    #[test]
    fn a_failing_shadow_rule_is_recorded_apart_and_fails_nothing() {
        let rules = RuleSet::from_toml(
            "[[rule]]\nname = \"divides\"\nwhen = 'count(\"flag\") > 0 && count(\"flag\") / count(\"none\") > 2'\naction = \"hide\"\nreason = \"x\"\nshadow = true\n",
        )
        .unwrap();
        let verdict = rules.evaluate(&snapshot());
        assert!(verdict.errors.is_empty(), "{verdict:?}");
        assert_eq!(verdict.shadow_errors.len(), 1, "{verdict:?}");
    }

    #[test]
    fn shadow_rules_are_reported_apart_and_never_applied() {
        let rules = RuleSet::from_toml(
            "[[rule]]\nname = \"trial\"\nwhen = 'count(\"flag\") >= 1'\naction = \"suspend\"\nreason = \"x\"\nshadow = true\n",
        )
        .unwrap();
        let verdict = rules.evaluate(&snapshot());
        assert!(verdict.matched.is_empty());
        assert_eq!(verdict.shadow.len(), 1);
        assert_eq!(verdict.shadow[0].action, Action::Suspend);
        assert!(verdict.to_apply(Status::Visible, None).is_none());
    }

    #[test]
    fn names_and_windows_are_checked_at_load_with_a_position() {
        let file = |when: &str| {
            format!(
                "[[rule]]\nname = \"bad\"\nwhen = '{when}'\naction = \"hide\"\nreason = \"x\"\n"
            )
        };
        // A typo behind a false condition: an empty snapshot never reaches it.
        let err = RuleSet::from_toml(&file("false && cuont(\"flag\") > 1"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("bad") && err.contains("cuont") && err.contains("1:10"),
            "{err}"
        );
        let err = RuleSet::from_toml(&file("count_in(\"flag\", \"2h\") > 1"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("bad") && err.contains("2h") && err.contains("1:1"),
            "{err}"
        );
        let err = RuleSet::from_toml(&file("count(\"flag\") >"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("bad") && err.contains("does not parse"),
            "{err}"
        );
    }
}
