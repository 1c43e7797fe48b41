//! The process' signals: SIGTERM or ctrl-c stops it, SIGHUP reloads the rules.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::{audit, domain::Actor, rules::Rules, store::Store};

/// Reloads the rules on SIGHUP; an invalid file is refused and the rules in force stay. A
/// reload is recorded in the audit trail as `signal:SIGHUP`.
pub fn reload_rules_on_sighup(rules: Arc<Rules>, store: Store) {
    #[cfg(unix)]
    tokio::spawn(async move {
        let Ok(mut hangups) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        else {
            return;
        };
        while hangups.recv().await.is_some() {
            let before = rules.current().rules().len();
            match rules.reload() {
                Ok(count) => {
                    tracing::info!(rules = count, "rules reloaded");
                    let actor = Actor::named("signal:SIGHUP", None);
                    audit::record(&store, &actor, audit::rules_reloaded(before, count)).await;
                }
                Err(error) => {
                    tracing::error!(%error, "rules reload refused; the rules in force stay")
                }
            }
        }
    });
}

/// A token cancelled on SIGTERM or ctrl-c; the HTTP server and the workers share it.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
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
            _ = ctrl_c => {}
            _ = terminate => {}
        }
        tracing::info!("shutdown requested: no new claims, finishing running evaluations");
        trigger.cancel();
    });
    token
}
