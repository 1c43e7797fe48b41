//! Signed inbound webhooks: with secrets configured, only correctly signed requests are
//! accepted, checked on the raw body before anything is parsed or written.

use hmac::{Hmac, Mac};
use quiesce::credentials::WebhookSecret;
use sha2::Sha256;

use crate::helpers::{TestOptions, spawn_app, wait_for};

use crate::secrets::{GITHUB, INBOUND_NEW as NEW, INBOUND_OLD as OLD};

#[tokio::test]
async fn only_signed_events_are_accepted_when_secrets_are_configured() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.security.inbound_secrets =
            crate::helpers::webhook_secrets(vec![OLD.to_owned(), NEW.to_owned()]);
        s.security.inbound_github_secrets = crate::helpers::github_secrets(vec![GITHUB.to_owned()]);
    }))
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

    let wrong = WebhookSecret::parse(crate::secrets::INBOUND_WRONG).unwrap();
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
        app.count_events().await,
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
    let mut mac = Hmac::<Sha256>::new_from_slice(GITHUB.as_bytes()).unwrap();
    mac.update(third.as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        post(
            vec![
                ("x-hub-signature-256", format!("sha256={hex}")),
                ("x-github-delivery", "d-3".to_owned())
            ],
            third
        )
        .await
        .unwrap()
        .status(),
        202
    );
    assert_eq!(app.count_events().await, 3);
}

#[tokio::test]
async fn secrets_set_in_the_environment_never_show_in_help_or_config_errors() {
    use crate::secrets;
    let sources = format!("shop={},forum=github:{}", secrets::SHOP, secrets::GITHUB);
    let run = |args: &[&str], extra: &[(&str, &str)]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_quiesce"));
        command
            .args(args)
            .env_clear()
            .env("QUIESCE_INBOUND_SECRETS", secrets::INBOUND_NEW)
            .env("QUIESCE_INBOUND_GITHUB_SECRETS", secrets::GITHUB)
            .env("QUIESCE_WEBHOOK_SECRET", secrets::OUTBOUND)
            .env("QUIESCE_SOURCES", &sources)
            .env(
                "QUIESCE_DATABASE_URL",
                format!("postgres://quiesce:{}@127.0.0.1:1/x", secrets::TOKEN_ADMIN),
            );
        for (name, value) in extra {
            command.env(name, value);
        }
        let output = command.output().expect("run quiesce");
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };
    let help = run(&["serve", "--help"], &[]);
    assert!(help.contains("QUIESCE_SOURCES"), "{help}");
    // A setting refused at startup names the variable, not the values around it.
    let refused = run(&["serve"], &[("QUIESCE_MAX_BATCH", "0")]);
    assert!(refused.contains("QUIESCE_MAX_BATCH"), "{refused}");
    let bad_source = run(
        &["serve"],
        &[(
            "QUIESCE_SOURCES",
            "Shop=whsec_c2hvcC1zZWNyZXQtZm9yLXRlc3RzLW9ubHk=",
        )],
    );
    assert!(bad_source.contains("QUIESCE_SOURCES"), "{bad_source}");
    for output in [&help, &refused, &bad_source] {
        for secret in secrets::ALL {
            assert!(!output.contains(secret), "a secret shows in: {output}");
        }
        assert!(!output.contains("c2hvcC1zZWNyZXQtZm9yLXRlc3RzLW9ubHk"));
    }
}

