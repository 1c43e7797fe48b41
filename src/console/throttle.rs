//! Sign-in attempts per client address: a token bucket per address (governor, as the ingest
//! rate limits use), `console_signin_limit` attempts a minute in a burst of as many. Every
//! `POST /console/login` takes one before anything of it is read, a right token or a wrong one,
//! so guessing tokens from one address is slow. The address is the connection's peer, unless
//! that is one of `console_trusted_proxies`: then it is the last `X-Forwarded-For` entry that
//! is not a trusted proxy, the one the outermost trusted proxy saw (a client sets the entries
//! before it to what it likes, so they are never used). Per process, kept in memory.

use std::{
    net::{IpAddr, Ipv6Addr, SocketAddr},
    num::NonZeroU32,
};

use axum::{
    extract::ConnectInfo,
    http::{Extensions, HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter, clock::Clock};

use super::errors::PageError;
use crate::settings::TrustedProxies;

/// Addresses kept before the idle ones (their bucket full again) are forgotten.
const FORGET_ABOVE: usize = 10_000;

/// The sign-in buckets, one per client address.
pub struct SignInLimit {
    per_minute: u32,
    trusted: TrustedProxies,
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
    pub fn new(per_minute: u32, trusted: TrustedProxies) -> Self {
        let n = NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN);
        Self {
            per_minute: n.get(),
            trusted,
            buckets: RateLimiter::keyed(Quota::per_minute(n)),
        }
    }

    /// Takes one attempt from the request's client address, or says when the next would fit.
    pub fn check(&self, headers: &HeaderMap, extensions: &Extensions) -> Result<(), TooMany> {
        let peer = extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |ConnectInfo(peer)| {
                peer.ip()
            });
        let address = client_address(peer, headers, &self.trusted);
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

/// The client a request is from: the peer, or, when the peer is a trusted proxy, the last
/// `X-Forwarded-For` entry that is not (each trusted proxy appends the address it was
/// connected from). An entry that is not an address stops the walk at the last trusted hop,
/// which a client cannot choose.
fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &TrustedProxies) -> IpAddr {
    let mut client = peer.to_canonical();
    if !trusted.contains(client) {
        return client;
    }
    let hops = headers
        .get_all("x-forwarded-for")
        .iter()
        .flat_map(|value| value.to_str().unwrap_or("").split(','));
    for hop in hops.rev() {
        let Some(address) = hop_address(hop.trim()) else {
            break;
        };
        client = address.to_canonical();
        if !trusted.contains(client) {
            break;
        }
    }
    client
}

/// An `X-Forwarded-For` entry's address: `a.b.c.d`, `v6`, or either with a port.
fn hop_address(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()))
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

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append("x-forwarded-for", value.parse().unwrap());
        }
        headers
    }

    fn trusted(networks: &str) -> TrustedProxies {
        networks.parse().unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_address_gets_its_burst_then_waits_and_others_are_untouched() {
        let limit = SignInLimit::new(3, TrustedProxies::default());
        let none = HeaderMap::new();
        for _ in 0..3 {
            assert_eq!(limit.check(&none, &from([10, 0, 0, 1])), Ok(()));
        }
        let refused = limit.check(&none, &from([10, 0, 0, 1])).unwrap_err();
        assert_eq!(refused.per_minute, 3);
        assert!((1..=20).contains(&refused.retry_after), "{refused:?}");
        assert_eq!(limit.check(&none, &from([10, 0, 0, 2])), Ok(()));
        // Without trusted proxies X-Forwarded-For changes nothing.
        let spoofed = forwarded(&["203.0.113.9"]);
        assert!(limit.check(&spoofed, &from([10, 0, 0, 1])).is_err());
    }

    #[test]
    fn the_client_is_the_last_forwarded_entry_that_is_not_a_trusted_proxy() {
        let proxies = trusted("10.0.0.0/8,fd00::/8");
        let peer = ip("10.0.0.2");
        // One proxy: what it appended.
        let one = forwarded(&["203.0.113.5"]);
        assert_eq!(client_address(peer, &one, &proxies), ip("203.0.113.5"));
        // A client's own entries come first and are passed over.
        let spoofed = forwarded(&["198.51.100.1, 192.0.2.1", "203.0.113.5"]);
        assert_eq!(client_address(peer, &spoofed, &proxies), ip("203.0.113.5"));
        // Two trusted proxies in a row, one with a port, and a v6 hop.
        let chain = forwarded(&["203.0.113.5, 10.1.1.1:4711, fd00::7"]);
        assert_eq!(client_address(peer, &chain, &proxies), ip("203.0.113.5"));
        let v6 = forwarded(&["[2001:db8::5]:443"]);
        assert_eq!(client_address(peer, &v6, &proxies), ip("2001:db8::5"));
        // A peer that is not trusted is the client, whatever it says.
        assert_eq!(
            client_address(ip("192.0.2.50"), &one, &proxies),
            ip("192.0.2.50")
        );
        // No header, only proxies, or garbage: the nearest trusted hop, not a client's word.
        assert_eq!(client_address(peer, &HeaderMap::new(), &proxies), peer);
        let inside = forwarded(&["10.9.9.9"]);
        assert_eq!(client_address(peer, &inside, &proxies), ip("10.9.9.9"));
        let garbage = forwarded(&["203.0.113.5, unknown"]);
        assert_eq!(client_address(peer, &garbage, &proxies), peer);
        // A dual-stack socket's mapped IPv4 peer is the IPv4 proxy.
        assert_eq!(
            client_address(ip("::ffff:10.0.0.2"), &one, &proxies),
            ip("203.0.113.5")
        );
    }
}
