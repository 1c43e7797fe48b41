//! What a backtest reports: per rule and overall, the actions the candidate would have added
//! and removed, the reversals it would have saved, its expected reversal rate with a 95%
//! interval, the entities whose final status would differ, and a sample of the added actions
//! with their snapshots. The JSON of `--json` and `POST /v1/rules/backtest` is this, serialized.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{
    compare::RuleTally,
    replay::{AddedAction, EntityDiff, Tally},
};
use crate::{domain::Status, rules::RuleSet};

/// z for a two-sided 95% interval.
const Z95: f64 = 1.959_963_984_540_054;

/// A share with its Wilson score interval (95%), from `reversed` of `of` actions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Estimate {
    pub rate: f64,
    pub low: f64,
    pub high: f64,
    /// The actions it rests on.
    pub basis: u64,
}

impl Estimate {
    /// `None` when there is nothing to estimate from.
    pub fn wilson(reversed: u64, of: u64) -> Option<Self> {
        if of == 0 {
            return None;
        }
        let n = of as f64;
        let p = reversed as f64 / n;
        let z2 = Z95 * Z95;
        let denominator = 1.0 + z2 / n;
        let centre = (p + z2 / (2.0 * n)) / denominator;
        let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denominator;
        Some(Self {
            rate: p,
            low: (centre - half).max(0.0),
            high: (centre + half).min(1.0),
            basis: of,
        })
    }
}

/// One rule's line of the report, or the overall line (`rule` "(all rules)"). A rule's action
/// is kept when the same rule takes the same action on the same evaluation; overall, when both
/// take the same action there, whichever rule: a hide by another rule is one removed and one
/// added for the two rules, and one kept overall.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RuleReport {
    pub rule: String,
    /// In the candidate: `live`, `shadow` (never acts) or absent (`null`).
    pub candidate_mode: Option<String>,
    /// Actions the rules in force took in the window.
    pub in_force_actions: u64,
    /// Of those, reversed by a moderator within 24h.
    pub in_force_reversed: u64,
    /// Actions the candidate would have taken.
    pub backtest_actions: u64,
    /// Taken by both (same evaluation, same rule, same action).
    pub kept: u64,
    /// Taken by the candidate only.
    pub added: u64,
    /// Taken by the rules in force only.
    pub removed: u64,
    /// Removed actions that moderators had reversed and that the candidate never took on the
    /// entity before the reversal: the reversals the candidate saves.
    pub reversals_saved: u64,
    /// Added actions that repeat a reversed action on the same entity before its reversal
    /// (sooner or later than the rules in force took it): reversals the candidate does not
    /// save, counted as reversed in its expected reversal rate.
    pub reversals_repeated: u64,
    /// Added actions that repeat an action moderators let stand (not reversed within 24h) on
    /// the same entity, sooner or later than the rules in force took it: judged, and not
    /// reversed, in the expected reversal rate.
    pub repeats_let_stand: u64,
    /// Reversed share of the actions in force.
    pub in_force_reversal_rate: Option<f64>,
    /// The candidate's expected reversal rate: the reversed share of the actions of the
    /// candidate that have a moderator's verdict (the kept ones, and the added ones that repeat
    /// an action moderators reversed or let stand), with its 95% interval. It takes the other
    /// added actions to be reversed as often as those.
    pub expected_reversal_rate: Option<Estimate>,
    /// Signals this rule of the candidate reads that quiesce records from the actions of the
    /// rules in force (`auto.hide`, `auto.hide.reversed`, ...). The replay reads them as they
    /// were recorded: they do not follow the candidate's own actions on other entities.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reads_recorded_actions: Vec<String>,
    /// For a canary rule of the candidate (`rollout`): its matches per 1,000 evaluations in the
    /// share of entities where it is live and in the rest, where it is a shadow rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryReport>,
    /// Evaluations on which the rule failed (a live rule failing dead-letters the entity).
    pub errors: u64,
}

impl RuleReport {
    fn from_tally(rule: String, candidate_mode: Option<String>, t: &RuleTally) -> Self {
        Self {
            rule,
            candidate_mode,
            in_force_actions: t.live,
            in_force_reversed: t.live_reversed,
            backtest_actions: t.candidate,
            kept: t.kept,
            added: t.added,
            removed: t.removed,
            reversals_saved: t.removed_reversed,
            reversals_repeated: t.repeated_reversed,
            repeats_let_stand: t.repeated_stood,
            in_force_reversal_rate: (t.live > 0).then(|| t.live_reversed as f64 / t.live as f64),
            expected_reversal_rate: Estimate::wilson(
                t.kept_reversed + t.repeated_reversed,
                t.kept + t.repeated_reversed + t.repeated_stood,
            ),
            reads_recorded_actions: Vec::new(),
            canary: None,
            errors: t.errors,
        }
    }
}

/// A canary rule's two groups of entities, side by side.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct CanaryReport {
    pub rollout: f64,
    pub live_evaluations: u64,
    pub live_matches: u64,
    /// Matches per 1,000 evaluations in the live share; `None` without an evaluation there.
    pub live_per_1000: Option<f64>,
    pub shadow_evaluations: u64,
    pub shadow_matches: u64,
    pub shadow_per_1000: Option<f64>,
}

