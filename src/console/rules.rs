//! Rules versions in the console: the versions list (each with the backtest figures it was
//! published with) and, for admins, publishing the candidate the Backtest page just ran, with
//! its report attached. Publishing calls what `POST /v1/rules` calls (`crate::active_rules`).

use axum::{
    extract::State,
    response::{IntoResponse, Redirect, Response},
};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::{
    AdminSession, ConsoleState, SignedInSession,
    backtest::backtest_candidate,
    errors::PageError,
    forms::{Form, PageQuery, Window, window},
    layout::{self, Section},
};
use crate::{
    active_rules::{self, ActiveRulesError},
    backtest::Estimate,
    request::fields,
    store::RulesVersionSummary,
};

const PAGE: i64 = 50;

/// The publish form: the candidate, the window it is backtested over again, the message.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishForm {
    #[serde(deserialize_with = "fields::parsed_string")]
    rules: String,
    #[serde(default, deserialize_with = "window")]
    window: Window,
    #[serde(default, deserialize_with = "fields::optional_string")]
    message: Option<String>,
}

/// `POST /console/backtest/publish` with `csrf`, `rules`, `window`, `message` (admins): the
/// candidate backtested again over the window and published with the report; then the
/// versions list.
pub async fn publish(
    State(state): State<ConsoleState>,
    AdminSession(signed_in): AdminSession,
    Form(form): Form<PublishForm>,
) -> Result<Response, PageError> {
    let text = form.rules.as_str();
    let message = form.message.as_deref().unwrap_or("");
    active_rules::check_message(message).map_err(published_error)?;
    let report = backtest_candidate(&state, text, form.window.span, 0).await?;
    let report = serde_json::to_value(&report).map_err(PageError::internal)?;
    let version = active_rules::publish(
        &state.app.store,
        Some(&state.app.rules),
        &signed_in.actor(),
        text,
        message,
        Some(&report),
    )
    .await
    .map_err(published_error)?;
    Ok(Redirect::to(&format!("/console/rules?published={version}")).into_response())
}

fn published_error(error: ActiveRulesError) -> PageError {
    match error {
        ActiveRulesError::Invalid(error) => {
            PageError::bad_field("rules", &format!("do not load: {error}"))
        }
        ActiveRulesError::Message(problem) => PageError::bad_field("message", &problem),
        ActiveRulesError::Store(error) => PageError::from(error),
        ActiveRulesError::Stored { .. } => PageError::internal(error),
    }
}

/// The figures of a version's backtest: expected reversal rate, actions added and removed.
fn figures(backtest: Option<&Value>) -> Markup {
    let Some(report) = backtest else {
        return html! { span.muted { "no backtest" } };
    };
    let overall = &report["overall"];
    let rate: Option<Estimate> =
        serde_json::from_value(overall["expected_reversal_rate"].clone()).unwrap_or(None);
    html! {
        div.backtest-figures {
            "expected reversal rate " (layout::estimate(rate)) br;
            span.added { "+" (overall["added"].as_i64().unwrap_or(0)) " added" } ", "
            span.removed { "−" (overall["removed"].as_i64().unwrap_or(0)) " removed" }
            br; span.muted { "over " (report["since"].as_str().unwrap_or("?")) " to " (report["until"].as_str().unwrap_or("?")) }
        }
    }
}

fn versions_table(versions: &[RulesVersionSummary]) -> Markup {
    html! {
        div.table-wrap {
            table.cards #rules-versions {
                thead {
                    tr {
                        th scope="col" { "Version" } th scope="col" { "Published" } th scope="col" { "By" }
                        th scope="col" { "Message" } th scope="col" { "Backtest" }
                    }
                }
                tbody {
                    @for v in versions {
                        tr data-version=(v.version) {
                            th scope="row" data-label="Version" {
                                (v.version)
                                @if v.active { " " span.tag.active { "active" } }
                                br; code.muted title=(v.hash) { (v.hash[..12.min(v.hash.len())]) }
                            }
                            td data-label="Published" { (layout::time(v.created_at)) }
                            td.wrap data-label="By" { (v.author) }
                            td.wrap data-label="Message" { (v.message) }
                            td data-label="Backtest" { (figures(v.backtest.as_ref())) }
                        }
                    }
                }
            }
        }
    }
}

/// The versions list's query: where the page starts, and the version just published.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionsQuery {
    #[serde(default, deserialize_with = "version_number")]
    before: Option<i64>,
    #[serde(default, deserialize_with = "version_number")]
    published: Option<i64>,
}

fn version_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    fields::whole(d, "must be a version number")
}

/// `GET /console/rules?before=&published=`: the rules versions, newest first.
pub async fn versions(
    State(state): State<ConsoleState>,
    signed_in: SignedInSession,
    PageQuery(VersionsQuery { before, published }): PageQuery<VersionsQuery>,
) -> Result<Markup, PageError> {
    let versions = state
        .app
        .store
        .rules_versions()
        .rules_versions_page(before, PAGE)
        .await?;
    let next = (versions.len() as i64 == PAGE)
        .then(|| versions.last().map(|v| v.version))
        .flatten();
    let in_force = state.app.rules.current().version();
    let body = html! {
        h1 { "Rules versions" }
        @if let Some(version) = published {
            p.notice role="status" #published { "Published as version " (version) "; every process puts it in force within moments." }
        }
        p.muted {
            "Every published rule set, newest first. One is active: every serve and worker process evaluates with it"
            @if let Some(version) = in_force { " (this process: version " (version) ")" }
            ". A version published from the Backtest page keeps that backtest's figures."
        }
        @if versions.is_empty() {
            p.muted #no-versions { "No rules version stored yet." }
        } @else {
            (versions_table(&versions))
            nav.pager aria-label="Pages" {
                @if before.is_some() { a href="/console/rules" { "← Newest" } } @else { span {} }
                @if let Some(next) = next { a rel="next" href=(format!("/console/rules?before={next}")) { "Next →" } }
            }
        }
    };
    Ok(layout::page(
        &signed_in,
        Section::Quality,
        "Rules versions",
        body,
    ))
}
