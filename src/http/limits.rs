//! What one client can make the API do: events per second per source (429 with Retry-After,
//! so one noisy source cannot starve the others), ingest requests at once (503: shed rather
//! than queued) and how long a request may take (408). Limits are per process.

use std::{collections::HashMap, num::NonZeroU32, sync::Arc, time::Duration};

use axum::{
    extract::{Request, State},
    http::StatusCode,
    middleware::Next,
    response::{IntoResponse, Response},
};
use governor::{
    DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter, clock::Clock,
};
use tokio::sync::Semaphore;

use super::{AppState, error::ApiError};
use crate::{
    settings::{Http, Source},
    telemetry::names,
};

/// Whose budget a request spends.
#[derive(Debug, Clone, Copy)]
pub enum RateKey<'a> {
    /// A named source (`/v1/sources/{name}/events`), with its own configured rate.
    Source(&'a str),
    /// A client of `/v1/events`: its token's id, or `default` without tokens.
    Client(&'a str),
}

impl RateKey<'_> {
    fn label(&self) -> String {
        match self {
            RateKey::Source(name) => format!("source:{name}"),
            RateKey::Client(client) => (*client).to_owned(),
        }
    }
}

/// Token buckets counted in events: one per named source, one per client.
pub struct RateLimits {
    sources: HashMap<String, DefaultDirectRateLimiter>,
    clients: DefaultKeyedRateLimiter<String>,
}

fn quota(rate: u32, burst: u32) -> Quota {
    // Both are validated to be positive at load.
    let rate = NonZeroU32::new(rate).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(burst).unwrap_or(rate);
    Quota::per_second(rate).allow_burst(burst)
}

impl RateLimits {
    pub fn new(http: &Http, sources: &[Source]) -> Self {
        let sources = sources
            .iter()
            .map(|source| {
                let rate = source.rate_limit.unwrap_or(http.rate_limit);
                let burst = source.rate_burst.unwrap_or(http.rate_burst);
                (source.name.clone(), RateLimiter::direct(quota(rate, burst)))
            })
            .collect();
        Self {
            sources,
            clients: RateLimiter::keyed(quota(http.rate_limit, http.rate_burst)),
        }
    }

    /// Takes `events` from the key's bucket, or says how long until they would fit.
    pub fn check(&self, key: RateKey<'_>, events: usize) -> Result<(), ApiError> {
        let n = NonZeroU32::new(u32::try_from(events.max(1)).unwrap_or(u32::MAX))
            .unwrap_or(NonZeroU32::MIN);
        let wait = match key {
            RateKey::Source(name) => match self.sources.get(name) {
                Some(limiter) => match limiter.check_n(n) {
                    Ok(Ok(())) => None,
                    Ok(Err(not_until)) => Some(not_until.wait_time_from(limiter.clock().now())),
                    Err(_) => Some(Duration::from_secs(1)),
                },
                None => None,
            },
            RateKey::Client(client) => match self.clients.check_key_n(&client.to_owned(), n) {
                Ok(Ok(())) => None,
                Ok(Err(not_until)) => Some(not_until.wait_time_from(self.clients.clock().now())),
                Err(_) => Some(Duration::from_secs(1)),
            },
        };
        match wait {
            None => Ok(()),
            Some(wait) => {
                metrics::counter!(names::RATE_LIMITED, "source" => key.label()).increment(1);
                // Whole seconds, rounded up: a client that waits that long gets through.
                let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                Err(ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    format!(
                        "{} sends more events than its limit; retry after {} s",
                        key.label(),
                        seconds.max(1)
                    ),
                )
                .with_retry_after(seconds.max(1)))
            }
        }
    }
}

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
    let limit = state.limits.request_timeout;
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
