//! Postgres, the source of truth: events, signal totals, entities, evaluations, actions and
//! the outbox. All SQL of the service lives here, one file per concern.

mod appeals;
mod attribute_rows;
mod audit;
mod backtest;
mod batched;
mod console;
mod context;
mod dead_letters;
mod deliveries;
mod entity_rows;
mod error;
mod evaluations;
mod events;
mod fenced;
mod fold;
mod guard;
pub mod loadgen;
mod moderation;
mod outbox;
mod page_key;
mod partitions;
mod primary;
mod read;
mod replica;
mod retention;
mod review;
mod rules_versions;
mod snapshots;
mod statements;
mod sweep;
mod timers;

use std::sync::Arc;

use secrecy::ExposeSecret;
use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgPoolOptions, types::PgInterval},
};

use self::primary::Fence;
use crate::{domain::EntityId, settings::Database};

pub use self::{
    appeals::Appeals,
    appeals::{
        AppealDecision, AppealFigures, AppealRecord, DecidedAppeal, EarlierAppeal, LockedAppeal,
    },
    audit::Audit,
    audit::{AuditFilter, AuditRecord},
    backtest::Backtest,
    backtest::{AppliedAction, LatestDecision, ReplayCursor, ReplayedEvaluation},
    batched::Batched,
    console::Console,
    console::{DailyReversals, DecisionRecord, EvaluationPace, EventRecord, MinuteCount},
    context::Context,
    context::ContextChange,
    dead_letters::DeadLetters,
    dead_letters::{DeadLetterKey, DeadLetterRows, MarkedPage},
    deliveries::Deliveries,
    deliveries::GithubDelivery,
    error::{Corruption, Result, StoreError, is_unavailable},
    evaluations::Evaluations,
    events::Events,
    events::{Duplicate, RecordedEvents},
    fenced::{Completion, FencedEvaluation, Recorded},
    fold::Fold,
    guard::Guard,
    guard::{Demotion, RuleFigures},
    moderation::{LockedAction, Reversal, ReversalRequest, StatusOverride},
    outbox::Outbox,
    outbox::OutboxRow,
    page_key::PageKey,
    partitions::Partitions,
    partitions::{Dropped, PartitionPlan, Partitioned, TurnoverRetry},
    primary::{NotPrimary, refusal},
    read::Read,
    read::{ActionFilter, ActionRecord, EvaluationRecord, LabelRecord, ReversalCounts, RuleHits},
    replica::Replica,
    retention::Retention,
    review::Review,
    review::{
        LockedReviewItem, ReviewDecided, ReviewFigures, ReviewFilter, ReviewItem, ReviewOutcome,
    },
    rules_versions::RulesVersions,
    rules_versions::{
        ActiveMarker, ActiveRules, NewRulesVersion, RULES_CHANNEL, RulesVersion,
        RulesVersionSummary,
    },
    snapshots::Snapshots,
    snapshots::{EntityRecord, Override},
    statements::Statements,
    statements::{DecidedBy, IssuedStatement, StatementFilter, StatementRecord},
    sweep::Sweep,
    sweep::SweepCursor,
    timers::EndedTimer,
    timers::Timers,
};

/// The store on a new pool of `settings`' primary, the pool fenced (`primary.rs`): its
/// connections check what they reached, and what its errors tell retires them.
pub async fn connect(settings: &Database) -> Result<Store> {
    // A statement that cannot finish within the backend timeout (a row lock held elsewhere, a
    // network black hole) is cancelled by Postgres rather than holding its caller forever.
    let statement_timeout = settings.backend_timeout.as_millis().to_string();
    let options: PgConnectOptions = settings
        .database_url
        .expose_secret()
        .parse::<PgConnectOptions>()?
        .options([
            ("statement_timeout", statement_timeout.as_str()),
            // Nearly every statement looks rows up by entity: a generic plan is as good as a
            // custom one, and re-planning each execution was a fifth of the evaluation cost
            // (BENCHMARKS.md).
            ("plan_cache_mode", "force_generic_plan"),
        ]);
    // Only the primary is written on: see primary.rs. The fence is this pool's own.
    let fence = Arc::new(Fence::new());
    let (connecting, acquiring) = (Arc::clone(&fence), Arc::clone(&fence));
    let pool = PgPoolOptions::new()
        .max_connections(settings.db_max_connections)
        .acquire_timeout(settings.backend_timeout)
        .after_connect(move |connection, _| {
            let fence = Arc::clone(&connecting);
            Box::pin(async move { primary::check_new_connection(&fence, connection).await })
        })
        .before_acquire(move |_, meta| {
            let current = primary::still_current(&acquiring, &meta);
            Box::pin(async move { Ok(current) })
        })
        .connect_with(options)
        .await?;
    Ok(Store::fenced(pool, fence))
}

