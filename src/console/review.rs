//! Review: automated actions, newest first, filtered by rule, action, reversed or not, and time,
//! paged by a keyset cursor (`before=<id>`, on the primary key, so a page deep in a large table
//! costs what the first one does and stays put while new actions arrive). One action shows what
//! the rules saw beside what the entity has now, and may be reversed with a reason.

use axum::{
    extract::State,
    response::{IntoResponse, Redirect, Response},
};
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use serde::Deserialize;

use super::{
    ConsoleState, SignedInSession, csrf,
    entity::{override_form, signals_table},
    errors::PageError,
    forms::{Carried, Form, PagePath, PageQuery, ReasonForm, page_query, parse_utc},
    layout::{self, Section},
    review_queue::MAX_RULE_FILTER,
};
use crate::{
    domain::{SignalStats, Windows},
    moderation,
    request::{fields, path::ActionId},
    store::{ActionFilter, ActionRecord, ReversalRequest},
};

/// Actions per page.
const PAGE: i64 = 50;

/// The filters of the review queue, as the query string gives them.
#[derive(Debug, Default)]
struct Filters {
    rule: Option<String>,
    action: Option<String>,
    /// `standing` or `reversed`.
    reversed: Option<String>,
    since: Option<String>,
}

impl Filters {
    /// The query string of these filters (and a cursor).
    fn query(&self, before: Option<i64>) -> String {
        page_query(
            &[
                ("rule", &self.rule),
                ("action", &self.action),
                ("reversed", &self.reversed),
                ("since", &self.since),
            ],
            before.map(|id| ("before", id)),
        )
    }
}

/// The list's query: its filters and where the page starts.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewQuery {
    #[serde(
        default,
        deserialize_with = "fields::filter_text::<_, MAX_RULE_FILTER>"
    )]
    rule: Option<String>,
    #[serde(default, deserialize_with = "fields::action")]
    action: Option<String>,
    #[serde(default, deserialize_with = "standing_or_reversed")]
    reversed: Option<bool>,
    #[serde(default, deserialize_with = "since")]
    since: Option<(String, DateTime<Utc>)>,
    #[serde(default, deserialize_with = "before")]
    before: Option<i64>,
}

fn standing_or_reversed<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    fields::param(d, |raw| match raw.as_str() {
        "reversed" => Ok(true),
        "standing" => Ok(false),
        _ => Err("must be standing or reversed".to_owned()),
    })
}

/// A UTC time as typed (kept for the form and links) and as read.
fn since<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<(String, DateTime<Utc>)>, D::Error> {
    fields::param(d, |raw| {
        let since = parse_utc(&raw)
            .ok_or_else(|| "must be a UTC time such as 2026-12-01T10:00".to_owned())?;
        Ok((raw, since))
    })
}

fn before<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    fields::position(d, "must be an action id (the Older link's)")
}

fn read_filters(query: ReviewQuery) -> (Filters, ActionFilter) {
    let filter = ActionFilter {
        limit: PAGE + 1,
        rule: query.rule.clone(),
        action: query.action.clone(),
        reversed: query.reversed,
        since: query.since.as_ref().map(|(_, since)| *since),
        before: query.before,
        ..Default::default()
    };
    let filters = Filters {
        rule: query.rule,
        action: query.action,
        reversed: query
            .reversed
            .map(|reversed| if reversed { "reversed" } else { "standing" }.to_owned()),
        since: query.since.map(|(raw, _)| raw),
    };
    (filters, filter)
}

fn filter_form(state: &ConsoleState, filters: &Filters) -> Markup {
    let rules = state.app.rules.current();
    let selected = |field: &Option<String>, value: &str| field.as_deref() == Some(value);
    html! {
        form.filters.card method="get" action="/console/review" aria-label="Filter the actions" {
            div.field {
                label for="f-rule" { "Rule" }
                input #f-rule name="rule" type="text" list="rules-in-force" value=[filters.rule.as_deref()]
                    placeholder="any rule";
                datalist #rules-in-force {
                    @for rule in rules.rules() { option value=(rule.name) {} }
                }
            }
            div.field {
                label for="f-action" { "Action" }
                select #f-action name="action" {
                    option value="" { "any" }
                    @for action in ["flag", "hide", "suspend"] {
                        option value=(action) selected[selected(&filters.action, action)] { (action) }
                    }
                }
            }
            div.field {
                label for="f-reversed" { "Reversed" }
                select #f-reversed name="reversed" {
                    option value="" { "either" }
                    option value="standing" selected[selected(&filters.reversed, "standing")] { "standing" }
                    option value="reversed" selected[selected(&filters.reversed, "reversed")] { "reversed" }
                }
            }
            div.field {
                label for="f-since" { "Applied since (UTC)" }
                input #f-since name="since" type="datetime-local" step="1" value=[filters.since.as_deref()];
            }
            div.actions-row {
                button type="submit" { "Filter" }
                a.button.secondary href="/console/review" { "Clear" }
            }
        }
    }
}

