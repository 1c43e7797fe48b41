//! Coalescing of concurrent calls into batches. Callers hand a request to a few flusher tasks;
//! each takes everything queued (up to a limit) and answers it with one batch call. Under light
//! load a batch is one request and nobody waits for company; under load batches grow while the
//! previous ones are in flight, so round trips, statements and commits are shared.

use std::{future::Future, panic::AssertUnwindSafe, sync::Arc};

use futures::FutureExt;
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::telemetry::names;

struct Pending<Req, Resp> {
    request: Req,
    reply: oneshot::Sender<Resp>,
}

/// A handle to the flushers of one kind of call; cheap to clone. The flushers stop when the
/// last handle is dropped.
pub struct Coalescer<Req, Resp> {
    requests: mpsc::Sender<Pending<Req, Resp>>,
}

impl<Req, Resp> Clone for Coalescer<Req, Resp> {
    fn clone(&self) -> Self {
        Self {
            requests: self.requests.clone(),
        }
    }
}

impl<Req: Send + 'static, Resp: Send + 'static> Coalescer<Req, Resp> {
    /// Starts `flushers` tasks that answer batches of at most `max_batch` requests with
    /// `flush`, which returns one response per request, in order. `name` labels the batch-size
    /// histogram. Must be called inside a Tokio runtime.
    pub fn start<F, Fut>(name: &'static str, flushers: usize, max_batch: usize, flush: F) -> Self
    where
        F: Fn(Vec<Req>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<Resp>> + Send + 'static,
    {
        let max_batch = max_batch.max(1);
        let (requests, receiver) = mpsc::channel(max_batch * flushers.max(1) * 2);
        let receiver = Arc::new(Mutex::new(receiver));
        let flush = Arc::new(flush);
        for _ in 0..flushers.max(1) {
            tokio::spawn(run(
                name,
                Arc::clone(&receiver),
                Arc::clone(&flush),
                max_batch,
            ));
        }
        Self { requests }
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
    name: &'static str,
    receiver: Arc<Mutex<mpsc::Receiver<Pending<Req, Resp>>>>,
    flush: Arc<F>,
    max_batch: usize,
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
            let mut batch = vec![first];
            while batch.len() < max_batch {
                match receiver.try_recv() {
                    Ok(pending) => batch.push(pending),
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
        metrics::histogram!(names::STORE_BATCH_SIZE, "call" => name).record(batch.len() as f64);
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
            Err(_) => tracing::error!(call = name, "a batch call panicked"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn concurrent_calls_share_batches_and_each_gets_its_own_answer() {
        let batches = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&batches);
        let doubler = Coalescer::start("test", 1, 64, move |requests: Vec<u32>| {
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
        let coalescer = Coalescer::start("test", 1, 8, |requests: Vec<u32>| async move {
            assert!(!requests.contains(&13), "unlucky");
            requests
        });
        assert_eq!(coalescer.call(13).await, None);
        assert_eq!(coalescer.call(7).await, Some(7));
    }
}
