//! The two Postgres calls every evaluation makes, coalesced across concurrent evaluations:
//! snapshot reads share one statement, and completions (with their actions and outbox rows)
//! share one fenced statement, so one commit. Each evaluation still has its own lock, fence
//! and outcome; only the round trips are shared. The store answers each entity of a shared
//! statement on its own (`store/batched.rs`), so that one entity's bad data cannot fail the
//! others.

use std::{collections::HashMap, sync::Arc};

use crate::{
    coalesce::{Batching, Coalescer},
    domain::{AttributeReads, EntityId, Snapshot, Windows},
    store::{Completion, FencedEvaluation, Store, StoreError},
    telemetry::Timed,
};

/// Concurrent statements per call: with the poll loop's concurrency this keeps a few batches
/// in flight while the next ones fill.
const FLUSHERS: usize = 2;
/// Most evaluations one statement serves.
const MAX_BATCH: usize = 128;

type Result<T> = std::result::Result<T, StoreError>;

/// Up to [`MAX_BATCH`] evaluations a statement, [`FLUSHERS`] statements in flight.
fn batching<Req>(name: &'static str) -> Batching<Req> {
    Batching {
        name,
        flushers: FLUSHERS,
        max_weight: MAX_BATCH,
        weigh: |_| 1,
        queue: MAX_BATCH * FLUSHERS * 2,
        measured: true,
    }
}

struct SnapshotRequest {
    entity: EntityId,
    with_actors: bool,
    windows: Windows,
    attributes: AttributeReads,
}

#[derive(Clone)]
pub struct EvaluationBatches {
    snapshots: Coalescer<SnapshotRequest, Result<Option<Snapshot>>>,
    completions: Coalescer<FencedEvaluation, Result<Completion>>,
    store: Store,
    worker: Arc<str>,
}

impl EvaluationBatches {
    /// Starts the flusher tasks (inside a Tokio runtime); `worker` names the evaluations' writer.
    pub fn start(store: Store, worker: String) -> Self {
        let reader = store.clone();
        let snapshots = Coalescer::start(batching("snapshot"), move |requests| {
            let store = reader.clone();
            async move { read_snapshots(&store, requests).await }
        });
        let worker: Arc<str> = worker.into();
        let (writer, name) = (store.clone(), Arc::clone(&worker));
        let completions = Coalescer::start(batching("completion"), move |requests| {
            let (store, worker) = (writer.clone(), Arc::clone(&name));
            async move { store.batched().complete_many(&worker, &requests).await }
        });
        Self {
            snapshots,
            completions,
            store,
            worker,
        }
    }

    /// The entity's snapshot, with distinct actors and trailing windows when asked; `None` for
    /// an entity with no events.
    pub async fn snapshot(
        &self,
        entity: &EntityId,
        with_actors: bool,
        windows: &Windows,
        attributes: AttributeReads,
    ) -> Result<Option<Snapshot>> {
        self.snapshots
            .call(SnapshotRequest {
                entity: entity.clone(),
                with_actors,
                windows: windows.clone(),
                attributes,
            })
            .await
            .unwrap_or_else(|| Err(StoreError::Interrupted))
    }

    /// Records the evaluation and applies its action, if any, as [`Evaluations::complete_evaluation`]
    /// does, sharing its statement with concurrent evaluations. An action on an entity with an
    /// author is completed on its own: the author's derived signal needs a transaction.
    pub async fn complete(&self, evaluation: FencedEvaluation) -> Result<Completion> {
        if evaluation.decision.is_some() && evaluation.snapshot.author.is_some() {
            return self
                .store
                .evaluations()
                .complete_evaluation(&self.worker, &evaluation)
                .timed_query("complete_evaluation")
                .await;
        }
        self.completions
            .call(evaluation)
            .await
            .unwrap_or_else(|| Err(StoreError::Interrupted))
    }
}

/// Unfolded events an entity gathers before an evaluation folds them. Below it, a snapshot
/// reading them costs less than the fold's writes (a burst of ten is read as ten index
/// entries, and folding it took a fifth of the evaluations' throughput: BENCHMARKS.md);
/// retention folds what is left before a partition goes.
const FOLD_AT_LEAST: i64 = 64;

/// Answers every request with one statement per combination of aggregates asked for (there
/// is one unless the rules were reloaded in between).
async fn read_snapshots(
    store: &Store,
    requests: Vec<SnapshotRequest>,
) -> Vec<Result<Option<Snapshot>>> {
    let answers = read_groups(store, &requests).await;
    // The entities that gathered many unfolded events have them folded into their figures, in
    // one statement for all of them (store/fold.rs), once their snapshots are read: a snapshot
    // adds what is not folded, so it is exact either way. The snapshot tells which need it, so
    // a batch of entities with a few events each (a burst) costs no fold statement at all; when
    // every batch ran one, it took 7-17% of the evaluation statements' Postgres time in the
    // profiled bursts (BENCHMARKS.md). A failed fold only leaves the work for the next one.
    let past: Vec<&str> = requests
        .iter()
        .zip(&answers)
        .filter(|(_, answer)| matches!(answer, Ok(Some(s)) if s.unfolded >= FOLD_AT_LEAST))
        .map(|(request, _)| request.entity.as_str())
        .collect();
    if !past.is_empty()
        && let Err(error) = store
            .fold()
            .entities(&past, FOLD_AT_LEAST)
            .timed_query("fold")
            .await
    {
        tracing::warn!(error = %crate::telemetry::Chain(&error), entities = past.len(), "fold failed; the snapshots count the events unfolded");
    }
    answers
}

/// The snapshots of the requests, one statement per kind of snapshot asked for.
async fn read_groups(store: &Store, requests: &[SnapshotRequest]) -> Vec<Result<Option<Snapshot>>> {
    let mut answers: Vec<Option<Result<Option<Snapshot>>>> =
        requests.iter().map(|_| None).collect();
    let mut groups: HashMap<(bool, &Windows, AttributeReads), Vec<usize>> = HashMap::new();
    for (index, request) in requests.iter().enumerate() {
        groups
            .entry((request.with_actors, &request.windows, request.attributes))
            .or_default()
            .push(index);
    }
    for ((with_actors, windows, attributes), members) in groups {
        let ids: Vec<&str> = members
            .iter()
            .map(|&i| requests[i].entity.as_str())
            .collect();
        let read = store
            .batched()
            .snapshots_each(&ids, with_actors, windows, attributes)
            .await;
        for (&i, answer) in members.iter().zip(read) {
            answers[i] = Some(answer);
        }
    }
    answers
        .into_iter()
        .map(|answer| answer.expect("every request is in a group"))
        .collect()
}
