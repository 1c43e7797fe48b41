//! The replay of one entity's evaluations under a candidate rule set, beside what the rules in
//! force did on them; and the tally of every entity's replay. Pure: no I/O.
//!
//! An entity's evaluations are replayed in the order they took effect (by moderation version,
//! the one that applied an action last on its version, then by start). Each one's recorded snapshot is what the candidate sees, with one change: its
//! status is the status the candidate's own earlier actions would have left (automation only
//! escalates, so a candidate that hid nothing still sees `visible` where the rules in force had
//! hidden). A moderator's override in force is the snapshot's own (`override_cap`), so it caps
//! the candidate as it capped the rules in force. When the entity's version moved between two
//! evaluations by more than the first one's action, a moderator decided in between (a reversal
//! or an override; nothing else changes a version): the candidate's status becomes the one the
//! moderator set, which the next snapshot holds. A decision after the entity's last evaluation
//! sets both final statuses.
//!
//! A reversal is saved only when the candidate never takes the reversed action on the entity
//! between the previous reversal of that action there and this one: a candidate that hides
//! the same post one evaluation later, or sooner, would have been reversed all the same. One
//! that takes again an action moderators let stand (sooner or later) was judged as much: it
//! counts, not reversed, in the expected reversal rate.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde::Serialize;

use super::compare::{
    Added, CanaryTally, LabelTally, Removed, RuleTally, compare, compare_labels, rule_entry,
    settle_reversals, tally_canaries,
};
use crate::{
    domain::{Action, Snapshot, Status},
    rules::{RuleSet, decay},
    store::{LatestDecision, ReplayedEvaluation},
};

/// An action the candidate would have added, with the snapshot it would have acted on.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AddedAction {
    pub entity: String,
    /// The evaluation's id and start.
    pub evaluation: i64,
    pub evaluated_at: DateTime<Utc>,
    pub rule: String,
    pub action: Action,
    pub reason: String,
    /// The status the candidate would have found.
    pub status_before: Status,
    /// What the rules in force did on that evaluation instead (`hide (rule)`), if anything.
    pub in_force_took: Option<String>,
    #[schema(value_type = Object)]
    pub snapshot: serde_json::Value,
}

/// An entity whose status at the end of the window would differ.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct EntityDiff {
    pub entity: String,
    pub in_force: Status,
    pub backtest: Status,
}

/// Everything the replay of every entity so far adds up to.
#[derive(Debug)]
pub struct Tally {
    pub evaluations: u64,
    pub replayed: u64,
    /// Evaluations that kept no snapshot (recorded before every evaluation kept one).
    pub without_snapshot: u64,
    /// Replayed snapshots read without a trailing window or decayed count the candidate reads
    /// for their kind, or without distinct actors it reads for their kind (the rules in force
    /// used none), which the candidate then sees as 0.
    pub without_windows: u64,
    pub without_actors: u64,
    /// Replayed snapshots read without the attribute aggregates, or without context (the rules
    /// in force read none), which a candidate that reads them would see as absent.
    pub without_attributes: u64,
    pub without_context: u64,
    pub entities: u64,
    pub by_rule: BTreeMap<String, RuleTally>,
    /// Per canary rule of the candidate: evaluations and matches in its live share and out.
    pub canaries: BTreeMap<String, CanaryTally>,
    /// Per label: the entities the rules in force and the candidate would have given it.
    pub labels: BTreeMap<String, LabelTally>,
    /// All rules: here an action is kept when both take it on an evaluation, whichever rule.
    pub overall: RuleTally,
    /// (in force, candidate) final status -> entities.
    pub transitions: BTreeMap<(Status, Status), u64>,
    pub final_differs: u64,
    pub diff_sample: Vec<EntityDiff>,
    pub added_sample: Vec<AddedAction>,
    sample_size: usize,
    rng: StdRng,
}

