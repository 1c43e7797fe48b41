//! The token check on every `/v1` route: which role a route needs, and whether the request's
//! bearer token has it. Tokens and roles themselves are [`crate::credentials`].

use axum::{
    extract::{FromRequestParts, MatchedPath, Request, State},
    http::{Method, StatusCode, header, request::Parts},
    middleware::Next,
    response::{IntoResponse, Response},
};

use super::{ApiError, AppState};
// Built by startup beside the rest of the HTTP state.
pub use crate::credentials::Auth;
use crate::{audit::Origin, credentials::Role, domain::Actor, request::scope::Scope};

/// The role a route needs; `None`: no token (health, readiness, the API description, and
/// named sources, whose requests are authenticated by their signature).
pub fn required_role(method: &Method, route: &str) -> Option<Role> {
    match (method.as_str(), route) {
        ("POST", "/v1/sources/{source}/events") => None,
        ("POST", "/v1/events")
        | ("PUT", "/v1/entities/{entity}/attributes")
        | ("POST", "/v1/actions/{id}/appeals")
        | ("POST", "/v1/statements/{id}/appeals") => Some(Role::Ingest),
        ("GET", "/v1/entities/{entity}")
        | ("GET", "/v1/entities/{entity}/evaluations")
        | ("GET", "/v1/actions")
        | ("GET", "/v1/stats/reversal-rate")
        | ("GET", "/v1/rules")
        | ("GET", "/v1/rules/versions")
        | ("POST", "/v1/rules/backtest")
        | ("POST", "/v1/actions/{id}/reverse")
        | ("POST", "/v1/entities/{entity}/override")
        | ("POST", "/v1/entities/{entity}/timer/end")
        | ("GET", "/v1/review")
        | ("POST", "/v1/review/{id}/claim")
        | ("POST", "/v1/review/{id}/decide")
        | ("GET", "/v1/statements")
        | ("GET", "/v1/appeals")
        | ("POST", "/v1/appeals/{id}/claim")
        | ("POST", "/v1/appeals/{id}/decide") => Some(Role::Moderator),
        (_, route) if route.starts_with("/v1/") => Some(Role::Admin),
        _ => None,
    }
}

/// The caller, if the request carries a token of the required role; `Ok(None)` when
/// tokens are not enforced and none was sent.
fn authorize(
    auth: &Auth,
    authorization: Option<&str>,
    required: Role,
) -> Result<Option<Caller>, ApiError> {
    if !auth.enforced() {
        return Ok(None);
    }
    let token = authorization.and_then(bearer_token).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send an API token: Authorization: Bearer <token>",
        )
    })?;
    let known = auth.identify(token).ok_or_else(|| {
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
            client: known.label(),
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

/// The token of an `Authorization: Bearer <token>` value. The scheme name is case-insensitive
/// (RFC 9110, section 11.1), so `bearer` and `BEARER` are read as `Bearer`.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

/// Who sent a request, once its token is checked; a request extension.
#[derive(Debug, Clone)]
pub struct Caller {
    pub role: Role,
    /// `token:<first 8 hex digits of the token's sha256>`.
    pub client: String,
}

/// Who sent a request, for the audit trail: the checked token (none where no token is
/// configured) and where the request came from.
#[derive(Debug, Clone)]
pub struct Requester {
    pub caller: Option<Caller>,
    pub origin: Origin,
}

impl Caller {
    /// Whose entities the token may see: every token is the platform's today.
    pub fn scope(&self) -> Scope {
        Scope::Platform
    }
}

impl Requester {
    /// The actor named `name` (the moderator the body names, or the token's label).
    pub fn actor(&self, name: &str) -> Actor {
        self.origin.actor(
            name,
            self.caller.as_ref().map(|c| c.client.as_str()),
            self.caller.as_ref().map(|c| c.role.as_str()),
        )
    }

    /// The actor for a request that names nobody: the token's label, or `api`.
    pub fn token_actor(&self) -> Actor {
        let name = self
            .caller
            .as_ref()
            .map_or_else(|| "api".to_owned(), |c| c.client.clone());
        self.actor(&name)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Requester {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self {
            caller: parts.extensions.get::<Caller>().cloned(),
            origin: Origin::of(&parts.headers, &parts.extensions),
        })
    }
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
        match authorize(&state.auth, authorization, required) {
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
    use crate::credentials::ApiToken;

    #[test]
    fn tokens_are_matched_by_hash_and_roles_by_route() {
        let token = |role, token| ApiToken::parse(&ApiToken::spec_for(role, token)).unwrap();
        let auth = Auth::new(
            vec![
                token(Role::Ingest, "in-token"),
                token(Role::Admin, "admin-token"),
            ],
            true,
        );
        assert_eq!(auth.role_of("in-token"), Some(Role::Ingest));
        assert_eq!(auth.role_of("admin-token"), Some(Role::Admin));
        assert_eq!(auth.role_of("in-token "), None);
        assert!(ApiToken::parse("root:abcd").is_err());
        assert!(ApiToken::parse("admin:abcd").is_err());
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

    #[test]
    fn the_console_identifies_tokens_and_sees_when_one_is_removed() {
        let spec = ApiToken::spec_for(Role::Moderator, "mod-token");
        let token = ApiToken::parse(&spec).unwrap();
        let auth = Auth::new(vec![token.clone()], true);
        assert_eq!(
            auth.identify(" mod-token ").map(|t| t.role),
            Some(Role::Moderator)
        );
        assert!(auth.identify("other").is_none());
        assert!(auth.still_configured(Role::Moderator, &token.label()));
        assert!(!auth.still_configured(Role::Admin, &token.label()));
        let rotated = Auth::new(Vec::new(), true);
        assert!(!rotated.still_configured(Role::Moderator, &token.label()));
        assert!(!rotated.enforced() || rotated.identify("mod-token").is_none());
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let spec = ApiToken::spec_for(Role::Ingest, "in-token");
        let auth = Auth::new(vec![ApiToken::parse(&spec).unwrap()], true);
        for value in [
            "Bearer in-token",
            "bearer in-token",
            "BEARER in-token",
            "bEaReR in-token",
        ] {
            let caller = authorize(&auth, Some(value), Role::Ingest).unwrap();
            assert_eq!(caller.map(|c| c.role), Some(Role::Ingest), "{value}");
        }
        for value in [
            "Basic in-token",
            "Bearerin-token",
            "Bearer",
            "in-token",
            "Bearer wrong",
        ] {
            let error = authorize(&auth, Some(value), Role::Ingest).unwrap_err();
            assert_eq!(error.status, StatusCode::UNAUTHORIZED, "{value}");
        }
    }
}
