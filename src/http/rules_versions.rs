//! Rules versions: publishing a rules file as the next version (`POST /v1/rules`), listing
//! the versions (`GET /v1/rules/versions`) and making an earlier one active again
//! (`POST /v1/rules/versions/{version}/activate`). The `active_rules` use case does the work; every
//! process puts the new version in force within moments (LISTEN/NOTIFY, with a poll behind it).

use axum::{Json, extract::State, http::StatusCode};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{
    AppState,
    auth::Requester,
    error::{ApiError, store_error},
    extract::{ApiJson, ApiPath, ApiQuery, JsonBody, invalid},
    wire::RulesVersionSummary,
};
use crate::{
    active_rules::{self, ActiveRulesError},
    request::{fields, path::RulesVersion},
};

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;

/// How a failed publish or rollback reaches the client: rules that do not compile are 422
/// naming the rule and the position, a bad message 422 naming the field.
pub(crate) fn active_rules_error(error: ActiveRulesError, field: &str) -> ApiError {
    match error {
        ActiveRulesError::Invalid(error) => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_rules",
            format!("{error}; nothing was published"),
        )
        .with_field(field),
        ActiveRulesError::Stored { .. } => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_rules",
            format!("{error}; the active version stays"),
        ),
        ActiveRulesError::Message(problem) => {
            invalid(Some("message"), &format!("message {problem}"))
        }
        ActiveRulesError::Store(error) => store_error(error),
    }
}

/// A rules file to publish as the next version.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishRequest {
    /// A rules file, as `quiesce rules check` takes it.
    #[serde(default, deserialize_with = "fields::optional_string")]
    #[schema(value_type = String, required = true)]
    rules: Option<String>,
    /// Why this version: 1 to 1000 characters.
    #[serde(default, deserialize_with = "fields::optional_string")]
    #[schema(value_type = String, required = true, min_length = 1, max_length = 1000)]
    message: Option<String>,
}

impl JsonBody for PublishRequest {}

/// `POST /v1/rules` with `{"rules": "<TOML>", "message": "..."}`.
#[utoipa::path(
    post,
    path = "/v1/rules",
    tag = "admin",
    description = "Publishes a rules file as the next rules version and makes it active: validated first (an invalid file is refused with the rule and the position, and nothing is stored), stored with its SHA-256, its author (the token's label) and the message, recorded in the audit trail (rules.publish), and put in force by every serve and worker process within moments. Role admin.",
    request_body(content = PublishRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "Published and active", body = active_rules::Published),
        (status = 400, description = "Malformed JSON", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad field (field names it; invalid_rules for rules that do not load)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn publish(
    State(state): State<AppState>,
    requester: Requester,
    ApiJson(body): ApiJson<PublishRequest>,
) -> Result<(StatusCode, Json<active_rules::Published>), ApiError> {
    // Required, each with its own words: a derived missing field would only say "is required".
    let rules = body
        .rules
        .ok_or_else(|| invalid(Some("rules"), "is required: a rules file's TOML"))?;
    let message = body
        .message
        .ok_or_else(|| invalid(Some("message"), "is required: why this version"))?;
    let actor = requester.token_actor();
    let version = active_rules::publish(
        &state.store,
        Some(&state.rules),
        &actor,
        &rules,
        &message,
        None,
    )
    .await
    .map_err(|e| active_rules_error(e, "rules"))?;
    tracing::info!(version, "rules version published");
    Ok((
        StatusCode::CREATED,
        Json(active_rules::Published::new(version, &rules)),
    ))
}

/// A page of an id-keyed listing: its size and where it starts.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct VersionsQuery {
    /// Page size, default 50
    #[serde(default, deserialize_with = "fields::limit::<_, MAX_LIMIT>")]
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
    /// next_cursor of the previous page
    #[serde(default, deserialize_with = "fields::id_cursor")]
    #[param(value_type = Option<String>, pattern = r"^[0-9]{1,18}$")]
    cursor: Option<i64>,
}

#[derive(Serialize, ToSchema)]
pub struct RulesVersionsPage {
    versions: Vec<RulesVersionSummary>,
    /// The `cursor` of the next page; null on the last.
    next_cursor: Option<String>,
}

/// `GET /v1/rules/versions`: newest first, paged by version.
#[utoipa::path(
    get,
    path = "/v1/rules/versions",
    tag = "moderation",
    description = "The rules versions, newest first: number, hash, author (quiesce-guard for a version the guard published to turn a rule reversed too often to shadow, its message carrying the figures), message, time, whether it is the active one, and the backtest report it was published with (if any). Role moderator.",
    params(VersionsQuery),
    responses(
        (status = 200, description = "A page of versions", body = RulesVersionsPage),
        (status = 400, description = "A bad query parameter (code invalid_query; field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn versions(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<VersionsQuery>,
) -> Result<Json<RulesVersionsPage>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    let before = query.cursor;
    let versions = state
        .store
        .rules_versions()
        .rules_versions_page(before, limit)
        .await
        .map_err(store_error)?;
    let next_cursor = (versions.len() as i64 == limit)
        .then(|| versions.last().map(|v| v.version.to_string()))
        .flatten();
    Ok(Json(RulesVersionsPage {
        versions: versions.into_iter().map(Into::into).collect(),
        next_cursor,
    }))
}

/// A rollback's reason (optional: "rolled back to version N").
#[derive(Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivateRequest {
    #[serde(default, deserialize_with = "fields::optional_string")]
    #[schema(min_length = 1, max_length = 1000)]
    message: Option<String>,
}

impl JsonBody for ActivateRequest {
    fn when_empty() -> Option<Self> {
        Some(Self::default())
    }
}

#[derive(Serialize, ToSchema)]
pub struct RulesActivated {
    /// The version now active.
    version: i64,
}

/// `POST /v1/rules/versions/{version}/activate` with `{"message": "..."}` (optional).
#[utoipa::path(
    post,
    path = "/v1/rules/versions/{version}/activate",
    tag = "admin",
    description = "Makes a stored rules version active again (a rollback): a new activation in the history, recorded in the audit trail (rules.rollback), put in force by every process within moments. Role admin.",
    params(("version" = i64, Path, minimum = 1, description = "The version to make active")),
    request_body(content = Option<ActivateRequest>, content_type = "application/json"),
    responses(
        (status = 200, description = "Active", body = RulesActivated),
        (status = 400, description = "A bad path or malformed JSON", body = crate::http::schemas::ErrorResponse),
        (status = 404, description = "No such version", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad field, or a version this release cannot load (invalid_rules)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn activate(
    State(state): State<AppState>,
    requester: Requester,
    ApiPath(RulesVersion(version)): ApiPath<RulesVersion>,
    ApiJson(body): ApiJson<ActivateRequest>,
) -> Result<Json<RulesActivated>, ApiError> {
    let message = body
        .message
        .unwrap_or_else(|| format!("rolled back to version {version}"));
    let actor = requester.token_actor();
    active_rules::rollback(&state.store, Some(&state.rules), &actor, version, &message)
        .await
        .map_err(|e| active_rules_error(e, "version"))?;
    tracing::info!(version, "rules version activated again");
    Ok(Json(RulesActivated { version }))
}
