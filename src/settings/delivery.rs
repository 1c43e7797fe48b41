//! Outbound webhooks: where applied actions, reversals and overrides are delivered.

use super::value::InvalidValue;
use std::time::Duration;

use super::declare::{nonzero, section};
use crate::credentials::WebhookSecret;
use secrecy::SecretString;

section! {
    /// Outbound webhooks: where applied actions, reversals and overrides are delivered.
    pub struct Delivery("delivery", heading "Webhook delivery"), flags DeliveryFlags {
        /// URL that receives applied actions, reversals and overrides as signed webhooks;
        /// without it the rows wait in the outbox.
        #[value_name = "URL"]
        webhook_url: Option<String> = None, check http_url;
        /// Standard Webhooks secret (whsec_<base64>, at least 16 bytes) that signs deliveries;
        /// without it deliveries are unsigned.
        webhook_secret: Option<WebhookSecret> = None;
        /// Longest wait for the receiver's answer.
        delivery_timeout: Duration = Duration::from_secs(10), check nonzero;
        /// How long a webhook is retried before it joins the failed deliveries.
        delivery_horizon: Duration = Duration::from_secs(24 * 3600), check nonzero;
        /// Backoff after the first failed delivery; doubles per attempt, full jitter.
        delivery_backoff_base: Duration = Duration::from_secs(1), check nonzero;
        /// Longest delivery backoff, and the longest Retry-After of a webhook receiver honoured
        /// (the Transparency Database's is honoured up to delivery_horizon).
        delivery_backoff_max: Duration = Duration::from_secs(600);
        /// The DSA Transparency Database's API (e.g.
        /// https://transparency.dsa.ec.europa.eu/api/v1): with dsa_token set, every statement
        /// of reasons is submitted to its `statements` endpoint, in batches of up to 100.
        #[value_name = "URL"]
        dsa_endpoint: Option<String> = None, check http_url;
        /// The bearer token the Transparency Database gave the platform.
        dsa_token: Option<SecretString> = None;
    }
}

impl Delivery {
    /// Whether statements of reasons go to the Transparency Database: both settings given.
    pub fn dsa_configured(&self) -> bool {
        self.dsa_endpoint.is_some() && self.dsa_token.is_some()
    }
}

fn http_url(url: &Option<String>) -> Result<(), InvalidValue> {
    match url {
        Some(url) if !url.starts_with("http://") && !url.starts_with("https://") => {
            Err("expected an http:// or https:// URL".into())
        }
        _ => Ok(()),
    }
}
