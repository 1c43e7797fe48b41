//! Credentials as values that parse once: API tokens with their roles, the set of tokens a
//! process accepts, and Standard Webhooks secrets. A leaf: settings, the HTTP layer, the
//! console and the webhook dispatcher all read them from here, and nothing here knows about
//! any of them.
//!
//! Tokens are configured as `role:<sha256 hex of the token>`, so the tokens themselves are
//! never stored; a presented bearer token is hashed and compared in constant time.

use std::fmt;

use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};

/// What a token may do: `ingest` may send events; `moderator` may read and reverse or
/// override; `admin` may do everything (dead letters, rules reload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Ingest,
    Moderator,
    Admin,
}

impl Role {
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "ingest" => Some(Role::Ingest),
            "moderator" => Some(Role::Moderator),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Ingest => "ingest",
            Role::Moderator => "moderator",
            Role::Admin => "admin",
        }
    }

    /// Whether a token of this role may do what `required` may.
    pub fn allows(self, required: Role) -> bool {
        self == Role::Admin || self == required
    }
}

/// A configured API token: its role and the SHA-256 of the token.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken {
    pub role: Role,
    hash: [u8; 32],
}

impl fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiToken({}, {})", self.role.as_str(), self.label())
    }
}

/// Why an API token spec is refused; never echoes the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenSpecError {
    #[error("expected role:<sha256 hex of the token>")]
    Shape,
    #[error("the role must be ingest, moderator or admin")]
    Role,
    #[error("the hash must be 64 hex digits (sha256 of the token)")]
    Hash,
}

impl ApiToken {
    /// `role:<64 hex digits>`, the SHA-256 of the token. Errors never echo the spec.
    pub fn parse(spec: &str) -> Result<Self, TokenSpecError> {
        let (role, hex) = spec.split_once(':').ok_or(TokenSpecError::Shape)?;
        let role = Role::parse(role).ok_or(TokenSpecError::Role)?;
        let hash: [u8; 32] = decode_hex(hex)
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or(TokenSpecError::Hash)?;
        Ok(Self { role, hash })
    }

    /// The configured form of a token: what an operator puts in QUIESCE_API_TOKENS.
    pub fn spec_for(role: Role, token: &str) -> String {
        let hash: String = Sha256::digest(token.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{}:{hash}", role.as_str())
    }

    /// This token's configured form, `role:<sha256 hex>`.
    pub fn spec(&self) -> String {
        let hash: String = self.hash.iter().map(|b| format!("{b:02x}")).collect();
        format!("{}:{hash}", self.role.as_str())
    }

    /// `token:<first 8 hex digits of the token's sha256>`: names a client (rate limits,
    /// metrics) without revealing anything usable.
    pub fn label(&self) -> String {
        let prefix: String = self.hash[..4].iter().map(|b| format!("{b:02x}")).collect();
        format!("token:{prefix}")
    }

    /// Whether `presented` is this token. Constant time: every byte of the hash is looked at,
    /// whatever differs.
    pub fn matches(&self, presented: &str) -> bool {
        let presented: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        self.hash
            .iter()
            .zip(presented)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// A Standard Webhooks signing secret: `whsec_` followed by the base64 of the key. Its debug
/// output never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(Vec<u8>);

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret([REDACTED])")
    }
}

/// Why a webhook secret is refused; never echoes the secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WebhookSecretError {
    #[error("expected whsec_ followed by base64")]
    NotBase64,
    #[error("the key must be at least 16 bytes")]
    TooShort,
}

impl WebhookSecret {
    /// Errors never echo the secret.
    pub fn parse(raw: &str) -> Result<Self, WebhookSecretError> {
        let encoded = raw.strip_prefix("whsec_").unwrap_or(raw);
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| WebhookSecretError::NotBase64)?;
        if key.len() < 16 {
            return Err(WebhookSecretError::TooShort);
        }
        Ok(Self(key))
    }

    /// The secret as it is configured, `whsec_<base64>` (it is the secret: handle with care).
    pub fn expose(&self) -> String {
        format!("whsec_{}", STANDARD.encode(&self.0))
    }

    /// A fresh HMAC-SHA256 keyed with this secret.
    pub fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length")
    }

    /// `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = self.mac();
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

