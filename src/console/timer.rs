//! An entity's effects beyond its status on its console page: the timed action in force (when
//! it ends, what its end restores, and the form that ends it early: a server-rendered form
//! with the session's CSRF field, like every other, as the console runs no script) and the
//! labels rules recorded on it.

use axum::{
    extract::State,
    response::{IntoResponse, Redirect, Response},
};
use chrono::Utc;
use maud::{Markup, html};

use super::{
    ConsoleState, SignedInSession, csrf,
    errors::PageError,
    forms::{Form, PagePath, ReasonForm},
    layout::{self},
};
use crate::{
    domain::{EntityId, OVERRIDE_TIMER, Timer},
    moderation,
    store::LabelRecord,
};

/// The labels recorded on the entity, each with the rule that gave it and when.
pub fn labels(labels: &[LabelRecord]) -> Markup {
    html! {
        @if labels.is_empty() {
            p #labels.muted { "No labels." }
        } @else {
            section.card #labels aria-labelledby="labels-title" {
                h2 #labels-title { "Labels" }
                ul {
                    @for l in labels {
                        li.label data-label=(l.label) {
                            span.tag { (l.label) } " by rule " code { (l.rule) } ", "
                            (layout::time(l.created_at)) ": " (l.reason)
                        }
                    }
                }
            }
        }
    }
}

/// The timer in force on `entity`, with the form that ends it now (its reason filled in with
/// `reason`: one written before the session ended, else empty); a line saying there is none
/// otherwise.
pub fn block(
    signed_in: &SignedInSession,
    entity: &str,
    timer: &Option<Timer>,
    reason: &str,
) -> Markup {
    html! {
        @match timer {
            Some(t) => {
                section.card #timer aria-labelledby="timer-title" {
                    h2 #timer-title { "Timed action" }
                    p {
                        @if t.set_by == OVERRIDE_TIMER {
                            "A timed override"
                        } @else {
                            "Set by rule " code.timer-rule { (t.set_by) }
                            @if let Some(id) = t.action_id {
                                " (" a href={ "/console/actions/" (id) } { "action #" (id) } ")"
                            }
                        }
                        "; it ends " span.timer-ends { (layout::time(t.ends_at)) }
                        @if t.ends_at <= Utc::now() { " " span.tag { "due: restoring" } }
                        " and restores " (layout::status(t.restores_to.as_str())) "."
                    }
                    form.stack method="post" action={ "/console/entities/" (entity) "/timer/end" } {
                        (csrf::field(&signed_in.session))
                        div.field {
                            label for="timer-reason" { "Reason" }
                            textarea #timer-reason name="reason" required maxlength="1000" { (reason) }
                        }
                        div { button type="submit" { "End it now" } }
                    }
                }
            }
            None => p #timer.muted { "No timed action is in force." },
        }
    }
}

/// `POST /console/entities/{entity}/timer/end` with `csrf` and `reason`.
pub async fn end(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PagePath(entity): PagePath<EntityId>,
    Form(ReasonForm { reason }): Form<ReasonForm>,
) -> Result<Response, PageError> {
    moderation::end_timer(
        &state.app.store,
        &state.app.queue,
        &entity,
        &signed_in.actor(),
        &reason,
    )
    .await?;
    tracing::info!(%entity, token = %signed_in.user.token, "console ended a timer");
    Ok(Redirect::to(&format!("/console/entities/{entity}?done=timer")).into_response())
}
