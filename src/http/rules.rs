//! The rules in force, with their hit counts, and reloading them.

use std::time::Duration;

use axum::{Json, extract::State, http::StatusCode};
use serde_json::{Value, json};

use super::{
    AppState,
    auth::Requester,
    error::{ApiError, store_error},
};
use crate::audit;

const HITS_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// `GET /v1/rules`: every rule with its live and shadow matches over the last 24h.
#[utoipa::path(
    get,
    path = "/v1/rules",
    tag = "moderation",
    description = "The rules in force, with their live and shadow matches over 24h, and the attributes they declare (what events and entity context may carry). Role moderator.",
    responses(
        (status = 200, description = "The rules", body = crate::http::schemas::RulesList),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let hits = state
        .store
        .rule_hits(HITS_WINDOW)
        .await
        .map_err(store_error)?;
    let rules = state.rules.current();
    let listed: Vec<Value> = rules
        .rules()
        .iter()
        .map(|rule| {
            let (live, shadow) = hits.get(&rule.name).copied().unwrap_or_default();
            json!({
                "name": rule.name,
                "action": rule.action,
                "labels": rule.labels,
                "duration_secs": rule.duration.map(|d| d.as_secs()),
                "unless": rule.unless(),
                "kinds": rule.kinds,
                "when": rule.when,
                "shadow": rule.shadow,
                "hits_24h": { "live": live, "shadow": shadow },
            })
        })
        .collect();
    Ok(Json(json!({
        "rules": listed,
        "attributes": rules.declarations(),
    })))
}

/// `POST /v1/rules/reload`: reads the rules file again. An invalid file is refused with the
/// error (422) and the rules in force stay. Reloads this process only; SIGHUP does the same.
#[utoipa::path(
    post,
    path = "/v1/rules/reload",
    tag = "admin",
    description = "Reads the rules file again (this process). Role admin.",
    responses(
        (status = 200, description = "Reloaded", body = crate::http::schemas::RulesReloaded),
        (status = 422, description = "The file is invalid; the rules in force stay (code invalid_rules)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn reload(
    State(state): State<AppState>,
    requester: Requester,
) -> Result<Json<Value>, ApiError> {
    let before = state.rules.current().rules().len();
    match state.rules.reload() {
        Ok(count) => {
            tracing::info!(rules = count, "rules reloaded");
            let entry = audit::rules_reloaded(before, count);
            audit::record(&state.store, &requester.token_actor(), entry).await;
            Ok(Json(json!({ "rules": count })))
        }
        Err(error) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_rules",
            format!("{error}; the rules in force stay"),
        )),
    }
}
