//! Named sources and the limits on what one client can make the API do: per-source rates
//! (429 with Retry-After, other sources unaffected), the cap on ingest requests at once (503)
//! and the request timeout (408 for a body that never finishes).

use std::time::Duration;

use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::helpers::{
    FORUM_SECRET, SHOP_SECRET, TestOptions, answer_status, event, send_head, source, spawn_app,
    wait_for,
};

fn batch(prefix: &str, n: usize) -> Value {
    json!(
        (0..n)
            .map(|i| event(
                &format!("{prefix}-{i}"),
                &format!("post:{prefix}{}", i % 7),
                "flag"
            ))
            .collect::<Vec<_>>()
    )
}

#[tokio::test]
async fn each_named_source_is_checked_with_its_own_secrets() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.security.sources = vec![
            source("shop", &[SHOP_SECRET]),
            source("forum", &[FORUM_SECRET]),
        ]
    }))
    .await;
    let one = event("n1", "post:n", "flag");
    assert_eq!(
        app.post_signed("shop", SHOP_SECRET, &one).await.status(),
        202
    );
    // Another source's secret does not open this source's endpoint.
    let crossed = app
        .post_signed("forum", SHOP_SECRET, &event("n2", "post:n", "flag"))
        .await;
    assert_eq!(crossed.status(), 401);
    let body: Value = crossed.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_signature");
    let unknown = app
        .post_signed("blog", SHOP_SECRET, &event("n3", "post:n", "flag"))
        .await;
    assert_eq!(unknown.status(), 404);
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unknown_source");
    assert_eq!(body["error"]["field"], "source");
    assert_eq!(
        app.count_events().await,
        1,
        "only the correctly signed event is written"
    );
}

#[tokio::test]
async fn a_flooding_source_gets_429_while_another_keeps_being_served() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.security.sources = vec![
            source("noisy", &[SHOP_SECRET]),
            source("quiet", &[FORUM_SECRET]),
        ];
        // 50 events/s with a burst of 100: the flood spends the burst in two requests.
        s.http.rate_limit = 50;
        s.http.rate_burst = 100;
        s.http.max_batch = 50;
    }))
    .await;
    let mut limited = None;
    for round in 0..20 {
        let response = app
            .post_signed("noisy", SHOP_SECRET, &batch(&format!("noisy{round}"), 50))
            .await;
        if response.status() == 429 {
            limited = Some(response);
            break;
        }
        assert_eq!(response.status(), 202);
    }
    let limited = limited.expect("the flood is limited");
    let retry_after: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .expect("Retry-After in whole seconds");
    assert!((1..=2).contains(&retry_after), "Retry-After {retry_after}");
    let body: Value = limited.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    let noisy_written = app.count_events().await;

    // The other source has a budget of its own.
    for round in 0..3 {
        let response = app
            .post_signed("quiet", FORUM_SECRET, &batch(&format!("quiet{round}"), 20))
            .await;
        assert_eq!(response.status(), 202, "quiet source, request {round}");
    }
    // The refused batch wrote nothing; the quiet source's 60 events did land.
    assert_eq!(app.count_events().await, noisy_written + 60);

    // Within the advertised wait (plus scheduling slack), the noisy source is served again.
    wait_for(
        Duration::from_secs(retry_after + 2),
        "the noisy source to be served after Retry-After",
        || async {
            app.post_signed("noisy", SHOP_SECRET, &batch("noisy-later", 50))
                .await
                .status()
                == 202
        },
    )
    .await;
}

#[tokio::test]
async fn ingest_clients_with_different_tokens_have_separate_budgets() {
    use quiesce::credentials::{ApiToken, Role};
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.security.api_tokens = crate::helpers::api_tokens(vec![
            ApiToken::spec_for(Role::Ingest, crate::secrets::TOKEN_INGEST_A),
            ApiToken::spec_for(Role::Ingest, crate::secrets::TOKEN_INGEST_B),
        ]);
        s.http.rate_limit = 10;
        s.http.rate_burst = 20;
        s.http.max_batch = 20;
    }))
    .await;
    let post = |token: &'static str, body: Value| {
        app.client
            .post(format!("{}/v1/events", app.base))
            .bearer_auth(token)
            .json(&body)
            .send()
    };
    assert_eq!(
        post(crate::secrets::TOKEN_INGEST_A, batch("a1", 20))
            .await
            .unwrap()
            .status(),
        202
    );
    let refused = post(crate::secrets::TOKEN_INGEST_A, batch("a2", 20))
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    assert_eq!(
        post(crate::secrets::TOKEN_INGEST_B, batch("b1", 20))
            .await
            .unwrap()
            .status(),
        202
    );
}

/// Opens a connection and sends an ingest request whose body never completes.
async fn stalled_upload(app: &crate::helpers::TestApp) -> TcpStream {
    let address = app.base.trim_start_matches("http://");
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nHost: {address}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
    );
    send_head(app, &head, b"[{\"id\":").await
}

async fn read_status(stream: &mut TcpStream) -> u16 {
    answer_status(stream, Duration::from_secs(10))
        .await
        .expect("an answer within the deadline")
}

#[tokio::test]
async fn a_body_that_never_finishes_is_answered_408() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.database.backend_timeout = Duration::from_millis(300);
        s.maintenance.sweep_grace = Duration::from_millis(300);
        s.http.request_timeout = Duration::from_millis(600);
    }))
    .await;
    let mut stream = stalled_upload(&app).await;
    assert_eq!(read_status(&mut stream).await, 408);
    assert_eq!(app.count_events().await, 0);
    // The server is unaffected: the next request is accepted (retried as a sender retries a
    // 503: with a 300 ms backend timeout on a busy machine a moment's 503 is the documented
    // answer).
    wait_for(
        Duration::from_secs(10),
        "the next request to be accepted",
        || async {
            app.post_events(&event("t1", "post:t", "flag"))
                .await
                .status()
                == 202
        },
    )
    .await;
    assert_eq!(app.count_events().await, 1);
}

#[tokio::test]
async fn ingest_requests_beyond_the_cap_are_shed_with_503() {
    let app = spawn_app(TestOptions::idle().with(|s| s.http.max_concurrent_ingest = 1)).await;
    // The stalled upload holds the only slot.
    let stream = stalled_upload(&app).await;
    wait_for(
        Duration::from_secs(10),
        "the second request to be shed",
        || async {
            let response = app.post_events(&event("c1", "post:c", "flag")).await;
            if response.status() != 503 {
                return false;
            }
            assert!(response.headers().contains_key("retry-after"));
            let body: Value = response.json().await.unwrap();
            body["error"]["code"] == "overloaded"
        },
    )
    .await;
    // Reads are not capped.
    assert_eq!(app.get("/v1/actions").await.0, 200);
    // Closing the stalled connection frees the slot.
    drop(stream);
    wait_for(
        Duration::from_secs(10),
        "the slot to be free again",
        || async {
            app.post_events(&event("c2", "post:c", "flag"))
                .await
                .status()
                == 202
        },
    )
    .await;
}
