//! Backtest: what a candidate rule set would have done over the evaluations of a window,
//! beside what the rules in force did, and how many of the differences moderators had
//! already judged. The CLI (`quiesce rules backtest`), `POST /v1/rules/backtest` and the
//! console's Backtest page all call [`run`].
//!
//! It reads Postgres only, in keyset pages of [`PAGE`] evaluations in entity order (each with
//! its snapshot and the action it applied) and the latest moderator decision of each page's
//! entities; it never writes a row, changes a status or sends a webhook. While the candidate
//! replays one page (on a blocking thread), the next is read. Memory holds two pages, the
//! evaluations of one entity and the report's counters and samples, whatever the window.
//!
//! - [`replay`]: one entity's evaluations under the candidate (the status its own actions
//!   would have left, moderators' decisions as they stood), and the tally of all of them;
//! - [`report`]: the report, its reversal-rate estimate and interval;
//! - [`text`]: the report as the CLI prints it.

mod compare;
mod replay;
mod report;
pub mod sweep;
mod text;

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::Semaphore;

pub use self::{
    compare::{LabelTally, RuleTally},
    replay::{AddedAction, EntityDiff, Tally},
    report::{Coverage, Estimate, LabelReport, Report, RuleReport, Transition},
    text::{render_sweep, render_text},
};
use crate::{
    rules::RuleSet,
    store::{LatestDecision, ReplayCursor, ReplayedEvaluation, Store, StoreError},
};

/// Evaluations read per page.
pub const PAGE: i64 = 2000;
/// Added actions sampled by default, and at most.
pub const DEFAULT_SAMPLE: usize = 10;
pub const MAX_SAMPLE: usize = 100;
/// The longest window (evaluation records are kept for `retention` anyway).
pub const MAX_WINDOW: Duration = Duration::from_secs(90 * 24 * 3600);

/// The semaphore that lets one backtest at a time run in a process (its API and console share
/// one): a backtest takes a core while it runs.
#[derive(Debug)]
pub struct BacktestSemaphore(Semaphore);

impl Default for BacktestSemaphore {
    fn default() -> Self {
        Self(Semaphore::new(1))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BacktestError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("a backtest is already running in this process; try again when it is done")]
    Busy,
    #[error("the replay failed: {0}")]
    Replay(String),
}

/// What to replay: the window back from now and how many added actions to sample.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub window: Duration,
    pub sample: usize,
}

/// Why a window was refused, as the field's error says it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("must be a duration such as 24h, 7d or 30days")]
    NotADuration,
    #[error("must be longer than nothing")]
    Empty,
    #[error("must be at most 90 days")]
    TooLong,
}

/// A window as a moderator writes it (`7d`, `24h`, `30days`): more than nothing, at most
/// [`MAX_WINDOW`].
pub fn parse_window(raw: &str) -> Result<Duration, WindowError> {
    let window = humantime::parse_duration(raw.trim()).map_err(|_| WindowError::NotADuration)?;
    if window.is_zero() {
        return Err(WindowError::Empty);
    }
    if window > MAX_WINDOW {
        return Err(WindowError::TooLong);
    }
    Ok(window)
}

/// Replays `candidate` over the evaluations finished in the last `options.window`, beside
/// `in_force` (the rules the report compares it with: each of their rules gets a line);
/// refused with [`BacktestError::Busy`] while another backtest holds `semaphore`.
pub async fn run(
    store: &Store,
    semaphore: &BacktestSemaphore,
    candidate: Arc<RuleSet>,
    in_force: &RuleSet,
    options: Options,
) -> Result<Report, BacktestError> {
    let mut reports = run_many(store, semaphore, vec![candidate], in_force, options).await?;
    Ok(reports.remove(0))
}

