//! `POST /v1/rules/backtest`: what a candidate rule set would have done over the evaluations of
//! a window (the `backtest` module does the work; this reads the request and answers the
//! report). It reads only: nothing is written, no status changes, no webhook is sent.

use std::sync::Arc;

use axum::{Json, extract::State, http::StatusCode};
use serde::Deserialize;
use utoipa::ToSchema;

use super::{
    AppState,
    error::{ApiError, store_error},
    extract::{ApiJson, JsonBody, invalid},
};
use crate::{
    backtest::{self, BacktestError, DEFAULT_SAMPLE, MAX_SAMPLE, Options, Report},
    request::fields,
    rules::RuleSet,
};

/// The default window, as the CLI's `--since`.
const DEFAULT_WINDOW: &str = "7d";

/// A backtest: the candidate is `rules` (a rules file's TOML) or `promote` (the rules in force
/// with this shadow rule turned live), one of the two.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BacktestRequest {
    /// A rules file, as `quiesce rules check` takes it.
    #[serde(default, deserialize_with = "fields::optional_string")]
    rules: Option<String>,
    /// The name of a shadow rule in force.
    #[serde(default, deserialize_with = "fields::optional_string")]
    promote: Option<String>,
    /// How far back: a duration such as 24h, 7d, 30days (at most 90 days); default 7d.
    #[serde(default, deserialize_with = "fields::optional_string")]
    #[schema(example = "7d")]
    since: Option<String>,
    /// Added actions to sample, with their snapshots: 0 to 100, default 10.
    #[serde(default, deserialize_with = "sample")]
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 100)]
    sample: Option<usize>,
}

impl JsonBody for BacktestRequest {}

fn sample<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    let refused = format!("must be a whole number from 0 to {MAX_SAMPLE}");
    let sample = fields::optional_whole(d, 0..=MAX_SAMPLE as i128, &refused)?;
    Ok(sample.map(|n| n as usize))
}

/// `POST /v1/rules/backtest` with `{"rules": "<TOML>"}` or `{"promote": "<shadow rule>"}`, and
/// optionally `"since": "7d"` and `"sample": 10`.
#[utoipa::path(
    post,
    path = "/v1/rules/backtest",
    tag = "moderation",
    description = "Replays a candidate rule set (a rules file's TOML, or the rules in force with one shadow rule turned live) over the evaluations finished in the window, and reports the actions it would have added and removed per rule, the reversals it would have saved, its expected reversal rate with a 95% interval, the entities whose final status would differ, and a sample of the added actions with their snapshots. Reads only. Role moderator.",
    request_body(content = BacktestRequest, content_type = "application/json"),
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
    ApiJson(body): ApiJson<BacktestRequest>,
) -> Result<Json<Report>, ApiError> {
    let candidate = match (body.rules, body.promote) {
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
        (Some(rules), None) => RuleSet::from_toml(&rules).map_err(|error| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_rules",
                error.to_string(),
            )
            .with_field("rules")
        })?,
        (None, Some(name)) => state.rules.current().promoting(&name).ok_or_else(|| {
            invalid(
                Some("promote"),
                "names no shadow rule of the rules in force",
            )
        })?,
    };
    let window = backtest::parse_window(body.since.as_deref().unwrap_or(DEFAULT_WINDOW))
        .map_err(|problem| invalid(Some("since"), &problem.to_string()))?;
    let sample = body.sample.unwrap_or(DEFAULT_SAMPLE);
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
