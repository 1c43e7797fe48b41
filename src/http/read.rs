//! Read API: one entity's state, and applied actions.

use axum::{Json, extract::State};
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::{
    AppState,
    error::{ApiError, store_error},
    extract::ApiPath,
    wire::{LabelRecord, Override},
};
use crate::domain::{AttributeReads, EntityId, SignalStats, SnapshotAttributes, Status, Timer};

/// An entity's status, aggregates and schedule.
#[derive(Serialize, ToSchema)]
pub struct EntityView {
    entity: String,
    kind: String,
    status: Status,
    moderation_version: i64,
    signals: BTreeMap<String, SignalStats>,
    event_count: i64,
    evaluation: EvaluationView,
    last_event_at: DateTime<Utc>,
    /// The latest moderator override, in force or not.
    r#override: Option<Override>,
    /// Aggregates of its events' attributes, its context and its author's.
    attributes: SnapshotAttributes,
    /// The timed action in force (a rule's `duration`, or a timed override): when it ends and
    /// the status its end restores; null when none.
    timer: Option<Timer>,
    /// Labels live rules recorded on the entity (`labels` on a rule), oldest first.
    labels: Vec<LabelRecord>,
}

#[derive(Serialize, ToSchema)]
struct EvaluationView {
    pending: bool,
    fires_at: Option<DateTime<Utc>>,
    running: bool,
    pending_since: Option<DateTime<Utc>>,
    count: i64,
    last_evaluated_at: Option<DateTime<Utc>>,
    evaluated_event_count: i64,
}

fn millis_to_time(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::<Utc>::from_timestamp_millis(ms)
}

#[utoipa::path(
    get,
    path = "/v1/entities/{entity}",
    tag = "moderation",
    description = "One entity's status, aggregates and schedule. Role moderator.",
    params(
        ("entity" = String, Path, pattern = r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.:-]{1,128}$", description = "An entity id, e.g. post:9842"),
    ),
    responses(
        (status = 200, description = "The entity", body = EntityView),
        (status = 400, description = "Not a valid entity id", body = crate::http::schemas::ErrorResponse),
        (status = 404, description = "No events were ever recorded for it", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn get_entity(
    State(state): State<AppState>,
    ApiPath(entity): ApiPath<EntityId>,
) -> Result<Json<EntityView>, ApiError> {
    let record = state
        .store
        .read()
        .entity(&entity)
        .await
        .map_err(store_error)?
        .ok_or_else(|| ApiError::not_found(format!("no events were ever recorded for {entity}")))?;
    let labels = state
        .store
        .read()
        .labels_of(&entity)
        .await
        .map_err(store_error)?;
    let schedule = state
        .queue
        .state_of(&entity)
        .await
        .map_err(ApiError::unavailable)?;
    let pending = schedule.due_at_ms.is_some()
        || schedule.lease_until_ms.is_some()
        || record.event_count > record.evaluated_event_count;
    // What the read found of attributes and context; `read` (what a snapshot read) says
    // nothing here: this read reads them all.
    let attributes = SnapshotAttributes {
        read: AttributeReads::default(),
        ..record.attributes
    };
    Ok(Json(EntityView {
        entity: record.entity,
        kind: record.kind,
        status: record.status,
        moderation_version: record.moderation_version,
        signals: record.signals,
        event_count: record.event_count,
        evaluation: EvaluationView {
            pending,
            fires_at: schedule.due_at_ms.and_then(millis_to_time),
            running: schedule.lease_until_ms.is_some(),
            pending_since: record.pending_since,
            count: record.evaluation_count,
            last_evaluated_at: record.last_evaluated_at,
            evaluated_event_count: record.evaluated_event_count,
        },
        last_event_at: record.last_event_at,
        r#override: record.override_decision.map(Into::into),
        attributes,
        timer: record.timer,
        labels: labels.into_iter().map(Into::into).collect(),
    }))
}
