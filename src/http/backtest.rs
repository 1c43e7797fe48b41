//! `POST /v1/rules/backtest`: what a candidate rule set would have done over the evaluations of
//! a window (the `backtest` module does the work; this reads the request and answers the
//! report). It reads only: nothing is written, no status changes, no webhook is sent.

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode};
use serde_json::Value;

use super::{
    AppState,
    body::RequestBody,
    error::{ApiError, store_error},
    moderation::{invalid, json_object},
};
use crate::{
    backtest::{self, BacktestError, DEFAULT_SAMPLE, MAX_SAMPLE, Options, Report},
    rules::RuleSet,
};

/// The default window, as the CLI's `--since`.
const DEFAULT_WINDOW: &str = "7d";

/// `POST /v1/rules/backtest` with `{"rules": "<TOML>"}` or `{"promote": "<shadow rule>"}`, and
/// optionally `"since": "7d"` and `"sample": 10`.
#[utoipa::path(
    post,
    path = "/v1/rules/backtest",
    tag = "moderation",
    description = "Replays a candidate rule set (a rules file's TOML, or the rules in force with one shadow rule turned live) over the evaluations finished in the window, and reports the actions it would have added and removed per rule, the reversals it would have saved, its expected reversal rate with a 95% interval, the entities whose final status would differ, and a sample of the added actions with their snapshots. Reads only. Role moderator.",
    request_body(content = crate::http::schemas::BacktestRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The report", body = crate::backtest::Report),
        (status = 400, description = "Malformed JSON", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad field (field names it; invalid_rules for rules that do not load)", body = crate::http::schemas::ErrorResponse),
        (status = 429, description = "A backtest is already running in this process (code backtest_running); sent with Retry-After", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn backtest(
    State(state): State<AppState>,
    RequestBody(body): RequestBody,
) -> Result<Json<Report>, ApiError> {
    let object = json_object(&body, &["rules", "promote", "since", "sample"])?;
    let text = |field: &str| match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.as_str())),
        Some(_) => Err(invalid(Some(field), "must be a string")),
    };
    let candidate = match (text("rules")?, text("promote")?) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                Some("promote"),
                "give either rules or promote, not both",
            ));
        }
        (None, None) => {
            return Err(invalid(
                Some("rules"),
                "is required: a rules file's TOML (or promote, the name of a shadow rule in force)",
            ));
        }
        (Some(rules), None) => RuleSet::from_toml(rules).map_err(|error| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_rules",
                error.to_string(),
            )
            .with_field("rules")
        })?,
        (None, Some(name)) => state.rules.current().promoting(name).ok_or_else(|| {
            invalid(
                Some("promote"),
                "names no shadow rule of the rules in force",
            )
        })?,
    };
    let window = backtest::parse_window(text("since")?.unwrap_or(DEFAULT_WINDOW))
        .map_err(|problem| invalid(Some("since"), &problem.to_string()))?;
    let sample = match object.get("sample") {
        None | Some(Value::Null) => DEFAULT_SAMPLE,
        Some(value) => value
            .as_u64()
            .filter(|n| *n <= MAX_SAMPLE as u64)
            .ok_or_else(|| {
                invalid(
                    Some("sample"),
                    &format!("must be a whole number from 0 to {MAX_SAMPLE}"),
                )
            })? as usize,
    };
    let report = backtest::run(
        &state.store,
        &state.backtests,
        Arc::new(candidate),
        &state.rules.current(),
        Options { window, sample },
    )
    .await
    .map_err(backtest_error)?;
    Ok(Json(report))
}

/// How a failed backtest is answered: one already running is 429, the store's errors as
/// everywhere, a failed replay an opaque 500.
pub fn backtest_error(error: BacktestError) -> ApiError {
    match error {
        BacktestError::Store(error) => store_error(error),
        BacktestError::Busy => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "backtest_running",
            error.to_string(),
        )
        .with_retry_after(5),
        BacktestError::Replay(_) => ApiError::internal(error),
    }
}
