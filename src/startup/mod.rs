//! Wiring: settings -> connections -> the HTTP server, the workers and maintenance, under one
//! shutdown token. `quiesce serve` and `quiesce worker` share one boot ([`serve`], [`work`]).

mod application;
mod backends;
mod connect;
mod open_files;
mod signals;
mod supervisor;
mod systemd;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use self::{
    application::{Application, run_workers, spawn_metrics_listener, stop_deadline},
    backends::Backends,
    connect::{
        connect_postgres, connect_redis, connect_store, keyspace, load_rules, prepare_database,
    },
    open_files::{ensure_open_files, files_needed},
    signals::{reload_rules_on_sighup, shutdown_on_signal},
    supervisor::{HowItEnded, Supervisor, TaskDied, TaskEnd},
};
use crate::{
    actions::{DeliverySettings, Dispatcher, DsaSettings, DsaSubmitter},
    active_rules,
    settings::{ConfigArgs, Settings},
    telemetry,
};

/// The log levels of `serve`, `worker` and `migrate` when `RUST_LOG` names none. sqlx's pool
/// logs an error for each connection the primary fence refuses, on every retry: the fence
/// logs the refusal itself, once (store/primary.rs).
pub const SERVICE_LOGS: &str = "info,sqlx=warn,sqlx_core::pool::inner=off,tower_http=warn";

/// The log levels of a command that prints a report or a result (`rules backtest`, `audit`,
/// ...) when `RUST_LOG` names none: warnings and errors only, so that what it prints is all a
/// person sees unless something needs their attention.
pub const REPORT_LOGS: &str = "warn";

/// The settings of `serve`, `worker` or `migrate`, and the logs started as they ask (to
/// stderr, at [`SERVICE_LOGS`]).
pub fn load_settings(args: &ConfigArgs) -> anyhow::Result<Settings> {
    load_settings_logging(args, SERVICE_LOGS)
}

/// The settings of a command that prints a report, and its logs at [`REPORT_LOGS`].
pub fn load_report_settings(args: &ConfigArgs) -> anyhow::Result<Settings> {
    load_settings_logging(args, REPORT_LOGS)
}

fn load_settings_logging(args: &ConfigArgs, default_logs: &str) -> anyhow::Result<Settings> {
    let settings = Settings::load(args)?;
    telemetry::init_tracing(settings.telemetry.log_format, default_logs);
    if settings.maintenance.test_short_retention {
        tracing::warn!(
            retention = %humantime::format_duration(settings.maintenance.retention),
            "test_short_retention is set: a TEST ONLY setting (retention below 1h); never in production"
        );
    }
    Ok(settings)
}

/// `quiesce serve`: the HTTP API and the workers in one process, until SIGTERM or ctrl-c, or
/// until one of its tasks ends unexpectedly (an error naming it: the process exits non-zero).
pub async fn serve(settings: Settings) -> anyhow::Result<()> {
    settings
        .security
        .check_serving()
        .map_err(anyhow::Error::msg)?;
    ensure_open_files(&settings)?;
    if settings.security.insecure_dev {
        tracing::warn!("--insecure-dev: the API runs without tokens or inbound signatures");
    }
    let mut booted = boot(&settings).await?;
    let worker = booted.backends.worker(&settings);
    let app = Application::build(&settings, &booted.backends, Some(worker)).await?;
    tracing::info!(
        address = %app.address(),
        metrics = %app.metrics_address().map_or_else(|| "off".to_owned(), |a| a.to_string()),
        rules = booted.backends.rules.current().rules().len(),
        rules_version = %telemetry::OrNone(booted.backends.rules.current().version()),
        "quiesce is serving"
    );
    app.supervise(&mut booted.supervisor);
    systemd::notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status("serving"),
    ]);
    Ok(booted.supervisor.run().await?)
}

/// `quiesce worker`: workers and maintenance only (with a metrics listener if one is set),
/// until SIGTERM or ctrl-c, or until one of its tasks ends unexpectedly (as `serve`).
pub async fn work(settings: Settings) -> anyhow::Result<()> {
    let mut booted = boot(&settings).await?;
    let _ = telemetry::metrics_handle();
    spawn_metrics_listener(&settings, &booted.backends, &mut booted.supervisor).await?;
    // The banner once every listener is bound.
    tracing::info!(
        workers = settings.worker.workers,
        rules_version = %telemetry::OrNone(booted.backends.rules.current().version()),
        "quiesce worker started"
    );
    let shutdown = booted.supervisor.shutdown();
    let supervisor = &mut booted.supervisor;
    supervisor.spawn(
        "worker loop",
        booted.backends.worker(&settings).run(shutdown.clone()),
    );
    supervisor.spawn(
        "maintenance",
        booted.backends.maintenance(&settings).run(shutdown),
    );
    systemd::notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status("working"),
    ]);
    Ok(booted.supervisor.run().await?)
}

/// What serving and working both start from: the backends connected and checked, and the
/// supervisor already running the signal handlers (SIGTERM and ctrl-c cancel its token, SIGHUP
/// reads the active rules version again), the rules follower and the dispatchers.
struct Booted {
    backends: Backends,
    supervisor: Supervisor,
}

/// Loads the rules, prepares the database, connects Postgres and Redis and checks them (Redis'
/// durability, the schedule belonging to the database).
async fn boot(settings: &Settings) -> anyhow::Result<Booted> {
    let rules = Arc::new(load_rules(settings)?);
    prepare_database(settings).await?;
    let backends = Backends::connect(settings, rules).await?;
    backends.check_redis_durability().await;
    backends.check_schedule_matches_database(settings).await?;
    let mut supervisor = Supervisor::new(CancellationToken::new(), stop_deadline(settings));
    let shutdown = supervisor.shutdown();
    supervisor.spawn(
        "shutdown signal handler",
        shutdown_on_signal(shutdown.clone()),
    );
    supervisor.spawn(
        "SIGHUP rules reload",
        reload_rules_on_sighup(
            Arc::clone(&backends.rules),
            backends.store.clone(),
            shutdown.clone(),
        ),
    );
    supervisor.spawn(
        "rules follower",
        active_rules::follow(
            backends.store.clone(),
            Arc::clone(&backends.rules),
            settings.moderation.rules_poll_interval,
            shutdown,
        ),
    );
    spawn_dispatchers(settings, &backends, &mut supervisor);
    Ok(Booted {
        backends,
        supervisor,
    })
}

/// Starts the webhook dispatcher if a webhook URL is configured, and the Transparency
/// Database's submitter if `dsa_endpoint` and `dsa_token` are, under `supervisor`.
fn spawn_dispatchers(settings: &Settings, backends: &Backends, supervisor: &mut Supervisor) {
    let shutdown = supervisor.shutdown();
    if let Some(dsa) = DsaSettings::from_settings(settings) {
        tracing::info!(endpoint = %crate::credentials::redact_passwords(&dsa.endpoint), "Transparency Database submitter started");
        supervisor.spawn(
            "Transparency Database submitter",
            DsaSubmitter::new(backends.store.clone(), dsa).run(shutdown.clone()),
        );
    }
    if let Some(delivery) = DeliverySettings::from_settings(settings) {
        tracing::info!(url = %crate::credentials::redact_passwords(&delivery.url), signed = delivery.secret.is_some(), "webhook dispatcher started");
        supervisor.spawn(
            "webhook dispatcher",
            Dispatcher::new(backends.store.clone(), delivery).run(shutdown),
        );
    }
}