/// [`run`] for several candidates at once, in one read of the window: each page is replayed
/// under every candidate, so ten candidates cost ten replays and one read. The reports are in
/// the candidates' order.
pub async fn run_many(
    store: &Store,
    semaphore: &BacktestSemaphore,
    candidates: Vec<Arc<RuleSet>>,
    in_force: &RuleSet,
    options: Options,
) -> Result<Vec<Report>, BacktestError> {
    let _running = semaphore.0.try_acquire().map_err(|_| BacktestError::Busy)?;
    let started = Instant::now();
    let until = store.backtest().now().await?;
    let window = chrono::Duration::from_std(options.window.min(MAX_WINDOW))
        .expect("a window of at most 90 days");
    let since = until - window;
    let fetch = |cursor: ReplayCursor| {
        let store = store.clone();
        async move {
            store
                .backtest()
                .replay_page(since, until, &cursor, PAGE)
                .await
        }
    };
    let mut replayer = Replayer {
        candidates: candidates
            .iter()
            .map(|c| (Arc::clone(c), Tally::new(options.sample.min(MAX_SAMPLE))))
            .collect(),
        pending: Vec::new(),
        previous: HashMap::new(),
        current: HashMap::new(),
    };
    let (mut page, mut decisions) = fetch(ReplayCursor::start()).await?;
    let mut pages = 1;
    loop {
        let next = (page.len() as i64 == PAGE).then(|| {
            let last = page.last().expect("a full page");
            ReplayCursor {
                entity: last.entity.clone(),
                started_at: last.started_at,
                id: last.id,
            }
        });
        let work = tokio::task::spawn_blocking(move || {
            replayer.feed(page, decisions);
            replayer
        });
        let read = async {
            match next {
                Some(cursor) => fetch(cursor).await.map(Some),
                None => Ok(None),
            }
        };
        let (replayed, read) = tokio::join!(work, read);
        replayer = replayed.map_err(|e| BacktestError::Replay(e.to_string()))?;
        match read? {
            Some((next_page, next_decisions)) => {
                page = next_page;
                decisions = next_decisions;
                pages += 1;
            }
            None => break,
        }
    }
    let tallies = tokio::task::spawn_blocking(move || replayer.finish())
        .await
        .map_err(|e| BacktestError::Replay(e.to_string()))?;
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(tallies
        .into_iter()
        .map(|(candidate, tally)| {
            Report::new(
                &candidate,
                in_force,
                tally,
                (since, until),
                pages,
                elapsed_ms,
            )
        })
        .collect())
}

/// The replay between pages: the evaluations of the entity a page ended in, and the moderator
/// decisions of the last two pages (an entity's rows may start in the one before).
struct Replayer {
    /// Each candidate with its tally so far.
    candidates: Vec<(Arc<RuleSet>, Tally)>,
    pending: Vec<ReplayedEvaluation>,
    previous: HashMap<String, LatestDecision>,
    current: HashMap<String, LatestDecision>,
}

impl Replayer {
    fn feed(&mut self, page: Vec<ReplayedEvaluation>, decisions: HashMap<String, LatestDecision>) {
        self.previous = std::mem::replace(&mut self.current, decisions);
        for evaluation in page {
            if self
                .pending
                .first()
                .is_some_and(|p| p.entity != evaluation.entity)
            {
                self.flush();
            }
            self.pending.push(evaluation);
        }
    }

    fn flush(&mut self) {
        let evaluations = std::mem::take(&mut self.pending);
        let Some(first) = evaluations.first() else {
            return;
        };
        let decision = self
            .current
            .get(&first.entity)
            .or_else(|| self.previous.get(&first.entity))
            .copied();
        let Some(((last, last_tally), others)) = self.candidates.split_last_mut() else {
            return;
        };
        for (candidate, tally) in others {
            tally.entity(candidate, evaluations.clone(), decision);
        }
        last_tally.entity(last, evaluations, decision);
    }

    fn finish(mut self) -> Vec<(Arc<RuleSet>, Tally)> {
        self.flush();
        self.candidates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_read_as_people_write_them() {
        assert_eq!(parse_window("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_window(" 24h "), Ok(Duration::from_secs(86_400)));
        assert!(parse_window("0s").is_err());
        assert!(
            parse_window("91days")
                .unwrap_err()
                .to_string()
                .contains("90 days")
        );
        assert!(
            parse_window("last week")
                .unwrap_err()
                .to_string()
                .contains("duration")
        );
    }
}