/// One label: the entities the rules in force gave it in the window, and those the candidate
/// would have (a label is given once per entity).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct LabelReport {
    pub label: String,
    pub in_force: u64,
    pub backtest: u64,
    pub kept: u64,
    pub added: u64,
    pub removed: u64,
}

/// Entities whose final status differs, from one status to another.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Transition {
    pub in_force: Status,
    pub backtest: Status,
    pub entities: u64,
}

/// How many evaluations the window held and how many could be replayed.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Coverage {
    pub evaluations: u64,
    pub replayed: u64,
    /// Recorded before every evaluation kept its snapshot, and without an action: skipped.
    pub skipped_without_snapshot: u64,
    pub entities: u64,
    /// Pages of evaluations read from Postgres.
    pub pages: u64,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Report {
    /// The window: evaluations finished in `[since, until)`.
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    pub coverage: Coverage,
    pub overall: RuleReport,
    pub rules: Vec<RuleReport>,
    /// Per label (`labels` on a rule): entities labelled by the rules in force and by the
    /// candidate.
    pub labels: Vec<LabelReport>,
    /// Entities whose status at the end of the window would differ.
    pub final_status_differs: u64,
    pub final_status_transitions: Vec<Transition>,
    pub final_status_sample: Vec<EntityDiff>,
    /// A uniform sample of the added actions (overall: those that change what was done), with
    /// their snapshots, to judge.
    pub added_sample: Vec<AddedAction>,
    /// What makes the figures less than exact, if anything.
    pub warnings: Vec<String>,
    pub elapsed_ms: u64,
}

impl Report {
    /// The report of `tally`, the candidate's replay; every rule of the candidate and of the
    /// rules in force has a line, whether or not it acted in the window.
    pub(super) fn new(
        candidate: &RuleSet,
        in_force: &RuleSet,
        tally: Tally,
        (since, until): (DateTime<Utc>, DateTime<Utc>),
        pages: u64,
        elapsed_ms: u64,
    ) -> Self {
        let mode = |name: &str| {
            candidate
                .rules()
                .iter()
                .find(|r| r.name == name)
                .map(|r| if r.shadow { "shadow" } else { "live" }.to_owned())
        };
        let mut by_rule = tally.by_rule.clone();
        for rule in candidate.rules().iter().chain(in_force.rules()) {
            by_rule.entry(rule.name.clone()).or_default();
        }
        let mut all = tally.overall.clone();
        all.errors = by_rule.values().map(|t| t.errors).sum();
        let mut warnings = Vec::new();
        if tally.without_snapshot > 0 {
            warnings.push(format!(
                "{} evaluations kept no snapshot (recorded before every evaluation kept one) and were skipped: \
                 the candidate is taken to do nothing on them, as the rules in force did",
                tally.without_snapshot
            ));
        }
        if candidate.uses_windows() && tally.without_windows > 0 {
            warnings.push(format!(
                "the candidate counts trailing windows or decayed counts, but {} snapshots were read without \
                 some of them (the rules in force did not use them): there its count_in, weight_in and decayed \
                 are 0",
                tally.without_windows
            ));
        }
        if candidate.uses_actors() && tally.without_actors > 0 {
            warnings.push(format!(
                "the candidate counts distinct actors, but {} snapshots were read without them (the rules in \
                 force used none): there its actors() is 0",
                tally.without_actors
            ));
        }
        let reads = candidate.attribute_reads();
        if reads.events && tally.without_attributes > 0 {
            warnings.push(format!(
                "the candidate reads event attributes, but {} snapshots were read without them (the rules in \
                 force read none): there its count with a filter, distinct, max and latest are 0",
                tally.without_attributes
            ));
        }
        if reads.context && tally.without_context > 0 {
            warnings.push(format!(
                "the candidate reads context, but {} snapshots were read without it (the rules in force read \
                 none): there attr() gives its default and author.status is empty",
                tally.without_context
            ));
        }
        let changed = all.added + all.removed;
        let recorded: Vec<(&str, Vec<String>)> = candidate
            .rules()
            .iter()
            .map(|rule| (rule.name.as_str(), recorded_actions_read(&rule.when)))
            .filter(|(_, signals)| !signals.is_empty())
            .collect();
        if changed > 0 {
            for (rule, signals) in &recorded {
                warnings.push(format!(
                    "{rule} reads {}, which quiesce recorded from the actions of the rules in force: the replay \
                     reads them as recorded, so this rule's figures do not follow the candidate's {} added and \
                     {} removed actions",
                    signals.join(", "),
                    all.added,
                    all.removed
                ));
            }
        }
        if all.errors > 0 {
            warnings.push(format!(
                "candidate rules failed {} times (see errors per rule); live, each failure would dead-letter the entity",
                all.errors
            ));
        }
        let mut added_sample = tally.added_sample;
        added_sample.sort_by(|a, b| (&a.entity, a.evaluation).cmp(&(&b.entity, b.evaluation)));
        Self {
            since,
            until,
            coverage: Coverage {
                evaluations: tally.evaluations,
                replayed: tally.replayed,
                skipped_without_snapshot: tally.without_snapshot,
                entities: tally.entities,
                pages,
            },
            overall: RuleReport::from_tally("(all rules)".into(), None, &all),
            rules: by_rule
                .iter()
                .map(|(name, t)| {
                    let mut line = RuleReport::from_tally(name.clone(), mode(name), t);
                    if let Some((_, signals)) = recorded.iter().find(|(rule, _)| rule == name) {
                        line.reads_recorded_actions = signals.clone();
                    }
                    let rollout = candidate
                        .rules()
                        .iter()
                        .find(|r| &r.name == name)
                        .and_then(|r| r.rollout);
                    if let Some(rollout) = rollout {
                        let t = tally.canaries.get(name).cloned().unwrap_or_default();
                        let per_1000 = |matches: u64, of: u64| {
                            (of > 0).then(|| 1000.0 * matches as f64 / of as f64)
                        };
                        line.canary = Some(CanaryReport {
                            rollout,
                            live_evaluations: t.live_evaluations,
                            live_matches: t.live_matches,
                            live_per_1000: per_1000(t.live_matches, t.live_evaluations),
                            shadow_evaluations: t.shadow_evaluations,
                            shadow_matches: t.shadow_matches,
                            shadow_per_1000: per_1000(t.shadow_matches, t.shadow_evaluations),
                        });
                    }
                    line
                })
                .collect(),
            labels: tally
                .labels
                .iter()
                .map(|(label, t)| LabelReport {
                    label: label.clone(),
                    in_force: t.in_force,
                    backtest: t.candidate,
                    kept: t.kept,
                    added: t.added,
                    removed: t.removed,
                })
                .collect(),
            final_status_differs: tally.final_differs,
            final_status_transitions: tally
                .transitions
                .iter()
                .map(|(&(in_force, backtest), &entities)| Transition {
                    in_force,
                    backtest,
                    entities,
                })
                .collect(),
            final_status_sample: {
                let mut sample = tally.diff_sample;
                sample.sort_by(|a, b| a.entity.cmp(&b.entity));
                sample
            },
            added_sample,
            warnings,
            elapsed_ms,
        }
    }
}

