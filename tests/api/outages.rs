//! Redis or Postgres unreachable: ingest answers 503 with Retry-After within the backend
//! timeout, readiness says which one is down, and everything resumes when it is back.

use std::time::{Duration, Instant};

use crate::helpers::{TestOptions, event, scalar, spawn_app, wait_for};

#[tokio::test]
async fn an_unreachable_redis_gives_503_and_the_senders_retry_repairs_the_schedule() {
    let app = spawn_app(TestOptions {
        through_proxies: true,
        ..TestOptions::default().with(|s| {
            s.database.backend_timeout = Duration::from_secs(1);
            s.schedule.debounce_window = Duration::from_millis(100);
        })
    })
    .await;
    let redis = app.redis_proxy.as_ref().unwrap();
    assert_eq!(app.send(&event("before", "post:r", "flag")).await, (1, 0));

    redis.cut();
    let started = Instant::now();
    let response = app.post_events(&event("during", "post:r", "flag")).await;
    assert_eq!(response.status(), 503);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered in {:?}",
        started.elapsed()
    );
    assert!(response.headers().get("retry-after").is_some());
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unavailable");
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 503, "{ready}");
    assert_ne!(ready["redis"], "ok");
    assert_eq!(ready["postgres"], "ok");

    redis.restore();
    // The sender retries: the event was already durable, so it is a duplicate, and the retry
    // schedules the entity that the failed request could not.
    wait_for(
        Duration::from_secs(20),
        "the retry to be accepted",
        || async {
            app.post_events(&event("during", "post:r", "flag"))
                .await
                .status()
                == 202
        },
    )
    .await;
    app.wait_settled(Duration::from_secs(20)).await;
    assert_eq!(app.event_count_of("post:r").await, 2);
    assert_eq!(
        scalar!(
            app,
            "SELECT evaluated_event_count FROM entities WHERE entity = 'post:r'"
        ),
        2
    );
}

#[tokio::test]
async fn an_unreachable_postgres_gives_503_quickly_and_writes_nothing_to_redis() {
    let app = spawn_app(TestOptions {
        through_proxies: true,
        ..TestOptions::idle().with(|s| s.database.backend_timeout = Duration::from_secs(1))
    })
    .await;
    let postgres = app.postgres_proxy.as_ref().unwrap();
    postgres.cut();

    let started = Instant::now();
    let response = app.post_events(&event("lost?", "post:p", "flag")).await;
    assert_eq!(response.status(), 503);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered in {:?}",
        started.elapsed()
    );
    assert!(response.headers().get("retry-after").is_some());
    assert!(
        app.work_keys().await.is_empty(),
        "nothing scheduled for an event that is not durable"
    );
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 503, "{ready}");
    assert_ne!(ready["postgres"], "ok");

    postgres.restore();
    wait_for(Duration::from_secs(20), "ingest to recover", || async {
        app.post_events(&event("lost?", "post:p", "flag"))
            .await
            .status()
            == 202
    })
    .await;
    assert_eq!(app.count_events().await, 1);
}

#[tokio::test]
async fn workers_stop_claiming_while_postgres_is_down_and_resume_by_themselves() {
    let app = spawn_app(TestOptions {
        through_proxies: true,
        ..TestOptions::idle().with(|s| {
            s.database.backend_timeout = Duration::from_secs(1);
            s.schedule.debounce_window = Duration::from_millis(20);
            s.schedule.max_attempts = 2;
        })
    })
    .await;
    let events: Vec<_> = (0..50)
        .map(|i| event(&format!("e{i}"), &format!("post:{}", i % 5), "flag"))
        .collect();
    app.send(&serde_json::json!(events)).await;
    let postgres = app.postgres_proxy.as_ref().unwrap();
    postgres.cut();

    let (worker, shutdown, running) = start_workers(&app);
    wait_for(
        Duration::from_secs(20),
        "the breaker to probe a down Postgres 3 times",
        || async {
            worker
                .stats()
                .probes
                .load(std::sync::atomic::Ordering::Relaxed)
                >= 3
        },
    )
    .await;
    assert!(worker.breaker_open());
    // Each entity was claimed about once before the breaker opened; no churn since.
    let claims = worker
        .stats()
        .claims
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(claims <= 5 + 3, "{claims} claims while Postgres was down");

    postgres.restore();
    app.wait_settled(Duration::from_secs(30)).await;
    assert!(!worker.breaker_open());
    assert_eq!(app.count_hidden().await, 5);
    let depths = app.backends.queue.depths().await.unwrap();
    assert_eq!(
        depths.iter().map(|d| d.dead).sum::<u64>(),
        0,
        "no entity dead-lettered"
    );
    shutdown.cancel();
    running.await.unwrap();
}

