//! Shared statements that answer each evaluation on its own: one statement serves many
//! entities, and an entity the shared statement could not serve (a row held elsewhere, bad
//! data) is tried again alone, so that it cannot hold up or fail the others. An outage fails
//! the whole batch with one shared error.

use std::{collections::HashSet, future::Future, sync::Arc};

use futures::future::join_all;

use super::{
    Result, Store, StoreError,
    evaluations::LockedRows,
    fenced::{Completion, FencedEvaluation},
};
use crate::{
    domain::{AttributeReads, Snapshot, Windows},
    telemetry::Timed,
};

/// The store's handle on the statements evaluations share: one statement answers each evaluation on its own (`Store::batched`).
#[derive(Clone, Copy)]
pub struct Batched<'a> {
    pub(super) store: &'a Store,
}

impl Batched<'_> {
    /// The snapshots of these entities in one statement, with distinct actors and trailing
    /// windows when asked; `None` for an entity with no events. If the statement fails for a
    /// reason other than an outage, each entity is read on its own.
    pub async fn snapshots_each(
        self,
        ids: &[&str],
        with_actors: bool,
        windows: &Windows,
        attributes: AttributeReads,
    ) -> Vec<Result<Option<Snapshot>>> {
        let mut answers: Vec<Option<Result<Option<Snapshot>>>> = ids.iter().map(|_| None).collect();
        let members: Vec<usize> = (0..ids.len()).collect();
        let read = self
            .store
            .snapshots()
            .many(ids, with_actors, windows, attributes)
            .timed_query("snapshot")
            .await;
        match read {
            Ok(found) => {
                for (answer, id) in answers.iter_mut().zip(ids) {
                    *answer = Some(Ok(found.get(*id).cloned()));
                }
            }
            Err(error) if ids.len() > 1 && !error.is_unavailable() => {
                tracing::warn!(error = %crate::telemetry::Chain(&error), entities = ids.len(), "snapshot batch failed; reading one by one");
                each_on_its_own(members, &mut answers, |i| async move {
                    let one = [ids[i]];
                    let read = self
                        .store
                        .snapshots()
                        .many(&one, with_actors, windows, attributes)
                        .await;
                    read.map(|mut found| found.remove(one[0]))
                })
                .await;
            }
            Err(error) => share_error(error, &members, &mut answers),
        }
        answers
            .into_iter()
            .map(|answer| answer.expect("every entity is answered"))
            .collect()
    }

    /// Records the evaluations, written by `worker`, in one fenced statement, and answers each
    /// as [`Evaluations::complete_evaluation`] would. An entity appears once per statement, so a
    /// second evaluation of the same entity in the batch (a stale claim) is recorded on its
    /// own. The author's derived signal needs a transaction of its own: an action on an
    /// entity with an author is best given to [`Evaluations::complete_evaluation`].
    pub async fn complete_many(
        self,
        worker: &str,
        evaluations: &[FencedEvaluation],
    ) -> Vec<Result<Completion>> {
        let mut answers: Vec<Option<Result<Completion>>> =
            evaluations.iter().map(|_| None).collect();
        let mut seen = HashSet::new();
        let (first, repeated): (Vec<usize>, Vec<usize>) = (0..evaluations.len())
            .partition(|&i| seen.insert(evaluations[i].snapshot.entity.as_str()));
        let batch: Vec<&FencedEvaluation> = first.iter().map(|&i| &evaluations[i]).collect();
        // The shared statement skips rows held elsewhere, so that one held row does not hold up
        // the batch; those (and the fenced out, which look the same) are tried again on their
        // own.
        let recorded = super::Evaluations::record_locked(
            &self.store.pool,
            worker,
            &batch,
            LockedRows::Skip,
            self.store.statements().submits_statements(),
        )
        .timed_query("complete_evaluation")
        .await;
        let mut one_by_one = repeated;
        match recorded {
            Ok(recorded) => {
                for &i in &first {
                    let entity = evaluations[i].snapshot.entity.as_str();
                    match recorded.get(entity) {
                        Some(done) => answers[i] = Some(evaluations[i].completion(Some(done))),
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
        each_on_its_own(one_by_one, &mut answers, |i| async move {
            let evaluation = &evaluations[i];
            let recorded = super::Evaluations::record_locked(
                &self.store.pool,
                worker,
                &[evaluation],
                LockedRows::Wait,
                self.store.statements().submits_statements(),
            )
            .await;
            let entity = evaluation.snapshot.entity.as_str();
            recorded.and_then(|r| evaluation.completion(r.get(entity)))
        })
        .await;
        answers
            .into_iter()
            .map(|answer| answer.expect("every evaluation is answered"))
            .collect()
    }
}

/// Answers each member with a call of its own, concurrently: an entity that fails again (or
/// waits on a row held elsewhere) must not hold up the others.
async fn each_on_its_own<T, F, Fut>(members: Vec<usize>, answers: &mut [Option<Result<T>>], call: F)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<T>>,
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
