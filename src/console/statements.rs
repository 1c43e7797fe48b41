//! Statements of reasons as the console shows them: one statement's facts (what the appeal page
//! shows of the decision it contests), and an entity's statements with their appeals (the
//! entity page's section). The statement is the Transparency Database's own JSON
//! (`docs/statements.md`); these pieces read its fields and say them in words.

use chrono::NaiveDateTime;
use maud::{Markup, html};

use super::layout;
use crate::store::{AppealRecord, StatementRecord};

/// A text field of the statement, if it has it.
fn field<'a>(statement: &'a StatementRecord, key: &str) -> Option<&'a str> {
    statement.statement.get(key).and_then(|v| v.as_str())
}

/// The explanation the author is given, whichever ground it was written under.
pub fn explanation(statement: &StatementRecord) -> &str {
    field(statement, "incompatible_content_explanation")
        .or_else(|| field(statement, "illegal_content_explanation"))
        .unwrap_or_default()
}

/// The content restriction of a statement: the first of its `decision_visibility` list (a
/// statement of the 2023 schema has the value itself).
fn visibility(statement: &StatementRecord) -> Option<&str> {
    match statement.statement.get("decision_visibility")? {
        serde_json::Value::Array(values) => values.first()?.as_str(),
        value => value.as_str(),
    }
}

/// What the decision restricted: the status it set and the database's name for it in words.
pub fn restriction(statement: &StatementRecord) -> Markup {
    let words = match (
        visibility(statement),
        field(statement, "decision_account"),
        field(statement, "decision_provision"),
    ) {
        (Some("DECISION_VISIBILITY_CONTENT_LABELLED"), _, _) => "content labelled",
        (Some("DECISION_VISIBILITY_CONTENT_DEMOTED"), _, _) => "content demoted",
        (Some("DECISION_VISIBILITY_CONTENT_AGE_RESTRICTED"), _, _) => "content age restricted",
        (Some("DECISION_VISIBILITY_CONTENT_INTERACTION_RESTRICTED"), _, _) => {
            "interaction restricted"
        }
        (Some("DECISION_VISIBILITY_OTHER"), _, _) => "content restricted",
        (Some(_), _, _) => "content disabled",
        (_, Some(_), _) => "account suspended",
        (_, _, Some(_)) => "service partly suspended",
        _ => "",
    };
    // quiesce's own end to the second; else the database's day (or the 2023 schema's hour).
    let end = field(statement, "quiesce_ends_at")
        .map(|end| end.to_owned())
        .or_else(|| {
            [
                "end_date_visibility_restriction",
                "end_date_account_restriction",
                "end_date_service_restriction",
                "end_date",
            ]
            .iter()
            .find_map(|key| field(statement, key))
            .map(hour)
        });
    html! {
        (layout::status(&statement.status))
        @if !words.is_empty() { " " span.muted { (words) } }
        @if let Some(end) = end { ", until " (end) }
    }
}

/// The 2023 schema's hour (`2026-12-06-09`, UTC) as a reader takes it: `2026-12-06 09:00 UTC`;
/// a day (the schema in force) as it is.
fn hour(raw: &str) -> String {
    NaiveDateTime::parse_from_str(&format!("{raw}:00"), "%Y-%m-%d-%H:%M")
        .map(|at| at.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|_| raw.to_owned())
}

/// How far the decision was automated, in words (a 2023 statement's `Yes`/`No` as it is).
fn automated(statement: &StatementRecord) -> &str {
    match field(statement, "automated_decision") {
        Some("AUTOMATED_DECISION_FULLY") => "fully automated",
        Some("AUTOMATED_DECISION_PARTIALLY") => "partially automated",
        Some("AUTOMATED_DECISION_NOT_AUTOMATED") => "not automated",
        Some(other) => other,
        None => "?",
    }
}

fn ground(statement: &StatementRecord) -> Markup {
    let (words, reference) = match field(statement, "decision_ground") {
        Some("DECISION_GROUND_ILLEGAL_CONTENT") => (
            "illegal content",
            field(statement, "illegal_content_legal_ground"),
        ),
        _ => (
            "incompatible with the terms",
            field(statement, "incompatible_content_ground"),
        ),
    };
    html! {
        (words)
        @if let Some(reference) = reference { ": " (reference) }
        @if field(statement, "incompatible_content_illegal") == Some("Yes") { " (also illegal)" }
    }
}

