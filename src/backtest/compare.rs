//! How one evaluation's actions compare (the candidate's beside those of the rules in force),
//! how an entity's reversals settle once its whole replay is known (saved, or repeated by the
//! candidate), and how its labels compare.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use crate::{
    domain::{Action, Snapshot},
    rules::{RuleSet, Verdict},
    store::AppliedAction,
};

/// Which side's action one evaluation counted as removed or added, overall and by rule.
#[derive(Debug, Default)]
pub(super) struct Compared {
    pub(super) removed_overall: bool,
    pub(super) removed_by_rule: bool,
    pub(super) added_overall: bool,
    pub(super) added_by_rule: bool,
}

/// An action of the rules in force the candidate did not take there, which a moderator
/// reversed.
pub(super) struct Removed {
    pub(super) rule: String,
    pub(super) action: Action,
    pub(super) reversed_at: DateTime<Utc>,
    pub(super) overall: bool,
    pub(super) by_rule: bool,
}

/// An action the candidate took where the rules in force did not.
pub(super) struct Added {
    pub(super) rule: String,
    pub(super) action: Action,
    pub(super) at: DateTime<Utc>,
    pub(super) overall: bool,
    pub(super) by_rule: bool,
    /// It repeats a reversed action before that action's reversal.
    pub(super) repeats: bool,
}

/// Counts of one rule (or of all of them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleTally {
    /// Actions the rules in force took, and how many of them moderators reversed within 24h.
    pub live: u64,
    pub live_reversed: u64,
    /// Actions the candidate would have taken.
    pub candidate: u64,
    /// Taken by both: the same rule, the same action, on the same evaluation.
    pub kept: u64,
    pub kept_reversed: u64,
    /// Taken by the candidate only.
    pub added: u64,
    /// Taken by the rules in force only; of those, the ones moderators reversed that the
    /// candidate never took on the entity before the reversal: the reversals it saves.
    pub removed: u64,
    pub removed_reversed: u64,
    /// Taken by the candidate only, repeating an action of the rules in force (the same action
    /// on the same entity, sooner or later) before a moderator reversed that one: a reversal
    /// the candidate does not save, so it counts as reversed in its expected reversal rate.
    pub repeated_reversed: u64,
    /// Evaluations on which the candidate's rule could not be evaluated.
    pub errors: u64,
}

/// Entities given one label, by the rules in force and by the candidate (a label is given
/// once per entity).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelTally {
    pub in_force: u64,
    pub candidate: u64,
    pub kept: u64,
    pub added: u64,
    pub removed: u64,
}

/// The tally of rule `name`, made empty the first time.
pub(super) fn rule_entry<'a>(
    by_rule: &'a mut BTreeMap<String, RuleTally>,
    name: &str,
) -> &'a mut RuleTally {
    if !by_rule.contains_key(name) {
        by_rule.insert(name.to_owned(), RuleTally::default());
    }
    by_rule.get_mut(name).expect("inserted")
}

/// Counts one evaluation's actions on both sides; a removed action's reversal is counted
/// (as saved or not) once the entity's whole replay is known (`settle_reversals`).
pub(super) fn compare(
    overall: &mut RuleTally,
    by_rule: &mut BTreeMap<String, RuleTally>,
    live: Option<&AppliedAction>,
    candidate: Option<(&str, Action)>,
) -> Compared {
    let mut compared = Compared::default();
    match (live, candidate) {
        (Some(l), Some((_, action))) if l.action == action => {
            overall.live += 1;
            overall.candidate += 1;
            overall.kept += 1;
            if l.reversed_within_24h {
                overall.live_reversed += 1;
                overall.kept_reversed += 1;
            }
        }
        (live, candidate) => {
            if let Some(l) = live {
                overall.live += 1;
                overall.removed += 1;
                compared.removed_overall = true;
                if l.reversed_within_24h {
                    overall.live_reversed += 1;
                }
            }
            if candidate.is_some() {
                overall.candidate += 1;
                overall.added += 1;
                compared.added_overall = true;
            }
        }
    }
    match (live, candidate) {
        (Some(l), Some((rule, action))) if l.rule == rule && l.action == action => {
            let tally = rule_entry(by_rule, rule);
            tally.live += 1;
            tally.candidate += 1;
            tally.kept += 1;
            if l.reversed_within_24h {
                tally.live_reversed += 1;
                tally.kept_reversed += 1;
            }
        }
        (live, candidate) => {
            if let Some(l) = live {
                let tally = rule_entry(by_rule, &l.rule);
                tally.live += 1;
                tally.removed += 1;
                compared.removed_by_rule = true;
                if l.reversed_within_24h {
                    tally.live_reversed += 1;
                }
            }
            if let Some((rule, _)) = candidate {
                let tally = rule_entry(by_rule, rule);
                tally.candidate += 1;
                tally.added += 1;
                compared.added_by_rule = true;
            }
        }
    }
    compared
}

