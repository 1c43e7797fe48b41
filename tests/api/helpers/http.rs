//! Requests: events as a platform sends them, signed or not, and the API's answers.

use std::time::Duration;

use serde_json::{Value, json};

use quiesce::credentials::WebhookSecret;
use quiesce::settings::Source;

use super::TestApp;

/// A Standard Webhooks secret for named-source tests.
pub const SHOP_SECRET: &str = crate::secrets::SHOP;
/// Another source's secret.
pub const FORUM_SECRET: &str = crate::secrets::FORUM;

/// A named source signing with `secrets`, at the global rate.
pub fn source(name: &str, secrets: &[&str]) -> Source {
    let secrets = secrets
        .iter()
        .map(|s| WebhookSecret::parse(s).expect("a whsec_ secret"))
        .collect();
    Source::new(name, secrets)
}

/// Standard Webhooks headers signing `body` with `secret` now.
pub fn signed_headers(secret: &str, body: &[u8]) -> reqwest::header::HeaderMap {
    let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
    let now = chrono::Utc::now().timestamp();
    let signature = WebhookSecret::parse(secret)
        .expect("a whsec_ secret")
        .sign(&id, now, body);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("webhook-id", id.parse().unwrap());
    headers.insert("webhook-timestamp", now.to_string().parse().unwrap());
    headers.insert("webhook-signature", signature.parse().unwrap());
    headers.insert("content-type", "application/json".parse().unwrap());
    headers
}

/// One event as a platform would send it.
pub fn event(id: &str, entity: &str, signal: &str) -> Value {
    json!({ "id": id, "entity": entity, "type": signal })
}

/// A GET (or, for any other method, a POST) with `token`, and `body` as JSON unless null;
/// returns the status and the JSON reply (its text as a string if it is not JSON).
pub async fn call(
    app: &TestApp,
    method: &str,
    path: &str,
    token: &str,
    body: Value,
) -> (u16, Value) {
    let request = match method {
        "GET" => app.client.get(format!("{}{path}", app.base)),
        _ => app.client.post(format!("{}{path}", app.base)),
    };
    let request = if body.is_null() {
        request
    } else {
        request.json(&body)
    };
    let response = request.bearer_auth(token).send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

impl TestApp {
    /// Posts `body` to a named source's endpoint, signed with `secret`.
    pub async fn post_signed(&self, source: &str, secret: &str, body: &Value) -> reqwest::Response {
        let bytes = serde_json::to_vec(body).unwrap();
        self.client
            .post(format!("{}/v1/sources/{source}/events", self.base))
            .headers(signed_headers(secret, &bytes))
            .body(bytes)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn post_events(&self, body: &Value) -> reqwest::Response {
        self.client
            .post(format!("{}/v1/events", self.base))
            .json(body)
            .send()
            .await
            .expect("request sent")
    }

    /// Posts and asserts 202; returns (accepted, duplicates).
    pub async fn send(&self, body: &Value) -> (u64, u64) {
        let response = self.post_events(body).await;
        let status = response.status();
        let reply: Value = response.json().await.expect("json reply");
        assert_eq!(status, 202, "{reply}");
        (
            reply["accepted"].as_u64().unwrap(),
            reply["duplicates"].as_u64().unwrap(),
        )
    }

    /// Posts a JSON body; returns the status and the JSON reply.
    pub async fn post_json(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .expect("request sent");
        let status = response.status().as_u16();
        (status, response.json().await.expect("json reply"))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("request sent");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// The Prometheus text from the metrics listener.
    pub async fn metrics_text(&self) -> String {
        let response = self
            .client
            .get(format!("{}/metrics", self.metrics_base))
            .send()
            .await
            .expect("metrics request sent");
        assert_eq!(response.status(), 200);
        response.text().await.unwrap()
    }
}

/// Sends a request head (and `body`) and leaves the connection open.
pub async fn send_head(app: &TestApp, head: &str, body: &[u8]) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(app.base.trim_start_matches("http://"))
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, head.as_bytes())
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, body)
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::flush(&mut stream).await.unwrap();
    stream
}

/// The status of the first answer on the connection, within a deadline.
pub async fn answer_status(stream: &mut tokio::net::TcpStream, deadline: Duration) -> Option<u16> {
    let mut buffer = vec![0u8; 4096];
    let n = tokio::time::timeout(deadline, tokio::io::AsyncReadExt::read(stream, &mut buffer))
        .await
        .ok()?
        .ok()?;
    String::from_utf8_lossy(&buffer[..n])
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
}