#[tokio::test]
async fn a_shard_that_cannot_be_scheduled_fails_only_the_requests_that_touch_it() {
    let app = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(50);
        s.database.backend_timeout = Duration::from_secs(1);
        s.maintenance.sweep_grace = Duration::from_secs(1);
        s.maintenance.sweep_interval = Duration::from_millis(500);
    }))
    .await;
    let keys = app.backends.queue.keys();
    let shard_of = |entity: &str| keys.shard_of(&quiesce::domain::EntityId::parse(entity).unwrap());
    let broken = shard_of("post:s0");
    let (on_broken, elsewhere): (Vec<String>, Vec<String>) = (0..400)
        .map(|i| format!("post:s{i}"))
        .partition(|entity| shard_of(entity) == broken);
    let on_broken = &on_broken[..on_broken.len().min(20)];
    let elsewhere = &elsewhere[..20];
    // One shard cannot be scheduled (as when the Redis master that serves it is down): its due
    // set is a string, so the schedule script fails there with WRONGTYPE.
    let due = keys.for_shard(broken).due();
    let mut redis = app.backends.queue.connection();
    let _: () = redis::cmd("SET")
        .arg(&due)
        .arg("not a sorted set")
        .query_async(&mut redis)
        .await
        .unwrap();

    // Requests at once, one entity each, so that groups mix both kinds.
    let requests = on_broken.iter().chain(elsewhere).map(|entity| {
        let app = &app;
        async move {
            let status = app
                .post_events(&event(&format!("e-{entity}"), entity, "flag"))
                .await
                .status()
                .as_u16();
            (entity.clone(), status)
        }
    });
    let answers = futures::future::join_all(requests).await;
    for (entity, status) in &answers {
        let expected = if on_broken.contains(entity) { 503 } else { 202 };
        assert_eq!(*status, expected, "{entity}: {answers:?}");
    }
    // Every event is durable, the failed requests' too.
    assert_eq!(
        app.count_events().await,
        (on_broken.len() + elsewhere.len()) as i64
    );

    // Once the shard works again, the repair sweep schedules what its requests could not, and
    // every entity is evaluated once.
    let _: () = redis::cmd("DEL")
        .arg(&due)
        .query_async(&mut redis)
        .await
        .unwrap();
    wait_for(
        Duration::from_secs(30),
        "every entity to be evaluated",
        || async {
            app.count_evaluated_entities().await == (on_broken.len() + elsewhere.len()) as i64
        },
    )
    .await;
    assert_eq!(
        app.count_evaluations().await,
        (on_broken.len() + elsewhere.len()) as i64
    );
}

/// The app's workers and maintenance, started now; cancel the token and await the handle.
fn start_workers(
    app: &crate::helpers::TestApp,
) -> (
    quiesce::worker::Worker,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let worker = app.worker();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(quiesce::startup::run_workers(
        worker.clone(),
        app.maintenance(),
        shutdown.clone(),
    ));
    (worker, shutdown, running)
}

/// Turns the test's database read-only for new sessions (as a primary restarted read-only
/// before its promotion is, or an old primary behind a managed database's moved address) and
/// ends every session on it, or makes it writable again.
async fn set_read_only(app: &crate::helpers::TestApp, read_only: bool) {
    use secrecy::ExposeSecret;
    use sqlx::Connection;
    // A connection of its own: one from the service's pool would stay writable in it, and
    // while the database is read-only the pool refuses to open any.
    let url = app.settings.database.database_url.expose_secret();
    let mut connection = sqlx::PgConnection::connect(url).await.unwrap();
    // This session may itself have started read-only.
    // Session control and ALTER DATABASE: strings, no schema to check them against.
    sqlx::query("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE")
        .execute(&mut connection)
        .await
        .unwrap();
    let setting = if read_only {
        "SET default_transaction_read_only = on"
    } else {
        "RESET default_transaction_read_only"
    };
    sqlx::query(&format!(
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I {setting}', current_database()); END $$"
    ))
    .execute(&mut connection)
    .await
    .unwrap();
    if read_only {
        sqlx::query!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_all(&mut connection)
        .await
        .unwrap();
    }
    connection.close().await.unwrap();
}

