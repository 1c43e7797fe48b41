//! Workers: claim due entities, lock each, read one snapshot, run the rules, apply at most one
//! version-checked action, ack. Bounded concurrency, graceful shutdown, lease reaping.

use crate::telemetry::Timed;
use std::{
    collections::{HashMap, VecDeque},
    panic::AssertUnwindSafe,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use futures::{FutureExt, future::BoxFuture};
use rand::Rng;
use tokio::{
    sync::{Notify, Semaphore},
    task::JoinSet,
};
use tokio_util::sync::CancellationToken;

use crate::{
    domain::{EntityId, Snapshot},
    evaluation_batches::{EvaluationBatches, FinishedEvaluation},
    queue::{Claim, Failed, Queue, QueueError, Reaped},
    rules::Rules,
    settings::Settings,
    store::{Completion, Store, StoreError, SweepCursor},
    telemetry::names,
};

/// Most expired leases returned per shard in one reaper pass.
const REAP_BATCH: usize = 256;
/// Delete statements one retention pass runs at most (each of `retention_batch` rows).
const PURGE_BATCHES_PER_PASS: usize = 10;
/// Longest pause of the Postgres circuit breaker between probes.
const MAX_BREAKER_PAUSE: Duration = Duration::from_secs(5);
/// Longest back-off after Redis errors in the poll loop.
const MAX_POLL_BACKOFF: Duration = Duration::from_secs(5);

/// How one evaluation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Evaluated and recorded (with or without an action).
    Done(Completion),
    /// The entity was locked or in flight elsewhere: tried again shortly, no attempt used.
    Snooze(Duration),
    /// A transient failure that is not the entity's fault (version conflict, Postgres or Redis
    /// unreachable): re-scheduled after a short jittered delay, no attempt used.
    Retry(String),
    /// A failed attempt (error, panic, timeout): re-scheduled after an exponential backoff with
    /// full jitter.
    Failed(String),
    /// Moved to the dead-letter set: a fatal failure, or the last allowed attempt failed.
    DeadLettered(String),
}

impl Outcome {
    fn label(&self) -> &'static str {
        match self {
            Outcome::Done(_) => "done",
            Outcome::Snooze(_) => "snooze",
            Outcome::Retry(_) => "retry",
            Outcome::Failed(_) => "failed",
            Outcome::DeadLettered(_) => "dead_lettered",
        }
    }
}

/// A test seam: runs after the snapshot is read and before the decision is written.
pub type BeforeApplyHook = Arc<dyn Fn(Snapshot) -> BoxFuture<'static, ()> + Send + Sync>;

#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub concurrency: usize,
    pub poll_interval: Duration,
    pub claim_batch: usize,
    pub retry_delay: Duration,
    pub lease: Duration,
    pub lease_floor: Duration,
    pub evaluation_timeout: Duration,
    pub retention: Duration,
    pub retention_interval: Duration,
    pub retention_batch: usize,
    pub sweep_interval: Duration,
    pub sweep_batch: usize,
    pub sweep_grace: Duration,
    pub shutdown_timeout: Duration,
    pub worker_id: String,
}

impl WorkerSettings {
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            concurrency: settings.worker.workers,
            poll_interval: settings.worker.poll_interval,
            claim_batch: settings.worker.claim_batch,
            retry_delay: settings.worker.retry_delay,
            lease: settings.worker.lease,
            lease_floor: settings.worker.lease_floor,
            evaluation_timeout: settings.worker.evaluation_timeout,
            retention: settings.maintenance.retention,
            retention_interval: settings.maintenance.retention_interval,
            retention_batch: settings.maintenance.retention_batch,
            sweep_interval: settings.maintenance.sweep_interval,
            sweep_batch: settings.maintenance.sweep_batch,
            sweep_grace: settings.maintenance.sweep_grace,
            shutdown_timeout: settings.worker.shutdown_timeout,
            worker_id: settings.worker.worker_id.clone(),
        }
    }
}

