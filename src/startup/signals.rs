//! The process' signals: SIGTERM or ctrl-c stops it, SIGHUP reads the active rules version again
//! (each told to the service manager).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::{
    active_rules, audit,
    domain::Actor,
    rules::Rules,
    store::Store,
    telemetry::{Chain, OrNone},
};

/// On SIGHUP, reads which rules version is active from Postgres again and puts it in force
/// (what the listener and the poll do by themselves; the rules file is not read again). A
/// reload is recorded in the audit trail as `signal:SIGHUP`. Runs until `shutdown`, under the
/// supervisor.
pub async fn reload_rules_on_sighup(rules: Arc<Rules>, store: Store, shutdown: CancellationToken) {
    #[cfg(unix)]
    {
        let mut hangups = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::hangup(),
        ) {
            Ok(hangups) => hangups,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGHUP; the rules are followed without it");
                return shutdown.cancelled().await;
            }
        };
        while let Some(()) = tokio::select! {
            () = shutdown.cancelled() => None,
            hangup = hangups.recv() => hangup,
        } {
            super::systemd::notify(&[sd_notify::NotifyState::Reloading]);
            let before = rules.current();
            let before = (before.rules().len(), before.version());
            match active_rules::sync(&store, &rules).await {
                Ok(synced) => {
                    let after = rules.current();
                    let after = (after.rules().len(), after.version());
                    tracing::info!(rules = after.0, version = %OrNone(after.1), changed = synced.is_some_and(|s| s.changed), "rules reloaded");
                    let actor = Actor::named("signal:SIGHUP", None);
                    audit::record(&store, &actor, audit::rules_reloaded(before, after)).await;
                }
                Err(error) => {
                    tracing::error!(error = %Chain(&error), "rules reload failed; the rules in force stay")
                }
            }
            super::systemd::notify(&[sd_notify::NotifyState::Ready]);
        }
    }
    #[cfg(not(unix))]
    shutdown.cancelled().await;
}

/// Cancels `shutdown` on SIGTERM or ctrl-c (the HTTP server and the workers share it), then
/// returns; returns at once if something else cancelled it.
pub async fn shutdown_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = shutdown.cancelled() => return,
        _ = ctrl_c => {}
        _ = terminate => {}
    }
    tracing::info!("shutdown requested: no new claims, finishing running evaluations");
    super::systemd::notify(&[sd_notify::NotifyState::Stopping]);
    shutdown.cancel();
}
