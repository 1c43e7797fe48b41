//! The moderator API: actions with filters, reversals, overrides, and the reversal rate.

use std::{collections::HashMap, time::Duration};

use axum::{
    Json,
    extract::{Path, Query, State, rejection::PathRejection},
    http::StatusCode,
};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::{
    AppState,
    auth::Requester,
    body::RequestBody,
    error::{ApiError, store_error},
    params::{bad_query, page_cursor, page_limit, parse_entity, path_param, unknown_parameters},
};
use crate::{
    active_rules::RuleDemoter,
    domain::Status,
    moderation::{self, Overridden, OverrideRequest, TEXT_RULE, acceptable_text},
    store::ActionFilter,
};

const DEFAULT_ACTIONS_LIMIT: i64 = 50;
const MAX_ACTIONS_LIMIT: i64 = 500;
const MAX_RULE_NAME: usize = 200;
/// Longest reversal-rate window.
const MAX_WINDOW: Duration = Duration::from_secs(90 * 24 * 3600);

/// `GET /v1/actions?entity=&rule=&action=&since=&reversed=&limit=&cursor=`, newest first.
#[utoipa::path(
    get,
    path = "/v1/actions",
    tag = "moderation",
    description = "Applied actions, newest first, filtered and paged. Role moderator.",
    params(
        ("entity" = Option<String>, Query, pattern = r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.:-]{1,128}$", description = "Only this entity's"),
        ("rule" = Option<String>, Query, pattern = r"^[^\x00]{0,200}$", description = "Only this rule's"),
        ("action" = Option<crate::domain::Action>, Query, description = "flag, hide or suspend"),
        ("since" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "RFC 3339; applied at or after"),
        ("reversed" = Option<bool>, Query, description = "Only reversed (true) or standing (false) ones"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "Page size, default 50"),
        ("cursor" = Option<String>, Query, pattern = r"^[0-9]{1,18}$", description = "next_cursor of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of actions", body = crate::http::schemas::ActionsPage),
        (status = 400, description = "A bad query parameter (code invalid_query or invalid_entity; field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list_actions(
    State(state): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    unknown_parameters(
        &params,
        &[
            "entity", "rule", "action", "since", "reversed", "limit", "cursor",
        ],
    )?;
    let mut filter = ActionFilter {
        limit: DEFAULT_ACTIONS_LIMIT,
        ..Default::default()
    };
    if let Some(raw) = params.get("entity") {
        filter.entity = Some(parse_entity(raw)?);
    }
    if let Some(rule) = params.get("rule") {
        // Postgres text cannot hold NUL; nothing else in a rule name needs refusing.
        if rule.contains('\0') || rule.chars().count() > MAX_RULE_NAME {
            return Err(bad_query(
                "rule",
                format!("rule must be at most {MAX_RULE_NAME} characters without NUL"),
            ));
        }
        filter.rule = Some(rule.clone());
    }
    if let Some(raw) = params.get("action") {
        if !["flag", "hide", "suspend"].contains(&raw.as_str()) {
            return Err(bad_query("action", "action must be flag, hide or suspend"));
        }
        filter.action = Some(raw.clone());
    }
    if let Some(raw) = params.get("since") {
        let since = DateTime::parse_from_rfc3339(raw)
            .map_err(|e| bad_query("since", format!("since must be an RFC 3339 timestamp: {e}")))?;
        filter.since = Some(since.with_timezone(&Utc));
    }
    if let Some(raw) = params.get("reversed") {
        filter.reversed = Some(match raw.as_str() {
            "true" => true,
            "false" => false,
            _ => return Err(bad_query("reversed", "reversed must be true or false")),
        });
    }
    filter.limit = page_limit(&params, DEFAULT_ACTIONS_LIMIT, MAX_ACTIONS_LIMIT)?;
    filter.before = page_cursor(&params)?;
    let actions = state.store.actions(&filter).await.map_err(store_error)?;
    let next_cursor = (actions.len() as i64 == filter.limit)
        .then(|| actions.last().map(|a| a.id.to_string()))
        .flatten();
    Ok(Json(
        json!({ "actions": actions, "next_cursor": next_cursor }),
    ))
}

/// A JSON object body with only `allowed` fields.
pub(super) fn json_object(body: &[u8], allowed: &[&str]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request("malformed_json", format!("the body is not valid JSON: {e}"))
    })?;
    let Value::Object(object) = value else {
        return Err(invalid(None, "the body must be a JSON object"));
    };
    if let Some(unknown) = object.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(invalid(
            Some(unknown),
            &format!("unknown field; the body has only {}", allowed.join(", ")),
        ));
    }
    Ok(object)
}