/// The result of one pass over every shard.
#[derive(Debug, Default)]
pub struct ClaimRound {
    pub claims: Vec<Claim>,
    /// How long until the earliest entity still waiting is due (None: nothing waits).
    pub next_due_in: Option<Duration>,
    /// Due entities pushed back because an earlier claim of theirs is still running.
    pub busy: usize,
}

/// What one repair-sweep pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// False when another process held the sweep lock, so this pass did nothing.
    pub ran: bool,
    /// Entities owed an evaluation that the pass looked up in Redis.
    pub examined: usize,
    /// Of those, the ones Redis had lost and that are now due again.
    pub repaired: usize,
}

#[derive(Clone)]
pub struct Worker {
    queue: Queue,
    store: Store,
    rules: Arc<Rules>,
    settings: WorkerSettings,
    wakeup: Arc<Notify>,
    before_apply: Option<BeforeApplyHook>,
    breaker: Arc<Breaker>,
    stats: Arc<WorkerStats>,
    leases: Arc<LeaseEstimator>,
    batches: EvaluationBatches,
}

/// Evaluation times kept for the lease estimate.
const LEASE_SAMPLES: usize = 512;
/// Measurements needed before the estimate replaces the configured lease.
const LEASE_MIN_SAMPLES: usize = 20;
/// Added to twice the p99 evaluation time.
const LEASE_MARGIN: Duration = Duration::from_secs(1);

/// The lease (and lock TTL) from measured evaluation times: p99 x 2 + margin, between the
/// floor and the configured lease. A short lease lets the reaper rescue a dead worker's
/// entities sooner; renewal keeps a slow evaluation's claim whatever the estimate.
#[derive(Debug)]
pub struct LeaseEstimator {
    samples: Mutex<VecDeque<Duration>>,
    floor: Duration,
    ceiling: Duration,
}

impl LeaseEstimator {
    pub fn new(floor: Duration, ceiling: Duration) -> Self {
        Self {
            samples: Mutex::new(VecDeque::with_capacity(LEASE_SAMPLES)),
            floor: floor.min(ceiling),
            ceiling,
        }
    }

    pub fn record(&self, took: Duration) {
        let mut samples = self.samples.lock().expect("not poisoned");
        if samples.len() == LEASE_SAMPLES {
            samples.pop_front();
        }
        samples.push_back(took);
    }

    /// The lease to give the next claims.
    pub fn current(&self) -> Duration {
        let samples = self.samples.lock().expect("not poisoned");
        if samples.len() < LEASE_MIN_SAMPLES {
            return self.ceiling;
        }
        let mut sorted: Vec<Duration> = samples.iter().copied().collect();
        drop(samples);
        sorted.sort_unstable();
        let p99 = sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)];
        (p99 * 2 + LEASE_MARGIN).clamp(self.floor, self.ceiling)
    }
}

/// Counters of one worker, for tests and logs (Prometheus has the process-wide figures).
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Entities claimed by this worker's poll loop and single-step calls.
    pub claims: AtomicU64,
    /// Postgres probes made while the circuit breaker was open.
    pub probes: AtomicU64,
    /// Writes refused by the moderation version fence (a stale evaluation).
    pub fenced: AtomicU64,
}

/// Stops claiming while Postgres is unreachable, so that workers neither churn through claims
/// nor hammer a database that is down. Opens on an evaluation that found Postgres unreachable;
/// after an exponential, jittered pause a ping decides whether to close or stay open.
#[derive(Debug, Default)]
struct Breaker {
    state: Mutex<BreakerState>,
}

#[derive(Debug, Default)]
struct BreakerState {
    trips: u32,
    open_until: Option<Instant>,
}

impl Breaker {
    fn trip(&self, base: Duration) {
        let mut state = self.state.lock().expect("not poisoned");
        state.trips = state.trips.saturating_add(1);
        let exponent = state.trips.min(16) - 1;
        let pause = (base * 2u32.pow(exponent)).min(MAX_BREAKER_PAUSE);
        let jittered = pause.mul_f64(0.5 + rand::random::<f64>() / 2.0);
        state.open_until = Some(Instant::now() + jittered);
        metrics::gauge!(names::POSTGRES_BREAKER_OPEN).set(1.0);
    }

