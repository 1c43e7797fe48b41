//! The HTTP edge against slow and hostile clients: requests nobody has authenticated hold no
//! ingest slot, a body above the limit is refused from its declared length (and a client that
//! sends it all the same reads the 413, not a reset), a trickled body is
//! cut off at the pace floor, connections that send nothing (or too little, or stay idle) are
//! closed, a client that stops reading its answers frees its connection, open connections are
//! capped, malformed paths and field names get the JSON error, and every route that takes a
//! body answers one over the limit with the JSON 413, and one not sent as JSON with the 415.

use std::time::Duration;

use quiesce::{
    credentials::{ApiToken, Role},
    domain::Status,
};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::helpers::{
    SHOP_SECRET, TestApp, TestOptions, answer_status, event, hide, scalar, send_head, source,
    spawn_app,
};

fn address(app: &TestApp) -> String {
    app.base.trim_start_matches("http://").to_owned()
}

/// Whether the server closes the connection within the deadline (reading what it sends).
async fn closed_by_server(stream: &mut TcpStream, deadline: Duration) -> bool {
    let mut buffer = vec![0u8; 4096];
    let until = tokio::time::Instant::now() + deadline;
    loop {
        match tokio::time::timeout_at(until, stream.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

fn stalled_head(address: &str, path: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
    )
}

#[tokio::test]
async fn unauthenticated_uploads_hold_no_ingest_slot() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.security.api_tokens = crate::helpers::api_tokens(vec![ApiToken::spec_for(
            Role::Ingest,
            crate::secrets::TOKEN_INGEST_A,
        )]);
        s.security.sources = vec![source("shop", &[SHOP_SECRET])];
        s.http.max_concurrent_ingest = 4;
        s.http.body_grace = Duration::from_secs(2);
    }))
    .await;
    let at = address(&app);
    // Three times the cap of uploads that stall after one body byte: to a source that does not
    // exist, to /v1/events without a token, and to a real source (whose name is no secret) with
    // no valid signature yet.
    let mut stalled = Vec::new();
    for path in [
        "/v1/sources/nosuch/events",
        "/v1/events",
        "/v1/sources/shop/events",
    ] {
        for _ in 0..4 {
            stalled.push(send_head(&app, &stalled_head(&at, path), b"[").await);
        }
    }
    // While they are open, authenticated senders get every slot at once.
    let sends = (0..4).map(|i| {
        app.client
            .post(format!("{}/v1/events", app.base))
            .bearer_auth(crate::secrets::TOKEN_INGEST_A)
            .json(&event(&format!("ok-{i}"), "post:edge", "flag"))
            .send()
    });
    for response in futures::future::join_all(sends).await {
        assert_eq!(response.unwrap().status(), 202);
    }
    let shop = event("shop-1", "post:edge-shop", "flag");
    assert_eq!(
        app.post_signed("shop", SHOP_SECRET, &shop).await.status(),
        202
    );
    // The unknown source and the missing token are refused before the body; the source's
    // upload runs into the pace floor, having held no slot.
    let mut statuses = Vec::new();
    for stream in &mut stalled {
        statuses.push(answer_status(stream, Duration::from_secs(10)).await);
    }
    let expected: Vec<Option<u16>> = [Some(404), Some(401), Some(408)]
        .iter()
        .flat_map(|status| [*status; 4])
        .collect();
    assert_eq!(statuses, expected);
    assert_eq!(app.count_events().await, 5);
}

#[tokio::test]
async fn a_declared_body_above_the_limit_is_refused_before_it_is_sent() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.http.body_limit = 1000;
        // Neither the request timeout nor the pace floor could answer within the deadline.
        s.http.request_timeout = Duration::from_secs(120);
        s.http.body_grace = Duration::from_secs(60);
    }))
    .await;
    let at = address(&app);
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nHost: {at}\r\ncontent-type: application/json\r\ncontent-length: 5000\r\n\r\n"
    );
    let mut stream = send_head(&app, &head, b"").await;
    assert_eq!(
        answer_status(&mut stream, Duration::from_secs(10)).await,
        Some(413)
    );
    assert_eq!(app.count_events().await, 0);
}

/// Sends `head` and then `body` whole, in chunks, before reading anything; returns all the
/// server sent until it closed. The client's send buffer is kept small, as a client's bytes in
/// flight are small beside a large body: the kernel cannot take the whole body at once, so the
/// client is still sending when the server answers.
async fn send_whole_then_read(at: &str, head: &str, body: &[u8]) -> std::io::Result<Vec<u8>> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_send_buffer_size(64 * 1024)?;
    let mut stream = socket.connect(at.parse().expect("an address")).await?;
    stream.write_all(head.as_bytes()).await?;
    for chunk in body.chunks(64 * 1024) {
        stream.write_all(chunk).await?;
    }
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    Ok(answer)
}

