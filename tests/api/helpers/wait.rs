//! Waiting: for a condition, for the queue to drain and every event to be evaluated, for a
//! claim (and an entity hidden through one); a hook that holds an evaluation.

use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use quiesce::worker::BeforeApplyHook;

use super::TestApp;

/// Polls `condition` until it holds or `timeout` passes; panics with `what` on timeout.
pub async fn wait_for<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl TestApp {
    /// Every recorded event has been covered by an evaluation and nothing waits in Redis.
    pub async fn settled(&self) -> bool {
        self.queue_is_empty().await && self.count_unevaluated_events().await == 0
    }

    pub async fn wait_settled(&self, timeout: Duration) {
        wait_for(
            timeout,
            "every entity to be evaluated and the queue to drain",
            || self.settled(),
        )
        .await;
    }
}

/// Claims until the entity comes up (its window has to pass first).
pub async fn claim_next(worker: &quiesce::worker::Worker) -> quiesce::queue::Claim {
    let claimed = std::sync::Mutex::new(None);
    wait_for(
        Duration::from_secs(10),
        "a due entity to be claimed",
        || async {
            let mut claims = worker.claim_once(1).await.unwrap().claims;
            let mut claimed = claimed.lock().unwrap();
            *claimed = claims.pop();
            claimed.is_some()
        },
    )
    .await;
    claimed.into_inner().unwrap().unwrap()
}

/// Hides `entity` under the default rules: ten flags, evaluated at once by a worker of the
/// test's own (the app runs none: `TestOptions::idle`).
pub async fn hide(app: &TestApp, entity: &str) {
    let events: Vec<serde_json::Value> = (0..10)
        .map(|i| super::event(&format!("{entity}-{i}"), entity, "flag"))
        .collect();
    app.send(&serde_json::json!(events)).await;
    let worker = app.worker();
    worker.evaluate_claim(claim_next(&worker).await).await;
    assert_eq!(app.status_of(entity).await, quiesce::domain::Status::Hidden);
}

/// A hook that signals `entered` and then waits for `resume` (at most 20 s).
pub fn pausing_hook(
    entered: Arc<tokio::sync::Notify>,
    resume: Arc<tokio::sync::Notify>,
) -> BeforeApplyHook {
    Arc::new(move |_snapshot| {
        use futures::FutureExt;
        let (entered, resume) = (Arc::clone(&entered), Arc::clone(&resume));
        async move {
            entered.notify_one();
            let _ = tokio::time::timeout(Duration::from_secs(20), resume.notified()).await;
        }
        .boxed()
    })
}
