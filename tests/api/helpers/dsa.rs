//! A stand-in of the EU DSA Transparency Database's batch endpoint, `POST /api/v1/statements`,
//! answering as the Commission's code does (digital-services-act/transparency-database, main at
//! 69e80a0b of 2026-06-24; the schema in force since 2025-07-01): each statement is checked by
//! [`rules`] (`GroupedSubmissionsService::multi_rules`) and the batch is handled as
//! `StatementMultipleAPIController::store` does:
//!
//! - over the token's rate limit (`RouteServiceProvider`: 200 a second and 12,000 a minute per
//!   token, 100 a minute per address without one; settable with [`DsaStandIn::limit`]): 429
//!   `Limit Reached. Please do not overload the API` with `Retry-After`, before anything else;
//! - no or a wrong bearer token: 401 `{"message": "Unauthenticated."}` (Sanctum);
//! - `statements` missing, empty, not a list or over 100 long: 422 with Laravel's
//!   `{"message", "errors": {"statements": [..]}}`;
//! - any invalid statement: 422 `{"errors": {"statement_<index>": {field: [messages]}}}`, and
//!   nothing of the batch is stored;
//! - a puid twice in the batch, or already stored: 422 `{"message", "errors": {"puid": [..],
//!   "existing_puids": [..]}}` (`PuidNotUniqueMultipleException`), nothing stored;
//! - otherwise all are stored: 201 `{"statements": [..]}`, each as `buildOutputJsonResponse`
//!   gives it back (with its `uuid`, `created_at`, `platform_name`, `self`, `permalink`).
//!
//! Without `Accept: application/json` Laravel redirects (302) where it would answer 401 or
//! the `statements` error; the stand-in does too.

