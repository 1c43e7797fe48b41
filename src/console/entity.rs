//! One entity: its status and override, its schedule, events per minute per signal, its
//! evaluations (`evaluations.rs`: on which snapshot, what matched live, was exempted or matched
//! in shadow, what was decided and why nothing was), its actions and the moderators' decisions
//! on it, its statements of reasons with their appeals (`statements.rs`), its latest events,
//! and the derived signals on its author. A moderator may set an override from here.

use std::collections::BTreeMap;

use axum::{
    extract::State,
    response::{IntoResponse, Redirect, Response},
};
use chrono::{Duration, Utc};
use maud::{Markup, html};
use serde::Deserialize;

use super::{
    ConsoleState, SignedInSession, charts, csrf,
    errors::PageError,
    forms::{Form, PagePath, PageQuery, parse_until},
    layout::{self, Section},
};
use crate::{
    domain::{DAY_WINDOWS, EntityId, SignalStats, Status, WINDOWS, Windows},
    moderation::{self, OverrideRequest},
    request::fields::{self, Text},
    store::{Override, StatementFilter},
};

/// Rows of each history list on the page.
const HISTORY: i64 = 20;
/// The statements read to show the latest [`HISTORY`] (the store lists them oldest first);
/// past this many, the page shows the latest of the first ones (`GET /v1/statements` pages
/// through all).
const STATEMENT_SCAN: i64 = 500;
/// The chart's periods, in minutes (minute buckets are kept for 24 hours).
const PERIODS: [(i64, &str); 3] = [
    (60, "last hour"),
    (360, "last 6 hours"),
    (1440, "last 24 hours"),
];

