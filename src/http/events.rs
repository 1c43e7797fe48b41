//! `POST /v1/events` (API clients, with an ingest token) and `POST /v1/sources/{source}/events`
//! (named webhook senders, authenticated by their signature): validate the whole request, then
//! hand it to the group committer. A request is all or nothing: one invalid event rejects it
//! before anything is written.

use axum::{
    Extension, Json,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, StatusCode, header},
};
use serde::Deserialize;
use serde_json::Value;
use utoipa::{
    ToSchema,
    openapi::{
        RefOr, Schema,
        schema::{ArrayBuilder, OneOfBuilder, Ref},
    },
};

use super::{
    AppState,
    auth::Caller,
    body::{BodyPace, read_body},
    error::ApiError,
    extract::{ApiPath, JsonError, is_json, not_json, parse_json},
    limits::take_ingest_slot,
    signature::{InboundSecrets, github_delivery},
};
use crate::{
    domain::{AttributeLimits, Declarations, Event, EventBody, FieldError, Scope},
    ingest::{Delivery, IngestOutcome, RateKey, Submission},
    request::path::SourceName,
    telemetry::{names, traces::TraceParent},
};

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
        ("x-github-delivery" = Option<String>, Header, description = "GitHub style: the delivery id, required with x-hub-signature-256; a delivery (or its body) already accepted is answered as duplicates"),
        ("traceparent" = Option<String>, Header, description = "W3C trace context (00-<trace id>-<parent id>-<flags>), kept with the events: the evaluation and the outbound webhook continue that trace. Any other form is ignored."),
    ),
    request_body(content = Batch, content_type = "application/json"),
    responses(
        (status = 202, description = "Recorded (duplicates counted once)", body = crate::ingest::IngestOutcome),
        (status = 400, description = "Malformed JSON or unreadable body", body = crate::http::schemas::ErrorResponse),
        (status = 401, description = "Missing or bad token, or no valid signature (code invalid_signature)", body = crate::http::schemas::ErrorResponse),
        (status = 413, description = "The body is larger than body_limit", body = crate::http::schemas::ErrorResponse),
        (status = 415, description = "Not application/json", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "An invalid event (field and index say which) or batch", body = crate::http::schemas::ErrorResponse),
        (status = 429, description = "The sender's rate limit is spent", body = crate::http::schemas::ErrorResponse, headers(("Retry-After" = u64, description = "Seconds until the events would fit"))),
        (status = 403, description = "The token's role may not ingest", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::CommonErrors,
    ),
    security(("bearer" = []))
)]
pub async fn post_events(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    body: Body,
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
        ("x-github-delivery" = Option<String>, Header, description = "GitHub style: the delivery id, required with x-hub-signature-256; a delivery (or its body) already accepted is answered as duplicates"),
        ("traceparent" = Option<String>, Header, description = "W3C trace context (00-<trace id>-<parent id>-<flags>), kept with the events: the evaluation and the outbound webhook continue that trace. Any other form is ignored."),
    ),
    request_body(content = Batch, content_type = "application/json"),
    responses(
        (status = 202, description = "Recorded (duplicates counted once)", body = crate::ingest::IngestOutcome),
        (status = 400, description = "Malformed JSON or unreadable body", body = crate::http::schemas::ErrorResponse),
        (status = 401, description = "Missing or bad token, or no valid signature (code invalid_signature)", body = crate::http::schemas::ErrorResponse),
        (status = 413, description = "The body is larger than body_limit", body = crate::http::schemas::ErrorResponse),
        (status = 415, description = "Not application/json", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "An invalid event (field and index say which) or batch", body = crate::http::schemas::ErrorResponse),
        (status = 429, description = "The sender's rate limit is spent", body = crate::http::schemas::ErrorResponse, headers(("Retry-After" = u64, description = "Seconds until the events would fit"))),
        (status = 404, description = "No source of that name (code unknown_source)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::CommonErrors,
    ),
    security(())
)]
pub async fn post_source_events(
    State(state): State<AppState>,
    path: Result<ApiPath<SourceName>, ApiError>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<IngestOutcome>), ApiError> {
    let ApiPath(SourceName(source)) = counted(path)?;
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

/// The checks in order of cost: media type, declared size, an ingest slot once the sender is
/// known (its token was checked; for a named source, after its signature), the body within its
/// size and pace, the signature on the raw bytes, parsing, the sender's rate; then the commit.
async fn accept(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    signing: Option<&InboundSecrets>,
    rate_key: RateKey<'_>,
) -> Result<(StatusCode, Json<IngestOutcome>), ApiError> {
    if !is_json(headers) {
        return Err(not_json("the events"));
    }
    let http = &state.settings.http;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > http.body_limit as u64) {
        return Err(ApiError::payload_too_large(http.body_limit));
    }
    // A token is a secret, a source's name is not: a request to a named source takes its slot
    // only once its signature holds, and until then costs a connection and a paced body read.
    let token_checked = matches!(rate_key, RateKey::Client(_));
    let early_slot = token_checked.then(|| take_ingest_slot(state)).transpose()?;
    let body: Bytes = read_body(body, http.body_limit, BodyPace::from(http)).await?;
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
    let _slot = match early_slot {
        Some(slot) => slot,
        None => take_ingest_slot(state)?,
    };
    let rules = state.rules.current();
    let checks = EventChecks {
        max_batch: http.max_batch,
        declared: rules.declarations(),
        limits: http.attribute_limits(),
    };
    let events = parse_events(&body, &checks)?;
    // Ingest checks the sender's rate, after a replayed GitHub delivery is told apart.
    let submission = Submission {
        sender: rate_key,
        delivery: github_delivery(headers, signing).map(|id| Delivery { id, body: &body }),
        events,
        // Where the events entered the trace: this request's span when spans are exported,
        // else the platform's own context as it sent it.
        trace: TraceParent::of_span(&tracing::Span::current())
            .or_else(|| super::inbound_trace(headers)),
    };
    let outcome = state
        .ingestor
        .submit(&state.rate_limits, submission)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(outcome)))
}

