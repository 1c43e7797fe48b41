//! The service manager's readiness protocol (systemd's `Type=notify`): READY=1 once the process
//! serves, RELOADING=1 then READY=1 around a SIGHUP reload, STOPPING=1 at shutdown. Started
//! without NOTIFY_SOCKET (not by systemd), nothing is sent.

use sd_notify::NotifyState;

/// Tells the service manager `states`; a failure is logged, never fatal (the process serves
/// all the same, and systemd's start timeout names the problem).
pub fn notify(states: &[NotifyState<'_>]) {
    if let Err(error) = sd_notify::notify(false, states) {
        tracing::warn!(%error, "could not notify the service manager (NOTIFY_SOCKET)");
    }
}
