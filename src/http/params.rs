//! Reading a request's path and query: entity ids, and query parameters a route does not take.

use axum::extract::{Path, rejection::PathRejection};

use super::error::ApiError;
use crate::domain::EntityId;

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

/// A route's one path parameter, or the API's JSON error naming it when the path does not decode
/// (a bad percent-encoding such as `%FF`), instead of axum's plain-text answer.
pub(super) fn path_param(
    path: Result<Path<String>, PathRejection>,
    name: &str,
) -> Result<String, ApiError> {
    path.map(|Path(value)| value).map_err(|_| {
        ApiError::bad_request(
            "invalid_path",
            format!("the {name} in the path is not valid percent-encoded UTF-8"),
        )
        .with_field(name)
    })
}

/// The `limit` query parameter: `default` when absent, else a whole number from 1 to `max`.
pub(super) fn page_limit(
    params: &std::collections::HashMap<String, String>,
    default: i64,
    max: i64,
) -> Result<i64, ApiError> {
    let Some(raw) = params.get("limit") else {
        return Ok(default);
    };
    raw.parse::<i64>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            bad_query(
                "limit",
                format!("limit must be a whole number from 1 to {max}"),
            )
        })
}

/// The `cursor` query parameter of an id-keyed page: the `next_cursor` of the page before.
pub(super) fn page_cursor(
    params: &std::collections::HashMap<String, String>,
) -> Result<Option<i64>, ApiError> {
    params
        .get("cursor")
        .map(|raw| {
            raw.parse::<i64>().map_err(|_| {
                bad_query(
                    "cursor",
                    "cursor must be a next_cursor from an earlier page",
                )
            })
        })
        .transpose()
}
