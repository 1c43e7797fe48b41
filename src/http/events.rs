//! `POST /v1/events` (API clients, with an ingest token) and `POST /v1/sources/{source}/events`
//! (named webhook senders, authenticated by their signature): validate the whole request, then
//! hand it to the group committer. A request is all or nothing: one invalid event rejects it
//! before anything is written.

use axum::{
    Extension, Json,
    body::Bytes,
    extract::{Path, State, rejection::BytesRejection},
    http::{HeaderMap, StatusCode, header},
};
use serde_json::{Map, Value};

use super::{AppState, auth::Caller, error::ApiError, limits::RateKey};
use crate::{
    domain::{EntityId, Event, EventId, Priority, Signal},
    ingest::{IngestError, IngestOutcome},
    telemetry::names,
};

const FIELDS: [&str; 8] = [
    "author",
    "id",
    "entity",
    "type",
    "actor",
    "weight",
    "occurred_at",
    "priority",
];
const MAX_ACTOR_LEN: usize = 128;
const MAX_WEIGHT: f64 = 1000.0;

#[utoipa::path(
    post,
    path = "/v1/events",
    tag = "ingest",
    description = "Records events and schedules their entities. Role ingest. With inbound secrets configured the request must also be signed.",
    params(
        ("webhook-id" = Option<String>, Header, description = "Standard Webhooks message id (when signing is configured)"),
        ("webhook-timestamp" = Option<String>, Header, description = "Unix seconds, within signature_tolerance"),
        ("webhook-signature" = Option<String>, Header, description = "Space-separated v1,<base64 HMAC-SHA256 of {id}.{timestamp}.{body}>"),
        ("x-hub-signature-256" = Option<String>, Header, description = "GitHub style: sha256=<hex HMAC-SHA256 of the body>"),
    ),
    request_body(content = crate::http::openapi::EventsBody, content_type = "application/json"),
    responses(
        (status = 202, description = "Recorded (duplicates counted once)", body = crate::ingest::IngestOutcome),
        (status = 400, description = "Malformed JSON or unreadable body", body = crate::http::openapi::ErrorResponse),
        (status = 401, description = "Missing or bad token, or no valid signature (code invalid_signature)", body = crate::http::openapi::ErrorResponse),
        (status = 413, description = "The body is larger than body_limit", body = crate::http::openapi::ErrorResponse),
        (status = 415, description = "Not application/json", body = crate::http::openapi::ErrorResponse),
        (status = 422, description = "An invalid event (field and index say which) or batch", body = crate::http::openapi::ErrorResponse),
        (status = 429, description = "The sender's rate limit is spent", body = crate::http::openapi::ErrorResponse, headers(("Retry-After" = u64, description = "Seconds until the events would fit"))),
        (status = 403, description = "The token's role may not ingest", body = crate::http::openapi::ErrorResponse),
        crate::http::openapi::CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn post_events(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<IngestOutcome>), ApiError> {
    let client = caller.map_or_else(|| "default".to_owned(), |Extension(c)| c.client);
    let signing = (!state.inbound.is_empty()).then_some(&*state.inbound);
    counted(accept(&state, &headers, body, signing, RateKey::Client(&client)).await)
}

#[utoipa::path(
    post,
    path = "/v1/sources/{source}/events",
    tag = "ingest",
    description = "Records events from a named source, signed with one of that source's secrets; no token.",
    params(
        ("source" = String, Path, description = "A configured source name"),
        ("webhook-id" = Option<String>, Header, description = "Standard Webhooks message id (when signing is configured)"),
        ("webhook-timestamp" = Option<String>, Header, description = "Unix seconds, within signature_tolerance"),
        ("webhook-signature" = Option<String>, Header, description = "Space-separated v1,<base64 HMAC-SHA256 of {id}.{timestamp}.{body}>"),
        ("x-hub-signature-256" = Option<String>, Header, description = "GitHub style: sha256=<hex HMAC-SHA256 of the body>"),
    ),
    request_body(content = crate::http::openapi::EventsBody, content_type = "application/json"),
    responses(
        (status = 202, description = "Recorded (duplicates counted once)", body = crate::ingest::IngestOutcome),
        (status = 400, description = "Malformed JSON or unreadable body", body = crate::http::openapi::ErrorResponse),
        (status = 401, description = "Missing or bad token, or no valid signature (code invalid_signature)", body = crate::http::openapi::ErrorResponse),
        (status = 413, description = "The body is larger than body_limit", body = crate::http::openapi::ErrorResponse),
        (status = 415, description = "Not application/json", body = crate::http::openapi::ErrorResponse),
        (status = 422, description = "An invalid event (field and index say which) or batch", body = crate::http::openapi::ErrorResponse),
        (status = 429, description = "The sender's rate limit is spent", body = crate::http::openapi::ErrorResponse, headers(("Retry-After" = u64, description = "Seconds until the events would fit"))),
        (status = 404, description = "No source of that name (code unknown_source)", body = crate::http::openapi::ErrorResponse),
        crate::http::openapi::CommonErrors,
    ),
    security(())
)]
pub async fn post_source_events(
    State(state): State<AppState>,
    Path(source): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<IngestOutcome>), ApiError> {
    let Some(secrets) = state.sources.get(&source) else {
        return counted(Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_source",
            "no source of that name is configured",
        )
        .with_field("source")));
    };
    counted(
        accept(
            &state,
            &headers,
            body,
            Some(secrets),
            RateKey::Source(&source),
        )
        .await,
    )
}