mod dates;
mod enums;
mod rules;

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    Router,
    body::Bytes,
    extract::{DefaultBodyLimit, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// Whether the Transparency Database would take this statement: its field errors, if any.
pub fn dsa_errors(statement: &Value) -> Option<Value> {
    let fields = statement.as_object()?;
    rules::validate(fields).err().map(Value::Object)
}

/// The keys of `statement` the database has no field for (it drops them unread).
pub fn dsa_unknown_fields(statement: &Value) -> Vec<String> {
    let known: HashSet<&str> = rules::fields().collect();
    statement
        .as_object()
        .map(|fields| {
            fields
                .keys()
                .filter(|key| !known.contains(key.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[allow(unused_imports)]
pub use enums::{
    ACCOUNT_TYPES, AUTOMATED_DECISIONS, AUTOMATED_DETECTIONS, CATEGORIES, CONTENT_TYPES,
    COUNTRY_CODES, DECISION_ACCOUNTS, DECISION_GROUNDS, DECISION_MONETARIES, DECISION_PROVISIONS,
    DECISION_VISIBILITIES, KEYWORDS, LANGUAGES, SOURCE_TYPES,
};

/// The controller's `between:1,100`.
pub const DSA_MAX_BATCH: usize = 100;
const PLATFORM_NAME: &str = "Stand-in platform";
const DUPLICATE: &str = "The platform identifier(s) are not all unique within this call.";
const LIMIT_REACHED: &str = "Limit Reached. Please do not overload the API";
/// `RouteServiceProvider`'s limits of an authenticated token, and of an address without one.
const TOKEN_LIMITS: [(u32, Duration); 2] = [
    (200, Duration::from_secs(1)),
    (12_000, Duration::from_secs(60)),
];
const ANONYMOUS_LIMIT: (u32, Duration) = (100, Duration::from_secs(60));

/// One of a key's limits (Laravel's `RateLimiter`): hits counted in a window that starts at the
/// first one.
struct Window {
    max: u32,
    decay: Duration,
    started: Instant,
    hits: u32,
}

#[derive(Default)]
struct Database {
    /// The statements stored, as the model reads them back.
    statements: Vec<Value>,
    /// The stored puids as PHP compares them (as strings).
    puids: HashSet<String>,
    rejections: Vec<(u16, Value)>,
    /// Every request to the batch endpoint, in arrival order.
    log: Vec<Request>,
    answers_to_lose: usize,
    /// The token's limits (`None`: the application's).
    limits: Option<Vec<(u32, Duration)>>,
    windows: HashMap<String, Vec<Window>>,
}

/// A request to the batch endpoint as the stand-in answered it.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub arrived: Instant,
    pub status: u16,
    /// A 429's `Retry-After`, in seconds.
    pub retry_after: Option<u64>,
}

struct Shared {
    token: String,
    address: SocketAddr,
    database: Mutex<Database>,
}

pub struct DsaStandIn {
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl DsaStandIn {
    /// Serves on 127.0.0.1 at a free port, with a token of its own (Sanctum's `id|secret`
    /// form).
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let shared = Arc::new(Shared {
            token: format!("1|{}", uuid::Uuid::new_v4().simple()),
            address: listener.local_addr().unwrap(),
            database: Mutex::default(),
        });
        let app = Router::new()
            .route("/api/v1/statements", post(store))
            // 100 statements at their longest are well over axum's default 2 MB.
            .layer(DefaultBodyLimit::max(64 * 1024 * 1024))
            .with_state(Arc::clone(&shared));
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await
                .unwrap();
        });
        Self { shared, stop }
    }

    /// The API's base URL; the batch endpoint is `{endpoint}/statements`.
    pub fn endpoint(&self) -> String {
        format!("http://{}/api/v1", self.shared.address)
    }

    /// The bearer token it requires.
    pub fn token(&self) -> String {
        self.shared.token.clone()
    }

    /// Every statement stored, in arrival order, as the database keeps it.
    pub fn accepted(&self) -> Vec<Value> {
        self.database().statements.clone()
    }

    pub fn accepted_puids(&self) -> Vec<String> {
        self.accepted()
            .iter()
            .map(|statement| rules::php_string(&statement["puid"]))
            .collect()
    }

    /// Every non-2xx answer with its body (null for a redirect, the text of a 429 as a
    /// string), lost answers included.
    pub fn rejections(&self) -> Vec<(u16, Value)> {
        self.database().rejections.clone()
    }

    /// Requests to the batch endpoint, whatever their answer.
    pub fn requests(&self) -> usize {
        self.database().log.len()
    }

    /// Each request to the batch endpoint: when it arrived, and how it was answered.
    pub fn request_log(&self) -> Vec<Request> {
        self.database().log.clone()
    }

    /// The next `n` requests are handled as usual (a valid batch is stored) but answered
    /// 500 `{"message": "Server Error"}`, as if the answer had been lost.
    pub fn lose_next_answers(&self, n: usize) {
        self.database().answers_to_lose += n;
    }

    /// The token's rate limits from now on: at most `max` requests in each `window` (which
    /// starts at its first request), as `RouteServiceProvider` sets 200 a second and 12,000 a
    /// minute.
    pub fn limit(&self, limits: &[(u32, Duration)]) {
        let mut database = self.database();
        database.limits = Some(limits.to_vec());
        database.windows.clear();
    }

    fn database(&self) -> std::sync::MutexGuard<'_, Database> {
        self.shared.database.lock().unwrap()
    }
}

impl Drop for DsaStandIn {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn store(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let arrived = Instant::now();
    let mut database = shared.database.lock().unwrap();
    let (status, answer) = match throttle(&shared, &mut database, &headers, arrived) {
        Some(limited) => limited,
        None => answer(&shared, &mut database, &headers, &body),
    };
    let (status, answer) = if database.answers_to_lose > 0 && status != 429 {
        database.answers_to_lose -= 1;
        (500, Answer::Json(json!({"message": "Server Error"})))
    } else {
        (status, answer)
    };
    let retry_after = match &answer {
        Answer::Text(_, headers) => headers
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.parse().ok()),
        _ => None,
    };
    database.log.push(Request {
        arrived,
        status,
        retry_after,
    });
    if !(200..300).contains(&status) {
        let body = match &answer {
            Answer::Json(body) => body.clone(),
            Answer::Text(text, _) => Value::String(text.clone()),
            Answer::Redirect(_) => Value::Null,
        };
        database.rejections.push((status, body));
    }
    let status = StatusCode::from_u16(status).unwrap();
    match answer {
        Answer::Json(body) => (status, axum::Json(body)).into_response(),
        Answer::Text(text, headers) => (status, headers, text).into_response(),
        Answer::Redirect(location) => (status, [(header::LOCATION, location)]).into_response(),
    }
}

enum Answer {
    Json(Value),
    Text(String, HeaderMap),
    Redirect(String),
}

/// The `throttle:api` middleware, before authentication: the token's limits (or the
/// address's, without a known token), each hit in turn; the first one spent answers 429 with
/// `Retry-After` (seconds until its window ends) and Laravel's `X-RateLimit-*` headers.
fn throttle(
    shared: &Shared,
    database: &mut Database,
    headers: &HeaderMap,
    now: Instant,
) -> Option<(u16, Answer)> {
    let (key, limits) = if bearer(headers) == Some(shared.token.as_str()) {
        let limits = database.limits.clone().unwrap_or(TOKEN_LIMITS.to_vec());
        ("token".to_owned(), limits)
    } else {
        ("address".to_owned(), vec![ANONYMOUS_LIMIT])
    };
    let windows = database.windows.entry(key).or_default();
    if windows.len() != limits.len() {
        *windows = limits
            .iter()
            .map(|&(max, decay)| Window {
                max,
                decay,
                started: now,
                hits: 0,
            })
            .collect();
    }
    for window in windows.iter_mut() {
        if now.duration_since(window.started) >= window.decay {
            window.started = now;
            window.hits = 0;
        }
        if window.hits >= window.max {
            let left = window.decay - now.duration_since(window.started);
            let retry_after = left.as_secs() + u64::from(left.subsec_nanos() > 0);
            let mut headers = HeaderMap::new();
            headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
            headers.insert("x-ratelimit-limit", HeaderValue::from(window.max));
            headers.insert("x-ratelimit-remaining", HeaderValue::from(0));
            return Some((429, Answer::Text(LIMIT_REACHED.to_owned(), headers)));
        }
        window.hits += 1;
    }
    None
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// The controller, from the authentication on.
fn answer(
    shared: &Shared,
    database: &mut Database,
    headers: &HeaderMap,
    body: &[u8],
) -> (u16, Answer) {
    let origin = format!("http://{}", shared.address);
    let wants_json = expects_json(headers);
    if bearer(headers) != Some(shared.token.as_str()) {
        return if wants_json {
            (401, Answer::Json(json!({"message": "Unauthenticated."})))
        } else {
            // To the login page (the Commission's CAS login).
            (302, Answer::Redirect(format!("{origin}/login")))
        };
    }

    // Laravel reads a JSON body only under a JSON content type; a body it cannot decode is
    // an empty request.
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("/json") || v.contains("+json"));
    let request = is_json
        .then(|| serde_json::from_slice::<Value>(body).ok())
        .flatten()
        .map(rules::normalize)
        .unwrap_or(Value::Null);
    let statements = match batch_error(request.get("statements")) {
        Ok(statements) => statements,
        Err(message) => {
            return if wants_json {
                let errors = json!({"statements": [message]});
                (
                    422,
                    Answer::Json(json!({"message": message, "errors": errors})),
                )
            } else {
                // Back where the request came from.
                (302, Answer::Redirect(format!("{origin}/")))
            };
        }
    };

    let mut kept = Vec::new();
    let mut errors = Map::new();
    for (index, statement) in statements.iter().enumerate() {
        // PHP's Validator::make takes an array only: anything else is a TypeError.
        let Value::Object(statement) = statement else {
            return (500, Answer::Json(json!({"message": "Server Error"})));
        };
        match rules::validate(statement) {
            Ok(mut statement) => {
                rules::settle(&mut statement);
                kept.push(statement);
            }
            Err(fields) => {
                errors.insert(format!("statement_{index}"), Value::Object(fields));
            }
        }
    }
    if !errors.is_empty() {
        return (422, Answer::Json(json!({"errors": errors})));
    }

    let duplicates = duplicates(database, &kept);
    if !duplicates.is_empty() {
        let errors = json!({"puid": [DUPLICATE], "existing_puids": duplicates});
        return (
            422,
            Answer::Json(json!({"message": DUPLICATE, "errors": errors})),
        );
    }

    let created_at = chrono::Utc::now().format("%Y-%m-%d %H:%M:%S").to_string();
    let mut out = Vec::new();
    for statement in kept {
        let uuid = uuid::Uuid::new_v4().to_string();
        let mut row = rules::stored(&statement);
        row.insert("uuid".into(), uuid.clone().into());
        row.insert("created_at".into(), created_at.clone().into());
        row.insert("platform_name".into(), PLATFORM_NAME.into());
        database.puids.insert(rules::php_string(&statement["puid"]));
        database.statements.push(Value::Object(row));
        out.push(Value::Object(given_back(
            statement,
            &uuid,
            &created_at,
            &origin,
        )));
    }
    (201, Answer::Json(json!({"statements": out})))
}

/// `buildOutputJsonResponse`: the statement as validated, its EAN-13 as `content_id_ean`, the
/// list fields and optional fields it lacks as empty lists and nulls, and where it is.
fn given_back(
    mut statement: Map<String, Value>,
    uuid: &str,
    created_at: &str,
    origin: &str,
) -> Map<String, Value> {
    let ean = statement
        .remove("content_id")
        .and_then(|id| id.get("EAN-13").cloned())
        .unwrap_or(Value::Null);
    statement.insert("content_id_ean".into(), ean);
    for list in [
        "decision_visibility",
        "category_addition",
        "category_specification",
        "content_type",
        "territorial_scope",
    ] {
        statement.entry(list).or_insert(json!([]));
    }
    // initOptionalFields
    for optional in rules::OPTIONAL_FIELDS
        .iter()
        .chain(&["illegal_content_legal_ground"])
    {
        statement.entry(*optional).or_insert(Value::Null);
    }
    statement.insert("uuid".into(), uuid.into());
    statement.insert("created_at".into(), created_at.into());
    statement.insert("platform_name".into(), PLATFORM_NAME.into());
    statement.insert(
        "self".into(),
        format!("{origin}/api/v1/statement/{uuid}").into(),
    );
    statement.insert(
        "permalink".into(),
        format!("{origin}/statement/{uuid}").into(),
    );
    statement
}

/// `'statements' => 'required|array|between:1,100'`, with Laravel 12's messages.
fn batch_error(statements: Option<&Value>) -> Result<&Vec<Value>, String> {
    match statements {
        None | Some(Value::Null) => Err("The statements field is required.".into()),
        Some(Value::Array(items)) if items.is_empty() => {
            Err("The statements field is required.".into())
        }
        Some(Value::Array(items)) if items.len() > DSA_MAX_BATCH => Err(format!(
            "The statements field must have between 1 and {DSA_MAX_BATCH} items."
        )),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err("The statements field must be an array.".into()),
    }
}

/// The puids repeated within the batch; if none is, those already stored (in batch order):
/// `PlatformUniqueIdService::runWithReservedPuids`.
fn duplicates(database: &Database, batch: &[Map<String, Value>]) -> Vec<Value> {
    let puids: Vec<&Value> = batch.iter().map(|statement| &statement["puid"]).collect();
    let repeated = repeated(&puids);
    if !repeated.is_empty() {
        return repeated;
    }
    puids
        .into_iter()
        .filter(|puid| database.puids.contains(&rules::php_string(puid)))
        .cloned()
        .collect()
}

/// The puids found more than once, as `array_count_values` keys them: in order of first
/// appearance, and a puid that is a decimal integer comes back as a JSON number.
fn repeated(puids: &[&Value]) -> Vec<Value> {
    let texts: Vec<String> = puids.iter().map(|puid| rules::php_string(puid)).collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for text in &texts {
        if texts.iter().filter(|t| *t == text).count() > 1 && seen.insert(text.clone()) {
            out.push(php_key(text));
        }
    }
    out
}

/// A PHP array key: a canonical decimal integer string becomes an integer.
fn php_key(text: &str) -> Value {
    match text.parse::<i64>() {
        Ok(n) if n.to_string() == text => n.into(),
        _ => text.into(),
    }
}

/// Laravel's `expectsJson`: JSON first in Accept, or an XMLHttpRequest accepting anything.
fn expects_json(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let first = accept.split(',').next().unwrap_or("").split(';').next();
    let first = first.unwrap_or("").trim().to_ascii_lowercase();
    let ajax = headers
        .get("x-requested-with")
        .is_some_and(|v| v == "XMLHttpRequest");
    first.contains("/json")
        || first.contains("+json")
        || ajax && (first.is_empty() || first == "*/*")
}