#[tokio::test]
async fn a_read_only_primary_is_an_outage_that_burns_no_attempt_and_ends_by_itself() {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.database.backend_timeout = Duration::from_secs(1);
        s.schedule.debounce_window = Duration::from_millis(20);
        s.schedule.max_attempts = 2;
    }))
    .await;
    let events: Vec<_> = (0..50)
        .map(|i| event(&format!("e{i}"), &format!("post:{}", i % 5), "flag"))
        .collect();
    app.send(&serde_json::json!(events)).await;
    set_read_only(&app, true).await;

    // Ingest: a 503 with Retry-After, nothing written; readiness says Postgres takes no writes.
    let response = app.post_events(&event("during", "post:0", "flag")).await;
    assert_eq!(response.status(), 503);
    assert!(response.headers().get("retry-after").is_some());
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 503, "{ready}");
    assert_ne!(ready["postgres"], "ok", "{ready}");

    let (worker, shutdown, running) = start_workers(&app);
    let dead = || async {
        let depths = app.backends.queue.depths().await.unwrap();
        depths.iter().map(|d| d.dead).sum::<u64>()
    };
    // Either the breaker pauses claims (an outage), or entities fail their attempts (the
    // defect): wait for the first, then for probes, and check the second never happened.
    wait_for(
        Duration::from_secs(20),
        "the breaker to open, or an entity to be dead-lettered",
        || async { worker.breaker_open() || dead().await > 0 },
    )
    .await;
    wait_for(
        Duration::from_secs(20),
        "the breaker to probe the read-only server 3 times, or an entity to be dead-lettered",
        || async {
            worker
                .stats()
                .probes
                .load(std::sync::atomic::Ordering::Relaxed)
                >= 3
                || dead().await > 0
        },
    )
    .await;
    assert_eq!(
        dead().await,
        0,
        "no entity dead-lettered by a read-only server"
    );
    assert!(worker.breaker_open(), "claims paused while writes fail");

    set_read_only(&app, false).await;
    app.wait_settled(Duration::from_secs(30)).await;
    assert!(!worker.breaker_open());
    assert_eq!(app.count_hidden().await, 5);
    assert_eq!(dead().await, 0, "no entity dead-lettered");
    assert_eq!(
        scalar!(app, "SELECT count(*) FROM entity_failures"),
        0,
        "no attempt recorded against an entity"
    );
    assert_eq!(
        scalar!(app, "SELECT count(*) FROM events WHERE id = 'during'"),
        0,
        "the refused request wrote nothing"
    );
    let (status, _) = app.get("/readyz").await;
    assert_eq!(status, 200);
    shutdown.cancel();
    running.await.unwrap();
}

#[tokio::test]
async fn a_worker_with_nothing_to_evaluate_pauses_claims_once_its_process_finds_the_primary_read_only()
 {
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.database.backend_timeout = Duration::from_secs(1);
    }))
    .await;
    let (worker, shutdown, running) = start_workers(&app);
    set_read_only(&app, true).await;
    // Nothing is due: no evaluation of this worker meets the read-only server. Readiness, as
    // a load balancer or a scrape asks it, does; the worker pauses before its next claim
    // instead of claiming entities only to give them back.
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 503, "{ready}");
    wait_for(
        Duration::from_secs(10),
        "the idle worker's breaker to open",
        || async { worker.breaker_open() },
    )
    .await;

    set_read_only(&app, false).await;
    wait_for(
        Duration::from_secs(20),
        "the breaker to close once the primary takes writes",
        || async { !worker.breaker_open() },
    )
    .await;
    app.send(&serde_json::json!([event("after", "post:after", "flag")]))
        .await;
    app.wait_settled(Duration::from_secs(30)).await;
    assert_eq!(
        app.evaluation_count("post:after").await,
        1,
        "claims resumed"
    );
    shutdown.cancel();
    running.await.unwrap();
}

#[tokio::test]
async fn a_scrape_answers_within_prometheus_scrape_timeout_while_the_primary_is_read_only() {
    // The default backend timeout: each Postgres read of a scrape could wait this long, as
    // the pool tries new connections and the fence refuses each.
    let app = spawn_app(TestOptions::idle().with(|s| {
        s.database.backend_timeout = Duration::from_secs(5);
    }))
    .await;
    set_read_only(&app, true).await;
    // Prometheus' default scrape_timeout: a scrape that takes longer is dropped, and with it
    // the gauges that say Postgres is away.
    let response = app
        .client
        .get(format!("{}/metrics", app.metrics_base))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("the scrape answered within 10 s");
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(
        text.lines().any(|l| l == "quiesce_postgres_writable 0"),
        "the scrape says Postgres takes no writes"
    );
    set_read_only(&app, false).await;
}

/// The fence is each pool's own: a database made read-only under one store leaves a store of
/// the same process on another database unaware. (A process-wide fence paused every worker of
/// the process and retired every pool's connections.)
#[tokio::test]
async fn a_read_only_database_is_an_outage_only_for_the_store_on_it() {
    let read_only = spawn_app(TestOptions::idle().with(|s| {
        s.database.backend_timeout = Duration::from_secs(1);
    }))
    .await;
    let other = spawn_app(TestOptions::idle()).await;
    let since = Instant::now();
    set_read_only(&read_only, true).await;
    let (status, ready) = read_only.get("/readyz").await;
    assert_eq!(status, 503, "{ready}");
    assert!(
        read_only.backends.store.primary_refused_since(since),
        "the read-only database's store heard the refusal"
    );

    assert!(
        !other.backends.store.primary_refused_since(since),
        "another database's store heard nothing of it"
    );
    let (status, ready) = other.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(
        other
            .post_events(&event("o1", "post:o", "flag"))
            .await
            .status(),
        202,
        "the other store takes writes at the first try"
    );
    set_read_only(&read_only, false).await;
}
