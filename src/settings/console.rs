//! The moderator console under `/console`: how its sessions are signed, how long they last,
//! when their cookie is marked Secure, and how often one address may try to sign in.

use std::time::Duration;

use figment::value::Value;
use secrecy::{ExposeSecret, SecretString};

use super::{
    declare::{nonzero, section},
    value::Setting,
};

section! {
    /// The moderator console under /console: its session cookie.
    pub struct Console("console", heading "Moderator console"), flags ConsoleFlags {
        /// Key that signs the console's session cookies (HMAC-SHA256), at least 32 characters;
        /// every process behind one address needs the same. Changing it signs everyone out.
        /// None: a random key per process, so sessions end when it restarts.
        console_session_key: Option<SecretString> = None, check long_enough;
        /// How long a console sign-in lasts (1 minute to 30 days).
        console_session_ttl: Duration = Duration::from_secs(8 * 3600), check session_length;
        /// When the session cookie is marked Secure. quiesce speaks plain HTTP, so only the
        /// proxy in front knows of TLS: auto marks it Secure when the request says it came over
        /// https (X-Forwarded-Proto: https or Forwarded: proto=https); always for a console
        /// behind TLS; never for plain-HTTP development.
        #[value_name = "WHEN"]
        console_secure_cookie: SecureCookie = SecureCookie::Auto;
        /// Sign-in attempts (POST /console/login) one client address may make per minute, in
        /// a burst of as many; more are answered 429 with Retry-After. Per process; the
        /// address is the connection's (behind a proxy, the proxy's), never X-Forwarded-For.
        #[value_name = "ATTEMPTS"]
        console_signin_limit: u32 = 10, check nonzero;
    }
}

/// Shortest session key, in characters (a random one has 43: base64 of 32 bytes).
pub const MIN_SESSION_KEY: usize = 32;

fn long_enough(key: &Option<SecretString>) -> Result<(), String> {
    match key {
        Some(key) if key.expose_secret().chars().count() < MIN_SESSION_KEY => Err(format!(
            "must be at least {MIN_SESSION_KEY} characters, e.g. openssl rand -base64 32"
        )),
        _ => Ok(()),
    }
}

fn session_length(ttl: &Duration) -> Result<(), String> {
    if (Duration::from_secs(60)..=Duration::from_secs(30 * 24 * 3600)).contains(ttl) {
        Ok(())
    } else {
        Err("must be from 1m to 30days".into())
    }
}

/// When the console's session cookie carries the `Secure` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecureCookie {
    /// When the request says it came over https (`X-Forwarded-Proto`, `Forwarded`).
    Auto,
    Always,
    Never,
}

impl SecureCookie {
    pub fn as_str(self) -> &'static str {
        match self {
            SecureCookie::Auto => "auto",
            SecureCookie::Always => "always",
            SecureCookie::Never => "never",
        }
    }
}

impl Setting for SecureCookie {
    const VALUE_NAME: &'static str = "WHEN";

    fn read(value: &Value) -> Result<Self, String> {
        match value.as_str().map(str::trim) {
            Some("auto") => Ok(SecureCookie::Auto),
            Some("always") => Ok(SecureCookie::Always),
            Some("never") => Ok(SecureCookie::Never),
            _ => Err("expected auto, always or never".into()),
        }
    }

    fn to_text(&self) -> Option<String> {
        Some(self.as_str().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_key_or_a_session_length_out_of_bounds_is_refused_without_echo() {
        let short = Some(SecretString::from("tooshort-secret-value"));
        let refusal = long_enough(&short).unwrap_err();
        assert!(refusal.contains("at least 32"), "{refusal}");
        assert!(!refusal.contains("tooshort"), "{refusal}");
        assert!(long_enough(&Some(SecretString::from("k".repeat(32)))).is_ok());
        assert!(long_enough(&None).is_ok());
        assert!(session_length(&Duration::from_secs(59)).is_err());
        assert!(session_length(&Duration::from_secs(31 * 24 * 3600)).is_err());
        assert!(session_length(&Console::default().console_session_ttl).is_ok());
        let shown = Some(SecretString::from("k".repeat(40))).show();
        assert_eq!(shown, "[REDACTED]");
        for (text, value) in [
            ("auto", SecureCookie::Auto),
            ("always", SecureCookie::Always),
            ("never", SecureCookie::Never),
        ] {
            let read = SecureCookie::read(&Value::from(text)).unwrap();
            assert_eq!(read, value);
            assert_eq!(read.to_text().as_deref(), Some(text));
        }
        assert!(SecureCookie::read(&Value::from("sometimes")).is_err());
    }
}
