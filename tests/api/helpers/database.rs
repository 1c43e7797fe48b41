//! The test's own database on the shared server, its removal, and what a refused connection
//! means.

use std::{future::Future, time::Duration};

use quiesce::settings::Settings;
use sqlx::{Connection, PgConnection};

use super::redis::delete_redis_prefix;

/// A database of the test's own on the shared server (`quiesce_test_<id>`), dropped, with the
/// Redis keys of `keys`, when this is dropped: with the test's app, or on its own when the test
/// (or `spawn_app` itself) panics after creating it, so a failed test leaves nothing behind.
pub struct TestDatabase {
    /// The database is `quiesce_test_<id>`; a test's Redis prefix is `test-<id>`.
    pub id: String,
    /// `postgres://...:5432`, without a proxy.
    base: String,
    /// The app's settings with Redis' own address (without a proxy): its prefix's keys are
    /// deleted with the database.
    pub(super) keys: Option<Settings>,
}

impl TestDatabase {
    /// Creates a fresh database on the server at `base`.
    pub async fn create(base: &str) -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let database = Self {
            id,
            base: base.to_owned(),
            keys: None,
        };
        let mut admin = admin_connection(base).await;
        // DDL naming a database made up at run time (as the drop below): a string.
        sqlx::query(&format!("CREATE DATABASE {}", database.name()))
            .execute(&mut admin)
            .await
            .expect("create the test database");
        admin.close().await.ok();
        database
    }

    pub fn name(&self) -> String {
        format!("quiesce_test_{}", self.id)
    }

    pub fn url(&self) -> String {
        format!("{}/{}", self.base, self.name())
    }

    /// Drops the database (retrying while a connection being closed still holds it) and
    /// deletes the keys, each until it is gone or a deadline passes.
    async fn remove(name: String, base: String, keys: Option<Settings>) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let admin = format!("{base}/postgres");
        let mut failure = String::from("no attempt");
        while tokio::time::Instant::now() < deadline {
            let dropped = match PgConnection::connect(&admin).await {
                Ok(mut admin) => {
                    let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    sqlx::query(&drop).execute(&mut admin).await.map(|_| ())
                }
                Err(error) => Err(error),
            };
            match dropped {
                Ok(()) => {
                    failure.clear();
                    break;
                }
                Err(error) => failure = error.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !failure.is_empty() {
            // The run's leftovers check names it too; this says why.
            eprintln!("could not drop the test database {name}: {failure}");
        }
        if let Some(keys) = keys {
            delete_redis_prefix(&keys).await;
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (name, base, keys) = (self.name(), self.base.clone(), self.keys.take());
        run_to_end_in_drop(Self::remove(name, base, keys));
    }
}

/// Runs `work` to its end from a `Drop`, which cannot await and may run while a panic unwinds
/// the test's runtime: on a thread with a runtime of its own, joined.
pub fn run_to_end_in_drop(work: impl Future<Output = ()> + Send + 'static) {
    let _ = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work)
    })
    .join();
}

/// A connection to the maintenance database (`postgres`) of the server at `base`; a refusal
/// panics with what happened and what to do ([`explain_postgres_error`]).
pub async fn admin_connection(base: &str) -> PgConnection {
    match PgConnection::connect(&format!("{base}/postgres")).await {
        Ok(connection) => connection,
        Err(error) => panic!(
            "{}",
            explain_postgres_error("connect to Postgres", &error, base).await
        ),
    }
}

/// How many client connections the server has open, of how many it allows.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionUsage {
    pub in_use: i64,
    pub max_connections: i64,
}