/// What a request's events are held to besides their own fields: the batch size, and the
/// attributes the rules in force declare, within the settings' bounds.
pub struct EventChecks<'a> {
    pub max_batch: usize,
    pub declared: &'a Declarations,
    pub limits: AttributeLimits,
}

impl EventChecks<'_> {
    /// Checks an event's attributes, naming the attribute (`attributes.reason`) at fault.
    fn attributes_of(&self, event: &Event) -> Result<(), FieldError> {
        let Some(attributes) = &event.attributes else {
            return Ok(());
        };
        self.declared
            .validate(Scope::Event, attributes, self.limits)
            .map_err(|e| FieldError {
                field: Some(match e.attribute {
                    Some(name) => format!("attributes.{name}"),
                    None => "attributes".to_owned(),
                }),
                message: e.message,
            })
    }
}

/// Parses one event object or an array of them; every event is checked before any is used.
/// A well-formed body is read straight into [`EventBody`]s, as every route reads its body; any
/// other is read again as JSON to name its first problem as a batch's are named (which event,
/// and the batch's size before its events): that path runs only for refused requests.
pub fn parse_events(body: &[u8], checks: &EventChecks<'_>) -> Result<Vec<Event>, ApiError> {
    match parse_json::<Batch>(body) {
        Ok(Batch::One(event)) => convert([(None, event)], checks),
        Ok(Batch::Many(events)) => {
            check_batch_size(events.len(), checks.max_batch)?;
            convert(
                events.into_iter().enumerate().map(|(i, e)| (Some(i), e)),
                checks,
            )
        }
        Err(JsonError::Malformed(error)) => Err(JsonError::malformed(&error)),
        Err(JsonError::Invalid(_)) => diagnose(body, checks),
    }
}

/// The body: one event, or an array of 1 to `max_batch` (default 1000) events.
enum Batch {
    One(EventBody),
    Many(Vec<EventBody>),
}

impl<'de> Deserialize<'de> for Batch {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Batch;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an event object or an array of events")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Batch, A::Error> {
                let Object(event) =
                    Object::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(Batch::One(event))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Batch, A::Error> {
                let mut events = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
                while let Some(Object(event)) = seq.next_element()? {
                    events.push(event);
                }
                Ok(Batch::Many(events))
            }
        }

        deserializer.deserialize_any(Visitor)
    }
}

impl utoipa::PartialSchema for Batch {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(Ref::from_schema_name("Event"))
            .item(
                ArrayBuilder::new()
                    .items(Ref::from_schema_name("Event"))
                    .min_items(Some(1))
                    .max_items(Some(crate::settings::Http::default().max_batch)),
            )
            .into()
    }
}

impl ToSchema for Batch {
    fn name() -> std::borrow::Cow<'static, str> {
        "EventsBody".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((
            "Event".to_owned(),
            <EventBody as utoipa::PartialSchema>::schema(),
        ));
        schemas.push((
            "Priority".to_owned(),
            <crate::domain::Priority as utoipa::PartialSchema>::schema(),
        ));
    }
}

/// An event that must be a JSON object (a derived struct would also read an array).
struct Object(EventBody);

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Object;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an event object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Object, A::Error> {
                EventBody::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(Object)
            }
        }

        deserializer.deserialize_map(Visitor)
    }
}

fn unprocessable(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_batch", message)
}