/// The signals recorded from actions (`auto.<action>` and `auto.<action>.reversed`, as
/// `store/evaluations.rs` and `store/moderation.rs` record them) that a condition names, in the
/// order it names them.
fn recorded_actions_read(when: &str) -> Vec<String> {
    let mut signals: Vec<String> = Vec::new();
    for quote in ['"', '\''] {
        for literal in when.split(quote).skip(1).step_by(2) {
            if literal.starts_with("auto.") && !signals.iter().any(|s| s == literal) {
                signals.push(literal.to_owned());
            }
        }
    }
    signals
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signals_recorded_from_actions_are_found_in_a_condition() {
        assert_eq!(
            recorded_actions_read(
                r#"count("auto.hide") - count('auto.hide.reversed') >= 3 && count("flag") > 1"#
            ),
            ["auto.hide", "auto.hide.reversed"]
        );
        assert!(recorded_actions_read(r#"count("flag") >= 3"#).is_empty());
    }

    #[test]
    fn every_rule_in_force_has_a_line_even_one_the_candidate_drops() {
        let in_force = RuleSet::default_rules();
        let candidate = RuleSet::from_toml(&crate::rules::DEFAULT_RULES.replace(
            "name = \"remove_reported\"",
            "name = \"remove_reported_v2\"",
        ))
        .unwrap();
        let now = Utc::now();
        let report = Report::new(&candidate, &in_force, Tally::new(5), (now, now), 1, 0);
        let line = |name: &str| report.rules.iter().find(|r| r.rule == name);
        assert_eq!(line("remove_reported").unwrap().candidate_mode, None);
        assert_eq!(
            line("remove_reported_v2")
                .unwrap()
                .candidate_mode
                .as_deref(),
            Some("live")
        );
        assert_eq!(
            line("suspend_repeat_offender")
                .unwrap()
                .reads_recorded_actions,
            ["auto.hide", "auto.hide.reversed"]
        );
        assert!(
            report.warnings.is_empty(),
            "nothing changed: {:?}",
            report.warnings
        );
    }

    #[test]
    fn the_wilson_interval_is_the_textbook_one() {
        // 10 of 100: the interval is about 5.5% to 17.4%.
        let e = Estimate::wilson(10, 100).unwrap();
        assert!((e.rate - 0.1).abs() < 1e-12);
        assert!((e.low - 0.0552).abs() < 1e-3, "{e:?}");
        assert!((e.high - 0.1744).abs() < 1e-3, "{e:?}");
        let none = Estimate::wilson(0, 20).unwrap();
        assert_eq!(none.low, 0.0);
        assert!(none.high > 0.1 && none.high < 0.2, "{none:?}");
        assert!(Estimate::wilson(0, 0).is_none());
    }
}
