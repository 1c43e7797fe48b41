//! What one client can make the API do: ingest requests at once (503: shed rather than queued)
//! and how long a request may take (408); its events per second are ingest's to count
//! (`ingest::RateLimits`, answered 429 with Retry-After). Limits are per process.

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::StatusCode,
    middleware::Next,
    response::{IntoResponse, Response},
};
use tokio::sync::Semaphore;

use super::{AppState, error::ApiError};
// Built by startup beside the rest of the HTTP state.
pub use crate::ingest::RateLimits;
use crate::telemetry::names;

/// Ingest requests in progress; at the cap, more are refused at once instead of queueing.
pub type IngestSlots = Arc<Semaphore>;

/// An ingest slot, held for the rest of the request; at the cap, the request is refused at once.
/// Taken by the handler once the sender is known, so requests nobody has authenticated yet
/// never hold one.
pub fn take_ingest_slot(state: &AppState) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    Arc::clone(&state.ingest_slots)
        .try_acquire_owned()
        .map_err(|_| {
            metrics::counter!(names::EVENTS_REJECTED, "reason" => "overloaded").increment(1);
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded",
                "too many ingest requests at once; retry shortly",
            )
            .with_retry_after(1)
        })
}

/// Answers 408 when a request (its body upload included) takes longer than the limit. An ingest
/// that was committed meanwhile is not undone: the retry reports its events as duplicates.
pub async fn request_timeout(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let limit = state.settings.http.request_timeout;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request took longer than {}; retry it (event ids make retries safe)",
                humantime::format_duration(limit)
            ),
        )
        .into_response(),
    }
}
