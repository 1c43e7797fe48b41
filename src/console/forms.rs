//! Reading what the console's forms, links and paths send, each into its page's own type: a
//! posted form ([`Form`], [`posted`]), a query string ([`PageQuery`]), the path's value
//! ([`PagePath`], which asks the caller's scope, as the API's does). Fields are read by the
//! API's readers (`request::fields`), each once, none but the type's; every refusal names the
//! field and the problem, as a 4xx page, before anything is written.

use std::time::Duration;

use axum::{
    body::Bytes,
    extract::{FromRequest, FromRequestParts, Request},
    http::{HeaderMap, StatusCode, header, request::Parts},
};
use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, de::DeserializeOwned};

use super::{ConsoleState, csrf, errors::PageError, live_session, session::Session};
use crate::{
    backtest,
    domain::field_names,
    request::{
        fields::{self, Text},
        form,
        path::{self, PathValue, Refused},
        problem::{Problem, ProblemKind},
    },
};

/// The largest form body the console reads.
pub const MAX_FORM_BYTES: usize = 64 * 1024;

/// What a form's refused field is told: 422 naming it.
fn refusal<T: DeserializeOwned>(problem: Problem) -> PageError {
    let words = match &problem.kind {
        ProblemKind::Unknown => match field_names::<T>() {
            [] => "is not a field of this form, which takes none".to_owned(),
            names => format!("is not a field of this form; it takes {}", names.join(", ")),
        },
        ProblemKind::Missing => "is required".to_owned(),
        ProblemKind::Repeated => "is given twice".to_owned(),
        ProblemKind::Invalid(message) => message.clone(),
    };
    match problem.field() {
        Some(field) => PageError::bad_field(&field, &words),
        None => PageError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Check the form",
            format!("The form {words}. Nothing was changed."),
        ),
    }
}

/// Whether the request says it sends a form (`application/x-www-form-urlencoded`).
fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            v.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        })
}

/// A form of `session`'s read into `T`: sent as a form, its CSRF token checked before any other
/// field is looked at, then each field given once and none but `T`'s.
pub fn posted<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
    session: &Session,
) -> Result<T, PageError> {
    if !is_form(headers) {
        return Err(PageError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Not a form",
            "The console takes forms sent as application/x-www-form-urlencoded. Nothing was changed.",
        ));
    }
    let mut tokens = form_urlencoded::parse(body).filter(|(name, _)| name == csrf::FIELD);
    let token = match (tokens.next(), tokens.next()) {
        (Some((_, token)), None) => Some(token),
        _ => None,
    };
    csrf::check(session, token.as_deref())?;
    let mut pairs = form::pairs(body).map_err(refusal::<T>)?;
    pairs.retain(|(name, _)| name != csrf::FIELD);
    form::read(&pairs).map_err(refusal::<T>)
}

/// A posted form read into `T` (see [`posted`]), for the session the request's cookie carries.
/// Its body is capped at [`MAX_FORM_BYTES`] (the console's `DefaultBodyLimit`).
pub struct Form<T>(pub T);

impl<T: DeserializeOwned> FromRequest<ConsoleState> for Form<T> {
    type Rejection = PageError;

    async fn from_request(request: Request, state: &ConsoleState) -> Result<Self, PageError> {
        let session = state
            .sessions
            .read(request.headers())
            .ok_or_else(PageError::signed_out)?;
        let headers = request.headers().clone();
        let body = Bytes::from_request(request, state)
            .await
            .map_err(|_| PageError::too_large(MAX_FORM_BYTES))?;
        posted(&headers, &body, &session).map(Form)
    }
}

/// A query string (a GET form's filters, paging, a notice) read into `T`: 400 naming the
/// parameter.
pub struct PageQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for PageQuery<T> {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, PageError> {
        let query = parts.uri.query().unwrap_or_default().as_bytes();
        form::pairs(query)
            .and_then(|pairs| form::read(&pairs))
            .map(PageQuery)
            .map_err(|problem| PageError::bad_query(refusal::<T>(problem)))
    }
}

/// The page's path value (an entity id, an action's, an appeal's or an item's id), handed over
/// only once the signed-in moderator's scope admits what it addresses (`request::path`): a
/// segment that does not parse, or what the scope does not reach, is the 404 page.
pub struct PagePath<T>(pub T);

impl<T: PathValue> FromRequestParts<ConsoleState> for PagePath<T> {
    type Rejection = PageError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ConsoleState,
    ) -> Result<Self, PageError> {
        let scope = live_session(state, &parts.headers).map(|(_, user)| user.scope());
        path::addressed(parts, state, scope)
            .await
            .map(PagePath)
            .map_err(|refused| match refused {
                Refused::Unreadable(problem) => PageError::not_found(format!(
                    "There is no such page: the {} in its address is not valid ({}).",
                    problem.field, problem.message
                ))
                .with_field(problem.field),
                Refused::OutOfScope(_) => {
                    PageError::not_found("There is no such page, or it is not yours to see.")
                }
            })
    }
}

/// What a link carries to a page to show, never to act on: a notice (`done`), and a reason
/// written before the session ended, carried through signing in again (`signin::resume`) to
/// be sent again. A query that does not read carries nothing.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Carried {
    pub done: Option<String>,
    reason: Option<String>,
}

impl Carried {
    /// The reason carried, as the form's text area takes it (at most 1,000 characters).
    pub fn draft(&self) -> String {
        self.reason
            .as_deref()
            .unwrap_or_default()
            .chars()
            .take(1000)
            .collect()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Carried {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(leniently(parts.uri.query().unwrap_or_default().as_bytes()))
    }
}

/// What `raw` (a query string, a form body) carries to show again, never to act on: `T`'s
/// fields as given, nothing when it does not read.
pub fn leniently<T: DeserializeOwned + Default>(raw: &[u8]) -> T {
    form::pairs(raw)
        .and_then(|pairs| form::read(&pairs))
        .unwrap_or_default()
}

/// A form of no field but its CSRF token (a claim, a release, a redrive).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoFields {}

/// A form of a moderator's reason and nothing else (a reversal, a timer ended early).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasonForm {
    pub reason: Text,
}

