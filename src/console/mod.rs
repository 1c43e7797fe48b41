//! The moderator console: server-rendered pages under `/console`, on the API's listener, for the
//! people who review what automation did. It adds no logic of its own to moderation: it calls
//! the same use cases and store reads as the JSON API (`moderation`, `dead_letters`,
//! `store::read`) and the same tokens (`credentials::Auth`), and shows their results. It does
//! not import the HTTP layer: the API's state lends it what it uses ([`ConsoleApp`]).
//!
//! - [`signin`]: sign in with a moderator or admin token (an ingest token is refused), sign out;
//! - [`review_queue`]: the review queue, what automation flagged, oldest first: claim an item, then
//!   approve, hide, dismiss or escalate it;
//! - [`appeals`]: the appeals of restricting decisions, oldest first: claim one, read it beside
//!   the statement of reasons it contests ([`statements`]), uphold or reject it;
//! - [`review`]: automated actions newest first, filtered and keyset-paged; one action with the
//!   snapshot the rules saw beside the entity now; reversing it;
//! - [`entity`]: one entity's status, events per minute, evaluations (with what matched, was
//!   exempted or matched in shadow: [`evaluations`]), actions and decisions, statements of
//!   reasons with their appeals; setting an override;
//! - [`quality`]: the reversal rate per day and rule, live, shadow and exempted matches, the
//!   rules;
//! - [`backtest`]: a candidate rule set replayed over a window's evaluations (a shadow rule's
//!   backtest is linked from Quality), which an admin can publish as the next rules version;
//! - [`rules`]: the rules versions, each with the backtest figures it was published with;
//! - [`operations`] (admin): queue depths, fire delay, evaluation rate, dead letters, redrive.
//!
//! Around them: the signed session cookie ([`session`]), sign-in attempts per address
//! ([`throttle`]), the CSRF token of every form ([`csrf`]), a form, a query or a path read into its page's own type, the scope asked ([`forms`]), the page frame ([`layout`]), error pages
//! ([`errors`]), SVG charts ([`charts`]) and the embedded stylesheet ([`assets`]). Every
//! response carries a Content-Security-Policy that allows only the console's own stylesheet and
//! images, and no script at all (the console has none).

mod appeals;
mod assets;
mod audit;
mod backtest;
mod canaries;
mod charts;
mod csrf;
mod entity;
mod errors;
mod evaluations;
mod forms;
mod layout;
mod operations;
mod quality;
mod review;
mod review_queue;
mod rules;
mod saw;
mod session;
mod signin;
mod statements;
mod sweep;
mod throttle;
mod timer;

use std::sync::Arc;

use axum::{
    Router,
    extract::{DefaultBodyLimit, FromRequestParts, OriginalUri, Request},
    http::{HeaderValue, Method, header, request::Parts},
    middleware::{self, Next},
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};

pub use self::session::Sessions;
use self::{
    errors::PageError,
    forms::PagePath,
    session::{Session, SignedIn},
};
use crate::{
    audit::Origin, backtest::BacktestSemaphore, credentials::Auth, domain::Actor, queue::Queue,
    request::path::AssetName, rules::Rules, store::Store,
};

/// The console's Content-Security-Policy: its own stylesheet and images, no script, no
/// framing, forms only to itself.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'none'; \
     style-src 'self'; img-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// What the console's pages use of the process: the same stores, rules, tokens and backtest
/// semaphore as the API.
#[derive(Clone)]
pub struct App {
    pub store: Store,
    pub queue: Queue,
    pub rules: Arc<Rules>,
    /// The API's tokens, which moderators sign in with.
    pub auth: Arc<Auth>,
    /// One backtest at a time in this process (the API's and the console's).
    pub backtests: Arc<BacktestSemaphore>,
    /// How long the override implied by a reversal lasts.
    pub override_after_reversal: std::time::Duration,
    /// How long a claim on a review queue item lasts.
    pub review_claim: std::time::Duration,
    /// The guard, which weighs a reversal's rule and turns it to shadow if reversed too often.
    pub demoter: crate::active_rules::RuleDemoter,
}

/// The state of the process the console is mounted in (the API's): what it lends the console.
pub trait ConsoleApp: Clone + Send + Sync + 'static {
    fn console_app(&self) -> App;
}

