//! The review queue's API, for platforms that build their own tools: what waits, oldest
//! first; a claim on one item; a decision on it.

use axum::{Json, extract::State};
use chrono::Utc;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{
    AppState,
    auth::Requester,
    error::{ApiError, store_error},
    extract::{ApiJson, ApiPath, ApiQuery, JsonBody, bad_query},
    wire::{ReviewItem, ReviewOutcome},
};
use crate::{
    domain::ReviewDecision,
    request::{
        fields::{self, Text},
        path::ReviewItemId,
    },
    review::{self, ItemDecision},
    store::ReviewFilter,
};

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;
const MAX_TEXT: usize = 200;

/// `GET /v1/review`'s filters and page.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReviewQuery {
    /// What put the item there: flag (the only kind today)
    // Checked, and filters nothing: flags are the only kind of item.
    #[serde(default, rename = "kind", deserialize_with = "kind")]
    _kind: Option<String>,
    /// Only this rule's
    #[serde(default, deserialize_with = "fields::filter_text::<_, MAX_TEXT>")]
    #[param(pattern = r"^[^\x00]{0,200}$")]
    rule: Option<String>,
    /// Only items waiting at least this long, a duration such as 10m or 2h
    #[serde(default, deserialize_with = "fields::age")]
    #[param(value_type = Option<String>)]
    older_than: Option<chrono::Duration>,
    /// Only items this moderator holds a live claim on
    #[serde(default, deserialize_with = "fields::filter_text::<_, MAX_TEXT>")]
    #[param(pattern = r"^[^\x00]{0,200}$")]
    claimed_by: Option<String>,
    /// Only claimed (true) or unclaimed (false) items; an expired claim is none
    #[serde(default, deserialize_with = "fields::flag")]
    claimed: Option<bool>,
    /// Only escalated (true) or not escalated (false) items
    #[serde(default, deserialize_with = "fields::flag")]
    escalated: Option<bool>,
    /// Page size, default 50
    #[serde(default, deserialize_with = "fields::limit::<_, MAX_LIMIT>")]
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
    /// next_cursor of the previous page
    #[serde(default, deserialize_with = "fields::id_cursor")]
    #[param(value_type = Option<String>, pattern = r"^[0-9]{1,18}$")]
    cursor: Option<i64>,
}

fn kind<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    fields::param(d, |raw| match raw.as_str() {
        "flag" => Ok(raw),
        _ => Err("must be flag".to_owned()),
    })
}

#[derive(Serialize, ToSchema)]
pub struct ReviewPage {
    items: Vec<ReviewItem>,
    /// Pass as `cursor` for the next page; null on the last.
    next_cursor: Option<String>,
}

/// `GET /v1/review?rule=&older_than=&claimed_by=&claimed=&escalated=&limit=&cursor=`.
#[utoipa::path(
    get,
    path = "/v1/review",
    tag = "moderation",
    description = "The review queue: what automation flagged and no moderator has decided yet (nor reversed), oldest first, filtered and paged. Role moderator.",
    params(ReviewQuery),
    responses(
        (status = 200, description = "A page of waiting items", body = ReviewPage),
        (status = 400, description = "A bad query parameter (code invalid_query; field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ReviewQuery>,
) -> Result<Json<ReviewPage>, ApiError> {
    let ReviewQuery {
        rule,
        older_than,
        claimed_by,
        claimed,
        escalated,
        limit,
        cursor,
        ..
    } = query;
    let flagged_before = older_than
        .map(|age| {
            Utc::now().checked_sub_signed(age).ok_or_else(|| {
                bad_query(
                    "older_than",
                    "older_than reaches before the calendar's start",
                )
            })
        })
        .transpose()?;
    let filter = ReviewFilter {
        rule,
        flagged_before,
        claimed_by,
        claimed,
        escalated,
        after: cursor,
        limit: limit.unwrap_or(DEFAULT_LIMIT),
    };
    let items = state
        .store
        .review()
        .review_items(&filter)
        .await
        .map_err(store_error)?;
    let next_cursor = (items.len() as i64 == filter.limit)
        .then(|| items.last().map(|i| i.id.to_string()))
        .flatten();
    Ok(Json(ReviewPage {
        items: items.into_iter().map(Into::into).collect(),
        next_cursor,
    }))
}

/// A claim on a review queue item.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    moderator: Text,
}

impl JsonBody for ClaimRequest {}

/// `POST /v1/review/{id}/claim` with `{"moderator"}`.
#[utoipa::path(
    post,
    path = "/v1/review/{id}/claim",
    tag = "moderation",
    description = "A moderator claims a waiting item, so that no one else works it while the claim lasts (review_claim, 10 minutes by default). Claiming again extends one's own claim; an escalated item is claimed by an admin only. Role moderator.",
    params(("id" = i64, Path, description = "The item id (its flag action's id)")),
    request_body(content = ClaimRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The item, claimed", body = ReviewItem),
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
    ApiPath(ReviewItemId(id)): ApiPath<ReviewItemId>,
    ApiJson(body): ApiJson<ClaimRequest>,
) -> Result<Json<ReviewItem>, ApiError> {
    let item = review::claim(
        &state.store,
        id,
        &requester.actor(&body.moderator),
        state.settings.moderation.review_claim,
    )
    .await?;
    Ok(Json(item.into()))
}

/// A decision on a review queue item the moderator holds a claim on.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideRequest {
    moderator: Text,
    reason: Text,
    #[serde(deserialize_with = "fields::review_decision")]
    decision: ReviewDecision,
    /// The entity's moderation_version the decision was made on (the item's, as listed or
    /// claimed); a later change to the entity makes the decision a 409.
    #[serde(deserialize_with = "moderation_version")]
    #[schema(minimum = 0)]
    moderation_version: i64,
}

impl JsonBody for DecideRequest {}

fn moderation_version<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    const REFUSED: &str = "must be a whole number, 0 or more";
    match fields::optional_whole(d, 0..=i128::from(i64::MAX), REFUSED)? {
        Some(version) => i64::try_from(version).map_err(|_| serde::de::Error::custom(REFUSED)),
        None => Err(serde::de::Error::custom("is required")),
    }
}

/// `POST /v1/review/{id}/decide` with `{"moderator", "decision", "reason",
/// "moderation_version"}`.
#[utoipa::path(
    post,
    path = "/v1/review/{id}/decide",
    tag = "moderation",
    description = "A moderator who holds the claim decides the item: approve (visible, and automation does not flag it again while the override lasts), hide (hidden, likewise held), dismiss (visible, automation free to act again) or escalate (the item waits for an admin). A decision that sets a status is an action of kind review: version-checked against moderation_version, delivered by the outbound webhook, reversible. Role moderator.",
    params(("id" = i64, Path, description = "The item id (its flag action's id)")),
    request_body(content = DecideRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The decision", body = ReviewOutcome),
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
    ApiPath(ReviewItemId(id)): ApiPath<ReviewItemId>,
    ApiJson(body): ApiJson<DecideRequest>,
) -> Result<Json<ReviewOutcome>, ApiError> {
    let by = requester.actor(&body.moderator);
    let request = ItemDecision {
        id,
        by: &by,
        decision: body.decision,
        reason: &body.reason,
        seen_version: body.moderation_version,
        override_for: state.settings.moderation.override_after_reversal,
    };
    let outcome = review::decide(&state.store, &state.rules.current(), request).await?;
    Ok(Json(outcome.into()))
}