fn actions_table(actions: &[ActionRecord]) -> Markup {
    html! {
        div.table-wrap {
            table.cards #actions {
                caption { "Automated actions, newest first" }
                thead {
                    tr {
                        th scope="col" { "Applied" }
                        th scope="col" { "Entity" }
                        th scope="col" { "Rule" }
                        th scope="col" { "Action" }
                        th scope="col" { "Status" }
                        th scope="col" { "Reason" }
                        th scope="col" { "Reversed" }
                        th scope="col" { span.muted { "Open" } }
                    }
                }
                tbody {
                    @for action in actions {
                        tr data-action-id=(action.id) {
                            td data-label="Applied" { (layout::time(action.created_at)) }
                            td data-label="Entity" { (layout::entity_link(&action.entity)) }
                            td data-label="Rule" { code { (action.rule) } }
                            td data-label="Action" { (action.action) }
                            td data-label="Status" {
                                (layout::status(&action.previous_status)) " → " (layout::status(&action.new_status))
                            }
                            td data-label="Reason" { (action.reason) }
                            td data-label="Reversed" {
                                @match (&action.reversed_at, &action.reversed_by) {
                                    (Some(at), Some(by)) => { "by " (by) ", " (layout::time(*at)) }
                                    _ => span.muted { "standing" },
                                }
                            }
                            td data-label="Open" {
                                a.open href={ "/console/actions/" (action.id) }
                                    aria-label={ "Open action " (action.id) " on " (action.entity) } {
                                    "Open #" (action.id)
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `GET /console/review`: the queue.
pub async fn list(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PageQuery(query): PageQuery<ReviewQuery>,
) -> Result<Markup, PageError> {
    let (filters, filter) = read_filters(query);
    let mut actions = state.app.store.read().actions(&filter).await?;
    let more = actions.len() as i64 > PAGE;
    actions.truncate(PAGE as usize);
    let older = more.then(|| actions.last().map(|a| a.id)).flatten();
    let body = html! {
        h1 { "Review" }
        p.muted { "What automation did, newest first. Open an action to see the snapshot it was decided on and to reverse it." }
        (filter_form(&state, &filters))
        @if actions.is_empty() {
            p.notice #no-actions { "No automated action matches these filters." }
        } @else {
            (actions_table(&actions))
        }
        nav.pager aria-label="Pages" {
            @if filter.before.is_some() {
                a href={ "/console/review?" (filters.query(None)) } { "← Newest" }
            } @else { span {} }
            @if let Some(older) = older {
                a #older rel="next" href={ "/console/review?" (filters.query(Some(older))) } { "Older →" }
            }
        }
    };
    Ok(layout::page(&signed_in, Section::Review, "Review", body))
}

/// The signals of a stored snapshot (the JSON of `domain::Snapshot`).
fn snapshot_signals(
    snapshot: &serde_json::Value,
) -> std::collections::BTreeMap<String, SignalStats> {
    serde_json::from_value(snapshot["signals"].clone()).unwrap_or_default()
}

/// `GET /console/actions/{id}`: one action, what it was decided on, and what can be done.
pub async fn action(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PagePath(ActionId(id)): PagePath<ActionId>,
    carried: Carried,
) -> Result<Markup, PageError> {
    let action = state
        .app
        .store
        .console()
        .action(id)
        .await?
        .ok_or_else(|| PageError::not_found(format!("There is no action {id}.")))?;
    let entity = crate::domain::EntityId::parse(&action.entity).map_err(|e| {
        PageError::internal(crate::store::StoreError::corrupt("an action's entity", e))
    })?;
    let now = state
        .app
        .store
        .read()
        .entity_with(&entity, true, &Windows::ALL)
        .await?;
    // Only what the action itself shows: `?done=reversed` on a standing action says nothing.
    let done = carried.done.as_deref().and_then(|done| match done {
        "reversed" if action.reversed_at.is_some() => Some("Reversed. The entity is back to its previous status, and an override keeps automation from redoing the action."),
        _ => None,
    });
    let draft = carried.draft();
    let then = &action.snapshot;
    let reversible = action.reversed_at.is_none()
        && now
            .as_ref()
            .is_some_and(|now| now.moderation_version == action.applied_version + 1);
    let title = format!("{} on {}", action.action, action.entity);
    let body = html! {
        (layout::done_notice(done))
        h1 { (action.action) " on " (layout::entity_link(&action.entity)) }
        section.card {
            dl.facts #action-facts {
                dt { "Rule" } dd { code { (action.rule) } }
                dt { "Reason" } dd #action-reason { (action.reason) }
                dt { "Status" } dd { (layout::status(&action.previous_status)) " → " (layout::status(&action.new_status)) }
                dt { "Applied" } dd { (layout::time(action.created_at)) " on version " (action.applied_version) }
                dt { "Dedup key" } dd { code { (action.dedup_key) } }
                dt { "Reversed" } dd #action-reversed {
                    @match (&action.reversed_at, &action.reversed_by) {
                        (Some(at), Some(by)) => {
                            "by " strong { (by) } ", " (layout::time(*at))
                            @if let Some(reason) = &action.reversal_reason { ": " span #reversal-reason { (reason) } }
                        }
                        _ => "no",
                    }
                }
            }
        }
        div.grid {
            section.card #snapshot-then aria-labelledby="then-title" {
                h2 #then-title { "What the rules saw" }
                p.muted {
                    "Version " (then["moderation_version"].as_i64().unwrap_or_default())
                    ", status " (then["status"].as_str().unwrap_or("?"))
                    ", " (then["event_count"].as_i64().unwrap_or_default()) " events"
                    @if let Some(at) = then["taken_at"].as_str().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()) {
                        ", read " (layout::time(at.to_utc()))
                    }
                    @if let Some(cap) = then["override_cap"].as_str() { ", override cap " (cap) }
                }
                (signals_table("then", &snapshot_signals(then)))
            }
            section.card #snapshot-now aria-labelledby="now-title" {
                h2 #now-title { "The entity now" }
                @match &now {
                    Some(now) => {
                        p.muted {
                            "Version " (now.moderation_version) ", status " (now.status.as_str())
                            ", " (now.event_count) " events"
                        }
                        (signals_table("now", &now.signals))
                    }
                    None => p.muted { "The entity has no record any more." },
                }
            }
        }
        @if reversible {
            section.card #reverse aria-labelledby="reverse-title" {
                h2 #reverse-title { "Reverse this action" }
                p {
                    "The entity goes back to " (layout::status(&action.previous_status))
                    " and automation is held back from redoing this for "
                    (humantime::format_duration(state.app.override_after_reversal))
                    ". Your name and reason are recorded."
                }
                form.stack method="post" action={ "/console/actions/" (action.id) "/reverse" } {
                    (csrf::field(&signed_in.session))
                    div.field {
                        label for="reason" { "Reason" }
                        textarea #reason name="reason" required maxlength="1000" { (draft) }
                    }
                    div { button.danger type="submit" { "Reverse" } }
                }
            }
        } @else if action.reversed_at.is_none() {
            p.notice #not-reversible {
                "This action was superseded: the entity changed after it, and only its latest action can be reversed. Set an override instead."
            }
        }
        @if let Some(now) = &now {
            (override_form(&signed_in, &action.entity, now.status))
        }
    };
    Ok(layout::page(&signed_in, Section::Review, &title, body))
}

/// `POST /console/actions/{id}/reverse` with `csrf` and `reason`.
pub async fn reverse(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PagePath(ActionId(id)): PagePath<ActionId>,
    Form(ReasonForm { reason }): Form<ReasonForm>,
) -> Result<Response, PageError> {
    let app = &state.app;
    let override_for = app.override_after_reversal;
    let by = signed_in.actor();
    let request = ReversalRequest {
        id,
        by: &by,
        reason: &reason,
        override_for,
        appeal: None,
    };
    moderation::reverse(&app.store, &app.queue, &app.demoter, request).await?;
    tracing::info!(action = id, token = %signed_in.user.token, "console reversal");
    Ok(Redirect::to(&format!("/console/actions/{id}?done=reversed")).into_response())
}
