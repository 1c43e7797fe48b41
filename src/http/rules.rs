//! The rules in force, with their version and hit counts, and reading the active version
//! again.

use std::time::Duration;

use axum::{Json, extract::State};
use serde::Serialize;
use utoipa::ToSchema;

use super::{
    AppState,
    auth::Requester,
    error::{ApiError, store_error},
    rules_versions::active_rules_error,
    wire::{RuleHits, RulesVersion},
};
use crate::{
    active_rules, audit,
    domain::{Action, Declarations},
    telemetry::OrNone,
};

const HITS_WINDOW: Duration = Duration::from_secs(24 * 3600);

#[derive(Serialize, ToSchema)]
pub struct RulesList {
    /// The stored rules version in force in this process (null before one is stored).
    version: Option<RulesVersion>,
    rules: Vec<RuleView>,
    /// The attributes the rules declare: what events (`event`) and entity context (`entity`)
    /// may carry.
    attributes: Declarations,
}

#[derive(Serialize, ToSchema)]
struct RuleView {
    name: String,
    /// The status action; null for a rule that gives labels only.
    action: Option<Action>,
    /// Labels the rule records on the entity (no status change).
    labels: Vec<String>,
    /// A timed action's length in seconds (`duration`); null when the action is not timed.
    duration_secs: Option<u64>,
    /// The rule's exemption (`unless`), as written; null without one.
    unless: Option<String>,
    kinds: Vec<String>,
    when: String,
    shadow: bool,
    /// Whether the guard may turn it to shadow (false: `guard = false` in the rules file).
    guard: bool,
    hits_24h: RuleHits,
}

#[derive(Serialize, ToSchema)]
pub struct RulesReloaded {
    /// Rules now in force.
    rules: usize,
    /// The rules version now in force here.
    version: Option<i64>,
}

/// `GET /v1/rules`: every rule with its live, shadow and exempted matches over the last 24h.
#[utoipa::path(
    get,
    path = "/v1/rules",
    tag = "moderation",
    description = "The rules in force in this process: the active rules version (number, hash, author, message, time, how it became active, and its text), each rule with its live, shadow and exempted matches over 24h (exempted: the rule held and so did its `unless`), and the attributes they declare (what events and entity context may carry). Role moderator.",
    responses(
        (status = 200, description = "The rules", body = RulesList),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn list(State(state): State<AppState>) -> Result<Json<RulesList>, ApiError> {
    let hits = state
        .store
        .read()
        .rule_hits(HITS_WINDOW)
        .await
        .map_err(store_error)?;
    let rules = state.rules.current();
    // The stored version this process has in force (the active one, or just before it while
    // a change reaches this process).
    let version = match rules.version() {
        Some(number) => state
            .store
            .rules_versions()
            .rules_version(number)
            .await
            .map_err(store_error)?
            .map(RulesVersion::from),
        None => None,
    };
    let listed = rules
        .rules()
        .iter()
        .map(|rule| RuleView {
            name: rule.name.clone(),
            action: rule.action,
            labels: rule.labels.clone(),
            duration_secs: rule.duration.map(|d| d.as_secs()),
            unless: rule.unless().map(str::to_owned),
            kinds: rule.kinds.clone(),
            when: rule.when.clone(),
            shadow: rule.shadow,
            guard: rule.guard,
            hits_24h: hits.get(&rule.name).copied().unwrap_or_default().into(),
        })
        .collect();
    Ok(Json(RulesList {
        version,
        rules: listed,
        attributes: rules.declarations().clone(),
    }))
}

/// `POST /v1/rules/reload`: reads which rules version is active from Postgres again and puts it
/// in force in this process (every process also does so by itself on a publish and on its
/// poll; SIGHUP does the same). The rules file is not read: publish a new version instead.
#[utoipa::path(
    post,
    path = "/v1/rules/reload",
    tag = "admin",
    description = "Reads the active rules version from Postgres again and puts it in force in this process (processes also follow publishes by themselves). The rules file is not read again: publish a version with POST /v1/rules. Role admin.",
    responses(
        (status = 200, description = "The version in force", body = RulesReloaded),
        (status = 422, description = "The active version does not load in this release; the rules in force stay (code invalid_rules)", body = crate::http::schemas::ErrorResponse),
        crate::http::schemas::TokenRouteErrors,
    ),
    security(("bearer" = []))
)]
pub async fn reload(
    State(state): State<AppState>,
    requester: Requester,
) -> Result<Json<RulesReloaded>, ApiError> {
    let current = state.rules.current();
    let before = (current.rules().len(), current.version());
    active_rules::sync(&state.store, &state.rules)
        .await
        .map_err(|e| active_rules_error(e, "rules"))?;
    let current = state.rules.current();
    let after = (current.rules().len(), current.version());
    tracing::info!(rules = after.0, version = %OrNone(after.1), "rules reloaded");
    audit::record(
        &state.store,
        &requester.token_actor(),
        audit::rules_reloaded(before, after),
    )
    .await;
    Ok(Json(RulesReloaded {
        rules: after.0,
        version: after.1,
    }))
}
