//! `GET /v1/audit`: the audit trail, newest first, filtered and paged by id.

use std::collections::HashMap;

use axum::{
    Json,
    extract::{Query, State},
};
use chrono::Utc;
use serde_json::{Value, json};

use super::{
    AppState,
    error::{ApiError, store_error},
    params::{bad_query, page_cursor, page_limit, unknown_parameters},
};
use crate::{audit::parse_since, domain::AuditAction, store::AuditFilter};

const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1000;
const MAX_TEXT: usize = 1000;

#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "admin",
    description = "The audit trail: every reversal, override, timed action ended early, redrive, rules reload, shard move and console sign-in and sign-out, with who made it (the name they gave, the token's label, the role), from which address, and the state before and after; newest first. Append-only. Role admin.",
    params(
        ("actor" = Option<String>, Query, pattern = r"^[^\x00]{1,1000}$", description = "Only this actor's (the name recorded)"),
        ("action" = Option<AuditAction>, Query, description = "Only this kind of decision"),
        ("subject" = Option<String>, Query, pattern = r"^[^\x00]{1,1000}$", description = "Only decisions on this (an entity, action:<id>, rules, shards, dead_letters, a token label)"),
        ("since" = Option<String>, Query, description = "An RFC 3339 time, or a duration back from now (7d, 24h)"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 1000, description = "Page size, default 100"),
        ("cursor" = Option<String>, Query, pattern = r"^[0-9]{1,18}$", description = "next_cursor of the previous page"),
    ),
    responses(
        (status = 200, description = "A page of the audit trail", body = crate::http::schemas::AuditPage),
        (status = 400, description = "A bad query parameter (code invalid_query; field names it)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    unknown_parameters(
        &params,
        &["actor", "action", "subject", "since", "limit", "cursor"],
    )?;
    let text = |field: &str| -> Result<Option<String>, ApiError> {
        match params.get(field) {
            None => Ok(None),
            Some(v) if v.is_empty() || v.contains('\0') || v.chars().count() > MAX_TEXT => {
                Err(bad_query(
                    field,
                    format!("{field} must be 1-{MAX_TEXT} characters without NUL"),
                ))
            }
            Some(v) => Ok(Some(v.clone())),
        }
    };
    let mut filter = AuditFilter {
        actor: text("actor")?,
        subject: text("subject")?,
        ..Default::default()
    };
    if let Some(raw) = params.get("action") {
        let action = AuditAction::parse(raw).ok_or_else(|| {
            let names: Vec<&str> = AuditAction::ALL.iter().map(|a| a.as_str()).collect();
            bad_query(
                "action",
                format!("action must be one of {}", names.join(", ")),
            )
        })?;
        filter.action = Some(action.as_str().to_owned());
    }
    if let Some(raw) = params.get("since") {
        filter.since = Some(
            parse_since(raw, Utc::now()).map_err(|p| bad_query("since", format!("since {p}")))?,
        );
    }
    filter.limit = page_limit(&params, DEFAULT_LIMIT, MAX_LIMIT)?;
    filter.before = page_cursor(&params)?;
    let entries = state.store.audit_page(&filter).await.map_err(store_error)?;
    let next_cursor = (entries.len() as i64 == filter.limit)
        .then(|| entries.last().map(|e| e.id.to_string()))
        .flatten();
    Ok(Json(
        json!({ "entries": entries, "next_cursor": next_cursor }),
    ))
}
