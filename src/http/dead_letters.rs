//! Dead letters: list them, and redrive one, all, or those of one reason (the `dead_letters`
//! use case). All from the durable record in Postgres; a redrive also makes the entities due in
//! Redis.

use axum::{Json, extract::State, http::StatusCode};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{
    AppState,
    auth::Requester,
    error::{ApiError, store_error},
    extract::{ApiJson, ApiPath, ApiQuery, JsonBody},
};
use crate::{
    dead_letters::{self, DeadLetterError},
    domain::{DeadLetter, EntityId},
    request::fields::{self, CURSOR},
    store::DeadLetterKey,
};

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1000;

/// `GET /v1/dead-letters`'s page.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeadLettersQuery {
    /// Page size, default 100
    #[serde(default, deserialize_with = "fields::limit::<_, MAX_LIMIT>")]
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
    /// next_cursor of the previous page (dead-lettered at in unix microseconds, a dot, the record's id)
    #[serde(default, deserialize_with = "cursor")]
    #[param(value_type = Option<String>, pattern = r"^[0-9]{1,18}\.[0-9]{1,18}$")]
    cursor: Option<DeadLetterKey>,
}

fn cursor<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<DeadLetterKey>, D::Error> {
    fields::param(d, |raw| {
        DeadLetterKey::parse(&raw).ok_or_else(|| CURSOR.to_owned())
    })
}

#[derive(Serialize, ToSchema)]
pub struct DeadLettersPage {
    dead_letters: Vec<DeadLetter>,
    next_cursor: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct Redriven {
    redriven: usize,
}

fn redrive_error(error: DeadLetterError) -> ApiError {
    match error {
        DeadLetterError::Store(error) => store_error(error),
        DeadLetterError::Queue(error) => ApiError::unavailable(error),
    }
}

#[utoipa::path(
    get,
    path = "/v1/dead-letters",
    tag = "admin",
    description = "Dead-lettered entities not yet redriven, oldest first, from the durable record in Postgres. Role admin.",
    params(DeadLettersQuery),
    responses(
        (status = 200, description = "A page of dead letters", body = DeadLettersPage),
        (status = 400, description = "A bad query parameter (code invalid_query)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<DeadLettersQuery>,
) -> Result<Json<DeadLettersPage>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT) as usize;
    let page = dead_letters::list(&state.store, query.cursor, limit)
        .await
        .map_err(store_error)?;
    Ok(Json(DeadLettersPage {
        dead_letters: page.entries,
        next_cursor: page.next.map(|c| c.encode()),
    }))
}

#[utoipa::path(
    post,
    path = "/v1/dead-letters/{entity}/redrive",
    tag = "admin",
    description = "Makes one dead-lettered entity due again with fresh attempts. Role admin.",
    params(
        ("entity" = String, Path, pattern = r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.:-]{1,128}$", description = "An entity id, e.g. post:9842"),
    ),
    responses(
        (status = 200, description = "Redriven", body = Redriven),
        (status = 400, description = "Not a valid entity id", body = crate::http::schemas::ErrorResponse),
        (status = 404, description = "The entity is not dead-lettered", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn redrive_one(
    State(state): State<AppState>,
    requester: Requester,
    ApiPath(entity): ApiPath<EntityId>,
) -> Result<Json<Redriven>, ApiError> {
    let by = requester.token_actor();
    let redriven = dead_letters::redrive(&state.store, &state.queue, &entity, &by)
        .await
        .map_err(redrive_error)?;
    if !redriven {
        return Err(ApiError::not_found(format!(
            "{entity} is not dead-lettered"
        )));
    }
    Ok(Json(Redriven { redriven: 1 }))
}

/// Optional: without a body (or without `reason`), every dead letter is redriven.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveRequest {
    #[serde(default, deserialize_with = "reason")]
    reason: Option<DeadLetterReason>,
}

/// Which dead letters a redrive takes.
#[derive(Clone, Copy, ToSchema)]
#[serde(rename_all = "snake_case")]
enum DeadLetterReason {
    Fatal,
    AttemptsExhausted,
}

impl DeadLetterReason {
    /// As the store records it.
    fn as_str(self) -> &'static str {
        match self {
            Self::Fatal => "fatal",
            Self::AttemptsExhausted => "attempts_exhausted",
        }
    }
}

fn reason<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<DeadLetterReason>, D::Error> {
    const REFUSED: &str = "reason must be \"fatal\" or \"attempts_exhausted\"";
    fields::optional(d, REFUSED, |raw| match raw.as_str() {
        "fatal" => Ok(DeadLetterReason::Fatal),
        "attempts_exhausted" => Ok(DeadLetterReason::AttemptsExhausted),
        _ => Err(REFUSED.to_owned()),
    })
}

/// A JSON null, like an empty body, redrives all.
impl JsonBody for Option<RedriveRequest> {
    const SHAPE: &'static str = "the body must be an object such as {\"reason\": \"fatal\"}";

    fn when_empty() -> Option<Self> {
        Some(None)
    }
}

/// Body (optional): `{"reason": "fatal" | "attempts_exhausted"}`; without it, all.
#[utoipa::path(
    post,
    path = "/v1/dead-letters/redrive",
    tag = "admin",
    description = "Redrives every dead letter, or those of one reason. Role admin.",
    request_body(content = Option<RedriveRequest>, content_type = "application/json"),
    responses(
        (status = 200, description = "How many were redriven", body = Redriven),
        (status = 400, description = "Malformed JSON", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad body (field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn redrive_many(
    State(state): State<AppState>,
    requester: Requester,
    ApiJson(body): ApiJson<Option<RedriveRequest>>,
) -> Result<(StatusCode, Json<Redriven>), ApiError> {
    let reason = body.and_then(|body| body.reason);
    let redriven = dead_letters::redrive_all(
        &state.store,
        &state.queue,
        reason.map(DeadLetterReason::as_str),
        &requester.token_actor(),
    )
    .await
    .map_err(redrive_error)?;
    Ok((StatusCode::OK, Json(Redriven { redriven })))
}