#[tokio::test]
async fn an_empty_webhook_id_is_refused_and_every_signature_line_counts() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.security.inbound_secrets = crate::helpers::webhook_secrets(vec![NEW.to_owned()])
    }))
    .await;
    let secret = WebhookSecret::parse(NEW).unwrap();
    let wrong = WebhookSecret::parse(crate::secrets::INBOUND_WRONG).unwrap();
    let now = chrono::Utc::now().timestamp();
    let post = |id: &'static str, body: &'static str, signatures: Vec<String>| {
        let mut request = app
            .client
            .post(format!("{}/v1/events", app.base))
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", now.to_string())
            .body(body);
        // Each a header line of its own.
        for signature in signatures {
            request = request.header("webhook-signature", signature);
        }
        request.send()
    };

    // Signed correctly over the empty id, as the reference libraries refuse it.
    let body = r#"{"id":"e1","entity":"post:1","type":"flag"}"#;
    let refused = post("", body, vec![secret.sign("", now, body.as_bytes())])
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let error: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(error["error"]["code"], "invalid_signature");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("webhook-id"),
        "{error}"
    );
    assert_eq!(app.count_events().await, 0);

    // A valid signature in the second webhook-signature line.
    let second = r#"{"id":"e2","entity":"post:1","type":"flag"}"#;
    let lines = vec![
        wrong.sign("msg_2", now, second.as_bytes()),
        secret.sign("msg_2", now, second.as_bytes()),
    ];
    let response = post("msg_2", second, lines).await.unwrap();
    assert_eq!(response.status(), 202, "{}", response.text().await.unwrap());
    assert_eq!(app.count_events().await, 1);
}

/// `X-Hub-Signature-256` over `body` with `secret`.
fn github_signature(secret: &str, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

/// Posts `body` signed the GitHub way to `path`, with `delivery` as X-GitHub-Delivery (none:
/// no such header); answers the status and the JSON reply.
async fn post_github(
    app: &crate::helpers::TestApp,
    path: &str,
    delivery: Option<&str>,
    body: &str,
) -> (u16, serde_json::Value) {
    let mut request = app
        .client
        .post(format!("{}{path}", app.base))
        .header("content-type", "application/json")
        .header("x-hub-signature-256", github_signature(GITHUB, body))
        .body(body.to_owned());
    if let Some(delivery) = delivery {
        request = request.header("x-github-delivery", delivery);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn a_github_delivery_is_taken_once_even_after_its_events_left_retention() {
    let mut forum = crate::helpers::source("forum", &[]);
    forum.github_secrets = vec![secrecy::SecretString::from(GITHUB)];
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.security.inbound_github_secrets = crate::helpers::github_secrets(vec![GITHUB.to_owned()]);
        s.security.sources = vec![forum];
    }))
    .await;
    let body = r#"{"id":"g1","entity":"post:1","type":"flag"}"#;

    // No delivery id: refused, naming the header, and nothing is written.
    let (status, error) = post_github(&app, "/v1/events", None, body).await;
    assert_eq!(status, 401, "{error}");
    assert_eq!(error["error"]["code"], "invalid_signature");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("x-github-delivery"),
        "{error}"
    );
    let (status, error) = post_github(&app, "/v1/events", Some(""), body).await;
    assert_eq!(status, 401, "{error}");
    assert_eq!(app.count_events().await, 0);

    let (status, reply) = post_github(&app, "/v1/events", Some("d-1"), body).await;
    assert_eq!((status, &reply["accepted"]), (202, &1.into()), "{reply}");

    // The event leaves retention (received eight days ago, its partition is dropped); the
    // captured request is replayed as it was, and with a fresh delivery id (the id is not
    // signed, the body is).
    app.age_events(&["g1"], std::time::Duration::from_secs(8 * 24 * 3600))
        .await;
    app.backends
        .store
        .retention()
        .purge_expired(1000, 10)
        .await
        .unwrap();
    assert_eq!(app.count_events().await, 0);
    assert_eq!(app.event_count_of("post:1").await, 1);
    for delivery in ["d-1", "d-replayed"] {
        let (status, reply) = post_github(&app, "/v1/events", Some(delivery), body).await;
        assert_eq!(status, 202, "{reply}");
        assert_eq!(reply["accepted"], 0, "{delivery}: {reply}");
        assert_eq!(reply["duplicates"], 1, "{delivery}: {reply}");
    }
    assert_eq!(app.count_events().await, 0, "a replay writes nothing");
    assert_eq!(app.event_count_of("post:1").await, 1);

    // A new delivery is taken; deliveries are remembered per source, so the same id and body
    // at another source are that source's first.
    let second = r#"{"id":"g2","entity":"post:1","type":"flag"}"#;
    let (status, reply) = post_github(&app, "/v1/events", Some("d-2"), second).await;
    assert_eq!((status, &reply["accepted"]), (202, &1.into()), "{reply}");
    let (status, reply) = post_github(&app, "/v1/sources/forum/events", Some("d-1"), body).await;
    assert_eq!((status, &reply["accepted"]), (202, &1.into()), "{reply}");
    assert_eq!(app.count_github_deliveries().await, 3);
}

