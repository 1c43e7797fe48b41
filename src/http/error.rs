//! The one error shape of the API: `{"error": {"code", "message", "index"?, "field"?}}`.
//! Internal errors are logged here and shown to clients without their details.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Serialize;

use crate::store::StoreError;

/// Seconds a client should wait before retrying after a 503.
const RETRY_AFTER_SECS: u64 = 2;

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub code: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
    /// Seconds for the Retry-After header; 503s get a default.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            body: ErrorBody {
                code,
                message: message.into(),
                index: None,
                field: None,
            },
            retry_after: None,
        }
    }

    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.body.field = Some(field.into());
        self
    }

    pub fn with_index(mut self, index: Option<usize>) -> Self {
        self.body.index = index;
        self
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// Redis or Postgres could not be reached in time; the client should retry.
    pub fn unavailable(cause: &dyn std::fmt::Display) -> Self {
        tracing::warn!(error = %cause, "backend unavailable");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "storage is unavailable; retry later",
        )
    }

    /// Anything unexpected: logged with its cause, opaque to the client.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // Messages never carry secrets, so refusals can be logged as they are answered.
        tracing::debug!(status = self.status.as_u16(), code = self.body.code, message = %self.body.message, "request refused");
        let retry = self
            .retry_after
            .or((self.status == StatusCode::SERVICE_UNAVAILABLE).then_some(RETRY_AFTER_SECS));
        let mut response =
            (self.status, Json(serde_json::json!({ "error": self.body }))).into_response();
        if let Some(seconds) = retry {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// How a store error reaches a client: an outage is 503, a missing or conflicting record its
/// 4xx, anything else an opaque 500.
pub fn store_error(error: StoreError) -> ApiError {
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
