//! Signing in and out. A moderator signs in with their name (recorded with each decision they
//! take) and an API token of the moderator or admin role, checked against the tokens the API
//! takes (`credentials::Auth`); an ingest token is refused. The sign-in form carries the CSRF
//! token of an anonymous session, so another site cannot sign a browser in under its own token
//! either.

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, Uri, header},
    response::{IntoResponse, Redirect, Response},
};
use maud::{Markup, html};

use super::{
    ConsoleState, csrf,
    errors::PageError,
    forms::Fields,
    layout,
    session::{INSECURE_DEV, Session, SignedIn},
};
use crate::{
    audit::{self, Origin},
    credentials::Role,
    domain::{AuditAction, AuditEntry},
};

/// Where a sign-in goes when it names nowhere (or somewhere outside the console).
const HOME: &str = "/console/review";

/// `next`, if it is a page of the console; else the review queue. Only a path of ours: never
/// another origin (`//host`, `/\host`) or a scheme.
fn next_page(next: Option<&str>) -> String {
    match next {
        Some(next)
            if next.starts_with("/console/")
                && !next.starts_with("/console/login")
                && !next.contains("//")
                && !next.contains('\\')
                && next.chars().all(|c| c.is_ascii_graphic()) =>
        {
            next.to_owned()
        }
        _ => HOME.to_owned(),
    }
}

fn form_page(session: &Session, next: &str, enforced: bool, notice: Option<&str>) -> Markup {
    layout::bare(
        "Sign in",
        html! {
            section.card.signin {
                h1 { "Sign in to the moderator console" }
                @if let Some(notice) = notice {
                    p.notice.ok role="status" { (notice) }
                }
                form.stack method="post" action="/console/login" {
                    (csrf::field(session))
                    input type="hidden" name="next" value=(next);
                    div.field {
                        label for="name" { "Your name" }
                        span.hint #name-hint { "Recorded with every reversal and override you make." }
                        input #name name="name" type="text" required autocomplete="name"
                            maxlength="1000" aria-describedby="name-hint";
                    }
                    div.field {
                        label for="token" { "API token" }
                        span.hint #token-hint {
                            @if enforced {
                                "A moderator or admin token (an ingest token cannot sign in)."
                            } @else {
                                "No tokens are configured (--insecure-dev): leave it empty to sign in as an admin."
                            }
                        }
                        @if enforced {
                            input #token name="token" type="password" required autocomplete="off"
                                aria-describedby="token-hint";
                        } @else {
                            input #token name="token" type="password" autocomplete="off"
                                aria-describedby="token-hint";
                        }
                    }
                    div { button type="submit" { "Sign in" } }
                }
            }
        },
    )
}

/// `GET /console/login?next=`: the form, with an anonymous session for its CSRF token (a
/// signed-in visitor goes straight on).
pub async fn form(State(state): State<ConsoleState>, uri: Uri, headers: HeaderMap) -> Response {
    let query = Fields::from_query(uri.query()).unwrap_or_default();
    let next = next_page(query.get("next"));
    let existing = state.sessions.read(&headers);
    if let Some(session) = &existing
        && let Some(user) = &session.user
        && state.app.auth.still_configured(user.role, &user.token)
    {
        return Redirect::to(&next).into_response();
    }
    let notice = query.get("signed_out").map(|_| "You are signed out.");
    let session = existing
        .filter(|s| s.user.is_none())
        .unwrap_or_else(|| state.sessions.anonymous());
    let page = form_page(&session, &next, state.app.auth.enforced(), notice);
    (
        [(
            header::SET_COOKIE,
            state.sessions.set_cookie(&session, &headers),
        )],
        page,
    )
        .into_response()
}

