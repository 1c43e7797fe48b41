//! API tokens with roles. Tokens are configured as `role:<sha256 hex of the token>`, so the
//! tokens themselves are never stored; a presented bearer token is hashed and compared in
//! constant time. `ingest` may send events; `moderator` may read and reverse or override;
//! `admin` may do everything (dead letters, rules reload).

use axum::{
    extract::{MatchedPath, Request, State},
    http::{Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use sha2::{Digest, Sha256};

use crate::http::{ApiError, AppState};

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

    fn allows(self, required: Role) -> bool {
        self == Role::Admin || self == required
    }
}

/// The role a route needs; `None`: no token (health, readiness, the API description, and
/// named sources, whose requests are authenticated by their signature).
pub fn required_role(method: &Method, route: &str) -> Option<Role> {
    match (method.as_str(), route) {
        ("POST", "/v1/sources/{source}/events") => None,
        ("POST", "/v1/events") => Some(Role::Ingest),
        ("GET", "/v1/entities/{entity}")
        | ("GET", "/v1/actions")
        | ("GET", "/v1/stats/reversal-rate")
        | ("GET", "/v1/rules")
        | ("POST", "/v1/actions/{id}/reverse")
        | ("POST", "/v1/entities/{entity}/override") => Some(Role::Moderator),
        (_, route) if route.starts_with("/v1/") => Some(Role::Admin),
        _ => None,
    }
}

#[derive(Debug, Clone)]
struct TokenHash {
    role: Role,
    hash: [u8; 32],
}

/// The configured tokens; with `enforce` off (`--insecure-dev`) every request passes.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    tokens: Vec<TokenHash>,
    enforce: bool,
}

/// `role:<64 hex digits>`, the SHA-256 of the token.
pub fn parse_token_spec(spec: &str) -> Result<(Role, [u8; 32]), String> {
    let (role, hex) = spec
        .split_once(':')
        .ok_or("expected role:<sha256 hex of the token>")?;
    let role = Role::parse(role).ok_or("the role must be ingest, moderator or admin")?;
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .filter_map(|i| {
            hex.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
        })
        .collect();
    let hash: [u8; 32] = bytes
        .try_into()
        .map_err(|_| "the hash must be 64 hex digits (sha256 of the token)")?;
    Ok((role, hash))
}

/// `token:<first 8 hex digits of the token's sha256>`: names a client (rate limits, metrics)
/// without revealing anything usable.
pub fn client_label(hash: &[u8; 32]) -> String {
    let prefix: String = hash[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("token:{prefix}")
}

/// The spec line for a token: what an operator puts in QUIESCE_API_TOKENS.
pub fn token_spec(role: Role, token: &str) -> String {
    let hash: String = Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}:{hash}", role.as_str())
}

impl Auth {
    pub fn new(specs: &[String], enforce: bool) -> Result<Self, String> {
        let tokens = specs
            .iter()
            .map(|spec| parse_token_spec(spec).map(|(role, hash)| TokenHash { role, hash }))
            .collect::<Result<_, _>>()?;
        Ok(Self { tokens, enforce })
    }

    /// The role of a bearer token, if it is one of ours.
    #[cfg(test)]
    fn role_of(&self, token: &str) -> Option<Role> {
        self.token_of(token).map(|t| t.role)
    }

    fn token_of(&self, token: &str) -> Option<&TokenHash> {
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // Constant time per comparison: every byte is looked at, whatever differs.
        self.tokens.iter().find(|t| {
            t.hash
                .iter()
                .zip(presented)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
        })
    }

    /// The caller, if the request carries a token of the required role; `Ok(None)` when
    /// tokens are not enforced and none was sent.
    fn authorize(
        &self,
        authorization: Option<&str>,
        required: Role,
    ) -> Result<Option<Caller>, ApiError> {
        if !self.enforce {
            return Ok(None);
        }
        let token = authorization
            .and_then(|value| value.strip_prefix("Bearer "))
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "send an API token: Authorization: Bearer <token>",
                )
            })?;
        let known = self.token_of(token.trim()).ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the API token is not valid",
            )
        })?;
        let role = known.role;
        if role.allows(required) {
            Ok(Some(Caller {
                role,
                client: client_label(&known.hash),
            }))
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "a {} token cannot do this; it needs {}",
                    role.as_str(),
                    required.as_str()
                ),
            ))
        }
    }
}

/// Who sent a request, once its token is checked; a request extension.
#[derive(Debug, Clone)]
pub struct Caller {
    pub role: Role,
    /// `token:<first 8 hex digits of the token's sha256>`.
    pub client: String,
}

/// Route middleware: checks the token against the role the matched route needs.
pub async fn require_role(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    if let Some(required) = required_role(request.method(), &route) {
        let authorization = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        match state.auth.authorize(authorization, required) {
            Ok(Some(caller)) => {
                request.extensions_mut().insert(caller);
            }
            Ok(None) => {}
            Err(error) => return error.into_response(),
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_matched_by_hash_and_roles_by_route() {
        let auth = Auth::new(
            &[
                token_spec(Role::Ingest, "in-token"),
                token_spec(Role::Admin, "admin-token"),
            ],
            true,
        )
        .unwrap();
        assert_eq!(auth.role_of("in-token"), Some(Role::Ingest));
        assert_eq!(auth.role_of("admin-token"), Some(Role::Admin));
        assert_eq!(auth.role_of("in-token "), None);
        assert!(Auth::new(&["root:abcd".into()], true).is_err());
        assert!(Auth::new(&["admin:abcd".into()], true).is_err());
        assert_eq!(required_role(&Method::GET, "/healthz"), None);
        assert_eq!(
            required_role(&Method::POST, "/v1/events"),
            Some(Role::Ingest)
        );
        assert_eq!(
            required_role(&Method::POST, "/v1/rules/reload"),
            Some(Role::Admin)
        );
    }
}
