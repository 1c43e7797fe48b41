//! Coalescing of concurrent calls into batches. Callers hand a request to a few flusher tasks;
//! each takes everything queued (up to a limit) and answers it with one batch call. Under light
//! load a batch is one request and nobody waits for company; under load batches grow while the
//! previous ones are in flight, so round trips, statements and commits are shared. Ingest's
//! group commit and the evaluations' shared statements are both built on it.

use std::{future::Future, panic::AssertUnwindSafe, sync::Arc};

use futures::FutureExt;
use tokio::{
    sync::{Mutex, mpsc, oneshot},
    task::JoinSet,
};

use crate::telemetry::names;

struct Pending<Req, Resp> {
    request: Req,
    reply: oneshot::Sender<Resp>,
}

/// A handle to the flushers of one kind of call; cheap to clone. The flushers stop when the
/// last handle is dropped: their queue closes, and the tasks, which the handles own together,
/// are aborted (no caller waits on them then: a caller holds a handle while it waits).
pub struct Coalescer<Req, Resp> {
    // Declared first, dropped first: the queue closes before the flushers are aborted.
    requests: mpsc::Sender<Pending<Req, Resp>>,
    _flushers: Arc<JoinSet<()>>,
}

impl<Req, Resp> Clone for Coalescer<Req, Resp> {
    fn clone(&self) -> Self {
        Self {
            requests: self.requests.clone(),
            _flushers: Arc::clone(&self._flushers),
        }
    }
}

/// How a coalescer batches its requests.
#[derive(Debug)]
pub struct Batching<Req> {
    /// Names the call in logs and, when `measured`, in the batch-size histogram.
    pub name: &'static str,
    /// Batches in flight at once.
    pub flushers: usize,
    /// Most weight one batch takes (it takes at least one request, whatever its weight).
    pub max_weight: usize,
    /// What one request weighs: 1 to count requests, or its size.
    pub weigh: fn(&Req) -> usize,
    /// Requests that may wait for a flusher before callers wait to queue theirs.
    pub queue: usize,
    /// Record each batch's size in `quiesce_store_batch_size{call = name}`.
    pub measured: bool,
}

// By hand: a derive would ask `Req: Copy`, and only the weighing function's pointer is copied.
impl<Req> Clone for Batching<Req> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Req> Copy for Batching<Req> {}