fn counted<T>(result: Result<T, ApiError>) -> Result<T, ApiError> {
    if let Err(error) = &result
        && error.status.is_client_error()
    {
        metrics::counter!(names::EVENTS_REJECTED, "reason" => error.body.code).increment(1);
    }
    result
}

/// The checks in order of cost: media type, size, signature on the raw bytes, parsing, the
/// sender's rate; then the commit.
async fn accept(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    signing: Option<&super::signature::InboundSecrets>,
    rate_key: RateKey<'_>,
) -> Result<(StatusCode, Json<IngestOutcome>), ApiError> {
    if !is_json(headers) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the events as Content-Type: application/json",
        ));
    }
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!("the body is larger than {} bytes", state.limits.body_limit),
            )
        } else {
            ApiError::bad_request("unreadable_body", rejection.body_text())
        }
    })?;
    // Signatures are checked on the raw bytes, after the size limit and before any parsing.
    if let Some(secrets) = signing {
        secrets
            .verify(headers, &body, chrono::Utc::now().timestamp())
            .map_err(|error| {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "invalid_signature",
                    error.to_string(),
                )
            })?;
    }
    let events = parse_events(&body, state.limits.max_batch)?;
    state.rate_limits.check(rate_key, events.len())?;
    match state.ingestor.submit(events).await {
        Ok(outcome) => Ok((StatusCode::ACCEPTED, Json(outcome))),
        Err(
            error @ (IngestError::Postgres(_) | IngestError::Redis(_) | IngestError::Timeout(_)),
        ) => Err(ApiError::unavailable(&error)),
        Err(error @ IngestError::ShuttingDown) => Err(ApiError::unavailable(&error)),
    }
}

fn is_json(headers: &HeaderMap) -> bool {
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

/// Parses one event object or an array of them; every event is checked before any is used.
pub fn parse_events(body: &[u8], max_batch: usize) -> Result<Vec<Event>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request("malformed_json", format!("the body is not valid JSON: {e}"))
    })?;
    let unprocessable =
        |message: &str| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_batch", message);
    let (items, batched) = match value {
        Value::Array(items) => {
            if items.is_empty() {
                return Err(unprocessable("the array holds no events"));
            }
            if items.len() > max_batch {
                return Err(unprocessable(&format!(
                    "the array holds {} events; at most {max_batch} are accepted per request",
                    items.len()
                )));
            }
            (items, true)
        }
        Value::Object(_) => (vec![value], false),
        _ => {
            return Err(unprocessable(
                "the body must be an event object or an array of events",
            ));
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            parse_event(item).map_err(|(field, message)| {
                let error =
                    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_event", message)
                        .with_index(batched.then_some(index));
                match field {
                    Some(field) => error.with_field(field),
                    None => error,
                }
            })
        })
        .collect()
}

type FieldError = (Option<String>, String);

fn parse_event(item: &Value) -> Result<Event, FieldError> {
    let Value::Object(object) = item else {
        return Err((None, "an event must be a JSON object".into()));
    };
    if let Some(unknown) = object.keys().find(|key| !FIELDS.contains(&key.as_str())) {
        return Err((
            Some(unknown.clone()),
            format!("unknown field; an event has only {}", FIELDS.join(", ")),
        ));
    }
    let field_error = |field: &str, message: String| (Some(field.to_owned()), message);
    let id = required_str(object, "id")?;
    let id = EventId::parse(id).map_err(|e| field_error("id", e.0))?;
    let entity = required_str(object, "entity")?;
    let entity = EntityId::parse(entity).map_err(|e| field_error("entity", e.0))?;
    let signal = required_str(object, "type")?;
    let signal = Signal::parse(signal).map_err(|e| field_error("type", e.0))?;

    let actor = match optional(object, "actor") {
        None => None,
        Some(Value::String(actor))
            if (1..=MAX_ACTOR_LEN).contains(&actor.chars().count())
                && !actor.chars().any(char::is_control) =>
        {
            Some(actor.clone())
        }
        Some(_) => {
            return Err(field_error(
                "actor",
                format!(
                    "must be a string of 1-{MAX_ACTOR_LEN} characters without control characters"
                ),
            ));
        }
    };
    let weight = match optional(object, "weight") {
        None => 1.0,
        Some(Value::Number(n)) => match n.as_f64() {
            Some(w) if w.is_finite() && w > 0.0 && w <= MAX_WEIGHT => w,
            _ => {
                return Err(field_error(
                    "weight",
                    format!("must be a number greater than 0 and at most {MAX_WEIGHT}"),
                ));
            }
        },
        Some(_) => {
            return Err(field_error(
                "weight",
                format!("must be a number greater than 0 and at most {MAX_WEIGHT}"),
            ));
        }
    };
    let occurred_at = match optional(object, "occurred_at") {
        None => None,
        Some(Value::String(raw)) => Some(
            chrono::DateTime::parse_from_rfc3339(raw)
                .map_err(|e| {
                    field_error("occurred_at", format!("must be an RFC 3339 timestamp: {e}"))
                })?
                .with_timezone(&chrono::Utc),
        ),
        Some(_) => {
            return Err(field_error(
                "occurred_at",
                "must be an RFC 3339 timestamp string".into(),
            ));
        }
    };
    let priority = match optional(object, "priority") {
        None => Priority::Normal,
        Some(Value::String(p)) if p == "normal" => Priority::Normal,
        Some(Value::String(p)) if p == "critical" => Priority::Critical,
        Some(_) => {
            return Err(field_error(
                "priority",
                "must be \"normal\" or \"critical\"".into(),
            ));
        }
    };
    let author = match optional(object, "author") {
        None => None,
        Some(Value::String(raw)) => {
            Some(EntityId::parse(raw).map_err(|e| field_error("author", e.0))?)
        }
        Some(_) => {
            return Err(field_error(
                "author",
                "must be an entity id such as user:77".into(),
            ));
        }
    };
    Ok(Event {
        id,
        entity,
        signal,
        actor,
        weight,
        occurred_at,
        priority,
        author,
    })
}

