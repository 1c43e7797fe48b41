//! Following the active version: a process hears of every publish and rollback through
//! Postgres LISTEN/NOTIFY, and checks on a poll as well, so that a notification lost (a
//! dropped listener connection, a notification sent while it reconnected) costs at most one
//! poll interval.

use std::{sync::Arc, time::Duration};

use sqlx::postgres::{PgListener, PgNotification};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::{ActiveRulesError, sync};
use crate::{rules::Rules, store::Store, telemetry::Chain};

/// Keeps the active version in force in this process until `shutdown`: on every notification,
/// on a lost listener connection (what was sent meanwhile is lost) and every `poll`.
pub async fn follow(store: Store, rules: Arc<Rules>, poll: Duration, shutdown: CancellationToken) {
    let mut listener = listen(&store).await;
    // Listening first, then checking: a publish between the two is seen either way.
    let mut outage = false;
    check(&store, &rules, &mut outage).await;
    let mut ticks = tokio::time::interval(poll);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {
                if listener.is_none() {
                    listener = listen(&store).await;
                }
            }
            heard = hear(&mut listener) => {
                if let Err(error) = heard {
                    tracing::warn!(error = %Chain(&error), "the rules listener failed; checking on the poll until it is back");
                    listener = None;
                }
            }
        }
        check(&store, &rules, &mut outage).await;
    }
}

async fn listen(store: &Store) -> Option<PgListener> {
    match store.rules_versions().listen_for_rules().await {
        Ok(listener) => Some(listener),
        Err(error) => {
            tracing::warn!(error = %Chain(&error), "cannot listen for rules versions; checking on the poll");
            None
        }
    }
}

/// The next notification; `Ok(None)` when the connection was lost (the next call reconnects).
async fn hear(listener: &mut Option<PgListener>) -> Result<Option<PgNotification>, sqlx::Error> {
    match listener {
        Some(listener) => listener.try_recv().await,
        None => std::future::pending().await,
    }
}

/// Checks the active version. Postgres unavailable is expected (a failover, a restart) and
/// retried on the poll: a warning when it starts and an info line when it ends, once per
/// outage (`outage` carries it between checks); any other failure is an error every time.
async fn check(store: &Store, rules: &Rules, outage: &mut bool) {
    match sync(store, rules).await {
        Ok(_) if *outage => {
            *outage = false;
            tracing::info!("the active rules version can be checked again");
        }
        Ok(_) => {}
        Err(ActiveRulesError::Store(error)) if error.is_unavailable() => {
            if !*outage {
                tracing::warn!(error = %Chain(&error), "cannot check the active rules version while Postgres is unavailable; the rules in force stay, checked again on the poll");
            }
            *outage = true;
        }
        Err(error) => {
            tracing::error!(error = %Chain(&error), "cannot check the active rules version; the rules in force stay")
        }
    }
}
