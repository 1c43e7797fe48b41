//! Signed inbound webhooks: with secrets configured, only correctly signed requests are
//! accepted, checked on the raw body before anything is parsed or written.

use hmac::{Hmac, Mac};
use quiesce::outbox::WebhookSecret;
use sha2::Sha256;

use crate::helpers::{TestOptions, spawn_app};

const OLD: &str = "whsec_QVFBQUFBQUFBQUFBQUFBQUFBQUE=";
const NEW: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

#[tokio::test]
async fn only_signed_events_are_accepted_when_secrets_are_configured() {
    let app = spawn_app(TestOptions {
        inbound_secrets: vec![OLD.to_owned(), NEW.to_owned()],
        inbound_github_secrets: vec!["It's a Secret to Everybody".to_owned()],
        ..TestOptions::idle()
    })
    .await;
    let body = r#"{"id":"s1","entity":"post:1","type":"flag"}"#;
    let now = chrono::Utc::now().timestamp();
    let post = |headers: Vec<(&'static str, String)>, body: &'static str| {
        let mut request = app
            .client
            .post(format!("{}/v1/events", app.base))
            .header("content-type", "application/json")
            .body(body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        request.send()
    };
    let standard = |secret: &str, timestamp: i64, body: &str| {
        vec![
            ("webhook-id", "msg_1".to_owned()),
            ("webhook-timestamp", timestamp.to_string()),
            (
                "webhook-signature",
                WebhookSecret::parse(secret)
                    .unwrap()
                    .sign("msg_1", timestamp, body.as_bytes()),
            ),
        ]
    };

    let unsigned = post(vec![], body).await.unwrap();
    assert_eq!(unsigned.status(), 401);
    let error: serde_json::Value = unsigned.json().await.unwrap();
    assert_eq!(error["error"]["code"], "invalid_signature");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("webhook-id")
    );

    let wrong = WebhookSecret::parse("whsec_QkJCQkJCQkJCQkJCQkJCQkJCQkI=").unwrap();
    let forged = vec![
        ("webhook-id", "msg_1".to_owned()),
        ("webhook-timestamp", now.to_string()),
        (
            "webhook-signature",
            wrong.sign("msg_1", now, body.as_bytes()),
        ),
    ];
    assert_eq!(post(forged, body).await.unwrap().status(), 401);
    assert_eq!(
        post(standard(NEW, now - 301, body), body)
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        app.scalar("SELECT count(*) FROM events").await,
        0,
        "nothing of a refused request is written"
    );

    // Either of the rotated secrets signs validly.
    assert_eq!(
        post(standard(NEW, now, body), body).await.unwrap().status(),
        202
    );
    let second = r#"{"id":"s2","entity":"post:1","type":"flag"}"#;
    assert_eq!(
        post(standard(OLD, now, second), second)
            .await
            .unwrap()
            .status(),
        202
    );

    // A GitHub-style sender.
    let third = r#"{"id":"s3","entity":"post:1","type":"flag"}"#;
    let mut mac = Hmac::<Sha256>::new_from_slice(b"It's a Secret to Everybody").unwrap();
    mac.update(third.as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        post(
            vec![("x-hub-signature-256", format!("sha256={hex}"))],
            third
        )
        .await
        .unwrap()
        .status(),
        202
    );
    assert_eq!(app.scalar("SELECT count(*) FROM events").await, 3);
}
