//! Appeals (DSA Art. 20): the decisions their authors contest, oldest first, for a person to
//! decide. As in the review queue, a moderator claims an appeal (so two do not decide the same
//! one), reads the appellant's text beside the statement of reasons it contests, and upholds
//! it (the decision is reversed) or rejects it (it stands), with a reason the platform passes
//! on. The buttons carry access keys (the browser's own shortcut, no script): Alt+C claims
//! (the oldest unclaimed appeal, on the list), Alt+U upholds, Alt+R rejects; with the reason
//! still empty, the browser's required check puts the cursor in it instead.

use axum::{
    extract::State,
    response::{IntoResponse, Redirect, Response},
};
use chrono::Utc;
use maud::{Markup, html};
use serde::Deserialize;

use super::{
    ConsoleState, SignedInSession, csrf,
    errors::PageError,
    forms::{Carried, Form, NoFields, PagePath, PageQuery, page_query},
    layout::{self, Section},
    statements,
};
use crate::{
    appeals::{self, AppealDesk},
    domain::EntityId,
    request::{
        fields::{self, Text},
        path::AppealId,
    },
    store::{AppealDecision, AppealRecord},
};

/// Appeals per page.
const PAGE: i64 = 50;

/// The line that documents the keys, on both pages.
const KEYS: &str = "Keys: Alt+C claims, Alt+U upholds, Alt+R rejects (Alt+Shift in Firefox, \
                    Ctrl+Option on a Mac); with no reason written yet, Alt+U and Alt+R put the \
                    cursor in it.";

/// Who holds a live claim on the appeal, if anyone.
fn holder(appeal: &AppealRecord) -> Option<&str> {
    match (&appeal.claimed_by, appeal.claim_until) {
        (Some(who), Some(until)) if until > Utc::now() => Some(who),
        _ => None,
    }
}

fn mine(signed_in: &SignedInSession, appeal: &AppealRecord) -> bool {
    appeal.outcome.is_none() && appeal.claimed_by.as_deref() == Some(signed_in.user.name.as_str())
}

/// Open, and no one else's live claim on it (one that ran out may be taken).
fn claimable(signed_in: &SignedInSession, appeal: &AppealRecord) -> bool {
    appeal.outcome.is_none() && !mine(signed_in, appeal) && holder(appeal).is_none()
}

/// The claim button; `key`: it is the one Alt+C presses.
fn claim_form(signed_in: &SignedInSession, appeal: &AppealRecord, key: bool) -> Markup {
    html! {
        form.inline method="post" action={ "/console/appeals/" (appeal.id) "/claim" } {
            (csrf::field(&signed_in.session))
            button.claim type="submit" accesskey=[key.then_some("c")]
                aria-label={ "Claim appeal " (appeal.id) " on " (appeal.entity) } {
                "Claim" @if key { " " kbd { "C" } }
            }
        }
    }
}

/// What the contested decision did: the status it found and the one it set.
fn decision(appeal: &AppealRecord) -> Markup {
    html! { (layout::status(&appeal.previous_status)) " → " (layout::status(&appeal.status)) }
}

