//! How one evaluation's actions compare (the candidate's beside those of the rules in force),
//! how an entity's reversals settle once its whole replay is known (saved, or repeated by the
//! candidate; and which added actions repeat an action moderators let stand), and how its
//! labels compare.

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

/// An action of the rules in force the candidate did not take there: one a moderator reversed
/// within 24h (`reversed_at`), or one moderators let stand.
pub(super) struct Removed {
    pub(super) rule: String,
    pub(super) action: Action,
    pub(super) at: DateTime<Utc>,
    pub(super) reversed_at: Option<DateTime<Utc>>,
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
    /// Taken by the candidate only, repeating an action of the rules in force that moderators
    /// let stand (not reversed within 24h): judged as much, so it counts as not reversed in the
    /// expected reversal rate.
    pub repeated_stood: u64,
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

/// Settles an entity's removed and added actions, overall and by rule. An added action repeats
/// the action of the rules in force that moderators judged in its span of the entity's time
/// (the same action, sooner or later than the rules in force took it): a reversal cuts the
/// time of that action into spans. A reversed removed action is a reversal saved unless the
/// candidate takes that action after the previous reversal of it and before this one: then
/// those actions of the candidate count as reversed instead. Added actions left that fall in
/// the span of a removed action moderators let stand count as repeats let stand. Each added
/// action counts once.
pub(super) fn settle_reversals(
    overall: &mut RuleTally,
    by_rule: &mut BTreeMap<String, RuleTally>,
    removed: &[Removed],
    added: &[Added],
) {
    for overall_view in [true, false] {
        let removed: Vec<&Removed> = removed
            .iter()
            .filter(|r| if overall_view { r.overall } else { r.by_rule })
            .collect();
        let added: Vec<&Added> = added
            .iter()
            .filter(|a| if overall_view { a.overall } else { a.by_rule })
            .collect();
        let (saved, repeats) = settle(&removed, &added);
        for (r, _) in removed.iter().zip(saved).filter(|(_, saved)| *saved) {
            view_tally(overall, by_rule, overall_view, &r.rule).removed_reversed += 1;
        }
        for (a, repeat) in added.iter().zip(repeats) {
            let tally = view_tally(overall, by_rule, overall_view, &a.rule);
            match repeat {
                Some(Repeat::Reversed) => tally.repeated_reversed += 1,
                Some(Repeat::Stood) => tally.repeated_stood += 1,
                None => {}
            }
        }
    }
}

/// The tally a view counts in: overall, or rule `rule`'s.
fn view_tally<'a>(
    overall: &'a mut RuleTally,
    by_rule: &'a mut BTreeMap<String, RuleTally>,
    overall_view: bool,
    rule: &str,
) -> &'a mut RuleTally {
    if overall_view {
        overall
    } else {
        rule_entry(by_rule, rule)
    }
}

/// What an added action repeats: an action moderators reversed, or one they let stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Repeat {
    Reversed,
    Stood,
}

/// One view's settlement: whether each removed action is a reversal saved, and what each
/// added action repeats, if anything.
fn settle(removed: &[&Removed], added: &[&Added]) -> (Vec<bool>, Vec<Option<Repeat>>) {
    let mut saved = vec![false; removed.len()];
    let mut repeats: Vec<Option<Repeat>> = vec![None; added.len()];
    let mut claim = |action: Action,
                     from: Option<DateTime<Utc>>,
                     until: Option<DateTime<Utc>>,
                     repeat: Repeat| {
        let mut claimed = false;
        for (a, slot) in added.iter().zip(repeats.iter_mut()) {
            if slot.is_none()
                && a.action == action
                && from.is_none_or(|from| a.at >= from)
                && until.is_none_or(|until| a.at < until)
            {
                *slot = Some(repeat);
                claimed = true;
            }
        }
        claimed
    };
    let mut reversed: Vec<(usize, DateTime<Utc>)> = removed
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.reversed_at.map(|at| (i, at)))
        .collect();
    reversed.sort_by_key(|&(_, at)| at);
    let mut previous: BTreeMap<Action, DateTime<Utc>> = BTreeMap::new();
    for &(i, reversed_at) in &reversed {
        let action = removed[i].action;
        let from = previous.insert(action, reversed_at);
        saved[i] = !claim(action, from, Some(reversed_at), Repeat::Reversed);
    }
    let mut stood: Vec<&&Removed> = removed.iter().filter(|r| r.reversed_at.is_none()).collect();
    stood.sort_by_key(|r| r.at);
    for r in stood {
        // The span the action fell in: from the last reversal of that action before it to
        // the next one.
        let reversals: Vec<DateTime<Utc>> = reversed
            .iter()
            .filter(|&&(i, _)| removed[i].action == r.action)
            .map(|&(_, at)| at)
            .collect();
        let from = reversals.iter().copied().rfind(|&at| at <= r.at);
        let until = reversals.iter().copied().find(|&at| at > r.at);
        claim(r.action, from, until, Repeat::Stood);
    }
    (saved, repeats)
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
