//! The store's error: what went wrong with a statement, and what its caller may do about it
//! (retry on a conflict or a turnover, wait out an outage).

use super::primary::NotPrimary;
use crate::domain::Invalid;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("postgres: {0}")]
    Database(sqlx::Error),
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The entity's moderation version moved after the snapshot: a newer writer won.
    #[error("moderation version changed since the snapshot (read {read})")]
    VersionConflict { read: i64 },
    /// A stored value that does not parse (or a batch that cannot be written as asked).
    #[error(transparent)]
    Corrupt(Corruption),
    #[error("{0}")]
    NotFound(String),
    /// One failure of a statement that served several callers, handed to each of them.
    #[error(transparent)]
    Shared(std::sync::Arc<StoreError>),
    /// The call was dropped before it was answered (shutting down, or a panic in the batch).
    #[error("the Postgres call was interrupted before it was answered")]
    Interrupted,
    /// An events partition's time is over and it is not sealed yet: the dedup check against it
    /// cannot be trusted, so nothing was written. Sealing it and retrying is the cure.
    #[error("an events partition ended and is not sealed yet; retry once it is")]
    Unsealed,
    /// The server answers but takes no writes (`primary.rs`): an outage, not a request's fault.
    #[error(transparent)]
    NotWritable(NotPrimary),
}

pub type Result<T> = std::result::Result<T, StoreError>;

impl From<sqlx::Error> for StoreError {
    /// Only a wrapping: what an error tells of the server is for the pool's fence, which the
    /// store that made the pool hears through [`Store::notice`].
    fn from(error: sqlx::Error) -> Self {
        StoreError::Database(error)
    }
}

/// What is inconsistent and, when a stored value was refused, the refusal: kept as the source
/// so the chain shows why, and repeated in the message, which is what the logs print.
#[derive(Debug)]
pub struct Corruption {
    /// What is inconsistent, e.g. `the status of entity post:1`.
    pub what: String,
    pub source: Option<Invalid>,
}

impl std::fmt::Display for Corruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stored data is inconsistent: {}", self.what)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Corruption {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|source| source as &(dyn std::error::Error + 'static))
    }
}

impl StoreError {
    /// A stored value, described by `what`, that its domain type refused.
    pub fn corrupt(what: impl Into<String>, source: Invalid) -> Self {
        StoreError::Corrupt(Corruption {
            what: what.into(),
            source: Some(source),
        })
    }

    /// A serialization failure or deadlock: retrying the transaction is the cure. A partition
    /// turnover ([`StoreError::needs_turnover`]) is one too.
    pub fn is_conflict(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(db))
                if db
                    .code()
                    .is_some_and(|code| code == "40001" || code == "40P01") =>
            {
                true
            }
            StoreError::Shared(error) => error.is_conflict(),
            _ => self.needs_turnover(),
        }
    }

    /// A write that needs the partitions turned over before it is retried: an events partition
    /// ended and is not sealed ([`StoreError::Unsealed`]), a sealed one refused a transaction
    /// received before its end (a serialization failure, from its trigger), or no partition
    /// holds the row's time (a check violation that names no constraint).
    pub fn needs_turnover(&self) -> bool {
        match self {
            StoreError::Unsealed => true,
            StoreError::Database(sqlx::Error::Database(db)) => match db.code().as_deref() {
                Some("40001") => true,
                Some("23514") => db.constraint().is_none(),
                _ => false,
            },
            StoreError::Shared(error) => error.needs_turnover(),
            _ => false,
        }
    }

    /// Postgres could not be reached or refused work for a reason of its own (connection lost,
    /// shutting down, out of resources, statement cancelled): not the entity's fault.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Database(error) => is_unavailable(error),
            StoreError::NotWritable(_) => true,
            StoreError::Shared(error) => error.is_unavailable(),
            _ => false,
        }
    }
}

/// Whether an error means Postgres could not be reached (answer 503 / retry), as opposed to a
/// query or data problem.
pub fn is_unavailable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        // 08: connection exception, 53: insufficient resources, 57P: shutdown or restart,
        // 25006: a write refused by a read-only server (an old primary, or one restarted
        // read-only before its promotion). A cancelled statement (57014, our
        // statement_timeout) is not here: a slow query of one entity must not pause every worker.
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08")
                || code.starts_with("53")
                || code.starts_with("57P")
                || code == "25006"
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    #[test]
    fn a_corrupt_value_keeps_the_refusal_as_its_source() {
        let refusal = crate::domain::Status::parse("gone").unwrap_err();
        let error = StoreError::corrupt("the status of entity post:1", refusal.clone());
        assert_eq!(
            error.to_string(),
            format!("stored data is inconsistent: the status of entity post:1: {refusal}")
        );
        let source = error.source().expect("the refusal is the source");
        assert_eq!(source.to_string(), refusal.to_string());
        assert!(!error.is_conflict() && !error.is_unavailable());
    }
}
