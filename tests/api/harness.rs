//! The test harness itself: a test that fails after its database was created leaves no
//! database behind, and a server with no connection to spare is named as such, with what to
//! do, instead of reading as an unreachable Postgres.

use futures::FutureExt;
use sqlx::{Connection, PgConnection, postgres::PgConnectOptions};

use crate::helpers::{
    ConnectionUsage, TestOptions, admin_connection, database_base_url, explain_postgres_error,
    run_to_end_in_drop, spawn_app, too_many_connections_message,
};

async fn database_exists(name: &str) -> bool {
    let mut admin = admin_connection(&database_base_url()).await;
    let exists = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1) AS "exists!""#,
        name
    )
    .fetch_one(&mut admin)
    .await
    .unwrap();
    admin.close().await.ok();
    exists
}

#[tokio::test]
async fn a_test_that_fails_after_its_database_is_created_leaves_no_database() {
    // The SQL run before the migrations fails, naming the database: spawn_app panics after
    // creating it and before any app exists.
    let options = TestOptions {
        before_partitioning: Some(
            "DO $$ BEGIN RAISE EXCEPTION 'failing in %', current_database(); END $$",
        ),
        ..TestOptions::idle()
    };
    let panic = std::panic::AssertUnwindSafe(spawn_app(options))
        .catch_unwind()
        .await
        .err()
        .expect("spawn_app panics");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    let name = message
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .find(|word| word.starts_with("quiesce_test_"))
        .unwrap_or_else(|| panic!("the panic names the database: {message}"));
    assert!(!database_exists(name).await, "{name} is left behind");
}

/// A login role of the test's own, dropped with this value.
struct TestRole {
    name: String,
}

impl TestRole {
    /// A role that may open `limit` connections.
    async fn create(limit: u32) -> Self {
        let name = format!("quiesce_test_role_{}", uuid::Uuid::new_v4().simple());
        let mut admin = admin_connection(&database_base_url()).await;
        // DDL naming a role made up at run time, here and in the drop: strings.
        sqlx::query(&format!(
            "CREATE ROLE {name} LOGIN CONNECTION LIMIT {limit}"
        ))
        .execute(&mut admin)
        .await
        .expect("create the test role");
        admin.close().await.ok();
        Self { name }
    }
}

impl Drop for TestRole {
    fn drop(&mut self) {
        let drop = format!("DROP ROLE IF EXISTS {}", self.name);
        run_to_end_in_drop(async move {
            let mut admin = admin_connection(&database_base_url()).await;
            sqlx::query(&drop)
                .execute(&mut admin)
                .await
                .expect("drop the test role");
        });
    }
}

#[tokio::test]
async fn a_server_with_no_connection_to_spare_is_named_with_what_to_do() {
    // A role allowed no connection is refused the way every client is once max_connections are
    // used up (SQLSTATE 53300), without using up the shared server.
    let base = database_base_url();
    let role = TestRole::create(0).await;
    let options: PgConnectOptions = format!("{base}/postgres").parse().unwrap();
    let error = PgConnection::connect_with(&options.username(&role.name))
        .await
        .expect_err("a role with a connection limit of 0 is refused");
    let sqlx::Error::Database(refusal) = &error else {
        panic!("a refusal by the server: {error}");
    };
    assert_eq!(refusal.code().as_deref(), Some("53300"), "{error}");

    let message = explain_postgres_error("connect to Postgres", &error, &base).await;
    let mut admin = admin_connection(&base).await;
    // SHOW selects nothing the compile-time check can type: a string.
    let max: String = sqlx::query_scalar("SHOW max_connections")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    admin.close().await.ok();
    assert!(
        message.starts_with(
            "connect to Postgres failed: Postgres refused the connection: too many clients"
        ),
        "{message}"
    );
    // The server's own words, how many connections are in use of how many, and what to do.
    assert!(
        message.contains("too many connections for role"),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "of the server's {max} connections (max_connections) are in use"
        )),
        "{message}"
    );
    assert!(message.contains("lower TEST_THREADS"), "{message}");
    assert!(!message.contains("reachable"), "{message}");

    // When not even a connection to count them was left, it says so.
    let alone = too_many_connections_message(
        "connect to Postgres",
        "sorry, too many clients already",
        true,
        None,
    );
    assert!(
        alone.contains("not even a connection to count them was left"),
        "{alone}"
    );
    let counted = too_many_connections_message(
        "backends",
        "pool timed out while waiting for an open connection",
        false,
        Some(ConnectionUsage {
            in_use: 97,
            max_connections: 100,
        }),
    );
    assert!(
        counted.contains("97 of the server's 100 connections"),
        "{counted}"
    );
    assert!(
        counted.contains("no Postgres connection came within the pool's timeout"),
        "{counted}"
    );

    // A server that does not answer still points to the services script.
    let nowhere = "postgres://postgres@127.0.0.1:1";
    let error = PgConnection::connect(&format!("{nowhere}/postgres"))
        .await
        .expect_err("nothing listens on port 1");
    let message = explain_postgres_error("connect to Postgres", &error, nowhere).await;
    assert!(
        message.contains("is Postgres reachable? see scripts/dev/services.sh"),
        "{message}"
    );
}