/// Bytes of an even-length hex string.
pub fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A connection URL (Postgres, Redis) that may hold a password. Shown and debug-printed with
/// only its password redacted: the address, user and database stay visible, so a user can check
/// which server they are on.
#[derive(Clone)]
pub struct ServiceUrl(SecretString);

impl ServiceUrl {
    /// The URL as messages and `quiesce config` show it.
    pub fn shown(&self) -> String {
        redact_passwords(self.0.expose_secret())
    }
}

impl ExposeSecret<str> for ServiceUrl {
    fn expose_secret(&self) -> &str {
        self.0.expose_secret()
    }
}

impl From<String> for ServiceUrl {
    fn from(url: String) -> Self {
        Self(SecretString::from(url))
    }
}

impl From<&str> for ServiceUrl {
    fn from(url: &str) -> Self {
        Self(SecretString::from(url))
    }
}

impl fmt::Debug for ServiceUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServiceUrl({})", self.shown())
    }
}

/// The text with the password of every URL in it replaced by `[REDACTED]`, and the value of
/// every password parameter (`?password=`, `&pass=`, libpq's `password=`) too, for any message
/// that may show an address. The user name and the address stay, so a reader can tell which
/// server and database is meant: `postgres://app:pw@db/x` becomes `postgres://app:[REDACTED]@db/x`.
/// A bare `user:pw@host/path` (no scheme) is redacted too. The password runs from the first `:`
/// of the userinfo to its last `@` before a space or quote, so a password holding an unencoded
/// `/`, `?`, `#` or `@` is hidden whole.
pub fn redact_passwords(text: &str) -> String {
    redact_password_parameters(&redact_authorities(text))
}

fn redact_authorities(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    // The first authority may lack a scheme when the whole text is one address.
    let mut at_start = !text.contains("://");
    loop {
        let start = if at_start {
            at_start = false;
            0
        } else {
            match rest.find("://") {
                Some(i) => i + 3,
                None => break,
            }
        };
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest
            .find(|c: char| matches!(c, '"' | '\'' | '>' | '`') || c.is_whitespace())
            .unwrap_or(rest.len());
        if let Some(at) = rest[..end].rfind('@')
            && let Some(colon) = rest[..at].find(':')
        {
            out.push_str(&rest[..=colon]);
            out.push_str("[REDACTED]");
            rest = &rest[at..];
        }
    }
    out.push_str(rest);
    out
}

/// Parameters whose value is a password in the URLs and connection strings of Postgres
/// (`password`, `sslpassword`) and Redis (`pass`, `password`).
const PASSWORD_PARAMETERS: [&str; 4] = ["password=", "sslpassword=", "pass=", "passwd="];