fn check_batch_size(len: usize, max_batch: usize) -> Result<(), ApiError> {
    if len == 0 {
        return Err(unprocessable("the array holds no events"));
    }
    if len > max_batch {
        return Err(unprocessable(&format!(
            "the array holds {len} events; at most {max_batch} are accepted per request"
        )));
    }
    Ok(())
}

/// Converts each event, naming the first that is wrong by its position (`None`: a single
/// event, not a batch).
fn convert(
    events: impl IntoIterator<Item = (Option<usize>, EventBody)>,
    checks: &EventChecks<'_>,
) -> Result<Vec<Event>, ApiError> {
    events
        .into_iter()
        .map(|(index, event)| checked(event, checks).map_err(|e| invalid_event(index, e)))
        .collect()
}

/// An event with its fields checked, then its attributes against the declarations.
fn checked(event: EventBody, checks: &EventChecks<'_>) -> Result<Event, FieldError> {
    let event = event.into_event()?;
    checks.attributes_of(&event)?;
    Ok(event)
}

fn invalid_event(index: Option<usize>, error: FieldError) -> ApiError {
    let refused = ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_event",
        error.message,
    )
    .with_index(index);
    match error.field {
        Some(field) => refused.with_field(field),
        None => refused,
    }
}

/// Names the first problem of a body that did not read as events: not JSON, not an event or
/// an array of them, or an event with a field it does not have, or one that is not an object.
fn diagnose(body: &[u8], checks: &EventChecks<'_>) -> Result<Vec<Event>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| JsonError::malformed(&e))?;
    let (items, batched) = match value {
        Value::Array(items) => {
            check_batch_size(items.len(), checks.max_batch)?;
            (items, true)
        }
        Value::Object(_) => (vec![value], false),
        _ => {
            return Err(unprocessable(
                "the body must be an event object or an array of events",
            ));
        }
    };
    let fields = EventBody::fields();
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let index = batched.then_some(i);
            let object_error = || FieldError {
                field: None,
                message: "an event must be a JSON object".into(),
            };
            let Value::Object(object) = &item else {
                return Err(invalid_event(index, object_error()));
            };
            if let Some(unknown) = object.keys().find(|key| !fields.contains(&key.as_str())) {
                let error = FieldError {
                    field: Some(unknown.clone()),
                    message: format!("unknown field; an event has only {}", fields.join(", ")),
                };
                return Err(invalid_event(index, error));
            }
            // Known fields only, each read as it comes: reading cannot fail.
            EventBody::deserialize(item)
                .map_err(|_| object_error())
                .and_then(|event| checked(event, checks))
                .map_err(|e| invalid_event(index, e))
        })
        .collect()
}

