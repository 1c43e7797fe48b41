//! The console's session: one signed cookie, nothing kept on the server.
//!
//! The cookie holds base64url JSON of who signed in (name, role and the token's label, never the
//! token or its hash), when the session ends and its CSRF token, signed with HMAC-SHA256 (the
//! `cookie` crate's signed jar, keyed from `console_session_key`). It is `HttpOnly`,
//! `SameSite=Strict`, `Path=/console`, `Secure` as `console_secure_cookie` says, and lasts
//! `console_session_ttl`. A session ends when it expires, when the key changes (every session at
//! once), or when its token is no longer configured. Before signing in, a visitor holds an
//! anonymous session: only a CSRF token, which the sign-in form must carry.

use axum::http::{HeaderMap, HeaderValue, header};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::{DateTime, Utc};
use cookie::{Cookie, CookieJar, Key, SameSite};
use rand::RngCore;
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};

use crate::{
    credentials::Role,
    request::scope::Scope,
    settings::{Console as ConsoleSettings, SecureCookie, TrustedProxies},
};

/// The cookie's name.
pub const COOKIE: &str = "quiesce_console";
/// The path the cookie is sent for.
const COOKIE_PATH: &str = "/console";
/// How long an anonymous session (a sign-in form's CSRF token) lasts.
const ANONYMOUS_TTL_SECS: i64 = 3600;
/// The claims' format; another one is refused.
const VERSION: u8 = 1;
/// The longest `Set-Cookie` value the console sends: a browser keeps a cookie of at most 4,096
/// bytes (name, value and attributes; RFC 6265 section 6.1) and silently drops a larger one.
pub const MAX_COOKIE_BYTES: usize = 4096;
/// The token label of a session signed in without a token (`--insecure-dev`, none configured).
pub const INSECURE_DEV: &str = "insecure-dev";

/// Who signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    pub role: Role,
    /// The name the moderator gave, recorded with each of their decisions.
    pub name: String,
    /// `token:<8 hex digits>`: which token signed in (`insecure-dev` when none is required).
    pub token: String,
}

impl SignedIn {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Whose entities the session may see: every token's, so every session's, is the
    /// platform's today.
    pub fn scope(&self) -> Scope {
        Scope::Platform
    }
}

/// A verified, unexpired session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The CSRF token every form of this session carries.
    pub csrf: String,
    pub expires: DateTime<Utc>,
    /// `None`: not signed in yet (the sign-in form's session).
    pub user: Option<SignedIn>,
}

/// What the cookie carries, before signing.
#[derive(Serialize, Deserialize)]
struct Claims {
    v: u8,
    csrf: String,
    exp: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user: Option<UserClaims>,
}

#[derive(Serialize, Deserialize)]
struct UserClaims {
    role: String,
    name: String,
    token: String,
}

/// Signs and reads session cookies.
pub struct Sessions {
    key: Key,
    ttl: chrono::Duration,
    secure: SecureCookie,
    /// Sign-in attempts per client address per minute (`console_signin_limit`).
    pub(super) signin_limit: u32,
    /// Whose `X-Forwarded-For` names the client (`console_trusted_proxies`).
    pub(super) trusted_proxies: TrustedProxies,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("key", &"[REDACTED]")
            .field("ttl", &self.ttl)
            .field("secure", &self.secure)
            .finish()
    }
}

impl Sessions {
    /// From the settings; without a configured key, a random one for this process.
    pub fn new(settings: &ConsoleSettings) -> Self {
        let key = match &settings.console_session_key {
            // The settings check holds it to at least 32 characters (so 32 bytes).
            Some(secret) => Key::derive_from(secret.expose_secret().as_bytes()),
            None => Key::generate(),
        };
        Self {
            key,
            ttl: chrono::Duration::from_std(settings.console_session_ttl)
                .unwrap_or(chrono::Duration::hours(8)),
            secure: settings.console_secure_cookie,
            signin_limit: settings.console_signin_limit,
            trusted_proxies: settings.console_trusted_proxies.clone(),
        }
    }

    /// A fresh anonymous session (the sign-in form's).
    pub fn anonymous(&self) -> Session {
        Session {
            csrf: random_token(),
            expires: Utc::now() + chrono::Duration::seconds(ANONYMOUS_TTL_SECS),
            user: None,
        }
    }