/// Applies the migrations on one connection without the statement timeout: a migration that
/// rewrites a large table may take longer than `backend_timeout`, which is meant for requests.
pub async fn migrate(pool: &PgPool) -> Result<()> {
    let mut connection = pool.acquire().await?;
    sqlx::query!("SET statement_timeout = 0")
        .execute(&mut *connection)
        .await?;
    sqlx::migrate!("./migrations").run(&mut *connection).await?;
    // Back to the pool's own timeout, in case the connection is used again.
    sqlx::query!("RESET statement_timeout")
        .execute(&mut *connection)
        .await?;
    Ok(())
}

#[derive(Clone)]
pub struct Store {
    pool: PgPool,
    /// The pool's fence (`primary.rs`), shared by the store's clones.
    fence: Arc<Fence>,
    /// How the time partitions are cut and kept (`partitions.rs`).
    partitions: PartitionPlan,
    /// Where reads that may be a moment stale go while it keeps up (`replica.rs`).
    replica: Option<Replica>,
    /// Whether statements of reasons are queued for the Transparency Database too.
    submit_statements: bool,
}

impl Store {
    /// A store on a pool made elsewhere, whose partitions follow the default retention
    /// settings. Its fence is the store's alone: the pool's connections do not check what they
    /// reach (a pool from [`connect`] does).
    pub fn new(pool: PgPool) -> Self {
        Self::fenced(pool, Arc::new(Fence::new()))
    }

    fn fenced(pool: PgPool, fence: Arc<Fence>) -> Self {
        Self {
            pool,
            fence,
            partitions: PartitionPlan::from_settings(&crate::settings::Maintenance::default()),
            replica: None,
            submit_statements: false,
        }
    }

    /// The same store queueing each statement of reasons for the Transparency Database as well
    /// as for the platform (`dsa_endpoint` and `dsa_token` set).
    pub fn submitting_statements(self, submit: bool) -> Self {
        Self {
            submit_statements: submit,
            ..self
        }
    }

    /// The same store with partitions cut by `plan`.
    pub fn with_partitions(self, plan: PartitionPlan) -> Self {
        Self {
            partitions: plan,
            ..self
        }
    }

    /// The same store with reads that may be a moment stale sent to `replica` while it keeps up.
    pub fn with_replica(self, replica: Replica) -> Self {
        Self {
            replica: Some(replica),
            ..self
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The read replica, when one is set.
    pub fn replica(&self) -> Option<&Replica> {
        self.replica.as_ref()
    }

    /// Where a read that may be a moment stale goes: the replica while it keeps up, else the
    /// primary. Never for a read a decision or a write is made on.
    fn reader(&self) -> &PgPool {
        self.replica
            .as_ref()
            .and_then(Replica::pool)
            .unwrap_or(&self.pool)
    }

    /// Whether Postgres takes writes now: it answers, and on a primary, not in recovery and not
    /// read-only. What the breaker's probe and `/readyz` ask: a server that answers a ping but
    /// refuses every write is an outage too. A read-only answer retires the pool's connections,
    /// so the next ones reach whatever is the primary behind the address now.
    pub async fn writable(&self) -> Result<()> {
        let row = sqlx::query!(
            r#"SELECT pg_is_in_recovery() AS "in_recovery!",
                      current_setting('transaction_read_only') = 'on' AS "read_only!""#
        )
        .fetch_one(&self.pool)
        .await?;
        let refusal = if row.in_recovery {
            NotPrimary::InRecovery
        } else if row.read_only {
            NotPrimary::ReadOnly
        } else {
            return Ok(());
        };
        self.fence.retire();
        Err(StoreError::NotWritable(refusal))
    }

    /// Whether the primary refused one of this pool's connections, or answered read-only, at or
    /// after `since`: a caller that waited that long waited on an outage, not on its own work.
    pub fn primary_refused_since(&self, since: std::time::Instant) -> bool {
        self.fence.refused_since(since)
    }

    /// Hears what an error of this store's statements tells of the server: one that shows a
    /// connection reached a server that takes no writes retires the pool's connections
    /// (`primary.rs`). Called where a write's failure is handled (an evaluation's, a group
    /// commit's, a delivery pass's).
    pub fn notice(&self, error: &StoreError) {
        match error {
            StoreError::Database(error) => self.fence.notice(error),
            StoreError::Shared(error) => self.notice(error),
            _ => {}
        }
    }
}

/// A transaction a use case holds: it reads (and locks) through the store's statements, decides
/// between them, writes through them, and commits. The statements are methods of `Tx` beside
/// their tables (`appeals.rs`, `review.rs`, `moderation.rs`); none of them decides anything.
/// Dropped without [`Tx::commit`], nothing is written.
pub struct Tx {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    /// Whether a statement of reasons issued in it is queued for the Transparency Database too.
    submit_statements: bool,
}

impl Store {
    /// Opens a transaction on the primary for a use case.
    pub async fn begin(&self) -> Result<Tx> {
        Ok(Tx {
            tx: self.pool.begin().await?,
            submit_statements: self.submit_statements,
        })
    }
}

impl Tx {
    pub async fn commit(self) -> Result<()> {
        self.tx.commit().await?;
        Ok(())
    }

    /// Puts `payload` in the outbox under `key`, in this transaction ([`outbox::enqueue`]).
    pub async fn enqueue<P: crate::domain::Payload>(
        &mut self,
        key: &str,
        payload: &P,
    ) -> Result<()> {
        outbox::enqueue(&mut self.tx, key, payload).await
    }

    /// Writes `entry` to the audit trail under `by`, in this transaction.
    pub async fn audit(
        &mut self,
        by: &crate::domain::Actor,
        entry: &crate::domain::AuditEntry,
    ) -> Result<()> {
        audit::record_audit_in(&mut *self.tx, by, entry).await
    }
}

impl std::fmt::Debug for Tx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx").finish_non_exhaustive()
    }
}

