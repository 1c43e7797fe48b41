//! The moderator API: actions with filters, reversals, overrides, and the reversal rate.

use std::time::Duration;

use axum::{Json, extract::State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{
    AppState,
    auth::Requester,
    error::{ApiError, store_error},
    extract::{ApiJson, ApiPath, ApiQuery, JsonBody, invalid},
    wire::{self, ActionRecord, EndedTimer, Reversal},
};
use crate::{
    active_rules::RuleDemoter,
    domain::{EntityId, Status},
    moderation::{self, Overridden, OverrideRequest as Override},
    request::{
        fields::{self, Text},
        path::{ActionId, PathValue},
    },
    store::{ActionFilter, ReversalRequest},
};

const DEFAULT_ACTIONS_LIMIT: i64 = 50;
const MAX_ACTIONS_LIMIT: i64 = 500;
const MAX_RULE_NAME: usize = 200;
/// Longest reversal-rate window.
const MAX_WINDOW: Duration = Duration::from_secs(90 * 24 * 3600);

/// `GET /v1/actions`'s filters and page.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ActionsQuery {
    /// Only this entity's
    #[param(pattern = r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.:-]{1,128}$")]
    entity: Option<String>,
    /// Only this rule's
    #[serde(default, deserialize_with = "fields::filter_text::<_, MAX_RULE_NAME>")]
    #[param(pattern = r"^[^\x00]{0,200}$")]
    rule: Option<String>,
    /// flag, hide or suspend
    #[serde(default, deserialize_with = "fields::action")]
    #[param(value_type = Option<crate::domain::Action>)]
    action: Option<String>,
    /// RFC 3339; applied at or after
    #[serde(default, deserialize_with = "since")]
    since: Option<DateTime<Utc>>,
    /// Only reversed (true) or standing (false) ones
    #[serde(default, deserialize_with = "fields::flag")]
    reversed: Option<bool>,
    /// Page size, default 50
    #[serde(default, deserialize_with = "fields::limit::<_, MAX_ACTIONS_LIMIT>")]
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
    /// next_cursor of the previous page
    #[serde(default, deserialize_with = "fields::id_cursor")]
    #[param(value_type = Option<String>, pattern = r"^[0-9]{1,18}$")]
    cursor: Option<i64>,
}

fn since<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
    fields::param(d, |raw| {
        DateTime::parse_from_rfc3339(&raw)
            .map(|since| since.with_timezone(&Utc))
            .map_err(|e| format!("must be an RFC 3339 timestamp: {e}"))
    })
}

#[derive(Serialize, ToSchema)]
pub struct ActionsPage {
    actions: Vec<ActionRecord>,
    /// Pass as `cursor` for the next page; null on the last.
    next_cursor: Option<String>,
}

/// `GET /v1/actions?entity=&rule=&action=&since=&reversed=&limit=&cursor=`, newest first.
#[utoipa::path(
    get,
    path = "/v1/actions",
    tag = "moderation",
    description = "Applied actions, newest first, filtered and paged. Role moderator.",
    params(ActionsQuery),
    responses(
        (status = 200, description = "A page of actions", body = ActionsPage),
        (status = 400, description = "A bad query parameter (code invalid_query or invalid_entity; field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list_actions(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ActionsQuery>,
) -> Result<Json<ActionsPage>, ApiError> {
    let filter = ActionFilter {
        entity: query
            .entity
            .as_deref()
            .map(<EntityId as PathValue>::parse)
            .transpose()?,
        rule: query.rule,
        action: query.action,
        since: query.since,
        reversed: query.reversed,
        limit: query.limit.unwrap_or(DEFAULT_ACTIONS_LIMIT),
        before: query.cursor,
    };
    let actions = state
        .store
        .read()
        .actions(&filter)
        .await
        .map_err(store_error)?;
    let next_cursor = (actions.len() as i64 == filter.limit)
        .then(|| actions.last().map(|a| a.id.to_string()))
        .flatten();
    Ok(Json(ActionsPage {
        actions: actions.into_iter().map(Into::into).collect(),
        next_cursor,
    }))
}

/// A moderator's decision. Texts are 1-1000 characters without control characters, not only
/// spaces.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReverseRequest {
    moderator: Text,
    reason: Text,
}

