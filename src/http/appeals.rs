//! Statements of reasons and appeals over the API: the statements issued (filtered, keyset
//! pages), an appeal the platform forwards for its user, and the appeals' queue that
//! moderators work (claim, decide).

use axum::{Json, extract::State, http::StatusCode};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{
    AppState,
    auth::Requester,
    error::{ApiError, store_error},
    extract::{ApiJson, ApiPath, ApiQuery, JsonBody},
    wire::{AppealDecision, AppealRecord, StatementRecord},
};
use crate::{
    active_rules::RuleDemoter,
    appeals::{self, AppealDesk, AppealError, AppealRefusal, MAX_APPEAL_TEXT},
    request::{
        fields::{self, Text},
        path::{ActionId, AppealId, StatementId},
    },
    store::{self, DecidedBy, StatementFilter},
};

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1000;
const MAX_FILTER: usize = 200;

/// `GET /v1/statements`' filters and page.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StatementsQuery {
    /// Only this entity's
    #[serde(default, deserialize_with = "fields::filter_text::<_, MAX_FILTER>")]
    #[param(pattern = r"^[^\x00]{0,200}$")]
    entity: Option<String>,
    /// Only this rule's
    #[serde(default, deserialize_with = "fields::filter_text::<_, MAX_FILTER>")]
    #[param(pattern = r"^[^\x00]{0,200}$")]
    rule: Option<String>,
    /// Only decisions taken this way: automated, review, override or reversal
    #[serde(default, deserialize_with = "decided_by")]
    decided_by: Option<String>,
    /// Only statements issued at or after this time (RFC 3339)
    #[serde(default, deserialize_with = "since")]
    #[param(value_type = Option<String>)]
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// Page size, default 100
    #[serde(default, deserialize_with = "fields::limit::<_, MAX_LIMIT>")]
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
    /// next_cursor of the previous page
    #[serde(default, deserialize_with = "fields::id_cursor")]
    #[param(value_type = Option<String>, pattern = r"^[0-9]{1,18}$")]
    cursor: Option<i64>,
}

/// One of the ways a statement's decision is taken ([`DecidedBy::ALL`]).
fn decided_by<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    fields::param(d, |raw| {
        let ways = DecidedBy::ALL.map(DecidedBy::as_str);
        if ways.contains(&raw.as_str()) {
            Ok(raw)
        } else {
            Err(format!("must be one of {}", ways.join(", ")))
        }
    })
}

fn since<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, D::Error> {
    fields::param(d, |raw| {
        chrono::DateTime::parse_from_rfc3339(&raw)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|_| "must be an RFC 3339 time such as 2026-12-01T00:00:00Z".to_owned())
    })
}

#[derive(Serialize, ToSchema)]
pub struct StatementsPage {
    statements: Vec<StatementRecord>,
    /// Pass as `cursor` for the next page; null on the last.
    next_cursor: Option<String>,
}

/// `GET /v1/statements?entity=&rule=&decided_by=&since=&limit=&cursor=`.
#[utoipa::path(
    get,
    path = "/v1/statements",
    tag = "statements",
    description = "The statements of reasons issued for restricting decisions (automated hides and suspensions, moderators' review decisions and overrides that hide or suspend, reversals that put a restriction back), oldest first, filtered and paged. `statement` is the statement as the DSA Transparency Database takes it. Role moderator.",
    params(StatementsQuery),
    responses(
        (status = 200, description = "A page of statements", body = StatementsPage),
        (status = 400, description = "A bad query parameter (code invalid_query; field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list_statements(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<StatementsQuery>,
) -> Result<Json<StatementsPage>, ApiError> {
    let filter = StatementFilter {
        entity: query.entity,
        rule: query.rule,
        decided_by: query.decided_by,
        since: query.since,
        after: query.cursor,
        limit: query.limit.unwrap_or(DEFAULT_LIMIT),
    };
    let statements = state
        .store
        .statements()
        .list(&filter)
        .await
        .map_err(store_error)?;
    let next_cursor = (statements.len() as i64 == filter.limit)
        .then(|| statements.last().map(|s| s.id.to_string()))
        .flatten();
    Ok(Json(StatementsPage {
        statements: statements.into_iter().map(Into::into).collect(),
        next_cursor,
    }))
}

/// An appeal's text: 1 to 5,000 characters, not only spaces, no control characters but line
/// breaks and tabs.
#[derive(Debug)]
pub struct AppealText(String);

impl<'de> Deserialize<'de> for AppealText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const RULE: &str = "must be a string of 1-5000 characters, not only spaces, without control characters other than line breaks and tabs";
        let text = fields::parsed(d, |raw| Ok(raw.to_owned()))?;
        let allowed = |c: char| !c.is_control() || matches!(c, '\n' | '\r' | '\t');
        if text.trim().is_empty()
            || text.chars().count() > MAX_APPEAL_TEXT
            || !text.chars().all(allowed)
        {
            return Err(serde::de::Error::custom(RULE));
        }
        Ok(AppealText(text))
    }
}