pub(super) fn invalid(field: Option<&str>, message: &str) -> ApiError {
    let error = ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", message);
    match field {
        Some(field) => error.with_field(field),
        None => error,
    }
}

pub(super) fn required_text<'a>(
    object: &'a Map<String, Value>,
    field: &str,
) -> Result<&'a str, ApiError> {
    match object.get(field) {
        Some(Value::String(text)) if acceptable_text(text) => Ok(text),
        None | Some(Value::Null) => Err(invalid(Some(field), "is required")),
        Some(_) => Err(invalid(Some(field), &format!("a string that {TEXT_RULE}"))),
    }
}

/// `POST /v1/actions/{id}/reverse` with `{"moderator", "reason"}`.
#[utoipa::path(
    post,
    path = "/v1/actions/{id}/reverse",
    tag = "moderation",
    description = "A moderator reverses an automated action: the entity goes back to the status before it, and an override keeps automation from redoing it. Role moderator.",
    params(("id" = i64, Path, description = "The action id")),
    request_body(content = crate::http::schemas::ReverseRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The reversal", body = crate::store::Reversal),
        (status = 400, description = "Malformed JSON or a bad id", body = crate::http::schemas::ErrorResponse),
        (status = 404, description = "No such action", body = crate::http::schemas::ErrorResponse),
        (status = 409, description = "Already reversed, or superseded by a later change", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad field (field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn reverse(
    State(state): State<AppState>,
    requester: Requester,
    path: Result<Path<String>, PathRejection>,
    RequestBody(body): RequestBody,
) -> Result<Json<Value>, ApiError> {
    let raw = path_param(path, "id")?;
    let id: i64 = raw.parse().map_err(|_| {
        ApiError::bad_request("invalid_id", "an action id is a whole number").with_field("id")
    })?;
    let object = json_object(&body, &["moderator", "reason"])?;
    let moderator = required_text(&object, "moderator")?;
    let reason = required_text(&object, "reason")?;
    let override_for = state.settings.moderation.override_after_reversal;
    let reversal = moderation::reverse(
        &state.store,
        &state.queue,
        id,
        &requester.actor(moderator),
        reason,
        override_for,
        &RuleDemoter::new(&state.settings.moderation, Some(state.rules.clone())),
    )
    .await?;
    Ok(Json(json!(reversal)))
}

/// `POST /v1/entities/{entity}/override` with `{"moderator", "status", "until"?,
/// "duration"?, "reason"}`.
#[utoipa::path(
    post,
    path = "/v1/entities/{entity}/override",
    tag = "moderation",
    description = "A moderator sets the entity's status; automation does not go past it until `until`. With `duration` instead (\"24h\"), a timed override: the status holds that long, then quiesce restores the status the entity had. Role moderator.",
    params(
        ("entity" = String, Path, pattern = r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.:-]{1,128}$", description = "An entity id, e.g. post:9842"),
    ),
    request_body(content = crate::http::schemas::OverrideRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The override", body = crate::http::schemas::OverrideResult),
        (status = 400, description = "Malformed JSON or a bad entity id", body = crate::http::schemas::ErrorResponse),
        (status = 404, description = "No such entity", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad field (field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn override_entity(
    State(state): State<AppState>,
    requester: Requester,
    path: Result<Path<String>, PathRejection>,
    RequestBody(body): RequestBody,
) -> Result<Json<Value>, ApiError> {
    let raw = path_param(path, "entity")?;
    let entity = parse_entity(&raw)?;
    let object = json_object(
        &body,
        &["moderator", "status", "until", "duration", "reason"],
    )?;
    let moderator = required_text(&object, "moderator")?;
    let reason = required_text(&object, "reason")?;
    let status = match object.get("status") {
        Some(Value::String(raw)) => Status::parse(raw).map_err(|_| {
            invalid(
                Some("status"),
                "must be visible, flagged, hidden or suspended",
            )
        })?,
        None | Some(Value::Null) => return Err(invalid(Some("status"), "is required")),
        Some(_) => return Err(invalid(Some("status"), "must be a string")),
    };
    let until = match object.get("until") {
        None | Some(Value::Null) => None,
        Some(Value::String(raw)) => {
            let until = DateTime::parse_from_rfc3339(raw)
                .map_err(|e| {
                    invalid(
                        Some("until"),
                        &format!("must be an RFC 3339 timestamp: {e}"),
                    )
                })?
                .with_timezone(&Utc);
            if until <= Utc::now() {
                return Err(invalid(Some("until"), "must be in the future"));
            }
            Some(until)
        }
        Some(_) => {
            return Err(invalid(
                Some("until"),
                "must be an RFC 3339 timestamp string",
            ));
        }
    };
    let duration = match object.get("duration") {
        None | Some(Value::Null) => None,
        Some(Value::String(raw)) => Some(
            crate::domain::parse_duration(raw)
                .map_err(|e| invalid(Some("duration"), &e.to_string()))?,
        ),
        Some(_) => {
            return Err(invalid(
                Some("duration"),
                "must be a string such as \"24h\"",
            ));
        }
    };
    if duration.is_some() && until.is_some() {
        return Err(invalid(
            Some("duration"),
            "give until or duration, not both",
        ));
    }
    let by = requester.actor(moderator);
    let request = OverrideRequest {
        entity: &entity,
        by: &by,
        status,
        until,
        duration,
        reason,
    };
    let Overridden {
        moderation_version,
        until,
    } = moderation::override_status(
        &state.store,
        &state.queue,
        request,
        state.settings.moderation.override_after_reversal,
    )
    .await
    .map_err(store_error)?;
    Ok(Json(json!({
        "entity": entity,
        "status": status,
        "moderation_version": moderation_version,
        "override": { "status": status, "until": until, "by": moderator, "reason": reason },
    })))
}

/// `POST /v1/entities/{entity}/timer/end` with `{"moderator", "reason"}`.
#[utoipa::path(
    post,
    path = "/v1/entities/{entity}/timer/end",
    tag = "moderation",
    description = "A moderator ends the entity's timed action (or timed override) now: quiesce applies the restore its end would have applied (an action, delivered by the outbox and reversible) and records the decision. Role moderator.",
    params(
        ("entity" = String, Path, pattern = r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.:-]{1,128}$", description = "An entity id, e.g. user:77"),
    ),
    request_body(content = crate::http::schemas::ReverseRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The restore", body = crate::store::EndedTimer),
        (status = 400, description = "Malformed JSON or a bad entity id", body = crate::http::schemas::ErrorResponse),
        (status = 404, description = "No such entity, or no timed action in force", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad field (field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn end_timer(
    State(state): State<AppState>,
    requester: Requester,
    path: Result<Path<String>, PathRejection>,
    RequestBody(body): RequestBody,
) -> Result<Json<Value>, ApiError> {
    let raw = path_param(path, "entity")?;
    let entity = parse_entity(&raw)?;
    let object = json_object(&body, &["moderator", "reason"])?;
    let moderator = required_text(&object, "moderator")?;
    let reason = required_text(&object, "reason")?;
    let by = requester.actor(moderator);
    let ended = moderation::end_timer(&state.store, &state.queue, &entity, &by, reason)
        .await
        .map_err(store_error)?;
    Ok(Json(json!(ended)))
}

/// `GET /v1/stats/reversal-rate?window=24h&by=rule`: automated actions applied in the window
/// and how many moderators reversed within 24h of being applied.
#[utoipa::path(
    get,
    path = "/v1/stats/reversal-rate",
    tag = "moderation",
    description = "Automated actions applied in the window and how many moderators reversed within 24h. Role moderator.",
    params(
        ("window" = Option<String>, Query, description = "A duration such as 24h or 7days, at most 90days; default 24h"),
        ("by" = Option<String>, Query, description = "rule: add the figures per rule"),
    ),
    responses(
        (status = 200, description = "The rate", body = crate::http::schemas::ReversalRate),
        (status = 400, description = "A bad query parameter (code invalid_query)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn reversal_rate(
    State(state): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    unknown_parameters(&params, &["window", "by"])?;
    let window_text = params.get("window").map_or("24h", String::as_str);
    let window = humantime::parse_duration(window_text)
        .ok()
        .filter(|w| !w.is_zero() && *w <= MAX_WINDOW)
        .ok_or_else(|| {
            bad_query(
                "window",
                "window must be a duration such as 24h or 7days, at most 90days",
            )
        })?;
    let by_rule = match params.get("by").map(String::as_str) {
        None => false,
        Some("rule") => true,
        Some(_) => return Err(bad_query("by", "by must be rule")),
    };
    let (total, rules) = state
        .store
        .reversal_counts(window)
        .await
        .map_err(store_error)?;
    let mut body = json!({
        "window": window_text,
        "actions": total.actions,
        "reversed": total.reversed,
        "rate": total.rate(),
    });
    if by_rule {
        body["by_rule"] = rules
            .iter()
            .map(|(rule, counts)| {
                json!({
                    "rule": rule,
                    "actions": counts.actions,
                    "reversed": counts.reversed,
                    "rate": counts.rate(),
                })
            })
            .collect();
    }
    Ok(Json(body))
}
