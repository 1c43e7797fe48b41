//! Completing evaluations behind the version fence: how the fenced statement (`fenced.rs`) is
//! run over several at once, the single completion that also writes the author's derived
//! event, and the derived events themselves.

use std::collections::{HashMap, HashSet};

use sqlx::{Acquire, Postgres};

use super::{
    Corruption, Result, Store, StoreError,
    events::{lock_in_order, record_in},
    fenced::{Completion, FencedEvaluation, Recorded, record_fenced},
};
use crate::domain::{EntityId, Event, EventId, Priority, Signal};

/// What the fenced completion does with an entity row another transaction holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LockedRows {
    /// Wait for it (up to `statement_timeout`).
    Wait,
    /// Leave the entity out, as if fenced; the caller finds out which it was.
    Skip,
}

/// The store's handle on evaluations completed behind the version fence (`Store::evaluations`).
#[derive(Clone, Copy)]
pub struct Evaluations<'a> {
    pub(super) store: &'a Store,
}

impl Evaluations<'_> {
    /// The fence, the actions, their outbox rows, the entities' bookkeeping and the evaluation
    /// records of several evaluations in one statement (atomic on its own, one round trip),
    /// written by `worker`; rows held elsewhere are waited for. See [`Evaluations::record_locked`].
    pub async fn record_fenced_evaluations(
        self,
        worker: &str,
        evaluations: &[FencedEvaluation],
    ) -> Result<HashMap<String, Recorded>> {
        let evaluations: Vec<&FencedEvaluation> = evaluations.iter().collect();
        Self::record_locked(
            &self.store.pool,
            worker,
            &evaluations,
            LockedRows::Wait,
            self.store.statements().submits_statements(),
        )
        .await
    }

    /// The fenced statement of several evaluations (with [`LockedRows::Wait`] the rows are
    /// locked first, in the same transaction).
    /// Returns, by entity, what was recorded for those that passed the fence; an entity whose
    /// version moved is left out and nothing of its evaluation is written.
    ///
    /// Rows are locked in entity order, as every transaction that locks several does, so
    /// concurrent batches wait on each other in one order, never in a cycle; once locked at the
    /// version read, an entity's action, status and evaluation are written together. The
    /// action's unique dedup key is the authority that it takes effect once: on a conflict the
    /// evaluation is recorded without it. An entity may appear once per call (a second one is
    /// refused as [`StoreError::Corrupt`]). With [`LockedRows::Skip`] an entity whose row is
    /// locked elsewhere is left out as well (the caller retries it with [`LockedRows::Wait`] to
    /// learn which), so one held row cannot hold up the others. The author's derived signal is
    /// not written here (see [`Evaluations::complete_evaluation`]).
    pub(super) async fn record_locked<'c>(
        connection: impl Acquire<'c, Database = Postgres>,
        worker: &str,
        evaluations: &[&FencedEvaluation],
        locked_rows: LockedRows,
        submit: bool,
    ) -> Result<HashMap<String, Recorded>> {
        let distinct: HashSet<&str> = evaluations
            .iter()
            .map(|e| e.snapshot.entity.as_str())
            .collect();
        if distinct.len() != evaluations.len() {
            // Two rows of one entity would both pass the fence: two actions, one version bump.
            return Err(StoreError::Corrupt(Corruption {
                what: "an entity appears twice in one fenced batch".into(),
                source: None,
            }));
        }
        match locked_rows {
            LockedRows::Skip => {
                let mut connection = connection.acquire().await?;
                record_fenced(&mut connection, worker, evaluations, submit).await
            }
            LockedRows::Wait => {
                // One statement, skipping held rows, serves both ways: SKIP LOCKED never skips a
                // row its own transaction holds, so locking the rows first (waiting for them,
                // in entity order, `lock_in_order`) makes the same statement wait. A row whose
                // version moved while we waited is then fenced out by the statement itself.
                let mut tx = connection.begin().await?;
                let entities: Vec<&str> = evaluations
                    .iter()
                    .map(|e| e.snapshot.entity.as_str())
                    .collect();
                lock_in_order(&mut tx, &entities).await?;
                let recorded = record_fenced(&mut tx, worker, evaluations, submit).await?;
                tx.commit().await?;
                Ok(recorded)
            }
        }
    }

    /// Records a completed evaluation, written by `worker`, and applies its decision, in one
    /// transaction, fenced by the moderation version read in the snapshot.
    ///
    /// The action row's unique dedup key is the authority that an action takes effect once;
    /// the status is set, never incremented. If the version moved, nothing is written and
    /// [`StoreError::VersionConflict`] is returned.
    pub async fn complete_evaluation(
        self,
        worker: &str,
        evaluation: &FencedEvaluation,
    ) -> Result<Completion> {
        // The records and the derived event go into time partitions: a partition turnover is
        // repaired and the completion retried (nothing of a failed attempt was committed).
        self.store
            .partitions()
            .with_turnover(|| self.complete_once(worker, evaluation))
            .await
    }

    async fn complete_once(
        self,
        worker: &str,
        evaluation: &FencedEvaluation,
    ) -> Result<Completion> {
        let fenced = &[evaluation];
        let snapshot = &evaluation.snapshot;
        let decision = evaluation.decision.as_ref();
        // A restore feeds nothing back to the author.
        let author = snapshot.author.as_ref().filter(|_| decision.is_some());
        let Some((decision, author)) = decision.zip(author) else {
            let recorded = Self::record_locked(
                &self.store.pool,
                worker,
                fenced,
                LockedRows::Wait,
                self.store.statements().submits_statements(),
            )
            .await?;
            return evaluation.completion(recorded.get(snapshot.entity.as_str()));
        };
        // An action on an authored entity feeds back: the author's entity gets a derived
        // signal, once per action (its id is the action's dedup key), in the same transaction.
        // Both rows are locked first, in entity order (`lock_in_order`); the fenced statement then
        // waits for them as with LockedRows::Wait (it never skips rows its transaction holds).
        let mut tx = self.store.pool.begin().await?;
        lock_in_order(&mut tx, &[snapshot.entity.as_str(), author.as_str()]).await?;
        let recorded = record_fenced(
            &mut tx,
            worker,
            fenced,
            self.store.statements().submits_statements(),
        )
        .await?;
        let mut completion = evaluation.completion(recorded.get(snapshot.entity.as_str()))?;
        if let Completion::Applied {
            author: to_schedule,
            ..
        } = &mut completion
        {
            let derived = derived_event(
                derived_event_id(&snapshot.dedup_key(&decision.rule)),
                author,
                format!("auto.{}", decision.action.as_str()),
                snapshot.entity.as_str(),
            )?;
            let inserted = record_in(&mut tx, &[&derived], &[], &[]).await?.inserted;
            *to_schedule = (!inserted.is_empty()).then(|| author.clone());
        }
        tx.commit().await?;
        Ok(completion)
    }
}

/// The id of the author's derived event for the action with this dedup key (one per action).
pub(super) fn derived_event_id(dedup_key: &str) -> String {
    format!("derived:{dedup_key}")
}

/// A signal quiesce records on an author's entity about one of its entities (`actor`).
pub(super) fn derived_event(
    id: String,
    author: &EntityId,
    signal: String,
    actor: &str,
) -> Result<Event> {
    Ok(Event {
        id: EventId::parse(&id)
            .map_err(|e| StoreError::corrupt(format!("the derived event id {id:?}"), e))?,
        entity: author.clone(),
        signal: Signal::parse(&signal)
            .map_err(|e| StoreError::corrupt(format!("the derived signal {signal:?}"), e))?,
        actor: Some(actor.to_owned()),
        weight: 1.0,
        occurred_at: None,
        priority: Priority::Normal,
        author: None,
        attributes: None,
    })
}