fn required_str<'a>(object: &'a Map<String, Value>, field: &str) -> Result<&'a str, FieldError> {
    match object.get(field) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err((Some(field.to_owned()), "is required".into())),
        Some(_) => Err((Some(field.to_owned()), "must be a string".into())),
    }
}

/// An optional field; `null` counts as absent.
fn optional<'a>(object: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    object.get(field).filter(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(body: &str) -> ApiError {
        parse_events(body.as_bytes(), 1000).unwrap_err()
    }

    #[test]
    fn a_single_object_and_an_array_both_parse() {
        let one = r#"{"id":"e1","entity":"post:1","type":"flag"}"#;
        let events = parse_events(one.as_bytes(), 1000).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].weight, 1.0);
        assert_eq!(events[0].priority, Priority::Normal);
        let many = format!("[{one},{}]", one.replace("e1", "e2"));
        assert_eq!(parse_events(many.as_bytes(), 1000).unwrap().len(), 2);
    }

    #[test]
    fn the_error_names_the_field_and_the_position() {
        let body = r#"[{"id":"e1","entity":"post:1","type":"flag"},{"id":"e2","entity":"post","type":"flag"}]"#;
        let error = error_of(body);
        assert_eq!(error.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(error.body.index, Some(1));
        assert_eq!(error.body.field.as_deref(), Some("entity"));
        let error = error_of(r#"{"id":"e1","entity":"post:1","type":"flag","colour":"red"}"#);
        assert_eq!(error.body.field.as_deref(), Some("colour"));
        assert_eq!(error.body.index, None);
    }

    #[test]
    fn weights_must_be_finite_positive_and_bounded() {
        for weight in ["0", "-1", "1000.5", "\"2\""] {
            let body = format!(r#"{{"id":"e","entity":"post:1","type":"flag","weight":{weight}}}"#);
            assert_eq!(
                error_of(&body).body.field.as_deref(),
                Some("weight"),
                "{weight}"
            );
        }
        let body = r#"{"id":"e","entity":"post:1","type":"flag","weight":1000}"#;
        assert!(parse_events(body.as_bytes(), 1000).is_ok());
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            ".{0,40}".prop_map(Value::String),
            prop_oneof![
                Just("post:1"),
                Just("flag"),
                Just("e-1"),
                Just("critical"),
                Just("user:2")
            ]
            .prop_map(|s| Value::String(s.to_owned())),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("id".to_owned()),
                        Just("entity".to_owned()),
                        Just("type".to_owned()),
                        Just("weight".to_owned()),
                        Just("actor".to_owned()),
                        Just("author".to_owned()),
                        Just("priority".to_owned()),
                        Just("occurred_at".to_owned()),
                        "[a-z]{1,8}",
                    ],
                    inner,
                    0..8,
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any bytes: the parser answers events or a 4xx naming the problem, never panics.
        #[test]
        fn arbitrary_bytes_never_panic_and_errors_are_client_errors(body in prop::collection::vec(any::<u8>(), 0..512)) {
            if let Err(error) = parse_events(&body, 1000) {
                prop_assert!(error.status.is_client_error());
                prop_assert!(!error.body.message.is_empty());
            }
        }

        /// Any JSON shape: every accepted event satisfies the documented grammar.
        #[test]
        fn accepted_events_are_valid_and_rejections_name_a_problem(value in json_value()) {
            let body = serde_json::to_vec(&value).unwrap();
            match parse_events(&body, 1000) {
                Ok(events) => {
                    for event in events {
                        prop_assert!(EventId::parse(event.id.as_str()).is_ok());
                        prop_assert!(EntityId::parse(event.entity.as_str()).is_ok());
                        prop_assert!(event.weight > 0.0 && event.weight <= 1000.0);
                    }
                }
                Err(error) => prop_assert!(error.status.is_client_error()),
            }
        }
    }
}
