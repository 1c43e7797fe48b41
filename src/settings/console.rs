//! The moderator console under `/console`: how its sessions are signed, how long they last,
//! when their cookie is marked Secure, and how often one address may try to sign in.

use super::value::InvalidValue;
use std::{net::IpAddr, time::Duration};

use figment::value::Value;
use ipnet::IpNet;
use secrecy::{ExposeSecret, SecretString};

use super::{
    declare::{nonzero, section},
    value::{Setting, items},
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
        /// address is the connection's, or the one a trusted proxy names.
        #[value_name = "ATTEMPTS"]
        console_signin_limit: u32 = 10, check nonzero;
        /// Proxies in front of the console, comma-separated addresses or networks (10.0.0.0/8):
        /// from a connection of theirs, the sign-in limit counts the client X-Forwarded-For
        /// names (its last entry that is not one of them). None: the connection's address, and
        /// X-Forwarded-For is never used.
        #[value_name = "NETWORKS"]
        console_trusted_proxies: TrustedProxies = TrustedProxies::default();
    }
}

/// Shortest session key, in characters (a random one has 43: base64 of 32 bytes).
pub const MIN_SESSION_KEY: usize = 32;

fn long_enough(key: &Option<SecretString>) -> Result<(), InvalidValue> {
    match key {
        Some(key) if key.expose_secret().chars().count() < MIN_SESSION_KEY => Err(format!(
            "must be at least {MIN_SESSION_KEY} characters, e.g. openssl rand -base64 32"
        )
        .into()),
        _ => Ok(()),
    }
}

fn session_length(ttl: &Duration) -> Result<(), InvalidValue> {
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

    fn read(value: &Value) -> Result<Self, InvalidValue> {
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

/// The proxies whose `X-Forwarded-For` is believed: addresses and networks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Whether `address` is one of them (an IPv4 address a dual-stack socket reports as
    /// `::ffff:a.b.c.d` is taken as the IPv4 one).
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        self.0.iter().any(|network| network.contains(&address))
    }
}

/// One entry: `10.0.0.7`, `10.0.0.0/8`, `fd00::/8`.
fn network(item: &str) -> Result<IpNet, InvalidValue> {
    item.parse::<IpNet>()
        .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            format!("{item:?} is not an address or a network; expected e.g. 10.0.0.7, 10.0.0.0/8 or fd00::/8").into()
        })
}

/// Comma-separated, as the variable and the flag give them.
impl std::str::FromStr for TrustedProxies {
    type Err = InvalidValue;

    fn from_str(text: &str) -> Result<Self, InvalidValue> {
        Self::read(&Value::from(text))
    }
}

impl Setting for TrustedProxies {
    const VALUE_NAME: &'static str = "NETWORKS";

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        items(value)?
            .iter()
            .map(|item| network(item))
            .collect::<Result<_, _>>()
            .map(Self)
    }

    fn to_text(&self) -> Option<String> {
        Some(
            self.0
                .iter()
                .map(IpNet::to_string)
                .collect::<Vec<_>>()
                .join(","),
        )
    }

    fn show(&self) -> String {
        match self.to_text() {
            Some(text) if !text.is_empty() => text,
            _ => "none".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_key_or_a_session_length_out_of_bounds_is_refused_without_echo() {
        let short = Some(SecretString::from("tooshort-secret-value"));
        let refusal = long_enough(&short).unwrap_err();
        assert!(refusal.reason().contains("at least 32"), "{refusal}");
        assert!(!refusal.reason().contains("tooshort"), "{refusal}");
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

    #[test]
    fn trusted_proxies_are_addresses_and_networks_and_a_bad_one_is_named() {
        let read = TrustedProxies::read(&Value::from("10.0.0.0/8, 192.0.2.7,fd00::/8")).unwrap();
        assert!(read.contains("10.200.3.4".parse().unwrap()));
        assert!(read.contains("192.0.2.7".parse().unwrap()));
        assert!(!read.contains("192.0.2.8".parse().unwrap()));
        assert!(read.contains("fd00::1".parse().unwrap()));
        assert!(read.contains("::ffff:10.1.1.1".parse().unwrap()));
        assert!(!read.contains("203.0.113.1".parse().unwrap()));
        assert_eq!(
            read.to_text().as_deref(),
            Some("10.0.0.0/8,192.0.2.7/32,fd00::/8")
        );
        assert_eq!(TrustedProxies::default().show(), "none");
        let refusal = TrustedProxies::read(&Value::from("10.0.0.0/8,proxy.local")).unwrap_err();
        assert!(refusal.reason().contains("\"proxy.local\""), "{refusal}");
        assert!(TrustedProxies::read(&Value::from("10.0.0.0/33")).is_err());
    }
}
