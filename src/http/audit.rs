//! `GET /v1/audit`: the audit trail, newest first, filtered and paged by id.

use axum::{Json, extract::State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{
    AppState,
    error::{ApiError, store_error},
    extract::ApiQuery,
    wire::AuditRecord,
};
use crate::{audit::parse_since, domain::AuditAction, request::fields, store::AuditFilter};

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1000;
const MAX_TEXT: usize = 1000;

/// `GET /v1/audit`'s filters and page.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Only this actor's (the name recorded)
    #[serde(default, deserialize_with = "text")]
    #[param(pattern = r"^[^\x00]{1,1000}$")]
    actor: Option<String>,
    /// Only this kind of decision
    #[serde(default, deserialize_with = "action")]
    #[param(inline)]
    action: Option<AuditAction>,
    /// Only decisions on this (an entity, action:<id>, rules, shards, dead_letters, a token label)
    #[serde(default, deserialize_with = "text")]
    #[param(pattern = r"^[^\x00]{1,1000}$")]
    subject: Option<String>,
    /// An RFC 3339 time, or a duration back from now (7d, 24h)
    #[serde(default, deserialize_with = "since")]
    #[param(value_type = Option<String>)]
    since: Option<DateTime<Utc>>,
    /// Page size, default 100
    #[serde(default, deserialize_with = "fields::limit::<_, MAX_LIMIT>")]
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
    /// next_cursor of the previous page
    #[serde(default, deserialize_with = "fields::id_cursor")]
    #[param(value_type = Option<String>, pattern = r"^[0-9]{1,18}$")]
    cursor: Option<i64>,
}

/// A name or subject: 1 to [`MAX_TEXT`] characters without NUL.
fn text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    fields::param(d, |raw| {
        if raw.is_empty() || raw.contains('\0') || raw.chars().count() > MAX_TEXT {
            Err(format!("must be 1-{MAX_TEXT} characters without NUL"))
        } else {
            Ok(raw)
        }
    })
}

fn action<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<AuditAction>, D::Error> {
    fields::param(d, |raw| {
        AuditAction::parse(&raw).ok_or_else(|| {
            let names: Vec<&str> = AuditAction::ALL.iter().map(|a| a.as_str()).collect();
            format!("must be one of {}", names.join(", "))
        })
    })
}

fn since<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
    fields::param(d, |raw| parse_since(&raw, Utc::now()))
}

#[derive(Serialize, ToSchema)]
pub struct AuditPage {
    entries: Vec<AuditRecord>,
    /// Pass as `cursor` for the next page; null on the last.
    next_cursor: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "admin",
    description = "The audit trail: every reversal, override, timed action ended early, redrive, rules reload, shard move and console sign-in and sign-out, with who made it (the name they gave, the token's label, the role), from which address, and the state before and after; newest first. Append-only. Role admin.",
    params(AuditQuery),
    responses(
        (status = 200, description = "A page of the audit trail", body = AuditPage),
        (status = 400, description = "A bad query parameter (code invalid_query; field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let filter = AuditFilter {
        actor: query.actor,
        action: query.action.map(|action| action.as_str().to_owned()),
        subject: query.subject,
        since: query.since,
        before: query.cursor,
        limit: query.limit.unwrap_or(DEFAULT_LIMIT),
    };
    let entries = state
        .store
        .audit()
        .audit_page(&filter)
        .await
        .map_err(store_error)?;
    let next_cursor = (entries.len() as i64 == filter.limit)
        .then(|| entries.last().map(|e| e.id.to_string()))
        .flatten();
    Ok(Json(AuditPage {
        entries: entries.into_iter().map(Into::into).collect(),
        next_cursor,
    }))
}
