//! Ingest, the one way in for events once a request is parsed and its sender authenticated:
//! the sender's rate, a replayed GitHub delivery told apart, then the group commit (events
//! durable in Postgres, entities scheduled in Redis) before the request is answered.
//!
//! The GitHub style signs the body alone, with no timestamp, so a captured request verifies
//! forever: ingest remembers every accepted GitHub-signed request (its delivery id and the
//! SHA-256 of its body, per source, for good) and answers a replay as a duplicate.

mod commit;
mod rate;

use std::{collections::HashMap, sync::Arc, time::Duration};

use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use self::commit::GroupCommit;
pub use self::{
    commit::{IngestError, IngestOutcome},
    rate::{RateKey, RateLimited, RateLimits},
};
use crate::{
    domain::{EntityId, Event, Priority},
    queue::Queue,
    store::{Duplicate, GithubDelivery, Store},
    telemetry::{names, traces::TraceParent},
};

/// What the deliveries table calls the secrets of `POST /v1/events` (no source name has a `/`).
const EVENTS_ENDPOINT: &str = "/v1/events";

/// Why a request's events were not taken.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(transparent)]
    RateLimited(#[from] RateLimited),
    /// Its group's commit failed: the committer logged why, once for the whole group.
    #[error("the group commit failed")]
    GroupFailed(#[source] IngestError),
    /// Postgres or Redis failed this request alone (or it waited too long); not logged yet.
    #[error(transparent)]
    Unavailable(IngestError),
}

/// A GitHub-signed request's delivery: its id and the raw body it signed.
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    pub id: &'a str,
    pub body: &'a [u8],
}

/// One parsed, authenticated request's events.
#[derive(Debug)]
pub struct Submission<'a> {
    /// Whose rate the events spend.
    pub sender: RateKey<'a>,
    /// Set for a request verified by a GitHub-style secret, which ingest takes once.
    pub delivery: Option<Delivery<'a>>,
    pub events: Vec<Event>,
    /// The trace the events entered in, kept with them.
    pub trace: Option<TraceParent>,
}

/// The entry into ingest; cheap to clone.
#[derive(Clone)]
pub struct Ingestor {
    groups: GroupCommit,
    store: Store,
    queue: Queue,
}

impl Ingestor {
    /// Starts the group committers; they stop when every handle is dropped. `wakeup` is told of
    /// a critical event, so that the worker claims it at once.
    pub fn start(store: Store, queue: Queue, wakeup: Arc<Notify>, timeout: Duration) -> Self {
        Self {
            groups: GroupCommit::start(store.clone(), queue.clone(), wakeup, timeout),
            store,
            queue,
        }
    }

    /// Takes a request's events, once per GitHub delivery; returns once they are durable and
    /// scheduled.
    ///
    /// A GitHub delivery whose id or body its source accepted before is a replay: it is
    /// answered as a duplicate of every event in it and nothing is written; the entities its
    /// events were recorded for are scheduled again (a retry after a failed schedule step
    /// repairs it; events past retention schedule nothing).
    /// Otherwise its events are submitted and the delivery is remembered by the statement that
    /// makes them durable, or not at all: a request that fails (503) has written nothing and
    /// has not used up its delivery id, and the sender's retry goes through. Two copies of a
    /// request racing each other both pass the check; the second then finds its event ids
    /// recorded by the first, as for any duplicate.
    pub async fn submit(
        &self,
        rate_limits: &RateLimits,
        submission: Submission<'_>,
    ) -> Result<IngestOutcome, SubmitError> {
        let Submission {
            sender,
            delivery,
            events,
            trace,
        } = submission;
        let Some(delivery) = delivery else {
            rate_limits.check(sender, events.len())?;
            return self.groups.submit(events, None, trace).await;
        };
        let source = match sender {
            RateKey::Source(name) => name,
            RateKey::Client(_) => EVENTS_ENDPOINT,
        };
        let digest: [u8; 32] = Sha256::digest(delivery.body).into();
        if self
            .store
            .deliveries()
            .github_delivery_seen(source, delivery.id, &digest)
            .await
            .map_err(|error| SubmitError::Unavailable(error.into()))?
        {
            tracing::debug!(
                source,
                delivery = delivery.id,
                "a GitHub delivery seen before: a duplicate"
            );
            self.schedule_recorded(&events)
                .await
                .map_err(SubmitError::Unavailable)?;
            metrics::counter!(names::EVENTS_DUPLICATE).increment(events.len() as u64);
            return Ok(IngestOutcome {
                accepted: 0,
                duplicates: events.len(),
            });
        }
        // Only a delivery not seen before spends the source's rate: replaying a captured one
        // cannot drain the budget of the real sender.
        rate_limits.check(sender, events.len())?;
        let delivery = GithubDelivery {
            source: source.to_owned(),
            delivery_id: delivery.id.to_owned(),
            body_sha256: digest,
        };
        self.groups.submit(events, Some(delivery), trace).await
    }

    /// Schedules again the entities that `events` were recorded for (those still within
    /// retention) that still owe an evaluation, writing nothing: a sender's retry of a
    /// delivery whose events were durable but whose schedule step failed repairs the
    /// schedule, as the retry of any duplicate does.
    async fn schedule_recorded(&self, events: &[Event]) -> Result<(), IngestError> {
        let ids: Vec<&str> = events.iter().map(|event| event.id.as_str()).collect();
        let recorded = self.store.events().duplicates_of(&ids).await?;
        let mut entities: HashMap<&EntityId, Priority> = HashMap::new();
        for event in events {
            if let Some(Duplicate { entity, owed: true }) = recorded.get(event.id.as_str()) {
                let priority = entities.entry(entity).or_default();
                *priority = (*priority).max(event.priority);
            }
        }
        let entities: Vec<(EntityId, Priority)> = entities
            .into_iter()
            .map(|(entity, priority)| (entity.clone(), priority))
            .collect();
        self.queue.schedule(&entities).await?;
        Ok(())
    }
}
