//! A rule's effects beside its status action: labels (`labels = ["spam"]`), which do not
//! change the status and are recorded on the entity once; and its exemption (`unless`), a
//! condition that, when it holds, keeps the rule from acting (the verdict says so).

use cel::{Context, Env, Program};

use super::{
    Rule,
    check::check_names,
    condition::{ExemptionError, run},
    problem::{Clause, LabelError, RuleProblem},
};

/// Most labels one rule may give.
pub const MAX_LABELS: usize = 16;

/// Whether a label may be recorded: 1-64 characters of a-z, 0-9, `_`, `-` and `.`.
fn valid_label(label: &str) -> bool {
    (1..=64).contains(&label.len())
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.".contains(&b))
}

/// The labels of a rule, checked: each valid and once, at most [`MAX_LABELS`].
pub(super) fn check_labels(labels: &[String]) -> Result<(), LabelError> {
    if labels.len() > MAX_LABELS {
        return Err(LabelError::TooMany { max: MAX_LABELS });
    }
    for (i, label) in labels.iter().enumerate() {
        if !valid_label(label) {
            return Err(LabelError::Invalid(label.clone()));
        }
        if labels[..i].contains(label) {
            return Err(LabelError::Twice(label.clone()));
        }
    }
    Ok(())
}

/// An exemption compiled and checked like a condition (`unless`).
pub(super) fn compile_unless(env: &Env, source: &str) -> Result<Program, RuleProblem> {
    let program = env
        .compile(source)
        .map_err(|e| RuleProblem::Unparsed(Clause::Unless, e))?;
    check_names(source, &program).map_err(|e| RuleProblem::UnknownName(Clause::Unless, e))?;
    Ok(program)
}

impl Rule {
    /// Whether the rule's exemption holds on the snapshot (false without one).
    pub(super) fn exempted(&self, context: &Context) -> Result<bool, ExemptionError> {
        match &self.unless {
            Some((_, program)) => run(program, context).map_err(ExemptionError),
            None => Ok(false),
        }
    }

    /// The rule's exemption (`unless`), as written.
    pub fn unless(&self) -> Option<&str> {
        self.unless.as_ref().map(|(source, _)| source.as_str())
    }

    /// What the rule does, for a listing: its action, its labels, or both (`hide + label:spam`).
    pub fn effects(&self) -> String {
        let labels = self.labels.iter().map(|l| format!("label:{l}"));
        self.action
            .map(|a| a.as_str().to_owned())
            .into_iter()
            .chain(labels)
            .collect::<Vec<_>>()
            .join(" + ")
    }
}

#[cfg(test)]
mod tests {
    use crate::{
        domain::{Action, EntityId, Snapshot, Status},
        rules::RuleSet,
    };

    fn rules(text: &str) -> RuleSet {
        RuleSet::from_toml(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn labels_are_given_beside_an_action_or_alone_and_never_change_the_status_order() {
        let set = rules(
            "[[rule]]\nname = \"spam_review\"\nwhen = 'count(\"report\") >= 2'\naction = \"flag\"\nlabels = [\"spam\", \"review\"]\nreason = \"r\"\n\n\
             [[rule]]\nname = \"tag_only\"\nwhen = 'count(\"report\") >= 1'\nlabels = [\"reported\"]\nreason = \"r\"\n",
        );
        let post = Snapshot::with_counts(EntityId::parse("post:1").unwrap(), [("report", 2)]);
        let verdict = set.evaluate(&post);
        let labels: Vec<(&str, &str)> = verdict
            .labels
            .iter()
            .map(|l| (l.rule.as_str(), l.label.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                ("spam_review", "spam"),
                ("spam_review", "review"),
                ("tag_only", "reported")
            ]
        );
        // Only the status action is a decision: the labels-only rule decides no status.
        assert_eq!(verdict.matched.len(), 1);
        assert_eq!(
            verdict.to_apply(Status::Visible, None).unwrap().action,
            Action::Flag
        );
        assert_eq!(set.rules()[0].effects(), "flag + label:spam + label:review");
        assert_eq!(set.rules()[1].effects(), "label:reported");
    }

    #[test]
    fn a_matching_exemption_keeps_the_rule_from_acting_and_is_recorded() {
        let set = rules(
            "[[rule]]\nname = \"hide_reported\"\nwhen = 'count(\"report\") >= 2'\naction = \"hide\"\nlabels = [\"spam\"]\n\
             unless = 'kind == \"page\" || status == \"flagged\"'\nreason = \"r\"\n",
        );
        let mut post = Snapshot::with_counts(EntityId::parse("post:1").unwrap(), [("report", 3)]);
        let acts = set.evaluate(&post);
        assert_eq!(acts.matched.len(), 1);
        assert!(acts.exempted.is_empty());
        post.status = Status::Flagged;
        let exempt = set.evaluate(&post);
        assert!(
            exempt.matched.is_empty() && exempt.labels.is_empty(),
            "{exempt:?}"
        );
        assert_eq!(exempt.exempted, ["hide_reported"]);
        assert!(exempt.to_apply(Status::Flagged, None).is_none());
    }

    #[test]
    fn bad_labels_and_exemptions_are_refused_naming_the_rule() {
        for (text, problem) in [
            ("labels = [\"Spam!\"]\naction = \"flag\"", "label"),
            ("labels = [\"a\", \"a\"]\naction = \"flag\"", "twice"),
            ("labels = []", "action or labels"),
            ("action = \"flag\"\nunless = 'verifed(\"x\")'", "unless"),
            ("action = \"flag\"\nunless = 'count(\"x\") >'", "unless"),
            ("action = \"flag\"\nunless = 'count(\"x\")'", "unless"),
        ] {
            let file =
                format!("[[rule]]\nname = \"bad_one\"\nwhen = 'true'\nreason = \"r\"\n{text}\n");
            let error = RuleSet::from_toml(&file).err().unwrap().to_string();
            assert!(
                error.contains("bad_one") && error.contains(problem),
                "{text}: {error}"
            );
        }
    }
}
