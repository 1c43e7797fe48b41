//! The review queue's API, for platforms that build their own tools: what waits, oldest
//! first; a claim on one item; a decision on it.

use std::collections::HashMap;

use axum::{
    Json,
    extract::{Path, Query, State, rejection::PathRejection},
};
use chrono::Utc;
use serde_json::{Value, json};

use super::{
    AppState,
    auth::Requester,
    body::RequestBody,
    error::{ApiError, store_error},
    moderation::{invalid, json_object, required_text},
    params::{bad_query, page_cursor, page_limit, path_param, unknown_parameters},
};
use crate::{domain::ReviewDecision, review, store::ReviewFilter};

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;
const MAX_TEXT: usize = 200;

/// `GET /v1/review?rule=&older_than=&claimed_by=&claimed=&escalated=&limit=&cursor=`.
#[utoipa::path(
    get,
    path = "/v1/review",
    tag = "moderation",
    description = "The review queue: what automation flagged and no moderator has decided yet (nor reversed), oldest first, filtered and paged. Role moderator.",
    params(
        ("kind" = Option<String>, Query, description = "What put the item there: flag (the only kind today)"),
        ("rule" = Option<String>, Query, pattern = r"^[^\x00]{0,200}$", description = "Only this rule's"),
        ("older_than" = Option<String>, Query, description = "Only items waiting at least this long, a duration such as 10m or 2h"),
        ("claimed_by" = Option<String>, Query, pattern = r"^[^\x00]{0,200}$", description = "Only items this moderator holds a live claim on"),
        ("claimed" = Option<bool>, Query, description = "Only claimed (true) or unclaimed (false) items; an expired claim is none"),
        ("escalated" = Option<bool>, Query, description = "Only escalated (true) or not escalated (false) items"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "Page size, default 50"),
        ("cursor" = Option<String>, Query, pattern = r"^[0-9]{1,18}$", description = "next_cursor of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of waiting items", body = crate::http::schemas::ReviewPage),
        (status = 400, description = "A bad query parameter (code invalid_query; field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    unknown_parameters(
        &params,
        &[
            "kind",
            "rule",
            "older_than",
            "claimed_by",
            "claimed",
            "escalated",
            "limit",
            "cursor",
        ],
    )?;
    if let Some(kind) = params.get("kind")
        && kind != "flag"
    {
        return Err(bad_query("kind", "kind must be flag"));
    }
    let text = |name: &str| -> Result<Option<String>, ApiError> {
        match params.get(name) {
            Some(value) if value.contains('\0') || value.chars().count() > MAX_TEXT => {
                Err(bad_query(
                    name,
                    format!("{name} must be at most {MAX_TEXT} characters without NUL"),
                ))
            }
            value => Ok(value.cloned()),
        }
    };
    let flag = |name: &str| -> Result<Option<bool>, ApiError> {
        match params.get(name).map(String::as_str) {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(_) => Err(bad_query(name, format!("{name} must be true or false"))),
        }
    };
    let flagged_before = match params.get("older_than") {
        None => None,
        Some(raw) => {
            let age = humantime::parse_duration(raw)
                .ok()
                .and_then(|age| chrono::Duration::from_std(age).ok())
                .ok_or_else(|| {
                    bad_query(
                        "older_than",
                        "older_than must be a duration such as 10m or 2h",
                    )
                })?;
            Some(Utc::now().checked_sub_signed(age).ok_or_else(|| {
                bad_query(
                    "older_than",
                    "older_than reaches before the calendar's start",
                )
            })?)
        }
    };
    let filter = ReviewFilter {
        rule: text("rule")?,
        flagged_before,
        claimed_by: text("claimed_by")?,
        claimed: flag("claimed")?,
        escalated: flag("escalated")?,
        after: page_cursor(&params)?,
        limit: page_limit(&params, DEFAULT_LIMIT, MAX_LIMIT)?,
    };
    let items = state
        .store
        .review_items(&filter)
        .await
        .map_err(store_error)?;
    let next_cursor = (items.len() as i64 == filter.limit)
        .then(|| items.last().map(|i| i.id.to_string()))
        .flatten();
    Ok(Json(json!({ "items": items, "next_cursor": next_cursor })))
}

fn item_id(path: Result<Path<String>, PathRejection>) -> Result<i64, ApiError> {
    let raw = path_param(path, "id")?;
    raw.parse().map_err(|_| {
        ApiError::bad_request("invalid_id", "a review item id is a whole number").with_field("id")
    })
}

