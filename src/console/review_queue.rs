//! The review queue: what automation flagged, oldest first, for moderators to work through.
//! A moderator claims an item (so two do not work the same one) and decides it: approve,
//! hide, dismiss or escalate, with a reason. The decision buttons carry access keys (the
//! browser's own shortcut, no script): Alt+A approve, Alt+H hide, Alt+D dismiss, Alt+E
//! escalate, Alt+N the next unclaimed item (Alt+Shift in Firefox, Ctrl+Option on a Mac).

use axum::{
    extract::State,
    response::{IntoResponse, Redirect, Response},
};
use chrono::Utc;
use maud::{Markup, html};
use serde::Deserialize;

use super::{
    ConsoleState, SignedInSession, csrf,
    errors::PageError,
    forms::{Carried, Form, NoFields, PagePath, PageQuery, page_query},
    layout::{self, Section},
};
use crate::{
    domain::ReviewDecision,
    moderation::MAX_TEXT,
    request::{
        fields::{self, Text},
        path::ReviewItemId,
    },
    review::{self, ItemDecision},
    store::{ReviewFilter, ReviewItem},
};

/// Items per page.
const PAGE: i64 = 50;

/// The list's filters as the query string gives them (kept as typed, for the form and links).
#[derive(Debug, Default)]
struct Filters {
    rule: Option<String>,
    older_than: Option<String>,
    /// `me`, `nobody`, or a moderator's name.
    claimed_by: Option<String>,
    escalated: Option<String>,
}

impl Filters {
    fn query(&self, after: Option<i64>) -> String {
        page_query(
            &[
                ("rule", &self.rule),
                ("older_than", &self.older_than),
                ("claimed_by", &self.claimed_by),
                ("escalated", &self.escalated),
            ],
            after.map(|id| ("after", id)),
        )
    }
}

/// The list's query: its filters and where the page starts.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueQuery {
    #[serde(
        default,
        deserialize_with = "fields::filter_text::<_, MAX_RULE_FILTER>"
    )]
    rule: Option<String>,
    #[serde(default, deserialize_with = "fields::age")]
    older_than: Option<chrono::Duration>,
    /// `me`, `nobody`, or a moderator's name.
    #[serde(default, deserialize_with = "fields::filter_text::<_, MAX_TEXT>")]
    claimed_by: Option<String>,
    #[serde(default, deserialize_with = "yes_or_no")]
    escalated: Option<bool>,
    #[serde(default, deserialize_with = "after")]
    after: Option<i64>,
}

/// The longest rule name a listing's filter takes (as the API's).
pub(super) const MAX_RULE_FILTER: usize = 200;

fn yes_or_no<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    fields::param(d, |raw| match raw.as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err("must be yes or no".to_owned()),
    })
}

fn after<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    fields::position(d, "must be an item id (the Next link's)")
}

fn read_filters(
    query: QueueQuery,
    signed_in: &SignedInSession,
) -> Result<(Filters, ReviewFilter), PageError> {
    let mut filter = ReviewFilter {
        limit: PAGE + 1,
        rule: query.rule.clone(),
        escalated: query.escalated,
        after: query.after,
        ..Default::default()
    };
    if let Some(age) = query.older_than {
        filter.flagged_before = Some(Utc::now().checked_sub_signed(age).ok_or_else(|| {
            PageError::bad_query(PageError::bad_field(
                "older_than",
                "must be a duration such as 10m or 2h",
            ))
        })?);
    }
    match query.claimed_by.as_deref() {
        None => {}
        Some("nobody") => filter.claimed = Some(false),
        Some("me") => filter.claimed_by = Some(signed_in.user.name.clone()),
        Some(name) => filter.claimed_by = Some(name.to_owned()),
    }
    let filters = Filters {
        rule: query.rule,
        older_than: query
            .older_than
            .and_then(|age| age.to_std().ok())
            .map(|age| humantime::format_duration(age).to_string()),
        claimed_by: query.claimed_by,
        escalated: query
            .escalated
            .map(|yes| if yes { "yes" } else { "no" }.to_owned()),
    };
    Ok((filters, filter))
}

fn filter_form(filters: &Filters) -> Markup {
    let selected = |field: &Option<String>, value: &str| field.as_deref() == Some(value);
    html! {
        form.filters.card method="get" action="/console/queue" aria-label="Filter the queue" {
            div.field {
                label for="q-rule" { "Rule" }
                input #q-rule name="rule" type="text" value=[filters.rule.as_deref()] placeholder="any rule";
            }
            div.field {
                label for="q-age" { "Waiting at least" }
                input #q-age name="older_than" type="text" value=[filters.older_than.as_deref()] placeholder="e.g. 30m";
            }
            div.field {
                label for="q-claimed" { "Claimed by" }
                input #q-claimed name="claimed_by" type="text" list="q-claimed-choices"
                    value=[filters.claimed_by.as_deref()] placeholder="anyone";
                datalist #q-claimed-choices { option value="me" {} option value="nobody" {} }
            }
            div.field {
                label for="q-escalated" { "Escalated" }
                select #q-escalated name="escalated" {
                    option value="" { "either" }
                    option value="yes" selected[selected(&filters.escalated, "yes")] { "yes" }
                    option value="no" selected[selected(&filters.escalated, "no")] { "no" }
                }
            }
            div.actions-row {
                button type="submit" { "Filter" }
                a.button.secondary href="/console/queue" { "Clear" }
            }
        }
    }
}

