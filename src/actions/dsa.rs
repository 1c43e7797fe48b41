//! Statements of reasons to the EU's DSA Transparency Database: the outbox's `dsa` rows (each
//! written with its decision, `store/statements.rs`) in batches of up to 100 to the API's
//! `statements` endpoint with the platform's bearer token. A statement is sent once: a 422
//! saying its platform unique identifier was already submitted means an earlier answer was
//! lost and it is delivered; a 422 about its fields gives it up at once, with the field errors,
//! among the failed deliveries; a 429 (the database's rate limit, per token) stops every batch
//! of this process until its `Retry-After` has passed; anything else is retried with the
//! webhooks' backoff. A statement stored in the 2023 schema (written before quiesce wrote the
//! schema in force) is sent converted (`domain::upgrade_2023`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use secrecy::{ExposeSecret, SecretString};
use tokio_util::sync::CancellationToken;

use crate::{
    domain::upgrade_2023,
    settings::Settings,
    store::{OutboxRow, Store, StoreError},
    telemetry::{Timed, names},
};

/// The most statements the API takes in one request.
pub const DSA_BATCH: usize = 100;

#[derive(Clone)]
pub struct DsaSettings {
    /// The API's base (`.../api/v1`); batches go to `{endpoint}/statements`.
    pub endpoint: String,
    pub token: SecretString,
    pub timeout: Duration,
    pub horizon: Duration,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    pub poll_interval: Duration,
}

impl DsaSettings {
    /// `None` unless both `dsa_endpoint` and `dsa_token` are set.
    pub fn from_settings(settings: &Settings) -> Option<Self> {
        let delivery = &settings.delivery;
        Some(Self {
            endpoint: delivery.dsa_endpoint.clone()?,
            token: delivery.dsa_token.clone()?,
            timeout: delivery.delivery_timeout,
            horizon: delivery.delivery_horizon,
            backoff_base: delivery.delivery_backoff_base,
            backoff_max: delivery.delivery_backoff_max,
            poll_interval: settings.worker.poll_interval.max(Duration::from_millis(50)),
        })
    }
}

/// What the API said of one statement of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ItemOutcome {
    Stored,
    /// Refused for good: its field errors.
    Refused(String),
    /// Not stored, through no fault of its own (the batch failed): try again.
    Retry(String),
}

