//! An entity's evaluations, newest first in keyset pages, each with what its rules concluded:
//! the live rules that matched, those exempted by their `unless`, the shadow matches, the
//! errors and labels, and the action it applied.

use axum::{Json, extract::State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;

use super::{
    AppState,
    error::{ApiError, store_error},
    extract::{ApiPath, ApiQuery},
};
use crate::{
    domain::EntityId,
    request::fields::{self, CURSOR},
    rules::{Decision, LabelDecision, Verdict},
    store::{EvaluationRecord, PageKey},
};

const DEFAULT_LIMIT: i64 = 20;
const MAX_LIMIT: i64 = 200;

/// A rule that could not be evaluated on the snapshot, and why.
#[derive(Serialize, utoipa::ToSchema)]
pub struct RuleError {
    rule: String,
    error: String,
}

/// A live rule whose condition held but whose exemption (`unless`) held too: it took no
/// effect, neither its action nor its labels.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Exemption {
    rule: String,
}

/// What the rules concluded about the evaluation's snapshot.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Decisions {
    /// Live rules whose condition held and which were not exempted, in file order; the
    /// strongest is the one applied, unless the status was already as high or an override
    /// held the entity below it.
    matched: Vec<Decision>,
    /// Live rules whose condition held and whose `unless` held too, in file order.
    exempted: Vec<Exemption>,
    /// Shadow rules (and canary rules outside their share) whose condition held: what they
    /// would have done.
    shadow: Vec<Decision>,
    /// Live rules that could not be evaluated.
    errors: Vec<RuleError>,
    /// Shadow rules that could not be evaluated (recorded, never a failure).
    shadow_errors: Vec<RuleError>,
    /// Labels the matched live rules gave.
    labels: Vec<LabelDecision>,
}

fn rule_errors(errors: Vec<(String, String)>) -> Vec<RuleError> {
    errors
        .into_iter()
        .map(|(rule, error)| RuleError { rule, error })
        .collect()
}

impl From<Verdict> for Decisions {
    fn from(verdict: Verdict) -> Self {
        Self {
            matched: verdict.matched,
            exempted: verdict
                .exempted
                .into_iter()
                .map(|rule| Exemption { rule })
                .collect(),
            shadow: verdict.shadow,
            errors: rule_errors(verdict.errors),
            shadow_errors: rule_errors(verdict.shadow_errors),
            labels: verdict.labels,
        }
    }
}

/// One completed evaluation of the entity.
#[derive(Serialize, utoipa::ToSchema)]
pub struct EvaluationEntry {
    id: i64,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
    /// When the entity fell due (null: recorded before this was kept).
    due_at: Option<DateTime<Utc>>,
    /// The entity's moderation_version the rules decided on.
    moderation_version: i64,
    /// The events the snapshot counted.
    event_count: i64,
    /// The rules version that decided it (null: before rules versions).
    rules_version: Option<i64>,
    /// The action it applied (an id of `GET /v1/actions`); null when it applied none.
    action_id: Option<i64>,
    decisions: Decisions,
    /// The snapshot the rules saw (null for some evaluations recorded by earlier releases).
    #[schema(value_type = Option<Object>)]
    snapshot: Option<serde_json::Value>,
}

impl TryFrom<EvaluationRecord> for EvaluationEntry {
    type Error = ApiError;

    fn try_from(record: EvaluationRecord) -> Result<Self, ApiError> {
        let verdict: Verdict =
            serde_json::from_value(record.decisions).map_err(ApiError::internal)?;
        Ok(Self {
            id: record.id,
            started_at: record.started_at,
            finished_at: record.finished_at,
            due_at: record.due_at,
            moderation_version: record.moderation_version,
            event_count: record.event_count,
            rules_version: record.rules_version,
            action_id: record.action_id,
            decisions: verdict.into(),
            snapshot: record.snapshot,
        })
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct EvaluationsPage {
    entity: String,
    evaluations: Vec<EvaluationEntry>,
    /// Pass as `cursor` for the next page; null on the last.
    next_cursor: Option<String>,
}

/// A page of the evaluations: its size and where it starts.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EvaluationsQuery {
    /// Page size, default 20
    #[serde(default, deserialize_with = "fields::limit::<_, MAX_LIMIT>")]
    #[param(minimum = 1, maximum = 200)]
    limit: Option<i64>,
    /// next_cursor of the previous page (started at in unix microseconds, a dot, the evaluation's id)
    #[serde(default, deserialize_with = "cursor")]
    #[param(value_type = Option<String>, pattern = r"^[0-9]{1,18}\.[0-9]{1,18}$")]
    cursor: Option<PageKey>,
}

fn cursor<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<PageKey>, D::Error> {
    fields::param(d, |raw| {
        PageKey::parse(&raw).ok_or_else(|| CURSOR.to_owned())
    })
}

/// `GET /v1/entities/{entity}/evaluations?limit=&cursor=`, newest first.
#[utoipa::path(
    get,
    path = "/v1/entities/{entity}/evaluations",
    tag = "moderation",
    description = "The entity's evaluations still retained, newest first (by start), paged: each with its rules version, the action it applied, and its decisions: the live rules that matched, those exempted by their `unless`, the shadow matches, the errors and labels. Role moderator.",
    params(
        ("entity" = String, Path, pattern = r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.:-]{1,128}$", description = "An entity id, e.g. post:9842"),
        EvaluationsQuery,
    ),
    responses(
        (status = 200, description = "A page of evaluations", body = EvaluationsPage),
        (status = 400, description = "Not a valid entity id (code invalid_entity), or a bad query parameter (code invalid_query; field names it)", body = crate::http::schemas::ErrorResponse),
        (status = 404, description = "No events were ever recorded for it", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list_evaluations(
    State(state): State<AppState>,
    ApiPath(entity): ApiPath<EntityId>,
    ApiQuery(query): ApiQuery<EvaluationsQuery>,
) -> Result<Json<EvaluationsPage>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    let before = query.cursor;
    let records = state
        .store
        .read()
        .entity_evaluations(&entity, before, limit)
        .await
        .map_err(store_error)?;
    // An empty page is an unknown entity's, or the end of a known one's.
    if records.is_empty() {
        let known = state
            .store
            .read()
            .count_known_entities(&[entity.as_str().to_owned()])
            .await
            .map_err(store_error)?;
        if known == 0 {
            return Err(ApiError::not_found(format!(
                "no events were ever recorded for {entity}"
            )));
        }
    }
    let next_cursor = (records.len() as i64 == limit)
        .then(|| {
            records
                .last()
                .map(|r| PageKey::of(r.started_at, r.id).encode())
        })
        .flatten();
    let evaluations = records
        .into_iter()
        .map(EvaluationEntry::try_from)
        .collect::<Result<_, _>>()?;
    Ok(Json(EvaluationsPage {
        entity: entity.as_str().to_owned(),
        evaluations,
        next_cursor,
    }))
}