impl<Req: Send + 'static, Resp: Send + 'static> Coalescer<Req, Resp> {
    /// Starts the flusher tasks, which answer batches with `flush`; it returns one response
    /// per request, in order. Must be called inside a Tokio runtime.
    pub fn start<F, Fut>(batching: Batching<Req>, flush: F) -> Self
    where
        F: Fn(Vec<Req>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<Resp>> + Send + 'static,
    {
        let (requests, receiver) = mpsc::channel(batching.queue.max(1));
        let receiver = Arc::new(Mutex::new(receiver));
        let flush = Arc::new(flush);
        let mut flushers = JoinSet::new();
        for _ in 0..batching.flushers.max(1) {
            flushers.spawn(run(batching, Arc::clone(&receiver), Arc::clone(&flush)));
        }
        Self {
            requests,
            _flushers: Arc::new(flushers),
        }
    }

    /// Queues the request and waits for its batch's answer. `None` when no answer will come:
    /// the flushers stopped, or the batch call panicked.
    pub async fn call(&self, request: Req) -> Option<Resp> {
        let (reply, answer) = oneshot::channel();
        self.requests.send(Pending { request, reply }).await.ok()?;
        answer.await.ok()
    }
}

async fn run<Req, Resp, F, Fut>(
    batching: Batching<Req>,
    receiver: Arc<Mutex<mpsc::Receiver<Pending<Req, Resp>>>>,
    flush: Arc<F>,
) where
    F: Fn(Vec<Req>) -> Fut,
    Fut: Future<Output = Vec<Resp>>,
{
    loop {
        let batch = {
            let mut receiver = receiver.lock().await;
            let Some(first) = receiver.recv().await else {
                return;
            };
            let mut weight = (batching.weigh)(&first.request);
            let mut batch = vec![first];
            while weight < batching.max_weight {
                match receiver.try_recv() {
                    Ok(pending) => {
                        weight += (batching.weigh)(&pending.request);
                        batch.push(pending);
                    }
                    Err(_) => break,
                }
            }
            // A caller that stopped waiting (its evaluation timed out and was settled) must not
            // have its request run after all. One whose wait ends during the call still can.
            batch.retain(|pending| !pending.reply.is_closed());
            if batch.is_empty() {
                continue;
            }
            batch
        };
        if batching.measured {
            metrics::histogram!(names::STORE_BATCH_SIZE, "call" => batching.name)
                .record(batch.len() as f64);
        }
        let (requests, replies): (Vec<Req>, Vec<oneshot::Sender<Resp>>) = batch
            .into_iter()
            .map(|pending| (pending.request, pending.reply))
            .unzip();
        // A panic drops the replies (their callers see `None`) and keeps the flusher alive.
        match AssertUnwindSafe(flush(requests)).catch_unwind().await {
            Ok(responses) => {
                debug_assert_eq!(responses.len(), replies.len(), "one response per request");
                for (reply, response) in replies.into_iter().zip(responses) {
                    let _ = reply.send(response);
                }
            }
            Err(_) => tracing::error!(call = batching.name, "a batch call panicked"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn counted_requests(flushers: usize, max_batch: usize) -> Batching<u32> {
        Batching {
            name: "test",
            flushers,
            max_weight: max_batch,
            weigh: |_| 1,
            queue: 256,
            measured: false,
        }
    }

    #[tokio::test]
    async fn concurrent_calls_share_batches_and_each_gets_its_own_answer() {
        let batches = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&batches);
        let doubler = Coalescer::start(counted_requests(1, 64), move |requests: Vec<u32>| {
            counted.fetch_add(1, Ordering::Relaxed);
            async move {
                // Long enough for the other callers to queue behind the first batch.
                tokio::task::yield_now().await;
                requests.into_iter().map(|n| n * 2).collect::<Vec<_>>()
            }
        });
        let calls = (0..200u32).map(|n| {
            let doubler = doubler.clone();
            tokio::spawn(async move { (n, doubler.call(n).await) })
        });
        for call in futures::future::join_all(calls).await {
            let (n, answer) = call.unwrap();
            assert_eq!(answer, Some(n * 2));
        }
        let batches = batches.load(Ordering::Relaxed);
        assert!(
            batches < 200,
            "200 concurrent calls ran as {batches} batches"
        );
    }

    #[tokio::test]
    async fn a_panicking_batch_answers_none_and_the_flusher_survives() {
        let coalescer = Coalescer::start(counted_requests(1, 8), |requests: Vec<u32>| async move {
            assert!(!requests.contains(&13), "unlucky");
            requests
        });
        assert_eq!(coalescer.call(13).await, None);
        assert_eq!(coalescer.call(7).await, Some(7));
    }

    #[tokio::test]
    async fn a_batch_stops_at_its_weight_and_takes_a_heavy_request_alone() {
        let (entered, release) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let batches: Arc<std::sync::Mutex<Vec<Vec<u32>>>> = Arc::default();
        let (seen, gate, gated) = (
            Arc::clone(&batches),
            Arc::clone(&entered),
            Arc::clone(&release),
        );
        let batching = Batching {
            weigh: |n: &u32| *n as usize,
            max_weight: 10,
            ..counted_requests(1, 0)
        };
        let coalescer = Coalescer::start(batching, move |requests: Vec<u32>| {
            seen.lock().unwrap().push(requests.clone());
            let (gate, gated) = (Arc::clone(&gate), Arc::clone(&gated));
            async move {
                if requests == [1] {
                    // Hold the first batch so that the rest queue up behind it.
                    gate.notify_one();
                    gated.notified().await;
                }
                requests
            }
        });
        let first = tokio::spawn({
            let c = coalescer.clone();
            async move { c.call(1).await }
        });
        entered.notified().await;
        let mut calls = Vec::new();
        for n in [4, 4, 4, 30, 2] {
            let c = coalescer.clone();
            calls.push(tokio::spawn(async move { c.call(n).await }));
            // Queue them in this order.
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        release.notify_one();
        assert_eq!(first.await.unwrap(), Some(1));
        for (call, n) in calls.into_iter().zip([4, 4, 4, 30, 2]) {
            assert_eq!(call.await.unwrap(), Some(n));
        }
        // 4 + 4 + 4 passes the weight of 10 at the third request; 30 alone outweighs it.
        assert_eq!(
            *batches.lock().unwrap(),
            vec![vec![1], vec![4, 4, 4], vec![30], vec![2]]
        );
    }
}
