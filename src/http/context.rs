//! `PUT /v1/entities/{entity}/attributes`: what the platform knows of an entity (account age,
//! trust, verified, role), declared under `[attributes.entity.*]` in the rules in force and
//! checked as event attributes are. Each call records the whole context anew, with its time; the
//! rows before stay, so an evaluation already recorded keeps what it read.

use std::collections::BTreeMap;

use axum::{Extension, Json, extract::State, http::StatusCode};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, de::Error};
use utoipa::ToSchema;

use super::{
    AppState,
    auth::Caller,
    error::{ApiError, store_error},
    extract::{ApiJson, ApiPath, JsonBody},
};
use crate::{
    domain::{AttributeError, EntityId, Scalar, Scope},
    request::problem::{Problem, ProblemKind},
};

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

/// An entity's whole context: attribute names to strings, numbers or booleans, each declared
/// under `[attributes.entity.<name>]`; at most `max_attributes` (16), strings at most
/// `max_attribute_len` (256) characters. `{}` clears it.
#[derive(ToSchema)]
pub struct ContextRequest(BTreeMap<String, Scalar>);

impl<'de> Deserialize<'de> for ContextRequest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// One attribute's value, refused in the words the declarations' check uses.
        struct Value(Scalar);

        impl<'de> Deserialize<'de> for Value {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                Scalar::deserialize(deserializer).map(Value).map_err(|_| {
                    D::Error::custom("must be a string, a number or a boolean (nothing nested)")
                })
            }
        }

        let values = BTreeMap::<String, Value>::deserialize(deserializer)?;
        Ok(Self(
            values
                .into_iter()
                .map(|(name, Value(value))| (name, value))
                .collect(),
        ))
    }
}

/// Refused as the declarations' check refuses: 422 `invalid_attributes` naming the attribute.
impl JsonBody for ContextRequest {
    fn refusal(problem: Problem) -> ApiError {
        let attribute = problem.field();
        let message = match problem.kind {
            ProblemKind::Invalid(message) if attribute.is_some() => message,
            _ => "the body must be a JSON object of attribute names to values".to_owned(),
        };
        invalid(AttributeError { attribute, message })
    }
}

/// The context recorded.
#[derive(Serialize, ToSchema)]
pub struct ContextResult {
    entity: String,
    attributes: BTreeMap<String, Scalar>,
    set_at: DateTime<Utc>,
}

#[utoipa::path(
    put,
    path = "/v1/entities/{entity}/attributes",
    tag = "ingest",
    description = "Sets what the platform knows of an entity: the whole of its context, each attribute declared under `[attributes.entity.<name>]` in the rules in force. Rules read it with `attr(name, default)`, and a post's rules with `author.attr(name, default)`. A change is recorded with its time; earlier evaluations keep what they read. Role ingest (or admin).",
    params(
        ("entity" = String, Path, pattern = r"^[a-z][a-z0-9_]{0,31}:[A-Za-z0-9_.:-]{1,128}$", description = "An entity id, e.g. user:77"),
    ),
    request_body(content = ContextRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The context recorded", body = ContextResult),
        (status = 400, description = "Malformed JSON or a bad entity id", body = crate::http::schemas::ErrorResponse),
        (status = 422, description = "An attribute that is not declared, of the wrong type, not among its values, too long, or too many (code invalid_attributes; field names the attribute, e.g. attributes.role)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::BodyRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn put_attributes(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    ApiPath(entity): ApiPath<EntityId>,
    ApiJson(ContextRequest(attributes)): ApiJson<ContextRequest>,
) -> Result<Json<ContextResult>, ApiError> {
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
        .context()
        .set_context(&entity, &attributes, &by)
        .await
        .map_err(store_error)?;
    Ok(Json(ContextResult {
        entity: entity.as_str().to_owned(),
        attributes,
        set_at,
    }))
}