impl utoipa::PartialSchema for AppealText {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .min_length(Some(1))
            .max_length(Some(MAX_APPEAL_TEXT))
            .description(Some("The appellant's text, 1-5000 characters"))
            .into()
    }
}

impl utoipa::ToSchema for AppealText {}

/// An appeal the platform forwards for its user.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppealRequest {
    /// The platform's name for the appellant (kept with the appeal, never in a statement)
    appellant: Text,
    text: AppealText,
}

impl JsonBody for AppealRequest {}

/// `POST /v1/actions/{id}/appeals` with `{"appellant", "text"}`.
#[utoipa::path(
    post,
    path = "/v1/actions/{id}/appeals",
    tag = "statements",
    description = "The platform forwards its user's appeal of a restricting action (DSA Art. 20). One open appeal per decision, and none after a rejected one (a rejection is final); refused (422) after appeal_window (6 months by default) or for an action that restricts nothing. A person decides it (`POST /v1/appeals/{id}/decide`). Role ingest.",
    params(("id" = i64, Path, description = "The action's id")),
    request_body(content = AppealRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "The appeal, waiting", body = AppealRecord),
        (status = 400, description = "Malformed JSON or a bad id", body = crate::http::schemas::ErrorResponse),
        (status = 404, description = "No such action", body = crate::http::schemas::ErrorResponse),
        (status = 409, description = "An appeal of this decision is open already (code appeal_open), or one was rejected, which is final (code appeal_rejected); `appeal` names that appeal", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad field, a decision that restricts nothing (nothing_to_appeal) or an appeal window closed (appeal_window_closed)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn appeal_action(
    State(state): State<AppState>,
    requester: Requester,
    ApiPath(ActionId(id)): ApiPath<ActionId>,
    ApiJson(body): ApiJson<AppealRequest>,
) -> Result<(StatusCode, Json<AppealRecord>), ApiError> {
    let statement = appeals::statement_of_action(&state.store, id).await?;
    submit(&state, &requester, &statement, body).await
}

/// `POST /v1/statements/{id}/appeals` with `{"appellant", "text"}`.
#[utoipa::path(
    post,
    path = "/v1/statements/{id}/appeals",
    tag = "statements",
    description = "As `POST /v1/actions/{id}/appeals`, naming the statement of reasons instead: the way to appeal a moderator's override, which has no action. Role ingest.",
    params(("id" = i64, Path, description = "The statement's id")),
    request_body(content = AppealRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "The appeal, waiting", body = AppealRecord),
        (status = 400, description = "Malformed JSON or a bad id", body = crate::http::schemas::ErrorResponse),
        (status = 404, description = "No such statement", body = crate::http::schemas::ErrorResponse),
        (status = 409, description = "An appeal of this decision is open already (code appeal_open), or one was rejected, which is final (code appeal_rejected); `appeal` names that appeal", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad field, or the appeal window closed (appeal_window_closed)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn appeal_statement(
    State(state): State<AppState>,
    requester: Requester,
    ApiPath(StatementId(id)): ApiPath<StatementId>,
    ApiJson(body): ApiJson<AppealRequest>,
) -> Result<(StatusCode, Json<AppealRecord>), ApiError> {
    let statement = state
        .store
        .statements()
        .statement(id)
        .await
        .map_err(store_error)?
        .ok_or_else(|| ApiError::not_found(format!("no statement {id}")))?;
    submit(&state, &requester, &statement, body).await
}

async fn submit(
    state: &AppState,
    requester: &Requester,
    statement: &store::StatementRecord,
    body: AppealRequest,
) -> Result<(StatusCode, Json<AppealRecord>), ApiError> {
    let by = requester.actor("platform");
    let appeal = appeals::submit(
        &state.store,
        statement,
        &body.appellant,
        &body.text.0,
        state.settings.moderation.appeal_window,
        &by,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(appeal.into())))
}

/// `GET /v1/appeals`' filters and page.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AppealsQuery {
    /// Only open (true) or decided (false) appeals; default: open
    #[serde(default, deserialize_with = "fields::flag")]
    open: Option<bool>,
    /// Page size, default 100
    #[serde(default, deserialize_with = "fields::limit::<_, MAX_LIMIT>")]
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
    /// next_cursor of the previous page
    #[serde(default, deserialize_with = "fields::id_cursor")]
    #[param(value_type = Option<String>, pattern = r"^[0-9]{1,18}$")]
    cursor: Option<i64>,
}

