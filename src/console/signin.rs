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
use serde::Deserialize;

use super::{
    ConsoleState, csrf,
    errors::PageError,
    forms::{NoFields, leniently, posted},
    layout,
    session::{INSECURE_DEV, MAX_COOKIE_BYTES, Session, SignedIn},
};
use crate::{
    audit::{self, Origin},
    credentials::Role,
    domain::{AuditAction, AuditEntry},
    request::fields::{self, Text},
};

/// The sign-in form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignInForm {
    name: Text,
    /// Required where tokens are (`Auth::enforced`).
    #[serde(default, deserialize_with = "fields::optional_string")]
    token: Option<String>,
    #[serde(default, deserialize_with = "fields::optional_string")]
    next: Option<String>,
}

/// What a refused sign-in keeps for the form shown again (and the sign-in page's query): the
/// name typed and the page asked for.
#[derive(Default, Deserialize)]
#[serde(default)]
struct Kept {
    name: Option<String>,
    next: Option<String>,
    signed_out: Option<String>,
}

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

/// What the sign-in form shows around its fields: a notice, or the error of the last attempt
/// (with the name typed, which is kept; the token never is).
#[derive(Default)]
struct Shown<'a> {
    notice: Option<&'a str>,
    error: Option<&'a PageError>,
    name: &'a str,
}

