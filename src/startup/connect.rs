//! Connections: the database prepared and its pool, Redis (one node or a cluster), the key
//! layout and the rules, each error naming the setting and the address, its password redacted.

use anyhow::Context;
use redis::{
    aio::{ConnectionManager, ConnectionManagerConfig},
    cluster::ClusterClientBuilder,
};
use secrecy::ExposeSecret;
use sqlx::{Postgres, migrate::MigrateDatabase, postgres::PgConnectOptions};

use crate::{
    credentials::redact_passwords,
    queue::{self, Keyspace, RedisConnection, Wakeups},
    rules::{RuleSet, Rules},
    settings::Settings,
    store,
};

/// Loads the configured rules file, or the built-in copy of the shipped one, into a reloadable
/// handle.
pub fn load_rules(settings: &Settings) -> anyhow::Result<Rules> {
    let file = settings.moderation.rules.file();
    let set = match file {
        Some(path) => RuleSet::from_file(path).context("the rules were refused")?,
        None => RuleSet::default_rules(),
    };
    Ok(Rules::new(set, file.map(ToOwned::to_owned)))
}

/// The database URL as messages show it: its password redacted.
pub(super) fn database_address(settings: &Settings) -> String {
    redact_passwords(settings.database.database_url.expose_secret())
}

/// Refuses a database URL that does not parse, naming its variable.
fn check_database_url(settings: &Settings) -> anyhow::Result<()> {
    settings
        .database
        .database_url
        .expose_secret()
        .parse::<PgConnectOptions>()
        .map(|_| ())
        .map_err(|error| {
            anyhow::anyhow!(
                "invalid QUIESCE_DATABASE_URL {}: {}; expected a URL such as postgres://host:port/database",
                database_address(settings),
                redact_passwords(&error.to_string())
            )
        })
}

/// Creates the database if it does not exist and applies pending migrations.
pub async fn prepare_database(settings: &Settings) -> anyhow::Result<()> {
    check_database_url(settings)?;
    let url = settings.database.database_url.expose_secret();
    let address = database_address(settings);
    if !Postgres::database_exists(url)
        .await
        .with_context(|| format!("cannot reach Postgres at {address} (QUIESCE_DATABASE_URL)"))?
    {
        Postgres::create_database(url).await.with_context(|| {
            format!("cannot create the database {address} (QUIESCE_DATABASE_URL)")
        })?;
        tracing::info!("created the database");
    }
    let store = connect_postgres(settings).await?;
    store::migrate(store.pool())
        .await
        .context("migrations failed")?;
    store.pool().close().await;
    Ok(())
}

/// The store on a new Postgres pool (its partitions and replica left at their defaults: see
/// [`connect_store`]); errors name QUIESCE_DATABASE_URL and the address, its password redacted.
pub async fn connect_postgres(settings: &Settings) -> anyhow::Result<store::Store> {
    check_database_url(settings)?;
    store::connect(&settings.database).await.with_context(|| {
        format!(
            "cannot connect to Postgres at {} (QUIESCE_DATABASE_URL)",
            database_address(settings)
        )
    })
}

/// The store on the primary's pool, with its time partitions as the settings cut them and,
/// when `database_read_url` is set, the read replica (connected lazily, not yet in use: its
/// watch, or one check for a command, puts it in use once it answers within `read_max_lag`).
pub async fn connect_store(settings: &Settings) -> anyhow::Result<store::Store> {
    let store = connect_postgres(settings)
        .await?
        .with_partitions(store::PartitionPlan::from_settings(&settings.maintenance))
        .submitting_statements(settings.delivery.dsa_configured());
    let Some(url) = &settings.database.database_read_url else {
        return Ok(store);
    };
    let replica = store::Replica::connect(url, &settings.database).with_context(|| {
        format!(
            "invalid QUIESCE_DATABASE_READ_URL {}",
            redact_passwords(url.expose_secret())
        )
    })?;
    Ok(store.with_replica(replica))
}

/// A Redis connection (one node, or a cluster for a `redis+cluster://` URL) and where to
/// subscribe to wake-ups; errors name QUIESCE_REDIS_URL and the address, its password redacted.
pub async fn connect_redis(settings: &Settings) -> anyhow::Result<(RedisConnection, Wakeups)> {
    let url = settings.redis.redis_url.expose_secret();
    let address = redact_passwords(url);
    let timeout = settings.database.backend_timeout;
    let channel = Keyspace::new(settings.redis.redis_prefix.clone(), 1)
        .index()
        .wake_channel();
    if let Some(nodes) = queue::cluster_nodes(url) {
        anyhow::ensure!(
            !nodes.is_empty(),
            "invalid QUIESCE_REDIS_URL {address}: a cluster URL names its seed nodes, redis+cluster://host:port,host:port"
        );
        let client = ClusterClientBuilder::new(nodes.clone())
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .build()
            .with_context(|| format!("invalid QUIESCE_REDIS_URL {address}"))?;
        let connection = queue::Cluster::connect(client).await.with_context(|| {
            format!("cannot connect to the Redis Cluster at {address} (QUIESCE_REDIS_URL)")
        })?;
        return Ok((
            RedisConnection::Cluster(connection),
            Wakeups::cluster(nodes, channel),
        ));
    }
    let client =
        redis::Client::open(url).with_context(|| format!("invalid QUIESCE_REDIS_URL {address}"))?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(2);
    let connection = ConnectionManager::new_with_config(client.clone(), config)
        .await
        .with_context(|| format!("cannot connect to Redis at {address} (QUIESCE_REDIS_URL)"))?;
    Ok((
        RedisConnection::Node(connection),
        Wakeups::node(client, channel),
    ))
}

/// The key layout the settings give: the shard count, and the one being drained if any.
pub fn keyspace(settings: &Settings) -> Keyspace {
    Keyspace::new(settings.redis.redis_prefix.clone(), settings.redis.shards)
        .draining(Some(settings.redis.previous_shards))
}
