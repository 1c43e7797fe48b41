//! HA suite (`make ha`): quiesce on a Postgres cluster that fails over, three PostgreSQL 15 nodes
//! under Patroni with etcd (`synchronous_mode`) behind HAProxy (scripts/dev/postgres-ha.sh).
//! quiesce's `serve` and `worker` processes are given HAProxy's read-write address and nothing
//! else, as they would a managed database's. Under a steady load from a sender that retries 503s
//! and connection errors with the same ids, the leader's node is killed, its postgres alone, it
//! is switched over, frozen past its lease and resumed, or made read-only for 10 s; afterwards
//! every id answered 202 is in `events` once, no action is doubled, every entity's latest
//! evaluation covers all its events, no attempt was burned and nothing is dead-lettered.
//! Each run prints its figures on an `ha ...:` line; HA_RUNS=N (make ha-figures) repeats each
//! failover N times and prints the p50 and max of its windows (RELIABILITY.md).

mod checks;
mod cluster;
#[path = "../api/helpers/mod.rs"]
#[allow(dead_code)]
mod helpers;
#[path = "../support/load.rs"]
#[allow(dead_code)]
mod load;
#[path = "../api/proxy.rs"]
#[allow(dead_code)]
mod proxy;
mod replica;
mod restore;
#[path = "../support/secrets.rs"]
mod secrets;
mod sender;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use checks::{LagWatch, Rig, evaluation_recovery, lag_caught_up, try_scalar};
use cluster::{act, answers_primary, ha, leader, members};
use helpers::wait_for;
use sender::Sender;
use tokio_util::sync::CancellationToken;

/// Entities the load spreads over.
const ENTITIES: usize = 400;
/// Load before a disruption: the evaluations' rate before is measured over its last seconds.
const WARM_UP: Duration = Duration::from_secs(7);
/// Load after writes are accepted again: the evaluations' rate after is measured over it.
const AFTER: Duration = Duration::from_secs(8);
/// The schedule has caught up once no due entity waits longer than this for its evaluation
/// (for a second).
const LAG_BOUND_MS: i64 = 500;
/// How soon after the new primary answers nothing due may wait over [`LAG_BOUND_MS`]: held by
/// `make ha-figures` for the node and the postgres-only kill.
const CAUGHT_UP_TARGET: Duration = Duration::from_secs(5);

/// How often each failover runs (HA_RUNS, 1 unless make ha-figures sets it).
fn runs() -> usize {
    std::env::var("HA_RUNS").map_or(1, |n| n.parse().expect("HA_RUNS is a count"))
}

/// A steady load on the rig's API, stopped by the returned token.
struct Load {
    sender: Arc<Sender>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    started: Instant,
}

impl Load {
    fn start(rig: &Rig, phase: &str) -> Self {
        let sender = Sender::new(&rig.api, phase, ENTITIES);
        let stop = CancellationToken::new();
        let task = tokio::spawn(Arc::clone(&sender).run(stop.clone()));
        Self {
            sender,
            stop,
            task,
            started: Instant::now(),
        }
    }

    /// Until the load has run `WARM_UP` and evaluations are being written.
    async fn warm_up(&self, rig: &Rig) {
        wait_for(
            WARM_UP + Duration::from_secs(60),
            "the load to run and evaluations to be written",
            || async {
                self.started.elapsed() >= WARM_UP
                    && try_scalar!(rig, "SELECT count(*) FROM evaluations") > 0
            },
        )
        .await;
    }

    /// Until a request sent from `since` on was accepted `AFTER` ago.
    async fn until_accepting(&self, since: Instant, deadline: Duration) {
        wait_for(deadline, "writes to be accepted again", || async {
            self.sender.accepting_since(since, AFTER)
        })
        .await;
    }

    /// Stops sending and waits until every request sent was accepted.
    async fn finish(self) -> Arc<Sender> {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(240), self.task)
            .await
            .expect("every request accepted within 4 minutes")
            .expect("the sender");
        self.sender
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failover {
    /// The leader's Patroni and postgres SIGKILLed: the lock expires after the ttl.
    NodeKilled,
    /// The leader's postmaster SIGKILLed: Patroni, still holding the lock, starts it again.
    PostgresKilled,
    /// A planned switchover to the synchronous standby.
    Switchover,
}

impl Failover {
    fn name(self) -> &'static str {
        match self {
            Failover::NodeKilled => "node-killed",
            Failover::PostgresKilled => "postgres-killed",
            Failover::Switchover => "switchover",
        }
    }

