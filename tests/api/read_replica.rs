//! Reads from a replica (`database_read_url`): the reads that may be a moment stale (here
//! `GET /v1/entities/{entity}` and the console) go there while it answers within
//! `read_max_lag`, and to the primary while it does not. The "replica" is the database of
//! another quiesce, reached through a proxy the test can cut: what it holds tells the two
//! apart (a real streaming replica, and its lag, are in `make ha`).

use std::time::Duration;

use reqwest::header;
use secrecy::ExposeSecret;

use crate::{
    console::{sign_in, with_console},
    helpers::{TestOptions, event, spawn_app, wait_for},
    proxy::{TcpProxy, redirect},
    secrets::{TOKEN_INGEST, TOKEN_MODERATOR},
};

#[tokio::test]
async fn stale_tolerant_reads_go_to_the_replica_and_to_the_primary_while_it_is_down() {
    // What the replica holds: an entity the primary never saw.
    let other = spawn_app(TestOptions::idle()).await;
    other.send(&event("r1", "post:on-replica", "flag")).await;
    let other_url = other.settings.database.database_url.expose_secret();
    let (target, _) = redirect(other_url, 5432, "127.0.0.1:1".parse().unwrap());
    let proxy = TcpProxy::start(target).await;
    let read_url = redirect(other_url, 5432, proxy.address).1;

    let app = spawn_app(TestOptions::idle().with(|s| {
        with_console(s);
        s.database.database_read_url = Some(read_url.into());
        s.database.read_max_lag = Duration::from_secs(5);
    }))
    .await;
    let entity = |app: &crate::helpers::TestApp| {
        let request = app
            .client
            .get(format!("{}/v1/entities/post:on-replica", app.base))
            .bearer_auth(TOKEN_MODERATOR);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    wait_for(
        Duration::from_secs(10),
        "the entity page to be read from the replica",
        || async { entity(&app).await == 200 },
    )
    .await;
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains("quiesce_replica_in_use 1"),
        "the replica is in use: {metrics}"
    );
    let (cookie, _) = sign_in(&app).await;
    let page = |cookie: String| {
        let request = app
            .client
            .get(format!("{}/console/review", app.base))
            .header(header::COOKIE, cookie);
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    let html = page(cookie.clone()).await;
    assert!(
        html.contains("read from a replica (replay lag"),
        "the console says where it reads: {html}"
    );

    // Writes never go there: an event sent to this app is in its primary only.
    let sent = app
        .client
        .post(format!("{}/v1/events", app.base))
        .bearer_auth(TOKEN_INGEST)
        .json(&event("p1", "post:on-primary", "flag"))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 202);
    assert_eq!(app.count_events().await, 1);
    assert_eq!(other.count_events().await, 1);

    // The replica stops answering: its reads go to the primary, which never saw the entity.
    proxy.cut();
    wait_for(
        Duration::from_secs(15),
        "the entity page to be read from the primary",
        || async { entity(&app).await == 404 },
    )
    .await;
    assert!(
        app.metrics_text()
            .await
            .contains("quiesce_replica_in_use 0")
    );
    let html = page(cookie.clone()).await;
    assert!(
        html.contains(
            "read from the primary: the replica lags past read_max_lag or does not answer"
        ),
        "{html}"
    );

    // Back: its reads go there again.
    proxy.restore();
    wait_for(
        Duration::from_secs(15),
        "the entity page to be read from the replica again",
        || async { entity(&app).await == 200 },
    )
    .await;
}