/// The checks of the unit tests: a reason among two values and a score declared; at most two
/// attributes, strings of at most 16 characters.
#[cfg(test)]
fn checks(max_batch: usize) -> EventChecks<'static> {
    static DECLARED: std::sync::LazyLock<Declarations> = std::sync::LazyLock::new(|| {
        toml::from_str(
            "[event.reason]\ntype = \"string\"\nvalues = [\"spam\", \"abuse\"]\n[event.score]\ntype = \"number\"\n",
        )
        .expect("valid declarations")
    });
    EventChecks {
        max_batch,
        declared: &DECLARED,
        limits: AttributeLimits {
            max_attributes: 2,
            max_len: 16,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Priority, Scalar};

    fn error_of(body: &str) -> ApiError {
        parse_events(body.as_bytes(), &checks(1000)).unwrap_err()
    }

    #[test]
    fn a_single_object_and_an_array_both_parse() {
        let one = r#"{"id":"e1","entity":"post:1","type":"flag"}"#;
        let events = parse_events(one.as_bytes(), &checks(1000)).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].weight, 1.0);
        assert_eq!(events[0].priority, Priority::Normal);
        let many = format!("[{one},{}]", one.replace("e1", "e2"));
        assert_eq!(
            parse_events(many.as_bytes(), &checks(1000)).unwrap().len(),
            2
        );
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
        assert!(parse_events(body.as_bytes(), &checks(1000)).is_ok());
    }

    #[test]
    fn attributes_are_checked_against_the_declarations_and_named() {
        let with = |attributes: &str| {
            format!(
                r#"[{{"id":"e1","entity":"post:1","type":"flag"}},{{"id":"e2","entity":"post:1","type":"flag","attributes":{attributes}}}]"#
            )
        };
        let events = parse_events(
            with(r#"{"reason":"spam","score":0.5}"#).as_bytes(),
            &checks(10),
        )
        .unwrap();
        assert_eq!(events[0].attributes, None);
        let attributes = events[1].attributes.as_ref().unwrap();
        assert_eq!(attributes["reason"], Scalar::Str("spam".into()));
        assert_eq!(attributes["score"], Scalar::Num(0.5));
        for (attributes, field) in [
            (r#"{"colour":"red"}"#, "attributes.colour"),
            (r#"{"score":"high"}"#, "attributes.score"),
            (r#"{"reason":"rude"}"#, "attributes.reason"),
            (r#"{"reason":{"nested":1}}"#, "attributes.reason"),
            (r#"{"reason":"spam","score":1,"other":true}"#, "attributes"),
            (r#"["spam"]"#, "attributes"),
        ] {
            let error = error_of(&with(attributes));
            assert_eq!(
                error.status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{attributes}"
            );
            assert_eq!(error.body.index, Some(1), "{attributes}");
            assert_eq!(error.body.field.as_deref(), Some(field), "{attributes}");
        }
        // A string longer than the bound, past the enum check: declared without values.
        let long = format!(r#"{{"reason":"{}"}}"#, "s".repeat(17));
        assert!(
            error_of(&with(&long))
                .body
                .message
                .contains("16 characters")
        );
        let null = r#"{"id":"e","entity":"post:1","type":"flag","attributes":null}"#;
        assert_eq!(
            parse_events(null.as_bytes(), &checks(1)).unwrap()[0].attributes,
            None
        );
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::domain::{EntityId, EventId};

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

    /// A value of any JSON kind, often one a field nearly accepts.
    fn field_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-5.0f64..2000.0).prop_map(|f| serde_json::json!(f)),
            (0u64..3000).prop_map(|n| serde_json::json!(n)),
            Just(serde_json::json!([1])),
            Just(serde_json::json!({"a": 1})),
            "[a-z:0-9 \\x00\\x7f._-]{0,12}".prop_map(Value::String),
            prop_oneof![
                Just("post:1"),
                Just("user:9"),
                Just("normal"),
                Just("critical"),
                Just("2026-01-01T00:00:00Z"),
                Just("2026-13-01"),
                Just("flag"),
                Just(""),
                Just("x".repeat(129).leak() as &str),
                Just("Flag")
            ]
            .prop_map(|s| Value::String(s.to_owned())),
        ]
    }
    /// Events that are mostly valid, with a few fields (or unknown ones) set to anything.
    fn near_valid() -> impl Strategy<Value = Value> {
        let keys = prop_oneof![
            Just("id"),
            Just("entity"),
            Just("type"),
            Just("actor"),
            Just("weight"),
            Just("occurred_at"),
            Just("priority"),
            Just("author"),
            Just("colour"),
            Just("zeta")
        ];
        (
            prop::collection::vec((keys, field_value()), 0..4),
            any::<u8>(),
        )
            .prop_map(|(changes, base)| {
                let mut object = serde_json::Map::new();
                if base % 5 != 0 {
                    object.insert("id".into(), Value::String(format!("e{base}")));
                }
                if base % 7 != 0 {
                    object.insert("entity".into(), Value::String("post:7".into()));
                }
                if base % 11 != 0 {
                    object.insert("type".into(), Value::String("flag".into()));
                }
                for (k, v) in changes {
                    object.insert(k.to_owned(), v);
                }
                Value::Object(object)
            })
    }
    fn outcome(result: &Result<Vec<Event>, ApiError>) -> String {
        match result {
            Ok(events) => format!("{events:?}"),
            Err(e) => format!(
                "{} {} {:?} {:?} {}",
                e.status, e.body.code, e.body.index, e.body.field, e.body.message
            ),
        }
    }

    proptest! {
        /// Reading events straight into their type answers exactly what the full walk of the
        /// JSON (the path that names every problem) answers: the same events, or the same error,
        /// field, position and message.
        #[test]
        fn the_fast_path_answers_what_the_full_walk_answers(
            events in prop::collection::vec(near_valid(), 0..5),
            single in any::<bool>(),
        ) {
            let value = match events.first() {
                Some(event) if single => event.clone(),
                _ => Value::Array(events),
            };
            let body = serde_json::to_vec(&value).unwrap();
            prop_assert_eq!(outcome(&parse_events(&body, &checks(3))), outcome(&diagnose(&body, &checks(3))));
        }

        /// Any bytes: the parser answers events or a 4xx naming the problem, never panics.
        #[test]
        fn arbitrary_bytes_never_panic_and_errors_are_client_errors(body in prop::collection::vec(any::<u8>(), 0..512)) {
            if let Err(error) = parse_events(&body, &checks(1000)) {
                prop_assert!(error.status.is_client_error());
                prop_assert!(!error.body.message.is_empty());
            }
        }

        /// Any JSON shape: every accepted event satisfies the documented grammar.
        #[test]
        fn accepted_events_are_valid_and_rejections_name_a_problem(value in json_value()) {
            let body = serde_json::to_vec(&value).unwrap();
            match parse_events(&body, &checks(1000)) {
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
