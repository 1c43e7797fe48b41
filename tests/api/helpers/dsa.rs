//! A stand-in of the EU DSA Transparency Database's batch endpoint, `POST /api/v1/statements`,
//! answering as the Commission's code does (digital-services-act/transparency-database): each
//! statement is checked by [`rules`] and the batch is handled as its
//! `StatementMultipleAPIController` does (as stored at 024010d9 and e2f77d41; it is not stored
//! at 006d22e9, whose rules the statements follow):
//!
//! - no or a wrong bearer token: 401 `{"message": "Unauthenticated."}` (Sanctum);
//! - `statements` missing, empty, not a list or over 100 long: 422 with Laravel's
//!   `{"message", "errors": {"statements": [..]}}`;
//! - any invalid statement: 422 `{"errors": {"statement_<index>": {field: [messages]}}}`, and
//!   nothing of the batch is stored;
//! - a puid twice in the batch, or already stored: 422 `{"message", "errors": {"puid": [..],
//!   "existing_puids": [..]}}`, nothing stored;
//! - otherwise all are stored: 201 `{"statements": [..]}`, each as kept with its `uuid`,
//!   `created_at` and `platform_name`.
//!
//! Without `Accept: application/json` Laravel redirects (302) where it would answer 401 or
//! the `statements` error; the stand-in does too.

mod dates;
mod rules;

use std::{
    collections::HashSet,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{
    Router,
    body::Bytes,
    extract::{DefaultBodyLimit, State},
    http::{HeaderMap, StatusCode, header},
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

#[allow(unused_imports)]
pub use rules::{
    ACCOUNT_TYPES, CATEGORIES, CONTENT_TYPES, COUNTRY_CODES, DECISION_ACCOUNTS, DECISION_GROUNDS,
    DECISION_MONETARIES, DECISION_PROVISIONS, DECISION_VISIBILITIES, SOURCE_TYPES, YES_NO,
};

/// The controller's `between:1,100`.
pub const DSA_MAX_BATCH: usize = 100;
const PLATFORM_NAME: &str = "Stand-in platform";
const DUPLICATE: &str = "The platform identifier(s) are not all unique within this call.";

#[derive(Default)]
struct Database {
    statements: Vec<Value>,
    /// The stored puids as PHP compares them (as strings).
    puids: HashSet<String>,
    rejections: Vec<(u16, Value)>,
    requests: usize,
    answers_to_lose: usize,
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

    /// Every statement stored, in arrival order, as the success answer gave it back.
    pub fn accepted(&self) -> Vec<Value> {
        self.database().statements.clone()
    }

    pub fn accepted_puids(&self) -> Vec<String> {
        self.accepted()
            .iter()
            .map(|statement| rules::php_string(&statement["puid"]))
            .collect()
    }

    /// Every non-2xx answer with its body (null for a redirect), lost answers included.
    pub fn rejections(&self) -> Vec<(u16, Value)> {
        self.database().rejections.clone()
    }

    /// Requests to the batch endpoint, whatever their answer.
    pub fn requests(&self) -> usize {
        self.database().requests
    }

    /// The next `n` requests are handled as usual (a valid batch is stored) but answered
    /// 500 `{"message": "Server Error"}`, as if the answer had been lost.
    pub fn lose_next_answers(&self, n: usize) {
        self.database().answers_to_lose += n;
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
    let mut database = shared.database.lock().unwrap();
    database.requests += 1;
    let (status, answer) = answer(&shared, &mut database, &headers, &body);
    let (status, answer) = if database.answers_to_lose > 0 {
        database.answers_to_lose -= 1;
        (500, Answer::Json(json!({"message": "Server Error"})))
    } else {
        (status, answer)
    };
    if !(200..300).contains(&status) {
        let body = match &answer {
            Answer::Json(body) => body.clone(),
            Answer::Redirect(_) => Value::Null,
        };
        database.rejections.push((status, body));
    }
    let status = StatusCode::from_u16(status).unwrap();
    match answer {
        Answer::Json(body) => (status, axum::Json(body)).into_response(),
        Answer::Redirect(location) => (status, [(header::LOCATION, location)]).into_response(),
    }
}

enum Answer {
    Json(Value),
    Redirect(String),
}

/// The controller, from the middleware on.
fn answer(
    shared: &Shared,
    database: &mut Database,
    headers: &HeaderMap,
    body: &[u8],
) -> (u16, Answer) {
    let origin = format!("http://{}", shared.address);
    let wants_json = expects_json(headers);
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer != Some(shared.token.as_str()) {
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
            Ok(statement) => kept.push(statement),
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
    for mut statement in kept {
        statement.insert("uuid".into(), uuid::Uuid::new_v4().to_string().into());
        statement.insert("created_at".into(), created_at.clone().into());
        statement.insert("platform_name".into(), PLATFORM_NAME.into());
        database.puids.insert(rules::php_string(&statement["puid"]));
        database.statements.push(Value::Object(statement.clone()));
        out.push(Value::Object(statement));
    }
    (201, Answer::Json(json!({"statements": out})))
}

/// `'statements' => 'required|array|between:1,100'`, with Laravel's messages.
fn batch_error(statements: Option<&Value>) -> Result<&Vec<Value>, String> {
    match statements {
        None | Some(Value::Null) => Err("The statements field is required.".into()),
        Some(Value::Array(items)) if items.is_empty() => {
            Err("The statements field is required.".into())
        }
        Some(Value::Array(items)) if items.len() > DSA_MAX_BATCH => Err(format!(
            "The statements must have between 1 and {DSA_MAX_BATCH} items."
        )),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err("The statements must be an array.".into()),
    }
}

/// The puids repeated within the batch; if none is, those already stored (in batch order).
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
