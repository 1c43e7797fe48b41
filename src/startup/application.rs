//! The HTTP API bound to its port, the metrics listener, and the workers of the same process.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::backends::Backends;
use crate::{
    console,
    http::{self, AppState, server::ConnectionLimits},
    maintenance::Maintenance,
    settings::Settings,
    telemetry,
    worker::Worker,
};

/// Runs the evaluation loop and maintenance beside it until `shutdown`, then waits for both:
/// the loop drains its running evaluations first.
pub async fn run_workers(worker: Worker, maintenance: Maintenance, shutdown: CancellationToken) {
    tokio::join!(worker.run(shutdown.clone()), maintenance.run(shutdown));
}

/// The HTTP API, bound to its port, with its metrics listener and the workers of the same
/// process.
pub struct Application {
    listener: TcpListener,
    address: SocketAddr,
    metrics: Option<(TcpListener, SocketAddr)>,
    state: AppState,
    /// Signs the moderator console's sessions.
    sessions: console::Sessions,
    workers: Option<(Worker, Maintenance)>,
}

impl Application {
    /// Binds the listener (port 0 picks a free port) and builds the state; `worker` is the
    /// evaluation loop to run beside the API, with maintenance (`None` for an API-only process).
    pub async fn build(
        settings: &Settings,
        backends: &Backends,
        worker: Option<Worker>,
    ) -> anyhow::Result<Self> {
        let listen = settings.http.listen;
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen} (QUIESCE_LISTEN)"))?;
        let address = listener.local_addr()?;
        let metrics = match settings.telemetry.metrics_listen {
            Some(at) => {
                let listener = TcpListener::bind(at)
                    .await
                    .with_context(|| format!("cannot listen for metrics on {at} (QUIESCE_METRICS_LISTEN; off disables it)"))?;
                let bound = listener.local_addr()?;
                record_baseline(settings);
                Some((listener, bound))
            }
            None => None,
        };
        let state = AppState::new(
            settings,
            backends.store.clone(),
            backends.queue.clone(),
            Arc::clone(&backends.rules),
            Arc::clone(&backends.wakeup),
        );
        Ok(Self {
            listener,
            address,
            metrics,
            state,
            sessions: console::Sessions::new(&settings.console),
            workers: worker.map(|worker| (worker, backends.maintenance(settings))),
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Where `/metrics` is served, if anywhere.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|(_, address)| *address)
    }

    /// Serves until `shutdown` fires: stops accepting, finishes open requests, then lets the
    /// workers drain.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        // The read replica's lag, measured while the API serves the reads that go there.
        if let Some(replica) = self.state.store.replica() {
            tokio::spawn(replica.clone().watch(shutdown.clone()));
        }
        let workers = self.workers.map(|(worker, maintenance)| {
            tokio::spawn(run_workers(worker, maintenance, shutdown.clone()))
        });
        let metrics = self.metrics.map(|(listener, _)| {
            let router = http::metrics_router(
                self.state.queue.clone(),
                self.state.store.clone(),
                Arc::clone(&self.state.rules),
                telemetry::metrics_handle(),
                self.state.settings.database.backend_timeout,
            );
            serve_metrics(listener, router, shutdown.clone())
        });
        let connection_limits = ConnectionLimits::from(&self.state.settings.http);
        let pages = console::router(self.state.clone(), self.sessions);
        http::server::serve(
            self.listener,
            http::router_with(self.state, pages),
            connection_limits,
            shutdown.clone(),
        )
        .await;
        if let Some(workers) = workers {
            workers.await.context("the worker loop panicked")?;
        }
        if let Some(metrics) = metrics {
            metrics.await.context("the metrics listener panicked")?;
        }
        Ok(())
    }
}

fn serve_metrics(
    listener: TcpListener,
    router: axum::Router,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let stopped = axum::serve(listener, router)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(error) = stopped {
            tracing::error!(error = %crate::telemetry::Chain(&error), "the metrics listener failed");
        }
    })
}

/// Serves `/metrics` and `/healthz` on `settings.metrics_listen`, if set, until `shutdown`
/// (for `quiesce worker`; `serve` runs its own through [`Application`]).
pub async fn spawn_metrics_listener(
    settings: &Settings,
    backends: &Backends,
    shutdown: CancellationToken,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(address) = settings.telemetry.metrics_listen else {
        return Ok(None);
    };
    let listener = TcpListener::bind(address).await.with_context(|| {
        format!("cannot listen for metrics on {address} (QUIESCE_METRICS_LISTEN; off disables it)")
    })?;
    tracing::info!(address = %listener.local_addr()?, "metrics listener started");
    record_baseline(settings);
    let router = http::metrics_router(
        backends.queue.clone(),
        backends.store.clone(),
        Arc::clone(&backends.rules),
        telemetry::metrics_handle(),
        settings.database.backend_timeout,
    );
    Ok(Some(serve_metrics(listener, router, shutdown)))
}

/// The settings alerts compare against, and a zero for each series a healthy process may never
/// touch; each rate budget the configuration implies gets one (named sources, ingest tokens by
/// the label the limiter uses, and `default` for requests without a token).
fn record_baseline(settings: &Settings) {
    let security = &settings.security;
    let tokens = security.api_tokens.iter().map(|token| token.label());
    let sources = security
        .sources
        .iter()
        .map(|s| format!("source:{}", s.name));
    telemetry::record_baseline(
        settings.schedule.max_wait,
        settings.moderation.reversal_alert_threshold,
        tokens.chain(sources).chain(["default".to_owned()]),
    );
    metrics::gauge!(telemetry::names::APPEAL_ALERT_SECONDS)
        .set(settings.moderation.appeal_alert_after.as_secs_f64());
}