/// The store's statements, one handle per concern (each file of this module): a handle borrows
/// the store, so `store.appeals().list(...)` names where a statement lives. The store itself
/// keeps only what is the connection's: the pool, its fence, the replica, transactions.
impl Store {
    pub fn appeals(&self) -> Appeals<'_> {
        Appeals { store: self }
    }

    pub fn audit(&self) -> Audit<'_> {
        Audit { store: self }
    }

    pub fn backtest(&self) -> Backtest<'_> {
        Backtest { store: self }
    }

    pub fn batched(&self) -> Batched<'_> {
        Batched { store: self }
    }

    pub fn console(&self) -> Console<'_> {
        Console { store: self }
    }

    pub fn context(&self) -> Context<'_> {
        Context { store: self }
    }

    pub fn dead_letters(&self) -> DeadLetters<'_> {
        DeadLetters { store: self }
    }

    pub fn deliveries(&self) -> Deliveries<'_> {
        Deliveries { store: self }
    }

    pub fn evaluations(&self) -> Evaluations<'_> {
        Evaluations { store: self }
    }

    pub fn events(&self) -> Events<'_> {
        Events { store: self }
    }

    pub fn fold(&self) -> Fold<'_> {
        Fold { store: self }
    }

    pub fn guard(&self) -> Guard<'_> {
        Guard { store: self }
    }

    pub fn outbox(&self) -> Outbox<'_> {
        Outbox { store: self }
    }

    pub fn partitions(&self) -> Partitions<'_> {
        Partitions { store: self }
    }

    pub fn read(&self) -> Read<'_> {
        Read { store: self }
    }

    pub fn retention(&self) -> Retention<'_> {
        Retention { store: self }
    }

    pub fn review(&self) -> Review<'_> {
        Review { store: self }
    }

    pub fn rules_versions(&self) -> RulesVersions<'_> {
        RulesVersions { store: self }
    }

    pub fn snapshots(&self) -> Snapshots<'_> {
        Snapshots { store: self }
    }

    pub fn statements(&self) -> Statements<'_> {
        Statements { store: self }
    }

    pub fn sweep(&self) -> Sweep<'_> {
        Sweep { store: self }
    }

    pub fn timers(&self) -> Timers<'_> {
        Timers { store: self }
    }
}

/// Statements made in a transaction that is not committed yet: what they read or marked waits
/// in `value` while the caller does its other half (a Redis write), then commits. Dropped
/// without [`Uncommitted::commit`], everything rolls back.
pub struct Uncommitted<T> {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    pub value: T,
}

impl<T> Uncommitted<T> {
    fn new(tx: sqlx::Transaction<'static, sqlx::Postgres>, value: T) -> Self {
        Self { tx, value }
    }

    pub async fn commit(self) -> Result<()> {
        self.tx.commit().await?;
        Ok(())
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Uncommitted<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uncommitted")
            .field("value", &self.value)
            .finish_non_exhaustive()
    }
}

/// The entity a stored id names; one that is none is reported and passed over (every row is
/// written from an entity id, so one is a sign of a foreign write).
pub(super) fn entity_or_report(raw: &str, what: &str) -> Option<EntityId> {
    match EntityId::parse(raw) {
        Ok(entity) => Some(entity),
        Err(error) => {
            tracing::error!(entity = %raw, %error, "{what} holds no entity id; passed over");
            None
        }
    }
}

/// A duration as a Postgres interval, truncated to the millisecond as the statements have
/// always taken them (a duration too long for an interval saturates, and Postgres then refuses
/// the timestamp it gives, as it refused the interval before).
fn interval(duration: std::time::Duration) -> PgInterval {
    let millis = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
    PgInterval {
        months: 0,
        days: 0,
        microseconds: millis.saturating_mul(1000),
    }
}
