//! The API's listener. Connections are served by hyper directly (not `axum::serve`) so that a
//! client that is slow to send a request, that keeps a connection open doing nothing, or that
//! stops reading its answers, is cut off, so that the open connections are capped, and so that
//! a connection is closed without a reset ([`super::linger`]).

use std::{sync::Arc, time::Duration};

use axum::{Router, extract::ConnectInfo};
use hyper::server::conn::http1;
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
    service::TowerToHyperService,
};
use tokio::{
    net::TcpListener,
    sync::{OwnedSemaphorePermit, Semaphore},
    task::JoinSet,
};
use tokio_io_timeout::TimeoutStream;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::linger;
use crate::{settings::Http, telemetry::names};

/// What one connection may take.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Longest wait for a request's line and headers, from the moment the connection waits for
    /// one: a new connection, or a kept-alive one after its last response. Past it the
    /// connection is closed; this is also how long a kept-alive connection may stay idle.
    pub header_read_timeout: Duration,
    /// Longest a write may wait for the client to take bytes (the client stopped reading, its
    /// window is shut): then the connection is closed, instead of holding its slot until TCP
    /// gives up, which it never does while the client's kernel answers its probes.
    pub write_timeout: Duration,
    /// Open connections at once; more wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// How long a shutdown waits for the requests in progress (no request may take longer):
    /// a client that stops reading its answer does not hold the shutdown up past it.
    pub drain_timeout: Duration,
}

/// What the settings allow a connection; a shutdown waits as long as a request may take.
impl From<&Http> for ConnectionLimits {
    fn from(http: &Http) -> Self {
        Self {
            header_read_timeout: http.header_read_timeout,
            write_timeout: http.write_timeout,
            max_connections: http.max_connections,
            drain_timeout: http.request_timeout,
        }
    }
}

/// Serves `router` on `listener` until `shutdown`: then stops accepting and waits for the
/// requests in progress to finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    // HTTP/1.1, as before (the API never spoke HTTP/2). The header timer starts as soon as the
    // connection waits for a request, so it also bounds a connection that sends nothing.
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    // Each connection's task, reaped as they end and awaited by the drain.
    let mut connections = JoinSet::new();
    loop {
        // A slot first: at the cap, connections queue in the kernel's backlog, not here.
        let slot = tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(ended) = connections.join_next() => {
                connection_ended(ended);
                continue;
            }
            slot = Arc::clone(&slots).acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            // The slot goes back and is taken again: the cap holds either way.
            Some(ended) = connections.join_next() => {
                connection_ended(ended);
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) if is_connection_error(&error) => continue,
                Err(error) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    tracing::warn!(%error, "could not accept a connection; pausing a second");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        let (stream, peer) = stream;
        let _ = stream.set_nodelay(true);
        let open = Open::new(slot);
        // The peer address on every request of the connection (the audit trail's address).
        let service = router.clone().map_request(
            move |mut request: hyper::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            },
        );
        let (stream, handed_back) = linger::hand_back(stream);
        let mut stream = TimeoutStream::new(stream);
        stream.set_write_timeout(Some(limits.write_timeout));
        let connection = builder.serve_connection(
            TokioIo::new(Box::pin(stream)),
            TowerToHyperService::new(service),
        );
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            // An error here is the client's doing (a timeout, a reset, a malformed request):
            // hyper has answered what it could.
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection closed");
            }
            // hyper has dropped the socket; it is closed here, keeping its slot until then.
            if let Ok(stream) = handed_back.await {
                linger::linger(stream).await;
            }
            drop(open);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain timeout; closing them");
        connections.abort_all();
    }
    // What is left closes within its linger.
    while let Some(ended) = connections.join_next().await {
        connection_ended(ended);
    }
}

/// A connection's task ended: a panic is logged (its slot and its count were given back by
/// [`Open`]'s drop); an abort is the drain's own doing.
fn connection_ended(ended: Result<(), tokio::task::JoinError>) {
    match ended {
        Err(error) if error.is_panic() => {
            tracing::error!(%error, "a connection's task panicked");
        }
        _ => {}
    }
}

/// One open connection: its slot under the cap and its count in the gauge, both given back
/// when the connection's task ends, however it ends (a panic included).
struct Open {
    _slot: OwnedSemaphorePermit,
}

impl Open {
    fn new(slot: OwnedSemaphorePermit) -> Self {
        metrics::gauge!(names::HTTP_CONNECTIONS).increment(1.0);
        Self { _slot: slot }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        metrics::gauge!(names::HTTP_CONNECTIONS).decrement(1.0);
    }
}

/// Errors of one connection that failed while being accepted; the listener itself is fine.
fn is_connection_error(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        error.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}