/// `POST /v1/review/{id}/claim` with `{"moderator"}`.
#[utoipa::path(
    post,
    path = "/v1/review/{id}/claim",
    tag = "moderation",
    description = "A moderator claims a waiting item, so that no one else works it while the claim lasts (review_claim, 10 minutes by default). Claiming again extends one's own claim; an escalated item is claimed by an admin only. Role moderator.",
    params(("id" = i64, Path, description = "The item id (its flag action's id)")),
    request_body(content = crate::http::schemas::ClaimRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The item, claimed", body = crate::store::ReviewItem),
        (status = 400, description = "Malformed JSON or a bad id", body = crate::http::schemas::ErrorResponse),
        (status = 404, description = "No such item", body = crate::http::schemas::ErrorResponse),
        (status = 409, description = "Claimed by someone else (code claimed), escalated (escalated), or no longer waiting (not_waiting)", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad field (field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn claim(
    State(state): State<AppState>,
    requester: Requester,
    path: Result<Path<String>, PathRejection>,
    RequestBody(body): RequestBody,
) -> Result<Json<Value>, ApiError> {
    let id = item_id(path)?;
    let object = json_object(&body, &["moderator"])?;
    let moderator = required_text(&object, "moderator")?;
    let item = review::claim(
        &state.store,
        id,
        &requester.actor(moderator),
        state.settings.moderation.review_claim,
    )
    .await?;
    Ok(Json(json!(item)))
}

/// `POST /v1/review/{id}/decide` with `{"moderator", "decision", "reason",
/// "moderation_version"}`.
#[utoipa::path(
    post,
    path = "/v1/review/{id}/decide",
    tag = "moderation",
    description = "A moderator who holds the claim decides the item: approve (visible, and automation does not flag it again while the override lasts), hide (hidden, likewise held), dismiss (visible, automation free to act again) or escalate (the item waits for an admin). A decision that sets a status is an action of kind review: version-checked against moderation_version, delivered by the outbound webhook, reversible. Role moderator.",
    params(("id" = i64, Path, description = "The item id (its flag action's id)")),
    request_body(content = crate::http::schemas::DecideRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The decision", body = crate::store::ReviewOutcome),
        (status = 400, description = "Malformed JSON or a bad id", body = crate::http::schemas::ErrorResponse),
        (status = 404, description = "No such item", body = crate::http::schemas::ErrorResponse),
        (status = 409, description = "Not claimed by this moderator (not_claimed), decided already (already_decided), its flag reversed (reversed), escalated (escalated), or the entity changed since moderation_version (version_conflict)", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad field (field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn decide(
    State(state): State<AppState>,
    requester: Requester,
    path: Result<Path<String>, PathRejection>,
    RequestBody(body): RequestBody,
) -> Result<Json<Value>, ApiError> {
    let id = item_id(path)?;
    let object = json_object(
        &body,
        &["moderator", "decision", "reason", "moderation_version"],
    )?;
    let moderator = required_text(&object, "moderator")?;
    let reason = required_text(&object, "reason")?;
    let decision = match object.get("decision") {
        Some(Value::String(raw)) => ReviewDecision::parse(raw).map_err(|_| {
            invalid(
                Some("decision"),
                "must be approve, hide, dismiss or escalate",
            )
        })?,
        None | Some(Value::Null) => return Err(invalid(Some("decision"), "is required")),
        Some(_) => return Err(invalid(Some("decision"), "must be a string")),
    };
    let seen_version = match object.get("moderation_version") {
        Some(Value::Number(n)) => n.as_i64().filter(|v| *v >= 0).ok_or_else(|| {
            invalid(
                Some("moderation_version"),
                "must be a whole number, 0 or more",
            )
        })?,
        None | Some(Value::Null) => {
            return Err(invalid(Some("moderation_version"), "is required"));
        }
        Some(_) => {
            return Err(invalid(
                Some("moderation_version"),
                "must be a whole number, 0 or more",
            ));
        }
    };
    let outcome = review::decide(
        &state.store,
        id,
        &requester.actor(moderator),
        decision,
        reason,
        seen_version,
        state.settings.moderation.override_after_reversal,
    )
    .await?;
    Ok(Json(json!(outcome)))
}