impl JsonBody for ReverseRequest {}

/// `POST /v1/actions/{id}/reverse` with `{"moderator", "reason"}`.
#[utoipa::path(
    post,
    path = "/v1/actions/{id}/reverse",
    tag = "moderation",
    description = "A moderator reverses an automated action: the entity goes back to the status before it, and an override keeps automation from redoing it. Role moderator.",
    params(("id" = i64, Path, description = "The action id")),
    request_body(content = ReverseRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The reversal", body = Reversal),
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
    ApiPath(ActionId(id)): ApiPath<ActionId>,
    ApiJson(body): ApiJson<ReverseRequest>,
) -> Result<Json<Reversal>, ApiError> {
    let override_for = state.settings.moderation.override_after_reversal;
    let by = requester.actor(&body.moderator);
    let request = ReversalRequest {
        id,
        by: &by,
        reason: &body.reason,
        override_for,
        appeal: None,
    };
    let demoter = RuleDemoter::new(&state.settings.moderation, Some(state.rules.clone()));
    let reversal = moderation::reverse(&state.store, &state.queue, &demoter, request).await?;
    Ok(Json(reversal.into()))
}

/// A moderator's override: the status, and until when automation may not go past it.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OverrideRequest {
    moderator: Text,
    reason: Text,
    #[serde(deserialize_with = "fields::status")]
    status: Status,
    /// In the future; default now + `override_after_reversal`.
    #[serde(default, deserialize_with = "until")]
    until: Option<DateTime<Utc>>,
    /// A timed override instead of `until` (`"24h"`: 1s to 365d): the status holds that long,
    /// then quiesce restores the status the entity had.
    #[serde(default, deserialize_with = "duration")]
    #[schema(value_type = Option<String>, pattern = r"^[0-9]+[smhd]$")]
    duration: Option<Duration>,
}

impl JsonBody for OverrideRequest {}

fn until<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
    fields::optional(d, "must be an RFC 3339 timestamp string", |raw| {
        DateTime::parse_from_rfc3339(&raw)
            .map(|until| until.with_timezone(&Utc))
            .map_err(|e| format!("must be an RFC 3339 timestamp: {e}"))
    })
}

fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    fields::optional(d, "must be a string such as \"24h\"", |raw| {
        crate::domain::parse_duration(&raw).map_err(|e| e.to_string())
    })
}

