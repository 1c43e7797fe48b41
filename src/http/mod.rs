//! The HTTP API: ingest, read, moderation, admin and health. Every `/v1` route passes the
//! request timeout and the role check; the ingest routes also the concurrency cap. Metrics are
//! served on a listener of their own ([`metrics_router`]).

mod appeals;
mod audit;
pub mod auth;
mod backtest;
pub mod body;
mod context;
mod dead_letters;
mod error;
mod evaluations;
mod events;
mod extract;
mod health;
pub mod limits;
mod linger;
pub mod moderation;
pub mod openapi;
mod read;
mod review;
mod rules;
mod rules_versions;
pub mod schemas;
pub mod server;
pub mod signature;
mod state;
mod wire;

use std::{sync::Arc, time::Instant};

use axum::{
    Router,
    extract::{DefaultBodyLimit, MatchedPath, Request},
    middleware::{self, Next},
    response::Response,
    routing::{get, post, put},
};
use metrics_exporter_prometheus::PrometheusHandle;
use tower_http::{
    sensitive_headers::SetSensitiveRequestHeadersLayer,
    trace::{DefaultOnFailure, TraceLayer},
};

pub use self::{
    backtest::backtest_error,
    error::ApiError,
    events::parse_events,
    state::{AppState, Shared},
};
use crate::{
    queue::Queue,
    store::Store,
    telemetry::{
        names,
        traces::{self, TraceParent},
    },
};

/// The W3C trace context a request came in, if it sent a valid one.
fn inbound_trace(headers: &axum::http::HeaderMap) -> Option<TraceParent> {
    headers
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .and_then(TraceParent::parse)
}

/// What the console's pages use of the API's state.
impl crate::console::ConsoleApp for AppState {
    fn console_app(&self) -> crate::console::App {
        crate::console::App {
            store: self.store.clone(),
            queue: self.queue.clone(),
            rules: Arc::clone(&self.rules),
            auth: Arc::clone(&self.auth),
            backtests: Arc::clone(&self.backtests),
            override_after_reversal: self.settings.moderation.override_after_reversal,
            review_claim: self.settings.moderation.review_claim,
            demoter: crate::active_rules::RuleDemoter::new(
                &self.settings.moderation,
                Some(self.rules.clone()),
            ),
        }
    }
}

pub fn router(state: AppState) -> Router {
    router_with(state, Router::new())
}

/// The API with `pages` (the moderator console) mounted beside it on the same listener,
/// behind the same request span, metrics and error logging.
pub fn router_with(state: AppState, pages: Router<AppState>) -> Router {
    let body_limit = state.settings.http.body_limit;
    let api = Router::new()
        .route("/v1/events", post(events::post_events))
        .route(
            "/v1/sources/{source}/events",
            post(events::post_source_events),
        )
        .route("/v1/entities/{entity}", get(read::get_entity))
        .route(
            "/v1/entities/{entity}/evaluations",
            get(evaluations::list_evaluations),
        )
        .route(
            "/v1/entities/{entity}/attributes",
            put(context::put_attributes),
        )
        .route("/v1/actions", get(moderation::list_actions))
        .route("/v1/actions/{id}/reverse", post(moderation::reverse))
        .route(
            "/v1/entities/{entity}/timer/end",
            post(moderation::end_timer),
        )
        .route(
            "/v1/entities/{entity}/override",
            post(moderation::override_entity),
        )
        .route("/v1/stats/reversal-rate", get(moderation::reversal_rate))
        .route("/v1/statements", get(appeals::list_statements))
        .route(
            "/v1/statements/{id}/appeals",
            post(appeals::appeal_statement),
        )
        .route("/v1/actions/{id}/appeals", post(appeals::appeal_action))
        .route("/v1/appeals", get(appeals::list_appeals))
        .route("/v1/appeals/{id}/claim", post(appeals::claim_appeal))
        .route("/v1/appeals/{id}/decide", post(appeals::decide_appeal))
        .route("/v1/review", get(review::list))
        .route("/v1/review/{id}/claim", post(review::claim))
        .route("/v1/review/{id}/decide", post(review::decide))
        .route("/v1/rules", get(rules::list).post(rules_versions::publish))
        .route("/v1/rules/versions", get(rules_versions::versions))
        .route(
            "/v1/rules/versions/{version}/activate",
            post(rules_versions::activate),
        )
        .route("/v1/rules/reload", post(rules::reload))
        .route("/v1/rules/backtest", post(backtest::backtest))
        .route("/v1/dead-letters", get(dead_letters::list))
        .route("/v1/audit", get(audit::list))
        .route("/v1/dead-letters/redrive", post(dead_letters::redrive_many))
        .route(
            "/v1/dead-letters/{entity}/redrive",
            post(dead_letters::redrive_one),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_role,
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            limits::request_timeout,
        ));
    // The console's pages are bounded in time as the API's routes are.
    let pages = pages.layer(middleware::from_fn_with_state(
        state.clone(),
        limits::request_timeout,
    ));
    Router::new()
        .merge(api)
        .merge(pages)
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/openapi.json", get(openapi::openapi_json))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not take that method",
            )
        })
        .layer(middleware::from_fn({
            let outages = Arc::new(error::OutageLog::default());
            move |request, next| error::log_server_errors(Arc::clone(&outages), request, next)
        }))
        .layer(middleware::from_fn(record_request))
        .layer(
            TraceLayer::new_for_http()
                // 5xx are logged by log_server_errors, with their cause, once per outage.
                .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG))
                .make_span_with(|request: &Request| {
                    // One id per request, on every log line it causes; the route is the template.
                    let route = request
                        .extensions()
                        .get::<MatchedPath>()
                        .map_or("unmatched", |p| p.as_str());
                    let span = tracing::info_span!(
                        "request",
                        method = %request.method(),
                        route,
                        request_id = %uuid::Uuid::new_v4().simple(),
                    );
                    // A platform's trace goes on through this request (when spans are exported).
                    traces::continue_trace(&span, inbound_trace(request.headers()).as_ref());
                    span
                }),
        )
        // Marked sensitive, these header values print as `Sensitive` in any debug output.
        .layer(SetSensitiveRequestHeadersLayer::new([
            axum::http::header::AUTHORIZATION,
            axum::http::HeaderName::from_static("webhook-signature"),
            axum::http::HeaderName::from_static("x-hub-signature-256"),
        ]))
        .with_state(state)
}

/// The metrics listener: only `/metrics` and `/healthz`, on an address of its own (loopback by
/// default) so that metrics are not exposed with the API.
pub fn metrics_router(
    queue: Queue,
    store: Store,
    rules: Arc<crate::rules::Rules>,
    handle: PrometheusHandle,
    timeout: std::time::Duration,
) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let (queue, store, rules, handle) =
                    (queue.clone(), store.clone(), rules.clone(), handle.clone());
                async move {
                    health::render_metrics(&queue, &store, &rules, &handle, timeout).await
                }
            }),
        )
        .route("/healthz", get(health::healthz))
}

/// Counts requests by route template (never the raw path) and status.
async fn record_request(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = request.method().as_str().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!(names::HTTP_REQUESTS, "route" => route.clone(), "method" => method, "status" => status)
        .increment(1);
    metrics::histogram!(names::HTTP_SECONDS, "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}
