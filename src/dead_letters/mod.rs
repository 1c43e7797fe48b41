//! Dead letters, as the API, the console and the CLI handle them: list them, redrive one or
//! many, and (`sync`) keep Redis' copy and Postgres' record in step. Postgres holds the durable
//! record (`store::dead_letters`); Redis' dead set is the fast check that stops a dead entity's
//! scheduling (`queue::dead_letters`).
//!
//! Order of writes: a redrive marks the record in Postgres inside a transaction, makes the
//! entities due in Redis, then commits: a Redis error rolls the mark back.

mod sync;

pub use self::sync::{DeadLetterSync, MovedDeadLetters, ShardWalk, move_draining, sync};
use crate::{
    audit,
    domain::{Actor, AuditAction, AuditEntry, EntityId},
    queue::{Queue, QueueError},
    store::{DeadLetterKey, DeadLetterRows, Store, StoreError},
};

/// Dead letters redriven or reconciled per statement.
const PAGE: usize = 500;

/// What failed while dead letters were handled: Postgres or Redis.
#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

pub type Result<T> = std::result::Result<T, DeadLetterError>;

/// Dead letters that are not redriven, oldest first, after `after`.
pub async fn list(
    store: &Store,
    after: Option<DeadLetterKey>,
    limit: usize,
) -> std::result::Result<DeadLetterRows, StoreError> {
    store.dead_letters().page(after, limit).await
}

/// Redrives one entity: marks its dead letter redriven by `by` and makes it due in Redis with
/// fresh attempts. An entity Postgres does not record as dead-lettered is redriven if Redis
/// holds it as such (its Postgres write failed and the sweep has not copied it yet). Returns
/// false if neither does. A redrive is recorded in the audit trail.
#[tracing::instrument(skip_all, fields(%entity, by = %by.name))]
pub async fn redrive(store: &Store, queue: &Queue, entity: &EntityId, by: &Actor) -> Result<bool> {
    let marked = store.dead_letters().mark_redriven(entity, &by.name).await?;
    if !marked.value && !queue.is_dead_lettered(entity).await? {
        return Ok(false);
    }
    queue.redrive(std::slice::from_ref(entity)).await?;
    marked.commit().await?;
    let entry = AuditEntry {
        action: AuditAction::Redrive,
        subject: entity.to_string(),
        before: Some(serde_json::json!({ "dead_lettered": true })),
        after: Some(serde_json::json!({ "dead_lettered": false, "redriven": 1 })),
    };
    audit::record(store, by, entry).await;
    Ok(true)
}

/// Redrives every dead letter (of `reason`, if given), a page at a time, each page marked and
/// made due as [`redrive`] does. Returns how many.
#[tracing::instrument(skip_all, fields(reason, by = %by.name))]
pub async fn redrive_all(
    store: &Store,
    queue: &Queue,
    reason: Option<&str>,
    by: &Actor,
) -> Result<usize> {
    let mut redriven = 0;
    let outcome = async {
        loop {
            let page = store
                .dead_letters()
                .mark_page_redriven(reason, &by.name, PAGE)
                .await?;
            let count = page.value.marked;
            if count == 0 {
                return Ok(());
            }
            queue.redrive(&page.value.entities).await?;
            page.commit().await?;
            redriven += count;
            if count < PAGE {
                return Ok(());
            }
        }
    }
    .await;
    // The pages redriven before a failure took effect: they are recorded either way.
    if redriven > 0 {
        let entry = AuditEntry {
            action: AuditAction::Redrive,
            subject: "dead_letters".into(),
            before: Some(serde_json::json!({ "reason": reason })),
            after: Some(serde_json::json!({ "redriven": redriven })),
        };
        audit::record(store, by, entry).await;
    }
    outcome.map(|()| redriven)
}
