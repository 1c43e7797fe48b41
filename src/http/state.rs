//! What every handler shares, built from the settings in one place ([`AppState::new`]): the
//! handlers read their limits from the settings themselves, so a new setting is one field.

use std::{collections::HashMap, sync::Arc};

use secrecy::SecretString;
use tokio::sync::{Notify, Semaphore};

use super::{
    auth::Auth,
    limits::{IngestSlots, RateLimits},
    signature::InboundSecrets,
};
use crate::{
    backtest::BacktestSemaphore, credentials::WebhookSecret, ingest::Ingestor, queue::Queue,
    rules::Rules, settings::Settings, store::Store,
};

/// What every handler shares. Axum clones the state for each request (and each layer that
/// holds it), so it is one `Arc`: a clone is one atomic increment, not a copy of every handle.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

pub struct Shared {
    pub store: Store,
    pub rules: Arc<Rules>,
    /// API tokens and their roles.
    pub auth: Arc<Auth>,
    /// Secrets inbound events must be signed with (none configured: not checked).
    pub inbound: Arc<InboundSecrets>,
    /// Named sources and the secrets each signs with.
    pub sources: Arc<HashMap<String, InboundSecrets>>,
    pub rate_limits: Arc<RateLimits>,
    pub ingest_slots: IngestSlots,
    pub queue: Queue,
    pub ingestor: Ingestor,
    /// The process' settings: request limits, timeouts, the override after a reversal.
    pub settings: Arc<Settings>,
    /// One backtest at a time in this process (the API's and the console's).
    pub backtests: Arc<BacktestSemaphore>,
}

impl AppState {
    /// The state the settings describe, on these backends; starts the ingest group commit
    /// (which wakes workers of this process through `wakeup`).
    pub fn new(
        settings: &Settings,
        store: Store,
        queue: Queue,
        rules: Arc<Rules>,
        wakeup: Arc<Notify>,
    ) -> Self {
        let security = &settings.security;
        let secrets = |standard: &[WebhookSecret], github: &[SecretString]| {
            InboundSecrets::new(standard, github, security.signature_tolerance)
        };
        let sources = security
            .sources
            .iter()
            .map(|source| {
                let signing = secrets(&source.secrets, &source.github_secrets);
                (source.name.clone(), signing)
            })
            .collect();
        let ingestor = Ingestor::start(
            store.clone(),
            queue.clone(),
            wakeup,
            settings.database.backend_timeout,
        );
        Self(Arc::new(Shared {
            store,
            queue,
            ingestor,
            rules,
            // --insecure-dev waives what is missing; whatever is configured is enforced.
            auth: Arc::new(Auth::new(
                security.api_tokens.clone(),
                !security.insecure_dev || !security.api_tokens.is_empty(),
            )),
            inbound: Arc::new(secrets(
                &security.inbound_secrets,
                &security.inbound_github_secrets,
            )),
            sources: Arc::new(sources),
            rate_limits: Arc::new(RateLimits::new(&settings.http, &security.sources)),
            ingest_slots: Arc::new(Semaphore::new(settings.http.max_concurrent_ingest)),
            backtests: Arc::new(BacktestSemaphore::default()),
            settings: Arc::new(settings.clone()),
        }))
    }
}