    /// How long the breaker stays open, if it is.
    fn open_for(&self) -> Option<Duration> {
        let state = self.state.lock().expect("not poisoned");
        state
            .open_until
            .and_then(|until| until.checked_duration_since(Instant::now()))
            .filter(|d| !d.is_zero())
    }

    /// Tripped and its pause is over: the next step is a probe.
    fn needs_probe(&self) -> bool {
        let tripped = self.state.lock().expect("not poisoned").trips > 0;
        tripped && self.open_for().is_none()
    }

    fn close(&self) {
        let mut state = self.state.lock().expect("not poisoned");
        if state.trips > 0 {
            tracing::info!("Postgres is reachable again; claiming resumes");
        }
        *state = BreakerState::default();
        metrics::gauge!(names::POSTGRES_BREAKER_OPEN).set(0.0);
    }
}

impl Worker {
    pub fn new(
        queue: Queue,
        store: Store,
        rules: Arc<Rules>,
        settings: WorkerSettings,
        wakeup: Arc<Notify>,
    ) -> Self {
        let leases = Arc::new(LeaseEstimator::new(settings.lease_floor, settings.lease));
        let batches = EvaluationBatches::start(store.clone(), settings.worker_id.clone());
        Self {
            batches,
            queue,
            store,
            rules,
            settings,
            wakeup,
            before_apply: None,
            breaker: Arc::default(),
            stats: Arc::default(),
            leases,
        }
    }

    pub fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    /// Whether this worker has stopped claiming because Postgres is unreachable.
    pub fn breaker_open(&self) -> bool {
        self.breaker.state.lock().expect("not poisoned").trips > 0
    }

    pub fn with_before_apply(mut self, hook: BeforeApplyHook) -> Self {
        self.before_apply = Some(hook);
        self
    }

    /// Claims up to `limit` due entities across the shards, starting at a random shard so
    /// that processes do not all drain shard 0 first.
    pub async fn claim_once(&self, limit: usize) -> Result<ClaimRound, QueueError> {
        let shards = self.queue.keys().shards();
        let start = rand::rng().random_range(0..shards);
        let lease = self.leases.current();
        metrics::gauge!(names::LEASE_SECONDS).set(lease.as_secs_f64());
        let mut round = ClaimRound::default();
        let mut next_due_in: Option<i64> = None;
        for offset in 0..shards {
            let remaining = limit.saturating_sub(round.claims.len());
            if remaining == 0 {
                break;
            }
            let shard = (start + offset) % shards;
            let claimed = self
                .queue
                .claim(
                    shard,
                    remaining.min(self.settings.claim_batch),
                    self.jittered(self.settings.retry_delay),
                    lease,
                )
                .await;
            let batch = match claimed {
                Ok(batch) => batch,
                // Keep what other shards gave: dropping it would strand those claims until
                // their leases expire.
                Err(error) if !round.claims.is_empty() => {
                    tracing::warn!(%error, shard, "claim failed on one shard");
                    return Ok(round);
                }
                Err(error) => return Err(error),
            };
            round.busy += batch.busy;
            if batch.busy > 0 {
                metrics::counter!(names::LOCK_CONTENTION).increment(batch.busy as u64);
            }
            for raw in &batch.malformed {
                tracing::error!(member = %raw, shard, "due set holds a member that is not an entity id");
            }
            for claim in &batch.claims {
                let delay_ms = (batch.now_ms - claim.due_at_ms).max(0);
                metrics::histogram!(names::FIRE_DELAY_SECONDS).record(delay_ms as f64 / 1000.0);
            }
            if let Some(next) = batch.next_due_ms {
                let wait = (next - batch.now_ms).max(0);
                next_due_in = Some(next_due_in.map_or(wait, |w| w.min(wait)));
            }
            self.stats
                .claims
                .fetch_add(batch.claims.len() as u64, Ordering::Relaxed);
            round.claims.extend(batch.claims);
        }
        round.next_due_in = next_due_in.map(|ms| Duration::from_millis(ms as u64));
        Ok(round)
    }