#[derive(Serialize, ToSchema)]
pub struct AppealsPage {
    appeals: Vec<AppealRecord>,
    /// Pass as `cursor` for the next page; null on the last.
    next_cursor: Option<String>,
}

/// `GET /v1/appeals?open=&limit=&cursor=`.
#[utoipa::path(
    get,
    path = "/v1/appeals",
    tag = "statements",
    description = "The appeals' queue, oldest first: open appeals by default, decided ones with open=false. Role moderator.",
    params(AppealsQuery),
    responses(
        (status = 200, description = "A page of appeals", body = AppealsPage),
        (status = 400, description = "A bad query parameter (code invalid_query; field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list_appeals(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<AppealsQuery>,
) -> Result<Json<AppealsPage>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    let appeals = state
        .store
        .appeals()
        .list(Some(query.open.unwrap_or(true)), query.cursor, limit)
        .await
        .map_err(store_error)?;
    let next_cursor = (appeals.len() as i64 == limit)
        .then(|| appeals.last().map(|a| a.id.to_string()))
        .flatten();
    Ok(Json(AppealsPage {
        appeals: appeals.into_iter().map(Into::into).collect(),
        next_cursor,
    }))
}

/// A claim on an appeal.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppealClaim {
    moderator: Text,
}

impl JsonBody for AppealClaim {}