#[tokio::test]
async fn a_client_that_sends_its_whole_body_over_the_limit_reads_the_413() {
    // body_limit is 1 MiB; the body is 2 MB, declared, and sent whole before the client reads
    // (as a client that does not wait for 100-continue does). The server answers from the
    // declared length without reading the body; the client must read that answer, not a reset
    // from a socket closed on unread bytes.
    let app = spawn_app(TestOptions::idle()).await;
    let at = address(&app);
    let body = vec![b' '; 2_000_000];
    for round in 0..20 {
        let path = if round % 2 == 0 {
            "/v1/events"
        } else {
            "/v1/entities/post:big/attributes"
        };
        let method = if round % 2 == 0 { "POST" } else { "PUT" };
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {at}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        let answer = tokio::time::timeout(
            Duration::from_secs(20),
            send_whole_then_read(&at, &head, &body),
        )
        .await
        .unwrap_or_else(|_| panic!("round {round}: no answer within 20 s"))
        .unwrap_or_else(|error| panic!("round {round} ({method} {path}): {error}"));
        let answer = String::from_utf8_lossy(&answer);
        let (head, json) = answer
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("round {round}: an HTTP answer: {answer}"));
        assert!(head.starts_with("HTTP/1.1 413 "), "round {round}: {head}");
        let json: Value = serde_json::from_str(json)
            .unwrap_or_else(|_| panic!("round {round}: a JSON body: {json}"));
        assert_eq!(json["error"]["code"], "payload_too_large", "round {round}");
    }
    assert_eq!(app.count_events().await, 0);
}

#[tokio::test]
async fn a_trickled_body_is_cut_off_at_the_pace_floor() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        // The whole-request timeout is far away: only the floor can answer in time.
        s.http.request_timeout = Duration::from_secs(120);
        s.http.body_grace = Duration::from_millis(300);
        s.http.body_min_rate = 1000;
    }))
    .await;
    let at = address(&app);
    let mut stream = send_head(&app, &stalled_head(&at, "/v1/events"), b"[").await;
    assert_eq!(
        answer_status(&mut stream, Duration::from_secs(10)).await,
        Some(408)
    );
    assert_eq!(app.count_events().await, 0);
    // A body that comes at once is unaffected.
    app.send(&event("pace-1", "post:pace", "flag")).await;
}

#[tokio::test]
async fn connections_that_send_too_little_are_closed() {
    let app = spawn_app(
        TestOptions::idle().with(|s| s.http.header_read_timeout = Duration::from_millis(500)),
    )
    .await;
    let at = address(&app);
    // Nothing at all.
    let mut silent = TcpStream::connect(&at).await.unwrap();
    // Half a request line.
    let mut half = send_head(&app, "POST /v1/ev", b"").await;
    assert!(closed_by_server(&mut silent, Duration::from_secs(10)).await);
    assert!(closed_by_server(&mut half, Duration::from_secs(10)).await);

    // Header lines trickled one at a time, each well inside the timeout, never finishing.
    let trickle = send_head(
        &app,
        &format!("GET /healthz HTTP/1.1\r\nHost: {at}\r\n"),
        b"",
    )
    .await;
    let (mut reader, mut writer) = trickle.into_split();
    let server_closed = async {
        let mut buffer = [0u8; 256];
        loop {
            match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    let send_lines = async {
        for i in 0..200 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let line = format!("x-trickle-{i}: 1\r\n");
            if writer.write_all(line.as_bytes()).await.is_err() {
                // Refused: the server has closed; the reader sees it too.
                std::future::pending::<()>().await;
            }
        }
    };
    // 200 lines take 20 s; the reader must finish first, when the server closes.
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::select! {
            () = server_closed => true,
            () = send_lines => false,
        }
    })
    .await;
    assert_eq!(closed, Ok(true), "the trickling connection was closed");
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed() {
    let app = spawn_app(
        TestOptions::idle().with(|s| s.http.header_read_timeout = Duration::from_millis(500)),
    )
    .await;
    let at = address(&app);
    let mut stream = send_head(
        &app,
        &format!("GET /healthz HTTP/1.1\r\nHost: {at}\r\n\r\n"),
        b"",
    )
    .await;
    assert_eq!(
        answer_status(&mut stream, Duration::from_secs(10)).await,
        Some(200)
    );
    // Kept alive after the answer, then nothing more is sent.
    assert!(closed_by_server(&mut stream, Duration::from_secs(10)).await);
}

