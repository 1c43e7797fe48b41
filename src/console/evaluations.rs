//! An entity's evaluations on its page: on which snapshot and rules version, what matched live,
//! what an exemption (`unless`) kept from acting, what matched in shadow, and what was decided
//! or why nothing was.

use maud::{Markup, html};

use super::layout;
use crate::{
    domain::Status,
    rules::{RuleSet, Verdict},
    store::EvaluationRecord,
};

/// The `unless` of an exempted rule as written, when the rules in force are the version that
/// decided the evaluation (another version's text may differ, and only its name is recorded).
fn unless_of<'a>(rule: &str, evaluation: &EvaluationRecord, rules: &'a RuleSet) -> Option<&'a str> {
    if evaluation.rules_version.is_none() || evaluation.rules_version != rules.version() {
        return None;
    }
    rules
        .rules()
        .iter()
        .find(|r| r.name == rule)
        .and_then(|r| r.unless())
}

/// Why nothing was applied when every live rule that held was exempted.
fn exempted_outcome(evaluation: &EvaluationRecord, verdict: &Verdict, rules: &RuleSet) -> String {
    let why = |rule: &str| match unless_of(rule, evaluation, rules) {
        Some(unless) => format!("unless {unless}"),
        None => "its unless held".to_owned(),
    };
    match verdict.exempted.as_slice() {
        [rule] => format!(
            "Nothing applied: rule {rule} matched and was exempted ({}).",
            why(rule)
        ),
        rules_exempted => {
            let names = rules_exempted.join(", ");
            let whys: Vec<String> = rules_exempted
                .iter()
                .map(|rule| format!("{rule}: {}", why(rule)))
                .collect();
            format!(
                "Nothing applied: rules {names} matched and were exempted ({}).",
                whys.join("; ")
            )
        }
    }
}

/// What an evaluation decided, and why nothing was when nothing was.
fn outcome(evaluation: &EvaluationRecord, verdict: &Verdict, rules: &RuleSet) -> String {
    if let Some(id) = evaluation.action_id {
        let action = verdict.strongest().map_or("an action".to_owned(), |d| {
            format!("{} ({})", d.action.as_str(), d.rule)
        });
        return format!("Applied {action}: action #{id}.");
    }
    let Some(strongest) = verdict.strongest() else {
        return if !verdict.errors.is_empty() {
            "Nothing: a live rule could not be evaluated.".to_owned()
        } else if !verdict.exempted.is_empty() {
            exempted_outcome(evaluation, verdict, rules)
        } else {
            "Nothing: no live rule matched.".to_owned()
        };
    };
    let wanted = strongest.action.status();
    let snapshot = evaluation.snapshot.as_ref();
    let status = snapshot
        .and_then(|s| s["status"].as_str())
        .and_then(|s| Status::parse(s).ok());
    let cap = snapshot
        .and_then(|s| s["override_cap"].as_str())
        .and_then(|s| Status::parse(s).ok());
    match (status, cap) {
        (Some(status), _) if wanted <= status => format!(
            "Nothing: {} matched ({}), but the status was already {}; automation only raises it.",
            strongest.rule,
            strongest.action.as_str(),
            status.as_str()
        ),
        (Some(_), Some(cap)) if wanted > cap => format!(
            "Nothing: {} matched ({}), but a moderator's override held the entity at {}.",
            strongest.rule,
            strongest.action.as_str(),
            cap.as_str()
        ),
        (Some(_), _) => format!(
            "Nothing: {} matched ({}), but that decision had been applied before (its dedup key existed).",
            strongest.rule,
            strongest.action.as_str()
        ),
        (None, _) => format!(
            "Nothing: {} matched ({}), but the status at version {} was already {} or higher, or a moderator's override held it back.",
            strongest.rule,
            strongest.action.as_str(),
            evaluation.moderation_version,
            wanted.as_str()
        ),
    }
}

/// The table of the entity's evaluations, newest first; `rules` are those in force, for the
/// text of an exemption.
pub fn list(evaluations: &[EvaluationRecord], rules: &RuleSet) -> Markup {
    html! {
        @if evaluations.is_empty() {
            p.muted #no-evaluations { "Not evaluated yet." }
        } @else {
            div.table-wrap {
                table.cards #evaluations {
                    thead {
                        tr {
                            th scope="col" { "Started" }
                            th scope="col" { "Snapshot" }
                            th scope="col" { "Rules" }
                            th scope="col" { "Live matches" }
                            th scope="col" { "Exempted" }
                            th scope="col" { "Shadow matches" }
                            th scope="col" { "Decided" }
                        }
                    }
                    tbody {
                        @for evaluation in evaluations {
                            @let verdict: Verdict = serde_json::from_value(evaluation.decisions.clone()).unwrap_or_default();
                            tr data-evaluation-id=(evaluation.id) {
                                td data-label="Started" {
                                    (layout::time(evaluation.started_at))
                                    @if let Some(due) = evaluation.due_at {
                                        br; span.muted { ((evaluation.started_at - due).num_milliseconds()) " ms after it fell due" }
                                    }
                                }
                                td data-label="Snapshot" {
                                    "version " (evaluation.moderation_version) ", " (evaluation.event_count) " events"
                                    (super::saw::attributes_seen(evaluation.snapshot.as_ref()))
                                }
                                td.rules-version data-label="Rules" {
                                    @match evaluation.rules_version {
                                        Some(version) => { "version " (version) }
                                        None => span.muted { "before versions" },
                                    }
                                }
                                td data-label="Live matches" {
                                    @for d in &verdict.matched { div { code { (d.rule) } " → " (d.action.as_str()) } }
                                    @for (rule, error) in &verdict.errors { div { code { (rule) } " failed: " (error) } }
                                    @if verdict.matched.is_empty() && verdict.errors.is_empty() { span.muted { "none" } }
                                }
                                td.exempted data-label="Exempted" {
                                    @for rule in &verdict.exempted {
                                        div {
                                            code { (rule) }
                                            @if let Some(unless) = unless_of(rule, evaluation, rules) { " unless " code { (unless) } }
                                        }
                                    }
                                    @if verdict.exempted.is_empty() { span.muted { "none" } }
                                }
                                td data-label="Shadow matches" {
                                    @for d in &verdict.shadow { div { code { (d.rule) } " → " (d.action.as_str()) } }
                                    @for (rule, error) in &verdict.shadow_errors { div { code { (rule) } " failed: " (error) } }
                                    @if verdict.shadow.is_empty() && verdict.shadow_errors.is_empty() { span.muted { "none" } }
                                }
                                td.decided data-label="Decided" { (outcome(evaluation, &verdict, rules)) }
                            }
                        }
                    }
                }
            }
        }
    }
}