/// `POST /v1/appeals/{id}/claim` with `{"moderator"}`.
#[utoipa::path(
    post,
    path = "/v1/appeals/{id}/claim",
    tag = "statements",
    description = "A moderator claims an open appeal for review_claim (10 minutes by default), so that no one else decides it meanwhile; claiming again extends one's own claim. Role moderator.",
    params(("id" = i64, Path, description = "The appeal's id")),
    request_body(content = AppealClaim, content_type = "application/json"),
    responses(
        (status = 200, description = "The appeal, claimed", body = AppealRecord),
        (status = 400, description = "Malformed JSON or a bad id", body = crate::http::schemas::ErrorResponse),
        (status = 404, description = "No such appeal", body = crate::http::schemas::ErrorResponse),
        (status = 409, description = "Claimed by someone else (claimed) or decided (already_decided)", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad field (field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn claim_appeal(
    State(state): State<AppState>,
    requester: Requester,
    ApiPath(AppealId(id)): ApiPath<AppealId>,
    ApiJson(body): ApiJson<AppealClaim>,
) -> Result<Json<AppealRecord>, ApiError> {
    let by = requester.actor(&body.moderator);
    let appeal = appeals::claim(
        &state.store,
        id,
        &by.name,
        state.settings.moderation.review_claim,
    )
    .await?;
    Ok(Json(appeal.into()))
}

/// A person's decision on an appeal.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppealDecisionRequest {
    moderator: Text,
    /// upheld (the decision is reversed) or rejected (it stands)
    #[serde(deserialize_with = "outcome")]
    outcome: AppealDecision,
    /// Why: sent to the platform, which tells its user
    reason: Text,
}

impl JsonBody for AppealDecisionRequest {}

/// The outcome as the shared field reader reads it (its message), in the API's own type.
fn outcome<'de, D: serde::Deserializer<'de>>(d: D) -> Result<AppealDecision, D::Error> {
    fields::appeal_outcome(d).map(AppealDecision::from)
}

/// `POST /v1/appeals/{id}/decide` with `{"moderator", "outcome", "reason"}`.
#[utoipa::path(
    post,
    path = "/v1/appeals/{id}/decide",
    tag = "statements",
    description = "A person decides an appeal (never a rule). Upheld: the decision is reversed through the reversal path (an action's reversal, or for an override an override back to the status it found), counted in the reversal rate with source appeal. Rejected: recorded, final. Either way an appeal.decided webhook carries the outcome and reason, and the audit trail records it. Role moderator.",
    params(("id" = i64, Path, description = "The appeal's id")),
    request_body(content = AppealDecisionRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The appeal, decided", body = AppealRecord),
        (status = 400, description = "Malformed JSON or a bad id", body = crate::http::schemas::ErrorResponse),
        (status = 404, description = "No such appeal", body = crate::http::schemas::ErrorResponse),
        (status = 409, description = "Decided already (already_decided), claimed by someone else (claimed), or the decision cannot be reversed as it stands (already_reversed, superseded)", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "A bad field (field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn decide_appeal(
    State(state): State<AppState>,
    requester: Requester,
    ApiPath(AppealId(id)): ApiPath<AppealId>,
    ApiJson(body): ApiJson<AppealDecisionRequest>,
) -> Result<Json<AppealRecord>, ApiError> {
    let rules = state.rules.current();
    let demoter = RuleDemoter::new(&state.settings.moderation, Some(state.rules.clone()));
    let desk = AppealDesk {
        store: &state.store,
        queue: &state.queue,
        rules: &rules,
        demoter: &demoter,
        override_for: state.settings.moderation.override_after_reversal,
    };
    let by = requester.actor(&body.moderator);
    let appeal = appeals::decide(&desk, id, &by, body.outcome.into(), &body.reason).await?;
    Ok(Json(appeal.into()))
}

/// Appeals refused are 422 (nothing to appeal, window closed) or 409 (a conflict with the
/// appeal's or the decision's state), their code naming why.
impl From<AppealError> for ApiError {
    fn from(error: AppealError) -> Self {
        let message = error.to_string();
        match error {
            AppealError::NothingToAppeal(_) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "nothing_to_appeal",
                message,
            )
            .with_field("id"),
            AppealError::Refused(refusal) => {
                let (status, code, earlier) = match refusal {
                    AppealRefusal::WindowClosed { .. } => (
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "appeal_window_closed",
                        None,
                    ),
                    AppealRefusal::AlreadyOpen { appeal, .. } => {
                        (StatusCode::CONFLICT, "appeal_open", Some(appeal))
                    }
                    AppealRefusal::AlreadyRejected { appeal, .. } => {
                        (StatusCode::CONFLICT, "appeal_rejected", Some(appeal))
                    }
                    AppealRefusal::Decided(_) => (StatusCode::CONFLICT, "already_decided", None),
                    AppealRefusal::ClaimedElsewhere { .. } => {
                        (StatusCode::CONFLICT, "claimed", None)
                    }
                };
                let error = ApiError::new(status, code, message);
                match earlier {
                    Some(appeal) => error.with_appeal(appeal),
                    None => error,
                }
            }
            AppealError::Reversal(refusal) => {
                crate::moderation::ReversalError::Refused(refusal).into()
            }
            AppealError::Store(error) => store_error(error),
        }
    }
}