/// Reads the API's answer into one outcome per statement sent (`puids`, in order).
fn outcomes(status: u16, body: &serde_json::Value, puids: &[String]) -> Vec<ItemOutcome> {
    if (200..300).contains(&status) {
        return vec![ItemOutcome::Stored; puids.len()];
    }
    if status != 422 {
        let why = format!("the Transparency Database answered {status}");
        return vec![ItemOutcome::Retry(why); puids.len()];
    }
    // A 422 refuses the whole batch. Its field errors are keyed `statements.<n>.<field>`; a
    // duplicate identifier is reported as `errors.puid` with `errors.existing_puids`, the
    // identifiers already submitted (or repeated in the batch).
    let existing: Vec<String> = body["errors"]["existing_puids"]
        .as_array()
        .or(body["existing_puids"].as_array())
        .map(|ids| {
            ids.iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut errors: HashMap<usize, Vec<String>> = HashMap::new();
    let said = |messages: &serde_json::Value| -> String {
        let texts: Vec<&str> = messages
            .as_array()
            .map(|m| m.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        texts.join("; ")
    };
    if let Some(fields) = body["errors"].as_object() {
        for (key, value) in fields {
            // The API keys a statement's errors `statement_<n>` (an object of fields); an
            // earlier form keyed each field `statements.<n>.<field>`.
            if let Some(index) = key.strip_prefix("statement_")
                && let Ok(index) = index.parse::<usize>()
                && let Some(by_field) = value.as_object()
            {
                for (field, messages) in by_field {
                    errors
                        .entry(index)
                        .or_default()
                        .push(format!("{field}: {}", said(messages)));
                }
                continue;
            }
            let mut parts = key.splitn(3, '.');
            if let (Some("statements"), Some(index), Some(field)) =
                (parts.next(), parts.next(), parts.next())
                && let Ok(index) = index.parse::<usize>()
            {
                errors
                    .entry(index)
                    .or_default()
                    .push(format!("{field}: {}", said(value)));
            }
        }
    }
    puids
        .iter()
        .enumerate()
        .map(|(i, puid)| {
            if existing.iter().any(|e| e == puid) {
                return ItemOutcome::Stored;
            }
            match errors.get(&i) {
                // An error on the identifier alone is the duplicate the API reports.
                Some(found)
                    if found.iter().all(|e| e.starts_with("puid:")) && is_duplicate(found) =>
                {
                    ItemOutcome::Stored
                }
                Some(found) => ItemOutcome::Refused(found.join(" | ")),
                None => ItemOutcome::Retry("another statement of its batch was refused".into()),
            }
        })
        .collect()
}

fn is_duplicate(errors: &[String]) -> bool {
    errors.iter().any(|e| {
        let e = e.to_lowercase();
        e.contains("unique") || e.contains("already") || e.contains("exist")
    })
}

/// The statement a claimed row sends: as stored, or converted from the 2023 schema.
fn statement_of(row: &OutboxRow) -> serde_json::Value {
    let mut statement = row.payload["statement"].clone();
    if let Some(fields) = statement.as_object_mut() {
        let decided_by = row.payload["decided_by"].as_str().unwrap_or("automated");
        let since = row.payload["content_since"].as_str();
        if upgrade_2023(fields, decided_by, since) {
            tracing::info!(
                id = row.id,
                "a statement of the 2023 schema is sent in the schema in force"
            );
        }
    }
    statement
}

#[derive(Clone)]
pub struct DsaSubmitter {
    store: Store,
    client: reqwest::Client,
    settings: Arc<DsaSettings>,
    /// Until when the database asked this process to send nothing (a 429's Retry-After).
    paused_until: Arc<Mutex<Option<tokio::time::Instant>>>,
}

impl DsaSubmitter {
    pub fn new(store: Store, settings: DsaSettings) -> Self {
        let client = super::http_client(settings.timeout);
        Self {
            store,
            client,
            settings: Arc::new(settings),
            paused_until: Arc::default(),
        }
    }

    /// Whether a 429's Retry-After still holds every batch back.
    fn paused(&self) -> bool {
        let paused = self.paused_until.lock().expect("not poisoned");
        paused.is_some_and(|until| tokio::time::Instant::now() < until)
    }

    /// Sends one batch of due statements; returns how many rows it took (none while a 429's
    /// Retry-After holds).
    pub async fn submit_once(&self) -> Result<usize, StoreError> {
        if self.paused() {
            return Ok(0);
        }
        let claim_for = self.settings.timeout * 2 + Duration::from_secs(1);
        let rows = self
            .store
            .outbox()
            .claim_deliveries("dsa", DSA_BATCH, claim_for)
            .timed_query("claim_deliveries")
            .await?;
        if rows.is_empty() {
            return Ok(0);
        }
        let statements: Vec<serde_json::Value> = rows.iter().map(statement_of).collect();
        let puids: Vec<String> = statements
            .iter()
            .map(|s| s["puid"].as_str().unwrap_or_default().to_owned())
            .collect();
        let url = format!(
            "{}/statements",
            self.settings.endpoint.trim_end_matches('/')
        );
        let answer = self
            .client
            .post(&url)
            .bearer_auth(self.settings.token.expose_secret())
            .header("accept", "application/json")
            .json(&serde_json::json!({ "statements": statements }))
            .send()
            .await;
        let mut wait = None;
        let (status, results) = match answer {
            Ok(response) => {
                let status = response.status().as_u16();
                // The limit is the token's: no batch goes before the time it names.
                wait = super::retry_after(status, response.headers(), self.settings.horizon);
                if let Some(wait) = wait {
                    *self.paused_until.lock().expect("not poisoned") =
                        Some(tokio::time::Instant::now() + wait);
                    tracing::warn!(?wait, "the Transparency Database asked to wait (429)");
                }
                let body = response
                    .json::<serde_json::Value>()
                    .await
                    .unwrap_or_default();
                (Some(status), outcomes(status, &body, &puids))
            }
            Err(error) => {
                // reqwest names the URL; the token is in a header, never in the message.
                let why = crate::credentials::redact_passwords(&format!("request failed: {error}"));
                (None, vec![ItemOutcome::Retry(why); rows.len()])
            }
        };
        for (row, outcome) in rows.iter().zip(results) {
            self.settle(row, status, outcome, wait).await?;
        }
        Ok(rows.len())
    }

    /// Records what became of one statement; `wait`: the 429's Retry-After, when it said one.
    async fn settle(
        &self,
        row: &OutboxRow,
        status: Option<u16>,
        outcome: ItemOutcome,
        wait: Option<Duration>,
    ) -> Result<(), StoreError> {
        match outcome {
            ItemOutcome::Stored => {
                self.store
                    .outbox()
                    .mark_delivered(row.id, status.unwrap_or(200))
                    .await?;
                metrics::counter!(names::DSA_SUBMISSIONS, "outcome" => "delivered").increment(1);
            }
            ItemOutcome::Refused(errors) => {
                tracing::error!(id = row.id, %errors, "the Transparency Database refused a statement");
                self.store
                    .outbox()
                    .fail_delivery(row.id, status.unwrap_or(422), &errors)
                    .await?;
                metrics::counter!(names::DSA_SUBMISSIONS, "outcome" => "refused").increment(1);
            }
            ItemOutcome::Retry(error) => {
                let delay = wait.unwrap_or_else(|| self.backoff(row.attempts));
                let gave_up = self
                    .store
                    .outbox()
                    .reschedule_delivery(row.id, status, &error, delay, self.settings.horizon)
                    .await?;
                let outcome = if gave_up { "gave_up" } else { "retried" };
                metrics::counter!(names::DSA_SUBMISSIONS, "outcome" => outcome).increment(1);
            }
        }
        Ok(())
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
            match self.submit_once().await {
                Ok(taken) => taken >= DSA_BATCH,
                Err(error) => {
                    self.store.notice(&error);
                    tracing::warn!(error = %crate::telemetry::Chain(&error), "Transparency Database submission pass failed");
                    false
                }
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn puids() -> Vec<String> {
        vec!["quiesce-a".into(), "quiesce-b".into(), "quiesce-c".into()]
    }

    #[test]
    fn a_created_batch_is_stored_whole() {
        assert_eq!(
            outcomes(201, &serde_json::json!({}), &puids()),
            vec![ItemOutcome::Stored; 3]
        );
    }

    #[test]
    fn a_422_stores_the_known_puids_refuses_the_bad_and_retries_the_rest() {
        let body = serde_json::json!({
            "errors": {
                "statement_1": {"category": ["The selected category is invalid."]},
                "statements.2.puid": ["The identifier given is not unique within this platform."]
            },
        });
        let got = outcomes(422, &body, &puids());
        assert!(matches!(got[0], ItemOutcome::Retry(_)));
        assert_eq!(
            got[1],
            ItemOutcome::Refused("category: The selected category is invalid.".into())
        );
        assert_eq!(got[2], ItemOutcome::Stored);
    }

    #[test]
    fn identifiers_already_submitted_are_delivered_and_the_others_of_the_batch_retried() {
        let body = serde_json::json!({
            "message": "The platform identifier(s) are not all unique within this call.",
            "errors": {
                "puid": ["The platform identifier(s) are not all unique within this call."],
                "existing_puids": ["quiesce-a", "quiesce-c"]
            }
        });
        let got = outcomes(422, &body, &puids());
        assert_eq!(got[0], ItemOutcome::Stored);
        assert!(matches!(got[1], ItemOutcome::Retry(_)));
        assert_eq!(got[2], ItemOutcome::Stored);
    }

    #[test]
    fn anything_else_is_retried() {
        assert!(
            outcomes(503, &serde_json::json!({}), &puids())
                .iter()
                .all(|o| matches!(o, ItemOutcome::Retry(_)))
        );
    }
}