impl Tally {
    pub fn new(sample_size: usize) -> Self {
        Self {
            evaluations: 0,
            replayed: 0,
            without_snapshot: 0,
            without_windows: 0,
            without_actors: 0,
            without_attributes: 0,
            without_context: 0,
            entities: 0,
            by_rule: BTreeMap::new(),
            labels: BTreeMap::new(),
            canaries: BTreeMap::new(),
            overall: RuleTally::default(),
            transitions: BTreeMap::new(),
            final_differs: 0,
            diff_sample: Vec::new(),
            added_sample: Vec::new(),
            sample_size,
            // A fixed seed: the same data gives the same sample.
            rng: StdRng::seed_from_u64(18),
        }
    }

    /// Replays one entity's evaluations (any order; sorted here) and the moderator's latest
    /// decision on it, if any.
    pub fn entity(
        &mut self,
        candidate: &RuleSet,
        mut evaluations: Vec<ReplayedEvaluation>,
        decision: Option<LatestDecision>,
    ) {
        if evaluations.is_empty() {
            return;
        }
        // Within one version, the evaluation that applied an action comes last: it bumped the
        // version, so every other one recorded on that version committed before it.
        evaluations.sort_by_key(|e| {
            (
                e.moderation_version,
                e.applied.is_some(),
                e.started_at,
                e.id,
            )
        });
        self.entities += 1;
        // The version the next evaluation reads if no moderator decides in between, and each
        // side's status after the evaluation before it.
        let mut expected_version: Option<i64> = None;
        let mut live_status: Option<Status> = None;
        let mut candidate_status: Option<Status> = None;
        let mut last_finished = evaluations[0].finished_at;
        // Events the evaluations so far covered: one that covers none new applies no rule's
        // action, live (`evaluation/decision.rs`) as here.
        let mut covered: Option<i64> = None;
        let entity = evaluations[0].entity.clone();
        let labels_in_force = evaluations[0].labels_in_force.clone();
        let mut labels_given: std::collections::BTreeSet<String> = Default::default();
        let mut removed: Vec<Removed> = Vec::new();
        let mut added: Vec<Added> = Vec::new();
        for evaluation in evaluations {
            self.evaluations += 1;
            last_finished = last_finished.max(evaluation.finished_at);
            if let Some(restored) = evaluation.restored {
                // A timed action ended: the restore is no rule's decision. Both sides take
                // the status it set, as they take a moderator's (a candidate's own durations
                // are not simulated: it replays the ends that happened).
                expected_version = Some(evaluation.moderation_version + 1);
                live_status = Some(restored);
                candidate_status = Some(restored);
                continue;
            }
            let moderator_moved =
                expected_version.is_none_or(|v| evaluation.moderation_version > v);
            expected_version =
                Some(evaluation.moderation_version + i64::from(evaluation.applied.is_some()));
            let Some(mut snapshot) = evaluation.snapshot else {
                // Recorded before every evaluation kept its snapshot, with no action (an action
                // keeps its own): the candidate is taken to do nothing here either.
                self.without_snapshot += 1;
                if moderator_moved {
                    // The status is unknown here; the next snapshot's is taken as is.
                    expected_version = None;
                }
                continue;
            };
            self.replayed += 1;
            let signals = snapshot.signals.values();
            let reads = candidate.windows_for(&snapshot.kind);
            if signals.clone().any(|s| !decay::has_all(s, reads)) {
                self.without_windows += 1;
            }
            if candidate.uses_actors_for(&snapshot.kind)
                && signals.clone().any(|s| s.actors.is_none())
            {
                self.without_actors += 1;
            }
            self.without_attributes += u64::from(!snapshot.attributes.read.events);
            self.without_context += u64::from(!snapshot.attributes.read.context);
            let new_events = covered.is_none_or(|c| snapshot.event_count > c);
            covered = Some(covered.unwrap_or(0).max(snapshot.event_count));
            let seen = snapshot.status;
            let status = match candidate_status {
                Some(status) if !moderator_moved => status,
                _ => seen,
            };
            snapshot.status = status;
            let verdict = candidate.evaluate(&snapshot);
            tally_canaries(&mut self.canaries, candidate, &snapshot, &verdict);
            for (rule, _) in &verdict.errors {
                rule_entry(&mut self.by_rule, rule).errors += 1;
            }
            // A live rule that fails would have dead-lettered the entity: nothing applied.
            let decision = if verdict.errors.is_empty() && new_events {
                verdict.to_apply(status, snapshot.override_cap).cloned()
            } else {
                None
            };
            // Labels as the worker gives them: from live rules that hold, on new events.
            if verdict.errors.is_empty() && new_events {
                labels_given.extend(verdict.labels.iter().map(|l| l.label.clone()));
            }
            let live = evaluation.applied.as_ref();
            let compared = compare(
                &mut self.overall,
                &mut self.by_rule,
                live,
                decision.as_ref().map(|d| (d.rule.as_str(), d.action)),
            );
            // Every removed action a moderator judged: reversed within 24h (when), or let stand.
            let judged = live.and_then(|l| match (l.reversed_within_24h, l.reversed_at) {
                (true, Some(at)) => Some((l, Some(at))),
                (true, None) => None,
                (false, _) => Some((l, None)),
            });
            if let Some((l, reversed_at)) = judged
                && (compared.removed_overall || compared.removed_by_rule)
            {
                removed.push(Removed {
                    rule: l.rule.clone(),
                    action: l.action,
                    at: evaluation.started_at,
                    reversed_at,
                    overall: compared.removed_overall,
                    by_rule: compared.removed_by_rule,
                });
            }
            if let Some(d) = &decision
                && (compared.added_overall || compared.added_by_rule)
            {
                added.push(Added {
                    rule: d.rule.clone(),
                    action: d.action,
                    at: evaluation.started_at,
                    overall: compared.added_overall,
                    by_rule: compared.added_by_rule,
                });
            }
            // The sample is of the actions that change what happened (not a rule swap).
            if let Some(d) = &decision
                && live.is_none_or(|l| l.action != d.action)
            {
                self.sample_added(
                    AddedAction {
                        entity: entity.clone(),
                        evaluation: evaluation.id,
                        evaluated_at: evaluation.started_at,
                        rule: d.rule.clone(),
                        action: d.action,
                        reason: d.reason.clone(),
                        status_before: status,
                        in_force_took: live.map(|l| format!("{} ({})", l.action.as_str(), l.rule)),
                        snapshot: Default::default(),
                    },
                    &snapshot,
                );
            }
            live_status = Some(live.map_or(seen, |l| l.new_status));
            candidate_status = Some(decision.map_or(status, |d| d.action.status()));
        }
        settle_reversals(&mut self.overall, &mut self.by_rule, &removed, &added);
        compare_labels(&mut self.labels, &labels_in_force, &labels_given);
        let (Some(mut live_final), Some(mut candidate_final)) = (live_status, candidate_status)
        else {
            return;
        };
        if let Some(decision) = decision.filter(|d| d.at > last_finished) {
            live_final = decision.status;
            candidate_final = decision.status;
        }
        if live_final != candidate_final {
            self.final_differs += 1;
            *self
                .transitions
                .entry((live_final, candidate_final))
                .or_default() += 1;
            // A uniform sample of them (reservoir sampling), not the first in id order.
            let diff = EntityDiff {
                entity,
                in_force: live_final,
                backtest: candidate_final,
            };
            if self.diff_sample.len() < self.sample_size {
                self.diff_sample.push(diff);
            } else {
                let pick = self.rng.random_range(0..self.final_differs) as usize;
                if pick < self.sample_size {
                    self.diff_sample[pick] = diff;
                }
            }
        }
    }

