//! Read API: one entity's state, and applied actions.

use axum::{
    Json,
    extract::{Path, State},
};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{AppState, error::ApiError};
use crate::{domain::EntityId, store::StoreError};

pub(super) fn store_error(error: StoreError) -> ApiError {
    match &error {
        _ if error.is_unavailable() => ApiError::unavailable(&error),
        StoreError::NotFound(message) => ApiError::not_found(message.clone()),
        StoreError::AlreadyReversed { .. } => ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "already_reversed",
            error.to_string(),
        ),
        StoreError::Superseded { .. } => ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "superseded",
            error.to_string(),
        ),
        _ => ApiError::internal(&error),
    }
}

pub(super) fn bad_query(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid_query", message).with_field(field)
}

/// Refuses a query parameter a route does not take, naming it.
pub(super) fn unknown_parameters(
    params: &std::collections::HashMap<String, String>,
    allowed: &[&str],
) -> Result<(), ApiError> {
    match params.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(unknown) => Err(bad_query(
            unknown,
            format!("unknown query parameter; use {}", allowed.join(", ")),
        )),
        None => Ok(()),
    }
}

pub(super) fn parse_entity(raw: &str) -> Result<EntityId, ApiError> {
    EntityId::parse(raw)
        .map_err(|e| ApiError::bad_request("invalid_entity", e.0).with_field("entity"))
}

fn millis_to_time(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::<Utc>::from_timestamp_millis(ms)
}

#[utoipa::path(
    get,
    path = "/v1/entities/{entity}",
    tag = "moderation",
    description = "One entity's status, aggregates and schedule. Role moderator.",
    params(
        ("entity" = String, Path, pattern = r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.:-]{1,128}$", description = "An entity id, e.g. post:9842"),
    ),
    responses(
        (status = 200, description = "The entity", body = crate::http::openapi::EntityView),
        (status = 400, description = "Not a valid entity id", body = crate::http::openapi::ErrorResponse),
        (status = 404, description = "No events were ever recorded for it", body = crate::http::openapi::ErrorResponse),
        crate::http::openapi::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn get_entity(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let entity = parse_entity(&raw)?;
    let record = state
        .store
        .entity(&entity)
        .await
        .map_err(store_error)?
        .ok_or_else(|| ApiError::not_found(format!("no events were ever recorded for {entity}")))?;
    let schedule = state
        .queue
        .state_of(&entity)
        .await
        .map_err(|e| ApiError::unavailable(&e))?;
    let pending = schedule.due_at_ms.is_some()
        || schedule.lease_until_ms.is_some()
        || record.event_count > record.evaluated_event_count;
    Ok(Json(json!({
        "entity": record.entity,
        "kind": record.kind,
        "status": record.status,
        "moderation_version": record.moderation_version,
        "signals": record.signals,
        "event_count": record.event_count,
        "evaluation": {
            "pending": pending,
            "fires_at": schedule.due_at_ms.and_then(millis_to_time),
            "running": schedule.lease_until_ms.is_some(),
            "pending_since": record.pending_since,
            "count": record.evaluation_count,
            "last_evaluated_at": record.last_evaluated_at,
            "evaluated_event_count": record.evaluated_event_count,
        },
        "last_event_at": record.last_event_at,
        "override": record.override_decision,
    })))
}