/// What the console's handlers share: what the pages use and the session signer.
#[derive(Clone)]
pub struct ConsoleState {
    app: App,
    sessions: Arc<Sessions>,
    /// Sign-in attempts per client address.
    signins: Arc<throttle::SignInLimit>,
}

/// The console's routes, to mount beside the API (`http::router_with`, which also bounds
/// their time as it does the API's).
pub fn router<S: ConsoleApp>(app: S, sessions: Sessions) -> Router<S> {
    let state = ConsoleState {
        app: app.console_app(),
        signins: Arc::new(throttle::SignInLimit::new(
            sessions.signin_limit,
            sessions.trusted_proxies.clone(),
        )),
        sessions: Arc::new(sessions),
    };
    let pages = Router::new()
        .route("/", get(|| async { Redirect::to("/console/review") }))
        .route("/login", get(signin::form).post(signin::sign_in))
        .route("/logout", post(signin::sign_out))
        .route("/queue", get(review_queue::list))
        .route("/queue/next", post(review_queue::claim_next))
        .route("/queue/{id}", get(review_queue::item))
        .route("/queue/{id}/claim", post(review_queue::claim))
        .route("/queue/{id}/decide", post(review_queue::decide))
        .route("/appeals", get(appeals::list))
        .route("/appeals/{id}", get(appeals::appeal))
        .route("/appeals/{id}/claim", post(appeals::claim))
        .route("/appeals/{id}/decide", post(appeals::decide))
        .route("/review", get(review::list))
        .route("/actions/{id}", get(review::action))
        .route("/actions/{id}/reverse", post(review::reverse))
        .route("/entities/{entity}", get(entity::page))
        .route("/entities/{entity}/override", post(entity::override_status))
        .route("/entities/{entity}/timer/end", post(timer::end))
        .route("/quality", get(quality::page))
        .route("/backtest", get(backtest::page).post(backtest::run))
        .route("/backtest/sweep", post(sweep::run))
        .route("/backtest/publish", post(rules::publish))
        .route("/rules", get(rules::versions))
        .route("/operations", get(operations::page))
        .route("/audit", get(audit::page))
        .route("/dead-letters/redrive", post(operations::redrive_many))
        .route(
            "/dead-letters/{entity}/redrive",
            post(operations::redrive_one),
        )
        .route(
            "/assets/{file}",
            get(
                |PagePath(AssetName(file)): PagePath<AssetName>| async move {
                    assets::serve(&file).unwrap_or_else(|| {
                        PageError::not_found("There is no such console asset.").into_response()
                    })
                },
            ),
        )
        .fallback(|| async { PageError::not_found("There is no such console page.") })
        .method_not_allowed_fallback(|| async {
            PageError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                "Not here",
                "This console page does not take that method.",
            )
        })
        .layer(middleware::from_fn_with_state(
            state.clone(),
            forms_need_a_session,
        ))
        .layer(DefaultBodyLimit::max(forms::MAX_FORM_BYTES))
        .layer(middleware::from_fn(refusals_as_pages))
        .layer(middleware::from_fn(security_headers))
        .with_state(state);
    // The nested `/` answers `/console` itself; `/console/` is outside the nest, so it takes
    // the same headers on its own.
    Router::new()
        .route(
            "/console/",
            get(|| async { Redirect::to("/console/review") })
                .layer(middleware::from_fn(security_headers)),
        )
        .nest("/console", pages)
}

/// Every console response: the CSP and its companions; pages are never cached (they show a
/// signed-in moderator's view), assets set their own caching.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let set = |headers: &mut axum::http::HeaderMap, name: &'static str, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(headers, "content-security-policy", CONTENT_SECURITY_POLICY);
    set(headers, "x-frame-options", "DENY");
    set(headers, "x-content-type-options", "nosniff");
    set(headers, "referrer-policy", "same-origin");
    set(headers, "cross-origin-opener-policy", "same-origin");
    set(headers, "cross-origin-resource-policy", "same-origin");
    if !headers.contains_key(header::CACHE_CONTROL) {
        set(headers, "cache-control", "no-store");
    }
    response
}