#[tokio::test]
async fn open_connections_are_capped() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.http.max_connections = 2;
        s.http.header_read_timeout = Duration::from_secs(60);
    }))
    .await;
    let at = address(&app);
    let first = TcpStream::connect(&at).await.unwrap();
    let _second = TcpStream::connect(&at).await.unwrap();
    // The third connection is accepted by the kernel but not served while two are open.
    let mut third = send_head(
        &app,
        &format!("GET /healthz HTTP/1.1\r\nHost: {at}\r\n\r\n"),
        b"",
    )
    .await;
    assert_eq!(
        answer_status(&mut third, Duration::from_secs(1)).await,
        None
    );
    drop(first);
    assert_eq!(
        answer_status(&mut third, Duration::from_secs(10)).await,
        Some(200)
    );
}

#[tokio::test]
async fn a_client_that_stops_reading_its_answers_frees_its_connection() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.http.max_connections = 1;
        s.http.write_timeout = Duration::from_secs(1);
        s.http.header_read_timeout = Duration::from_secs(60);
    }))
    .await;
    let at = address(&app);
    // Many pipelined requests for the OpenAPI document, whose answers are never read: the
    // client's window closes, the server's send buffer fills, and its write waits.
    let stalled = tokio::net::TcpSocket::new_v4().unwrap();
    stalled.set_recv_buffer_size(4096).unwrap();
    let mut stalled = stalled.connect(at.parse().unwrap()).await.unwrap();
    let request = format!("GET /openapi.json HTTP/1.1\r\nHost: {at}\r\n\r\n");
    let requests = request.repeat(2000);
    // The requests go out in the background: the server stops reading them once it stops
    // writing, so this write may never finish either.
    let writer = tokio::spawn(async move {
        let _ = stalled.write_all(requests.as_bytes()).await;
        stalled
    });
    // With the only slot taken, another client waits until the stalled connection is closed:
    // at the write timeout, not when TCP gives up (never, while the client's kernel answers
    // the server's window probes).
    let mut next = send_head(
        &app,
        &format!("GET /healthz HTTP/1.1\r\nHost: {at}\r\n\r\n"),
        b"",
    )
    .await;
    assert_eq!(
        answer_status(&mut next, Duration::from_secs(20)).await,
        Some(200),
        "the stalled connection's slot is given back"
    );
    writer.abort();
}

#[tokio::test]
async fn a_path_that_does_not_decode_gets_the_json_error() {
    let app = spawn_app(TestOptions::idle()).await;
    let response = app
        .client
        .get(format!("{}/v1/entities/post:%FF", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_path");
    assert_eq!(body["error"]["field"], "entity");
}

#[tokio::test]
async fn an_unknown_field_is_named_within_a_bound() {
    let app = spawn_app(TestOptions::idle()).await;
    let long_name = "f".repeat(10_000);
    let mut body = event("long-1", "post:long", "flag");
    body[&long_name] = json!(1);
    let response = app.post_events(&body).await;
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    let field = body["error"]["field"].as_str().unwrap();
    assert!(field.starts_with("fff"), "{field}");
    assert!(field.chars().count() <= 65, "{} characters", field.len());
}

/// Every operation of the OpenAPI document that takes a body, `(method, path)`, each checked to
/// document its `status` answer.
async fn routes_with_a_body(app: &TestApp, status: &str) -> Vec<(String, String)> {
    let (_, doc) = app.get("/openapi.json").await;
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            if operation.get("requestBody").is_some() {
                assert!(
                    operation["responses"][status].is_object(),
                    "{method} {path} documents its {status}"
                );
                routes.push((method.clone(), path.clone()));
            }
        }
    }
    routes
}

/// The JSON error `response` is, checked to be `status` with `code`; `what` names the request.
async fn refusal(response: reqwest::Response, status: u16, code: &str, what: &str) -> Value {
    let answered = response.status().as_u16();
    let text = response.text().await.unwrap();
    assert_eq!(answered, status, "{what}: {text}");
    let answer: Value =
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("{what} answers JSON: {text}"));
    assert_eq!(answer["error"]["code"], code, "{what}: {text}");
    answer
}

/// A route's path with its parameters given: `id` (an action, a statement, an item...), the
/// entity, the source `shop` and rules version 1.
fn concrete(path: &str, id: i64, entity: &str) -> String {
    path.replace("{id}", &id.to_string())
        .replace("{entity}", entity)
        .replace("{source}", "shop")
        .replace("{version}", "1")
}

