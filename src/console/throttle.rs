//! Sign-in attempts per client address: a token bucket per address (governor, as the ingest
//! rate limits use), `console_signin_limit` attempts a minute in a burst of as many. Every
//! `POST /console/login` takes one before anything of it is read, a right token or a wrong one,
//! so guessing tokens from one address is slow. The address is the connection's peer: behind
//! a proxy every browser shares the proxy's, and `X-Forwarded-For` is not used, as a client
//! sets it to what it likes. Per process, kept in memory.

use std::{
    net::{IpAddr, Ipv6Addr, SocketAddr},
    num::NonZeroU32,
};

use axum::{
    extract::ConnectInfo,
    http::{Extensions, StatusCode, header},
    response::{IntoResponse, Response},
};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter, clock::Clock};

use super::errors::PageError;

/// Addresses kept before the idle ones (their bucket full again) are forgotten.
const FORGET_ABOVE: usize = 10_000;

/// The sign-in buckets, one per client address.
pub struct SignInLimit {
    per_minute: u32,
    buckets: DefaultKeyedRateLimiter<IpAddr>,
}

/// Too many sign-in attempts from one address: when to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooMany {
    pub per_minute: u32,
    /// Whole seconds, at least one.
    pub retry_after: u64,
}

impl SignInLimit {
    pub fn new(per_minute: u32) -> Self {
        let n = NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN);
        Self {
            per_minute: n.get(),
            buckets: RateLimiter::keyed(Quota::per_minute(n)),
        }
    }

    /// Takes one attempt from the request's address, or says when the next would fit.
    pub fn check(&self, extensions: &Extensions) -> Result<(), TooMany> {
        let address = extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |ConnectInfo(peer)| {
                peer.ip()
            });
        if self.buckets.len() > FORGET_ABOVE {
            self.buckets.retain_recent();
        }
        self.buckets.check_key(&address).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.buckets.clock().now());
            TooMany {
                per_minute: self.per_minute,
                retry_after: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
            }
            .at_least_a_second()
        })
    }
}

impl TooMany {
    fn at_least_a_second(self) -> Self {
        Self {
            retry_after: self.retry_after.max(1),
            ..self
        }
    }
}

impl IntoResponse for TooMany {
    fn into_response(self) -> Response {
        let page = PageError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "Slow down",
            format!(
                "Too many sign-in attempts from your address: {} a minute are allowed. Nothing was checked; try again in {} seconds.",
                self.per_minute, self.retry_after
            ),
        );
        let mut response = page.into_response();
        response.headers_mut().insert(
            header::RETRY_AFTER,
            header::HeaderValue::from(self.retry_after),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(ip: [u8; 4]) -> Extensions {
        let mut extensions = Extensions::new();
        extensions.insert(ConnectInfo(SocketAddr::from((ip, 1234))));
        extensions
    }

    #[test]
    fn an_address_gets_its_burst_then_waits_and_others_are_untouched() {
        let limit = SignInLimit::new(3);
        for _ in 0..3 {
            assert_eq!(limit.check(&from([10, 0, 0, 1])), Ok(()));
        }
        let refused = limit.check(&from([10, 0, 0, 1])).unwrap_err();
        assert_eq!(refused.per_minute, 3);
        assert!((1..=20).contains(&refused.retry_after), "{refused:?}");
        assert_eq!(limit.check(&from([10, 0, 0, 2])), Ok(()));
    }
}