    /// A fresh signed-in session, with a CSRF token of its own.
    pub fn signed_in(&self, user: SignedIn) -> Session {
        Session {
            csrf: random_token(),
            expires: Utc::now() + self.ttl,
            user: Some(user),
        }
    }

    /// The request's session, if its cookie verifies and has not expired.
    pub fn read(&self, headers: &HeaderMap) -> Option<Session> {
        let mut jar = CookieJar::new();
        for value in headers.get_all(header::COOKIE) {
            let Ok(text) = value.to_str() else { continue };
            for cookie in Cookie::split_parse(text.to_owned()).flatten() {
                if cookie.name() == COOKIE {
                    jar.add_original(cookie);
                }
            }
        }
        let verified = jar.signed(&self.key).get(COOKIE)?;
        let json = URL_SAFE_NO_PAD.decode(verified.value()).ok()?;
        let claims: Claims = serde_json::from_slice(&json).ok()?;
        let expires = DateTime::<Utc>::from_timestamp(claims.exp, 0)?;
        if claims.v != VERSION || expires <= Utc::now() || claims.csrf.is_empty() {
            return None;
        }
        let user = match claims.user {
            None => None,
            Some(user) => Some(SignedIn {
                role: Role::parse(&user.role).filter(|r| *r != Role::Ingest)?,
                name: user.name,
                token: user.token,
            }),
        };
        Some(Session {
            csrf: claims.csrf,
            expires,
            user,
        })
    }

    /// The `Set-Cookie` value that gives the browser this session.
    pub fn set_cookie(&self, session: &Session, request: &HeaderMap) -> HeaderValue {
        let claims = Claims {
            v: VERSION,
            csrf: session.csrf.clone(),
            exp: session.expires.timestamp(),
            user: session.user.as_ref().map(|user| UserClaims {
                role: user.role.as_str().to_owned(),
                name: user.name.clone(),
                token: user.token.clone(),
            }),
        };
        let value = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).expect("claims serialize"));
        let seconds = (session.expires - Utc::now()).num_seconds().max(0);
        let mut jar = CookieJar::new();
        jar.signed_mut(&self.key).add(
            Cookie::build((COOKIE, value))
                .path(COOKIE_PATH)
                .http_only(true)
                .same_site(SameSite::Strict)
                .secure(self.secure_for(request))
                .max_age(cookie::time::Duration::seconds(seconds)),
        );
        let cookie = jar.get(COOKIE).expect("just added").to_string();
        HeaderValue::from_str(&cookie).expect("a cookie is a valid header value")
    }

    /// The `Set-Cookie` value that ends the session in the browser.
    pub fn clear_cookie(&self, request: &HeaderMap) -> HeaderValue {
        let cookie = Cookie::build((COOKIE, ""))
            .path(COOKIE_PATH)
            .http_only(true)
            .same_site(SameSite::Strict)
            .secure(self.secure_for(request))
            .removal()
            .build();
        HeaderValue::from_str(&cookie.to_string()).expect("a cookie is a valid header value")
    }

    /// Whether the cookie of a response to this request is marked Secure.
    fn secure_for(&self, request: &HeaderMap) -> bool {
        match self.secure {
            SecureCookie::Always => true,
            SecureCookie::Never => false,
            SecureCookie::Auto => came_over_https(request),
        }
    }
}

/// Whether the proxy in front says the request came over https: `X-Forwarded-Proto: https`
/// (its first value) or `Forwarded: ...;proto=https` (RFC 7239, its first element).
fn came_over_https(request: &HeaderMap) -> bool {
    let forwarded_proto = request
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
    let forwarded = request
        .get(header::FORWARDED)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .is_some_and(|element| {
            element.split(';').any(|pair| {
                pair.split_once('=').is_some_and(|(name, value)| {
                    name.trim().eq_ignore_ascii_case("proto")
                        && value.trim().trim_matches('"').eq_ignore_ascii_case("https")
                })
            })
        });
    forwarded_proto || forwarded
}