    /// Returns every expired lease to the due set (or, on its last attempt, to the dead
    /// letters).
    pub async fn reap_once(&self) -> Result<Reaped, QueueError> {
        let mut total = Reaped::default();
        for shard in 0..self.queue.keys().shards() {
            let reaped = self.queue.reap(shard, REAP_BATCH).await?;
            total.returned += reaped.returned;
            total.dead_lettered += reaped.dead_lettered;
        }
        if total.returned + total.dead_lettered > 0 {
            metrics::counter!(names::LEASES_REAPED)
                .increment((total.returned + total.dead_lettered) as u64);
            metrics::counter!(names::DEAD_LETTERED, "reason" => "attempts_exhausted")
                .increment(total.dead_lettered as u64);
            tracing::warn!(
                returned = total.returned,
                dead_lettered = total.dead_lettered,
                "entities whose worker lease expired"
            );
        }
        Ok(total)
    }

    /// One repair-sweep pass: entities that Postgres says are owed an evaluation and that
    /// Redis holds neither due nor in flight are scheduled again, due now. One process sweeps
    /// at a time (a Postgres advisory lock); a pass examines at most `sweep_batch` entities,
    /// continuing after `cursor`. Returns the report and where the next pass continues.
    pub async fn sweep_once(
        &self,
        cursor: Option<SweepCursor>,
    ) -> Result<(SweepReport, Option<SweepCursor>), SweepError> {
        let lock_name = format!("quiesce-sweep:{}", self.queue.keys().prefix());
        let Some(mut tx) = self.store.begin_sweep(&lock_name).await? else {
            return Ok((SweepReport::default(), cursor));
        };
        let owed = Store::owed_evaluations(
            &mut tx,
            self.settings.sweep_grace,
            cursor.as_ref(),
            self.settings.sweep_batch,
        )
        .timed_query("owed_evaluations")
        .await?;
        let entities: Vec<EntityId> = owed
            .iter()
            .filter_map(|(_, entity)| EntityId::parse(entity).ok())
            .collect();
        let repaired = self.queue.repair(&entities).await?;
        tx.commit().await.map_err(StoreError::from)?;
        if repaired > 0 {
            metrics::counter!(names::SWEEP_REPAIRED).increment(repaired as u64);
            tracing::warn!(repaired, "re-scheduled entities that Redis had lost");
        }
        // A short page means the end was reached: the next pass starts from the oldest again.
        let next = (owed.len() >= self.settings.sweep_batch)
            .then(|| owed.last().cloned())
            .flatten();
        let report = SweepReport {
            ran: true,
            examined: owed.len(),
            repaired,
        };
        Ok((report, next))
    }

    /// Deletes events older than the retention (bounded per pass); totals stay as they are.
    pub async fn purge_once(&self) -> Result<u64, StoreError> {
        let deleted = self
            .store
            .purge_expired_events(
                self.settings.retention,
                self.settings.retention_batch,
                PURGE_BATCHES_PER_PASS,
            )
            .await?;
        if deleted > 0 {
            metrics::counter!(names::EVENTS_PURGED).increment(deleted);
            tracing::info!(deleted, "deleted events past the retention window");
        }
        Ok(deleted)
    }

