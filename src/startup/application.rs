//! The HTTP API bound to its port, the metrics listener, and the workers of the same process.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{backends::Backends, supervisor::Supervisor};
use crate::{
    console,
    http::{self, AppState, server::ConnectionLimits},
    maintenance::Maintenance,
    settings::Settings,
    telemetry,
    worker::Worker,
};

/// Added to the longer drain for the workers to give back what did not finish, and the rest to
/// return.
const STOP_MARGIN: Duration = Duration::from_secs(10);

/// Runs the evaluation loop and maintenance beside it until `shutdown`, then waits for both:
/// the loop drains its running evaluations first. For tests that run workers of their own;
/// `serve` and `worker` run the two as named tasks of their supervisor.
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

    /// Puts the API's listener, the metrics listener, the read replica's lag watch and the
    /// workers with maintenance under `supervisor`, each a named task stopped by its token: the
    /// listener then stops accepting and finishes open requests, the workers drain.
    pub fn supervise(self, supervisor: &mut Supervisor) {
        let shutdown = supervisor.shutdown();
        // The read replica's lag, measured while the API serves the reads that go there.
        if let Some(replica) = self.state.store.replica() {
            supervisor.spawn("replica lag watch", replica.clone().watch(shutdown.clone()));
        }
        if let Some((worker, maintenance)) = self.workers {
            supervisor.spawn("worker loop", worker.run(shutdown.clone()));
            supervisor.spawn("maintenance", maintenance.run(shutdown.clone()));
        }
        if let Some((listener, _)) = self.metrics {
            let router = http::metrics_router(
                self.state.queue.clone(),
                self.state.store.clone(),
                Arc::clone(&self.state.rules),
                telemetry::metrics_handle(),
                self.state.settings.database.backend_timeout,
            );
            supervisor.spawn(
                "metrics listener",
                serve_metrics(listener, router, shutdown.clone()),
            );
        }
        let connection_limits = ConnectionLimits::from(&self.state.settings.http);
        let pages = console::router(self.state.clone(), self.sessions);
        supervisor.spawn(
            "API listener",
            http::server::serve(
                self.listener,
                http::router_with(self.state, pages),
                connection_limits,
                shutdown,
            ),
        );
    }

    /// Serves until `shutdown` fires, under a supervisor of its own ([`Application::supervise`]):
    /// an error names the task that ended unexpectedly.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let mut supervisor = Supervisor::new(shutdown, stop_deadline(&self.state.settings));
        self.supervise(&mut supervisor);
        Ok(supervisor.run().await?)
    }
}

/// How long a process's tasks have to stop once shutdown is asked: the longer of the workers'
/// drain and the API's, and a margin for giving back what did not finish.
pub fn stop_deadline(settings: &Settings) -> Duration {
    settings
        .worker
        .shutdown_timeout
        .max(settings.http.request_timeout)
        + STOP_MARGIN
}

async fn serve_metrics(
    listener: TcpListener,
    router: axum::Router,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .context("the metrics listener failed")
}

/// Serves `/metrics` and `/healthz` on `settings.metrics_listen`, if set, until `shutdown`
/// (for `quiesce worker`; `serve` runs its own through [`Application`]), under `supervisor`.
pub async fn spawn_metrics_listener(
    settings: &Settings,
    backends: &Backends,
    supervisor: &mut Supervisor,
) -> anyhow::Result<()> {
    let Some(address) = settings.telemetry.metrics_listen else {
        return Ok(());
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
    supervisor.spawn(
        "metrics listener",
        serve_metrics(listener, router, supervisor.shutdown()),
    );
    Ok(())
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
