//! Wake-ups across processes: when something becomes due sooner than the due index said
//! (`lua/index_report.lua` publishes it), every subscribed worker process is told at once,
//! instead of after its poll interval.
//!
//! A subscription can go quiet without an error: on a cluster the client subscribes on the
//! master of the channel's slot, and after that master fails over it keeps reconnecting to the
//! dead address; a half-open TCP link says nothing either. So each process publishes a
//! heartbeat on the channel, and a subscription that has heard nothing, not even heartbeats,
//! for a while is dropped and made again.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use redis::{AsyncCommands, PushInfo, PushKind, Value, cluster::ClusterClientBuilder};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Longest pause between attempts to subscribe again.
const MAX_RETRY: Duration = Duration::from_secs(5);

/// How often each process publishes a heartbeat on the wake channel.
const HEARTBEAT: Duration = Duration::from_secs(5);

/// A subscription that heard nothing for this long is made again.
const SILENCE: Duration = Duration::from_secs(15);

/// The heartbeat's message: it wakes nobody.
const HEARTBEAT_MESSAGE: &str = "heartbeat";

/// Where the wake channel is subscribed.
#[derive(Clone)]
enum Source {
    Node(redis::Client),
    /// Seed node URLs: the cluster client subscribes on a node of its choosing (a PUBLISH
    /// reaches every node).
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
    /// (with a growing pause) whenever the subscription is lost or goes quiet. Without it,
    /// workers still find due entities, only up to a poll interval later.
    pub async fn forward(self, wakeup: Arc<Notify>, shutdown: CancellationToken) {
        let mut pause = Duration::from_millis(100);
        loop {
            let started = Instant::now();
            let ended = tokio::select! {
                _ = shutdown.cancelled() => return,
                ended = self.listen(&wakeup) => ended,
            };
            if let Err(error) = ended {
                tracing::debug!(error = %crate::telemetry::Chain(&error), "wake-up subscription lost; subscribing again");
            }
            // A subscription that lasted a while earns a quick retry.
            if started.elapsed() > SILENCE {
                pause = Duration::from_millis(100);
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(MAX_RETRY);
        }
    }

    /// Listens until the subscription ends or goes quiet.
    async fn listen(&self, wakeup: &Arc<Notify>) -> redis::RedisResult<()> {
        match &self.source {
            Source::Node(client) => {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(&self.channel).await?;
                let mut publisher = client.get_multiplexed_async_connection().await?;
                let mut messages = pubsub.on_message();
                let mut beat = tokio::time::interval(HEARTBEAT);
                let mut heard = Instant::now();
                loop {
                    tokio::select! {
                        message = messages.next() => {
                            let Some(message) = message else {
                                return Err(lost("subscription closed"));
                            };
                            heard = Instant::now();
                            if message.get_payload_bytes() != HEARTBEAT_MESSAGE.as_bytes() {
                                wakeup.notify_one();
                            }
                        }
                        _ = beat.tick() => {
                            if heard.elapsed() > SILENCE {
                                return Err(lost("no message, not even a heartbeat"));
                            }
                            heartbeat(&mut publisher, &self.channel).await;
                        }
                    }
                }
            }
            Source::Cluster(nodes) => {
                let notify = Arc::clone(wakeup);
                let epoch = Instant::now();
                let heard = Arc::new(AtomicU64::new(0));
                let last = Arc::clone(&heard);
                let client = ClusterClientBuilder::new(nodes.clone())
                    .use_protocol(redis::ProtocolVersion::RESP3)
                    .push_sender(move |push: PushInfo| {
                        if push.kind == PushKind::Message {
                            last.store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
                            if !is_heartbeat(&push) {
                                notify.notify_one();
                            }
                        }
                        Ok::<(), std::convert::Infallible>(())
                    })
                    .build()?;
                let mut connection = client.get_async_connection().await?;
                connection.subscribe(&self.channel).await?;
                let mut beat = tokio::time::interval(HEARTBEAT);
                loop {
                    beat.tick().await;
                    let quiet = epoch
                        .elapsed()
                        .saturating_sub(Duration::from_millis(heard.load(Ordering::Relaxed)));
                    if quiet > SILENCE {
                        return Err(lost("no message, not even a heartbeat"));
                    }
                    heartbeat(&mut connection, &self.channel).await;
                }
            }
        }
    }
}

/// Publishes a heartbeat; a failure shows as silence.
async fn heartbeat(connection: &mut impl AsyncCommands, channel: &str) {
    let published: redis::RedisResult<i64> = connection.publish(channel, HEARTBEAT_MESSAGE).await;
    if let Err(error) = published {
        tracing::debug!(error = %crate::telemetry::Chain(&error), "could not publish the wake channel's heartbeat");
    }
}

fn is_heartbeat(push: &PushInfo) -> bool {
    matches!(push.data.get(1), Some(Value::BulkString(payload)) if payload == HEARTBEAT_MESSAGE.as_bytes())
}

fn lost(why: &'static str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        why,
    ))
}
