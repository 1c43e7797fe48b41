//! Moderation rules as data: a TOML file of named rules whose conditions are CEL expressions
//! over an entity's snapshot. Evaluation is a pure function: snapshot -> decisions. A
//! [`Rules`] handle holds the rule set in force and swaps it on reload.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
};

use cel::{Context, Env, ExecutionError, Program};
use serde::{Deserialize, Serialize};

use crate::domain::{Action, SignalStats, SignalTotals, Snapshot, Status, WINDOWS};

/// The rules shipped with quiesce, used when no rules file is configured.
pub const DEFAULT_RULES: &str = include_str!("../rules/default.toml");

/// Functions a condition may call besides CEL's own.
const QUIESCE_FUNCTIONS: [&str; 7] = [
    "count",
    "weight",
    "actors",
    "share",
    "ratio",
    "count_in",
    "weight_in",
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

#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("cannot read rules file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid rules file: {0}")]
    Parse(String),
    #[error("rule {rule:?}: {message}")]
    Rule { rule: String, message: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default, rename = "rule")]
    rules: Vec<RuleSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    name: String,
    /// Entity kinds the rule applies to; empty or absent: all kinds.
    #[serde(default)]
    kinds: Vec<String>,
    when: String,
    action: Action,
    reason: String,
    /// A shadow rule is evaluated and recorded but never acts.
    #[serde(default)]
    shadow: bool,
}

#[derive(Debug)]
pub struct Rule {
    pub name: String,
    pub kinds: Vec<String>,
    pub action: Action,
    pub when: String,
    pub shadow: bool,
    reason: String,
    program: Program,
}

impl std::fmt::Debug for RuleSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleSet")
            .field("rules", &self.rules.len())
            .finish()
    }
}

/// A compiled, validated rule set.
pub struct RuleSet {
    rules: Vec<Rule>,
    env: Arc<Env>,
}

/// One rule's verdict on a snapshot.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Decision {
    pub rule: String,
    pub action: Action,
    pub reason: String,
}

/// Everything the rules concluded about one snapshot.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Verdict {
    /// Live rules whose condition held, in file order.
    pub matched: Vec<Decision>,
    /// Shadow rules whose condition held: what they would have done.
    #[serde(default)]
    pub shadow: Vec<Decision>,
    /// Live rules that could not be evaluated on this snapshot, with the error.
    pub errors: Vec<(String, String)>,
    /// Shadow rules that could not be evaluated: recorded, never a reason to fail.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadow_errors: Vec<(String, String)>,
}

impl Verdict {
    /// The strongest matched live action (the first rule in file order among equals).
    pub fn strongest(&self) -> Option<&Decision> {
        self.matched
            .iter()
            .rev()
            .max_by_key(|decision| decision.action)
    }

    /// The decision to apply: the strongest one, if it escalates the current status and does
    /// not go past a moderator's override (`cap`), which automation never overrules.
    pub fn to_apply(&self, current: Status, cap: Option<Status>) -> Option<&Decision> {
        self.strongest()
            .filter(|d| d.action.status() > current)
            .filter(|d| cap.is_none_or(|cap| d.action.status() <= cap))
    }
}

