//! Moderation rules as data: a TOML file of named rules whose conditions are CEL expressions
//! over an entity's snapshot. Evaluation is a pure function: snapshot -> verdict. A [`Rules`]
//! handle holds the rule set in force and swaps it on reload. `check` refuses a bad rule at
//! load time, `condition` runs one on a snapshot, `verdict` is what the rules concluded.

mod attributes;
mod check;
mod condition;
pub(crate) mod decay;
mod declared;
mod effects;
mod file;
mod in_force;
mod problem;
mod rollout;
mod statement;
mod statement_values;
mod verdict;

use std::sync::Arc;

use cel::{Env, Program};

pub use self::{
    check::UnknownName,
    condition::{ConditionError, ExemptionError},
    decay::HalfLifeError,
    declared::AttributeReadError,
    in_force::Rules,
    problem::{Clause, LabelError, RuleProblem, RulesError},
    statement::CategoryMapped,
    statement_values::StatementError,
    verdict::{Decision, LabelDecision, Verdict},
};
use self::{
    check::check_names,
    condition::render_reason,
    file::{RuleSpec, RulesFile},
    statement::{RuleStatement, StatementFile, StatementSpec},
};
use crate::domain::{Action, AttributeReads, Declarations, Snapshot, Windows};

/// The rules shipped with quiesce, used when no rules file is configured.
pub const DEFAULT_RULES: &str = include_str!("../../rules/default.toml");

#[derive(Debug)]
pub struct Rule {
    pub name: String,
    pub kinds: Vec<String>,
    /// The status action; `None` for a rule that gives labels only.
    pub action: Option<Action>,
    pub labels: Vec<String>,
    /// The exemption's source and program (`unless`).
    unless: Option<(String, Program)>,
    pub when: String,
    pub shadow: bool,
    /// A timed action's length (`duration`); `None`: until something changes it.
    pub duration: Option<std::time::Duration>,
    duration_text: Option<String>,
    /// A canary's share of entities (`rollout`); `None`: live for all (or shadow for all).
    pub rollout: Option<f64>,
    /// Whether the guard may turn it to shadow (`guard`, default true).
    pub guard: bool,
    reason: String,
    program: Program,
    statement: RuleStatement,
    statement_spec: Option<StatementSpec>,
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
    declarations: Declarations,
    /// What the rules read of attributes, so the snapshot reads only that.
    reads: AttributeReads,
    /// The trailing figures the rules read (`decay.rs`), over all kinds and by kind.
    windows: decay::ReadsByKind,
    /// The rules file's text it was read from (`None`: built from another set's rules).
    source: Option<String>,
    /// The stored version it is (`None`: a file or a candidate, not a published version).
    version: Option<i64>,
    /// The file's `[statement]` table, as written (`None`: none).
    statement: Option<StatementFile>,
    /// The same with quiesce's defaults where it has none.
    statements: StatementFile,
}

impl RuleSet {
    /// This set as the stored version `version`.
    pub fn versioned(mut self, version: i64) -> Self {
        self.version = Some(version);
        self
    }

    /// The stored version this set is, if it is one: what an evaluation records.
    pub fn version(&self) -> Option<i64> {
        self.version
    }