/// Who decided, as the statement's `decided_by` and the rule say it.
pub fn decided_by(decided_by: &str, rule: Option<&str>) -> Markup {
    html! {
        (decided_by)
        @if let Some(rule) = rule { " by " code { (rule) } }
    }
}

/// One statement: what it tells the author, and what the database is told.
pub fn facts(statement: &StatementRecord) -> Markup {
    html! {
        dl.facts #statement-facts {
            dt { "Issued" } dd { (layout::time(statement.created_at)) }
            dt { "Decided" } dd { (decided_by(&statement.decided_by, statement.rule.as_deref())) }
            dt { "Restricted" } dd { (restriction(statement)) }
            dt { "Explanation" } dd.user-text #statement-explanation { (explanation(statement)) }
            dt { "Ground" } dd #statement-ground { (ground(statement)) }
            dt { "Category" } dd #statement-category { code { (field(statement, "category").unwrap_or_default()) } }
            dt { "Facts" } dd.user-text #statement-facts-text { (field(statement, "decision_facts").unwrap_or_default()) }
            dt { "Applied" } dd { (field(statement, "application_date").map(hour).unwrap_or_default()) }
            dt { "Source" } dd { code { (field(statement, "source_type").unwrap_or_default()) } }
            dt { "Automated" } dd {
                "detection " (field(statement, "automated_detection").unwrap_or("?"))
                ", decision " (automated(statement))
            }
            dt { "PUID" } dd { code { (statement.puid) } }
        }
    }
}

/// An appeal's state in a word or two.
pub fn appeal_state(appeal: &AppealRecord) -> &str {
    match (&appeal.outcome, &appeal.claimed_by) {
        (Some(outcome), _) => outcome,
        (None, Some(_)) if appeal.claim_until > Some(chrono::Utc::now()) => "being decided",
        (None, _) => "waiting",
    }
}

/// Each statement beside its appeals (oldest first): `appeals` are the entity's.
pub fn with_appeals(
    statements: Vec<StatementRecord>,
    appeals: &[AppealRecord],
) -> Vec<(StatementRecord, Vec<AppealRecord>)> {
    statements
        .into_iter()
        .map(|statement| {
            let of_it = appeals
                .iter()
                .filter(|a| a.statement_id == statement.id)
                .cloned()
                .collect();
            (statement, of_it)
        })
        .collect()
}

/// The entity page's section: its statements, newest first, each with its appeals.
pub fn section(statements: &[(StatementRecord, Vec<AppealRecord>)], more: bool) -> Markup {
    html! {
        section.card aria-labelledby="statements-title" {
            h2 #statements-title { "Statements of reasons" }
            @if statements.is_empty() {
                p.muted #no-statements { "None: no decision on it restricted anything." }
            } @else {
                @if more { p.muted { "The latest " (statements.len()) "; GET /v1/statements?entity= lists them all." } }
                div.table-wrap {
                    table.cards #statements {
                        thead {
                            tr {
                                th scope="col" { "Issued" }
                                th scope="col" { "Decided" }
                                th scope="col" { "Restricted" }
                                th scope="col" { "Explanation" }
                                th scope="col" { "Category" }
                                th scope="col" { "PUID" }
                                th scope="col" { "Appeal" }
                            }
                        }
                        tbody {
                            @for (s, appeals) in statements {
                                tr data-statement-id=(s.id) {
                                    td data-label="Issued" { (layout::time(s.created_at)) }
                                    td data-label="Decided" { (decided_by(&s.decided_by, s.rule.as_deref())) }
                                    td data-label="Restricted" { (restriction(s)) }
                                    td.explanation data-label="Explanation" { (explanation(s)) }
                                    td data-label="Category" { code { (field(s, "category").unwrap_or_default()) } }
                                    td data-label="PUID" { code { (s.puid) } }
                                    td.appeal data-label="Appeal" {
                                        @if appeals.is_empty() { span.muted { "none" } }
                                        @for (i, a) in appeals.iter().enumerate() {
                                            @if i > 0 { br; }
                                            a href={ "/console/appeals/" (a.id) } { "Appeal #" (a.id) }
                                            " " span.tag { (appeal_state(a)) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hours_read_as_times_and_odd_ones_stay_as_given() {
        assert_eq!(hour("2026-12-06-09"), "2026-12-06 09:00 UTC");
        assert_eq!(hour("soon"), "soon");
    }
}
