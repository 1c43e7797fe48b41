//! The OpenAPI 3.1 description of the API, served at `/openapi.json`. Paths come from the
//! `#[utoipa::path]` attributes on the handlers; the shapes that handlers build with `json!`
//! are described here (schemathesis checks every answer against them).

#![allow(dead_code)] // The types below only describe JSON; they are never built.

use std::collections::BTreeMap;

use axum::{Json, response::IntoResponse};
use chrono::{DateTime, Utc};
use utoipa::{
    Modify, OpenApi, ToSchema,
    openapi::{
        RefOr, Schema,
        schema::{ArrayBuilder, OneOfBuilder, Ref},
        security::{Http, HttpAuthScheme, SecurityScheme},
    },
};

use super::error::ErrorBody;
use crate::{
    domain::{Action, SignalStats, Status},
    store::Override,
};

/// Every error: `{"error": {"code", "message", "index"?, "field"?}}`.
#[derive(ToSchema)]
pub struct ErrorResponse {
    error: ErrorBody,
}

#[derive(ToSchema)]
#[serde(rename_all = "lowercase")]
enum Priority {
    Normal,
    Critical,
}

/// One event. Any other field is refused; an optional field set to null counts as absent.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// The sender's idempotency key, unique across all entities.
    #[schema(pattern = r"^[!-~]{1,128}$")]
    id: String,
    /// `<kind>:<id>`, e.g. `post:9842`.
    #[schema(pattern = r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.:-]{1,128}$")]
    entity: String,
    /// The signal, e.g. `upvote`, `flag`, `report.spam`.
    #[schema(pattern = r"^[a-z][a-z0-9_.]{0,63}$")]
    r#type: String,
    /// Who sent the signal; `actors()` counts distinct ones.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*$"
    )]
    actor: Option<String>,
    /// Default 1.
    #[schema(exclusive_minimum = 0.0, maximum = 1000.0)]
    weight: Option<f64>,
    /// RFC 3339; stored, scheduling uses Redis time.
    occurred_at: Option<DateTime<Utc>>,
    /// `critical` makes the entity due at once.
    priority: Option<Priority>,
    /// The entity's author, e.g. `user:77`.
    #[schema(pattern = r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.:-]{1,128}$")]
    author: Option<String>,
}

/// One event, or an array of 1 to `max_batch` (default 1000) events.
pub struct EventsBody;

impl utoipa::PartialSchema for EventsBody {
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

impl ToSchema for EventsBody {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((
            "Event".to_owned(),
            <Event as utoipa::PartialSchema>::schema(),
        ));
    }
}

#[derive(ToSchema)]
struct EvaluationView {
    pending: bool,
    fires_at: Option<DateTime<Utc>>,
    running: bool,
    pending_since: Option<DateTime<Utc>>,
    count: i64,
    last_evaluated_at: Option<DateTime<Utc>>,
    evaluated_event_count: i64,
}

/// An entity's status, aggregates and schedule.
#[derive(ToSchema)]
pub struct EntityView {
    entity: String,
    kind: String,
    status: Status,
    moderation_version: i64,
    signals: BTreeMap<String, SignalStats>,
    event_count: i64,
    evaluation: EvaluationView,
    last_event_at: DateTime<Utc>,
    /// The latest moderator override, in force or not.
    r#override: Option<Override>,
}

#[derive(ToSchema)]
pub struct ActionsPage {
    actions: Vec<crate::store::ActionRecord>,
    /// Pass as `cursor` for the next page; null on the last.
    next_cursor: Option<String>,
}

/// A moderator's decision. Texts are 1-1000 characters without control characters, not only
/// spaces.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReverseRequest {
    #[schema(
        max_length = 1000,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x20\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    moderator: String,
    #[schema(
        max_length = 1000,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x20\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    reason: String,
}

#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OverrideRequest {
    #[schema(
        max_length = 1000,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x20\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    moderator: String,
    status: Status,
    /// In the future; default now + `override_after_reversal`.
    until: Option<DateTime<Utc>>,
    #[schema(
        max_length = 1000,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x20\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    reason: String,
}

#[derive(ToSchema)]
pub struct OverrideResult {
    entity: String,
    status: Status,
    moderation_version: i64,
    r#override: Override,
}

#[derive(ToSchema)]
struct RuleRate {
    rule: String,
    actions: i64,
    reversed: i64,
    rate: f64,
}

