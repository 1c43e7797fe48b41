//! Reading a body within its size: an ingest body also within its pace (a sender that trickles
//! a body, one byte then nothing, is cut off with 408 after a short grace instead of holding its
//! slot for the whole request_timeout), every other route's through [`RequestBody`].

use std::time::Duration;

use axum::{
    body::{Body, Bytes},
    extract::{FromRequest, Request},
    http::{StatusCode, header},
};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio::time::Instant;

use super::{AppState, error::ApiError};
use crate::settings::Http;

/// The body of a route that takes JSON (every route but ingest's), at most `body_limit` bytes.
/// A larger one gets the API's JSON 413, `payload_too_large`: axum's own `Bytes` extractor
/// answers a plain-text one.
pub struct RequestBody(pub Bytes);

impl FromRequest<AppState> for RequestBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let limit = state.settings.http.body_limit;
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|length| length > limit as u64) {
            return Err(ApiError::payload_too_large(limit));
        }
        match Limited::new(request.into_body(), limit).collect().await {
            Ok(collected) => Ok(Self(collected.to_bytes())),
            Err(error) if error.is::<LengthLimitError>() => Err(ApiError::payload_too_large(limit)),
            Err(error) => Err(ApiError::bad_request(
                "unreadable_body",
                format!("the body could not be read: {error}"),
            )),
        }
    }
}

/// The slowest upload accepted: `min_rate` bytes per second on average, after `grace`.
#[derive(Debug, Clone, Copy)]
pub struct BodyPace {
    pub min_rate: u32,
    pub grace: Duration,
}

/// The pace the settings ask for.
impl From<&Http> for BodyPace {
    fn from(http: &Http) -> Self {
        Self {
            min_rate: http.body_min_rate,
            grace: http.body_grace,
        }
    }
}

impl BodyPace {
    /// By when `bytes` must have arrived; `None`: later than the clock can say (absurd settings),
    /// which request_timeout still bounds.
    fn deadline(&self, started: Instant, bytes: usize) -> Option<Instant> {
        let pace = Duration::try_from_secs_f64(bytes as f64 / f64::from(self.min_rate)).ok()?;
        started.checked_add(self.grace)?.checked_add(pace)
    }

    fn too_slow(&self) -> ApiError {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the body arrived slower than {} bytes/s after the first {}; send it at once",
                self.min_rate,
                humantime::format_duration(self.grace)
            ),
        )
    }
}

/// The whole body, at most `limit` bytes, each next byte arriving by the pace's deadline.
pub async fn read_body(mut body: Body, limit: usize, pace: BodyPace) -> Result<Bytes, ApiError> {
    let started = Instant::now();
    // Most bodies come in one frame: it is returned as it is, without a copy.
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut received = 0;
    loop {
        let next = body.frame();
        let frame = match pace.deadline(started, received + 1) {
            Some(deadline) => tokio::time::timeout_at(deadline, next).await,
            None => Ok(next.await),
        };
        let frame = match frame {
            Err(_) => return Err(pace.too_slow()),
            Ok(None) => break,
            Ok(Some(Err(error))) => {
                return Err(ApiError::bad_request(
                    "unreadable_body",
                    format!("the body could not be read: {error}"),
                ));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            received += data.len();
            if received > limit {
                return Err(ApiError::payload_too_large(limit));
            }
            if !data.is_empty() {
                chunks.push(data);
            }
        }
    }
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().unwrap_or_default(),
        _ => Bytes::from(chunks.concat()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_grows_with_what_has_arrived() {
        let pace = BodyPace {
            min_rate: 1000,
            grace: Duration::from_secs(5),
        };
        let start = Instant::now();
        assert_eq!(
            pace.deadline(start, 1).unwrap() - start,
            Duration::from_millis(5001)
        );
        assert_eq!(
            pace.deadline(start, 2000).unwrap() - start,
            Duration::from_secs(7)
        );
        let forever = BodyPace {
            min_rate: 1,
            grace: Duration::MAX,
        };
        assert_eq!(forever.deadline(start, 1), None, "no overflow panic");
    }
}