#[tokio::test]
async fn a_github_delivery_whose_schedule_failed_is_repaired_by_the_senders_retry() {
    let app = spawn_app(TestOptions {
        through_proxies: true,
        ..TestOptions::idle().with(|s| {
            s.security.inbound_github_secrets =
                crate::helpers::github_secrets(vec![GITHUB.to_owned()]);
            s.database.backend_timeout = std::time::Duration::from_secs(1);
        })
    })
    .await;
    let body = r#"{"id":"g1","entity":"post:1","type":"flag"}"#;
    let redis = app.redis_proxy.as_ref().unwrap();
    redis.cut();
    let (status, reply) = post_github(&app, "/v1/events", Some("d-1"), body).await;
    assert_eq!(status, 503, "{reply}");
    // The event is durable, and its delivery was remembered by the same statement.
    assert_eq!(app.count_events().await, 1);
    assert_eq!(
        app.count_github_deliveries().await,
        1,
        "a delivery is remembered exactly when its events are durable"
    );
    redis.restore();
    // The sender's retry goes through as a duplicate, and schedules the entity its event was
    // recorded for.
    wait_for(
        std::time::Duration::from_secs(20),
        "the retry to be answered",
        || async {
            let (status, reply) = post_github(&app, "/v1/events", Some("d-1"), body).await;
            status == 202 && reply["duplicates"] == 1
        },
    )
    .await;
    assert!(
        !app.queue_is_empty().await,
        "the retry scheduled the entity"
    );
    assert_eq!(app.count_events().await, 1);
}

#[tokio::test]
async fn a_github_delivery_that_cannot_be_remembered_writes_nothing_and_its_retry_is_taken() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.security.inbound_github_secrets = crate::helpers::github_secrets(vec![GITHUB.to_owned()]);
    }))
    .await;
    // Remembering a delivery fails (as a full disk or a lost connection would make it fail).
    // DDL, which the compile-time check does not take: kept as strings.
    sqlx::query(
        "CREATE FUNCTION refuse_delivery() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN RAISE EXCEPTION 'deliveries cannot be written'; END $$",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse_delivery BEFORE INSERT ON github_deliveries
             FOR EACH ROW EXECUTE FUNCTION refuse_delivery()",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let body = r#"{"id":"g1","entity":"post:1","type":"flag"}"#;
    let (status, reply) = post_github(&app, "/v1/events", Some("d-1"), body).await;
    assert_eq!(status, 503, "{reply}");
    // The 503 wrote nothing: its event is not durable without its delivery, so the captured
    // request cannot come back as new once the event leaves retention.
    assert_eq!(app.count_events().await, 0);
    assert_eq!(app.count_github_deliveries().await, 0);
    assert!(app.queue_is_empty().await);

    sqlx::query("DROP TRIGGER refuse_delivery ON github_deliveries")
        .execute(&app.pool)
        .await
        .unwrap();
    let (status, reply) = post_github(&app, "/v1/events", Some("d-1"), body).await;
    assert_eq!((status, &reply["accepted"]), (202, &1.into()), "{reply}");
    assert_eq!(app.count_github_deliveries().await, 1);
    let (status, reply) = post_github(&app, "/v1/events", Some("d-1"), body).await;
    assert_eq!((status, &reply["duplicates"]), (202, &1.into()), "{reply}");
}