/// A backtest's window (`backtest::parse_window`: any duration up to 90 days); `7days` when
/// none is given.
pub struct Window {
    /// As given (`7days`), shown in the forms again.
    pub name: String,
    pub span: Duration,
}

impl Default for Window {
    fn default() -> Self {
        Self {
            name: "7days".to_owned(),
            span: backtest::parse_window("7days").expect("the default window reads"),
        }
    }
}

/// The `window` field: [`backtest::parse_window`]'s.
pub fn window<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Window, D::Error> {
    fields::parsed(d, |raw| {
        backtest::parse_window(raw)
            .map(|span| Window {
                name: raw.to_owned(),
                span,
            })
            .map_err(|problem| problem.to_string())
    })
}

/// A time given in UTC: RFC 3339, or what a `datetime-local` input sends
/// (`2026-12-31T18:00`, seconds optional), or the same with a space.
pub fn parse_utc(raw: &str) -> Option<DateTime<Utc>> {
    let raw = raw.trim();
    if let Ok(time) = DateTime::parse_from_rfc3339(raw) {
        return Some(time.with_timezone(&Utc));
    }
    let raw = raw.replacen(' ', "T", 1);
    ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(&raw, format).ok())
        .map(|naive| naive.and_utc())
}

/// An override's end: a duration from now (`24h`, `7days`) or a UTC time, in the future; at
/// most ten years ahead.
pub fn parse_until(raw: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let until = match humantime::parse_duration(raw.trim()) {
        Ok(duration) => chrono::Duration::from_std(duration)
            .ok()
            .and_then(|d| now.checked_add_signed(d))
            .ok_or("is too far ahead")?,
        Err(_) => parse_utc(raw).ok_or(
            "must be a duration such as 24h or 7days, or a UTC time such as 2026-12-31 18:00",
        )?,
    };
    if until <= now {
        return Err("must be in the future".into());
    }
    if until > now + chrono::Duration::days(3650) {
        return Err("must be at most ten years ahead".into());
    }
    Ok(until)
}

/// The query string of a list's filters as typed (those given) and its keyset cursor, for the
/// links that page through it.
pub fn page_query(filters: &[(&str, &Option<String>)], cursor: Option<(&str, i64)>) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in filters {
        if let Some(value) = value {
            query.append_pair(name, value);
        }
    }
    if let Some((name, id)) = cursor {
        query.append_pair(name, &id.to_string());
    }
    query.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations_read_as_a_moderator_writes_them() {
        let now = parse_utc("2026-12-01T10:00:00Z").unwrap();
        assert_eq!(parse_utc("2026-12-01T10:00"), Some(now));
        assert_eq!(parse_utc("2026-12-01 10:00:00"), Some(now));
        assert_eq!(parse_utc("2026-12-01T11:00:00+01:00"), Some(now));
        assert_eq!(parse_utc("yesterday"), None);
        assert_eq!(
            parse_until("24h", now).unwrap(),
            now + chrono::Duration::hours(24)
        );
        assert_eq!(
            parse_until("2026-12-02 10:00", now).unwrap(),
            now + chrono::Duration::days(1)
        );
        assert_eq!(
            parse_until("2026-11-30 10:00", now).unwrap_err(),
            "must be in the future"
        );
        assert!(parse_until("soon", now).unwrap_err().contains("duration"));
        assert!(parse_until("100years", now).is_err());
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Reverse {
        reason: crate::request::fields::Text,
    }

    fn form_of(body: &str) -> Result<Reverse, PageError> {
        posted_as(body)
    }

    fn posted_as<T: DeserializeOwned>(body: &str) -> Result<T, PageError> {
        let session = Session {
            csrf: "token".to_owned(),
            expires: Utc::now(),
            user: None,
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            "application/x-www-form-urlencoded".parse().unwrap(),
        );
        posted(&headers, body.as_bytes(), &session)
    }

    #[test]
    fn a_form_is_checked_for_its_token_first_and_names_the_field_it_refuses() {
        assert_eq!(&*form_of("csrf=token&reason=spam").unwrap().reason, "spam");
        // The token before anything else: a repeated field of a form without it is a 403.
        let refused = form_of("reason=a&reason=b").unwrap_err();
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        assert_eq!(
            form_of("csrf=token&csrf=token&reason=a")
                .unwrap_err()
                .status,
            StatusCode::FORBIDDEN
        );
        for (body, field, words) in [
            ("csrf=token&reason=a&reason=b", "reason", "is given twice"),
            ("csrf=token&reason=++", "reason", "is required"),
            ("csrf=token&reason=a%07", "reason", "control characters"),
            (
                "csrf=token&reason=a&mood=x",
                "mood",
                "is not a field of this form; it takes reason",
            ),
        ] {
            let refused = form_of(body).unwrap_err();
            assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
            assert_eq!(refused.field.as_deref(), Some(field), "{body}");
            assert!(
                refused.message.contains(words),
                "{body}: {}",
                refused.message
            );
        }
        // A form of no field but its token.
        assert!(posted_as::<NoFields>("csrf=token").is_ok());
        let refused = posted_as::<NoFields>("csrf=token&id=1").unwrap_err();
        assert_eq!(refused.field.as_deref(), Some("id"));
        assert!(
            refused.message.contains("which takes none"),
            "{}",
            refused.message
        );
    }
}
