//! Rules versions: publishing a rules file as the next version (`POST /v1/rules`), listing
//! the versions (`GET /v1/rules/versions`) and making an earlier one active again
//! (`POST /v1/rules/versions/{version}/activate`). The `active_rules` use case does the work; every
//! process puts the new version in force within moments (LISTEN/NOTIFY, with a poll behind it).

use std::collections::HashMap;

use axum::{
    Json,
    extract::{Path, Query, State, rejection::PathRejection},
    http::StatusCode,
};
use serde_json::{Value, json};

use super::{
    AppState,
    auth::Requester,
    body::RequestBody,
    error::{ApiError, store_error},
    moderation::{invalid, json_object},
    params::{page_cursor, page_limit, path_param, unknown_parameters},
};
use crate::active_rules::{self, ActiveRulesError};

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

/// A text field of the body: `None` when absent or null.
fn text_field<'a>(
    object: &'a serde_json::Map<String, Value>,
    field: &str,
) -> Result<Option<&'a str>, ApiError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(invalid(Some(field), "must be a string")),
    }
}

/// `POST /v1/rules` with `{"rules": "<TOML>", "message": "..."}`.
#[utoipa::path(
    post,
    path = "/v1/rules",
    tag = "admin",
    description = "Publishes a rules file as the next rules version and makes it active: validated first (an invalid file is refused with the rule and the position, and nothing is stored), stored with its SHA-256, its author (the token's label) and the message, recorded in the audit trail (rules.publish), and put in force by every serve and worker process within moments. Role admin.",
    request_body(content = crate::http::schemas::PublishRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "Published and active", body = crate::http::schemas::RulesPublished),
        (status = 400, description = "Malformed JSON", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad field (field names it; invalid_rules for rules that do not load)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn publish(
    State(state): State<AppState>,
    requester: Requester,
    RequestBody(body): RequestBody,
) -> Result<(StatusCode, Json<active_rules::Published>), ApiError> {
    let object = json_object(&body, &["rules", "message"])?;
    let rules = text_field(&object, "rules")?
        .ok_or_else(|| invalid(Some("rules"), "is required: a rules file's TOML"))?;
    let message = text_field(&object, "message")?
        .ok_or_else(|| invalid(Some("message"), "is required: why this version"))?;
    let actor = requester.token_actor();
    let version = active_rules::publish(
        &state.store,
        Some(&state.rules),
        &actor,
        rules,
        message,
        None,
    )
    .await
    .map_err(|e| active_rules_error(e, "rules"))?;
    tracing::info!(version, "rules version published");
    Ok((
        StatusCode::CREATED,
        Json(active_rules::Published::new(version, rules)),
    ))
}

/// `GET /v1/rules/versions`: newest first, paged by version.
#[utoipa::path(
    get,
    path = "/v1/rules/versions",
    tag = "moderation",
    description = "The rules versions, newest first: number, hash, author (quiesce-guard for a version the guard published to turn a rule reversed too often to shadow, its message carrying the figures), message, time, whether it is the active one, and the backtest report it was published with (if any). Role moderator.",
    params(
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "Page size, default 50"),
        ("cursor" = Option<String>, Query, pattern = r"^[0-9]{1,18}$", description = "next_cursor of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of versions", body = crate::http::schemas::RulesVersionsPage),
        (status = 400, description = "A bad query parameter (code invalid_query; field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn versions(
    State(state): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    unknown_parameters(&params, &["limit", "cursor"])?;
    let limit = page_limit(&params, DEFAULT_LIMIT, MAX_LIMIT)?;
    let before = page_cursor(&params)?;
    let versions = state
        .store
        .rules_versions_page(before, limit)
        .await
        .map_err(store_error)?;
    let next_cursor = (versions.len() as i64 == limit)
        .then(|| versions.last().map(|v| v.version.to_string()))
        .flatten();
    Ok(Json(
        json!({ "versions": versions, "next_cursor": next_cursor }),
    ))
}

/// `POST /v1/rules/versions/{version}/activate` with `{"message": "..."}` (optional).
#[utoipa::path(
    post,
    path = "/v1/rules/versions/{version}/activate",
    tag = "admin",
    description = "Makes a stored rules version active again (a rollback): a new activation in the history, recorded in the audit trail (rules.rollback), put in force by every process within moments. Role admin.",
    params(("version" = i64, Path, minimum = 1, description = "The version to make active")),
    request_body(content = Option<crate::http::schemas::ActivateRequest>, content_type = "application/json"),
    responses(
        (status = 200, description = "Active", body = crate::http::schemas::RulesActivated),
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
    path: Result<Path<String>, PathRejection>,
    RequestBody(body): RequestBody,
) -> Result<Json<Value>, ApiError> {
    let raw = path_param(path, "version")?;
    let version = raw.parse::<i64>().ok().filter(|v| *v >= 1).ok_or_else(|| {
        ApiError::bad_request("invalid_path", "the version must be a whole number from 1")
            .with_field("version")
    })?;
    let default = format!("rolled back to version {version}");
    let message = if body.iter().all(u8::is_ascii_whitespace) {
        default
    } else {
        let object = json_object(&body, &["message"])?;
        text_field(&object, "message")?.map_or(default, str::to_owned)
    };
    let actor = requester.token_actor();
    active_rules::rollback(&state.store, Some(&state.rules), &actor, version, &message)
        .await
        .map_err(|e| active_rules_error(e, "version"))?;
    tracing::info!(version, "rules version activated again");
    Ok(Json(json!({ "version": version })))
}
