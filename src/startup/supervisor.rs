//! The supervisor: every long-lived task of `serve` and `worker` (the listeners, the worker
//! loop, maintenance, the followers, the dispatchers, the signal handlers) runs under it, by
//! name. A task that ends while no shutdown was asked (it returned, failed or panicked) ends
//! the process: the supervisor logs which one and why, cancels the others, waits for them
//! with a deadline and returns the error, so `main` exits non-zero. On shutdown it waits for
//! each task with the same deadline and names any that did not stop.

use std::{any::Any, collections::HashMap, future::Future, time::Duration};

use tokio::task::{Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

/// What a supervised task ends with: `()` for a loop that only stops on shutdown, or a
/// `Result` whose error says why it gave up.
pub trait TaskEnd: Send + 'static {
    fn into_result(self) -> anyhow::Result<()>;
}

impl TaskEnd for () {
    fn into_result(self) -> anyhow::Result<()> {
        Ok(())
    }
}

impl TaskEnd for anyhow::Result<()> {
    fn into_result(self) -> anyhow::Result<()> {
        self
    }
}

/// A supervised task that ended unexpectedly (while no shutdown was asked) or failed while
/// stopping; `serve` and `worker` return it, and the process exits non-zero.
#[derive(Debug, thiserror::Error)]
#[error("the task `{task}` {how}")]
pub struct TaskDied {
    /// The task's name, as the supervisor was given it.
    pub task: &'static str,
    pub how: HowItEnded,
}

impl TaskDied {
    /// The task's end, logged as an error with `what` happened to the process.
    fn logged(task: &'static str, how: HowItEnded, what: &str) -> Self {
        let died = Self { task, how };
        tracing::error!(task, error = %died, "{what}");
        died
    }
}

/// How a supervised task ended.
#[derive(Debug, thiserror::Error)]
pub enum HowItEnded {
    #[error("returned while no shutdown was asked")]
    Returned,
    #[error("failed: {0:#}")]
    Failed(anyhow::Error),
    #[error("panicked: {0}")]
    Panicked(String),
    #[error("was aborted")]
    Aborted,
}

/// The named tasks of one process and the token that stops them.
pub struct Supervisor {
    shutdown: CancellationToken,
    /// How long the tasks have, once the token is cancelled, before they are aborted.
    deadline: Duration,
    tasks: JoinSet<anyhow::Result<()>>,
    names: HashMap<Id, &'static str>,
}

impl Supervisor {
    pub fn new(shutdown: CancellationToken, deadline: Duration) -> Self {
        Self {
            shutdown,
            deadline,
            tasks: JoinSet::new(),
            names: HashMap::new(),
        }
    }