fn claim_form(signed_in: &SignedInSession, item: &ReviewItem, label: &str) -> Markup {
    html! {
        form.inline method="post" action={ "/console/queue/" (item.id) "/claim" } {
            (csrf::field(&signed_in.session))
            button type="submit" aria-label={ (label) " item " (item.id) " on " (item.entity) } { (label) }
        }
    }
}

/// Whether this visitor may claim the item: no one holds it, and an escalated one is for
/// admins.
fn claimable(signed_in: &SignedInSession, item: &ReviewItem) -> bool {
    item.claimed_by.is_none() && (item.escalated_at.is_none() || signed_in.user.is_admin())
}

fn items_table(signed_in: &SignedInSession, items: &[ReviewItem]) -> Markup {
    let now = Utc::now();
    html! {
        div.table-wrap {
            table.cards #queue-items {
                caption { "Waiting, oldest first" }
                thead {
                    tr {
                        th scope="col" { "Waiting" }
                        th scope="col" { "Entity" }
                        th scope="col" { "Rule" }
                        th scope="col" { "Reason" }
                        th scope="col" { "Status" }
                        th scope="col" { "Claimed by" }
                        th scope="col" { span.muted { "Work" } }
                    }
                }
                tbody {
                    @for item in items {
                        tr data-item-id=(item.id) {
                            td data-label="Waiting" {
                                (layout::wait(now - item.flagged_at)) " " span.muted { "since " (layout::time(item.flagged_at)) }
                                @if item.escalated_at.is_some() { " " span.badge.escalated { "escalated" } }
                            }
                            td data-label="Entity" { (layout::entity_link(&item.entity)) }
                            td data-label="Rule" { code { (item.rule) } }
                            td data-label="Reason" { (item.reason) }
                            td data-label="Status" { (layout::status(&item.status)) }
                            td data-label="Claimed by" {
                                @match &item.claimed_by {
                                    Some(who) => { (who) }
                                    None => span.muted { "nobody" },
                                }
                            }
                            td data-label="Work" {
                                @if item.claimed_by.as_deref() == Some(signed_in.user.name.as_str()) {
                                    a.open href={ "/console/queue/" (item.id) } { "Open #" (item.id) }
                                } @else if claimable(signed_in, item) {
                                    (claim_form(signed_in, item, "Claim"))
                                } @else {
                                    a.open href={ "/console/queue/" (item.id) } { "View #" (item.id) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `GET /console/queue`: what waits, oldest first.
pub async fn list(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PageQuery(query): PageQuery<QueueQuery>,
) -> Result<Markup, PageError> {
    let (filters, filter) = read_filters(query, &signed_in)?;
    let mut items = state.app.store.review().review_items(&filter).await?;
    let more = items.len() as i64 > PAGE;
    items.truncate(PAGE as usize);
    let next = more.then(|| items.last().map(|i| i.id)).flatten();
    let body = html! {
        h1 { "Queue" }
        p.muted {
            "What automation flagged, oldest first. Claim an item to work it: no one else can while your claim lasts ("
            (humantime::format_duration(state.app.review_claim)) ")."
        }
        form.inline method="post" action="/console/queue/next" {
            (csrf::field(&signed_in.session))
            button #claim-next type="submit" accesskey="n" { "Claim the oldest unclaimed item" }
        }
        (filter_form(&filters))
        @if items.is_empty() {
            p.notice #queue-empty { "Nothing waits that matches these filters." }
        } @else {
            (items_table(&signed_in, &items))
        }
        nav.pager aria-label="Pages" {
            @if filter.after.is_some() {
                a href={ "/console/queue?" (filters.query(None)) } { "← Oldest" }
            } @else { span {} }
            @if let Some(next) = next {
                a #next-page rel="next" href={ "/console/queue?" (filters.query(Some(next))) } { "Newer →" }
            }
        }
    };
    Ok(layout::page(&signed_in, Section::Queue, "Queue", body))
}

/// `GET /console/queue/{id}`: one item and, for the moderator who holds its claim, the
/// decision form.
pub async fn item(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PagePath(ReviewItemId(id)): PagePath<ReviewItemId>,
    carried: Carried,
) -> Result<Markup, PageError> {
    let draft = carried.draft();
    let item = state
        .app
        .store
        .review()
        .review_item(id)
        .await?
        .ok_or_else(|| PageError::not_found(format!("There is no review item {id}.")))?;
    let mine = item.claimed_by.as_deref() == Some(signed_in.user.name.as_str());
    let title = format!("Item #{id}");
    let body = html! {
        h1 { "Item #" (id) " · " (item.entity) }
        dl.facts.card {
            dt { "Entity" } dd { (layout::entity_link(&item.entity)) }
            dt { "Flagged by" } dd { code { (item.rule) } ", " (layout::time(item.flagged_at)) }
            dt { "Reason" } dd { (item.reason) }
            dt { "Status now" } dd { (layout::status(&item.status)) " (version " (item.moderation_version) ")" }
            dt { "Claimed by" } dd #claimed-by {
                @match (&item.claimed_by, item.claim_until) {
                    (Some(who), Some(until)) => { (who) " until " (layout::time(until)) }
                    _ => span.muted { "nobody" },
                }
            }
            @if let Some(at) = item.escalated_at { dt { "Escalated" } dd { (layout::time(at)) } }
        }
        @if mine {
            section.card #decide aria-labelledby="decide-title" {
                h2 #decide-title { "Decide" }
                p.muted {
                    "Approve: visible, and automation does not flag it again for "
                    (humantime::format_duration(state.app.override_after_reversal))
                    ". Hide: hidden, held as long. Dismiss: visible, automation free to act again. Escalate: an admin decides."
                }
                form.stack method="post" action={ "/console/queue/" (id) "/decide" } {
                    (csrf::field(&signed_in.session))
                    input type="hidden" name="version" value=(item.moderation_version);
                    div.field {
                        label for="reason" { "Reason" }
                        textarea #reason name="reason" required maxlength="1000" { (draft) }
                    }
                    div.actions-row {
                        button #approve type="submit" name="decision" value="approve" accesskey="a" { "Approve " kbd { "A" } }
                        button.danger #hide type="submit" name="decision" value="hide" accesskey="h" { "Hide " kbd { "H" } }
                        button.secondary #dismiss type="submit" name="decision" value="dismiss" accesskey="d" { "Dismiss flags " kbd { "D" } }
                        button.secondary #escalate type="submit" name="decision" value="escalate" accesskey="e" { "Escalate " kbd { "E" } }
                    }
                }
            }
        } @else if claimable(&signed_in, &item) {
            (claim_form(&signed_in, &item, "Claim"))
        }
        p { a href="/console/queue" { "Back to the queue" } }
    };
    Ok(layout::page(&signed_in, Section::Queue, &title, body))
}

/// `POST /console/queue/{id}/claim`.
pub async fn claim(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PagePath(ReviewItemId(id)): PagePath<ReviewItemId>,
    Form(NoFields {}): Form<NoFields>,
) -> Result<Response, PageError> {
    review::claim(
        &state.app.store,
        id,
        &signed_in.actor(),
        state.app.review_claim,
    )
    .await?;
    Ok(Redirect::to(&format!("/console/queue/{id}")).into_response())
}

/// `POST /console/queue/next`: claims the oldest item no one holds (escalated ones for
/// admins only).
pub async fn claim_next(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    Form(NoFields {}): Form<NoFields>,
) -> Result<Response, PageError> {
    let actor = signed_in.actor();
    let filter = ReviewFilter {
        claimed: Some(false),
        escalated: (!signed_in.user.is_admin()).then_some(false),
        limit: 20,
        ..Default::default()
    };
    // Another moderator may take one between the read and the claim: try the next.
    for item in state.app.store.review().review_items(&filter).await? {
        match review::claim(&state.app.store, item.id, &actor, state.app.review_claim).await {
            Ok(_) => {
                return Ok(Redirect::to(&format!("/console/queue/{}", item.id)).into_response());
            }
            Err(review::ReviewError::Refused(_)) => continue,
            Err(error) => return Err(error.into()),
        }
    }
    Ok(Redirect::to("/console/queue?claimed_by=nobody").into_response())
}

/// The decision form of an item.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideForm {
    #[serde(deserialize_with = "fields::review_decision")]
    decision: ReviewDecision,
    reason: Text,
    /// The entity's moderation version the page showed.
    #[serde(deserialize_with = "page_version")]
    version: i64,
}

fn page_version<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    fields::parsed(d, |raw| {
        raw.parse::<i64>()
            .map_err(|_| "must be the version the page showed".to_owned())
    })
}

/// `POST /console/queue/{id}/decide` with `csrf`, `decision`, `reason` and `version`.
pub async fn decide(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PagePath(ReviewItemId(id)): PagePath<ReviewItemId>,
    Form(DecideForm {
        decision,
        reason,
        version,
    }): Form<DecideForm>,
) -> Result<Response, PageError> {
    let by = signed_in.actor();
    let request = ItemDecision {
        id,
        by: &by,
        decision,
        reason: &reason,
        seen_version: version,
        override_for: state.app.override_after_reversal,
    };
    review::decide(&state.app.store, &state.app.rules.current(), request).await?;
    tracing::info!(item = id, decision = decision.as_str(), token = %signed_in.user.token, "console review decision");
    Ok(Redirect::to("/console/queue").into_response())
}
