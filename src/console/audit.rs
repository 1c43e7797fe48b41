//! The audit trail page (admins): the latest decisions, newest first, filtered by kind and
//! actor, paged by id. It reads what `GET /v1/audit` reads.

use axum::extract::State;
use maud::{Markup, html};
use serde::Deserialize;

use super::{
    AdminSession, ConsoleState,
    errors::PageError,
    forms::PageQuery,
    layout::{self, Section},
};
use crate::{domain::AuditAction, request::fields, store::AuditFilter};

const PAGE: i64 = 100;

/// The page's query: its filters and where the page starts.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    #[serde(default, deserialize_with = "action")]
    action: Option<AuditAction>,
    #[serde(default, deserialize_with = "fields::optional_string")]
    actor: Option<String>,
    #[serde(default, deserialize_with = "before")]
    before: Option<i64>,
}

fn action<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<AuditAction>, D::Error> {
    fields::param(d, |raw| {
        AuditAction::parse(&raw).ok_or_else(|| "must be one of the kinds listed".to_owned())
    })
}

fn before<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    fields::whole(d, "must be the Next link's position")
}

/// `GET /console/audit?action=&actor=&before=`.
pub async fn page(
    State(state): State<ConsoleState>,
    AdminSession(signed_in): AdminSession,
    PageQuery(AuditQuery {
        action,
        actor,
        before,
    }): PageQuery<AuditQuery>,
) -> Result<Markup, PageError> {
    let filter = AuditFilter {
        actor: actor.clone(),
        action: action.map(|a| a.as_str().to_owned()),
        before,
        limit: PAGE,
        ..Default::default()
    };
    let entries = state.app.store.audit().audit_page(&filter).await?;
    let next = (entries.len() as i64 == PAGE)
        .then(|| entries.last().map(|e| e.id))
        .flatten()
        .map(|id| {
            let mut query = form_urlencoded::Serializer::new(String::new());
            query.append_pair("before", &id.to_string());
            if let Some(kind) = action {
                query.append_pair("action", kind.as_str());
            }
            if let Some(actor) = &actor {
                query.append_pair("actor", actor);
            }
            format!("/console/audit?{}", query.finish())
        });
    let json =
        |value: &Option<serde_json::Value>| value.as_ref().map_or(String::new(), |v| v.to_string());
    let body = html! {
        h1 { "Audit trail" }
        p.muted {
            "Every reversal, override, redrive, rules reload, shard move, sign-in and sign-out: who made it (the name they "
            "gave, the token's label and role), from which address, and the state before and after. Append-only."
        }
        form.filters method="get" action="/console/audit" {
            div.field {
                label for="audit-action" { "Kind" }
                select #audit-action name="action" {
                    option value="" { "all" }
                    @for kind in AuditAction::ALL {
                        option value=(kind.as_str()) selected[action == Some(kind)] { (kind.as_str()) }
                    }
                }
            }
            div.field {
                label for="audit-actor" { "Actor" }
                input #audit-actor type="text" name="actor" value=(actor.as_deref().unwrap_or(""));
            }
            div { button type="submit" { "Filter" } }
        }
        @if entries.is_empty() {
            p.muted #no-audit { "No decision recorded." }
        } @else {
            div.table-wrap {
                table.cards #audit {
                    thead {
                        tr {
                            th scope="col" { "When" } th scope="col" { "Kind" } th scope="col" { "Subject" }
                            th scope="col" { "Actor" } th scope="col" { "From" } th scope="col" { "Before" } th scope="col" { "After" }
                        }
                    }
                    tbody {
                        @for entry in &entries {
                            tr data-id=(entry.id) {
                                td data-label="When" { (layout::time(entry.at)) }
                                td data-label="Kind" { code { (entry.action) } }
                                td.wrap data-label="Subject" { (entry.subject) }
                                td.wrap data-label="Actor" {
                                    (entry.actor)
                                    @if let Some(credential) = &entry.credential { br; span.muted { (credential) } }
                                    @if let Some(role) = &entry.role { " " span.tag { (role) } }
                                }
                                td.wrap data-label="From" {
                                    (entry.address.as_deref().unwrap_or("-"))
                                    @if let Some(forwarded) = &entry.forwarded_for { br; span.muted { "forwarded for " (forwarded) } }
                                }
                                td.wrap data-label="Before" { code { (json(&entry.before)) } }
                                td.wrap data-label="After" { code { (json(&entry.after)) } }
                            }
                        }
                    }
                }
            }
            nav.pager aria-label="Pages" {
                @if before.is_some() { a href="/console/audit" { "← Newest" } } @else { span {} }
                @if let Some(next) = next {
                    a rel="next" href=(next) { "Next →" }
                }
            }
        }
    };
    Ok(layout::page(
        &signed_in,
        Section::Operations,
        "Audit trail",
        body,
    ))
}