/// `line:column` (1-based) of a byte offset in a condition.
fn position(source: &str, offset: usize) -> String {
    let before = &source[..offset.min(source.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("{line}:{column}")
}

/// Checks what a compiled condition calls, and the windows it names, so that a typo fails at
/// load time even in a branch that an empty snapshot never reaches.
fn check_names(source: &str, program: &Program) -> Result<(), String> {
    for function in program.references().functions() {
        let operator =
            function.starts_with('_') || function.starts_with('@') || function.starts_with('!');
        if !operator && !QUIESCE_FUNCTIONS.contains(&function) && !CEL_FUNCTIONS.contains(&function)
        {
            let at = source
                .find(function)
                .map_or_else(String::new, |o| format!(" at {}", position(source, o)));
            return Err(format!(
                "unknown function {function}(){at}; quiesce offers {}",
                QUIESCE_FUNCTIONS.join(", ")
            ));
        }
    }
    for call in ["count_in(", "weight_in("] {
        let mut from = 0;
        while let Some(found) = source[from..].find(call) {
            let start = from + found;
            from = start + call.len();
            let window = source[from..].split(',').nth(1).map(|w| {
                w.split(')')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .trim_matches(['"', '\''])
            });
            if let Some(window) = window
                && !WINDOWS.iter().any(|(name, _)| *name == window)
            {
                return Err(format!(
                    "unknown window {window:?} at {}; use one of {}",
                    position(source, start),
                    WINDOWS.map(|(name, _)| name).join(", ")
                ));
            }
        }
    }
    Ok(())
}

impl RuleSet {
    pub fn from_toml(text: &str) -> Result<Self, RulesError> {
        let file: RulesFile = toml::from_str(text).map_err(|e| RulesError::Parse(e.to_string()))?;
        let env = Arc::new(Env::stdlib());
        let mut names = std::collections::HashSet::new();
        let mut rules = Vec::with_capacity(file.rules.len());
        for spec in file.rules {
            let fail = |message: String| RulesError::Rule {
                rule: spec.name.clone(),
                message,
            };
            if spec.name.is_empty() || !names.insert(spec.name.clone()) {
                return Err(fail("rule names must be present and unique".into()));
            }
            let program = env
                .compile(&spec.when)
                .map_err(|e| fail(format!("`when` does not parse: {e}")))?;
            check_names(&spec.when, &program).map_err(|e| fail(format!("`when`: {e}")))?;
            let rule = Rule {
                name: spec.name.clone(),
                kinds: spec.kinds,
                action: spec.action,
                when: spec.when,
                shadow: spec.shadow,
                reason: spec.reason,
                program,
            };
            // A dry run on an empty snapshot catches unknown names and non-boolean results.
            let empty = Snapshot::empty_for_validation();
            rule.matches(&env, &empty, &Arc::new(empty.signals.clone()))
                .map_err(|e| fail(format!("`when` cannot be evaluated: {e}")))?;
            rules.push(rule);
        }
        Ok(Self { rules, env })
    }

    pub fn from_file(path: &Path) -> Result<Self, RulesError> {
        let text = std::fs::read_to_string(path).map_err(|source| RulesError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text)
    }

    pub fn default_rules() -> Self {
        Self::from_toml(DEFAULT_RULES).expect("the shipped default rules are valid")
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether any rule reads distinct actors (a count over the entity's retained events,
    /// so the snapshot reads them only when needed).
    pub fn uses_actors(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.when.contains("actors(") || r.reason.contains("{actors."))
    }

    /// Whether any rule reads a trailing window (`count_in`, `weight_in`).
    pub fn uses_windows(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.when.contains("count_in(") || r.when.contains("weight_in("))
    }

    /// Runs every rule that applies to the snapshot's kind.
    pub fn evaluate(&self, snapshot: &Snapshot) -> Verdict {
        let mut verdict = Verdict::default();
        // Shared by every rule's functions: one copy of the signals per evaluation.
        let signals: Signals = Arc::new(snapshot.signals.clone());
        for rule in &self.rules {
            if !rule.kinds.is_empty() && !rule.kinds.iter().any(|k| k == &snapshot.kind) {
                continue;
            }
            match rule.matches(&self.env, snapshot, &signals) {
                Ok(true) => {
                    let decision = Decision {
                        rule: rule.name.clone(),
                        action: rule.action,
                        reason: render_reason(&rule.reason, snapshot),
                    };
                    if rule.shadow {
                        verdict.shadow.push(decision);
                    } else {
                        verdict.matched.push(decision);
                    }
                }
                Ok(false) => {}
                Err(error) if rule.shadow => verdict.shadow_errors.push((rule.name.clone(), error)),
                Err(error) => verdict.errors.push((rule.name.clone(), error)),
            }
        }
        verdict
    }
}

type Signals = Arc<BTreeMap<String, SignalStats>>;

fn window_totals(
    signals: &Signals,
    signal: &str,
    window: &str,
) -> Result<SignalTotals, ExecutionError> {
    if !WINDOWS.iter().any(|(name, _)| *name == window) {
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

impl Rule {
    fn matches(
        &self,
        env: &Arc<Env>,
        snapshot: &Snapshot,
        signals: &Signals,
    ) -> Result<bool, String> {
        let mut context = Context::with_env(Arc::clone(env));
        let s = Arc::clone(signals);
        context
            .add_function("count", move |signal: Arc<String>| {
                s.get(signal.as_str()).map_or(0, |t| t.count)
            })
            .map_err(|e| e.to_string())?;
        let s = Arc::clone(signals);
        context
            .add_function("weight", move |signal: Arc<String>| {
                s.get(signal.as_str()).map_or(0.0, |t| t.weight)
            })
            .map_err(|e| e.to_string())?;
        let s = Arc::clone(signals);
        context
            .add_function("actors", move |signal: Arc<String>| {
                s.get(signal.as_str()).and_then(|t| t.actors).unwrap_or(0)
            })
            .map_err(|e| e.to_string())?;
        let s = Arc::clone(signals);
        context
            .add_function("share", move |signal: Arc<String>, other: Arc<String>| {
                let count = |name: &str| s.get(name).map_or(0, |t| t.count) as f64;
                let (a, b) = (count(&signal), count(&other));
                if a + b == 0.0 { 0.0 } else { a / (a + b) }
            })
            .map_err(|e| e.to_string())?;
        let s = Arc::clone(signals);
        context
            .add_function("ratio", move |signal: Arc<String>, other: Arc<String>| {
                let count = |name: &str| s.get(name).map_or(0, |t| t.count) as f64;
                count(&signal) / count(&other).max(1.0)
            })
            .map_err(|e| e.to_string())?;
        let s = Arc::clone(signals);
        context
            .add_function(
                "count_in",
                move |signal: Arc<String>, window: Arc<String>| {
                    window_totals(&s, &signal, &window).map(|t| t.count)
                },
            )
            .map_err(|e| e.to_string())?;
        let s = Arc::clone(signals);
        context
            .add_function(
                "weight_in",
                move |signal: Arc<String>, window: Arc<String>| {
                    window_totals(&s, &signal, &window).map(|t| t.weight)
                },
            )
            .map_err(|e| e.to_string())?;
        context
            .add_variable("kind", snapshot.kind.clone())
            .map_err(|e| e.to_string())?;
        context
            .add_variable("status", snapshot.status.as_str())
            .map_err(|e| e.to_string())?;
        context
            .add_variable("entity", snapshot.entity.as_str().to_owned())
            .map_err(|e| e.to_string())?;
        match self.program.execute(&context) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("expected a boolean, got {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Fills `{entity}`, `{kind}`, `{count.<signal>}`, `{weight.<signal>}` and
/// `{actors.<signal>}` in a reason.
fn render_reason(template: &str, snapshot: &Snapshot) -> String {
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

/// The rule set in force, swapped whole on reload; evaluations hold the set they started with.
pub struct Rules {
    current: RwLock<Arc<RuleSet>>,
    source: Option<PathBuf>,
}

impl Rules {
    pub fn new(set: RuleSet, source: Option<PathBuf>) -> Self {
        Self {
            current: RwLock::new(Arc::new(set)),
            source,
        }
    }

    pub fn current(&self) -> Arc<RuleSet> {
        Arc::clone(&self.current.read().expect("not poisoned"))
    }

    /// Reads the rules file again; an invalid file is refused and the rules in force stay.
    /// Returns the number of rules now in force.
    pub fn reload(&self) -> Result<usize, RulesError> {
        let set = match &self.source {
            Some(path) => RuleSet::from_file(path)?,
            None => RuleSet::default_rules(),
        };
        let count = set.rules().len();
        *self.current.write().expect("not poisoned") = Arc::new(set);
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::EntityId;

    fn post(signals: &[(&str, i64)]) -> Snapshot {
        Snapshot::with_counts(EntityId::parse("post:1").unwrap(), signals.iter().copied())
    }

    #[test]
    fn windows_and_actors_are_read_only_for_rules_that_use_them() {
        let defaults = RuleSet::default_rules();
        assert!(!defaults.uses_windows() && !defaults.uses_actors());
        let windowed = RuleSet::from_toml(
            "[[rule]]\nname = \"surge\"\nkinds = [\"post\"]\nwhen = 'count_in(\"flag\", \"5m\") >= 5'\naction = \"flag\"\nreason = \"surge\"\n",
        )
        .unwrap();
        assert!(windowed.uses_windows());
    }

    #[test]
    fn default_rules_give_the_three_required_outcomes() {
        let rules = RuleSet::default_rules();
        let hidden = rules.evaluate(&post(&[("flag", 10)]));
        assert_eq!(
            hidden.to_apply(Status::Visible, None).unwrap().action,
            Action::Hide
        );
        let flagged = rules.evaluate(&post(&[("flag", 3)]));
        assert_eq!(
            flagged.to_apply(Status::Visible, None).unwrap().action,
            Action::Flag
        );
        let sloan = rules.evaluate(&post(&[("flag", 10), ("upvote", 500)]));
        assert!(sloan.matched.is_empty(), "{sloan:?}");
        assert!(rules.evaluate(&post(&[])).matched.is_empty());
    }

    #[test]
    fn automation_only_escalates() {
        let rules = RuleSet::default_rules();
        let verdict = rules.evaluate(&post(&[("flag", 3)]));
        assert!(verdict.to_apply(Status::Hidden, None).is_none());
        assert!(verdict.to_apply(Status::Flagged, None).is_none());
    }

    #[test]
    fn an_override_caps_what_automation_may_do() {
        let rules = RuleSet::default_rules();
        let verdict = rules.evaluate(&post(&[("flag", 10)]));
        assert!(
            verdict
                .to_apply(Status::Visible, Some(Status::Visible))
                .is_none()
        );
        let capped = verdict.to_apply(Status::Visible, Some(Status::Flagged));
        assert!(
            capped.is_none(),
            "the strongest (hide) is past the cap: no action"
        );
        assert!(
            verdict
                .to_apply(Status::Visible, Some(Status::Suspended))
                .is_some()
        );
    }

    #[test]
    fn reasons_are_rendered_from_the_snapshot() {
        let rules = RuleSet::default_rules();
        let verdict = rules.evaluate(&post(&[("flag", 12), ("upvote", 2)]));
        assert_eq!(
            verdict.strongest().unwrap().reason,
            "12 flags against 2 upvotes"
        );
    }

    #[test]
    fn invalid_rules_are_refused_with_the_rule_name() {
        let bad_syntax = "[[rule]]\nname = \"broken\"\nwhen = 'count(\"flag\") >='\naction = \"hide\"\nreason = \"x\"\n";
        let err = RuleSet::from_toml(bad_syntax).err().unwrap().to_string();
        assert!(err.contains("broken"), "{err}");
        let unknown = "[[rule]]\nname = \"typo\"\nwhen = 'cuont(\"flag\") > 1'\naction = \"hide\"\nreason = \"x\"\n";
        let err = RuleSet::from_toml(unknown).err().unwrap().to_string();
        assert!(err.contains("typo"), "{err}");
        let not_bool = "[[rule]]\nname = \"number\"\nwhen = 'count(\"flag\")'\naction = \"hide\"\nreason = \"x\"\n";
        assert!(
            RuleSet::from_toml(not_bool)
                .err()
                .unwrap()
                .to_string()
                .contains("number")
        );
        let bad_action =
            "[[rule]]\nname = \"a\"\nwhen = 'true'\naction = \"ban\"\nreason = \"x\"\n";
        assert!(RuleSet::from_toml(bad_action).is_err());
        let duplicate =
            "[[rule]]\nname = \"a\"\nwhen = 'true'\naction = \"hide\"\nreason = \"x\"\n".repeat(2);
        assert!(
            RuleSet::from_toml(&duplicate)
                .err()
                .unwrap()
                .to_string()
                .contains("unique")
        );
    }
}

#[cfg(test)]
mod condition_tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::domain::{EntityId, SignalStats, SignalTotals};

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
            },
        );
        snapshot.signals.insert(
            "upvote".into(),
            SignalStats {
                count: 20,
                weight: 20.0,
                actors: Some(20),
                windows: windows(0, 1.0),
            },
        );
        snapshot
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

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::domain::SignalStats;

    fn status() -> impl Strategy<Value = Status> {
        prop_oneof![
            Just(Status::Visible),
            Just(Status::Flagged),
            Just(Status::Hidden),
            Just(Status::Suspended)
        ]
    }

    proptest! {
        /// The same snapshot always gives the same verdict, and an applied decision only ever
        /// raises the status (and never past an override).
        #[test]
        fn evaluation_is_deterministic_and_never_lowers_a_status(
            flags in 0i64..40,
            upvotes in 0i64..2000,
            reports in 0i64..10,
            weight in 1.0f64..5.0,
            current in status(),
            cap in proptest::option::of(status()),
            kind in prop_oneof![Just("post"), Just("comment"), Just("user")],
        ) {
            let rules = RuleSet::default_rules();
            let mut snapshot = Snapshot::empty_for_validation();
            snapshot.kind = kind.to_owned();
            snapshot.status = current;
            for (signal, count) in [("flag", flags), ("upvote", upvotes), ("report", reports)] {
                snapshot.signals.insert(signal.to_owned(), SignalStats {
                    count,
                    weight: count as f64 * weight,
                    actors: Some(count),
                    ..Default::default()
                });
            }
            let first = rules.evaluate(&snapshot);
            prop_assert_eq!(&first, &rules.evaluate(&snapshot));
            if let Some(decision) = first.to_apply(current, cap) {
                prop_assert!(decision.action.status() > current);
                if let Some(cap) = cap {
                    prop_assert!(decision.action.status() <= cap);
                }
            }
        }
    }
}
