//! The HA suite's load: a sender of about 1,000 events/s, in single-event and batched requests,
//! that retries 503s, connection errors and timeouts with the same ids as a webhook sender
//! would, and keeps every attempt: when it was sent, when and how it was answered. The ids
//! answered 202 are what Postgres must hold, once each.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rand::Rng;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Every 100 ms: one batch of this many events...
const BATCH: usize = 80;
/// ... and this many single-event requests: 1,000 events/s in all.
const SINGLES: usize = 20;
const TICK: Duration = Duration::from_millis(100);
/// Requests waiting for an answer or a retry at most; past it the sender waits (its queue grows,
/// as a real sender's would, instead of its retries flooding the server).
const IN_FLIGHT: usize = 256;
/// Pause before a retry (a 503's Retry-After is longer: this keeps the window's edges sharp).
const RETRY_DELAY: Duration = Duration::from_millis(200);
/// A request not accepted by then fails the test.
const GIVE_UP: Duration = Duration::from_secs(180);

/// How one attempt was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Accepted,
    /// 503 with Retry-After.
    Unavailable,
    /// No answer: refused, reset, or timed out.
    Unanswered(String),
    /// Any other status: never expected.
    Other(u16, String),
}

#[derive(Debug, Clone)]
pub struct Attempt {
    pub sent: Instant,
    pub answered: Instant,
    pub answer: Answer,
}

/// The non-202 answers around a disruption.
#[derive(Debug, Clone, Copy, Default)]
pub struct Outage {
    /// What a sender sees: from the sending of the first attempt not answered 202 (or the
    /// disruption, if that attempt was sent before it) to the last such answer, or to the
    /// first 202 after it if that is later (requests that hang until the new primary answers
    /// are no 202 either).
    pub window: Duration,
    /// The last non-202 answer, after the disruption.
    pub last_failure_after: Duration,
    /// The first 202 to a request sent after the first failure was answered, after the
    /// disruption: writes answer again.
    pub back_after: Duration,
    pub failed_attempts: usize,
    /// Attempts not answered 202 before the disruption (a steady state has none).
    pub failed_before: usize,
}

pub struct Sender {
    client: reqwest::Client,
    url: String,
    phase: String,
    pub entities: usize,
    accepted: Mutex<Vec<String>>,
    attempts: Mutex<Vec<Attempt>>,
    in_flight: Arc<Semaphore>,
}

impl Sender {
    /// A sender to the API at `base`, its event ids starting with `phase`, over `entities`
    /// entities.
    pub fn new(base: &str, phase: &str, entities: usize) -> Arc<Self> {
        Arc::new(Self {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
            url: format!("{base}/v1/events"),
            phase: phase.to_owned(),
            entities,
            accepted: Mutex::default(),
            attempts: Mutex::default(),
            in_flight: Arc::new(Semaphore::new(IN_FLIGHT)),
        })
    }

