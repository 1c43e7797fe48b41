//! What a platform's webhook sender does, in a few lines: sends a vote and a flag for one post to
//! quiesce, signed the Standard Webhooks way when a secret is given, and prints the answer.
//!
//! ```sh
//! ./target/debug/examples/signed_sender http://127.0.0.1:8080 [whsec_...]
//! ```
//!
//! (`make run` builds it with the binaries: building an example turns on the features the test
//! build uses, so `make run` and `make test` share one build of the dependencies.)

use quiesce::credentials::WebhookSecret;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let base = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:8080".to_owned());
    let secret = args
        .next()
        .map(|raw| WebhookSecret::parse(&raw).map_err(anyhow::Error::msg))
        .transpose()?;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let body = serde_json::to_vec(&serde_json::json!([
        {"id": format!("{run}-1"), "entity": "post:example", "type": "upvote", "actor": "user:1"},
        {"id": format!("{run}-2"), "entity": "post:example", "type": "flag", "actor": "user:2"},
    ]))?;
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/events", base.trim_end_matches('/')))
        .header("content-type", "application/json");
    if let Some(secret) = &secret {
        // The signature covers the id, the time and the exact bytes sent.
        let timestamp = chrono::Utc::now().timestamp();
        request = request
            .header("webhook-id", &run)
            .header("webhook-timestamp", timestamp)
            .header("webhook-signature", secret.sign(&run, timestamp, &body));
    }
    let response = request.body(body).send().await?;
    let status = response.status();
    println!("{}", response.text().await?);
    anyhow::ensure!(status.is_success(), "quiesce answered {status}");
    Ok(())
}