/// A table of signal figures: totals, distinct actors and the trailing windows.
pub fn signals_table(id: &str, signals: &BTreeMap<String, SignalStats>) -> Markup {
    html! {
        @if signals.is_empty() {
            p.muted { "No signals." }
        } @else {
            div.table-wrap {
                table.cards id={ "signals-" (id) } {
                    thead {
                        tr {
                            th scope="col" { "Signal" }
                            th.num scope="col" { "Count" }
                            th.num scope="col" { "Weight" }
                            th.num scope="col" { "Distinct actors" }
                            @for (window, _) in WINDOWS.iter().chain(&DAY_WINDOWS) { th.num scope="col" { "Last " (window) } }
                        }
                    }
                    tbody {
                        @for (signal, stats) in signals {
                            tr data-signal=(signal) {
                                th scope="row" data-label="Signal" { code { (signal) } }
                                td.num.count data-label="Count" { (stats.count) }
                                td.num.weight data-label="Weight" { (format!("{:.2}", stats.weight)) }
                                td.num.actors data-label="Distinct actors" {
                                    @match stats.actors { Some(n) => (n), None => span.muted { "not counted" } }
                                }
                                @for (window, _) in WINDOWS.iter().chain(&DAY_WINDOWS) {
                                    td.num data-label={ "Last " (window) } {
                                        @match stats.windows.get(*window) {
                                            Some(w) => (w.count),
                                            None => span.muted { "–" },
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

/// The form that sets an override on `entity`.
pub fn override_form(signed_in: &SignedInSession, entity: &str, current: Status) -> Markup {
    override_form_with(signed_in, entity, current, "")
}

/// The override form with its reason filled in (one written before the session ended).
pub fn override_form_with(
    signed_in: &SignedInSession,
    entity: &str,
    current: Status,
    reason: &str,
) -> Markup {
    html! {
        section.card #set-override aria-labelledby="override-title" {
            h2 #override-title { "Set an override" }
            p.muted { "Sets the status now; automation may not go past it until the override ends." }
            form.stack method="post" action={ "/console/entities/" (entity) "/override" } {
                (csrf::field(&signed_in.session))
                div.field {
                    label for="override-status" { "Status" }
                    select #override-status name="status" {
                        @for status in [Status::Visible, Status::Flagged, Status::Hidden, Status::Suspended] {
                            option value=(status.as_str()) selected[status == current] { (status.as_str()) }
                        }
                    }
                }
                div.field {
                    label for="override-until" { "Until" }
                    span.hint #until-hint { "A duration such as 24h or 7days, or a UTC time such as 2026-12-31 18:00; empty: 7 days." }
                    input #override-until name="until" type="text" placeholder="7days" aria-describedby="until-hint";
                }
                div.field {
                    label for="override-reason" { "Reason" }
                    textarea #override-reason name="reason" required maxlength="1000" { (reason) }
                }
                div { button type="submit" { "Set override" } }
            }
        }
    }
}

fn override_block(decision: &Option<Override>) -> Markup {
    let now = Utc::now();
    html! {
        @match decision {
            Some(o) => {
                p #override {
                    "Override: " (layout::status(o.status.as_str())) " until " (layout::time(o.until))
                    @if o.until > now { " " span.tag { "in force" } } @else { " " span.tag { "ended" } }
                    ", set by " strong.override-by { (o.by) } ": " span.override-reason { (o.reason) }
                }
            }
            None => p #override.muted { "No override has been set." },
        }
    }
}

/// The page's query: the chart's period, a notice, and a reason carried through signing in
/// again.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntityQuery {
    #[serde(default = "default_minutes", deserialize_with = "minutes")]
    minutes: i64,
    #[serde(default, deserialize_with = "fields::optional_string")]
    done: Option<String>,
    #[serde(default, deserialize_with = "fields::optional_string")]
    override_reason: Option<String>,
    #[serde(default, deserialize_with = "fields::optional_string")]
    timer_reason: Option<String>,
}

fn default_minutes() -> i64 {
    60
}

fn minutes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    fields::parsed(d, |raw| {
        raw.parse::<i64>()
            .ok()
            .filter(|m| PERIODS.iter().any(|(p, _)| p == m))
            .ok_or_else(|| "must be 60, 360 or 1440".to_owned())
    })
}

/// `GET /console/entities/{entity}?minutes=60`.
pub async fn page(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PagePath(entity): PagePath<EntityId>,
    PageQuery(query): PageQuery<EntityQuery>,
) -> Result<Markup, PageError> {
    let minutes = query.minutes;
    let store = &state.app.store;
    let labels = store.read().labels_of(&entity).await?;
    let record = store
        .read()
        .entity_with(&entity, true, &Windows::ALL)
        .await?
        .ok_or_else(|| {
            PageError::not_found(format!("No events were ever recorded for {entity}."))
        })?;
    let to = record.read_at;
    let from = to - Duration::minutes(minutes);
    let statement_filter = StatementFilter {
        entity: Some(entity.as_str().to_owned()),
        limit: STATEMENT_SCAN,
        ..Default::default()
    };
    let (per_minute, evaluations, actions, decisions, events, mut statements, appeals) = tokio::try_join!(
        store.console().entity_minutes(&entity, from),
        store.read().entity_evaluations(&entity, None, HISTORY),
        store.console().entity_actions(&entity, HISTORY),
        store.console().entity_decisions(&entity, HISTORY),
        store.console().entity_events(&entity, HISTORY),
        store.statements().list(&statement_filter),
        store.appeals().appeals_of_entity(entity.as_str()),
    )?;
    // Newest first, as the page's other lists.
    statements.reverse();
    let more_statements = statements.len() > HISTORY as usize;
    statements.truncate(HISTORY as usize);
    let statements = super::statements::with_appeals(statements, &appeals);
    let author = match record
        .author
        .as_deref()
        .and_then(|a| EntityId::parse(a).ok())
    {
        Some(author) => store.read().entity(&author).await?.map(|r| (author, r)),
        None => None,
    };
    // The schedule is Redis': without it the page still shows what Postgres knows.
    let schedule = state.app.queue.state_of(&entity).await.ok();
    let millis = |ms: i64| chrono::DateTime::<Utc>::from_timestamp_millis(ms);
    // A reason written before the session ended, carried through signing in again
    // (`signin::resume`); shown to send again, never sent by itself.
    let draft = |reason: &Option<String>| -> String {
        reason
            .as_deref()
            .unwrap_or_default()
            .chars()
            .take(1000)
            .collect()
    };
    // A notice only when the page shows the same: an override in force, or no timer left and
    // the latest decision the ending of one.
    let done = query.done.as_deref().and_then(|done| match done {
        "override"
            if record
                .override_decision
                .as_ref()
                .is_some_and(|o| o.until > Utc::now()) =>
        {
            Some("Override set.")
        }
        "timer"
            if record.timer.is_none()
                && decisions.first().is_some_and(|d| d.kind == "timer_end") =>
        {
            Some("Timed action ended: restored.")
        }
        _ => None,
    });
    let body = html! {
        (layout::done_notice(done))
        h1 { (entity) " " span #entity-status { (layout::status(record.status.as_str())) } }
        section.card {
            dl.facts #entity-facts {
                dt { "Kind" } dd { (record.kind) }
                dt { "Moderation version" } dd { (record.moderation_version) }
                dt { "Events" } dd { (record.event_count) " recorded, the last " (layout::time(record.last_event_at)) }
                dt { "Evaluations" } dd #evaluation-count {
                    (record.evaluation_count) ", the last " (layout::maybe_time(record.last_evaluated_at))
                    " (saw " (record.evaluated_event_count) " events)"
                }
                dt { "Schedule" } dd {
                    @match schedule {
                        Some(s) => {
                            @if let Some(at) = s.due_at_ms.and_then(millis) { "due " (layout::time(at)) } @else { "not due" }
                            @if s.lease_until_ms.is_some() { ", being evaluated" }
                        }
                        None => span.muted { "unknown: Redis did not answer" },
                    }
                }
                @if let Some(author) = &record.author {
                    dt { "Author" } dd { (layout::entity_link(author)) }
                }
            }
            (override_block(&record.override_decision))
        }
        (super::timer::block(&signed_in, entity.as_str(), &record.timer, &draft(&query.timer_reason)))
        (super::timer::labels(&labels))
        section.card aria-labelledby="chart-title" {
            h2 #chart-title { "Events per minute" }
            form.filters method="get" action={ "/console/entities/" (entity) } {
                div.field {
                    label for="minutes" { "Period" }
                    select #minutes name="minutes" {
                        @for (m, label) in PERIODS { option value=(m) selected[m == minutes] { (label) } }
                    }
                }
                div { button.secondary type="submit" { "Show" } }
            }
            (charts::events_per_minute(&per_minute, from, to))
        }
        section.card aria-labelledby="signals-title" {
            h2 #signals-title { "Signals now" }
            (signals_table("current", &record.signals))
        }
        section.card aria-labelledby="evaluations-title" {
            h2 #evaluations-title { "Evaluations" }
            (super::evaluations::list(&evaluations, &state.app.rules.current()))
        }
        section.card aria-labelledby="actions-title" {
            h2 #actions-title { "Actions and reversals" }
            @if actions.is_empty() { p.muted { "No automated action." } }
            ul #entity-actions {
                @for a in &actions {
                    li {
                        a href={ "/console/actions/" (a.id) } { (a.action) " #" (a.id) } " by " code { (a.rule) }
                        ", " (layout::time(a.created_at)) ": " (a.reason)
                        @if let (Some(at), Some(by)) = (&a.reversed_at, &a.reversed_by) {
                            " — reversed by " strong { (by) } " " (layout::time(*at))
                            @if let Some(reason) = &a.reversal_reason { ": " (reason) }
                        }
                    }
                }
            }
            h3 { "Moderators' decisions" }
            @if decisions.is_empty() { p.muted { "None." } }
            ul #decisions {
                @for d in &decisions {
                    li {
                        (d.kind) " to " (layout::status(&d.status)) " by " strong.decision-by { (d.moderator) }
                        ", " (layout::time(d.created_at))
                        @if let Some(until) = d.until { ", until " (layout::time(until)) }
                        ": " span.decision-reason { (d.reason) }
                    }
                }
            }
        }
        (super::statements::section(&statements, more_statements))
        section.card aria-labelledby="events-title" {
            h2 #events-title { "Latest events" }
            @if events.is_empty() { p.muted { "None retained." } } @else {
                div.table-wrap {
                    table.cards #events {
                        thead { tr { th scope="col" { "Received" } th scope="col" { "Signal" } th scope="col" { "Actor" } th.num scope="col" { "Weight" } th scope="col" { "Event id" } } }
                        tbody {
                            @for e in &events {
                                tr {
                                    td data-label="Received" { (layout::time(e.received_at)) }
                                    td data-label="Signal" { code { (e.signal) } }
                                    td.actor data-label="Actor" { @match &e.actor { Some(a) => (a), None => span.muted { "none" } } }
                                    td.num data-label="Weight" { (e.weight) }
                                    td data-label="Event id" { code { (e.id) } }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if let Some((author, author_record)) = &author {
            section.card #author aria-labelledby="author-title" {
                h2 #author-title { "Its author, " (layout::entity_link(author.as_str())) }
                p { "Status " (layout::status(author_record.status.as_str())) ". Signals quiesce derived from automated actions on the author's entities:" }
                @let derived: BTreeMap<String, SignalStats> = author_record.signals.iter()
                    .filter(|(signal, _)| signal.starts_with("auto."))
                    .map(|(s, v)| (s.clone(), v.clone())).collect();
                (signals_table("author", &derived))
            }
        }
        (override_form_with(&signed_in, entity.as_str(), record.status, &draft(&query.override_reason)))
    };
    Ok(layout::page(
        &signed_in,
        Section::Review,
        entity.as_str(),
        body,
    ))
}

/// The override form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideForm {
    #[serde(deserialize_with = "fields::status")]
    status: Status,
    /// A duration from now or a UTC time; none: the default.
    #[serde(default, deserialize_with = "until")]
    until: Option<chrono::DateTime<Utc>>,
    reason: Text,
}

fn until<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<chrono::DateTime<Utc>>, D::Error> {
    fields::optional(d, "must be a string", |raw| parse_until(&raw, Utc::now()))
}

/// `POST /console/entities/{entity}/override` with `csrf`, `status`, `until` and `reason`.
pub async fn override_status(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PagePath(entity): PagePath<EntityId>,
    Form(OverrideForm {
        status,
        until,
        reason,
    }): Form<OverrideForm>,
) -> Result<Response, PageError> {
    let by = signed_in.actor();
    let request = OverrideRequest {
        entity: &entity,
        by: &by,
        status,
        until,
        duration: None,
        reason: &reason,
    };
    let app = &state.app;
    moderation::override_status(
        &app.store,
        &app.queue,
        &app.rules.current(),
        request,
        app.override_after_reversal,
        None,
    )
    .await?;
    tracing::info!(%entity, status = status.as_str(), token = %signed_in.user.token, "console override");
    Ok(Redirect::to(&format!("/console/entities/{entity}?done=override")).into_response())
}
