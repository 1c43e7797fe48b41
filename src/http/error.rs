//! The one error shape of the API: `{"error": {"code", "message", "index"?, "field"?,
//! "appeal"?}}`.
//! A 5xx keeps its cause, which clients never see: [`log_server_errors`] logs it once, with
//! the whole chain of causes, in the request's span.

use std::{
    error::Error,
    sync::{Arc, Mutex},
};

use axum::{
    Json,
    extract::Request,
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use serde::Serialize;

use crate::{
    ingest::SubmitError,
    moderation::{ReversalError, ReversalRefusal},
    review::{ReviewError, ReviewRefusal},
    store::StoreError,
    telemetry::Chain,
};

/// The longest `field` an error names, in characters (then `…`).
pub const MAX_FIELD_CHARS: usize = 64;

/// Seconds a client should wait before retrying after a 503.
const RETRY_AFTER_SECS: u64 = 2;

/// Every error: `{"error": {"code", "message", "index"?, "field"?, "appeal"?}}`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub code: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The earlier appeal an appeal is refused for (`appeal_open`, `appeal_rejected`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub appeal: Option<i64>,
}

/// Why a request failed on our side; logged, never answered.
type Cause = Arc<dyn Error + Send + Sync>;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    /// Boxed: every handler returns `Result<_, ApiError>`, which stays small this way.
    pub body: Box<ErrorBody>,
    /// Seconds for the Retry-After header; 503s get a default.
    pub retry_after: Option<u64>,
    cause: Option<Cause>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            body: Box::new(ErrorBody {
                code,
                message: message.into(),
                index: None,
                field: None,
                appeal: None,
            }),
            retry_after: None,
            cause: None,
        }
    }

    /// A body (declared or read) larger than `body_limit`.
    pub fn payload_too_large(body_limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the body is larger than {body_limit} bytes"),
        )
    }

    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// Names the field at fault. A name that came from the client (an unknown field, say) is
    /// cut to [`MAX_FIELD_CHARS`] characters, so the answer never grows with the request.
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        let mut field = field.into();
        if let Some((cut, _)) = field.char_indices().nth(MAX_FIELD_CHARS) {
            field.truncate(cut);
            field.push('…');
        }
        self.body.field = Some(field);
        self
    }

    pub fn with_index(mut self, index: Option<usize>) -> Self {
        self.body.index = index;
        self
    }

    /// Names the earlier appeal a new one is refused for.
    pub fn with_appeal(mut self, appeal: i64) -> Self {
        self.body.appeal = Some(appeal);
        self
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// Redis or Postgres could not be reached in time; the client should retry.
    pub fn unavailable(cause: impl Error + Send + Sync + 'static) -> Self {
        Self {
            cause: Some(Arc::new(cause)),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "storage is unavailable; retry later",
            )
        }
    }

    /// Anything unexpected: opaque to the client, its cause logged.
    pub fn internal(cause: impl Error + Send + Sync + 'static) -> Self {
        Self {
            cause: Some(Arc::new(cause)),
            ..Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error",
            )
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // Messages never carry secrets, so refusals can be logged as they are answered.
        tracing::debug!(status = self.status.as_u16(), code = self.body.code, message = %self.body.message, "request refused");
        let retry = self
            .retry_after
            .or((self.status == StatusCode::SERVICE_UNAVAILABLE).then_some(RETRY_AFTER_SECS));
        let mut response = (self.status, Json(ErrorResponse { error: *self.body })).into_response();
        if let Some(seconds) = retry {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(cause) = self.cause {
            response.extensions_mut().insert(cause);
        }
        response
    }
}

/// Middleware: logs the cause of every 5xx once, with its chain, in the request's span (an
/// overloaded 503 has no cause: it is no failure of ours). A backend outage answers every
/// request 503 until it is over: its first 503 is a warning, the rest debug lines, and the
/// first request answered after it an info line with their count (`OutageLog`).
pub async fn log_server_errors(outages: Arc<OutageLog>, request: Request, next: Next) -> Response {
    let checks_nothing = request.uri().path() == "/healthz";
    let response = next.run(request).await;
    if let Some(cause) = response.extensions().get::<Cause>() {
        let error = Chain(&**cause);
        if response.status() == StatusCode::SERVICE_UNAVAILABLE {
            outages.unavailable(&error);
        } else {
            tracing::error!(%error, "internal error");
        }
    } else if response.status().is_success() && !checks_nothing {
        outages.answered();
    }
    response
}

/// The backend outage under way, as the API's answers show it.
#[derive(Debug, Default)]
pub struct OutageLog {
    /// 503s answered since the outage began.
    under_way: Mutex<Option<u64>>,
}

impl OutageLog {
    fn unavailable(&self, error: &Chain<'_>) {
        let mut under_way = self.under_way.lock().expect("not poisoned");
        match &mut *under_way {
            Some(answered) => {
                *answered += 1;
                tracing::debug!(%error, "backend unavailable");
            }
            None => {
                *under_way = Some(1);
                tracing::warn!(%error, "backend unavailable; answering 503 with Retry-After until it is back");
            }
        }
    }

    fn answered(&self) {
        if let Some(answered) = self.under_way.lock().expect("not poisoned").take() {
            tracing::info!(
                answered_503 = answered,
                "backend available again; requests are answered"
            );
        }
    }
}