/// 32 random bytes, base64url: a CSRF token.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use secrecy::SecretString;

    use super::*;

    fn sessions(key: &str, secure: SecureCookie) -> Sessions {
        Sessions::new(&ConsoleSettings {
            console_session_key: Some(SecretString::from(key)),
            console_session_ttl: Duration::from_secs(600),
            console_secure_cookie: secure,
            ..ConsoleSettings::default()
        })
    }

    /// The request headers a browser sends back with the cookie of `set_cookie`.
    fn echoed(set_cookie: &HeaderValue) -> HeaderMap {
        let pair = set_cookie.to_str().unwrap().split(';').next().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(pair).unwrap());
        headers
    }

    fn user() -> SignedIn {
        SignedIn {
            role: Role::Moderator,
            name: "Ana <b>\"quoted\"</b>; x=1".into(),
            token: "token:0123abcd".into(),
        }
    }

    #[test]
    fn a_session_round_trips_and_its_cookie_has_the_attributes() {
        let sessions = sessions("k".repeat(40).as_str(), SecureCookie::Never);
        let session = sessions.signed_in(user());
        let cookie = sessions.set_cookie(&session, &HeaderMap::new());
        let text = cookie.to_str().unwrap();
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console", "Max-Age="] {
            assert!(text.contains(attribute), "{text}");
        }
        assert!(!text.contains("Secure"), "{text}");
        let read = sessions.read(&echoed(&cookie)).expect("verifies");
        assert_eq!(read.user, Some(user()));
        assert_eq!(read.csrf, session.csrf);
    }

    #[test]
    fn a_name_of_a_thousand_cjk_characters_makes_a_cookie_a_browser_drops() {
        let sessions = sessions("k".repeat(40).as_str(), SecureCookie::Always);
        let with = |name: String| {
            let session = sessions.signed_in(SignedIn { name, ..user() });
            sessions.set_cookie(&session, &HeaderMap::new()).len()
        };
        assert!(with("審".repeat(1000)) > MAX_COOKIE_BYTES);
        assert!(with("a".repeat(1000)) <= MAX_COOKIE_BYTES);
    }

    #[test]
    fn a_tampered_cookie_or_another_key_is_refused() {
        let sessions = sessions("k".repeat(40).as_str(), SecureCookie::Never);
        let cookie = sessions.set_cookie(&sessions.signed_in(user()), &HeaderMap::new());
        let other = self::sessions("o".repeat(40).as_str(), SecureCookie::Never);
        assert_eq!(
            other.read(&echoed(&cookie)),
            None,
            "a rotated key signs out"
        );
        let text = cookie
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned();
        // Change the claims after the 44-character MAC: it no longer verifies.
        let (mac, value) = text.split_at(COOKIE.len() + 1 + 44);
        let mut claims = URL_SAFE_NO_PAD.decode(value).unwrap();
        let admin = String::from_utf8(claims.clone())
            .unwrap()
            .replace("moderator", "admin");
        claims = admin.into_bytes();
        let forged = format!("{mac}{}", URL_SAFE_NO_PAD.encode(claims));
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(&forged).unwrap());
        assert_eq!(sessions.read(&headers), None);
    }

    #[test]
    fn an_expired_session_is_refused_and_secure_follows_the_setting() {
        let sessions = sessions("k".repeat(40).as_str(), SecureCookie::Auto);
        let mut session = sessions.signed_in(user());
        session.expires = Utc::now() - chrono::Duration::seconds(1);
        let cookie = sessions.set_cookie(&session, &HeaderMap::new());
        assert_eq!(sessions.read(&echoed(&cookie)), None);
        let mut https = HeaderMap::new();
        https.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        let live = sessions.signed_in(user());
        assert!(
            sessions
                .set_cookie(&live, &https)
                .to_str()
                .unwrap()
                .contains("Secure")
        );
        let mut forwarded = HeaderMap::new();
        forwarded.insert(
            header::FORWARDED,
            HeaderValue::from_static("for=1.2.3.4;proto=https"),
        );
        assert!(
            sessions
                .set_cookie(&live, &forwarded)
                .to_str()
                .unwrap()
                .contains("Secure")
        );
        let plain = sessions.set_cookie(&live, &HeaderMap::new());
        assert!(!plain.to_str().unwrap().contains("Secure"));
        let always = self::sessions("k".repeat(40).as_str(), SecureCookie::Always);
        assert!(
            always
                .set_cookie(&live, &HeaderMap::new())
                .to_str()
                .unwrap()
                .contains("Secure")
        );
        assert!(
            sessions
                .clear_cookie(&HeaderMap::new())
                .to_str()
                .unwrap()
                .contains("Max-Age=0")
        );
    }
}