    /// A uniform sample of the added actions (reservoir sampling), each with its snapshot.
    fn sample_added(&mut self, mut added: AddedAction, snapshot: &Snapshot) {
        let seen = self.overall.added;
        let slot = if self.added_sample.len() < self.sample_size {
            Some(self.added_sample.len())
        } else {
            let pick = self.rng.random_range(0..seen) as usize;
            (pick < self.sample_size).then_some(pick)
        };
        let Some(slot) = slot else { return };
        added.snapshot = serde_json::to_value(snapshot).unwrap_or_default();
        if slot == self.added_sample.len() {
            self.added_sample.push(added);
        } else {
            self.added_sample[slot] = added;
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, Utc};

    use super::*;
    use crate::{domain::EntityId, store::AppliedAction};

    fn evaluation(
        id: i64,
        version: i64,
        flags: Option<i64>,
        applied: Option<(&str, Action)>,
    ) -> ReplayedEvaluation {
        let at = Utc::now() - Duration::hours(2) + Duration::minutes(id);
        ReplayedEvaluation {
            id,
            entity: "post:1".into(),
            started_at: at,
            finished_at: at,
            moderation_version: version,
            snapshot: flags.map(|flags| {
                let mut snapshot =
                    Snapshot::with_counts(EntityId::parse("post:1").unwrap(), [("flag", flags)]);
                snapshot.moderation_version = version;
                // As recorded: the events the evaluation covered.
                snapshot.event_count = flags;
                snapshot
            }),
            applied: applied.map(|(rule, action)| AppliedAction {
                id,
                rule: rule.into(),
                action,
                new_status: action.status(),
                created_at: at,
                reversed_within_24h: false,
                reversed_at: None,
            }),
            restored: None,
            labels_in_force: Vec::new(),
        }
    }

    /// The default rules with the flag score that hides at `score`.
    fn hiding_at(score: &str) -> RuleSet {
        let text = crate::rules::DEFAULT_RULES.replace(
            r#"weight("flag") >= 8.3"#,
            &format!(r#"weight("flag") >= {score}"#),
        );
        RuleSet::from_toml(&text).unwrap()
    }

    /// `evaluation` whose action a moderator reversed at `reversed_at`.
    fn reversed(mut e: ReplayedEvaluation, reversed_at: DateTime<Utc>) -> ReplayedEvaluation {
        let applied = e.applied.as_mut().expect("an action");
        applied.reversed_within_24h = true;
        applied.reversed_at = Some(reversed_at);
        e
    }

    #[test]
    fn a_candidate_that_hides_one_evaluation_later_saves_no_reversal() {
        let mut tally = Tally::new(5);
        // Hidden at 11 flags; a 12th flag is evaluated (nothing to do: hidden); then reversed.
        let first = evaluation(1, 0, Some(11), Some(("hide_flag_pile_on", Action::Hide)));
        let second = evaluation(2, 1, Some(12), None);
        let reversal = second.started_at + Duration::seconds(30);
        tally.entity(
            &hiding_at("12"),
            vec![reversed(first, reversal), second],
            None,
        );
        let hide = &tally.by_rule["hide_flag_pile_on"];
        assert_eq!((hide.removed, hide.added), (1, 1), "{hide:?}");
        assert_eq!(
            (hide.removed_reversed, hide.repeated_reversed),
            (0, 1),
            "{hide:?}"
        );
        assert_eq!(
            (
                tally.overall.removed_reversed,
                tally.overall.repeated_reversed
            ),
            (0, 1)
        );
    }

    #[test]
    fn a_looser_candidate_that_hides_sooner_saves_no_reversal() {
        let mut tally = Tally::new(5);
        // Flagged at 6 flags, hidden at 10 and reversed; the candidate hides at 6 already.
        let first = evaluation(1, 0, Some(6), Some(("review_repeated_flags", Action::Flag)));
        let second = evaluation(2, 1, Some(10), Some(("hide_flag_pile_on", Action::Hide)));
        let reversal = second.started_at + Duration::seconds(30);
        tally.entity(
            &hiding_at("5"),
            vec![first, reversed(second, reversal)],
            None,
        );
        let hide = &tally.by_rule["hide_flag_pile_on"];
        assert_eq!((hide.removed, hide.added), (1, 1), "{hide:?}");
        assert_eq!(
            (hide.removed_reversed, hide.repeated_reversed),
            (0, 1),
            "{hide:?}"
        );
        assert_eq!(tally.overall.removed_reversed, 0);
    }

    #[test]
    fn a_hide_after_the_reversal_leaves_the_reversal_saved() {
        let mut tally = Tally::new(5);
        // Hidden at 10 flags and reversed (version 2); two more flags after the reversal.
        let first = evaluation(1, 0, Some(10), Some(("hide_flag_pile_on", Action::Hide)));
        let reversal = first.started_at + Duration::seconds(30);
        let second = evaluation(2, 2, Some(12), None);
        assert!(second.started_at > reversal);
        tally.entity(
            &hiding_at("12"),
            vec![reversed(first, reversal), second],
            None,
        );
        let hide = &tally.by_rule["hide_flag_pile_on"];
        assert_eq!(
            (hide.removed_reversed, hide.repeated_reversed),
            (1, 0),
            "{hide:?}"
        );
        assert_eq!(tally.overall.removed_reversed, 1);
    }

    /// The report of `tally` beside the default rules.
    /// The pile-on rule's expected reversal rate and its basis in the report of `tally`.
    fn hide_expected_rate(candidate: &RuleSet, tally: Tally) -> (f64, u64) {
        let report = report_of(candidate, tally);
        let line = report
            .rules
            .iter()
            .find(|r| r.rule == "hide_flag_pile_on")
            .expect("the pile-on rule in the report");
        let rate = line
            .expected_reversal_rate
            .unwrap_or_else(|| panic!("an expected reversal rate: {line:?}"));
        (rate.rate, rate.basis)
    }

    fn report_of(candidate: &RuleSet, tally: Tally) -> super::super::report::Report {
        super::super::report::Report::new(
            candidate,
            &RuleSet::default_rules(),
            tally,
            (Utc::now() - Duration::hours(3), Utc::now()),
            1,
            0,
        )
    }

    #[test]
    fn a_renamed_rule_has_the_expected_reversal_rate_of_the_rule_in_force() {
        let renamed = RuleSet::from_toml(
            &crate::rules::DEFAULT_RULES
                .replace("name = \"hide_flag_pile_on\"", "name = \"pile_on_renamed\""),
        )
        .unwrap();
        // Three posts hidden by the pile-on rule; moderators reversed one and let two stand.
        let entities = |candidate: &RuleSet| {
            let mut tally = Tally::new(5);
            for n in 0..3 {
                let mut hide =
                    evaluation(1, 0, Some(10), Some(("hide_flag_pile_on", Action::Hide)));
                hide.entity = format!("post:{n}");
                if n == 0 {
                    let at = hide.started_at + Duration::minutes(5);
                    hide = reversed(hide, at);
                }
                tally.entity(candidate, vec![hide], None);
            }
            report_of(candidate, tally)
        };
        let in_force = entities(&RuleSet::default_rules());
        let own = |report: &super::super::report::Report, name: &str| {
            report
                .rules
                .iter()
                .find(|r| r.rule == name)
                .cloned()
                .unwrap()
        };
        let live = own(&in_force, "hide_flag_pile_on");
        assert_eq!((live.kept, live.in_force_reversed), (3, 1), "{live:?}");
        let report = entities(&renamed);
        let line = own(&report, "pile_on_renamed");
        assert_eq!((line.kept, line.added), (0, 3), "{line:?}");
        assert_eq!(
            (line.reversals_repeated, line.repeats_let_stand),
            (1, 2),
            "{line:?}"
        );
        assert_eq!(line.expected_reversal_rate, live.expected_reversal_rate);
        assert_eq!(line.expected_reversal_rate.unwrap().basis, 3);
        // The renamed rule saves nothing: the old name's reversal is repeated, not saved.
        assert_eq!(own(&report, "hide_flag_pile_on").reversals_saved, 0);
        // Overall the same hides are taken on the same evaluations: nothing moves.
        assert_eq!(
            report.overall.expected_reversal_rate,
            in_force.overall.expected_reversal_rate
        );
    }

    #[test]
    fn a_candidate_that_hides_sooner_than_a_hide_let_stand_is_judged_not_reversed() {
        let mut tally = Tally::new(5);
        // Flagged at 6 flags, hidden at 10, and the hide stood; the candidate hides at 6.
        let first = evaluation(1, 0, Some(6), Some(("review_repeated_flags", Action::Flag)));
        let second = evaluation(2, 1, Some(10), Some(("hide_flag_pile_on", Action::Hide)));
        let candidate = hiding_at("5");
        tally.entity(&candidate, vec![first, second], None);
        let hide = &tally.by_rule["hide_flag_pile_on"];
        assert_eq!((hide.removed, hide.added), (1, 1), "{hide:?}");
        assert_eq!(
            (
                hide.removed_reversed,
                hide.repeated_reversed,
                hide.repeated_stood
            ),
            (0, 0, 1),
            "{hide:?}"
        );
        assert_eq!(hide_expected_rate(&candidate, tally), (0.0, 1));
    }

    #[test]
    fn a_stricter_candidate_that_hides_later_than_a_hide_let_stand_is_judged_not_reversed() {
        // Two posts: hidden at 10 flags, reversed on one and let stand on the other; two more
        // flags follow on each. A candidate hiding at 12 hides both later.
        let mut tally = Tally::new(5);
        let candidate = hiding_at("12");
        for n in 0..2 {
            let mut first = evaluation(1, 0, Some(10), Some(("hide_flag_pile_on", Action::Hide)));
            let mut second = evaluation(2, 1, Some(12), None);
            first.entity = format!("post:{n}");
            second.entity = first.entity.clone();
            if n == 0 {
                let at = second.started_at + Duration::seconds(30);
                first = reversed(first, at);
            }
            tally.entity(&candidate, vec![first, second], None);
        }
        let hide = &tally.by_rule["hide_flag_pile_on"];
        assert_eq!((hide.removed, hide.added, hide.kept), (2, 2, 0), "{hide:?}");
        assert_eq!(
            (
                hide.removed_reversed,
                hide.repeated_reversed,
                hide.repeated_stood
            ),
            (0, 1, 1),
            "{hide:?}"
        );
        assert_eq!(hide_expected_rate(&candidate, tally), (0.5, 2));
    }

    #[test]
    fn a_hide_let_stand_is_repeated_only_up_to_the_next_reversal() {
        // The rules in force hide at 10 flags (a timed hide, let stand, then restored), hide
        // again at 11 and a moderator reverses that; a candidate hiding at 12 hides at the
        // 12th flag, before the reversal, and at the 13th, after it.
        let mut tally = Tally::new(5);
        let stood = evaluation(1, 0, Some(10), Some(("hide_flag_pile_on", Action::Hide)));
        let mut restore = evaluation(2, 1, Some(10), None);
        restore.restored = Some(Status::Visible);
        let hide = evaluation(3, 2, Some(11), Some(("hide_flag_pile_on", Action::Hide)));
        let before = evaluation(4, 3, Some(12), None);
        let reversal = before.started_at + Duration::seconds(30);
        let after = evaluation(6, 5, Some(13), None);
        tally.entity(
            &hiding_at("12"),
            vec![stood, restore, reversed(hide, reversal), before, after],
            None,
        );
        let hide = &tally.by_rule["hide_flag_pile_on"];
        assert_eq!((hide.removed, hide.added), (2, 2), "{hide:?}");
        // The hide before the reversal repeats the reversed one; the one after it repeats
        // nothing judged (the hide let stand is before the reversal).
        assert_eq!(
            (
                hide.removed_reversed,
                hide.repeated_reversed,
                hide.repeated_stood
            ),
            (0, 1, 0),
            "{hide:?}"
        );
    }

    #[test]
    fn the_entities_whose_final_status_differs_are_sampled_from_all_of_them() {
        let rules = hiding_at("5");
        let mut tally = Tally::new(3);
        // 60 entities, in id order, each flagged in force and hidden by the candidate.
        for n in 0..60 {
            let mut e = evaluation(1, 0, Some(6), Some(("review_repeated_flags", Action::Flag)));
            e.entity = format!("post:{n:02}");
            tally.entity(&rules, vec![e], None);
        }
        assert_eq!(tally.final_differs, 60);
        assert_eq!(tally.diff_sample.len(), 3);
        assert!(
            tally
                .diff_sample
                .iter()
                .any(|d| d.entity.as_str() > "post:02"),
            "not the first three in id order: {:?}",
            tally.diff_sample
        );
    }

    #[test]
    fn an_evaluation_without_a_snapshot_is_skipped_and_counted() {
        let rules = RuleSet::default_rules();
        let mut tally = Tally::new(5);
        // Recorded before every evaluation kept its snapshot: 1 flag, nothing applied; then 10
        // flags, which the rules in force did not act on (say, another file was loaded).
        tally.entity(
            &rules,
            vec![
                evaluation(1, 0, None, None),
                evaluation(2, 0, Some(10), None),
            ],
            None,
        );
        assert_eq!(
            (tally.evaluations, tally.replayed, tally.without_snapshot),
            (2, 1, 1)
        );
        let hide = &tally.by_rule["hide_flag_pile_on"];
        assert_eq!((hide.added, hide.removed, hide.kept), (1, 0, 0));
        assert_eq!(tally.added_sample.len(), 1);
        assert_eq!(tally.final_differs, 1);
    }

    #[test]
    fn a_candidate_that_reads_attributes_is_warned_of_snapshots_read_without_them() {
        let candidate = RuleSet::from_toml(
            "[attributes.event.reason]\ntype = \"string\"\n[attributes.entity.age]\ntype = \"number\"\n\
             [[rule]]\nname = \"r\"\nwhen = 'count(\"flag\", {\"reason\": \"spam\"}) > 0 || attr(\"age\", 0) > 1'\n\
             action = \"flag\"\nreason = \"x\"\n",
        )
        .unwrap();
        let mut tally = Tally::new(5);
        // Two snapshots read by rules that read no attribute, one by rules that read both.
        let mut read = evaluation(3, 0, Some(1), None);
        if let Some(snapshot) = read.snapshot.as_mut() {
            snapshot.attributes.read = crate::domain::AttributeReads::ALL;
        }
        tally.entity(
            &candidate,
            vec![
                evaluation(1, 0, Some(1), None),
                evaluation(2, 0, Some(1), None),
                read,
            ],
            None,
        );
        assert_eq!((tally.without_attributes, tally.without_context), (2, 2));
        let report = super::super::report::Report::new(
            &candidate,
            &candidate,
            tally,
            (Utc::now() - Duration::hours(3), Utc::now()),
            1,
            0,
        );
        let warnings = report.warnings.join("\n");
        assert!(
            warnings.contains("reads event attributes, but 2 snapshots"),
            "{warnings}"
        );
        assert!(
            warnings.contains("reads context, but 2 snapshots"),
            "{warnings}"
        );
        let plain = RuleSet::default_rules();
        let mut tally = Tally::new(5);
        tally.entity(&plain, vec![evaluation(1, 0, Some(1), None)], None);
        let report = super::super::report::Report::new(
            &plain,
            &plain,
            tally,
            (Utc::now(), Utc::now()),
            1,
            0,
        );
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    }

    #[test]
    fn only_snapshots_of_a_kind_the_candidate_counts_actors_for_are_warned_of() {
        // The candidate counts distinct actors for users only; every snapshot was read
        // without actors (the rules in force used none): two posts and one user.
        let candidate = RuleSet::from_toml(
            "[[rule]]\nname = \"brigaded\"\nkinds = [\"user\"]\nwhen = 'actors(\"flag\") >= 3'\n\
             action = \"flag\"\nreason = \"x\"\n",
        )
        .unwrap();
        let mut tally = Tally::new(5);
        for entity in ["post:1", "post:2", "user:7"] {
            let mut e = evaluation(1, 0, Some(1), None);
            e.entity = entity.into();
            if let Some(snapshot) = e.snapshot.as_mut() {
                snapshot.entity = EntityId::parse(entity).unwrap();
                snapshot.kind = snapshot.entity.kind().to_owned();
            }
            tally.entity(&candidate, vec![e], None);
        }
        assert_eq!((tally.replayed, tally.without_actors), (3, 1));
        let warnings = report_of(&candidate, tally).warnings.join("\n");
        assert!(
            warnings.contains("counts distinct actors, but 1 snapshots"),
            "{warnings}"
        );
    }

    #[test]
    fn the_acting_evaluation_of_a_version_is_replayed_after_the_others() {
        let rules = RuleSet::default_rules();
        let mut tally = Tally::new(5);
        // Both read version 0; the one that hid (started first) committed last.
        tally.entity(
            &rules,
            vec![
                evaluation(1, 0, Some(10), Some(("hide_flag_pile_on", Action::Hide))),
                evaluation(2, 0, Some(2), None),
            ],
            None,
        );
        let hide = &tally.by_rule["hide_flag_pile_on"];
        assert_eq!((hide.kept, hide.added, hide.removed), (1, 0, 0));
        assert_eq!(tally.final_differs, 0);
    }
}
