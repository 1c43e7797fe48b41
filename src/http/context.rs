//! `PUT /v1/entities/{entity}/attributes`: what the platform knows of an entity (account age,
//! trust, verified, role), declared under `[attributes.entity.*]` in the rules in force and
//! checked as event attributes are. Each call records the whole context anew, with its time; the
//! rows before stay, so an evaluation already recorded keeps what it read.

use axum::{
    Extension, Json,
    extract::{Path, State, rejection::PathRejection},
    http::StatusCode,
};
use serde_json::{Value, json};

use super::{
    AppState,
    auth::Caller,
    body::RequestBody,
    error::{ApiError, store_error},
    params::{parse_entity, path_param},
};
use crate::domain::{AttributeError, Scope, attributes_from_json};

fn invalid(error: AttributeError) -> ApiError {
    let refused = ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_attributes",
        error.message,
    );
    match error.attribute {
        Some(name) => refused.with_field(format!("attributes.{name}")),
        None => refused.with_field("attributes"),
    }
}

#[utoipa::path(
    put,
    path = "/v1/entities/{entity}/attributes",
    tag = "ingest",
    description = "Sets what the platform knows of an entity: the whole of its context, each attribute declared under `[attributes.entity.<name>]` in the rules in force. Rules read it with `attr(name, default)`, and a post's rules with `author.attr(name, default)`. A change is recorded with its time; earlier evaluations keep what they read. Role ingest (or admin).",
    params(
        ("entity" = String, Path, pattern = r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.:-]{1,128}$", description = "An entity id, e.g. user:77"),
    ),
    request_body(content = crate::http::schemas::ContextRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The context recorded", body = crate::http::schemas::ContextResult),
        (status = 400, description = "Malformed JSON or a bad entity id", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "An attribute that is not declared, of the wrong type, not among its values, too long, or too many (code invalid_attributes; field names the attribute, e.g. attributes.role)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn put_attributes(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    path: Result<Path<String>, PathRejection>,
    RequestBody(body): RequestBody,
) -> Result<Json<Value>, ApiError> {
    let raw = path_param(path, "entity")?;
    let entity = parse_entity(&raw)?;
    let value: Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request("malformed_json", format!("the body is not valid JSON: {e}"))
    })?;
    if !value.is_object() {
        return Err(invalid(AttributeError {
            attribute: None,
            message: "the body must be a JSON object of attribute names to values".into(),
        }));
    }
    let attributes = attributes_from_json(&value)
        .map_err(invalid)?
        .unwrap_or_default();
    let rules = state.rules.current();
    rules
        .declarations()
        .validate(
            Scope::Entity,
            &attributes,
            state.settings.http.attribute_limits(),
        )
        .map_err(invalid)?;
    let by = caller.map_or_else(|| "default".to_owned(), |Extension(c)| c.client);
    let set_at = state
        .store
        .set_context(&entity, &attributes, &by)
        .await
        .map_err(store_error)?;
    Ok(Json(json!({
        "entity": entity.as_str(),
        "attributes": attributes,
        "set_at": set_at,
    })))
}
