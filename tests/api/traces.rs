//! Traces over OTLP, against a real receiver that decodes the export with the official
//! protobuf definitions: one event's trace, from the platform's `traceparent` through the
//! request, group commit, claim, evaluation and action to the outbound webhook, is one tree.
//! Without an endpoint nothing is exported, and the inbound context is still kept.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, body::Bytes, extract::State, http::HeaderMap, routing::post};
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest, trace::v1::Span,
};
use prost::Message;
use quiesce::actions::{DeliverySettings, Dispatcher};
use serde_json::json;

use crate::helpers::{TestOptions, spawn_app, wait_for};

/// The platform's trace and the span its webhook sender was in.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PLATFORM_SPAN: &str = "00f067aa0ba902b7";
/// The trace of a later event on the same entity.
const SECOND_TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";

/// What the receivers got: every exported span, and each webhook's `traceparent` header
/// (`None` for a webhook without one).
#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    webhooks: Vec<Option<String>>,
}

type Shared = Arc<Mutex<Received>>;

async fn export(State(received): State<Shared>, body: Bytes) -> &'static str {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
    let mut received = received.lock().unwrap();
    for resource in request.resource_spans {
        for scope in resource.scope_spans {
            received.spans.extend(scope.spans);
        }
    }
    // An empty ExportTraceServiceResponse: full success.
    ""
}

/// Records an action's webhook (its statement of reasons' webhook follows no trace).
async fn webhook(State(received): State<Shared>, headers: HeaderMap, body: Bytes) -> &'static str {
    let body: serde_json::Value = serde_json::from_slice(&body).expect("a JSON webhook");
    if body["type"] == "statement.issued" {
        return "ok";
    }
    let trace = headers
        .get("traceparent")
        .map(|v| v.to_str().unwrap().to_owned());
    received.lock().unwrap().webhooks.push(trace);
    "ok"
}

