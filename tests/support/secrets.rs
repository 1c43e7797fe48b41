//! Every secret the test suite configures, in one list: the tests take them from here, and
//! `tests/secrets_in_logs.rs` checks that none of them appears in the logs of a full run.

#![allow(dead_code)]

/// Standard Webhooks inbound secrets: the old and the new one of a rotation.
pub const INBOUND_OLD: &str = "whsec_QVFBQUFBQUFBQUFBQUFBQUFBQUE=";
pub const INBOUND_NEW: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// A secret that signs nothing the server accepts.
pub const INBOUND_WRONG: &str = "whsec_QkJCQkJCQkJCQkJCQkJCQkJCQkI=";
/// GitHub's documented test secret.
pub const GITHUB: &str = "It's a Secret to Everybody";
/// Named sources' secrets.
pub const SHOP: &str = "whsec_c2hvcC1zZWNyZXQtZm9yLXRlc3RzLW9ubHk=";
pub const FORUM: &str = "whsec_Zm9ydW0tc2VjcmV0LWZvci10ZXN0cy1vbmx5";
/// Signs outbound webhook deliveries.
pub const OUTBOUND: &str = "whsec_b3V0Ym91bmQtZGVsaXZlcnktc2VjcmV0";
/// API tokens.
pub const TOKEN_INGEST: &str = "qt-ingest-3f9c2a71d0";
pub const TOKEN_MODERATOR: &str = "qt-moderator-8b1e55c2a4";
pub const TOKEN_ADMIN: &str = "qt-admin-c07d9e13f6";
pub const TOKEN_INGEST_A: &str = "qt-ingest-a-61d2f08e";
pub const TOKEN_INGEST_B: &str = "qt-ingest-b-9a4c7731";
/// Signs the moderator console's session cookies.
pub const CONSOLE_SESSION_KEY: &str = "qc-session-key-5be1f0c9a27d4e8b93f6d10c";

pub const ALL: &[&str] = &[
    INBOUND_OLD,
    INBOUND_NEW,
    INBOUND_WRONG,
    GITHUB,
    SHOP,
    FORUM,
    OUTBOUND,
    TOKEN_INGEST,
    TOKEN_MODERATOR,
    TOKEN_ADMIN,
    TOKEN_INGEST_A,
    TOKEN_INGEST_B,
    CONSOLE_SESSION_KEY,
];