    /// The disruption, as the report lines name it.
    fn event(self) -> &'static str {
        match self {
            Failover::NodeKilled | Failover::PostgresKilled => "kill",
            Failover::Switchover => "request",
        }
    }

    fn command(self) -> &'static str {
        match self {
            Failover::NodeKilled => "kill-node",
            Failover::PostgresKilled => "kill-postgres",
            Failover::Switchover => "switchover",
        }
    }
}

/// What one failover run measured.
#[derive(Debug, Clone, Copy)]
struct Figures {
    /// From the first attempt not answered 202 until none is and writes are accepted again.
    window: Duration,
    /// The last non-202 answer after the switch: the new primary answering /primary (a
    /// switchover), else after the disruption.
    last_failure_after_switch: Duration,
    /// Evaluations back to >= 90% of their rate before, after writes were accepted again
    /// (`None`: not before the load ended).
    recovery_after_writes: Option<Duration>,
    /// From the new primary answering (Patroni's primary check on another node; the restarted
    /// postgres taking writes again after a postgres-only kill) until no due entity waited over
    /// [`LAG_BOUND_MS`] for a second (`None`: not before the load ended).
    caught_up_after_primary: Option<Duration>,
}

/// One failover under load on a fresh database, checked; its figures.
async fn failover_run(failover: Failover, run: usize) -> Figures {
    let rig = Rig::start(&format!("{}-{run}", failover.name())).await;
    let load = Load::start(&rig, &format!("{}{run}", failover.name()));
    load.warm_up(&rig).await;

    let before = leader().await.expect("a leader before the failover");
    // The switch: the moment another node's Patroni answers HAProxy's primary check.
    let watch = (failover != Failover::PostgresKilled)
        .then(|| tokio::spawn(first_new_primary(before.name.clone())));
    let lag = LagWatch::start(&rig);
    let (_, disrupted) = act(&[failover.command()]).await;
    load.until_accepting(Instant::now(), Duration::from_secs(90))
        .await;
    let switched = match watch {
        Some(watch) => Some(watch.await.unwrap().expect("a new primary within 60 s")),
        None => None,
    };
    let sender = load.finish().await;
    let lag = lag.finish().await;
    let outage = sender.outage(disrupted.instant);
    eprintln!(
        "ha {} (run {run}): answers per 0.5 s from 1 s before the first non-202 (202/other): {}",
        failover.name(),
        sender.timeline(disrupted.instant, 20)
    );
    rig.wait_settled(Duration::from_secs(90)).await;
    let counts = rig.check(&sender).await;
    let now_leader = leader().await.expect("a leader after the failover");
    match failover {
        Failover::PostgresKilled => assert_eq!(now_leader.name, before.name),
        _ => assert_ne!(now_leader.name, before.name),
    }

    let recovery = evaluation_recovery(&rig, &disrupted, &outage).await;
    let from = disrupted.instant - Duration::from_secs(1);
    let writes_back = disrupted.instant + outage.back_after;
    let (caught_up, lag_timeline) = lag_caught_up(&lag, from, writes_back, LAG_BOUND_MS);
    // The new primary answering: another node's primary check, or, with no other node (the
    // postgres alone killed and started again), writes accepted again.
    let primary_answering = switched.unwrap_or(writes_back).min(writes_back);
    let (caught_up_after_primary, _) = lag_caught_up(&lag, from, primary_answering, LAG_BOUND_MS);
    eprintln!(
        "ha {} (run {run}): per 0.5 s from 1 s before the {}: evaluations {}; the most overdue \
         entity's lag (ms) {}",
        failover.name(),
        failover.event(),
        recovery.timeline,
        lag_timeline,
    );
    let last_failure = disrupted.instant + outage.last_failure_after;
    let last_failure_after_switch =
        last_failure.saturating_duration_since(switched.unwrap_or(disrupted.instant));
    let switch = match switched {
        Some(at) => format!(
            " (its Patroni answering the primary check {:.1?} after the {}; the last non-202 \
             {last_failure_after_switch:.1?} after that)",
            at.saturating_duration_since(disrupted.instant),
            failover.event(),
        ),
        None => String::new(),
    };
    eprintln!(
        "ha {} (run {run}): leader {} -> {}{switch}; a non-202 window of {:.1?} ({} attempts \
         answered otherwise, {} before the {}), the last {:.1?} after the {}, writes accepted \
         again {:.1?} after it; evaluations {:.0}/s before, back to >= 90% {} after writes \
         were; no due entity waiting over {LAG_BOUND_MS} ms {} after writes were, {} after the \
         new primary answered; {counts}; {} ERROR lines in the processes' logs",
        failover.name(),
        before.name,
        now_leader.name,
        outage.window,
        outage.failed_attempts,
        outage.failed_before,
        failover.event(),
        outage.last_failure_after,
        failover.event(),
        outage.back_after,
        recovery.rate_before,
        recovered(recovery.after_writes),
        recovered(caught_up),
        recovered(caught_up_after_primary),
        rig.error_lines(),
    );
    Figures {
        window: outage.window,
        last_failure_after_switch,
        recovery_after_writes: recovery.after_writes,
        caught_up_after_primary,
    }
}