/// A form posted without a live session (it expired, its key or token changed) is not handed
/// to its page: [`signin::resume`] answers it, with the sign-in form that leads back to the
/// form's page (from the console's own pages) or the bare refusal (from anywhere else).
async fn forms_need_a_session(
    axum::extract::State(state): axum::extract::State<ConsoleState>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    if request.method() != Method::POST
        || path == "/login"
        || path == "/logout"
        || live_session(&state, request.headers()).is_some()
    {
        return next.run(request).await;
    }
    let path = path.to_owned();
    let (parts, body) = request.into_parts();
    signin::resume(&state, &path, &parts.headers, body).await
}

/// What axum's extractors refuse in plain text, as console pages: a body over the console's
/// limit (413) gets the page that names the limit.
async fn refusals_as_pages(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let plain = !response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if response.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE && plain {
        return PageError::too_large(forms::MAX_FORM_BYTES).into_response();
    }
    response
}

/// The request's session and who signed in, if it verifies, has not expired, and its token
/// is still configured.
fn live_session(
    state: &ConsoleState,
    headers: &axum::http::HeaderMap,
) -> Option<(Session, SignedIn)> {
    let session = state.sessions.read(headers)?;
    let user = session.user.clone()?;
    // A session of a token that is no longer configured has ended.
    state
        .app
        .auth
        .still_configured(user.role, &user.token)
        .then_some((session, user))
}

/// A signed-in moderator or admin, with their session; what every page but sign-in needs. A
/// visitor without one is sent to sign in (a GET) or refused (anything else).
pub struct SignedInSession {
    pub session: Session,
    pub user: SignedIn,
    /// Where the request came from, for the audit trail.
    pub origin: Origin,
    /// Where this page's lists and figures are read, when a read replica is set: the page
    /// says so, since a change made a moment ago may not show there yet.
    pub reads: Option<ReadSource>,
}

/// Where a page's reads go when a read replica is set (`database_read_url`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReadSource {
    /// The replica, with the replay lag of its last check.
    Replica { lag: std::time::Duration },
    /// The primary: the replica lags past `read_max_lag` or does not answer.
    PrimaryForReplica,
}

impl ReadSource {
    fn of(store: &Store) -> Option<Self> {
        let replica = store.replica()?;
        Some(match (replica.in_use(), replica.lag()) {
            (true, Some(lag)) => ReadSource::Replica { lag },
            _ => ReadSource::PrimaryForReplica,
        })
    }
}

impl SignedInSession {
    /// The signed-in moderator as the audit trail records them.
    pub fn actor(&self) -> Actor {
        self.origin.actor(
            &self.user.name,
            Some(&self.user.token),
            Some(self.user.role.as_str()),
        )
    }
}

impl FromRequestParts<ConsoleState> for SignedInSession {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ConsoleState,
    ) -> Result<Self, Self::Rejection> {
        if let Some((session, user)) = live_session(state, &parts.headers) {
            return Ok(SignedInSession {
                session,
                user,
                origin: Origin::of(&parts.headers, &parts.extensions),
                reads: ReadSource::of(&state.app.store),
            });
        }
        if parts.method == Method::GET {
            // The path as the browser asked for it (inside the nest, `uri` lost `/console`).
            let original = parts
                .extensions
                .get::<OriginalUri>()
                .map_or(&parts.uri, |OriginalUri(uri)| uri);
            let next = original
                .path_and_query()
                .map_or("/console/review", |p| p.as_str());
            let query: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("next", next)
                .finish();
            return Err(Redirect::to(&format!("/console/login?{query}")).into_response());
        }
        Err(PageError::signed_out().into_response())
    }
}

/// A signed-in admin: the operations pages. A moderator is refused with 403.
pub struct AdminSession(pub SignedInSession);

impl FromRequestParts<ConsoleState> for AdminSession {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &ConsoleState,
    ) -> Result<Self, Self::Rejection> {
        let signed_in = SignedInSession::from_request_parts(parts, state).await?;
        if !signed_in.user.is_admin() {
            return Err(PageError::forbidden(&format!(
                "Operations and dead letters need an admin token; you signed in with a {} token. Nothing was changed.",
                signed_in.user.role.as_str()
            ))
            .into_response());
        }
        Ok(AdminSession(signed_in))
    }
}
