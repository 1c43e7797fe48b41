//! The connection to Redis: one node (a `ConnectionManager`) or a Redis Cluster (the redis
//! crate's own cluster client, which follows MOVED and ASK, failovers and topology changes).
//! What is per node (CONFIG GET, SCAN) goes to every primary through [`RedisConnection::on_primaries`].

use std::{
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

use futures::FutureExt;
use redis::{
    Cmd, RedisError, RedisFuture, RedisResult, Value,
    aio::{ConnectionLike, ConnectionManager},
    cluster::ClusterClient,
    cluster_async::ClusterConnection,
    cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo},
};
use tokio::task::JoinSet;

/// The URL schemes that name a cluster by its seed nodes.
const CLUSTER_SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis://"),
    ("rediss+cluster://", "rediss://"),
];

/// How long a cluster connection may fail every call before it is replaced by a new one.
const REBUILD_AFTER: Duration = Duration::from_secs(3);

#[derive(Clone)]
pub enum RedisConnection {
    Node(ConnectionManager),
    Cluster(Cluster),
}

/// A cluster connection that is replaced when it stops answering: the cluster client
/// follows failovers and moved slots itself, but a connection whose slot refresh began while
/// its master was being killed under load was seen to wait on it for good, every call timing
/// out (redis 1.8). A new connection reads the topology afresh.
#[derive(Clone)]
pub struct Cluster {
    client: Arc<ClusterClient>,
    current: Arc<RwLock<ClusterConnection>>,
    /// Since when every call has failed on the connection (None: the last one succeeded).
    failing_since: Arc<Mutex<Option<Instant>>>,
    /// The replacement under way, if any: one at a time, reaped at the next failure, aborted
    /// with the last handle.
    rebuilding: Arc<Mutex<JoinSet<()>>>,
}

impl Cluster {
    pub async fn connect(client: ClusterClient) -> RedisResult<Self> {
        let connection = client.get_async_connection().await?;
        Ok(Self {
            client: Arc::new(client),
            current: Arc::new(RwLock::new(connection)),
            failing_since: Arc::default(),
            rebuilding: Arc::default(),
        })
    }

    fn connection(&self) -> ClusterConnection {
        self.current.read().expect("not poisoned").clone()
    }

    /// Notes how a call ended; after failing for `REBUILD_AFTER` the connection is replaced
    /// (in the background, once at a time).
    fn observe<T>(&self, result: &RedisResult<T>) {
        self.note(match result {
            Ok(_) => false,
            Err(error) => is_transport_error(error),
        });
    }

    fn note(&self, failing: bool) {
        let mut since = self.failing_since.lock().expect("not poisoned");
        if !failing {
            *since = None;
            return;
        }
        let started = *since.get_or_insert_with(Instant::now);
        if started.elapsed() < REBUILD_AFTER {
            return;
        }
        let mut rebuilding = self.rebuilding.lock().expect("not poisoned");
        while let Some(ended) = rebuilding.try_join_next() {
            if let Err(error) = ended {
                tracing::error!(%error, "the replacement of the Redis Cluster connection panicked");
            }
        }
        if !rebuilding.is_empty() {
            return;
        }
        *since = None;
        let (client, current) = (Arc::clone(&self.client), Arc::clone(&self.current));
        rebuilding.spawn(async move {
            match client.get_async_connection().await {
                Ok(connection) => {
                    *current.write().expect("not poisoned") = connection;
                    tracing::warn!(
                        "the Redis Cluster connection kept failing; replaced it with a new one"
                    );
                }
                Err(error) => {
                    tracing::warn!(error = %crate::telemetry::Chain(&error), "could not open a new Redis Cluster connection");
                }
            }
        });
    }

    async fn route(&self, cmd: Cmd, routing: RoutingInfo) -> RedisResult<Value> {
        let call = self.watch();
        let result = self.connection().route_command(cmd, routing).await;
        call.finish(&result);
        result
    }

    /// Watches one call: one the caller gave up on (dropped unanswered, as a timeout does)
    /// counts as a failure.
    fn watch(&self) -> Call<'_> {
        Call {
            cluster: self,
            answered: false,
        }
    }
}

struct Call<'a> {
    cluster: &'a Cluster,
    answered: bool,
}

impl Call<'_> {
    fn finish<T>(mut self, result: &RedisResult<T>) {
        self.answered = true;
        self.cluster.observe(result);
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.cluster.note(true);
        }
    }
}

/// A failure of the connection rather than an answer of the server.
fn is_transport_error(error: &RedisError) -> bool {
    error.is_timeout()
        || error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_cluster_error()
        || error.kind() == redis::ErrorKind::ClusterConnectionNotFound
}

impl RedisConnection {
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisConnection::Cluster(_))
    }

    /// Runs `cmd` on every primary; each reply with the node's address (empty on one node).
    pub async fn on_primaries(&self, cmd: Cmd) -> RedisResult<Vec<(String, Value)>> {
        match self {
            RedisConnection::Node(redis) => {
                let mut redis = redis.clone();
                Ok(vec![(String::new(), cmd.query_async(&mut redis).await?)])
            }
            RedisConnection::Cluster(redis) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let reply = redis.route(cmd, routing).await?;
                let Value::Map(replies) = reply else {
                    return Ok(vec![(String::new(), reply)]);
                };
                replies
                    .into_iter()
                    .map(|(node, value)| {
                        let node: String = redis::from_redis_value(node)?;
                        match value {
                            Value::ServerError(error) => Err(error.into()),
                            value => Ok((node, value)),
                        }
                    })
                    .collect()
            }
        }
    }
}