    /// The token the tasks stop on (SIGTERM, ctrl-c, or a task that died).
    pub fn shutdown(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Runs `task` under `name` until [`Supervisor::run`] ends.
    pub fn spawn<T: TaskEnd>(
        &mut self,
        name: &'static str,
        task: impl Future<Output = T> + Send + 'static,
    ) {
        let handle = self.tasks.spawn(async move { task.await.into_result() });
        self.names.insert(handle.id(), name);
    }

    /// Waits until shutdown is asked or a task ends; then cancels the token, waits for every
    /// task until the deadline and aborts those still running. `Ok` when shutdown was asked
    /// and every task stopped without failing; otherwise the first task that died.
    pub async fn run(mut self) -> Result<(), TaskDied> {
        let mut died = self.until_shutdown().await;
        self.shutdown.cancel();
        let stopping = tokio::time::Instant::now() + self.deadline;
        loop {
            match tokio::time::timeout_at(stopping, self.tasks.join_next_with_id()).await {
                Ok(None) => break,
                Ok(Some(ended)) => {
                    if let Err(failed) = self.stopped(ended) {
                        died.get_or_insert(failed);
                    }
                }
                Err(_) => {
                    if let Some(failed) = self.abort_the_rest().await {
                        died.get_or_insert(failed);
                    }
                    break;
                }
            }
        }
        died.map_or(Ok(()), Err)
    }

    /// The first task to end before the token is cancelled, if any does.
    async fn until_shutdown(&mut self) -> Option<TaskDied> {
        let ended = tokio::select! {
            biased;
            () = self.shutdown.cancelled() => return None,
            Some(ended) = self.tasks.join_next_with_id() => ended,
        };
        // One that ends as it asks for shutdown (the signal handler) ended as it should.
        if self.shutdown.is_cancelled() {
            return self.stopped(ended).err();
        }
        let (task, how) = self.ended(ended);
        let how = how.err().unwrap_or(HowItEnded::Returned);
        Some(TaskDied::logged(
            task,
            how,
            "a task ended unexpectedly; stopping the process",
        ))
    }

    /// Logs a task that ended after the token was cancelled; a failure or a panic is an error.
    fn stopped(
        &mut self,
        ended: Result<(Id, anyhow::Result<()>), JoinError>,
    ) -> Result<(), TaskDied> {
        let (task, how) = self.ended(ended);
        how.map_err(|how| TaskDied::logged(task, how, "a task failed while stopping"))?;
        tracing::debug!(task, "task stopped");
        Ok(())
    }

    /// The ended task's name, and how it ended unless it returned `Ok`.
    fn ended(
        &mut self,
        ended: Result<(Id, anyhow::Result<()>), JoinError>,
    ) -> (&'static str, Result<(), HowItEnded>) {
        let (id, how) = match ended {
            Ok((id, Ok(()))) => (id, Ok(())),
            Ok((id, Err(error))) => (id, Err(HowItEnded::Failed(error))),
            Err(error) => {
                let id = error.id();
                let how = if error.is_panic() {
                    HowItEnded::Panicked(panic_message(error.into_panic()))
                } else {
                    HowItEnded::Aborted
                };
                (id, Err(how))
            }
        };
        (self.names.remove(&id).unwrap_or("unnamed"), how)
    }

    /// Names the tasks that did not stop within the deadline, aborts them and waits for them;
    /// the first that failed or panicked meanwhile, if one did.
    async fn abort_the_rest(&mut self) -> Option<TaskDied> {
        let mut late: Vec<&str> = self.names.values().copied().collect();
        late.sort_unstable();
        tracing::warn!(
            tasks = ?late,
            deadline = %humantime::format_duration(self.deadline),
            "tasks still running at the shutdown deadline; aborting them"
        );
        self.tasks.abort_all();
        let mut died = None;
        while let Some(ended) = self.tasks.join_next_with_id().await {
            match ended {
                Err(error) if error.is_cancelled() => {
                    let task = self.names.remove(&error.id()).unwrap_or("unnamed");
                    tracing::warn!(task, "task aborted at the shutdown deadline");
                }
                ended => {
                    if let Err(failed) = self.stopped(ended) {
                        died.get_or_insert(failed);
                    }
                }
            }
        }
        died
    }
}

/// A panic's message, when it is a string (as `panic!` and `expect` make it).
fn panic_message(payload: Box<dyn Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(message) => (*message).to_owned(),
            Err(_) => "a panic without a message".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::{HowItEnded, Supervisor};

    const DEADLINE: Duration = Duration::from_secs(5);

    fn stumble() {
        panic!("lost its footing");
    }

    async fn until_cancelled(shutdown: CancellationToken) {
        shutdown.cancelled().await;
    }

    #[tokio::test]
    async fn a_task_that_panics_stops_the_others_and_is_named_with_its_message() {
        let mut supervisor = Supervisor::new(CancellationToken::new(), DEADLINE);
        let shutdown = supervisor.shutdown();
        supervisor.spawn("loop", until_cancelled(shutdown.clone()));
        supervisor.spawn("doomed", async { stumble() });
        let died = tokio::time::timeout(DEADLINE * 2, supervisor.run())
            .await
            .expect("the supervisor ends")
            .expect_err("a task died");
        assert_eq!(died.task, "doomed");
        assert!(
            matches!(&died.how, HowItEnded::Panicked(message) if message == "lost its footing"),
            "{died}"
        );
        assert!(
            died.to_string()
                .contains("`doomed` panicked: lost its footing")
        );
        assert!(shutdown.is_cancelled(), "the others were told to stop");
    }

    #[tokio::test]
    async fn a_task_that_returns_or_fails_before_shutdown_died() {
        let mut supervisor = Supervisor::new(CancellationToken::new(), DEADLINE);
        supervisor.spawn("quitter", async {});
        let died = supervisor.run().await.expect_err("it returned");
        assert_eq!(died.task, "quitter");
        assert!(matches!(died.how, HowItEnded::Returned));

        let mut supervisor = Supervisor::new(CancellationToken::new(), DEADLINE);
        supervisor.spawn("failing", async {
            Err::<(), _>(anyhow::anyhow!("cannot listen"))
        });
        let died = supervisor.run().await.expect_err("it failed");
        assert_eq!(died.to_string(), "the task `failing` failed: cannot listen");
    }

    #[tokio::test]
    async fn a_shutdown_ends_with_ok_once_every_task_stopped() {
        let mut supervisor = Supervisor::new(CancellationToken::new(), DEADLINE);
        let shutdown = supervisor.shutdown();
        let (stopped_tx, stopped) = tokio::sync::oneshot::channel();
        let token = shutdown.clone();
        supervisor.spawn("loop", async move {
            token.cancelled().await;
            stopped_tx.send(()).expect("the test waits");
        });
        // The signal handler's way: cancel, then return.
        supervisor.spawn("signals", async move { shutdown.cancel() });
        tokio::time::timeout(DEADLINE * 2, supervisor.run())
            .await
            .expect("the supervisor ends")
            .expect("a clean shutdown");
        stopped.await.expect("the loop ran to its end");
    }

    #[tokio::test]
    async fn a_task_that_does_not_stop_is_aborted_at_the_deadline() {
        const DEADLINE: Duration = Duration::from_millis(100);
        let mut supervisor = Supervisor::new(CancellationToken::new(), DEADLINE);
        let shutdown = supervisor.shutdown();
        supervisor.spawn("stubborn", std::future::pending::<()>());
        shutdown.cancel();
        let started = tokio::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(10), supervisor.run())
            .await
            .expect("aborted at the deadline")
            .expect("late is not failed");
        assert!(started.elapsed() >= DEADLINE);
    }
}