    async fn run_retention(self, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(self.settings.retention_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {
                    if let Err(error) = self.purge_once().await {
                        tracing::warn!(%error, "retention pass failed");
                    }
                }
            }
        }
    }

    async fn run_sweeper(self, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(self.settings.sweep_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut cursor = None;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => match self.sweep_once(cursor.take()).await {
                    Ok((_, next)) => cursor = next,
                    Err(error) => tracing::warn!(%error, "repair sweep failed"),
                },
            }
        }
    }

    /// Evaluates one claimed entity and settles its claim (ack, re-schedule or dead-letter).
    /// A panic inside the evaluation is caught and counted as a failed attempt.
    /// The span's `evaluation` is the claim token: the id every log line of this attempt shares.
    #[tracing::instrument(name = "evaluation", skip_all, fields(entity = %claim.entity, evaluation = %claim.token, shard = claim.shard))]
    pub async fn process(&self, claim: Claim) -> Outcome {
        let started = Instant::now();
        let outcome = match AssertUnwindSafe(self.process_inner(&claim))
            .catch_unwind()
            .await
        {
            Ok(outcome) => outcome,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".to_owned());
                let outcome = self.fail(&claim, format!("panic: {message}"), false).await;
                let _ = self.queue.unlock(&claim).await;
                outcome
            }
        };
        metrics::counter!(names::EVALUATIONS, "outcome" => outcome.label()).increment(1);
        metrics::histogram!(names::EVALUATION_SECONDS).record(started.elapsed().as_secs_f64());
        match &outcome {
            Outcome::Retry(reason) => tracing::info!(%reason, "evaluation will be retried"),
            Outcome::Failed(error) => {
                tracing::warn!(%error, "evaluation failed; retrying with backoff")
            }
            Outcome::DeadLettered(error) => tracing::error!(%error, "entity dead-lettered"),
            _ => {}
        }
        outcome
    }

    async fn process_inner(&self, claim: &Claim) -> Outcome {
        let locking = Instant::now();
        let locked = self.queue.lock(claim).await;
        metrics::histogram!(names::LOCK_ACQUIRE_SECONDS).record(locking.elapsed().as_secs_f64());
        match locked {
            Ok(true) => {}
            Ok(false) => {
                metrics::counter!(names::LOCK_CONTENTION).increment(1);
                let delay = self.jittered(self.settings.retry_delay);
                return match self.queue.retry(claim, delay).await {
                    Ok(_) => Outcome::Snooze(delay),
                    // The lease will expire and the reaper returns the entity.
                    Err(error) => {
                        Outcome::Retry(format!("lock busy, and re-scheduling failed: {error}"))
                    }
                };
            }
            Err(error) => {
                // The SET may have taken effect with its reply lost: release it if it is ours.
                let _ = self.queue.unlock(claim).await;
                return self.give_back(claim, format!("lock: {error}")).await;
            }
        }

        let lost = Arc::new(AtomicBool::new(false));
        // Renewal stops when the guard drops: on return, on timeout, and on a panic.
        let renewal = RenewalGuard(self.spawn_renewal(claim.clone(), Arc::clone(&lost)));
        let evaluation_started = Instant::now();
        let result = tokio::time::timeout(self.settings.evaluation_timeout, self.evaluate(claim))
            .await
            .unwrap_or(Err(EvaluationError::TimedOut(
                self.settings.evaluation_timeout,
            )));
        drop(renewal);
        self.leases.record(evaluation_started.elapsed());

        let mut released = false;
        let outcome = match result {
            Ok(completion) => {
                match self.queue.ack(claim).await {
                    // The ack released the lock too.
                    Ok(_) => released = true,
                    // Not acked: the lease expires and the entity is evaluated again, which
                    // the dedup key and version fence make harmless.
                    Err(error) => tracing::warn!(%error, "ack failed"),
                }
                Outcome::Done(completion)
            }
            Err(error @ (EvaluationError::UnknownEntity | EvaluationError::Rules(_))) => {
                self.fail(claim, error.to_string(), true).await
            }
            Err(EvaluationError::Store(StoreError::VersionConflict { read })) => {
                metrics::counter!(names::VERSION_CONFLICTS).increment(1);
                self.stats.fenced.fetch_add(1, Ordering::Relaxed);
                self.give_back(claim, format!("moderation version moved past {read}"))
                    .await
            }
            // A deadlock or serialization failure: try again, nobody's fault.
            Err(EvaluationError::Store(error)) if error.is_conflict() => {
                self.give_back(claim, error.to_string()).await
            }
            // A timeout is the entity's fault only if Postgres answers: a black-holed network
            // must not use up attempts.
            Err(error @ EvaluationError::TimedOut(_)) if !self.postgres_answers().await => {
                self.breaker.trip(self.settings.poll_interval);
                self.give_back(claim, error.to_string()).await
            }
            // An outage is not the entity's fault: it must not use up its attempts, and
            // claiming pauses until Postgres answers again.
            Err(EvaluationError::Store(error)) if error.is_unavailable() => {
                if !self.breaker_open() {
                    tracing::warn!(%error, "Postgres unreachable; pausing claims");
                }
                self.breaker.trip(self.settings.poll_interval);
                self.give_back(claim, error.to_string()).await
            }
            Err(error) => self.fail(claim, error.to_string(), false).await,
        };
        if lost.load(Ordering::Relaxed) {
            tracing::warn!("lease or lock was lost during the evaluation");
        }
        if !released && let Err(error) = self.queue.unlock(claim).await {
            tracing::warn!(%error, "unlock failed; the lock expires with its lease");
        }
        outcome
    }

    /// Whether Postgres answers a ping within a second.
    async fn postgres_answers(&self) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(1), self.store.ping()).await,
            Ok(Ok(()))
        )
    }

    /// Re-schedules after a short jittered delay without using an attempt.
    async fn give_back(&self, claim: &Claim, reason: String) -> Outcome {
        if let Err(error) = self
            .queue
            .retry(claim, self.jittered(self.settings.retry_delay))
            .await
        {
            tracing::warn!(%error, "re-scheduling failed; the lease expires and the reaper returns it");
        }
        Outcome::Retry(reason)
    }

    /// Records a failed attempt: backoff and retry, or dead letter (at once if `fatal`).
    async fn fail(&self, claim: &Claim, error: String, fatal: bool) -> Outcome {
        match self.queue.fail(claim, &error, fatal).await {
            Ok(Failed::DeadLettered) => {
                let reason = if fatal { "fatal" } else { "attempts_exhausted" };
                metrics::counter!(names::DEAD_LETTERED, "reason" => reason).increment(1);
                Outcome::DeadLettered(error)
            }
            Ok(Failed::Retried | Failed::TakenOver) => Outcome::Failed(error),
            Err(redis_error) => {
                tracing::warn!(%redis_error, "recording the failure failed; the lease expires and the reaper counts it");
                Outcome::Failed(error)
            }
        }
    }

    async fn evaluate(&self, claim: &Claim) -> Result<Completion, EvaluationError> {
        let started_at = Utc::now();
        let rules = self.rules.current();
        let snapshot = self
            .batches
            .snapshot(&claim.entity, rules.uses_actors(), rules.uses_windows())
            .await?
            .ok_or(EvaluationError::UnknownEntity)?;
        let verdict = rules.evaluate(&snapshot);
        for (rule, error) in &verdict.shadow_errors {
            metrics::counter!(names::RULE_ERRORS).increment(1);
            tracing::warn!(%rule, %error, "shadow rule could not be evaluated");
        }
        if !verdict.errors.is_empty() {
            metrics::counter!(names::RULE_ERRORS).increment(verdict.errors.len() as u64);
            let errors: Vec<String> = verdict
                .errors
                .iter()
                .map(|(rule, error)| format!("rule {rule:?}: {error}"))
                .collect();
            return Err(EvaluationError::Rules(errors.join("; ")));
        }
        for shadow in &verdict.shadow {
            metrics::counter!(names::SHADOW_HITS, "rule" => shadow.rule.clone()).increment(1);
        }
        let mut decision = verdict
            .to_apply(snapshot.status, snapshot.override_cap)
            .cloned();
        let dedup_key = decision.as_ref().map(|d| snapshot.dedup_key(&d.rule));
        // A cache in front of the Postgres constraint; on a Redis error Postgres decides.
        if let Some(key) = &dedup_key
            && self
                .queue
                .action_known_applied(&claim.entity, key)
                .await
                .unwrap_or(false)
        {
            decision = None;
        }
        if let Some(hook) = &self.before_apply {
            hook(snapshot.clone()).await;
        }
        let collapsed = (snapshot.event_count - snapshot.previously_evaluated).max(0);
        let completion = self
            .batches
            .complete(FinishedEvaluation {
                snapshot,
                verdict,
                decision: decision.clone(),
                started_at,
                due_at: DateTime::<Utc>::from_timestamp_millis(claim.due_at_ms),
            })
            .await?;
        metrics::histogram!(names::EVENTS_PER_EVALUATION).record(collapsed as f64);
        if let Completion::Applied {
            author: Some(author),
            ..
        } = &completion
        {
            // The author's derived signal is committed; if this schedule is lost, the repair
            // sweep finds the author owed an evaluation.
            if let Err(error) = self
                .queue
                .schedule(&[(author.clone(), crate::domain::Priority::Normal)])
                .await
            {
                tracing::warn!(%error, %author, "could not schedule the author; the sweep will");
            }
        }
        if let (Some(d), Some(key), Completion::Applied { .. } | Completion::AlreadyApplied) =
            (&decision, &dedup_key, &completion)
        {
            if matches!(completion, Completion::Applied { .. }) {
                metrics::counter!(names::ACTIONS, "action" => d.action.as_str(), "rule" => d.rule.clone())
                    .increment(1);
                tracing::info!(action = d.action.as_str(), rule = %d.rule, "action applied");
            }
            if let Err(error) = self.queue.remember_applied_action(&claim.entity, key).await {
                tracing::debug!(%error, "could not cache the applied action");
            }
        }
        Ok(completion)
    }

    /// Renews lease and lock every third of the lease while the evaluation runs.
    fn spawn_renewal(&self, claim: Claim, lost: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
        let queue = self.queue.clone();
        let period = Duration::from_millis(claim.lease_ms / 3).max(Duration::from_millis(1));
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                match queue.renew(&claim).await {
                    Ok(true) => {}
                    Ok(false) => {
                        lost.store(true, Ordering::Relaxed);
                        return;
                    }
                    Err(error) => tracing::warn!(%error, "lease renewal failed; will try again"),
                }
            }
        })
    }

    /// Half the base plus a random part of it ("equal jitter"), so retries spread out.
    fn jittered(&self, base: Duration) -> Duration {
        let base_ms = base.as_millis().max(2) as u64;
        Duration::from_millis(base_ms / 2 + rand::rng().random_range(0..=base_ms / 2))
    }

    /// The poll loop: claims while permits are free, sleeps until the earliest due entity (at
    /// most the poll interval) or a wake-up, reaps expired leases, and on shutdown stops
    /// claiming, waits for running evaluations, and gives back what did not finish in time.
    pub async fn run(self, shutdown: CancellationToken) {
        let permits = Arc::new(Semaphore::new(self.settings.concurrency));
        let running: Arc<Mutex<HashMap<String, Claim>>> = Arc::default();
        let mut tasks = JoinSet::new();
        let reaper = tokio::spawn(self.clone().run_reaper(shutdown.clone()));
        let sweeper = tokio::spawn(self.clone().run_sweeper(shutdown.clone()));
        let retention = tokio::spawn(self.clone().run_retention(shutdown.clone()));
        let mut backoff = self.settings.poll_interval;

        while !shutdown.is_cancelled() {
            while tasks.try_join_next().is_some() {}

            let available = permits.available_permits();
            let mut sleep_for = self.settings.poll_interval;
            let claiming = if let Some(pause) = self.breaker.open_for() {
                sleep_for = pause;
                false
            } else if self.breaker.needs_probe() {
                self.stats.probes.fetch_add(1, Ordering::Relaxed);
                match tokio::time::timeout(
                    self.settings.poll_interval.max(Duration::from_secs(1)),
                    self.store.ping(),
                )
                .await
                {
                    Ok(Ok(())) => {
                        self.breaker.close();
                        true
                    }
                    _ => {
                        self.breaker.trip(self.settings.poll_interval);
                        sleep_for = self
                            .breaker
                            .open_for()
                            .unwrap_or(self.settings.poll_interval);
                        false
                    }
                }
            } else {
                true
            };
            if claiming && available > 0 {
                match self.claim_once(available).await {
                    Ok(round) => {
                        backoff = self.settings.poll_interval;
                        let full = round.claims.len() == available;
                        for claim in round.claims {
                            let permit = Arc::clone(&permits)
                                .try_acquire_owned()
                                .expect("claimed no more than the free permits");
                            running
                                .lock()
                                .expect("not poisoned")
                                .insert(claim.token.clone(), claim.clone());
                            let worker = self.clone();
                            let running = Arc::clone(&running);
                            tasks.spawn(async move {
                                let token = claim.token.clone();
                                worker.process(claim).await;
                                running.lock().expect("not poisoned").remove(&token);
                                drop(permit);
                            });
                        }
                        if full {
                            // More may be due; come back as soon as a permit frees.
                            sleep_for = Duration::ZERO;
                        } else if let Some(next) = round.next_due_in {
                            sleep_for = next.min(self.settings.poll_interval);
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "claim failed; backing off");
                        backoff = (backoff * 2).min(MAX_POLL_BACKOFF);
                        sleep_for = self.jittered(backoff);
                    }
                }
            }

            let at_capacity = permits.available_permits() == 0;
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.wakeup.notified() => {}
                _ = tokio::time::sleep(sleep_for), if !at_capacity => {}
                Some(_) = tasks.join_next(), if at_capacity => {}
            }
        }

        let drained = tokio::time::timeout(self.settings.shutdown_timeout, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
            let unfinished: Vec<Claim> = running
                .lock()
                .expect("not poisoned")
                .drain()
                .map(|(_, c)| c)
                .collect();
            tracing::warn!(
                count = unfinished.len(),
                "shutdown timeout: giving unfinished claims back"
            );
            for claim in unfinished {
                let _ = self.queue.retry(&claim, Duration::ZERO).await;
                let _ = self.queue.unlock(&claim).await;
            }
        }
        let _ = reaper.await;
        let _ = sweeper.await;
        let _ = retention.await;
    }

    /// Returns expired leases every half lease, on its own timer so that a process whose
    /// evaluation slots are all busy still rescues what other processes left behind.
    async fn run_reaper(self, shutdown: CancellationToken) {
        let mut ticker =
            tokio::time::interval((self.leases.floor / 2).max(Duration::from_millis(50)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {
                    if let Err(error) = self.reap_once().await {
                        tracing::warn!(%error, "reaper pass failed");
                    }
                }
            }
        }
    }
}

