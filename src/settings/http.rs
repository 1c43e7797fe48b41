//! The HTTP API: where it listens and what one request or one sender may take.

use std::{net::SocketAddr, time::Duration};

use super::declare::{nonzero, section};
use crate::domain::AttributeLimits;

section! {
    /// The HTTP API: where it listens and what one request or one sender may take.
    pub struct Http("http", heading "HTTP API"), flags HttpFlags {
        /// HTTP listen address (`serve` only).
        listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 8080));
        /// Largest request body in bytes.
        #[value_name = "BYTES"]
        body_limit: usize = 1024 * 1024, check nonzero;
        /// Most events in one request.
        max_batch: usize = 1000, check nonzero;
        /// Most attributes one event (or one entity's context) may carry; more get 422.
        max_attributes: usize = 16, check nonzero;
        /// Longest string attribute value, in characters; longer get 422.
        #[value_name = "CHARS"]
        max_attribute_len: usize = 256, check nonzero;
        /// Events per second one source may send (a named source, or one ingest token); more
        /// get 429 with Retry-After.
        #[value_name = "EVENTS"]
        rate_limit: u32 = 10_000, check nonzero;
        /// Events a source may send at once above its rate; at least max_batch.
        #[value_name = "EVENTS"]
        rate_burst: u32 = 20_000, check nonzero;
        /// Longest a request may take, body upload included, before it is answered 408; longer
        /// than backend_timeout.
        request_timeout: Duration = Duration::from_secs(30), check nonzero;
        /// Ingest requests handled at once per process; more are answered 503 with Retry-After.
        /// A slot is taken once the sender is known (its token checked, before the body; for a
        /// named source, once the body's signature holds) and the declared size fits body_limit.
        max_concurrent_ingest: usize = 512, check nonzero;
        /// Longest wait for a request's line and headers, counted from when the connection
        /// waits for one (a new connection, or a kept-alive one after its last response, so
        /// also how long a connection may stay idle); past it the connection is closed.
        header_read_timeout: Duration = Duration::from_secs(10), check nonzero;
        /// Longest a response write may wait for the client to take bytes; past it the
        /// connection is closed, so a client that stopped reading frees its connection.
        write_timeout: Duration = Duration::from_secs(30), check nonzero;
        /// Open connections to the API at once per process; more wait in the listen backlog
        /// until one closes. serve raises its open-files soft limit to cover it (with the
        /// database pool and 256 more), or refuses to start when the hard limit is lower.
        max_connections: usize = 4096, check nonzero;
        /// Slowest body upload accepted, in bytes per second, after body_grace: a body that
        /// falls behind it is answered 408 at once, well before request_timeout.
        #[value_name = "BYTES"]
        body_min_rate: u32 = 4096, check nonzero;
        /// Time a body upload gets before body_min_rate applies (connection set-up, a slow
        /// start).
        body_grace: Duration = Duration::from_secs(5), check nonzero;
    }
}

impl Http {
    /// The bounds every attribute object is held to (an event's, an entity's context).
    pub fn attribute_limits(&self) -> AttributeLimits {
        AttributeLimits {
            max_attributes: self.max_attributes,
            max_len: self.max_attribute_len,
        }
    }
}