/// The override recorded.
#[derive(Serialize, ToSchema)]
pub struct OverrideResult {
    entity: String,
    status: Status,
    moderation_version: i64,
    r#override: wire::Override,
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
    request_body(content = OverrideRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The override", body = OverrideResult),
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
    ApiPath(entity): ApiPath<EntityId>,
    ApiJson(body): ApiJson<OverrideRequest>,
) -> Result<Json<OverrideResult>, ApiError> {
    if body.until.is_some_and(|until| until <= Utc::now()) {
        return Err(invalid(Some("until"), "must be in the future"));
    }
    if body.duration.is_some() && body.until.is_some() {
        return Err(invalid(
            Some("duration"),
            "give until or duration, not both",
        ));
    }
    let by = requester.actor(&body.moderator);
    let request = Override {
        entity: &entity,
        by: &by,
        status: body.status,
        until: body.until,
        duration: body.duration,
        reason: &body.reason,
    };
    let Overridden {
        moderation_version,
        until,
    } = moderation::override_status(
        &state.store,
        &state.queue,
        &state.rules.current(),
        request,
        state.settings.moderation.override_after_reversal,
        None,
    )
    .await
    .map_err(store_error)?;
    Ok(Json(OverrideResult {
        entity: entity.as_str().to_owned(),
        status: body.status,
        moderation_version,
        r#override: wire::Override {
            status: body.status,
            until,
            by: body.moderator.0,
            reason: body.reason.0,
        },
    }))
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
    request_body(content = ReverseRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The restore", body = EndedTimer),
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
    ApiPath(entity): ApiPath<EntityId>,
    ApiJson(body): ApiJson<ReverseRequest>,
) -> Result<Json<EndedTimer>, ApiError> {
    let by = requester.actor(&body.moderator);
    let ended = moderation::end_timer(&state.store, &state.queue, &entity, &by, &body.reason)
        .await
        .map_err(store_error)?;
    Ok(Json(ended.into()))
}

/// `GET /v1/stats/reversal-rate`'s window and grouping.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReversalRateQuery {
    /// A duration such as 24h or 7days, at most 90days; default 24h
    #[serde(default, deserialize_with = "window")]
    #[param(value_type = Option<String>)]
    window: Option<(String, Duration)>,
    /// rule: add the figures per rule
    #[serde(default, deserialize_with = "by")]
    by: Option<String>,
}

fn window<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<(String, Duration)>, D::Error> {
    fields::param(d, |raw| {
        humantime::parse_duration(&raw)
            .ok()
            .filter(|w| !w.is_zero() && *w <= MAX_WINDOW)
            .map(|window| (raw, window))
            .ok_or_else(|| "must be a duration such as 24h or 7days, at most 90days".to_owned())
    })
}

fn by<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    fields::param(d, |raw| match raw.as_str() {
        "rule" => Ok(raw),
        _ => Err("must be rule".to_owned()),
    })
}

#[derive(Serialize, ToSchema)]
pub struct ReversalRate {
    window: String,
    actions: i64,
    reversed: i64,
    /// Of `reversed`, those an upheld appeal reversed (source appeal; the others, source review).
    reversed_by_appeal: i64,
    /// reversed / actions; 0 without actions.
    rate: f64,
    /// With `by=rule` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    by_rule: Option<Vec<RuleRate>>,
}

#[derive(Serialize, ToSchema)]
struct RuleRate {
    rule: String,
    actions: i64,
    reversed: i64,
    reversed_by_appeal: i64,
    rate: f64,
}

/// `GET /v1/stats/reversal-rate?window=24h&by=rule`: automated actions applied in the window
/// and how many moderators reversed within 24h of being applied.
#[utoipa::path(
    get,
    path = "/v1/stats/reversal-rate",
    tag = "moderation",
    description = "Automated actions applied in the window and how many moderators reversed within 24h, or at any time upholding an appeal (reversed_by_appeal, of reversed). Role moderator.",
    params(ReversalRateQuery),
    responses(
        (status = 200, description = "The rate", body = ReversalRate),
        (status = 400, description = "A bad query parameter (code invalid_query)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn reversal_rate(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ReversalRateQuery>,
) -> Result<Json<ReversalRate>, ApiError> {
    let (window_text, window) = query
        .window
        .unwrap_or_else(|| ("24h".to_owned(), Duration::from_secs(24 * 3600)));
    let (total, rules) = state
        .store
        .read()
        .reversal_counts(window)
        .await
        .map_err(store_error)?;
    let by_rule = query.by.is_some().then(|| {
        rules
            .iter()
            .map(|(rule, counts)| RuleRate {
                rule: rule.clone(),
                actions: counts.actions,
                reversed: counts.reversed,
                reversed_by_appeal: counts.reversed_by_appeal,
                rate: counts.rate(),
            })
            .collect()
    });
    Ok(Json(ReversalRate {
        window: window_text,
        actions: total.actions,
        reversed: total.reversed,
        reversed_by_appeal: total.reversed_by_appeal,
        rate: total.rate(),
        by_rule,
    }))
}