fn redact_password_parameters(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < text.len() {
        let starts_parameter = i == 0
            || matches!(text.as_bytes()[i - 1], b'?' | b'&' | b';')
            || text.as_bytes()[i - 1].is_ascii_whitespace();
        let name = PASSWORD_PARAMETERS
            .iter()
            .find(|name| starts_parameter && lower[i..].starts_with(*name));
        match name {
            Some(name) => {
                let value = i + name.len();
                let end = text[value..]
                    .find(|c: char| matches!(c, '&' | '"' | '\'' | '#') || c.is_whitespace())
                    .map_or(text.len(), |n| value + n);
                out.push_str(&text[copied..value]);
                out.push_str("[REDACTED]");
                copied = end;
                i = end;
            }
            None => i += text[i..].chars().next().map_or(1, char::len_utf8),
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// The configured tokens; with `enforce` off (`--insecure-dev`) every request passes.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    tokens: Vec<ApiToken>,
    enforce: bool,
}

impl Auth {
    pub fn new(tokens: Vec<ApiToken>, enforce: bool) -> Self {
        Self { tokens, enforce }
    }

    /// The role of a bearer token, if it is one of ours.
    #[cfg(test)]
    pub(crate) fn role_of(&self, token: &str) -> Option<Role> {
        self.token_of(token).map(|t| t.role)
    }

    fn token_of(&self, token: &str) -> Option<&ApiToken> {
        self.tokens.iter().find(|t| t.matches(token))
    }

    /// Whether tokens are required: false only with `--insecure-dev` and none configured.
    pub fn enforced(&self) -> bool {
        self.enforce
    }

    /// The configured token `presented` is, if it is one (compared by hash, in constant time
    /// per token); what the console's sign-in checks.
    pub fn identify(&self, presented: &str) -> Option<&ApiToken> {
        self.token_of(presented.trim())
    }

    /// Whether a token of this role and label (`token:<8 hex digits>`) is still configured: a
    /// console session signed in with a token that was since removed ends with it.
    pub fn still_configured(&self, role: Role, label: &str) -> bool {
        !self.enforce
            || self
                .tokens
                .iter()
                .any(|t| t.role == role && t.label() == label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_password_wherever_they_appear() {
        assert_eq!(
            redact_passwords("postgres://app:PW@db:5432/x"),
            "postgres://app:[REDACTED]@db:5432/x"
        );
        assert_eq!(
            redact_passwords("error for url (htps://u:PW@h/x): refused"),
            "error for url (htps://u:[REDACTED]@h/x): refused"
        );
        assert_eq!(redact_passwords("app:PW@db/x"), "app:[REDACTED]@db/x");
        // Unencoded /, ? and # in a password: everything up to the last @ goes.
        assert_eq!(
            redact_passwords("postgres://app:pa/ss@db/x"),
            "postgres://app:[REDACTED]@db/x"
        );
        assert_eq!(
            redact_passwords("cannot reach postgres://app:ab#c?d@db:5432/x (QUIESCE_DATABASE_URL)"),
            "cannot reach postgres://app:[REDACTED]@db:5432/x (QUIESCE_DATABASE_URL)"
        );
        // Passwords as parameters: URL query, libpq key-value string, Redis.
        assert_eq!(
            redact_passwords("postgres://app@db/x?sslmode=require&password=PW&x=1"),
            "postgres://app@db/x?sslmode=require&password=[REDACTED]&x=1"
        );
        assert_eq!(
            redact_passwords("host=db user=app Password=PW dbname=x"),
            "host=db user=app Password=[REDACTED] dbname=x"
        );
        assert_eq!(
            redact_passwords("redis+unix:///run/redis.sock?pass=PW"),
            "redis+unix:///run/redis.sock?pass=[REDACTED]"
        );
        // Not a parameter: left alone.
        assert_eq!(redact_passwords("bypass=1 compass=2"), "bypass=1 compass=2");
        assert_eq!(
            redact_passwords("redis://127.0.0.1:6379 and redis://:PW@h"),
            "redis://127.0.0.1:6379 and redis://:[REDACTED]@h"
        );
        assert_eq!(redact_passwords("localhost/quiesce"), "localhost/quiesce");
        // A user name alone is part of the address, not a secret.
        assert_eq!(redact_passwords("a@b.c/x"), "a@b.c/x");
        assert_eq!(
            redact_passwords("postgres://postgres@127.0.0.1:5432/quiesce"),
            "postgres://postgres@127.0.0.1:5432/quiesce"
        );
        assert_eq!(
            redact_passwords("postgres://app:p@ss@db/x"),
            "postgres://app:[REDACTED]@db/x"
        );
    }

    #[test]
    fn tokens_are_matched_by_hash_and_parsed_from_their_spec() {
        let ingest = ApiToken::parse(&ApiToken::spec_for(Role::Ingest, "in-token")).unwrap();
        assert_eq!(ingest.role, Role::Ingest);
        assert!(ingest.matches("in-token"));
        assert!(!ingest.matches("in-token "));
        assert_eq!(ingest.spec(), ApiToken::spec_for(Role::Ingest, "in-token"));
        assert!(ApiToken::parse("root:abcd").is_err());
        assert!(ApiToken::parse("admin:abcd").is_err());
        assert!(!format!("{ingest:?}").contains(&ingest.spec()[7..]));
    }

    #[test]
    fn signatures_follow_the_standard_webhooks_test_vector() {
        // The example from the Standard Webhooks specification.
        let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert!(WebhookSecret::parse("not base64!").is_err());
        assert_eq!(secret.expose(), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        assert!(!format!("{secret:?}").contains("MfKQ"));
    }
}