/// An OTLP/HTTP trace receiver (`/v1/traces`) and a webhook receiver (`/hook`) on one port.
async fn receivers() -> (SocketAddr, Shared) {
    let received = Shared::default();
    let app = Router::new()
        .route("/v1/traces", post(export))
        .route("/hook", post(webhook))
        .with_state(Arc::clone(&received));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (address, received)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The one span of that name in the trace.
fn named<'a>(spans: &'a [&'a Span], name: &str) -> &'a Span {
    let found: Vec<&&Span> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one {name:?} span in {:?}", names(spans));
    found[0]
}

fn names(spans: &[&Span]) -> Vec<String> {
    spans.iter().map(|s| s.name.clone()).collect()
}

/// One flag of weight 9 hides a post under the shipped rules (score 8.3, share 1.0).
fn flag(id: &str, entity: &str) -> serde_json::Value {
    json!([{ "id": id, "entity": entity, "type": "flag", "weight": 9 }])
}

#[tokio::test]
async fn one_events_trace_reaches_the_receiver_as_one_tree_and_goes_on_to_the_webhook() {
    let mut app = spawn_app(TestOptions::idle()).await;
    let (receiver, received) = receivers().await;
    app.settings.delivery.webhook_url = Some(format!("http://{receiver}/hook"));
    let address = crate::helpers::free_address();
    let mut serve = app.serve_command("traced", address);
    serve
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{receiver}"))
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        // Logs at debug, as `make test` keeps them: a log filter that enables what the span
        // filter refuses once dropped spans from the trace (`telemetry/filter.rs`).
        .env("RUST_LOG", "debug,sqlx=info,hyper=info,hyper_util=info");
    if std::env::var_os("QUIESCE_TEST_LOG_DIR").is_none() {
        serve.stderr(std::process::Stdio::null());
    }
    let _serve = serve.spawn().expect("start serve");
    app.wait_healthy("serve to answer", address).await;

    let sent = format!("00-{TRACE_ID}-{PLATFORM_SPAN}-01");
    let response = app
        .client
        .post(format!("http://{address}/v1/events"))
        .header("traceparent", &sent)
        .json(&flag("traced-1", "post:traced"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);

    // The webhook arrives, continuing the platform's trace.
    wait_for(Duration::from_secs(30), "the action's webhook", || async {
        !received.lock().unwrap().webhooks.is_empty()
    })
    .await;
    let outbound = received.lock().unwrap().webhooks[0]
        .clone()
        .expect("the webhook carries a traceparent");
    assert!(
        outbound.starts_with(&format!("00-{TRACE_ID}-")) && outbound.ends_with("-01"),
        "{outbound}"
    );

    // Every span of the tree is exported (the delivery's ends after the webhook answered).
    let wanted = [
        "request",
        "ingest_group",
        "claim",
        "evaluation",
        "action",
        "delivery",
    ];
    wait_for(Duration::from_secs(30), "the trace's spans", || async {
        let received = received.lock().unwrap();
        wanted.iter().all(|name| {
            received
                .spans
                .iter()
                .any(|s| s.name == *name && hex(&s.trace_id) == TRACE_ID)
        })
    })
    .await;
    let shared = received;
    // The tree, read under the lock (released before the second event is sent).
    {
        let received = shared.lock().unwrap();
        let spans: Vec<&Span> = received
            .spans
            .iter()
            .filter(|s| hex(&s.trace_id) == TRACE_ID && wanted.contains(&s.name.as_str()))
            .collect();
        let request = named(&spans, "request");
        let group = named(&spans, "ingest_group");
        let claim = named(&spans, "claim");
        let evaluation = named(&spans, "evaluation");
        let action = named(&spans, "action");
        let delivery = named(&spans, "delivery");
        let parent = |span: &Span| hex(&span.parent_span_id);
        let id = |span: &Span| hex(&span.span_id);

        assert_eq!(
            parent(request),
            PLATFORM_SPAN,
            "the platform's span is the root's parent"
        );
        assert_eq!(
            parent(group),
            id(request),
            "the group commit is the request's"
        );
        assert_eq!(
            parent(claim),
            id(request),
            "the claim is in the event's trace"
        );
        assert_eq!(
            parent(evaluation),
            id(request),
            "the evaluation continues the event's trace"
        );
        assert!(
            evaluation
                .links
                .iter()
                .any(|l| hex(&l.trace_id) == TRACE_ID && hex(&l.span_id) == id(request)),
            "the evaluation follows from the event's request: {:?}",
            evaluation.links
        );
        assert_eq!(
            parent(action),
            id(evaluation),
            "the action is the evaluation's"
        );
        assert_eq!(
            parent(delivery),
            id(action),
            "the delivery carries the action's trace"
        );
        assert_eq!(
            outbound,
            format!("00-{TRACE_ID}-{}-01", id(delivery)),
            "the receiver's parent is the delivery span"
        );
        // In time: the claim ended after the group commit began (a poll that began before the
        // group's span closed may take the entity), the evaluation began after the claim, and the
        // action lies within the evaluation.
        assert!(claim.end_time_unix_nano >= group.start_time_unix_nano);
        assert!(evaluation.start_time_unix_nano >= claim.end_time_unix_nano);
        assert!(action.start_time_unix_nano >= evaluation.start_time_unix_nano);
        assert!(action.end_time_unix_nano <= evaluation.end_time_unix_nano);
    }

    // A later event on the entity, in a trace of its own: its evaluation continues that trace,
    // not the first event's (which an earlier evaluation decided on).
    let second = format!("00-{SECOND_TRACE_ID}-{PLATFORM_SPAN}-01");
    let response = app
        .client
        .post(format!("http://{address}/v1/events"))
        .header("traceparent", &second)
        .json(&flag("traced-2", "post:traced"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    wait_for(
        Duration::from_secs(30),
        "the second event's evaluation",
        || async {
            let received = shared.lock().unwrap();
            received
                .spans
                .iter()
                .any(|s| s.name == "evaluation" && hex(&s.trace_id) == SECOND_TRACE_ID)
        },
    )
    .await;
    let received = shared.lock().unwrap();
    let in_first = |name: &str| {
        received
            .spans
            .iter()
            .filter(|s| s.name == name && hex(&s.trace_id) == TRACE_ID)
            .count()
    };
    assert_eq!(
        in_first("evaluation"),
        1,
        "the first trace has one evaluation"
    );
}

#[tokio::test]
async fn without_an_endpoint_nothing_is_exported_and_the_inbound_context_is_kept() {
    let (receiver, received) = receivers().await;
    let app = spawn_app(TestOptions::default().with(|settings| {
        settings.delivery.webhook_url = Some(format!("http://{receiver}/hook"));
    }))
    .await;
    let delivery = DeliverySettings::from_settings(&app.settings).expect("a webhook URL");
    let dispatcher = Dispatcher::new(app.backends.store.clone(), delivery);
    let sent = format!("00-{TRACE_ID}-{PLATFORM_SPAN}-01");
    for (id, trace) in [
        ("kept-1", sent.as_str()),
        ("dropped-1", "not-a-traceparent"),
    ] {
        let response = app
            .client
            .post(format!("{}/v1/events", app.base))
            .header("traceparent", trace)
            .json(&flag(id, &format!("post:{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202, "a bad traceparent is not refused");
    }
    let stored: Vec<(String, Option<String>)> =
        sqlx::query!("SELECT id, traceparent FROM events ORDER BY id")
            .fetch_all(&app.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|row| (row.id, row.traceparent))
            .collect();
    assert_eq!(
        stored,
        vec![
            ("dropped-1".to_owned(), None),
            ("kept-1".to_owned(), Some(sent.clone())),
        ]
    );
    wait_for(
        Duration::from_secs(30),
        "both actions' webhooks",
        || async {
            dispatcher.deliver_once().await.unwrap();
            received.lock().unwrap().webhooks.len() >= 2
        },
    )
    .await;
    let received = received.lock().unwrap();
    assert_eq!(
        received.webhooks,
        vec![None, None],
        "no span, no traceparent"
    );
}