/// When a node other than `old` first answers Patroni's primary check (polled for 60 s).
async fn first_new_primary(old: String) -> Option<Instant> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        for member in members().await {
            if member.name != old && answers_primary(&member.api).await {
                return Some(Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Runs `failover` [`runs`] times; asserts each run's window within `bound` (of the switch,
/// for a switchover); prints the p50 and max over the runs.
async fn failovers(failover: Failover, bound: Duration) {
    let figures: Vec<Figures> = {
        let mut figures = Vec::new();
        for run in 1..=runs() {
            figures.push(failover_run(failover, run).await);
        }
        figures
    };
    let summary = |pick: fn(&Figures) -> Duration| {
        let mut values: Vec<Duration> = figures.iter().map(pick).collect();
        values.sort();
        (values[(values.len() - 1) / 2], *values.last().unwrap())
    };
    let (window_p50, window_max) = summary(|f| f.window);
    let (switch_p50, switch_max) = summary(|f| f.last_failure_after_switch);
    let recoveries: Vec<Duration> = {
        let mut values: Vec<Duration> = figures
            .iter()
            .filter_map(|f| f.recovery_after_writes)
            .collect();
        values.sort();
        values
    };
    let recovery = match recoveries.last() {
        Some(max) => format!(
            "p50 {:.1?}, max {max:.1?}",
            recoveries[(recoveries.len() - 1) / 2]
        ),
        None => "in no run".to_string(),
    };
    let not_recovered = figures.len() - recoveries.len();
    let not_recovered = if not_recovered > 0 {
        format!(" ({not_recovered} runs not before the load ended)")
    } else {
        String::new()
    };
    let caught_up: Vec<Duration> = {
        let mut values: Vec<Duration> = figures
            .iter()
            .filter_map(|f| f.caught_up_after_primary)
            .collect();
        values.sort();
        values
    };
    let caught_up = match caught_up.last() {
        Some(max) => format!(
            "p50 {:.1?}, max {max:.1?} in {} of {} runs",
            caught_up[(caught_up.len() - 1) / 2],
            caught_up.len(),
            figures.len()
        ),
        None => "in no run".to_string(),
    };
    let switch = match failover {
        Failover::Switchover => format!(
            "; the last non-202 after the switch p50 {switch_p50:.1?}, max {switch_max:.1?}"
        ),
        _ => String::new(),
    };
    eprintln!(
        "ha {} over {} runs: non-202 window p50 {window_p50:.1?}, max {window_max:.1?}{switch}; \
         evaluations back to >= 90% of their rate {recovery}{not_recovered} after writes were \
         accepted again; no due entity waiting over {LAG_BOUND_MS} ms {caught_up} after the \
         new primary answered",
        failover.name(),
        figures.len(),
    );
    // The windows are figures, held to their targets by `make ha-figures` (HA_CHECK_TARGETS)
    // on a machine running nothing else; `make ha` reports them, as a timed test would fail
    // on a busy machine for reasons of its own.
    let check_targets = std::env::var_os("HA_CHECK_TARGETS").is_some();
    for (run, f) in figures.iter().enumerate() {
        let measured = match failover {
            Failover::Switchover => f.last_failure_after_switch,
            _ => f.window,
        };
        if measured > bound {
            let message = format!(
                "{} run {}: {measured:?} above the target {bound:?}",
                failover.name(),
                run + 1
            );
            assert!(!check_targets, "{message}");
            eprintln!("ha: {message}");
        }
        // Back is when nothing due waits: the evaluations' rate after an outage follows the
        // senders' retries, which arrive together, so "back to 90% of the rate before" is
        // reported, not held (RELIABILITY.md, Postgres failover).
        let caught_up_in_time = f
            .caught_up_after_primary
            .is_some_and(|after| after <= CAUGHT_UP_TARGET);
        if failover != Failover::Switchover && !caught_up_in_time {
            let message = format!(
                "{} run {}: a due entity still waited over {LAG_BOUND_MS} ms {} after the new \
                 primary answered (target {CAUGHT_UP_TARGET:?})",
                failover.name(),
                run + 1,
                recovered(f.caught_up_after_primary),
            );
            assert!(!check_targets, "{message}");
            eprintln!("ha: {message}");
        }
    }
}

/// A recovery figure as the report prints it.
fn recovered(after_writes: Option<Duration>) -> String {
    match after_writes {
        Some(after) => format!("{after:.1?}"),
        None => "not before the load ended".to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "HA suite: make ha"]
async fn failover_leader_node_killed_loses_nothing_and_writes_resume_within_12s() {
    failovers(Failover::NodeKilled, Duration::from_secs(12)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "HA suite: make ha"]
async fn failover_leader_postgres_killed_loses_nothing_and_writes_resume_within_5s() {
    failovers(Failover::PostgresKilled, Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "HA suite: make ha"]
async fn failover_planned_switchover_loses_nothing_and_the_last_503_is_within_3s_of_the_switch() {
    failovers(Failover::Switchover, Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "HA suite: make ha"]
async fn a_leader_frozen_past_its_lease_and_resumed_loses_nothing_and_quiesce_ends_on_the_new_primary()
 {
    let rig = Rig::start("frozen").await;
    let load = Load::start(&rig, "frozen");
    load.warm_up(&rig).await;
    let frozen = leader().await.expect("a leader to freeze");
    let (_, disrupted) = act(&["pause"]).await;
    // Resumed whatever happens below, so that no later test finds a frozen node.
    let resume = scopeguard(|| {
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dev/postgres-ha.sh");
        let _ = std::process::Command::new("bash")
            .arg(script)
            .arg("resume")
            .status();
    });
    wait_for(
        Duration::from_secs(60),
        "another node to take the lead",
        || async { leader().await.is_some_and(|l| l.name != frozen.name) },
    )
    .await;
    let promoted = leader().await.unwrap();
    let promoted_at = Instant::now();
    load.until_accepting(promoted_at, Duration::from_secs(60))
        .await;
    ha(&["resume"]).await;
    drop(resume);
    let resumed = Instant::now();
    // The old leader wakes up believing it leads: for a moment two nodes may call themselves
    // primary. quiesce must write on the new one only.
    let mut old_answered_primary = Duration::ZERO;
    while resumed.elapsed() < Duration::from_secs(5) {
        let polled = Instant::now();
        if answers_primary(&frozen.api).await {
            old_answered_primary += polled.elapsed().max(Duration::from_millis(50));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_for(
        Duration::from_secs(90),
        "the frozen leader to rejoin as a replica of the new one",
        || async {
            let now = members().await;
            let lead = now.iter().find(|m| m.role == "leader");
            let old = now.iter().find(|m| m.name == frozen.name);
            matches!((lead, old), (Some(l), Some(o)) if l.name == promoted.name
                && o.role != "leader" && o.timeline == l.timeline)
        },
    )
    .await;
    load.until_accepting(Instant::now(), Duration::from_secs(60))
        .await;
    let sender = load.finish().await;
    let outage = sender.outage(disrupted.instant);
    rig.wait_settled(Duration::from_secs(90)).await;
    let counts = rig.check(&sender).await;
    // quiesce is on the new primary: the new leader's own copy, read on its own port, holds
    // every acknowledged event.
    let on_leader = rig.count_on_leader("SELECT count(*) FROM events").await;
    assert_eq!(
        on_leader as usize,
        sender.accepted().len(),
        "the new leader {} holds every acknowledged event",
        promoted.name
    );
    eprintln!(
        "ha frozen leader: {} frozen (SIGSTOP) past its lease; {} took the lead; non-202 window \
         {:.1?} ({} attempts; {} before the freeze), writes accepted again {:.1?} after it; after the resume the old \
         leader answered Patroni's primary check for {:.1?}; {counts}; {} ERROR lines in the \
         processes' logs",
        frozen.name,
        promoted.name,
        outage.window,
        outage.failed_attempts,
        outage.failed_before,
        outage.back_after,
        old_answered_primary,
        rig.error_lines(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "HA suite: make ha"]
async fn a_read_only_spell_on_the_primary_pauses_claims_burns_no_attempt_and_dead_letters_nothing()
{
    const SPELL: Duration = Duration::from_secs(10);
    let rig = Rig::start("read-only").await;
    let load = Load::start(&rig, "readonly");
    load.warm_up(&rig).await;
    let disrupted = cluster::Stamp::now();
    // The primary read-only for 10 s while Patroni and HAProxy still call it the primary; meanwhile
    // every process' breaker and the API's readiness are watched.
    let seconds = SPELL.as_secs().to_string();
    let spell_over = CancellationToken::new();
    // Each process watched on its own: a scrape may wait a few seconds on Postgres during the
    // spell (at most 3 s per backend, `render_metrics`).
    let paused = rig.metrics.iter().map(|metrics| {
        let spell_over = spell_over.clone();
        async move {
            let mut paused = false;
            while !spell_over.is_cancelled() {
                paused |= checks::gauge(metrics, "quiesce_postgres_breaker_open").await == 1.0;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            paused
        }
    });
    let not_ready = async {
        let mut not_ready = false;
        while !spell_over.is_cancelled() {
            not_ready |= !rig.ready().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        not_ready
    };
    let spell = async {
        let acted = act(&["read-only", seconds.as_str()]).await;
        spell_over.cancel();
        acted
    };
    let (_, paused, not_ready) = tokio::join!(spell, futures::future::join_all(paused), not_ready);
    let ended = Instant::now();
    let evaluations_at_end = try_scalar!(rig, "SELECT count(*) FROM evaluations");
    // Claiming resumes by itself: every breaker closes and evaluations are written again.
    wait_for(
        Duration::from_secs(60),
        "every process to claim again and evaluations to be written",
        || async {
            let mut closed = true;
            for metrics in &rig.metrics {
                closed &= checks::gauge(metrics, "quiesce_postgres_breaker_open").await == 0.0;
            }
            closed
                && rig.ready().await
                && try_scalar!(rig, "SELECT count(*) FROM evaluations") > evaluations_at_end
        },
    )
    .await;
    let resumed_after = ended.elapsed();
    load.until_accepting(ended, Duration::from_secs(60)).await;
    let sender = load.finish().await;
    let outage = sender.outage(disrupted.instant);
    rig.wait_settled(Duration::from_secs(90)).await;
    let counts = rig.check(&sender).await;
    assert!(
        paused.iter().all(|p| *p),
        "every process paused its claims (breaker open) during the spell: {paused:?} (serve, workers)"
    );
    assert!(not_ready, "/readyz said not ready while writes failed");
    eprintln!(
        "ha read-only spell: the primary read-only for {SPELL:?} under load; claims paused on every \
         process and /readyz not ready during it; claiming and evaluations resumed {resumed_after:.1?} \
         after it; non-202 window {:.1?} ({} attempts; {} before the spell); {counts}; {} ERROR \
         lines in the processes' logs",
        outage.window,
        outage.failed_attempts,
        outage.failed_before,
        rig.error_lines(),
    );
    // An outage is expected and retried: warnings once, never an ERROR line per connection.
    let errors = rig.error_lines();
    assert_eq!(
        errors, 0,
        "{errors} ERROR lines logged during a read-only spell"
    );
}

/// Runs `f` when dropped (a test that fails still resumes a frozen node).
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}