/// Aborts the lease renewal task when dropped, so a claim is never renewed past its evaluation.
struct RenewalGuard(tokio::task::JoinHandle<()>);

impl Drop for RenewalGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

#[derive(Debug, thiserror::Error)]
enum EvaluationError {
    #[error("entity is scheduled but has no record in Postgres")]
    UnknownEntity,
    #[error("the rules cannot evaluate this entity: {0}")]
    Rules(String),
    #[error("evaluation did not finish within {0:?}")]
    TimedOut(Duration),
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::LeaseEstimator;

    #[test]
    fn the_lease_is_twice_the_p99_plus_a_margin_within_floor_and_ceiling() {
        let leases = LeaseEstimator::new(Duration::from_secs(1), Duration::from_secs(30));
        assert_eq!(
            leases.current(),
            Duration::from_secs(30),
            "no measurements yet"
        );
        for _ in 0..99 {
            leases.record(Duration::from_millis(100));
        }
        leases.record(Duration::from_millis(2_000));
        // p99 of 99 x 100ms and one 2s is 2s: 2 x 2s + 1s.
        assert_eq!(leases.current(), Duration::from_secs(5));
        for _ in 0..600 {
            leases.record(Duration::from_millis(1));
        }
        assert_eq!(leases.current(), Duration::from_millis(1_002));
        for _ in 0..600 {
            leases.record(Duration::from_secs(60));
        }
        assert_eq!(
            leases.current(),
            Duration::from_secs(30),
            "capped at the configured lease"
        );
        let tight = LeaseEstimator::new(Duration::from_secs(5), Duration::from_secs(2));
        for _ in 0..100 {
            tight.record(Duration::from_millis(1));
        }
        assert_eq!(
            tight.current(),
            Duration::from_secs(2),
            "the floor never exceeds the lease"
        );
    }
}