impl RedisConnection {
    /// Whether Redis answers: one node's PING (on a cluster, any node's: a master that is
    /// failing over does not make every process unready, which would take every instance
    /// out of a load balancer at once).
    pub async fn ping(&self) -> RedisResult<()> {
        let cmd = redis::cmd("PING");
        let _: Value = match self {
            RedisConnection::Node(redis) => cmd.query_async(&mut redis.clone()).await?,
            RedisConnection::Cluster(redis) => {
                redis
                    .route(cmd, RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random))
                    .await?
            }
        };
        Ok(())
    }

    /// The primaries' addresses (`host:port`; one empty name on a single node).
    pub async fn primaries(&self) -> RedisResult<Vec<String>> {
        Ok(self
            .on_primaries(redis::cmd("PING"))
            .await?
            .into_iter()
            .map(|(node, _)| node)
            .collect())
    }

    /// Runs `cmd` on one node, by its address from [`Self::primaries`].
    pub async fn on_node(&self, node: &str, cmd: Cmd) -> RedisResult<Value> {
        match self {
            RedisConnection::Node(redis) => cmd.query_async(&mut redis.clone()).await,
            RedisConnection::Cluster(redis) => {
                let (host, port) = node_address(node).ok_or_else(|| {
                    redis::RedisError::from((
                        redis::ErrorKind::Client,
                        "cluster node address is not host:port",
                    ))
                })?;
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.to_owned(),
                    port,
                });
                redis.route(cmd, routing).await
            }
        }
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConnection::Node(redis) => redis.req_packed_command(cmd),
            RedisConnection::Cluster(cluster) => async move {
                let call = cluster.watch();
                let result = cluster.connection().req_packed_command(cmd).await;
                call.finish(&result);
                result
            }
            .boxed(),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConnection::Node(redis) => redis.req_packed_commands(pipeline, offset, count),
            RedisConnection::Cluster(cluster) => async move {
                let call = cluster.watch();
                let result = cluster
                    .connection()
                    .req_packed_commands(pipeline, offset, count)
                    .await;
                call.finish(&result);
                result
            }
            .boxed(),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConnection::Node(redis) => redis.get_db(),
            RedisConnection::Cluster(_) => 0,
        }
    }
}

/// The seed nodes of a cluster URL, each as a plain node URL with the same credentials and
/// parameters: `redis+cluster://[user:password@]h1:p1,h2:p2[/?params]` (or `rediss+cluster://`
/// for TLS). `None` for a single-node URL.
pub fn cluster_nodes(url: &str) -> Option<Vec<String>> {
    let (rest, scheme) = CLUSTER_SCHEMES
        .iter()
        .find_map(|(cluster, node)| url.strip_prefix(cluster).map(|rest| (rest, *node)))?;
    // Credentials end at the last '@' (a password may hold one); hosts end at '/' or '?'.
    let (userinfo, hosts_and_rest) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    let end = hosts_and_rest
        .find(['/', '?'])
        .unwrap_or(hosts_and_rest.len());
    let (hosts, tail) = hosts_and_rest.split_at(end);
    Some(
        hosts
            .split(',')
            .map(str::trim)
            .filter(|host| !host.is_empty())
            .map(|host| format!("{scheme}{userinfo}{host}{tail}"))
            .collect(),
    )
}

/// A node's host and port from its address: `host:port`, `[v6]:port`, or an IPv6 address and
/// its port as the redis crate writes them (`::1:7000`, without brackets). The host is given
/// without brackets, as the redis crate keys its connections.
fn node_address(node: &str) -> Option<(&str, u16)> {
    let (host, port) = node.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let host = host
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(host);
    (!host.is_empty()).then_some((host, port))
}

#[cfg(test)]
mod tests {
    use super::{cluster_nodes, node_address};

    #[test]
    fn node_addresses_give_their_host_and_port_for_names_ipv4_and_ipv6() {
        assert_eq!(node_address("10.0.0.1:7000"), Some(("10.0.0.1", 7000)));
        assert_eq!(
            node_address("redis-a.internal:7001"),
            Some(("redis-a.internal", 7001))
        );
        assert_eq!(node_address("[::1]:7000"), Some(("::1", 7000)));
        assert_eq!(node_address("[fd00:1::5]:6379"), Some(("fd00:1::5", 6379)));
        assert_eq!(node_address("::1:7000"), Some(("::1", 7000)));
        assert_eq!(node_address("fd00:1::5:6379"), Some(("fd00:1::5", 6379)));
        assert_eq!(node_address("10.0.0.1"), None);
        assert_eq!(node_address("10.0.0.1:port"), None);
        assert_eq!(node_address(":7000"), None);
        assert_eq!(node_address("[]:7000"), None);
    }

    #[test]
    fn cluster_urls_name_their_seed_nodes_with_the_same_credentials_and_parameters() {
        assert_eq!(cluster_nodes("redis://127.0.0.1:6379"), None);
        assert_eq!(
            cluster_nodes("redis+cluster://10.0.0.1:7000,10.0.0.2:7001").unwrap(),
            ["redis://10.0.0.1:7000", "redis://10.0.0.2:7001"]
        );
        assert_eq!(
            cluster_nodes("rediss+cluster://app:p@ss@h1:7000, h2:7000/?protocol=resp3").unwrap(),
            [
                "rediss://app:p@ss@h1:7000/?protocol=resp3",
                "rediss://app:p@ss@h2:7000/?protocol=resp3"
            ]
        );
        assert_eq!(
            cluster_nodes("redis+cluster://[::1]:7000,[fd00::2]:7001").unwrap(),
            ["redis://[::1]:7000", "redis://[fd00::2]:7001"]
        );
        assert!(cluster_nodes("redis+cluster://").unwrap().is_empty());
    }
}