fn appeals_table(signed_in: &SignedInSession, appeals: &[AppealRecord]) -> Markup {
    let now = Utc::now();
    let first_claimable = appeals
        .iter()
        .find(|a| claimable(signed_in, a))
        .map(|a| a.id);
    html! {
        div.table-wrap {
            table.cards #appeals-items {
                caption { "Waiting, oldest first" }
                thead {
                    tr {
                        th scope="col" { "Waiting" }
                        th scope="col" { "Entity" }
                        th scope="col" { "Decided" }
                        th scope="col" { "Decision" }
                        th scope="col" { "Appellant" }
                        th scope="col" { "Claimed by" }
                        th scope="col" { span.muted { "Work" } }
                    }
                }
                tbody {
                    @for appeal in appeals {
                        tr data-appeal-id=(appeal.id) {
                            td data-label="Waiting" {
                                (layout::wait(now - appeal.created_at)) " " span.muted { "since " (layout::time(appeal.created_at)) }
                            }
                            td data-label="Entity" { (layout::entity_link(&appeal.entity)) }
                            td data-label="Decided" { (statements::decided_by(&appeal.decided_by, appeal.rule.as_deref())) }
                            td data-label="Decision" { (decision(appeal)) }
                            td.appellant data-label="Appellant" { (appeal.appellant) }
                            td.holder data-label="Claimed by" {
                                @match holder(appeal) {
                                    Some(who) => { (who) }
                                    None => span.muted { "nobody" },
                                }
                            }
                            td data-label="Work" {
                                @if mine(signed_in, appeal) {
                                    a.open href={ "/console/appeals/" (appeal.id) } { "Open #" (appeal.id) }
                                } @else if claimable(signed_in, appeal) {
                                    div.actions-row {
                                        (claim_form(signed_in, appeal, first_claimable == Some(appeal.id)))
                                        a.open href={ "/console/appeals/" (appeal.id) } { "Read #" (appeal.id) }
                                    }
                                } @else {
                                    a.open href={ "/console/appeals/" (appeal.id) } { "View #" (appeal.id) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The notice after a decision (`?done=<id>`), when the appeal shows it decided.
async fn done_notice(state: &ConsoleState, done: Option<&str>) -> Result<Markup, PageError> {
    let Some(id) = done.and_then(|raw| raw.parse::<i64>().ok()) else {
        return Ok(layout::done_notice(None));
    };
    let message = state.app.store.appeals().appeal(id).await?.and_then(|a| {
        Some(match a.outcome.as_deref()? {
            "upheld" => format!(
                "Appeal #{id} upheld: the decision on {} is reversed, and the platform is told.",
                a.entity
            ),
            _ => format!(
                "Appeal #{id} rejected: the decision on {} stands, and the platform is told.",
                a.entity
            ),
        })
    });
    Ok(layout::done_notice(message.as_deref()))
}

/// The list's query: where the page starts, and the appeal just decided.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[serde(default, deserialize_with = "after")]
    after: Option<i64>,
    #[serde(default, deserialize_with = "fields::optional_string")]
    done: Option<String>,
}

fn after<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    fields::position(d, "must be an appeal id (the Next link's)")
}

/// `GET /console/appeals`: the open appeals, oldest first.
pub async fn list(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PageQuery(ListQuery { after, done }): PageQuery<ListQuery>,
) -> Result<Markup, PageError> {
    let mut appeals = state
        .app
        .store
        .appeals()
        .list(Some(true), after, PAGE + 1)
        .await?;
    let more = appeals.len() as i64 > PAGE;
    appeals.truncate(PAGE as usize);
    let next = more.then(|| appeals.last().map(|a| a.id)).flatten();
    let body = html! {
        (done_notice(&state, done.as_deref()).await?)
        h1 { "Appeals" }
        p.muted {
            "Decisions their authors contest, forwarded by the platform, oldest first. A person decides each: "
            "claim one (no one else can decide it while your claim lasts, "
            (humantime::format_duration(state.app.review_claim)) "), read the appeal beside the statement of reasons, "
            "then uphold it (the decision is reversed) or reject it (it stands)."
        }
        p.muted.keys { (KEYS) }
        @if appeals.is_empty() {
            p.notice #appeals-empty { "No appeal waits." }
        } @else {
            (appeals_table(&signed_in, &appeals))
        }
        nav.pager aria-label="Pages" {
            @if after.is_some() {
                a href="/console/appeals" { "← Oldest" }
            } @else { span {} }
            @if let Some(next) = next {
                a #next-page rel="next" href={ "/console/appeals?" (page_query(&[], Some(("after", next)))) } { "Newer →" }
            }
        }
    };
    Ok(layout::page(&signed_in, Section::Appeals, "Appeals", body))
}

/// The decision form, for the moderator who holds the claim.
fn decide_form(
    state: &ConsoleState,
    signed_in: &SignedInSession,
    appeal: &AppealRecord,
    draft: &str,
) -> Markup {
    html! {
        section.card #decide aria-labelledby="decide-title" {
            h2 #decide-title { "Decide" }
            p.muted {
                "Uphold: the decision is reversed (back to " (appeal.previous_status)
                "), and automation does not redo it for "
                (humantime::format_duration(state.app.override_after_reversal))
                ". Reject: the decision stands, and the appeal is closed. Either way the platform gets your reason to tell the appellant."
            }
            form.stack method="post" action={ "/console/appeals/" (appeal.id) "/decide" } {
                (csrf::field(&signed_in.session))
                div.field {
                    label for="reason" { "Reason" }
                    textarea #reason name="reason" required maxlength="1000" { (draft) }
                }
                div.actions-row {
                    button #uphold type="submit" name="outcome" value="upheld" accesskey="u" { "Uphold " kbd { "U" } }
                    button.danger #reject type="submit" name="outcome" value="rejected" accesskey="r" { "Reject " kbd { "R" } }
                }
            }
        }
    }
}

/// `GET /console/appeals/{id}`: the appeal, the statement it contests, and for the
/// moderator who holds its claim, the decision form.
pub async fn appeal(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PagePath(AppealId(id)): PagePath<AppealId>,
    carried: Carried,
) -> Result<Markup, PageError> {
    let draft = carried.draft();
    let store = &state.app.store;
    let appeal = store
        .appeals()
        .appeal(id)
        .await?
        .ok_or_else(|| PageError::not_found(format!("There is no appeal {id}.")))?;
    let statement = store.statements().statement(appeal.statement_id).await?;
    let now = match EntityId::parse(&appeal.entity) {
        Ok(entity) => store.read().entity(&entity).await?.map(|e| e.status),
        Err(_) => None,
    };
    let title = format!("Appeal #{id}");
    let body = html! {
        h1 { "Appeal #" (id) " · " (appeal.entity) }
        section.card {
        dl.facts #appeal-facts {
            dt { "Entity" } dd { (layout::entity_link(&appeal.entity)) }
            dt { "Appellant" } dd #appellant { (appeal.appellant) }
            dt { "Submitted" } dd { (layout::time(appeal.created_at)) }
            dt { "Contests" } dd {
                "Statement #" (appeal.statement_id) ": "
                (statements::decided_by(&appeal.decided_by, appeal.rule.as_deref()))
                @if let Some(action) = appeal.action_id {
                    ", " a href={ "/console/actions/" (action) } { "action #" (action) }
                }
            }
            dt { "Decision" } dd { (decision(&appeal)) }
            dt { "Status now" } dd #status-now {
                @match now { Some(status) => (layout::status(status.as_str())), None => span.muted { "unknown" } }
            }
            dt { "Claimed by" } dd #claimed-by {
                @match (&appeal.claimed_by, appeal.claim_until) {
                    (Some(who), Some(until)) if appeal.outcome.is_none() => {
                        (who) " until " (layout::time(until))
                        @if until <= Utc::now() { " " span.tag { "ended" } }
                    }
                    _ => span.muted { "nobody" },
                }
            }
            @if let Some(outcome) = &appeal.outcome {
                dt { "Outcome" } dd #outcome {
                    strong { (outcome) }
                    @if let Some(by) = &appeal.decided_by_moderator { " by " (by) }
                    @if let Some(at) = appeal.decided_at { ", " (layout::time(at)) }
                    @if let Some(reason) = &appeal.decision_reason { ": " span #decision-reason { (reason) } }
                }
            }
        }
        }
        section.card aria-labelledby="text-title" {
            h2 #text-title { "The appellant's text" }
            p.user-text #appeal-text { (appeal.text) }
        }
        section.card aria-labelledby="statement-title" {
            h2 #statement-title { "The statement of reasons it contests" }
            @match &statement {
                Some(statement) => (statements::facts(statement)),
                None => p.muted { "Statement #" (appeal.statement_id) " was not found." },
            }
        }
        @if mine(&signed_in, &appeal) {
            (decide_form(&state, &signed_in, &appeal, &draft))
        } @else if claimable(&signed_in, &appeal) {
            (claim_form(&signed_in, &appeal, true))
        }
        @if appeal.outcome.is_none() { p.muted.keys { (KEYS) } }
        p { a href="/console/appeals" { "Back to the appeals" } }
    };
    Ok(layout::page(&signed_in, Section::Appeals, &title, body))
}

/// `POST /console/appeals/{id}/claim`: claims it for `review_claim` (again: extends one's own).
pub async fn claim(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PagePath(AppealId(id)): PagePath<AppealId>,
    Form(NoFields {}): Form<NoFields>,
) -> Result<Response, PageError> {
    appeals::claim(
        &state.app.store,
        id,
        &signed_in.user.name,
        state.app.review_claim,
    )
    .await?;
    Ok(Redirect::to(&format!("/console/appeals/{id}")).into_response())
}

/// The decision form of an appeal.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideForm {
    #[serde(deserialize_with = "fields::appeal_outcome")]
    outcome: AppealDecision,
    reason: Text,
}

/// `POST /console/appeals/{id}/decide` with `csrf`, `outcome` and `reason`.
pub async fn decide(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PagePath(AppealId(id)): PagePath<AppealId>,
    Form(DecideForm { outcome, reason }): Form<DecideForm>,
) -> Result<Response, PageError> {
    let app = &state.app;
    let rules = app.rules.current();
    let desk = AppealDesk {
        store: &app.store,
        queue: &app.queue,
        rules: &rules,
        demoter: &app.demoter,
        override_for: app.override_after_reversal,
    };
    appeals::decide(&desk, id, &signed_in.actor(), outcome, &reason).await?;
    tracing::info!(appeal = id, outcome = outcome.as_str(), token = %signed_in.user.token, "console appeal decision");
    Ok(Redirect::to(&format!("/console/appeals?done={id}")).into_response())
}
