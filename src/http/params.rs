//! Reading a request's path: its one parameter, and entity ids (in the path or a query).

use axum::extract::{Path, rejection::PathRejection};

use super::error::ApiError;
use crate::domain::EntityId;

pub(super) fn bad_query(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid_query", message).with_field(field)
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
