//! How one evaluation's actions compare (the candidate's beside those of the rules in force),
//! how an entity's reversals settle once its whole replay is known (saved, or repeated by the
//! candidate), and how its labels compare.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::replay::Tally;
use crate::{domain::Action, store::AppliedAction};

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

impl Tally {
    /// Counts one evaluation's actions on both sides; a removed action's reversal is counted
    /// (as saved or not) once the entity's whole replay is known (`settle_reversals`).
    pub(super) fn compare(
        &mut self,
        live: Option<&AppliedAction>,
        candidate: Option<(&str, Action)>,
    ) -> Compared {
        let mut compared = Compared::default();
        let overall = &mut self.overall;
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
                let tally = self.rule(rule);
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
                    let tally = self.rule(&l.rule);
                    tally.live += 1;
                    tally.removed += 1;
                    compared.removed_by_rule = true;
                    if l.reversed_within_24h {
                        tally.live_reversed += 1;
                    }
                }
                if let Some((rule, _)) = candidate {
                    let tally = self.rule(rule);
                    tally.candidate += 1;
                    tally.added += 1;
                    compared.added_by_rule = true;
                }
            }
        }
        compared
    }

    /// The labels the rules in force gave an entity beside those the candidate would have.
    pub(super) fn compare_labels(&mut self, in_force: &[String], candidate: &BTreeSet<String>) {
        for label in in_force {
            let tally = self.labels.entry(label.clone()).or_default();
            tally.in_force += 1;
            if candidate.contains(label) {
                tally.kept += 1;
            } else {
                tally.removed += 1;
            }
        }
        for label in candidate {
            let tally = self.labels.entry(label.clone()).or_default();
            tally.candidate += 1;
            if !in_force.contains(label) {
                tally.added += 1;
            }
        }
    }

    /// Each reversed action the candidate removed is a reversal saved, unless the candidate
    /// took that action on the entity after the previous reversal of it and before this one:
    /// then those actions of the candidate count as reversed instead.
    pub(super) fn settle_reversals(&mut self, mut removed: Vec<Removed>, added: &mut [Added]) {
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
                    self.overall.repeated_reversed += 1;
                }
                if a.by_rule {
                    self.rule(&a.rule).repeated_reversed += 1;
                }
            }
            if repeated {
                continue;
            }
            if r.overall {
                self.overall.removed_reversed += 1;
            }
            if r.by_rule {
                self.rule(&r.rule).removed_reversed += 1;
            }
        }
    }
}