#[tokio::test]
async fn every_route_that_takes_a_body_answers_one_over_the_limit_with_the_json_413() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.http.body_limit = 1000;
        s.security.sources = vec![source("shop", &[SHOP_SECRET])];
        s.security.api_tokens = crate::helpers::api_tokens(vec![ApiToken::spec_for(
            Role::Admin,
            crate::secrets::TOKEN_ADMIN,
        )]);
    }))
    .await;
    // A JSON object a little over the limit: declared (content-length), and streamed without
    // a declared length (chunked), which only reading can find too large.
    let big = json!({"moderator": "mod:ana", "reason": "x".repeat(1200)}).to_string();
    let mut checked = Vec::new();
    for (method, path) in routes_with_a_body(&app, "413").await {
        let concrete = concrete(&path, 1, "post:big");
        for streamed in [false, true] {
            let body = if streamed {
                let chunks = big
                    .as_bytes()
                    .chunks(100)
                    .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
                    .collect::<Vec<_>>();
                reqwest::Body::wrap_stream(futures::stream::iter(chunks))
            } else {
                reqwest::Body::from(big.clone())
            };
            let response = app
                .client
                .request(
                    method.to_uppercase().parse().unwrap(),
                    format!("{}{concrete}", app.base),
                )
                .bearer_auth(crate::secrets::TOKEN_ADMIN)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let what = format!("{method} {concrete} (streamed {streamed})");
            let answer = refusal(response, 413, "payload_too_large", &what).await;
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("1000 bytes"),
                "the limit is named: {answer}"
            );
        }
        checked.push(format!("{method} {path}"));
    }
    // At least ingest (2 routes), attributes, reverse, override, review claim and decide, rules
    // publish and activate, backtest and redrive: the document says which take a body.
    assert!(checked.len() >= 11, "routes with a body: {checked:?}");
    assert_eq!(app.count_events().await, 0);
}

#[tokio::test]
async fn every_route_that_takes_json_refuses_a_body_not_sent_as_json_and_writes_nothing() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(10);
        s.security.sources = vec![source("shop", &[SHOP_SECRET])];
    }))
    .await;
    // A hidden post, with its action and statement: what an appeal or an override would act on.
    hide(&app, "post:ct").await;
    let action: i64 = scalar!(app, "SELECT id FROM actions WHERE entity = 'post:ct'");
    let statement: i64 = scalar!(app, "SELECT id FROM statements WHERE entity = 'post:ct'");
    let written = || async {
        scalar!(
            app,
            "SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM actions)
                    + (SELECT count(*) FROM outbox) + (SELECT count(*) FROM appeals)
                    + (SELECT count(*) FROM audit_log) + (SELECT count(*) FROM moderator_decisions)
                    + (SELECT count(*) FROM rules_activations)"
        )
    };
    let before = written().await;

    let appeal = json!({"appellant": "user:77", "text": "It was satire."});
    let mut checked = Vec::new();
    for (method, path) in routes_with_a_body(&app, "415").await {
        let id = if path.starts_with("/v1/statements/") {
            statement
        } else {
            action
        };
        let concrete = concrete(&path, id, "post:ct");
        // A body each route would take as JSON.
        let body = match path.as_str() {
            "/v1/events" | "/v1/sources/{source}/events" => event("ct-new", "post:ct", "flag"),
            p if p.ends_with("/appeals") => appeal.clone(),
            "/v1/entities/{entity}/override" => {
                json!({"moderator": "mod:ana", "status": "visible", "reason": "fine"})
            }
            _ => json!({"moderator": "mod:ana", "reason": "fine"}),
        };
        for content_type in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            None,
        ] {
            let mut request = app
                .client
                .request(
                    method.to_uppercase().parse().unwrap(),
                    format!("{}{concrete}", app.base),
                )
                .body(body.to_string());
            if let Some(content_type) = content_type {
                request = request.header("content-type", content_type);
            }
            let response = request.send().await.unwrap();
            let what = format!("{method} {concrete} as {content_type:?}");
            refusal(response, 415, "unsupported_media_type", &what).await;
        }
        checked.push(format!("{method} {path}"));
    }
    // Ingest (2 routes), attributes, reverse, override, timer end, review claim and decide, the
    // two appeals, appeal claim and decide, rules publish and activate, backtest and redrive.
    assert!(checked.len() >= 16, "routes with a body: {checked:?}");
    assert_eq!(
        written().await,
        before,
        "nothing of a refused request is written"
    );
    assert_eq!(app.status_of("post:ct").await, Status::Hidden);

    // The same appeal sent as JSON is taken; a route whose body is optional still takes none.
    let (status, taken) = app
        .post_json(&format!("/v1/actions/{action}/appeals"), appeal)
        .await;
    assert_eq!(status, 201, "{taken}");
    let response = app
        .client
        .post(format!("{}/v1/dead-letters/redrive", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}