/// `POST /console/login` with `csrf`, `name`, `token` and `next`.
pub async fn sign_in(
    State(state): State<ConsoleState>,
    origin: Origin,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, PageError> {
    let Some(session) = state.sessions.read(&headers) else {
        return Err(PageError::forbidden(
            "The sign-in form has expired, or the browser did not send its cookie. Open the sign-in page again.",
        ));
    };
    let fields = Fields::posted(&headers, &body, &session, &["name", "token", "next"])?;
    let name = fields.text("name")?;
    let auth = &state.app.auth;
    let user = if !auth.enforced() {
        SignedIn {
            role: Role::Admin,
            name,
            token: INSECURE_DEV.to_owned(),
        }
    } else {
        let presented = fields
            .optional("token")
            .ok_or_else(|| PageError::bad_field("token", "is required"))?;
        let Some(token) = auth.identify(presented) else {
            tracing::info!("console sign-in refused: not a configured token");
            return Err(PageError::new(
                StatusCode::UNAUTHORIZED,
                "Not signed in",
                "token is not a valid API token. Nothing was changed.",
            )
            .with_field("token"));
        };
        if token.role == Role::Ingest {
            tracing::info!(token = %token.label(), "console sign-in refused: an ingest token");
            return Err(PageError::forbidden(
                "token is an ingest token, which may only send events; the console needs a moderator or admin token.",
            )
            .with_field("token"));
        }
        SignedIn {
            role: token.role,
            name,
            token: token.label(),
        }
    };
    tracing::info!(role = user.role.as_str(), token = %user.token, "console sign-in");
    let actor = origin.actor(&user.name, Some(&user.token), Some(user.role.as_str()));
    audit::record(
        &state.app.store,
        &actor,
        session_entry(AuditAction::SignIn, &user),
    )
    .await;
    let signed_in = state.sessions.signed_in(user);
    Ok((
        [(
            header::SET_COOKIE,
            state.sessions.set_cookie(&signed_in, &headers),
        )],
        Redirect::to(&next_page(fields.get("next"))),
    )
        .into_response())
}

/// `POST /console/logout` with `csrf`: the cookie is cleared (a copy kept elsewhere still
/// verifies until it expires or the key changes; see SECURITY.md).
pub async fn sign_out(
    State(state): State<ConsoleState>,
    origin: Origin,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, PageError> {
    let session = state
        .sessions
        .read(&headers)
        .ok_or_else(PageError::signed_out)?;
    let fields = Fields::from_form(&headers, &body)?;
    csrf::check(&session, fields.get(csrf::FIELD))?;
    if let Some(user) = &session.user {
        let actor = origin.actor(&user.name, Some(&user.token), Some(user.role.as_str()));
        audit::record(
            &state.app.store,
            &actor,
            session_entry(AuditAction::SignOut, user),
        )
        .await;
    }
    Ok((
        [(header::SET_COOKIE, state.sessions.clear_cookie(&headers))],
        Redirect::to("/console/login?signed_out=1"),
    )
        .into_response())
}

/// A sign-in or sign-out as the audit trail records it: the subject is the token's label
/// (never the token), the name the moderator gave is the actor.
fn session_entry(action: AuditAction, user: &SignedIn) -> AuditEntry {
    AuditEntry {
        action,
        subject: user.token.clone(),
        before: None,
        after: Some(serde_json::json!({ "role": user.role.as_str() })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sign_in_goes_only_to_a_console_page() {
        assert_eq!(
            next_page(Some("/console/entities/post:1")),
            "/console/entities/post:1"
        );
        assert_eq!(
            next_page(Some("/console/review?rule=a&before=5")),
            "/console/review?rule=a&before=5"
        );
        for elsewhere in [
            "https://evil.example/",
            "//evil.example/console/",
            "/console//evil.example",
            "/console/\\evil",
            "/v1/actions",
            "/console/login",
            "/console/a b",
        ] {
            assert_eq!(next_page(Some(elsewhere)), HOME, "{elsewhere}");
        }
        assert_eq!(next_page(None), HOME);
    }
}
