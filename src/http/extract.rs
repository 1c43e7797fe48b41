//! The API's extractors: a JSON body ([`ApiJson`]) and a query string ([`ApiQuery`]), each
//! read into the route's own request type, and the route's path value ([`ApiPath`]), once the
//! caller's scope admits what it addresses. Every refusal is the API's JSON error naming the
//! field by its path (`serde_path_to_error`'s, e.g. `[1].weight`), where axum's own extractors
//! would answer plain text. A body is JSON only when the request says so ([`is_json`]), as
//! ingest's is.

use axum::{
    extract::{FromRequest, FromRequestParts, Request},
    http::{HeaderMap, StatusCode, header, request::Parts},
};
use serde::de::DeserializeOwned;

use super::{AppState, auth::Caller, body::RequestBody, error::ApiError};
use crate::{
    domain::field_names,
    request::{
        form,
        path::{self, PathProblem, PathValue, Refused},
        problem::{Problem, ProblemKind},
        scope::Scope,
    },
};

/// Why a body did not read: not JSON at all (400), or JSON that is not the request (its type
/// answers how).
#[derive(Debug)]
pub enum JsonError {
    Malformed(serde_json::Error),
    Invalid(Problem),
}

impl JsonError {
    pub fn malformed(error: &serde_json::Error) -> ApiError {
        ApiError::bad_request(
            "malformed_json",
            format!("the body is not valid JSON: {error}"),
        )
    }
}

/// Reads a body into `T`. A body that does not read is first checked as JSON on its own, so
/// that a malformed one is told so wherever `T`'s reading stopped (a refused body only pays
/// that second read).
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, JsonError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let error = match serde_path_to_error::deserialize::<_, T>(&mut deserializer) {
        Ok(value) => {
            return deserializer
                .end()
                .map(|()| value)
                .map_err(JsonError::Malformed);
        }
        Err(error) => error,
    };
    // A full read: the only one that checks every number's range, as JSON requires.
    if let Err(malformed) = serde_json::from_slice::<serde_json::Value>(body) {
        return Err(JsonError::Malformed(malformed));
    }
    let inner = error.inner();
    let message = inner.to_string();
    let position = format!(" at line {} column {}", inner.line(), inner.column());
    let message = message
        .strip_suffix(&position)
        .map_or_else(|| message.clone(), str::to_owned);
    Err(JsonError::Invalid(Problem::of(error.path(), message)))
}

/// A request body: how a problem with it is answered, and what an empty body means.
pub trait JsonBody: DeserializeOwned {
    /// What a body that is not the object the route takes is told.
    const SHAPE: &'static str = "the body must be a JSON object";

    /// The request an empty body makes; `None`: a body is required.
    fn when_empty() -> Option<Self> {
        None
    }

    /// 422 `invalid_request` naming the field.
    fn refusal(problem: Problem) -> ApiError {
        let message = match &problem.kind {
            ProblemKind::Unknown => format!(
                "unknown field; the body has only {}",
                field_names::<Self>().join(", ")
            ),
            ProblemKind::Missing => "is required".to_owned(),
            ProblemKind::Repeated => "is given more than once".to_owned(),
            ProblemKind::Invalid(_) if problem.path.is_empty() => Self::SHAPE.to_owned(),
            ProblemKind::Invalid(message) => message.clone(),
        };
        invalid(problem.field().as_deref(), &message)
    }
}

/// 422 `invalid_request`: a body that reads but is refused, naming the field when one is at fault.
pub fn invalid(field: Option<&str>, message: &str) -> ApiError {
    let error = ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", message);
    match field {
        Some(field) => error.with_field(field),
        None => error,
    }
}

/// Reads a body into the route's request type, answering as the type says.
pub fn read_json<T: JsonBody>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace)
        && let Some(empty) = T::when_empty()
    {
        return Ok(empty);
    }
    // A derived struct would also read an array (its fields in order): a body is an object.
    if body.trim_ascii_start().starts_with(b"[") {
        return Err(match serde_json::from_slice::<serde_json::Value>(body) {
            Err(malformed) => JsonError::malformed(&malformed),
            Ok(_) => T::refusal(Problem {
                path: Vec::new(),
                kind: ProblemKind::Invalid("an array".to_owned()),
            }),
        });
    }
    parse_json(body).map_err(|error| match error {
        JsonError::Malformed(error) => JsonError::malformed(&error),
        JsonError::Invalid(problem) => T::refusal(problem),
    })
}

/// Whether the request's `Content-Type` is JSON: `application/json` or any `application/*+json`
/// (RFC 6839's structured syntax suffix), its parameters (`charset`) ignored.
pub fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// 415 `unsupported_media_type`: `what` (the body, the events) was not sent as JSON.
pub fn not_json(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!("send {what} as Content-Type: application/json"),
    )
}

/// A JSON body (within `body_limit`, see [`RequestBody`]) read into `T`, sent as JSON
/// ([`is_json`]): any other content type, or none, answers 415 before the body is read. A
/// route whose body may be left out ([`JsonBody::when_empty`]) also takes no body at all
/// without a content type, as a bare `curl -X POST` sends it.
pub struct ApiJson<T>(pub T);

impl<T: JsonBody> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let json = is_json(request.headers());
        if !json && T::when_empty().is_none() {
            return Err(not_json("the body"));
        }
        let RequestBody(body) = RequestBody::from_request(request, state).await?;
        if !json && !body.iter().all(u8::is_ascii_whitespace) {
            return Err(not_json("the body"));
        }
        read_json(&body).map(ApiJson)
    }
}