    fn from_specs(
        specs: Vec<RuleSpec>,
        declarations: Declarations,
        statement: Option<StatementFile>,
    ) -> Result<Self, RulesError> {
        declarations.check().map_err(RulesError::Declarations)?;
        let statements = statement.clone().unwrap_or_default();
        statements.check().map_err(RulesError::Statement)?;
        statements.resolve(None).map_err(RulesError::Statement)?;
        let mut attribute_reads = AttributeReads::default();
        let env = Arc::new(Env::stdlib());
        let mut names = std::collections::HashSet::new();
        let mut rules = Vec::with_capacity(specs.len());
        let mut window_reads = Vec::with_capacity(specs.len());
        for spec in specs {
            let fail = |problem: RuleProblem| RulesError::Rule {
                rule: spec.name.clone(),
                problem: Box::new(problem),
            };
            if spec.name.is_empty() || !names.insert(spec.name.clone()) {
                return Err(fail(RuleProblem::Name));
            }
            let program = env
                .compile(&spec.when)
                .map_err(|e| fail(RuleProblem::Unparsed(Clause::When, e)))?;
            check_names(&spec.when, &program)
                .map_err(|e| fail(RuleProblem::UnknownName(Clause::When, e)))?;
            let read = declared::check(&program, &declarations)
                .map_err(|e| fail(RuleProblem::AttributeRead(Clause::When, e)))?;
            attribute_reads.events |= read.events;
            attribute_reads.context |= read.context;
            attribute_reads.windows |= read.windows;
            let windows_read = decay::reads(&spec.when)
                .map_err(|e| fail(RuleProblem::HalfLife(Clause::When, e)))?;
            window_reads.push((spec.kinds.clone(), windows_read));
            let duration = spec
                .duration
                .as_deref()
                .map(crate::domain::parse_duration)
                .transpose()
                .map_err(|e| fail(RuleProblem::Duration(e)))?;
            if spec.action.is_none() && spec.labels.is_empty() {
                return Err(fail(RuleProblem::NoEffect));
            }
            effects::check_labels(&spec.labels).map_err(|e| fail(RuleProblem::Labels(e)))?;
            let unless = spec
                .unless
                .as_ref()
                .map(|source| {
                    effects::compile_unless(&env, source).map(|program| (source.clone(), program))
                })
                .transpose()
                .map_err(fail)?;
            if let Some((source, program)) = &unless {
                // An exemption reads what it names too (an author's attribute, a window).
                let read = declared::check(program, &declarations)
                    .map_err(|e| fail(RuleProblem::AttributeRead(Clause::Unless, e)))?;
                attribute_reads.events |= read.events;
                attribute_reads.context |= read.context;
                attribute_reads.windows |= read.windows;
                let windows_read = decay::reads(source)
                    .map_err(|e| fail(RuleProblem::HalfLife(Clause::Unless, e)))?;
                window_reads.push((spec.kinds.clone(), windows_read));
            }
            if let Some(share) = spec.rollout
                && !(share > 0.0 && share <= 1.0)
            {
                return Err(fail(RuleProblem::Rollout));
            }
            let rule_statement = statements
                .resolve(spec.statement.as_ref())
                .map_err(|e| fail(RuleProblem::Statement(e)))?;
            let rule = Rule {
                duration,
                duration_text: spec.duration,
                rollout: spec.rollout,
                guard: spec.guard,
                name: spec.name.clone(),
                kinds: spec.kinds,
                action: spec.action,
                labels: spec.labels,
                unless,
                when: spec.when,
                shadow: spec.shadow,
                reason: spec.reason,
                program,
                statement: rule_statement,
                statement_spec: spec.statement,
            };
            // A dry run on an empty snapshot catches unknown names and non-boolean results.
            let empty = Snapshot::empty_for_validation();
            let context =
                condition::context(&env, &empty).map_err(|e| fail(RuleProblem::Context(e)))?;
            rule.matches(&context)
                .map_err(|e| fail(RuleProblem::WhenFails(e)))?;
            rule.exempted(&context)
                .map_err(|e| fail(RuleProblem::ExemptionFails(e)))?;
            rules.push(rule);
        }
        Ok(Self {
            rules,
            env,
            declarations,
            reads: attribute_reads,
            windows: decay::ReadsByKind::new(window_reads),
            source: None,
            version: None,
            statement,
            statements,
        })
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The same rules with the shadow rule `name` turned live: what promoting it would do.
    /// `None` if there is no shadow rule of that name.
    pub fn promoting(&self, name: &str) -> Option<Self> {
        let mut specs = self.specs();
        let spec = specs.iter_mut().find(|s| s.name == name && s.shadow)?;
        spec.shadow = false;
        Some(
            Self::from_specs(specs, self.declarations.clone(), self.statement.clone())
                .expect("rules that compiled once compile again"),
        )
    }

    /// The same rules with the live rule `name` turned to shadow, as a rules file (without
    /// comments): what the guard publishes when it cannot edit the file's own text. `None` if
    /// there is no live rule of that name.
    pub fn demoting(&self, name: &str) -> Option<String> {
        let mut specs = self.specs();
        let spec = specs.iter_mut().find(|s| s.name == name && !s.shadow)?;
        spec.shadow = true;
        Some(
            toml::to_string(&RulesFile {
                rules: specs,
                attributes: self.declarations.clone(),
                statement: self.statement.clone(),
            })
            .expect("a rule set serializes"),
        )
    }

    /// The same rules with the condition of rule `name` replaced by `when` (checked as a rule
    /// file's is): what changing it would do.
    pub fn with_condition(&self, name: &str, when: &str) -> Result<Self, RulesError> {
        let mut specs = self.specs();
        let spec = specs
            .iter_mut()
            .find(|s| s.name == name)
            .ok_or_else(|| RulesError::Rule {
                rule: name.to_owned(),
                problem: Box::new(RuleProblem::NoSuchRule),
            })?;
        spec.when = when.to_owned();
        Self::from_specs(specs, self.declarations.clone(), self.statement.clone())
    }

    /// Whether any rule reads distinct actors (`uses_actors_for`: the rules of one kind).
    pub fn uses_actors(&self) -> bool {
        self.rules.iter().any(Rule::reads_actors)
    }

    /// The attributes the rules may read: what ingest and the context endpoint accept.
    pub fn declarations(&self) -> &Declarations {
        &self.declarations
    }

    /// Which attribute figures the rules read (aggregates of event attributes; context).
    pub fn attribute_reads(&self) -> AttributeReads {
        self.reads
    }

    /// Whether any rule reads a trailing window (`count_in`, `weight_in`) or a decayed count.
    pub fn uses_windows(&self) -> bool {
        self.windows.all() != &Windows::NONE
    }

    /// The trailing figures (minute windows, day windows, decayed counts' half-lives) that the
    /// rules applying to entities of this kind read: what their snapshot reads.
    pub fn windows_for(&self, kind: &str) -> &Windows {
        self.windows.of(kind)
    }

    /// Runs every rule that applies to the snapshot's kind.
    pub fn evaluate(&self, snapshot: &Snapshot) -> Verdict {
        let mut verdict = Verdict {
            rules_version: self.version,
            ..Verdict::default()
        };
        // One context for every rule; should it fail to build, every rule reports why.
        let context = condition::context(&self.env, snapshot);
        for rule in &self.rules {
            if !rule.applies_to(&snapshot.kind) {
                continue;
            }
            // A condition that holds is checked against the rule's exemption, which the verdict
            // records when it holds too.
            let context = match &context {
                Ok(context) => context,
                Err(error) if rule.shadow => {
                    verdict
                        .shadow_errors
                        .push((rule.name.clone(), error.to_string()));
                    continue;
                }
                Err(error) => {
                    verdict.errors.push((rule.name.clone(), error.to_string()));
                    continue;
                }
            };
            // The verdict records an error as its message (it is stored with the evaluation).
            let matched = match rule.matches(context) {
                Ok(true) => match rule.exempted(context) {
                    Ok(true) => {
                        if !rule.shadow {
                            verdict.exempted.push(rule.name.clone());
                        }
                        Ok(false)
                    }
                    Ok(false) => Ok(true),
                    Err(error) => Err(error.to_string()),
                },
                Ok(false) => Ok(false),
                Err(error) => Err(error.to_string()),
            };
            // A canary rule is live only for its share of entities, a shadow rule elsewhere.
            let shadow = rule.shadow || !rule.live_for(&snapshot.entity);
            match matched {
                Ok(true) => {
                    let reason = render_reason(&rule.reason, snapshot);
                    if !shadow {
                        verdict
                            .labels
                            .extend(rule.labels.iter().map(|label| LabelDecision {
                                rule: rule.name.clone(),
                                label: label.clone(),
                                reason: reason.clone(),
                            }));
                    }
                    if let Some(action) = rule.action {
                        let decision = Decision {
                            rule: rule.name.clone(),
                            action,
                            reason,
                            duration_secs: rule.duration.map(|d| d.as_secs()),
                        };
                        if shadow {
                            verdict.shadow.push(decision);
                        } else {
                            verdict.matched.push(decision);
                        }
                    }
                }
                Ok(false) => {}
                Err(error) if shadow => verdict.shadow_errors.push((rule.name.clone(), error)),
                Err(error) => verdict.errors.push((rule.name.clone(), error)),
            }
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::domain::{EntityId, Status};

    fn post(signals: &[(&str, i64)]) -> Snapshot {
        Snapshot::with_counts(EntityId::parse("post:1").unwrap(), signals.iter().copied())
    }

    #[test]
    fn windows_and_actors_are_read_only_for_rules_that_use_them() {
        let defaults = RuleSet::default_rules();
        assert!(!defaults.uses_actors());
        // The repeat-offender rule's decayed strikes are read for users only.
        assert_eq!(defaults.windows_for("post"), &Windows::NONE);
        assert_eq!(
            defaults.windows_for("user"),
            &Windows {
                half_lives: vec!["30d".into()],
                ..Windows::NONE
            }
        );
        let windowed = RuleSet::from_toml(
            "[[rule]]\nname = \"surge\"\nkinds = [\"post\"]\nwhen = 'count_in(\"flag\", \"5m\") >= 5'\naction = \"flag\"\nreason = \"surge\"\n",
        )
        .unwrap();
        assert!(windowed.uses_windows());
    }

    #[test]
    fn every_example_rules_file_loads() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/rules/examples");
        let mut loaded = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            RuleSet::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            loaded += 1;
        }
        assert!(loaded >= 1, "no example in {dir}");
    }

    #[test]
    fn a_missing_rules_file_names_its_cause_once() {
        let error = RuleSet::from_file(Path::new("rules/no-such-file.toml")).unwrap_err();
        // As the CLI prints an error: with its whole cause chain.
        let chain = format!("{:#}", anyhow::Error::from(error));
        assert_eq!(chain.matches("os error 2").count(), 1, "{chain}");
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
    fn a_rule_set_round_trips_through_toml_and_a_shadow_rule_can_be_promoted() {
        let text = format!(
            "{DEFAULT_RULES}\n[[rule]]\nname = \"trial\"\nwhen = 'count(\"flag\") >= 2'\naction = \"flag\"\nreason = \"{{count.flag}} flags\"\nshadow = true\n"
        );
        let rules = RuleSet::from_toml(&text).unwrap();
        let again = RuleSet::from_toml(&rules.to_toml()).unwrap();
        assert_eq!(again.to_toml(), rules.to_toml());
        let snapshot = post(&[("flag", 2)]);
        assert!(rules.evaluate(&snapshot).matched.is_empty());
        let promoted = rules.promoting("trial").unwrap();
        assert_eq!(promoted.evaluate(&snapshot).matched[0].rule, "trial");
        assert!(
            rules.promoting("hide_flag_pile_on").is_none(),
            "a live rule"
        );
        assert!(rules.promoting("missing").is_none());
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
mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::domain::{SignalStats, Status};

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
