//! The shapes of the API's JSON bodies that handlers build with `json!`, described for the
//! OpenAPI document (schemathesis checks every answer against them), and the error responses
//! every route shares. The event itself is [`crate::domain::EventBody`].

#![allow(dead_code)] // The types below only describe JSON; they are never built.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use utoipa::{
    ToSchema,
    openapi::{
        RefOr, Schema,
        schema::{ArrayBuilder, OneOfBuilder, Ref},
    },
};

use super::error::ErrorBody;
use crate::{
    domain::{Action, EventBody, Scalar, SignalStats, SnapshotAttributes, Status},
    store::Override,
};

/// Every error: `{"error": {"code", "message", "index"?, "field"?}}`.
#[derive(ToSchema)]
pub struct ErrorResponse {
    error: ErrorBody,
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
            <EventBody as utoipa::PartialSchema>::schema(),
        ));
        schemas.push((
            "Priority".to_owned(),
            <crate::domain::Priority as utoipa::PartialSchema>::schema(),
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
    /// Aggregates of its events' attributes, its context and its author's.
    attributes: SnapshotAttributes,
    /// The timed action in force (a rule's `duration`, or a timed override): when it ends and
    /// the status its end restores; null when none.
    timer: Option<crate::domain::Timer>,
    /// Labels live rules recorded on the entity (`labels` on a rule), oldest first.
    labels: Vec<crate::store::LabelRecord>,
}

/// An entity's whole context: attribute names to strings, numbers or booleans, each declared
/// under `[attributes.entity.<name>]`; at most `max_attributes` (16), strings at most
/// `max_attribute_len` (256) characters. `{}` clears it.
#[derive(ToSchema)]
pub struct ContextRequest(BTreeMap<String, Scalar>);

/// The context recorded.
#[derive(ToSchema)]
pub struct ContextResult {
    entity: String,
    attributes: BTreeMap<String, Scalar>,
    set_at: DateTime<Utc>,
}

#[derive(ToSchema)]
pub struct AuditPage {
    entries: Vec<crate::store::AuditRecord>,
    /// Pass as `cursor` for the next page; null on the last.
    next_cursor: Option<String>,
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
    /// A timed override instead of `until` (`"24h"`: 1s to 365d): the status holds that long,
    /// then quiesce restores the status the entity had.
    #[schema(pattern = r"^[0-9]+[smhd]$")]
    duration: Option<String>,
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
struct RuleView {
    name: String,
    /// The status action; null for a rule that gives labels only.
    action: Option<Action>,
    /// Labels the rule records on the entity (no status change).
    labels: Vec<String>,
    /// A timed action's length in seconds (`duration`); null when the action is not timed.
    duration_secs: Option<u64>,
    /// The rule's exemption (`unless`), as written; null without one.
    unless: Option<String>,
    kinds: Vec<String>,
    when: String,
    shadow: bool,
    /// Whether the guard may turn it to shadow (false: `guard = false` in the rules file).
    guard: bool,
    hits_24h: crate::store::RuleHits,
}

#[derive(ToSchema)]
pub struct RulesList {
    /// The stored rules version in force in this process (null before one is stored).
    version: Option<crate::store::RulesVersion>,
    rules: Vec<RuleView>,
    /// The attributes the rules declare: what events (`event`) and entity context (`entity`)
    /// may carry.
    attributes: crate::domain::Declarations,
}

#[derive(ToSchema)]
pub struct RulesReloaded {
    /// Rules now in force.
    rules: usize,
    /// The rules version now in force here.
    version: Option<i64>,
}

/// A rules file to publish as the next version.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishRequest {
    /// A rules file, as `quiesce rules check` takes it.
    rules: String,
    /// Why this version: 1 to 1000 characters.
    #[schema(min_length = 1, max_length = 1000)]
    message: String,
}

#[derive(ToSchema)]
pub struct RulesPublished {
    /// The new version's number, now active.
    version: i64,
    /// Hex SHA-256 of the rules text.
    hash: String,
}

/// A rollback's reason (optional: "rolled back to version N").
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivateRequest {
    #[schema(min_length = 1, max_length = 1000)]
    message: Option<String>,
}

#[derive(ToSchema)]
pub struct RulesActivated {
    /// The version now active.
    version: i64,
}

#[derive(ToSchema)]
pub struct RulesVersionsPage {
    versions: Vec<crate::store::RulesVersionSummary>,
    /// The `cursor` of the next page; null on the last.
    next_cursor: Option<String>,
}

/// A backtest: the candidate is `rules` (a rules file's TOML) or `promote` (the rules in force
/// with this shadow rule turned live), one of the two.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BacktestRequest {
    /// A rules file, as `quiesce rules check` takes it.
    rules: Option<String>,
    /// The name of a shadow rule in force.
    promote: Option<String>,
    /// How far back: a duration such as 24h, 7d, 30days (at most 90 days); default 7d.
    #[schema(example = "7d")]
    since: Option<String>,
    /// Added actions to sample, with their snapshots: 0 to 100, default 10.
    #[schema(minimum = 0, maximum = 100)]
    sample: Option<u64>,
}

#[derive(ToSchema)]
pub struct DeadLettersPage {
    dead_letters: Vec<crate::domain::DeadLetter>,
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
    /// The rules version this process evaluates with (null before one is stored).
    rules_version: Option<i64>,
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
                error_response(
                    "The request took longer than request_timeout, or (ingest) its body came slower than body_min_rate after body_grace",
                )
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

/// [`TokenRouteErrors`] and the body limit's 413: what every token route that takes a body
/// may answer.
pub struct BodyRouteErrors;

impl utoipa::IntoResponses for BodyRouteErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::response::Response>> {
        let mut responses = <TokenRouteErrors as utoipa::IntoResponses>::responses();
        responses.insert(
            "413".to_owned(),
            error_response("The body is larger than body_limit (code payload_too_large)")
                .build()
                .into(),
        );
        responses
    }
}

#[derive(ToSchema)]
pub struct ReviewPage {
    items: Vec<crate::store::ReviewItem>,
    /// Pass as `cursor` for the next page; null on the last.
    next_cursor: Option<String>,
}

/// A claim on a review queue item.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    #[schema(
        max_length = 1000,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x20\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    moderator: String,
}

/// A decision on a review queue item the moderator holds a claim on.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideRequest {
    #[schema(
        max_length = 1000,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x20\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    moderator: String,
    decision: crate::domain::ReviewDecision,
    #[schema(
        max_length = 1000,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\x00-\x20\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    reason: String,
    /// The entity's moderation_version the decision was made on (the item's, as listed or
    /// claimed); a later change to the entity makes the decision a 409.
    #[schema(minimum = 0)]
    moderation_version: i64,
}