/// A query string read into `T`: 400 `invalid_query` naming the parameter. A parameter given
/// twice counts once, its last value.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            pairs.retain(|(seen, _)| *seen != name);
            pairs.push((name.into_owned(), value.into_owned()));
        }
        form::deserialize(
            pairs
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str())),
        )
        .map(ApiQuery)
        .map_err(|problem| {
            let name = problem.field().unwrap_or_default();
            // A reader's words follow the parameter's name: "limit must be ...".
            let message = match problem.kind {
                ProblemKind::Unknown => format!(
                    "unknown query parameter; use {}",
                    field_names::<T>().join(", ")
                ),
                ProblemKind::Missing => format!("{name} is required"),
                ProblemKind::Repeated => format!("{name} is given more than once"),
                ProblemKind::Invalid(message) => format!("{name} {message}"),
            };
            bad_query(&name, message)
        })
    }
}

/// 400 `invalid_query` naming the parameter.
pub fn bad_query(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid_query", message).with_field(field)
}

/// A path value refused: 400 with its code, naming the path field.
impl From<PathProblem> for ApiError {
    fn from(problem: PathProblem) -> Self {
        ApiError::bad_request(problem.code, problem.message).with_field(problem.field)
    }
}

/// The route's one path value (an entity id, an action's id, ...: [`PathValue`]), handed over
/// only once the caller's scope admits what it addresses ([`path::addressed`]). A segment that
/// does not decode or parse is 400 naming the path field (`invalid_path`, `invalid_entity`,
/// `invalid_id`); one out of the caller's scope is 404, as if it did not exist.
pub struct ApiPath<T>(pub T);

impl<T: PathValue, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        // Without a configured token (a development setup) the caller is the platform.
        let scope = Some(
            parts
                .extensions
                .get::<Caller>()
                .map_or(Scope::Platform, Caller::scope),
        );
        path::addressed(parts, state, scope)
            .await
            .map(ApiPath)
            .map_err(|refused| match refused {
                Refused::Unreadable(problem) => problem.into(),
                Refused::OutOfScope(_) => {
                    ApiError::not_found(format!("no such {} for this token", T::FIELD))
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Claim {
        moderator: crate::request::fields::Text,
        #[serde(default, deserialize_with = "crate::request::fields::optional_string")]
        note: Option<String>,
    }

    impl JsonBody for Claim {}

    fn refused(body: &str) -> ApiError {
        read_json::<Claim>(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn each_refusal_names_its_field_in_the_api_words() {
        for (body, status, field, message) in [
            (
                "{\"moderator\": ",
                400,
                None,
                "the body is not valid JSON: EOF",
            ),
            (
                "{\"moderator\": 5, ",
                400,
                None,
                "the body is not valid JSON",
            ),
            ("{\"moderator\": [1e999]}", 400, None, "number out of range"),
            ("[]", 422, None, "the body must be a JSON object"),
            ("[\"ana\"]", 422, None, "the body must be a JSON object"),
            ("[\"ana\",", 400, None, "the body is not valid JSON"),
            ("{}", 422, Some("moderator"), "is required"),
            (
                "{\"moderator\": null}",
                422,
                Some("moderator"),
                "is required",
            ),
            (
                "{\"moderator\": 5}",
                422,
                Some("moderator"),
                "a string that must be",
            ),
            (
                "{\"moderator\": \"  \"}",
                422,
                Some("moderator"),
                "a string that must be",
            ),
            (
                "{\"moderator\": \"ana\", \"note\": 1}",
                422,
                Some("note"),
                "must be a string",
            ),
            (
                "{\"moderator\": \"ana\", \"colour\": 1}",
                422,
                Some("colour"),
                "unknown field; the body has only moderator, note",
            ),
        ] {
            let error = refused(body);
            assert_eq!(error.status.as_u16(), status, "{body}: {error:?}");
            assert_eq!(error.body.field.as_deref(), field, "{body}: {error:?}");
            assert!(
                error.body.message.starts_with(message) || error.body.message.contains(message),
                "{body}: {error:?}"
            );
            assert!(
                !error.body.message.contains(" at line 1 column") || status == 400,
                "{body}: {error:?}"
            );
        }
        let claim = read_json::<Claim>(br#"{"moderator": "ana", "note": null}"#).unwrap();
        assert_eq!((&*claim.moderator, claim.note), ("ana", None));
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Page {
        #[serde(default, deserialize_with = "crate::request::fields::limit::<_, 10>")]
        limit: Option<i64>,
    }

    async fn query(uri: &str) -> Result<Page, ApiError> {
        let (mut parts, ()) = axum::http::Request::get(uri).body(()).unwrap().into_parts();
        ApiQuery::<Page>::from_request_parts(&mut parts, &())
            .await
            .map(|ApiQuery(page)| page)
    }

    #[tokio::test]
    async fn a_query_names_the_parameter_and_counts_the_last_of_a_repeated_one() {
        assert_eq!(query("/p?limit=3&limit=4").await.unwrap().limit, Some(4));
        assert_eq!(query("/p").await.unwrap().limit, None);
        let error = query("/p?limit=11").await.unwrap_err();
        assert_eq!(error.body.code, "invalid_query");
        assert_eq!(error.body.field.as_deref(), Some("limit"));
        assert_eq!(
            error.body.message,
            "limit must be a whole number from 1 to 10"
        );
        let error = query("/p?limit=1&size=2").await.unwrap_err();
        assert_eq!(error.body.field.as_deref(), Some("size"));
        assert_eq!(error.body.message, "unknown query parameter; use limit");
    }
}
