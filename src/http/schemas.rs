//! What the OpenAPI document shares across routes: the error body and the error responses every
//! route may answer. Each route's own request and response types are beside its handler.

use std::collections::BTreeMap;

use utoipa::openapi::{RefOr, schema::Ref};

/// The error body is the error's own (`error.rs`); named here with the responses that use it.
pub use super::error::ErrorResponse;

fn error_response(description: &str) -> utoipa::openapi::ResponseBuilder {
    utoipa::openapi::ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            utoipa::openapi::ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorResponse")))
                .build(),
        )
}

/// 408, 500 and 503: what any `/v1` route may answer, whatever it does.
pub struct CommonErrors;

impl utoipa::IntoResponses for CommonErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::response::Response>> {
        let retry_after = utoipa::openapi::HeaderBuilder::new()
            .schema(<u64 as utoipa::PartialSchema>::schema())
            .description(Some("Seconds to wait"))
            .build();
        BTreeMap::from([
            (
                "408".to_owned(),
                error_response(
                    "The request took longer than request_timeout, or (ingest) its body came slower than body_min_rate after body_grace",
                )
                    .build()
                    .into(),
            ),
            ("500".to_owned(), error_response("Unexpected error").build().into()),
            (
                "503".to_owned(),
                error_response(
                    "Redis or Postgres unavailable, shutting down, or (ingest) more than max_concurrent_ingest requests at once",
                )
                .header("Retry-After", retry_after)
                .build()
                .into(),
            ),
        ])
    }
}

/// [`CommonErrors`] and the token check's 401 and 403: what every token route may answer.
pub struct TokenRouteErrors;

impl utoipa::IntoResponses for TokenRouteErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::response::Response>> {
        let mut responses = <CommonErrors as utoipa::IntoResponses>::responses();
        responses.insert(
            "401".to_owned(),
            error_response("No API token, or not a valid one")
                .build()
                .into(),
        );
        responses.insert(
            "403".to_owned(),
            error_response("The token's role may not use this route")
                .build()
                .into(),
        );
        responses
    }
}

/// [`TokenRouteErrors`], the body limit's 413 and the content type's 415: what every token
/// route that takes a JSON body may answer.
pub struct BodyRouteErrors;

impl utoipa::IntoResponses for BodyRouteErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::response::Response>> {
        let mut responses = <TokenRouteErrors as utoipa::IntoResponses>::responses();
        responses.insert(
            "413".to_owned(),
            error_response("The body is larger than body_limit (code payload_too_large)")
                .build()
                .into(),
        );
        responses.insert(
            "415".to_owned(),
            error_response(
                "The body is not sent as JSON: Content-Type application/json or application/*+json (code unsupported_media_type)",
            )
            .build()
            .into(),
        );
        responses
    }
}
