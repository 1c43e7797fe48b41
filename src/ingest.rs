//! Group commit of accepted events: concurrent requests hand their validated events to a few
//! committer tasks, each of which writes everything queued in one Postgres transaction and then
//! schedules the entities in Redis, before any of those requests is answered.

use crate::telemetry::Timed;
use std::{
    collections::{HashMap, hash_map::Entry},
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::{Mutex, Notify, mpsc, oneshot};

use crate::{
    domain::{EntityId, Event, Priority},
    queue::{Queue, QueueError},
    store::{Store, StoreError},
    telemetry::names,
};

/// Most events one group commit takes from the queue.
const MAX_GROUP_EVENTS: usize = 5_000;
/// Group committers per process: enough to overlap one group's Redis step with the next
/// group's Postgres step.
const COMMITTERS: usize = 4;

/// Why a request's events could not be made durable and scheduled; all mean "try again".
#[derive(Debug, Clone, thiserror::Error)]
pub enum IngestError {
    #[error("postgres unavailable: {0}")]
    Postgres(String),
    #[error("redis unavailable: {0}")]
    Redis(String),
    #[error("timed out after {0:?} waiting for postgres and redis")]
    Timeout(Duration),
    #[error("the ingest pipeline is shutting down")]
    ShuttingDown,
}

impl From<StoreError> for IngestError {
    fn from(error: StoreError) -> Self {
        IngestError::Postgres(error.to_string())
    }
}

impl From<QueueError> for IngestError {
    fn from(error: QueueError) -> Self {
        IngestError::Redis(error.to_string())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct IngestOutcome {
    pub accepted: usize,
    pub duplicates: usize,
}

struct Job {
    events: Vec<Event>,
    reply: oneshot::Sender<Result<IngestOutcome, IngestError>>,
}

/// Handle used by the HTTP layer; cheap to clone.
#[derive(Clone)]
pub struct Ingestor {
    jobs: mpsc::Sender<Job>,
    timeout: Duration,
}

impl Ingestor {
    /// Starts the committer tasks; they stop when every handle is dropped.
    pub fn start(store: Store, queue: Queue, wakeup: Arc<Notify>, timeout: Duration) -> Self {
        let (jobs, receiver) = mpsc::channel::<Job>(4_096);
        let receiver = Arc::new(Mutex::new(receiver));
        for _ in 0..COMMITTERS {
            let committer = Committer {
                store: store.clone(),
                queue: queue.clone(),
                wakeup: Arc::clone(&wakeup),
                receiver: Arc::clone(&receiver),
                timeout,
            };
            tokio::spawn(committer.run());
        }
        Self { jobs, timeout }
    }

    /// Records and schedules a request's events; returns once they are durable and scheduled.
    pub async fn submit(&self, events: Vec<Event>) -> Result<IngestOutcome, IngestError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job { events, reply })
            .await
            .map_err(|_| IngestError::ShuttingDown)?;
        // The committer has its own timeout; this one bounds the wait for a place in line.
        match tokio::time::timeout(self.timeout * 3, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(IngestError::ShuttingDown),
            Err(_) => Err(IngestError::Timeout(self.timeout * 3)),
        }
    }
}

struct Committer {
    store: Store,
    queue: Queue,
    wakeup: Arc<Notify>,
    receiver: Arc<Mutex<mpsc::Receiver<Job>>>,
    timeout: Duration,
}

impl Committer {
    async fn run(self) {
        loop {
            let group = {
                let mut receiver = self.receiver.lock().await;
                let Some(first) = receiver.recv().await else {
                    return;
                };
                let mut size = first.events.len();
                let mut group = vec![first];
                while size < MAX_GROUP_EVENTS {
                    match receiver.try_recv() {
                        Ok(job) => {
                            size += job.events.len();
                            group.push(job);
                        }
                        Err(_) => break,
                    }
                }
                group
            };
            let started = Instant::now();
            let result = tokio::time::timeout(self.timeout, self.commit(&group)).await;
            metrics::histogram!(names::INGEST_COMMIT_SECONDS)
                .record(started.elapsed().as_secs_f64());
            match result {
                Ok(Ok(outcomes)) => {
                    for (job, outcome) in group.into_iter().zip(outcomes) {
                        let _ = job.reply.send(Ok(outcome));
                    }
                }
                Ok(Err(error)) => {
                    tracing::warn!(error = %error, requests = group.len(), "group commit failed");
                    for job in group {
                        let _ = job.reply.send(Err(error.clone()));
                    }
                }
                Err(_) => {
                    tracing::warn!(requests = group.len(), "group commit timed out");
                    for job in group {
                        let _ = job.reply.send(Err(IngestError::Timeout(self.timeout)));
                    }
                }
            }
        }
    }

    /// One transaction for the whole group, then one schedule call per shard.
    async fn commit(&self, group: &[Job]) -> Result<Vec<IngestOutcome>, IngestError> {
        // The first occurrence of an id in the group owns it; later ones are duplicates.
        // Each id's first occurrence: the entity it is recorded for if it is new.
        let mut owned_by: HashMap<&str, &EntityId> = HashMap::new();
        let mut unique: Vec<&Event> = Vec::new();
        let mut owners: Vec<(usize, &str)> = Vec::new();
        for (index, job) in group.iter().enumerate() {
            for event in &job.events {
                if let Entry::Vacant(slot) = owned_by.entry(event.id.as_str()) {
                    slot.insert(&event.entity);
                    unique.push(event);
                    owners.push((index, event.id.as_str()));
                }
            }
        }
        let inserted = self
            .store
            .record_events(&unique)
            .timed_query("record_events")
            .await?;

        let mut outcomes: Vec<IngestOutcome> = group
            .iter()
            .map(|job| IngestOutcome {
                accepted: 0,
                duplicates: job.events.len(),
            })
            .collect();
        for (index, id) in owners {
            if inserted.contains(id) {
                outcomes[index].accepted += 1;
                outcomes[index].duplicates -= 1;
            }
        }

        // Duplicates are re-scheduled too: a sender's retry after a Redis failure repairs it.
        // A duplicate is scheduled under the entity its id was recorded for, not the one the
        // retry names (an id reused for another entity must not schedule an unknown entity).
        let duplicate_ids: Vec<&str> = unique
            .iter()
            .filter(|e| !inserted.contains(e.id.as_str()))
            .map(|e| e.id.as_str())
            .collect();
        let recorded = if duplicate_ids.is_empty() {
            HashMap::new()
        } else {
            self.store.entities_of(&duplicate_ids).await?
        };
        let mut entities: HashMap<EntityId, Priority> = HashMap::new();
        for event in group.iter().flat_map(|job| &job.events) {
            let entity = match recorded.get(event.id.as_str()) {
                Some(stored) => stored.clone(),
                // Inserted now, by this event or an earlier one of the group with the same
                // entity.
                None if owned_by.get(event.id.as_str()) == Some(&&event.entity) => {
                    event.entity.clone()
                }
                None => continue,
            };
            let priority = entities.entry(entity).or_default();
            if event.priority == Priority::Critical {
                *priority = Priority::Critical;
            }
        }
        let to_schedule: Vec<(EntityId, Priority)> = entities.into_iter().collect();
        self.queue.schedule(&to_schedule).await?;
        if to_schedule.iter().any(|(_, p)| *p == Priority::Critical) {
            self.wakeup.notify_one();
        }

        let accepted: usize = outcomes.iter().map(|o| o.accepted).sum();
        let duplicates: usize = outcomes.iter().map(|o| o.duplicates).sum();
        metrics::counter!(names::EVENTS_INGESTED).increment(accepted as u64);
        metrics::counter!(names::EVENTS_DUPLICATE).increment(duplicates as u64);
        Ok(outcomes)
    }
}