/// How ingest's refusals reach a client: a sender over its rate is 429 with Retry-After; a
/// group commit's failure is a 503 whose cause its committer logged, once for the group.
impl From<SubmitError> for ApiError {
    fn from(error: SubmitError) -> Self {
        match error {
            SubmitError::RateLimited(limited) => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                limited.to_string(),
            )
            .with_retry_after(limited.retry_after),
            SubmitError::GroupFailed(_) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "storage is unavailable; retry later",
            ),
            SubmitError::Unavailable(cause) => ApiError::unavailable(cause),
        }
    }
}

/// How a store error reaches a client: an outage is 503, a missing or conflicting record its
/// 4xx, anything else an opaque 500.
pub fn store_error(error: StoreError) -> ApiError {
    match &error {
        _ if error.is_unavailable() => ApiError::unavailable(error),
        StoreError::NotFound(message) => ApiError::not_found(message.clone()),
        StoreError::VersionConflict { .. } => ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "version_conflict",
            error.to_string(),
        ),
        _ => ApiError::internal(error),
    }
}

/// A review queue refusal is 409, its code naming which (the error table of docs/reference/http-api.md).
impl From<ReviewError> for ApiError {
    fn from(error: ReviewError) -> Self {
        let refusal = match error {
            ReviewError::Refused(refusal) => refusal,
            ReviewError::Store(error) => return store_error(error),
        };
        let code = match &refusal {
            ReviewRefusal::Escalated { .. } => "escalated",
            ReviewRefusal::ClaimedByAnother { .. } => "claimed",
            ReviewRefusal::NotWaiting { .. } => "not_waiting",
            ReviewRefusal::AlreadyDecided { .. } => "already_decided",
            ReviewRefusal::FlagReversed { .. } => "reversed",
            ReviewRefusal::NotClaimed { .. } => "not_claimed",
            ReviewRefusal::EntityChanged { .. } => "version_conflict",
        };
        ApiError::new(StatusCode::CONFLICT, code, refusal.to_string())
    }
}

/// A reversal refused is 409, its code naming why.
impl From<ReversalError> for ApiError {
    fn from(error: ReversalError) -> Self {
        match error {
            ReversalError::Refused(refusal) => {
                let code = match &refusal {
                    ReversalRefusal::AlreadyReversed { .. } => "already_reversed",
                    ReversalRefusal::Superseded { .. } => "superseded",
                };
                ApiError::new(StatusCode::CONFLICT, code, refusal.to_string())
            }
            ReversalError::Store(error) => store_error(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::{Router, body::Body, routing::get};
    use tower::ServiceExt;

    use super::*;

    /// An error whose message names only its own level; the details are in its source.
    #[derive(Debug, thiserror::Error)]
    #[error("the snapshot read failed")]
    struct Outer(#[source] std::io::Error);

    /// The middleware as the router mounts it, with an outage log of its own.
    fn with_outage_log()
    -> impl Fn(
        Request,
        Next,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send>>
    + Clone {
        let outages = Arc::new(OutageLog::default());
        move |request, next| Box::pin(log_server_errors(Arc::clone(&outages), request, next))
    }

    /// Runs `work` on a runtime of its own under a subscriber that keeps what it logs.
    fn logged<T>(work: impl std::future::Future<Output = T>) -> (T, String) {
        crate::telemetry::captured::logged(tracing::Level::INFO, || {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(work)
        })
    }

    #[test]
    fn an_outage_is_one_warning_however_many_requests_it_answers_503() {
        let router = Router::new()
            .route(
                "/down",
                get(|| async {
                    ApiError::unavailable(std::io::Error::other("connection refused"))
                }),
            )
            .route("/up", get(|| async { "ok" }))
            .route("/healthz", get(|| async { "ok" }))
            .layer(axum::middleware::from_fn(with_outage_log()));
        let ((), logs) = logged(async {
            for path in ["/down", "/down", "/healthz", "/down", "/up", "/down"] {
                let request = Request::get(path).body(Body::empty()).unwrap();
                router.clone().oneshot(request).await.unwrap();
            }
        });
        let warnings: Vec<&str> = logs.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(
            warnings.len(),
            2,
            "one per outage (the second after /up): {logs}"
        );
        assert!(
            warnings[0].contains("connection refused"),
            "the cause is named: {logs}"
        );
        let back: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains("backend available again"))
            .collect();
        assert_eq!(
            back.len(),
            1,
            "/healthz checks nothing, /up ends it: {logs}"
        );
        assert!(back[0].contains("answered_503=3"), "{logs}");
        assert!(!logs.contains("ERROR"), "{logs}");
    }

    #[test]
    fn a_server_error_logs_its_whole_chain_once_and_answers_without_it() {
        let router = Router::new()
            .route(
                "/fails",
                get(|| async {
                    let cause = std::io::Error::other("connection reset by peer");
                    ApiError::internal(Outer(cause))
                }),
            )
            .route(
                "/busy",
                get(|| async {
                    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", "busy")
                }),
            )
            .layer(axum::middleware::from_fn(with_outage_log()));
        let ((status, body), logs) = logged(async {
            let busy = Request::get("/busy").body(Body::empty()).unwrap();
            let busy = router.clone().oneshot(busy).await.unwrap();
            assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
            let request = Request::get("/fails").body(Body::empty()).unwrap();
            let response = router.oneshot(request).await.unwrap();
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), 1 << 16)
                .await
                .unwrap();
            (status, String::from_utf8(body.to_vec()).unwrap())
        });
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!body.contains("connection reset"), "{body}");
        let chain = "the snapshot read failed: connection reset by peer";
        assert_eq!(logs.matches(chain).count(), 1, "{logs}");
        assert_eq!(
            logs.lines().count(),
            1,
            "the overloaded 503 logs nothing: {logs}"
        );
    }
}
