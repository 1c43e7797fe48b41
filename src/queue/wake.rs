//! Wake-ups across processes: when something becomes due sooner than the due index said
//! (`lua/index_report.lua` publishes it), every subscribed worker process is told at once,
//! instead of after its poll interval.

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use redis::{PushInfo, PushKind, cluster::ClusterClientBuilder};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Longest pause between attempts to subscribe again.
const MAX_RETRY: Duration = Duration::from_secs(5);

/// Where the wake channel is subscribed.
#[derive(Clone)]
enum Source {
    Node(redis::Client),
    /// Seed node URLs: the cluster client subscribes on a node of its choosing (a PUBLISH
    /// reaches every node) and subscribes again after failovers.
    Cluster(Vec<String>),
}

#[derive(Clone)]
pub struct Wakeups {
    source: Source,
    channel: String,
}

impl Wakeups {
    pub fn node(client: redis::Client, channel: String) -> Self {
        Self {
            source: Source::Node(client),
            channel,
        }
    }

    pub fn cluster(nodes: Vec<String>, channel: String) -> Self {
        Self {
            source: Source::Cluster(nodes),
            channel,
        }
    }

    /// Notifies `wakeup` for every message on the channel until `shutdown`, subscribing again
    /// (with a growing pause) whenever the subscription is lost. Without it, workers still find
    /// due entities, only up to a poll interval later.
    pub async fn forward(self, wakeup: Arc<Notify>, shutdown: CancellationToken) {
        let mut pause = Duration::from_millis(100);
        loop {
            let ended = tokio::select! {
                _ = shutdown.cancelled() => return,
                ended = self.listen(&wakeup) => ended,
            };
            if let Err(error) = ended {
                tracing::debug!(error = %crate::telemetry::Chain(&error), "wake-up subscription lost; subscribing again");
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(MAX_RETRY);
        }
    }

    /// Listens until the subscription ends.
    async fn listen(&self, wakeup: &Arc<Notify>) -> redis::RedisResult<()> {
        match &self.source {
            Source::Node(client) => {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(&self.channel).await?;
                let mut messages = pubsub.on_message();
                while messages.next().await.is_some() {
                    wakeup.notify_one();
                }
                Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "subscription closed",
                )))
            }
            Source::Cluster(nodes) => {
                let notify = Arc::clone(wakeup);
                let client = ClusterClientBuilder::new(nodes.clone())
                    .use_protocol(redis::ProtocolVersion::RESP3)
                    .push_sender(move |push: PushInfo| {
                        if push.kind == PushKind::Message {
                            notify.notify_one();
                        }
                        Ok::<(), std::convert::Infallible>(())
                    })
                    .build()?;
                let mut connection = client.get_async_connection().await?;
                connection.subscribe(&self.channel).await?;
                // The cluster client keeps the subscription through disconnects and failovers.
                std::future::pending::<()>().await;
                drop(connection);
                Ok(())
            }
        }
    }
}
