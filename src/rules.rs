//! Moderation rules as data: a TOML file of named rules whose conditions are CEL expressions
//! over an entity's snapshot. Evaluation is a pure function: snapshot -> decisions.

use std::{path::Path, sync::Arc};

use cel::{Context, Env, Program};
use serde::{Deserialize, Serialize};

use crate::{
    domain::{Action, Status},
    store::Snapshot,
};

/// The rules shipped with quiesce, used when no rules file is configured.
pub const DEFAULT_RULES: &str = include_str!("../rules/default.toml");

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
}

pub struct Rule {
    pub name: String,
    pub kinds: Vec<String>,
    pub action: Action,
    pub when: String,
    reason: String,
    program: Program,
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
    /// Rules whose condition held, in file order.
    pub matched: Vec<Decision>,
    /// Rules that could not be evaluated on this snapshot, with the error.
    pub errors: Vec<(String, String)>,
}

impl Verdict {
    /// The strongest matched action (the first rule in file order among equals).
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
            let rule = Rule {
                name: spec.name.clone(),
                kinds: spec.kinds,
                action: spec.action,
                when: spec.when,
                reason: spec.reason,
                program,
            };
            // A dry run on an empty snapshot catches unknown names and non-boolean results.
            rule.matches(&env, &Snapshot::empty_for_validation())
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

    /// Runs every rule that applies to the snapshot's kind.
    pub fn evaluate(&self, snapshot: &Snapshot) -> Verdict {
        let mut verdict = Verdict::default();
        for rule in &self.rules {
            if !rule.kinds.is_empty() && !rule.kinds.iter().any(|k| k == &snapshot.kind) {
                continue;
            }
            match rule.matches(&self.env, snapshot) {
                Ok(true) => verdict.matched.push(Decision {
                    rule: rule.name.clone(),
                    action: rule.action,
                    reason: render_reason(&rule.reason, snapshot),
                }),
                Ok(false) => {}
                Err(error) => verdict.errors.push((rule.name.clone(), error)),
            }
        }
        verdict
    }
}

impl Rule {
    fn matches(&self, env: &Arc<Env>, snapshot: &Snapshot) -> Result<bool, String> {
        let totals = Arc::new(snapshot.signals.clone());
        let mut context = Context::with_env(Arc::clone(env));
        let counts = Arc::clone(&totals);
        context
            .add_function("count", move |signal: Arc<String>| {
                counts.get(signal.as_str()).map_or(0, |t| t.count)
            })
            .map_err(|e| e.to_string())?;
        let weights = Arc::clone(&totals);
        context
            .add_function("weight", move |signal: Arc<String>| {
                weights.get(signal.as_str()).map_or(0.0, |t| t.weight)
            })
            .map_err(|e| e.to_string())?;
        let shares = totals;
        context
            .add_function("share", move |signal: Arc<String>, other: Arc<String>| {
                let count = |s: &str| shares.get(s).map_or(0, |t| t.count) as f64;
                let (a, b) = (count(&signal), count(&other));
                if a + b == 0.0 { 0.0 } else { a / (a + b) }
            })
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

/// Fills `{entity}`, `{kind}`, `{count.<signal>}` and `{weight.<signal>}` in a reason.
fn render_reason(template: &str, snapshot: &Snapshot) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        let name = &rest[start + 1..start + len];
        let totals = |s: &str| snapshot.signals.get(s).copied().unwrap_or_default();
        match name.split_once('.') {
            _ if name == "entity" => out.push_str(snapshot.entity.as_str()),
            _ if name == "kind" => out.push_str(&snapshot.kind),
            Some(("count", signal)) => out.push_str(&totals(signal).count.to_string()),
            Some(("weight", signal)) => out.push_str(&totals(signal).weight.to_string()),
            _ => out.push_str(&rest[start..=start + len]),
        }
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{domain::EntityId, store::SignalTotals};

    fn post(signals: &[(&str, i64)]) -> Snapshot {
        let mut snapshot = Snapshot::empty_for_validation();
        snapshot.entity = EntityId::parse("post:1").unwrap();
        snapshot.kind = "post".into();
        for (signal, count) in signals {
            snapshot.signals.insert(
                (*signal).to_owned(),
                SignalTotals {
                    count: *count,
                    weight: *count as f64,
                },
            );
        }
        snapshot
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
