//! Events per second per sender: one token bucket per named source and one per API client, so
//! one noisy sender cannot starve the others. Limits are per process.

use std::{collections::HashMap, num::NonZeroU32, time::Duration};

use governor::{
    DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter, clock::Clock,
};

use crate::{
    settings::{Http, Source},
    telemetry::names,
};

/// A sender over its rate: how long until its events would fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{sender} sends more events than its limit; retry after {retry_after} s")]
pub struct RateLimited {
    /// The sender, as its metric labels it (`source:<name>` or the client).
    pub sender: String,
    /// Whole seconds, at least one.
    pub retry_after: u64,
}

/// Whose budget a request spends.
#[derive(Debug, Clone, Copy)]
pub enum RateKey<'a> {
    /// A named source (`/v1/sources/{name}/events`), with its own configured rate.
    Source(&'a str),
    /// A client of `/v1/events`: its token's id, or `default` without tokens.
    Client(&'a str),
}

impl RateKey<'_> {
    fn label(&self) -> String {
        match self {
            RateKey::Source(name) => format!("source:{name}"),
            RateKey::Client(client) => (*client).to_owned(),
        }
    }
}

/// Token buckets counted in events: one per named source, one per client.
pub struct RateLimits {
    sources: HashMap<String, DefaultDirectRateLimiter>,
    clients: DefaultKeyedRateLimiter<String>,
}

fn quota(rate: u32, burst: u32) -> Quota {
    // Both are validated to be positive at load.
    let rate = NonZeroU32::new(rate).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(burst).unwrap_or(rate);
    Quota::per_second(rate).allow_burst(burst)
}

impl RateLimits {
    pub fn new(http: &Http, sources: &[Source]) -> Self {
        let sources = sources
            .iter()
            .map(|source| {
                let rate = source.rate_limit.unwrap_or(http.rate_limit);
                let burst = source.rate_burst.unwrap_or(http.rate_burst);
                (source.name.clone(), RateLimiter::direct(quota(rate, burst)))
            })
            .collect();
        Self {
            sources,
            clients: RateLimiter::keyed(quota(http.rate_limit, http.rate_burst)),
        }
    }

    /// Takes `events` from the key's bucket, or says how long until they would fit.
    pub fn check(&self, key: RateKey<'_>, events: usize) -> Result<(), RateLimited> {
        let n = NonZeroU32::new(u32::try_from(events.max(1)).unwrap_or(u32::MAX))
            .unwrap_or(NonZeroU32::MIN);
        let wait = match key {
            RateKey::Source(name) => match self.sources.get(name) {
                Some(limiter) => match limiter.check_n(n) {
                    Ok(Ok(())) => None,
                    Ok(Err(not_until)) => Some(not_until.wait_time_from(limiter.clock().now())),
                    Err(_) => Some(Duration::from_secs(1)),
                },
                None => None,
            },
            RateKey::Client(client) => match self.clients.check_key_n(&client.to_owned(), n) {
                Ok(Ok(())) => None,
                Ok(Err(not_until)) => Some(not_until.wait_time_from(self.clients.clock().now())),
                Err(_) => Some(Duration::from_secs(1)),
            },
        };
        match wait {
            None => Ok(()),
            Some(wait) => {
                metrics::counter!(names::RATE_LIMITED, "source" => key.label()).increment(1);
                // Whole seconds, rounded up: a client that waits that long gets through.
                let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                Err(RateLimited {
                    sender: key.label(),
                    retry_after: seconds.max(1),
                })
            }
        }
    }
}
