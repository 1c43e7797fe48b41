//! Operations, for admins: the schedule's depths (due, in flight, dead) and lag from Redis, the
//! evaluation rate and fire delay from Postgres, the outbox backlog, and the dead letters with
//! their reasons, from their durable record; redrive one, all, or those of one reason (the
//! store's redrive, as `POST /v1/dead-letters/...` does it). A moderator is refused (403).

use axum::{
    extract::State,
    response::{IntoResponse, Redirect, Response},
};
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use serde::Deserialize;

use super::{
    AdminSession, ConsoleState, csrf,
    errors::PageError,
    forms::{Form, NoFields, PagePath, PageQuery},
    layout::{self, Section},
};
use crate::{
    dead_letters::{self, DeadLetterError},
    domain::{AuditAction, DeadReason, EntityId},
    queue::ShardDepth,
    request::fields,
    store::{AuditFilter, DeadLetterKey},
};

/// Dead letters per page.
const PAGE: usize = 50;
const REASONS: [&str; 2] = ["fatal", "attempts_exhausted"];

fn redrive_error(error: DeadLetterError) -> PageError {
    match error {
        DeadLetterError::Store(error) => error.into(),
        DeadLetterError::Queue(error) => PageError::unavailable(error),
    }
}

fn millis(ms: i64) -> Markup {
    match DateTime::<Utc>::from_timestamp_millis(ms) {
        Some(at) => layout::time(at),
        None => html! { span.muted { "unknown" } },
    }
}

fn delay(ms: Option<f64>) -> String {
    ms.map_or_else(|| "–".to_owned(), |ms| format!("{ms:.0} ms"))
}

/// Sums of the shards' depths: due, in flight, dead, and the oldest lag.
fn totals(depths: &[ShardDepth]) -> (u64, u64, u64, i64) {
    depths
        .iter()
        .fold((0, 0, 0, 0), |(due, inflight, dead, lag), d| {
            (
                due + d.due,
                inflight + d.inflight,
                dead + d.dead,
                lag.max(d.lag_ms),
            )
        })
}

/// The page's query: where the dead letters' page starts, and what was just done.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageParams {
    #[serde(default, deserialize_with = "dead_letter_key")]
    after: Option<DeadLetterKey>,
    #[serde(default, deserialize_with = "fields::optional_string")]
    done: Option<String>,
    /// What older redirects carried; it is not shown (see `last_redrive`).
    #[serde(
        default,
        rename = "count",
        deserialize_with = "fields::optional_string"
    )]
    _count: Option<String>,
}

fn dead_letter_key<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<DeadLetterKey>, D::Error> {
    fields::param(d, |raw| {
        DeadLetterKey::parse(&raw).ok_or_else(|| "must be the Next link's position".to_owned())
    })
}

