//! Outbound webhooks: the dispatcher delivers outbox rows (written in the same transaction as
//! the action or reversal they describe) to the platform, signed the Standard Webhooks way.
//! Delivery is at least once; `webhook-id` is stable per action, so receivers dedupe on it.

use std::{sync::Arc, time::Duration};

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{
    credentials::WebhookSecret,
    settings::Settings,
    store::{OutboxRow, Store, StoreError},
    telemetry::{
        Timed, names,
        traces::{self, TraceParent},
    },
};

#[derive(Clone)]
pub struct DeliverySettings {
    pub url: String,
    pub secret: Option<WebhookSecret>,
    pub timeout: Duration,
    pub horizon: Duration,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    pub batch: usize,
    pub poll_interval: Duration,
}

impl DeliverySettings {
    /// `None` when no webhook URL is configured (rows then wait in the outbox).
    pub fn from_settings(settings: &Settings) -> Option<Self> {
        let delivery = &settings.delivery;
        let url = delivery.webhook_url.clone()?;
        Some(Self {
            url,
            secret: delivery.webhook_secret.clone(),
            timeout: delivery.delivery_timeout,
            horizon: delivery.delivery_horizon,
            backoff_base: delivery.delivery_backoff_base,
            backoff_max: delivery.delivery_backoff_max,
            batch: DELIVERY_BATCH,
            poll_interval: settings.worker.poll_interval.max(Duration::from_millis(50)),
        })
    }
}

/// Rows one dispatcher pass takes.
const DELIVERY_BATCH: usize = 64;

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryRound {
    pub delivered: usize,
    pub retried: usize,
    pub gave_up: usize,
}

#[derive(Clone)]
pub struct Dispatcher {
    store: Store,
    client: reqwest::Client,
    settings: Arc<DeliverySettings>,
}

/// How one attempt ended.
enum Attempt {
    Delivered(u16),
    /// Failed; try again after this long (from Retry-After on a 429, else the backoff).
    Failed {
        status: Option<u16>,
        error: String,
        retry_after: Option<Duration>,
    },
}

impl Dispatcher {
    pub fn new(store: Store, settings: DeliverySettings) -> Self {
        let client = super::http_client(settings.timeout);
        Self {
            store,
            client,
            settings: Arc::new(settings),
        }
    }

    /// Delivers the rows that are due, concurrently; failures are re-scheduled with an
    /// exponential backoff and full jitter (or the receiver's Retry-After on a 429), and given
    /// up past the horizon.
    #[tracing::instrument(level = "debug", name = "delivery_pass", skip_all)]
    pub async fn deliver_once(&self) -> Result<DeliveryRound, StoreError> {
        // A claimed row is not taken again until the attempt had time to finish.
        let claim_for = self.settings.timeout * 2 + Duration::from_secs(1);
        let rows = self
            .store
            .outbox()
            .claim_deliveries("platform", self.settings.batch, claim_for)
            .timed_query("claim_deliveries")
            .await?;
        let attempts = futures::future::join_all(rows.iter().map(|row| {
            let span = tracing::info_span!("delivery", id = row.id, topic = %row.topic, attempts = row.attempts);
            // The trace of the action it carries goes on to the receiver.
            let action = row.traceparent.as_deref().and_then(TraceParent::parse);
            traces::continue_trace(&span, action.as_ref());
            self.attempt(row).instrument(span)
        }))
        .await;
        let mut round = DeliveryRound::default();
        for (row, attempt) in rows.iter().zip(attempts) {
            match attempt {
                Attempt::Delivered(status) => {
                    self.store.outbox().mark_delivered(row.id, status).await?;
                    metrics::counter!(names::DELIVERIES, "outcome" => "delivered").increment(1);
                    round.delivered += 1;
                }
                Attempt::Failed {
                    status,
                    error,
                    retry_after,
                } => {
                    let delay = retry_after.unwrap_or_else(|| self.backoff(row.attempts));
                    let gave_up = self
                        .store
                        .outbox()
                        .reschedule_delivery(row.id, status, &error, delay, self.settings.horizon)
                        .await?;
                    if gave_up {
                        metrics::counter!(names::DELIVERIES, "outcome" => "gave_up").increment(1);
                        tracing::error!(id = row.id, %error, "webhook delivery given up");
                        round.gave_up += 1;
                    } else {
                        metrics::counter!(names::DELIVERIES, "outcome" => "retried").increment(1);
                        round.retried += 1;
                    }
                }
            }
        }
        Ok(round)
    }

    async fn attempt(&self, row: &OutboxRow) -> Attempt {
        let body = serde_json::to_vec(&serde_json::json!({
            "type": row.topic,
            "timestamp": row.created_at,
            "data": row.payload,
        }))
        .expect("JSON values serialize");
        let timestamp = chrono::Utc::now().timestamp();
        let mut request = self
            .client
            .post(&self.settings.url)
            .header("content-type", "application/json")
            .header("webhook-id", &row.idempotency_key)
            .header("webhook-timestamp", timestamp.to_string());
        if let Some(trace) = TraceParent::of_span(&tracing::Span::current()) {
            request = request.header("traceparent", trace.as_str());
        }
        if let Some(secret) = &self.settings.secret {
            request = request.header(
                "webhook-signature",
                secret.sign(&row.idempotency_key, timestamp, &body),
            );
        }
        match request.body(body).send().await {
            Ok(response) if response.status().is_success() => {
                Attempt::Delivered(response.status().as_u16())
            }
            Ok(response) => {
                let status = response.status().as_u16();
                let retry_after =
                    super::retry_after(status, response.headers(), self.settings.backoff_max);
                Attempt::Failed {
                    status: Some(status),
                    error: format!("the receiver answered {status}"),
                    retry_after,
                }
            }
            Err(error) => Attempt::Failed {
                status: None,
                // reqwest names the URL, which may carry a password.
                error: crate::credentials::redact_passwords(&format!("request failed: {error}")),
                retry_after: None,
            },
        }
    }

    fn backoff(&self, attempts: i32) -> Duration {
        super::full_jitter(
            self.settings.backoff_base,
            self.settings.backoff_max,
            attempts,
        )
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let idle = self.settings.poll_interval;
        super::run_passes(shutdown, idle, || async {
            match self.deliver_once().await {
                Ok(round) => round.delivered + round.retried + round.gave_up >= self.settings.batch,
                Err(error) => {
                    self.store.notice(&error);
                    tracing::warn!(error = %crate::telemetry::Chain(&error), "webhook dispatcher pass failed");
                    false
                }
            }
        })
        .await
    }
}
