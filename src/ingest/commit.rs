//! Group commit of accepted events: concurrent requests hand their validated events to a
//! coalescer whose committers each write everything queued in one Postgres statement and then
//! schedule the entities in Redis, before any of those requests is answered. A group's span
//! follows from the spans of the requests in it, and its failure is logged once, there.

use std::{
    collections::{HashMap, hash_map::Entry},
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::Notify;
use tracing::Instrument;

use super::SubmitError;
use crate::{
    coalesce::{Batching, Coalescer},
    domain::{EntityId, Event, Priority},
    queue::{Queue, QueueError},
    store::{Duplicate, GithubDelivery, RecordedEvents, Store, StoreError},
    telemetry::{Timed, names, traces::TraceParent},
};

/// Most events one group commit takes from the queue.
const MAX_GROUP_EVENTS: usize = 5_000;
/// Group committers per process: enough to overlap one group's Redis step with the next
/// group's Postgres step.
const COMMITTERS: usize = 4;
/// Requests waiting for a committer before senders wait to queue theirs.
const QUEUED_REQUESTS: usize = 4_096;

/// Why a request's events could not be made durable and scheduled; all mean "try again". A
/// group's failure is every request's in it, so causes are shared.
#[derive(Debug, Clone, thiserror::Error)]
pub enum IngestError {
    #[error("postgres is unavailable")]
    Postgres(#[source] Arc<StoreError>),
    #[error("redis is unavailable")]
    Redis(#[source] Arc<QueueError>),
    #[error("timed out after {0:?} waiting for postgres and redis")]
    Timeout(Duration),
    #[error("the ingest pipeline is shutting down")]
    ShuttingDown,
}

impl From<StoreError> for IngestError {
    fn from(error: StoreError) -> Self {
        IngestError::Postgres(Arc::new(error))
    }
}

impl From<QueueError> for IngestError {
    fn from(error: QueueError) -> Self {
        IngestError::Redis(Arc::new(error))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct IngestOutcome {
    pub accepted: usize,
    pub duplicates: usize,
}

type Answer = Result<IngestOutcome, IngestError>;

/// One request's events in a group, with the GitHub delivery they came in (remembered in the
/// same statement), the span of the request that sent them and the trace context kept with
/// them.
struct Request {
    events: Vec<Event>,
    delivery: Option<GithubDelivery>,
    span: tracing::Span,
    trace: Option<TraceParent>,
}

/// The committers' queue; cheap to clone.
#[derive(Clone)]
pub(super) struct GroupCommit {
    groups: Coalescer<Request, Answer>,
    timeout: Duration,
}

impl GroupCommit {
    /// Starts the committers; they stop when every handle is dropped.
    pub(super) fn start(
        store: Store,
        queue: Queue,
        wakeup: Arc<Notify>,
        timeout: Duration,
    ) -> Self {
        let committer = Arc::new(Committer {
            store,
            queue,
            wakeup,
            timeout,
        });
        let batching = Batching {
            name: "ingest",
            flushers: COMMITTERS,
            max_weight: MAX_GROUP_EVENTS,
            weigh: |request: &Request| request.events.len(),
            queue: QUEUED_REQUESTS,
            measured: false,
        };
        let groups = Coalescer::start(batching, move |group: Vec<Request>| {
            let committer = Arc::clone(&committer);
            async move { committer.commit_group(group).await }
        });
        Self { groups, timeout }
    }

    /// Records and schedules a request's events, and remembers its delivery with them; returns
    /// once they are durable and scheduled. A request given up on while it still waits for its
    /// group is never written.
    pub(super) async fn submit(
        &self,
        events: Vec<Event>,
        delivery: Option<GithubDelivery>,
        trace: Option<TraceParent>,
    ) -> Result<IngestOutcome, SubmitError> {
        let request = Request {
            events,
            delivery,
            span: tracing::Span::current(),
            trace,
        };
        // The committer has its own timeout; this one bounds the wait for a place in line.
        let wait = self.timeout * 3;
        match tokio::time::timeout(wait, self.groups.call(request)).await {
            Ok(Some(answer)) => answer.map_err(SubmitError::GroupFailed),
            Ok(None) => Err(SubmitError::Unavailable(IngestError::ShuttingDown)),
            Err(_) => Err(SubmitError::Unavailable(IngestError::Timeout(wait))),
        }
    }
}

struct Committer {
    store: Store,
    queue: Queue,
    wakeup: Arc<Notify>,
    timeout: Duration,
}

impl Committer {
    /// Commits a group, within the timeout, and answers each request of it. A failure is
    /// logged here, once for the group; its requests answer without logging it again.
    async fn commit_group(&self, group: Vec<Request>) -> Vec<Answer> {
        let events: usize = group.iter().map(|request| request.events.len()).sum();
        // In the first request's trace, following from the others'.
        let span = tracing::info_span!(parent: &group[0].span, "ingest_group", requests = group.len(), events);
        for request in &group[1..] {
            span.follows_from(&request.span);
        }
        let mut traces = Vec::with_capacity(group.len());
        let mut deliveries = Vec::new();
        let group: Vec<Vec<Event>> = group
            .into_iter()
            .map(|request| {
                traces.push(request.trace);
                deliveries.extend(request.delivery);
                request.events
            })
            .collect();
        let deliveries: Vec<&GithubDelivery> = deliveries.iter().collect();
        let started = Instant::now();
        // The shards' schedule calls stop a little before the group's time is up, so that a
        // shard that hangs fails its own requests, not the group.
        let shards_deadline = tokio::time::Instant::now() + self.timeout.mul_f64(0.9);
        let commit = self.commit(&group, &traces, &deliveries, shards_deadline);
        let result = tokio::time::timeout(self.timeout, commit)
            .instrument(span.clone())
            .await;
        metrics::histogram!(names::INGEST_COMMIT_SECONDS).record(started.elapsed().as_secs_f64());
        let _entered = span.enter();
        match result {
            Ok(Ok(answers)) => answers,
            Ok(Err(error)) => {
                if let IngestError::Postgres(error) = &error {
                    self.store.notice(error);
                }
                tracing::warn!(error = %crate::telemetry::Chain(&error), "group commit failed");
                vec![Err(error); group.len()]
            }
            Err(_) => {
                tracing::warn!("group commit timed out");
                vec![Err(IngestError::Timeout(self.timeout)); group.len()]
            }
        }
    }

    /// One statement for the whole group (its events and its deliveries), then one schedule
    /// call per shard. The statement fails the whole group; a shard's schedule fails only the
    /// requests with an entity in it (their events are durable: the sender's retry, or the
    /// repair sweep, schedules them), so one Redis master down does not fail the requests
    /// that touch only the others.
    async fn commit(
        &self,
        group: &[Vec<Event>],
        traces: &[Option<TraceParent>],
        deliveries: &[&GithubDelivery],
        shards_deadline: tokio::time::Instant,
    ) -> Result<Vec<Answer>, IngestError> {
        // The first occurrence of an id in the group owns it; later ones are duplicates.
        // Each id's first occurrence: the entity it is recorded for if it is new.
        let mut owned_by: HashMap<&str, &EntityId> = HashMap::new();
        let mut unique: Vec<&Event> = Vec::new();
        let mut unique_traces: Vec<Option<&str>> = Vec::new();
        let mut owners: Vec<(usize, &str)> = Vec::new();
        for (index, events) in group.iter().enumerate() {
            for event in events {
                if let Entry::Vacant(slot) = owned_by.entry(event.id.as_str()) {
                    slot.insert(&event.entity);
                    unique.push(event);
                    unique_traces.push(traces[index].as_ref().map(TraceParent::as_str));
                    owners.push((index, event.id.as_str()));
                }
            }
        }
        let RecordedEvents {
            inserted,
            known: mut recorded,
        } = self
            .store
            .events()
            .record_group(&unique, &unique_traces, deliveries)
            .timed_query("record_events")
            .await?;

        let mut outcomes: Vec<IngestOutcome> = group
            .iter()
            .map(|events| IngestOutcome {
                accepted: 0,
                duplicates: events.len(),
            })
            .collect();
        for (index, id) in owners {
            if inserted.contains(id) {
                outcomes[index].accepted += 1;
                outcomes[index].duplicates -= 1;
            }
        }

        // A duplicate is scheduled again while its entity still owes an evaluation: a sender's
        // retry after a Redis failure repairs the schedule. One already evaluated schedules
        // nothing (each retry would cost an evaluation that finds nothing new). A duplicate is
        // scheduled under the entity its id was recorded for, not the one the retry names (an
        // id reused for another entity must not schedule an unknown entity). The statement
        // read the duplicates; only an id that another group recorded while it ran (the same
        // event sent twice at once) is read after it.
        let raced: Vec<&str> = unique
            .iter()
            .map(|e| e.id.as_str())
            .filter(|id| !inserted.contains(*id) && !recorded.contains_key(*id))
            .collect();
        if !raced.is_empty() {
            recorded.extend(self.store.events().duplicates_of(&raced).await?);
        }
        let mut entities: HashMap<EntityId, Priority> = HashMap::new();
        // Each request's entities, to answer it by its own shards' outcome.
        let mut requests: Vec<Vec<EntityId>> = vec![Vec::new(); group.len()];
        for (index, events) in group.iter().enumerate() {
            for event in events {
                let entity = match recorded.get(event.id.as_str()) {
                    Some(Duplicate { entity, owed: true }) => entity.clone(),
                    Some(Duplicate { owed: false, .. }) => continue,
                    // Inserted now, by this event or an earlier one of the group with the
                    // same entity.
                    None if owned_by.get(event.id.as_str()) == Some(&&event.entity) => {
                        event.entity.clone()
                    }
                    None => continue,
                };
                let priority = entities.entry(entity.clone()).or_default();
                *priority = (*priority).max(event.priority);
                requests[index].push(entity);
            }
        }
        let to_schedule: Vec<(EntityId, Priority)> = entities.into_iter().collect();
        let scheduled = self
            .queue
            .schedule_each(&to_schedule, Some(shards_deadline))
            .await;
        if to_schedule.iter().any(|(_, p)| *p == Priority::Critical) {
            self.wakeup.notify_one();
        }

        let accepted: usize = outcomes.iter().map(|o| o.accepted).sum();
        let duplicates: usize = outcomes.iter().map(|o| o.duplicates).sum();
        metrics::counter!(names::EVENTS_INGESTED).increment(accepted as u64);
        metrics::counter!(names::EVENTS_DUPLICATE).increment(duplicates as u64);
        let Some((error, unscheduled)) = scheduled.failure else {
            return Ok(outcomes.into_iter().map(Ok).collect());
        };
        let error = IngestError::from(error);
        let failed = requests
            .iter()
            .filter(|entities| entities.iter().any(|e| unscheduled.contains(e)))
            .count();
        tracing::warn!(
            error = %crate::telemetry::Chain(&error),
            entities = unscheduled.len(),
            requests = failed,
            "could not schedule some entities of a group (their events are durable; the senders' retries or the repair sweep schedule them)"
        );
        Ok(outcomes
            .into_iter()
            .zip(requests)
            .map(|(outcome, entities)| {
                if entities.iter().any(|e| unscheduled.contains(e)) {
                    Err(error.clone())
                } else {
                    Ok(outcome)
                }
            })
            .collect())
    }
}
