//! Outbound webhooks against a real local receiver that fails, throttles and goes away:
//! every action arrives, signed, at least once, and dedupes to exactly one per action.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{Hmac, Mac};
use quiesce::domain::Status;
use quiesce::{
    actions::{DeliverySettings, Dispatcher},
    credentials::WebhookSecret,
};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

use crate::helpers::{TestApp, TestOptions, claim_next, event, hide, scalar, spawn_app, wait_for};

const SECRET: &str = crate::secrets::OUTBOUND;

#[derive(Clone, Copy)]
enum Reply {
    Fail,
    Throttle,
}

#[derive(Default)]
struct Inbox {
    /// Replies to give before answering 200.
    script: VecDeque<Reply>,
    attempts: usize,
    /// Accepted deliveries: webhook-id -> how many times, and the last body.
    accepted: HashMap<String, (usize, Value)>,
    /// Each acceptance in the order it came: the entity and the webhook-id.
    order: Vec<(String, String)>,
    /// Types whose every delivery fails its first attempt (500).
    fail_first: Vec<&'static str>,
    failed_once: HashSet<String>,
    bad_signatures: usize,
}

/// Checks a Standard Webhooks signature independently of quiesce's signer.
fn signature_is_valid(headers: &HeaderMap, body: &[u8]) -> bool {
    let header = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let key = STANDARD
        .decode(SECRET.trim_start_matches("whsec_"))
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{}.{}.", header("webhook-id"), header("webhook-timestamp")).as_bytes());
    mac.update(body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    header("webhook-signature")
        .split(' ')
        .any(|s| s == expected)
}

async fn receive(
    State(inbox): State<Arc<Mutex<Inbox>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut inbox = inbox.lock().unwrap();
    inbox.attempts += 1;
    match inbox.script.pop_front() {
        Some(Reply::Fail) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        Some(Reply::Throttle) => {
            return (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")]).into_response();
        }
        None => {}
    }
    if !signature_is_valid(&headers, &body) {
        inbox.bad_signatures += 1;
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let id = headers["webhook-id"].to_str().unwrap().to_owned();
    let body: Value = serde_json::from_slice(&body).unwrap();
    let kind = body["type"].as_str().unwrap_or_default();
    if inbox.fail_first.contains(&kind) && inbox.failed_once.insert(id.clone()) {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    let entity = body["data"]["entity"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    inbox.order.push((entity, id.clone()));
    let entry = inbox.accepted.entry(id).or_insert((0, Value::Null));
    entry.0 += 1;
    entry.1 = body;
    StatusCode::NO_CONTENT.into_response()
}

/// A receiver on a fixed port that can be stopped and started again.
struct Receiver {
    address: SocketAddr,
    inbox: Arc<Mutex<Inbox>>,
    stop: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
}

impl Receiver {
    async fn start(script: Vec<Reply>) -> Self {
        let inbox = Arc::new(Mutex::new(Inbox {
            script: script.into(),
            ..Default::default()
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut receiver = Self {
            address,
            inbox,
            stop: None,
        };
        receiver.serve(listener);
        receiver
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let token = CancellationToken::new();
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(Arc::clone(&self.inbox));
        let stopped = token.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await
                .unwrap();
        });
        self.stop = Some((token, task));
    }

    async fn kill(&mut self) {
        if let Some((token, task)) = self.stop.take() {
            token.cancel();
            task.await.unwrap();
        }
    }

    async fn restart(&mut self) {
        let listener = tokio::net::TcpListener::bind(self.address).await.unwrap();
        self.serve(listener);
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.address)
    }
}

fn delivery(url: String, horizon: Duration) -> DeliverySettings {
    DeliverySettings {
        url,
        secret: Some(WebhookSecret::parse(SECRET).unwrap()),
        timeout: Duration::from_secs(2),
        horizon,
        backoff_base: Duration::from_millis(50),
        backoff_max: Duration::from_millis(400),
        batch: 16,
        poll_interval: Duration::from_millis(20),
    }
}

async fn undelivered(app: &TestApp) -> i64 {
    app.count_undelivered().await
}

#[tokio::test]
async fn every_action_and_reversal_is_delivered_signed_through_failures_throttling_and_a_restart() {
    let app = spawn_app(
        TestOptions::idle().with(|s| s.schedule.debounce_window = Duration::from_millis(10)),
    )
    .await;
    for i in 0..5 {
        hide(&app, &format!("post:w{i}")).await;
    }
    let first: i64 = scalar!(app, "SELECT min(id) FROM actions");
    let response = app
        .client
        .post(format!("{}/v1/actions/{first}/reverse", app.base))
        .json(&json!({"moderator": "mod:ana", "reason": "fine"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // A decision refused by the version fence is rolled back whole: no outbox row.
    let snapshot = app.snapshot("post:w1").await;
    sqlx::query!(
        "UPDATE entities SET status = 'visible', moderation_version = 9 WHERE entity = 'post:w1'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let verdict = app.backends.rules.current().evaluate(&snapshot);
    let stale = verdict
        .to_apply(quiesce::domain::Status::Visible, None)
        .cloned();
    assert!(
        app.backends
            .store
            .evaluations()
            .complete_evaluation(
                "stale",
                &quiesce::store::FencedEvaluation {
                    snapshot: snapshot.clone(),
                    verdict: verdict.clone(),
                    decision: stale.clone(),
                    started_at: chrono::Utc::now(),
                    due_at: None,
                    trace: None,
                    statement: None,
                    label_statements: Vec::new(),
                },
            )
            .await
            .is_err()
    );
    let keys: Vec<String> = sqlx::query_scalar!("SELECT idempotency_key FROM outbox ORDER BY id")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(
        keys.len(),
        11,
        "five actions, their five statements of reasons and one reversal"
    );

    let mut receiver = Receiver::start(vec![Reply::Fail, Reply::Fail, Reply::Throttle]).await;
    let dispatcher = Dispatcher::new(
        app.backends.store.clone(),
        delivery(receiver.url(), Duration::from_secs(120)),
    );
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(dispatcher.run(shutdown.clone()));

    wait_for(
        Duration::from_secs(20),
        "two failures and a 429",
        || async { receiver.inbox.lock().unwrap().attempts >= 3 },
    )
    .await;
    // The receiver goes away for a while, then comes back.
    receiver.kill().await;
    wait_for(
        Duration::from_secs(20),
        "an attempt against the stopped receiver",
        || async {
            scalar!(
                app,
                "SELECT count(*) FROM outbox WHERE last_error LIKE 'request failed%'"
            ) > 0
        },
    )
    .await;
    receiver.restart().await;
    wait_for(Duration::from_secs(30), "every row delivered", || async {
        undelivered(&app).await == 0
    })
    .await;
    shutdown.cancel();
    running.await.unwrap();

    let inbox = receiver.inbox.lock().unwrap();
    assert_eq!(inbox.bad_signatures, 0);
    let mut delivered: Vec<&String> = inbox.accepted.keys().collect();
    delivered.sort();
    let mut expected: Vec<&String> = keys.iter().collect();
    expected.sort();
    assert_eq!(
        delivered, expected,
        "deduped on webhook-id: exactly one per action"
    );
    let reversal = keys.iter().find(|k| k.starts_with("reversal:")).unwrap();
    assert_eq!(inbox.accepted[reversal].1["type"], "action.reversed");
    assert_eq!(inbox.accepted[reversal].1["data"]["moderator"], "mod:ana");
    assert!(inbox.attempts >= 11 + 3, "{} attempts", inbox.attempts);
}

#[tokio::test]
async fn deliveries_past_the_horizon_are_listed_and_redriven() {
    let app = spawn_app(
        TestOptions::idle().with(|s| s.schedule.debounce_window = Duration::from_millis(10)),
    )
    .await;
    hide(&app, "post:gone").await;
    let receiver = Receiver::start(vec![Reply::Fail; 1000]).await;
    let dispatcher = Dispatcher::new(
        app.backends.store.clone(),
        delivery(receiver.url(), Duration::from_millis(300)),
    );
    wait_for(
        Duration::from_secs(20),
        "the delivery to be given up",
        || async {
            dispatcher.deliver_once().await.unwrap();
            scalar!(
                app,
                "SELECT count(*) FROM outbox WHERE failed_at IS NOT NULL"
            ) == 2
        },
    )
    .await;
    // The hide's webhook and its statement of reasons'.
    let failed = app.run_cli(&["deliveries", "failed"]).await;
    assert!(
        failed.contains("action.applied")
            && failed.contains("statement.issued")
            && failed.contains("answered 500"),
        "{failed}"
    );

    receiver.inbox.lock().unwrap().script.clear();
    assert_eq!(
        app.run_cli(&["deliveries", "redrive", "--all"])
            .await
            .trim(),
        "redriven: 2"
    );
    wait_for(Duration::from_secs(20), "the redriven delivery", || async {
        dispatcher.deliver_once().await.unwrap();
        undelivered(&app).await == 0
    })
    .await;
    assert_eq!(receiver.inbox.lock().unwrap().accepted.len(), 2);
    assert_eq!(
        app.run_cli(&["deliveries", "failed"]).await.trim(),
        "no failed deliveries",
        "an empty listing says so"
    );
}

#[tokio::test]
async fn an_entitys_webhooks_arrive_in_the_order_they_were_written_through_retries() {
    let app = spawn_app(
        TestOptions::idle().with(|s| s.schedule.debounce_window = Duration::from_millis(10)),
    )
    .await;
    for i in 0..3 {
        hide(&app, &format!("post:o{i}")).await;
    }
    // A flag sent to review, then hidden by a moderator: the decision and its statement.
    let flags: Vec<Value> = (0..3)
        .map(|i| event(&format!("q-{i}"), "post:q", "flag"))
        .collect();
    app.send(&json!(flags)).await;
    let worker = app.worker();
    worker.evaluate_claim(claim_next(&worker).await).await;
    assert_eq!(app.status_of("post:q").await, Status::Flagged);
    let item: i64 = scalar!(app, "SELECT id FROM actions WHERE entity = 'post:q'");
    let version = app.moderation_version_of("post:q").await;
    for (step, body) in [
        ("claim", json!({"moderator": "mod:ana"})),
        (
            "decide",
            json!({"moderator": "mod:ana", "decision": "hide", "reason": "spam",
                   "moderation_version": version}),
        ),
    ] {
        let (status, reply) = app
            .post_json(&format!("/v1/review/{item}/{step}"), body)
            .await;
        assert_eq!(status, 200, "{step}: {reply}");
    }
    // Each entity's webhooks as written: every decision's own before its statement.
    let rows = sqlx::query!(
        r#"SELECT payload ->> 'entity' AS "entity!", topic, idempotency_key FROM outbox
           WHERE receiver = 'platform' ORDER BY id"#
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let mut written: HashMap<String, Vec<String>> = HashMap::new();
    let mut topics: HashMap<String, Vec<String>> = HashMap::new();
    for row in rows {
        written
            .entry(row.entity.clone())
            .or_default()
            .push(row.idempotency_key);
        topics.entry(row.entity).or_default().push(row.topic);
    }
    for i in 0..3 {
        assert_eq!(
            topics[&format!("post:o{i}")],
            ["action.applied", "statement.issued"]
        );
    }
    assert_eq!(
        topics["post:q"],
        ["action.applied", "action.applied", "statement.issued"]
    );

    // Every action's first delivery fails: its statement, written after it, waits for it.
    let receiver = Receiver::start(Vec::new()).await;
    receiver.inbox.lock().unwrap().fail_first = vec!["action.applied"];
    let dispatcher = Dispatcher::new(
        app.backends.store.clone(),
        delivery(receiver.url(), Duration::from_secs(120)),
    );
    wait_for(Duration::from_secs(30), "every row delivered", || async {
        dispatcher.deliver_once().await.unwrap();
        undelivered(&app).await == 0
    })
    .await;
    let inbox = receiver.inbox.lock().unwrap();
    assert_eq!(inbox.failed_once.len(), 5, "each action failed once");
    let mut received: HashMap<String, Vec<String>> = HashMap::new();
    for (entity, id) in &inbox.order {
        received.entry(entity.clone()).or_default().push(id.clone());
    }
    assert_eq!(
        received, written,
        "each entity's webhooks in the order written"
    );
}

/// A rules' `action.applied` carries the action as its row holds it: the fields Rust builds and
/// binds to the fenced statement, and those the database gives there (the action's id, its end),
/// and nothing else.
#[tokio::test]
async fn a_rules_action_applied_carries_the_action_as_its_row_holds_it() {
    let app = spawn_app(
        TestOptions::idle().with(|s| s.schedule.debounce_window = Duration::from_millis(10)),
    )
    .await;
    hide(&app, "post:fields").await;
    let (payload, action): (Value, Value) = sqlx::query_as(
        "SELECT o.payload, to_jsonb(a) FROM outbox o
         JOIN actions a ON a.dedup_key = o.idempotency_key
         WHERE o.topic = 'action.applied' AND o.payload->>'entity' = 'post:fields'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    let keys: Vec<&str> = payload
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "action",
            "action_id",
            "ends_at",
            "entity",
            "moderation_version",
            "reason",
            "rule",
            "rules_version",
            "status"
        ],
        "{payload}"
    );
    assert_eq!(payload["action_id"], action["id"], "{payload} {action}");
    for field in [
        "entity",
        "action",
        "rule",
        "reason",
        "ends_at",
        "rules_version",
    ] {
        assert_eq!(payload[field], action[field], "{field}: {payload} {action}");
    }
    assert_eq!(payload["status"], action["new_status"]);
    assert_eq!(payload["status"], "hidden");
    assert_eq!(
        payload["moderation_version"],
        action["applied_version"].as_i64().unwrap() + 1
    );
    assert!(payload["rules_version"].is_i64(), "{payload}");
}
