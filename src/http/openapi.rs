//! The OpenAPI 3.1 description of the API, served at `/openapi.json`. Paths come from the
//! `#[utoipa::path]` attributes on the handlers, shapes from [`super::schemas`].

use axum::{Json, response::IntoResponse};
use utoipa::{
    Modify, OpenApi,
    openapi::security::{Http, HttpAuthScheme, SecurityScheme},
};

use super::schemas::ErrorResponse;
use crate::domain::EventBody;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "quiesce",
        description = "Moderation debounce scheduler: records every event, waits until an entity is quiet, then evaluates the rules once on a consistent snapshot and applies at most one action. Every /v1 route but the named-source one needs `Authorization: Bearer <token>` of the role its description names."
    ),
    paths(
        super::events::post_events,
        super::events::post_source_events,
        super::read::get_entity,
        super::evaluations::list_evaluations,
        super::context::put_attributes,
        super::moderation::list_actions,
        super::moderation::reverse,
        super::moderation::override_entity,
        super::moderation::end_timer,
        super::moderation::reversal_rate,
        super::review::list,
        super::review::claim,
        super::review::decide,
        super::appeals::list_statements,
        super::appeals::appeal_action,
        super::appeals::appeal_statement,
        super::appeals::list_appeals,
        super::appeals::claim_appeal,
        super::appeals::decide_appeal,
        super::rules::list,
        super::rules::reload,
        super::rules_versions::publish,
        super::rules_versions::versions,
        super::rules_versions::activate,
        super::backtest::backtest,
        super::dead_letters::list,
        super::dead_letters::redrive_many,
        super::dead_letters::redrive_one,
        super::audit::list,
        super::health::healthz,
        super::health::readyz,
        openapi_json,
    ),
    // ErrorResponse is named here: the shared error responses refer to it by name.
    components(schemas(EventBody, ErrorResponse)),
    modifiers(&Security),
    tags(
        (name = "ingest", description = "Events in: role ingest, or a named source's signature"),
        (name = "moderation", description = "Role moderator"),
        (name = "statements", description = "Statements of reasons and appeals: an appeal is forwarded with role ingest, read and decided with role moderator"),
        (name = "admin", description = "Role admin"),
        (name = "health", description = "Open"),
    )
)]
pub struct ApiDoc;

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "health",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json"))
)]
pub async fn openapi_json() -> impl IntoResponse {
    Json(ApiDoc::openapi())
}
