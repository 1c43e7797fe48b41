//! Dead letters: list them, and redrive one, all, or those of one reason (the `dead_letters`
//! use case). All from the durable record in Postgres; a redrive also makes the entities due in
//! Redis.

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
    params::{bad_query, parse_entity, path_param, unknown_parameters},
};
use crate::{
    dead_letters::{self, DeadLetterError},
    store::DeadLetterKey,
};

const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;
const REASONS: [&str; 2] = ["fatal", "attempts_exhausted"];

fn redrive_error(error: DeadLetterError) -> ApiError {
    match error {
        DeadLetterError::Store(error) => store_error(error),
        DeadLetterError::Queue(error) => ApiError::unavailable(error),
    }
}

#[utoipa::path(
    get,
    path = "/v1/dead-letters",
    tag = "admin",
    description = "Dead-lettered entities not yet redriven, oldest first, from the durable record in Postgres. Role admin.",
    params(
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 1000, description = "Page size, default 100"),
        ("cursor" = Option<String>, Query, pattern = r"^[0-9]{1,18}\.[0-9]{1,18}$", description = "next_cursor of the previous page (dead-lettered at in unix microseconds, a dot, the record's id)"),
    ),
    responses(
        (status = 200, description = "A page of dead letters", body = crate::http::schemas::DeadLettersPage),
        (status = 400, description = "A bad query parameter (code invalid_query)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    unknown_parameters(&params, &["limit", "cursor"])?;
    let limit = match params.get("limit") {
        None => DEFAULT_LIMIT,
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                bad_query(
                    "limit",
                    format!("limit must be a whole number from 1 to {MAX_LIMIT}"),
                )
            })?,
    };
    let cursor = match params.get("cursor") {
        None => None,
        Some(raw) => Some(DeadLetterKey::parse(raw).ok_or_else(|| {
            bad_query(
                "cursor",
                "cursor must be a next_cursor from an earlier page",
            )
        })?),
    };
    let page = dead_letters::list(&state.store, cursor, limit)
        .await
        .map_err(store_error)?;
    Ok(Json(json!({
        "dead_letters": page.entries,
        "next_cursor": page.next.map(|c| c.encode()),
    })))
}

#[utoipa::path(
    post,
    path = "/v1/dead-letters/{entity}/redrive",
    tag = "admin",
    description = "Makes one dead-lettered entity due again with fresh attempts. Role admin.",
    params(
        ("entity" = String, Path, pattern = r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.:-]{1,128}$", description = "An entity id, e.g. post:9842"),
    ),
    responses(
        (status = 200, description = "Redriven", body = crate::http::schemas::Redriven),
        (status = 400, description = "Not a valid entity id", body = crate::http::schemas::ErrorResponse),
        (status = 404, description = "The entity is not dead-lettered", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn redrive_one(
    State(state): State<AppState>,
    requester: Requester,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let raw = path_param(path, "entity")?;
    let entity = parse_entity(&raw)?;
    let by = requester.token_actor();
    let redriven = dead_letters::redrive(&state.store, &state.queue, &entity, &by)
        .await
        .map_err(redrive_error)?;
    if !redriven {
        return Err(ApiError::not_found(format!(
            "{entity} is not dead-lettered"
        )));
    }
    Ok(Json(json!({ "redriven": 1 })))
}

/// Body (optional): `{"reason": "fatal" | "attempts_exhausted"}`; without it, all.
#[utoipa::path(
    post,
    path = "/v1/dead-letters/redrive",
    tag = "admin",
    description = "Redrives every dead letter, or those of one reason. Role admin.",
    request_body(content = Option<crate::http::schemas::RedriveRequest>, content_type = "application/json"),
    responses(
        (status = 200, description = "How many were redriven", body = crate::http::schemas::Redriven),
        (status = 400, description = "Malformed JSON", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad body (field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn redrive_many(
    State(state): State<AppState>,
    requester: Requester,
    RequestBody(body): RequestBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let reason = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let value: Value = serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request("malformed_json", format!("the body is not valid JSON: {e}"))
        })?;
        let invalid = |message: &str| {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", message)
        };
        let object = match value {
            Value::Object(object) => object,
            // A JSON null is an empty body: redrive all.
            Value::Null => serde_json::Map::new(),
            _ => {
                return Err(invalid(
                    "the body must be an object such as {\"reason\": \"fatal\"}",
                ));
            }
        };
        if let Some(unknown) = object.keys().find(|k| k.as_str() != "reason") {
            return Err(
                invalid("unknown field; the body has only reason").with_field(unknown.clone())
            );
        }
        match object.get("reason") {
            None | Some(Value::Null) => None,
            Some(Value::String(reason)) if REASONS.contains(&reason.as_str()) => {
                Some(reason.clone())
            }
            Some(_) => {
                return Err(
                    invalid("reason must be \"fatal\" or \"attempts_exhausted\"")
                        .with_field("reason"),
                );
            }
        }
    };
    let redriven = dead_letters::redrive_all(
        &state.store,
        &state.queue,
        reason.as_deref(),
        &requester.token_actor(),
    )
    .await
    .map_err(redrive_error)?;
    Ok((StatusCode::OK, Json(json!({ "redriven": redriven }))))
}