#[derive(ToSchema)]
pub struct ReversalRate {
    window: String,
    actions: i64,
    reversed: i64,
    /// reversed / actions; 0 without actions.
    rate: f64,
    /// With `by=rule` only.
    by_rule: Option<Vec<RuleRate>>,
}

#[derive(ToSchema)]
struct RuleHits {
    live: i64,
    shadow: i64,
}

#[derive(ToSchema)]
struct RuleView {
    name: String,
    action: Action,
    kinds: Vec<String>,
    when: String,
    shadow: bool,
    hits_24h: RuleHits,
}

#[derive(ToSchema)]
pub struct RulesList {
    rules: Vec<RuleView>,
}

#[derive(ToSchema)]
pub struct RulesReloaded {
    /// Rules now in force.
    rules: usize,
}

#[derive(ToSchema)]
pub struct DeadLettersPage {
    dead_letters: Vec<crate::queue::DeadLetter>,
    next_cursor: Option<String>,
}

#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
enum DeadLetterReason {
    Fatal,
    AttemptsExhausted,
}

/// Optional: without a body (or without `reason`), every dead letter is redriven.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveRequest {
    reason: Option<DeadLetterReason>,
}

#[derive(ToSchema)]
pub struct Redriven {
    redriven: usize,
}

#[derive(ToSchema)]
pub struct Health {
    status: String,
}

#[derive(ToSchema)]
pub struct Readiness {
    /// `ready` or `unavailable`.
    status: String,
    /// `ok` or the error.
    redis: String,
    postgres: String,
}

fn error_response(description: &str) -> utoipa::openapi::ResponseBuilder {
    utoipa::openapi::ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            utoipa::openapi::ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorResponse")))
                .build(),
        )
}

/// 408, 500 and 503: what any `/v1` route may answer, whatever it does.
pub struct CommonErrors;

impl utoipa::IntoResponses for CommonErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::response::Response>> {
        let retry_after = utoipa::openapi::HeaderBuilder::new()
            .schema(<u64 as utoipa::PartialSchema>::schema())
            .description(Some("Seconds to wait"))
            .build();
        BTreeMap::from([
            (
                "408".to_owned(),
                error_response("The request took longer than request_timeout")
                    .build()
                    .into(),
            ),
            ("500".to_owned(), error_response("Unexpected error").build().into()),
            (
                "503".to_owned(),
                error_response(
                    "Redis or Postgres unavailable, shutting down, or (ingest) more than max_concurrent_ingest requests at once",
                )
                .header("Retry-After", retry_after)
                .build()
                .into(),
            ),
        ])
    }
}

/// [`CommonErrors`] and the token check's 401 and 403: what every token route may answer.
pub struct TokenRouteErrors;

impl utoipa::IntoResponses for TokenRouteErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::response::Response>> {
        let mut responses = <CommonErrors as utoipa::IntoResponses>::responses();
        responses.insert(
            "401".to_owned(),
            error_response("No API token, or not a valid one")
                .build()
                .into(),
        );
        responses.insert(
            "403".to_owned(),
            error_response("The token's role may not use this route")
                .build()
                .into(),
        );
        responses
    }
}

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "quiesce",
        description = "Moderation debounce scheduler: records every event, waits until an entity is quiet, then evaluates the rules once on a consistent snapshot and applies at most one action. Every /v1 route but the named-source one needs `Authorization: Bearer <token>` of the role its description names."
    ),
    paths(
        super::events::post_events,
        super::events::post_source_events,
        super::read::get_entity,
        super::moderation::list_actions,
        super::moderation::reverse,
        super::moderation::override_entity,
        super::moderation::reversal_rate,
        super::rules::list,
        super::rules::reload,
        super::dead_letters::list,
        super::dead_letters::redrive_many,
        super::dead_letters::redrive_one,
        super::health::healthz,
        super::health::readyz,
        openapi_json,
    ),
    // ErrorResponse is named here: the shared error responses refer to it by name.
    components(schemas(Event, ErrorResponse)),
    modifiers(&Security),
    tags(
        (name = "ingest", description = "Events in: role ingest, or a named source's signature"),
        (name = "moderation", description = "Role moderator"),
        (name = "admin", description = "Role admin"),
        (name = "health", description = "Open"),
    )
)]
pub struct ApiDoc;

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "health",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json"))
)]
pub async fn openapi_json() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}
