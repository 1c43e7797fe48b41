//! The two Postgres calls every evaluation makes, coalesced across concurrent evaluations:
//! snapshot reads share one statement, and completions (with their actions and outbox rows)
//! share one fenced statement, so one commit. Each evaluation still has its own lock, fence
//! and outcome; only the round trips are shared. A batch that fails for a reason other than an
//! outage is retried one entity at a time, so that one entity's bad data cannot fail the
//! others.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use chrono::{DateTime, Utc};
use futures::future::join_all;

use crate::{
    coalesce::{Batching, Coalescer},
    domain::{EntityId, Snapshot},
    rules::{Decision, Verdict},
    store::{Completion, FencedEvaluation, LockedRows, Recorded, Store, StoreError, completion_of},
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
    with_windows: bool,
}

/// A finished evaluation to record behind the version fence, with the action it decided on.
#[derive(Debug, Clone)]
pub struct FinishedEvaluation {
    pub snapshot: Snapshot,
    pub verdict: Verdict,
    pub decision: Option<Decision>,
    pub started_at: DateTime<Utc>,
    pub due_at: Option<DateTime<Utc>>,
}

#[derive(Clone)]
pub struct EvaluationBatches {
    snapshots: Coalescer<SnapshotRequest, Result<Option<Snapshot>>>,
    completions: Coalescer<FinishedEvaluation, Result<Completion>>,
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
            async move { record_completions(&store, &worker, requests).await }
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
        with_windows: bool,
    ) -> Result<Option<Snapshot>> {
        self.snapshots
            .call(SnapshotRequest {
                entity: entity.clone(),
                with_actors,
                with_windows,
            })
            .await
            .unwrap_or_else(|| Err(StoreError::Interrupted))
    }

    /// Records the evaluation and applies its action, if any, as [`Store::complete_evaluation`]
    /// does, sharing its statement with concurrent evaluations. An action on an entity with an
    /// author is completed on its own: the author's derived signal needs a transaction.
    pub async fn complete(&self, evaluation: FinishedEvaluation) -> Result<Completion> {
        if evaluation.decision.is_some() && evaluation.snapshot.author.is_some() {
            return self
                .store
                .complete_evaluation(
                    &evaluation.snapshot,
                    &evaluation.verdict,
                    evaluation.decision.as_ref(),
                    &self.worker,
                    evaluation.started_at,
                    evaluation.due_at,
                )
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
    // The batch's unfolded events go into the figures, in one statement for all of them
    // (store/fold.rs), beside the snapshot reads on another connection: a snapshot adds what
    // is not folded, so it is exact whichever commits first, and the fold costs the
    // evaluation no round trip. A failed fold only leaves the work for the next one.
    let all: Vec<&str> = requests.iter().map(|r| r.entity.as_str()).collect();
    let (folded, answers) = tokio::join!(
        store.fold(&all, FOLD_AT_LEAST).timed_query("fold"),
        read_groups(store, &requests)
    );
    if let Err(error) = folded {
        tracing::warn!(error = %crate::telemetry::Chain(&error), entities = all.len(), "fold failed; the snapshots count the events unfolded");
    }
    answers
}

/// The snapshots of the requests, one statement per kind of snapshot asked for.
async fn read_groups(store: &Store, requests: &[SnapshotRequest]) -> Vec<Result<Option<Snapshot>>> {
    let mut answers: Vec<Option<Result<Option<Snapshot>>>> =
        requests.iter().map(|_| None).collect();
    let mut groups: HashMap<(bool, bool), Vec<usize>> = HashMap::new();
    for (index, request) in requests.iter().enumerate() {
        groups
            .entry((request.with_actors, request.with_windows))
            .or_default()
            .push(index);
    }
    for ((with_actors, with_windows), members) in groups {
        let ids: Vec<&str> = members
            .iter()
            .map(|&i| requests[i].entity.as_str())
            .collect();
        let read = store
            .snapshots(&ids, with_actors, with_windows)
            .timed_query("snapshot")
            .await;
        match read {
            Ok(found) => {
                for &i in &members {
                    answers[i] = Some(Ok(found.get(requests[i].entity.as_str()).cloned()));
                }
            }
            Err(error) if members.len() > 1 && !error.is_unavailable() => {
                tracing::warn!(error = %crate::telemetry::Chain(&error), entities = members.len(), "snapshot batch failed; reading one by one");
                each_on_its_own(members, &mut answers, |i| async move {
                    let one = [requests[i].entity.as_str()];
                    let read = store.snapshots(&one, with_actors, with_windows).await;
                    read.map(|mut found| found.remove(one[0]))
                })
                .await;
            }
            Err(error) => share_error(error, &members, &mut answers),
        }
    }
    answers
        .into_iter()
        .map(|answer| answer.expect("every request is in a group"))
        .collect()
}

fn fenced<'a>(evaluation: &'a FinishedEvaluation, worker: &'a str) -> FencedEvaluation<'a> {
    FencedEvaluation {
        snapshot: &evaluation.snapshot,
        verdict: &evaluation.verdict,
        decision: evaluation.decision.as_ref(),
        worker,
        started_at: evaluation.started_at,
        due_at: evaluation.due_at,
    }
}

/// Records the evaluations in one fenced statement. An entity appears once per statement, so a
/// second evaluation of the same entity in the batch (a stale claim) is recorded on its own.
async fn record_completions(
    store: &Store,
    worker: &str,
    requests: Vec<FinishedEvaluation>,
) -> Vec<Result<Completion>> {
    let answer = |request: &FinishedEvaluation, recorded: Option<&Recorded>| {
        completion_of(&request.snapshot, request.decision.as_ref(), recorded)
    };
    let mut answers: Vec<Option<Result<Completion>>> = requests.iter().map(|_| None).collect();
    let mut seen = HashSet::new();
    let (first, repeated): (Vec<usize>, Vec<usize>) =
        (0..requests.len()).partition(|&i| seen.insert(requests[i].snapshot.entity.as_str()));
    let batch: Vec<FencedEvaluation> = first
        .iter()
        .map(|&i| fenced(&requests[i], worker))
        .collect();
    // The shared statement skips rows held elsewhere, so that one held row does not hold up
    // the batch; those (and the fenced out, which look the same) are tried again on their own.
    let recorded = Store::record_fenced_evaluations(store.pool(), &batch, LockedRows::Skip)
        .timed_query("complete_evaluation")
        .await;
    let mut one_by_one = repeated;
    match recorded {
        Ok(recorded) => {
            for &i in &first {
                let entity = requests[i].snapshot.entity.as_str();
                match recorded.get(entity) {
                    Some(done) => answers[i] = Some(answer(&requests[i], Some(done))),
                    None => one_by_one.push(i),
                }
            }
        }
        Err(error) if first.len() > 1 && !error.is_unavailable() => {
            tracing::warn!(error = %crate::telemetry::Chain(&error), entities = first.len(), "completion batch failed; recording one by one");
            one_by_one.extend(first);
        }
        Err(error) => share_error(error, &first, &mut answers),
    }
    let requests = &requests;
    each_on_its_own(one_by_one, &mut answers, |i| async move {
        let request = &requests[i];
        let recorded = Store::record_fenced_evaluations(
            store.pool(),
            &[fenced(request, worker)],
            LockedRows::Wait,
        )
        .await;
        let entity = request.snapshot.entity.as_str();
        recorded.and_then(|r| answer(request, r.get(entity)))
    })
    .await;
    answers
        .into_iter()
        .map(|answer| answer.expect("every request is answered"))
        .collect()
}

/// Answers each member with a call of its own, concurrently: an entity that fails again (or
/// waits on a row held elsewhere) must not hold up the others.
async fn each_on_its_own<T, F, Fut>(members: Vec<usize>, answers: &mut [Option<Result<T>>], call: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let calls = members.into_iter().map(|i| {
        let answer = call(i);
        async move { (i, answer.await) }
    });
    for (i, answer) in join_all(calls).await {
        answers[i] = Some(answer);
    }
}

/// Gives every member of a failed batch the same error (an outage: each evaluation gives its
/// claim back).
fn share_error<T>(error: StoreError, members: &[usize], answers: &mut [Option<Result<T>>]) {
    let shared = Arc::new(error);
    for &i in members {
        answers[i] = Some(Err(StoreError::Shared(Arc::clone(&shared))));
    }
}