/// The labels the rules in force gave an entity beside those the candidate would have.
pub(super) fn compare_labels(
    labels: &mut BTreeMap<String, LabelTally>,
    in_force: &[String],
    candidate: &BTreeSet<String>,
) {
    for label in in_force {
        let tally = labels.entry(label.clone()).or_default();
        tally.in_force += 1;
        if candidate.contains(label) {
            tally.kept += 1;
        } else {
            tally.removed += 1;
        }
    }
    for label in candidate {
        let tally = labels.entry(label.clone()).or_default();
        tally.candidate += 1;
        if !in_force.contains(label) {
            tally.added += 1;
        }
    }
}

/// Each reversed action the candidate removed is a reversal saved, unless the candidate
/// took that action on the entity after the previous reversal of it and before this one:
/// then those actions of the candidate count as reversed instead.
pub(super) fn settle_reversals(
    overall: &mut RuleTally,
    by_rule: &mut BTreeMap<String, RuleTally>,
    mut removed: Vec<Removed>,
    added: &mut [Added],
) {
    removed.sort_by_key(|r| r.reversed_at);
    let mut previous: BTreeMap<Action, DateTime<Utc>> = BTreeMap::new();
    for r in removed {
        let from = previous.insert(r.action, r.reversed_at);
        let mut repeated = false;
        for a in added.iter_mut().filter(|a| {
            !a.repeats
                && a.action == r.action
                && a.at < r.reversed_at
                && from.is_none_or(|from| a.at >= from)
        }) {
            a.repeats = true;
            repeated = true;
            if a.overall {
                overall.repeated_reversed += 1;
            }
            if a.by_rule {
                rule_entry(by_rule, &a.rule).repeated_reversed += 1;
            }
        }
        if repeated {
            continue;
        }
        if r.overall {
            overall.removed_reversed += 1;
        }
        if r.by_rule {
            rule_entry(by_rule, &r.rule).removed_reversed += 1;
        }
    }
}

/// A canary rule's (`rollout`) evaluations and matches, in its live share of entities and in
/// the rest, where it runs as a shadow rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CanaryTally {
    pub live_evaluations: u64,
    pub live_matches: u64,
    pub shadow_evaluations: u64,
    pub shadow_matches: u64,
}

/// Counts, for each canary rule of `candidate` that applies to the snapshot's kind, the
/// evaluation and whether the rule matched, in the group the entity falls in.
pub(super) fn tally_canaries(
    canaries: &mut BTreeMap<String, CanaryTally>,
    candidate: &RuleSet,
    snapshot: &Snapshot,
    verdict: &Verdict,
) {
    for rule in candidate.rules() {
        if rule.rollout.is_none() || rule.shadow || !rule.applies_to(&snapshot.kind) {
            continue;
        }
        let matched = verdict
            .matched
            .iter()
            .chain(&verdict.shadow)
            .any(|d| d.rule == rule.name);
        let tally = canaries.entry(rule.name.clone()).or_default();
        if rule.live_for(&snapshot.entity) {
            tally.live_evaluations += 1;
            tally.live_matches += u64::from(matched);
        } else {
            tally.shadow_evaluations += 1;
            tally.shadow_matches += u64::from(matched);
        }
    }
}