fn form_page(session: &Session, next: &str, enforced: bool, shown: Shown<'_>) -> Markup {
    layout::bare(
        "Sign in",
        html! {
            section.card.signin {
                h1 { "Sign in to the moderator console" }
                @if let Some(notice) = shown.notice {
                    p.notice.ok role="status" { (notice) }
                }
                @if let Some(error) = shown.error {
                    div.notice.error role="alert" {
                        p #error-message { (error.message) }
                        @if let Some(field) = &error.field {
                            p { "Field: " code #error-field { (field) } }
                        }
                    }
                }
                form.stack method="post" action="/console/login" {
                    (csrf::field(session))
                    input type="hidden" name="next" value=(next);
                    div.field {
                        label for="name" { "Your name" }
                        span.hint #name-hint { "Recorded with every reversal and override you make." }
                        input #name name="name" type="text" required autocomplete="name"
                            maxlength="1000" aria-describedby="name-hint" value=(shown.name);
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

/// The sign-in form again after a refused attempt: `error`'s status and message, the name and
/// the page asked for kept, the same anonymous session (its cookie is unchanged).
fn refused(state: &ConsoleState, session: &Session, kept: &Kept, error: PageError) -> Response {
    let next = next_page(kept.next.as_deref());
    let name = kept.name.as_deref().unwrap_or_default();
    let page = form_page(
        session,
        &next,
        state.app.auth.enforced(),
        Shown {
            error: Some(&error),
            name,
            ..Shown::default()
        },
    );
    (error.status, page).into_response()
}

/// `GET /console/login?next=`: the form, with an anonymous session for its CSRF token (a
/// signed-in visitor goes straight on).
pub async fn form(State(state): State<ConsoleState>, uri: Uri, headers: HeaderMap) -> Response {
    let query: Kept = leniently(uri.query().unwrap_or_default().as_bytes());
    let next = next_page(query.next.as_deref());
    let existing = state.sessions.read(&headers);
    if let Some(session) = &existing
        && let Some(user) = &session.user
        && state.app.auth.still_configured(user.role, &user.token)
    {
        return Redirect::to(&next).into_response();
    }
    let notice = query.signed_out.map(|_| "You are signed out.");
    let session = existing
        .filter(|s| s.user.is_none())
        .unwrap_or_else(|| state.sessions.anonymous());
    let page = form_page(
        &session,
        &next,
        state.app.auth.enforced(),
        Shown {
            notice,
            ..Shown::default()
        },
    );
    (
        [(
            header::SET_COOKIE,
            state.sessions.set_cookie(&session, &headers),
        )],
        page,
    )
        .into_response()
}

/// `POST /console/login` with `csrf`, `name`, `token` and `next`. An attempt first takes one
/// from its address's bucket ([`super::throttle`]); a refused one shows the form again with the
/// error, the name and `next` kept.
pub async fn sign_in(
    State(state): State<ConsoleState>,
    origin: Origin,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
    body: Bytes,
) -> Result<Response, PageError> {
    if let Err(too_many) = state.signins.check(&headers, &extensions) {
        tracing::info!(
            retry_after = too_many.retry_after,
            "console sign-in refused: too many attempts from one address"
        );
        return Ok(too_many.into_response());
    }
    let Some(session) = state.sessions.read(&headers) else {
        return Err(PageError::forbidden(
            "The sign-in form has expired, or the browser did not send its cookie. Open the sign-in page again.",
        ));
    };
    let kept: Kept = leniently(&body);
    let form = match posted::<SignInForm>(&headers, &body, &session) {
        Ok(form) => form,
        Err(error) if error.field.as_deref() == Some("name") => {
            return Ok(refused(&state, &session, &kept, error));
        }
        Err(error) => return Err(error),
    };
    let name = form.name.0;
    let auth = &state.app.auth;
    let user = if !auth.enforced() {
        SignedIn {
            role: Role::Admin,
            name,
            token: INSECURE_DEV.to_owned(),
        }
    } else {
        let Some(presented) = form.token.as_deref() else {
            let error = PageError::bad_field("token", "is required");
            return Ok(refused(&state, &session, &kept, error));
        };
        let Some(token) = auth.identify(presented) else {
            tracing::info!("console sign-in refused: not a configured token");
            let error = PageError::new(
                StatusCode::UNAUTHORIZED,
                "Not signed in",
                "token is not a valid API token. Nothing was changed.",
            )
            .with_field("token");
            return Ok(refused(&state, &session, &kept, error));
        };
        if token.role == Role::Ingest {
            tracing::info!(token = %token.label(), "console sign-in refused: an ingest token");
            let error = PageError::forbidden(
                "token is an ingest token, which may only send events; the console needs a moderator or admin token.",
            )
            .with_field("token");
            return Ok(refused(&state, &session, &kept, error));
        }
        SignedIn {
            role: token.role,
            name,
            token: token.label(),
        }
    };
    let signed_in = state.sessions.signed_in(user.clone());
    let cookie = state.sessions.set_cookie(&signed_in, &headers);
    // A browser drops a larger cookie without a word, and the moderator would stay signed out.
    if cookie.len() > MAX_COOKIE_BYTES {
        tracing::info!(
            bytes = cookie.len(),
            "console sign-in refused: the name makes the session cookie too large"
        );
        let error = PageError::bad_field(
            "name",
            &format!(
                "is too long to keep in the session cookie: a browser keeps at most {MAX_COOKIE_BYTES} bytes, and this name makes it {}. Use a shorter name (characters outside ASCII take 2 to 4 bytes each)",
                cookie.len()
            ),
        );
        return Ok(refused(&state, &session, &kept, error));
    }
    tracing::info!(role = user.role.as_str(), token = %user.token, "console sign-in");
    let actor = origin.actor(&user.name, Some(&user.token), Some(user.role.as_str()));
    audit::record(
        &state.app.store,
        &actor,
        session_entry(AuditAction::SignIn, &user),
    )
    .await;
    Ok((
        [(header::SET_COOKIE, cookie)],
        Redirect::to(&next_page(form.next.as_deref())),
    )
        .into_response())
}

/// Where a form posted to `path` (inside `/console`) came from, and the query field that page
/// fills its reason from: the page to return to after signing in again.
fn form_page_of(path: &str) -> (String, Option<&'static str>) {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["actions", id, "reverse"] => (format!("/console/actions/{id}"), Some("reason")),
        ["queue", id, "decide"] => (format!("/console/queue/{id}"), Some("reason")),
        ["queue", ..] => ("/console/queue".into(), None),
        ["appeals", id, "decide"] => (format!("/console/appeals/{id}"), Some("reason")),
        ["appeals", ..] => ("/console/appeals".into(), None),
        ["entities", entity, "override"] => (
            format!("/console/entities/{entity}"),
            Some("override_reason"),
        ),
        ["entities", entity, "timer", "end"] => {
            (format!("/console/entities/{entity}"), Some("timer_reason"))
        }
        ["dead-letters", ..] => ("/console/operations".into(), None),
        ["backtest", ..] => ("/console/backtest".into(), None),
        _ => (HOME.into(), None),
    }
}

/// Whether the browser says the form came from the console's own pages: `Sec-Fetch-Site:
/// same-origin`, or, where a browser sends no fetch metadata (plain HTTP to a host other than
/// localhost), an `Origin` naming the `Host` it was sent to.
fn from_our_pages(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    match text("sec-fetch-site") {
        Some(site) => site == "same-origin",
        None => match (text("origin"), text("host")) {
            (Some(origin), Some(host)) => origin
                .split_once("://")
                .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host)),
            _ => false,
        },
    }
}

/// A form posted (to `path`, inside `/console`) without a live session: nothing of it is done.
/// From the console's own pages, the sign-in form is shown, and after signing in the browser
/// returns to the form's page with the reason typed filled in again, to send with a fresh CSRF
/// token (the form itself is never replayed). From anywhere else (another site's form), only
/// the refusal: no cookie is set and nothing is carried.
pub async fn resume(
    state: &ConsoleState,
    path: &str,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Response {
    if !from_our_pages(headers) {
        return PageError::signed_out().into_response();
    }
    let Ok(body) = axum::body::to_bytes(body, super::forms::MAX_FORM_BYTES).await else {
        return PageError::too_large(super::forms::MAX_FORM_BYTES).into_response();
    };
    let (page, field) = form_page_of(path);
    let reason = form_urlencoded::parse(&body)
        .find(|(name, _)| name == "reason")
        .map(|(_, value)| value.trim().chars().take(1000).collect::<String>())
        .filter(|reason| !reason.is_empty());
    let next = match (field, reason) {
        (Some(field), Some(reason)) => {
            let query: String = form_urlencoded::Serializer::new(String::new())
                .append_pair(field, &reason)
                .finish();
            format!("{page}?{query}")
        }
        _ => page,
    };
    let session = state
        .sessions
        .read(headers)
        .filter(|s| s.user.is_none())
        .unwrap_or_else(|| state.sessions.anonymous());
    let error = PageError::new(
        StatusCode::UNAUTHORIZED,
        "Signed out",
        "Your console session has ended (or you never signed in), so nothing was changed. Sign in again: you will return to the page you were on, with what you wrote in its reason kept, to send it again.",
    );
    let page = form_page(
        &session,
        &next_page(Some(&next)),
        state.app.auth.enforced(),
        Shown {
            error: Some(&error),
            ..Shown::default()
        },
    );
    (
        StatusCode::UNAUTHORIZED,
        [(
            header::SET_COOKIE,
            state.sessions.set_cookie(&session, headers),
        )],
        page,
    )
        .into_response()
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
    posted::<NoFields>(&headers, &body, &session)?;
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

    #[test]
    fn a_form_sent_signed_out_returns_to_its_page_and_only_from_ours() {
        assert_eq!(
            form_page_of("/actions/7/reverse"),
            ("/console/actions/7".into(), Some("reason"))
        );
        assert_eq!(
            form_page_of("/entities/post:1/timer/end"),
            ("/console/entities/post:1".into(), Some("timer_reason"))
        );
        assert_eq!(
            form_page_of("/queue/12/decide"),
            ("/console/queue/12".into(), Some("reason"))
        );
        assert_eq!(form_page_of("/queue/next"), ("/console/queue".into(), None));
        assert_eq!(
            form_page_of("/appeals/3/decide"),
            ("/console/appeals/3".into(), Some("reason"))
        );
        assert_eq!(form_page_of("/logout"), (HOME.into(), None));
        let mut headers = HeaderMap::new();
        assert!(!from_our_pages(&headers));
        headers.insert("origin", "http://q.example:8080".parse().unwrap());
        headers.insert("host", "q.example:8080".parse().unwrap());
        assert!(from_our_pages(&headers));
        headers.insert("sec-fetch-site", "same-site".parse().unwrap());
        assert!(!from_our_pages(&headers), "another origin of the site");
        headers.insert("sec-fetch-site", "same-origin".parse().unwrap());
        assert!(from_our_pages(&headers));
    }
}