/// `GET /console/operations?after=`.
pub async fn page(
    State(state): State<ConsoleState>,
    AdminSession(signed_in): AdminSession,
    PageQuery(PageParams { after, done, .. }): PageQuery<PageParams>,
) -> Result<Markup, PageError> {
    let done = match done.as_deref() {
        Some("redriven") => last_redrive(&state, &signed_in).await?,
        _ => None,
    };
    let app = &state.app;
    let (depths, draining) = tokio::join!(app.queue.depths(), app.queue.draining_depths());
    let (pace, backlog, dead) = tokio::try_join!(
        app.store.console().evaluation_pace(),
        app.store.outbox().outbox_backlog(),
        dead_letters::list(&app.store, after, PAGE),
    )?;
    let figure = |label: &str, id: &str, value: String| {
        html! { li { span.muted { (label) } strong id=(id) { (value) } } }
    };
    let body = html! {
        (layout::done_notice(done.as_deref()))
        h1 { "Operations" }
        p { a #audit-link href="/console/audit" { "Audit trail" } ": every decision, who made it and from where." }
        section aria-labelledby="schedule-title" {
            h2 #schedule-title { "Schedule" }
            @match &depths {
                Ok(depths) => {
                    @let (due, inflight, dead_count, lag) = totals(depths);
                    ul.figures {
                        (figure("Due", "depth-due", due.to_string()))
                        (figure("In flight", "depth-inflight", inflight.to_string()))
                        (figure("Dead letters (Redis)", "depth-dead", dead_count.to_string()))
                        (figure("Oldest due for", "lag", format!("{lag} ms")))
                        (figure("Shards", "shards", depths.len().to_string()))
                    }
                }
                Err(_) => p.notice.error { "Redis did not answer: the depths are unknown." },
            }
            @if let Ok(draining) = &draining && !draining.is_empty() {
                @let (due, inflight, dead_count, _) = totals(draining);
                p.notice {
                    "A shard count change is under way: the previous layout still holds "
                    (due) " due, " (inflight) " in flight and " (dead_count) " dead."
                }
            }
        }
        section aria-labelledby="pace-title" {
            h2 #pace-title { "Evaluations" }
            ul.figures {
                (figure("Evaluations per second (last minute)", "evaluation-rate", format!("{:.2}", pace.last_minute as f64 / 60.0)))
                (figure("Fire delay p50 (5 min)", "delay-p50", delay(pace.delay_p50_ms)))
                (figure("Fire delay p99 (5 min)", "delay-p99", delay(pace.delay_p99_ms)))
                (figure("Fire delay max (5 min)", "delay-max", delay(pace.delay_max_ms)))
                (figure("Outbox backlog", "outbox-backlog", backlog.to_string()))
            }
            p.muted { "Fire delay: how long after an entity fell due its evaluation started, over " (pace.delay_samples) " evaluations of the last five minutes." }
        }
        section.card aria-labelledby="dead-title" {
            h2 #dead-title { "Dead letters" }
            @if dead.entries.is_empty() && after.is_none() {
                p.muted #no-dead-letters { "None: every entity is being evaluated." }
            } @else {
                form.filters method="post" action="/console/dead-letters/redrive" {
                    (csrf::field(&signed_in.session))
                    div.field {
                        label for="redrive-reason" { "Redrive" }
                        select #redrive-reason name="reason" {
                            option value="" { "all dead letters" }
                            @for reason in REASONS { option value=(reason) { "those of reason " (reason) } }
                        }
                    }
                    div { button type="submit" { "Redrive" } }
                }
                div.table-wrap {
                    table.cards #dead-letters {
                        thead {
                            tr {
                                th scope="col" { "Entity" } th scope="col" { "Reason" } th.num scope="col" { "Attempts" }
                                th scope="col" { "Failures" } th scope="col" { "Last error" } th scope="col" { "Redrive" }
                            }
                        }
                        tbody {
                            @for entry in &dead.entries {
                                tr data-entity=(entry.entity) {
                                    td data-label="Entity" { (layout::entity_link(entry.entity.as_str())) br; span.muted { "dead since " (millis(entry.dead_lettered_at_ms)) } }
                                    td.reason data-label="Reason" { (entry.record.reason.map_or("attempts_exhausted", DeadReason::as_str)) }
                                    td.num data-label="Attempts" { (entry.record.attempts) }
                                    td data-label="Failures" { (millis(entry.record.first_failure_ms)) " to " (millis(entry.record.last_failure_ms)) }
                                    td.error data-label="Last error" { code { (entry.record.last_error) } }
                                    td data-label="Redrive" {
                                        form method="post" action={ "/console/dead-letters/" (entry.entity) "/redrive" } {
                                            (csrf::field(&signed_in.session))
                                            button.secondary type="submit" aria-label={ "Redrive " (entry.entity) } { "Redrive" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                nav.pager aria-label="Pages" {
                    @if after.is_some() { a href="/console/operations" { "← First" } } @else { span {} }
                    @if let Some(next) = dead.next {
                        a rel="next" href={ "/console/operations?after=" (next.encode()) } { "Next →" }
                    }
                }
            }
        }
    };
    Ok(layout::page(
        &signed_in,
        Section::Operations,
        "Operations",
        body,
    ))
}

/// How long after a redrive its notice still shows on a reload.
const NOTICE_FOR: chrono::Duration = chrono::Duration::minutes(2);

/// The notice after a redrive, from the audit trail rather than the address: the latest redrive
/// of this admin's (name and token) in the last minutes, and how many it made due. None when
/// there is none: `?done=redriven` alone says nothing.
async fn last_redrive(
    state: &ConsoleState,
    signed_in: &super::SignedInSession,
) -> Result<Option<String>, PageError> {
    let latest = state
        .app
        .store
        .audit()
        .audit_page(&AuditFilter {
            actor: Some(signed_in.user.name.clone()),
            action: Some(AuditAction::Redrive.as_str().to_owned()),
            subject: None,
            since: Some(Utc::now() - NOTICE_FOR),
            before: None,
            limit: 1,
        })
        .await?;
    Ok(latest
        .into_iter()
        .find(|r| r.credential.as_deref() == Some(signed_in.user.token.as_str()))
        .and_then(|r| r.after?.get("redriven")?.as_u64())
        .map(|n| format!("Redrove {n}: due again, with fresh attempts.")))
}

fn redriven() -> Response {
    Redirect::to("/console/operations?done=redriven").into_response()
}

/// `POST /console/dead-letters/{entity}/redrive` with `csrf`.
pub async fn redrive_one(
    State(state): State<ConsoleState>,
    AdminSession(signed_in): AdminSession,
    PagePath(entity): PagePath<EntityId>,
    Form(NoFields {}): Form<NoFields>,
) -> Result<Response, PageError> {
    let app = &state.app;
    let done = dead_letters::redrive(&app.store, &app.queue, &entity, &signed_in.actor())
        .await
        .map_err(redrive_error)?;
    if !done {
        return Err(PageError::not_found(format!(
            "{entity} is not dead-lettered."
        )));
    }
    tracing::info!(%entity, token = %signed_in.user.token, "console redrive");
    Ok(redriven())
}

/// The redrive form: the dead letters of one reason, or all.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedriveForm {
    #[serde(default, deserialize_with = "dead_reason")]
    reason: Option<String>,
}

fn dead_reason<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    const REFUSED: &str = "must be fatal, attempts_exhausted or empty (all)";
    fields::optional(d, REFUSED, |raw| {
        if REASONS.contains(&raw.as_str()) {
            Ok(raw)
        } else {
            Err(REFUSED.to_owned())
        }
    })
}

/// `POST /console/dead-letters/redrive` with `csrf` and `reason` (empty: all).
pub async fn redrive_many(
    State(state): State<ConsoleState>,
    AdminSession(signed_in): AdminSession,
    Form(RedriveForm { reason }): Form<RedriveForm>,
) -> Result<Response, PageError> {
    let reason = reason.as_deref();
    let app = &state.app;
    let count = dead_letters::redrive_all(&app.store, &app.queue, reason, &signed_in.actor())
        .await
        .map_err(redrive_error)?;
    tracing::info!(count, reason, token = %signed_in.user.token, "console redrive");
    Ok(redriven())
}