/// The server's connection use, read over a connection of its own to the maintenance database;
/// `None` when that connection is refused too (nothing was left, not even a reserved slot).
pub async fn connection_usage(base: &str) -> Option<ConnectionUsage> {
    let mut connection = PgConnection::connect(&format!("{base}/postgres"))
        .await
        .ok()?;
    let usage = sqlx::query!(
        r#"SELECT (SELECT count(*) FROM pg_stat_activity
                   WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()) AS "in_use!",
                  current_setting('max_connections')::bigint AS "max_connections!""#,
    )
    .fetch_one(&mut connection)
    .await
    .ok()?;
    let (in_use, max_connections) = (usage.in_use, usage.max_connections);

    connection.close().await.ok();
    Some(ConnectionUsage {
        in_use,
        max_connections,
    })
}

/// The panic message of `what` having failed with `error` against the server at `base`. An
/// unreachable server points to scripts/dev/services.sh; a server that refused for want of
/// connections (SQLSTATE 53300: max_connections used up, or a database's or role's own limit)
/// is named as such, with how many are in use and what to do; so is a pool that got no
/// connection in time (sqlx retries a 53300 until then).
pub async fn explain_postgres_error(
    what: &str,
    error: &(dyn std::error::Error + Send + Sync + 'static),
    base: &str,
) -> String {
    // The error's chain is not Send: read before the await below.
    let (causes, refused, timed_out, unreachable) = {
        let error: &(dyn std::error::Error + 'static) = error;
        let chain = std::iter::successors(Some(error), |error| error.source());
        let mut causes: Vec<String> = chain.clone().map(ToString::to_string).collect();
        // sqlx's error repeats its source's text ("error returned from database: <it>").
        causes.dedup_by(|source, error| error.ends_with(source.as_str()));
        let sqlx_error = chain
            .clone()
            .find_map(|error| error.downcast_ref::<sqlx::Error>());
        let refused = sqlx_error.is_some_and(|error| {
            matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some(TOO_MANY_CONNECTIONS))
        });
        let timed_out = sqlx_error.is_some_and(|error| matches!(error, sqlx::Error::PoolTimedOut));
        let unreachable = sqlx_error
            .is_some_and(|error| matches!(error, sqlx::Error::Io(_) | sqlx::Error::Tls(_)));
        (causes.join(": "), refused, timed_out, unreachable)
    };
    if unreachable {
        return format!(
            "{what} failed: {causes} (is Postgres reachable? see scripts/dev/services.sh)"
        );
    }
    if !refused && !timed_out {
        return format!("{what} failed: {causes}");
    }
    too_many_connections_message(what, &causes, refused, connection_usage(base).await)
}

/// SQLSTATE too_many_connections.
const TOO_MANY_CONNECTIONS: &str = "53300";

/// What [`explain_postgres_error`] says of a refusal (`refused`) or of a pool that waited in
/// vain, with the server's connection use when it could be read.
pub fn too_many_connections_message(
    what: &str,
    causes: &str,
    refused: bool,
    usage: Option<ConnectionUsage>,
) -> String {
    let happened = if refused {
        "Postgres refused the connection: too many clients"
    } else {
        "no Postgres connection came within the pool's timeout, as when the server has too many clients"
    };
    let usage = match usage {
        Some(usage) => format!(
            "{} of the server's {} connections (max_connections) are in use",
            usage.in_use, usage.max_connections
        ),
        None => "not even a connection to count them was left".to_owned(),
    };
    format!(
        "{what} failed: {happened} ({causes}); {usage}. Each test thread holds up to \
         {TEST_CONNECTIONS} connections: lower TEST_THREADS (make test TEST_THREADS=2, or cargo \
         test -- --test-threads 2) or close other clients of the server (psql sessions, a make \
         run, another test run)"
    )
}

/// Postgres connections one test holds at most, in the usual case: its app's pool
/// (`db_max_connections`, 8 in [`TestOptions::default`]), the rules listener, and the admin
/// or migration connection. A test that starts a worker process adds 5, a serve process 9.
/// scripts/dev/test-connections.sh (run by `make test`) uses the same figure.
pub const TEST_CONNECTIONS: u32 = 10;