    /// Sends until `stop`, then until every request sent is accepted.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut deliveries = tokio::task::JoinSet::new();
        let mut tick = 0usize;
        while !stop.is_cancelled() {
            tokio::select! {
                _ = ticks.tick() => {}
                () = stop.cancelled() => break,
            }
            let mut requests = vec![self.events(tick, "b", BATCH)];
            requests.extend((0..SINGLES).map(|i| self.events(tick, &format!("s{i}"), 1)));
            for body in requests {
                let permit = Arc::clone(&self.in_flight).acquire_owned().await.unwrap();
                let sender = Arc::clone(&self);
                deliveries.spawn(async move {
                    sender.deliver(body).await;
                    drop(permit);
                });
            }
            tick += 1;
        }
        while let Some(done) = deliveries.join_next().await {
            done.expect("a delivery panicked");
        }
    }

    fn events(&self, tick: usize, request: &str, count: usize) -> (Vec<String>, Value) {
        let mut rng = rand::rng();
        let events: Vec<Value> = (0..count)
            .map(|i| {
                let signal = if rng.random_bool(0.35) {
                    "flag"
                } else {
                    "upvote"
                };
                json!({
                    "id": format!("{}-t{tick}-{request}-{i}", self.phase),
                    "entity": format!("post:{}", rng.random_range(0..self.entities)),
                    "type": signal,
                })
            })
            .collect();
        let ids = events
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_owned())
            .collect();
        let body = if count == 1 {
            events.into_iter().next().unwrap()
        } else {
            Value::Array(events)
        };
        (ids, body)
    }

    /// Sends `body` until it is answered 202, the same ids each time.
    async fn deliver(&self, (ids, body): (Vec<String>, Value)) {
        let first = Instant::now();
        loop {
            let sent = Instant::now();
            let answer = match self.client.post(&self.url).json(&body).send().await {
                Ok(response) if response.status() == 202 => Answer::Accepted,
                Ok(response)
                    if response.status() == 503
                        && response.headers().contains_key("retry-after") =>
                {
                    Answer::Unavailable
                }
                Ok(response) => {
                    let status = response.status().as_u16();
                    Answer::Other(status, response.text().await.unwrap_or_default())
                }
                Err(error) => Answer::Unanswered(error.to_string()),
            };
            let accepted = answer == Answer::Accepted;
            self.attempts.lock().unwrap().push(Attempt {
                sent,
                answered: Instant::now(),
                answer,
            });
            if accepted {
                self.accepted.lock().unwrap().extend(ids);
                return;
            }
            assert!(
                first.elapsed() < GIVE_UP,
                "a request was not accepted in {GIVE_UP:?}: {ids:?}"
            );
            tokio::time::sleep(RETRY_DELAY).await;
        }
    }

    /// One event of its own, sent until it is answered 202 and counted with the rest.
    pub async fn send_one(&self, id: &str, entity: &str, signal: &str) {
        let body = serde_json::json!({"id": id, "entity": entity, "type": signal});
        self.deliver((vec![id.to_owned()], body)).await;
    }

    /// The ids answered 202.
    pub fn accepted(&self) -> Vec<String> {
        self.accepted.lock().unwrap().clone()
    }

    pub fn attempts(&self) -> Vec<Attempt> {
        self.attempts.lock().unwrap().clone()
    }

    /// Whether a request sent at or after `since` was accepted at least `for_at_least` ago:
    /// writes answer again, for that long.
    pub fn accepting_since(&self, since: Instant, for_at_least: Duration) -> bool {
        self.attempts.lock().unwrap().iter().any(|a| {
            a.answer == Answer::Accepted && a.sent >= since && a.answered.elapsed() >= for_at_least
        })
    }

    /// The non-202 answers to attempts sent from `disrupted` on (or answered after it).
    pub fn outage(&self, disrupted: Instant) -> Outage {
        let attempts = self.attempts();
        let failed: Vec<&Attempt> = attempts
            .iter()
            .filter(|a| a.answer != Answer::Accepted && a.answered >= disrupted)
            .collect();
        let failed_before = attempts
            .iter()
            .filter(|a| a.answer != Answer::Accepted && a.answered < disrupted)
            .count();
        let Some(first_failure) = failed.iter().map(|a| a.sent).min() else {
            return Outage {
                failed_before,
                ..Outage::default()
            };
        };
        let last_failure = failed.iter().map(|a| a.answered).max().unwrap();
        let first_failure_answered = failed.iter().map(|a| a.answered).min().unwrap();
        let back = attempts
            .iter()
            .filter(|a| a.answer == Answer::Accepted && a.sent >= first_failure_answered)
            .map(|a| a.answered)
            .min()
            .unwrap_or(last_failure);
        Outage {
            window: last_failure
                .max(back)
                .saturating_duration_since(first_failure.max(disrupted)),
            last_failure_after: last_failure.saturating_duration_since(disrupted),
            back_after: back.saturating_duration_since(disrupted),
            failed_attempts: failed.len(),
            failed_before,
        }
    }

    /// Answers per half second for `seconds`, from 1 s before the first attempt after
    /// `disrupted` not answered 202 (or `disrupted`): `accepted/other` each, for the report line.
    pub fn timeline(&self, disrupted: Instant, seconds: u64) -> String {
        let attempts = self.attempts();
        let first_failure = attempts
            .iter()
            .filter(|a| a.answer != Answer::Accepted && a.answered >= disrupted)
            .map(|a| a.answered)
            .min()
            .unwrap_or(disrupted);
        let start = first_failure - Duration::from_secs(1);
        (0..seconds * 2)
            .map(|slot| {
                let from = start + Duration::from_millis(500 * slot);
                let to = from + Duration::from_millis(500);
                let mut counts = (0, 0);
                for a in attempts
                    .iter()
                    .filter(|a| a.answered >= from && a.answered < to)
                {
                    if a.answer == Answer::Accepted {
                        counts.0 += 1;
                    } else {
                        counts.1 += 1;
                    }
                }
                format!("{}/{}", counts.0, counts.1)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Answers that were neither 202, 503 nor a missing answer (status and body), and how many
    /// attempts had no answer.
    pub fn unexpected(&self) -> (Vec<(u16, String)>, usize) {
        let attempts = self.attempts();
        let others = attempts
            .iter()
            .filter_map(|a| match &a.answer {
                Answer::Other(status, body) => Some((*status, body.clone())),
                _ => None,
            })
            .collect();
        let missing = attempts
            .iter()
            .filter(|a| matches!(a.answer, Answer::Unanswered(_)))
            .count();
        (others, missing)
    }
}
