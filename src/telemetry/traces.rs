//! Traces over OTLP, and the W3C trace context an event carries from the platform's request to
//! the outbound webhook.
//!
//! The exporter is off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; the other `OTEL_*` variables (sampler, service
//! name, headers, batch delays) are read by the OpenTelemetry SDK as its specification says.
//! Without the exporter nothing here starts a thread or reads a trace context from Postgres;
//! an inbound `traceparent` is still kept with its events.

use std::{
    collections::HashMap,
    sync::OnceLock,
    time::{Duration, SystemTime},
};

use opentelemetry::{
    KeyValue,
    propagation::TextMapPropagator,
    trace::{Span as _, TraceContextExt, Tracer as _, TracerProvider as _},
};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::{
    Resource,
    propagation::TraceContextPropagator,
    trace::{SdkTracer, SdkTracerProvider},
};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// What names the traces' instrumentation scope, and the service unless `OTEL_SERVICE_NAME` does.
const SERVICE: &str = "quiesce";
/// How long one export may take before the batch is dropped (the exporter's own default is 10 s).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The tracer provider, once the exporter was set up: none if it could not be.
static PROVIDER: OnceLock<Option<SdkTracerProvider>> = OnceLock::new();

/// The provider whose spans are exported, if any.
fn provider() -> Option<&'static SdkTracerProvider> {
    PROVIDER.get().and_then(Option::as_ref)
}

/// Whether an OTLP endpoint is set for traces.
fn endpoint_set() -> bool {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
}

/// The tracer whose spans are exported, built once, if an endpoint is set. A broken setting
/// (an endpoint that is not a URL) is reported on stderr and leaves traces off: the process
/// still runs, as it does when the receiver is down.
pub(super) fn tracer() -> Option<SdkTracer> {
    if !endpoint_set() {
        return None;
    }
    let provider = PROVIDER.get_or_init(|| {
        let exporter = BlockingClient::new().and_then(|client| {
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_timeout(EXPORT_TIMEOUT)
                .with_http_client(client)
                .build()
                .map_err(|error| error.to_string())
        });
        let exporter = match exporter {
            Ok(exporter) => exporter,
            Err(error) => {
                // The message names the variable and its problem; a password in an endpoint
                // is redacted, and headers are never in it.
                eprintln!(
                    "quiesce: traces are not exported: {}",
                    crate::credentials::redact_passwords(&error)
                );
                return None;
            }
        };
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(SERVICE);
        }
        Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource.build())
                .build(),
        )
    });
    provider.as_ref().map(|provider| provider.tracer(SERVICE))
}

/// Whether spans are exported (the exporter was started).
pub fn exporting() -> bool {
    provider().is_some()
}

/// Sends the spans still buffered; the process calls it once, as it exits.
pub fn shutdown() {
    if let Some(provider) = provider()
        && let Err(error) = provider.shutdown()
    {
        eprintln!("quiesce: could not send the last traces: {error}");
    }
}

/// A W3C `traceparent` (version 00): where an event entered a trace, kept with the event and
/// with the webhook an action sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent(String);

impl TraceParent {
    /// `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, lowercase, ids not all zero;
    /// anything else is no trace context (the request is still taken).
    pub fn parse(header: &str) -> Option<Self> {
        let parts: Vec<&str> = header.trim().split('-').collect();
        let hex = |part: &str, len: usize| {
            part.len() == len && part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        let nonzero = |part: &str| part.bytes().any(|b| b != b'0');
        match parts.as_slice() {
            [version, trace, parent, flags]
                if *version == "00"
                    && hex(trace, 32)
                    && hex(parent, 16)
                    && hex(flags, 2)
                    && nonzero(trace)
                    && nonzero(parent) =>
            {
                Some(Self(parts.join("-")))
            }
            _ => None,
        }
    }

    /// The span's place in its trace, when spans are exported and it has one.
    pub fn of_span(span: &tracing::Span) -> Option<Self> {
        if !exporting() {
            return None;
        }
        let context = span.context();
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
        carrier
            .get("traceparent")
            .and_then(|value| Self::parse(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn context(&self) -> opentelemetry::Context {
        let carrier = HashMap::from([("traceparent".to_owned(), self.0.clone())]);
        TraceContextPropagator::new().extract(&carrier)
    }
}

/// Makes `span` (not yet entered) a child of `parent`'s span, when spans are exported.
pub fn continue_trace(span: &tracing::Span, parent: Option<&TraceParent>) {
    if let (true, Some(parent)) = (exporting(), parent) {
        // Only a span already entered refuses, and none is here.
        let _ = span.set_parent(parent.context());
    }
}

/// Links `span` to the spans `others` name: the evaluation follows from each event it decides
/// on, besides the one whose trace it continues.
pub fn follows_from(span: &tracing::Span, others: &[TraceParent]) {
    if !exporting() {
        return;
    }
    for other in others {
        let context = other.context();
        span.add_link(context.span().span_context().clone());
    }
}

/// Records a span that already happened (the claim that took an entity, timed by the worker
/// before it knew the entity's trace), as a child of `parent`.
pub fn record_past(
    name: &'static str,
    parent: &TraceParent,
    started: SystemTime,
    ended: SystemTime,
    attributes: Vec<KeyValue>,
) {
    let Some(provider) = provider() else {
        return;
    };
    let tracer = provider.tracer(SERVICE);
    let mut span = tracer
        .span_builder(name)
        .with_start_time(started)
        .with_attributes(attributes)
        .start_with_context(&tracer, &parent.context());
    span.end_with_timestamp(ended);
}

/// The exporter's HTTP client: reqwest's blocking client, which the batch processor calls on
/// its own thread (no async runtime there), with the TLS roots the webhooks use.
#[derive(Debug)]
struct BlockingClient(reqwest::blocking::Client);

impl BlockingClient {
    /// Built on a thread of its own: the blocking client starts (and on a failed build drops)
    /// a runtime, which the async context `init_tracing` runs in does not allow.
    fn new() -> Result<Self, String> {
        let build = || {
            reqwest::blocking::Client::builder()
                .timeout(EXPORT_TIMEOUT)
                .build()
        };
        match std::thread::scope(|scope| scope.spawn(build).join()) {
            Ok(Ok(client)) => Ok(Self(client)),
            Ok(Err(error)) => Err(format!("its HTTP client could not be built: {error}")),
            Err(_) => Err("its HTTP client could not be built".to_owned()),
        }
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for BlockingClient {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let (parts, body) = request.into_parts();
        let response = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body.to_vec())
            .send()?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.bytes()?;
        let mut answer = opentelemetry_http::Response::builder().status(status);
        if let Some(map) = answer.headers_mut() {
            *map = headers;
        }
        Ok(answer.body(body)?)
    }
}

#[cfg(test)]
mod tests {
    use super::TraceParent;

    #[test]
    fn a_traceparent_is_taken_only_in_the_w3c_form() {
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(TraceParent::parse(valid).unwrap().as_str(), valid);
        assert_eq!(
            TraceParent::parse(&format!(" {valid} ")).unwrap().as_str(),
            valid
        );
        for invalid in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert_eq!(TraceParent::parse(invalid), None, "{invalid:?}");
        }
    }
}
