//! The values a route's path carries, each parsed from its segment: an entity id, the whole id
//! of an action, a statement, an appeal or a review item, a rules version, a source's or an
//! asset's name. A segment that does not parse is a [`PathProblem`] naming the path field, in
//! the API's words (its `code` and message); each edge answers it its own way (the API's JSON
//! error, the console's page). The edges' path extractors read a segment only through
//! [`addressed`], which asks the caller's scope about what the value addresses.

use axum::{
    extract::{FromRequestParts, Path},
    http::request::Parts,
};

use super::scope::{Address, OutOfScope, Scope, admit};
use crate::domain::EntityId;

/// A path segment refused: the path field, the API's error code and its words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathProblem {
    pub field: &'static str,
    pub code: &'static str,
    pub message: String,
}

/// A value a route's path carries.
pub trait PathValue: Sized + Send {
    /// The path field, as the route's template names it (`{entity}`, `{id}`).
    const FIELD: &'static str;

    fn parse(raw: &str) -> Result<Self, PathProblem>;

    /// What the value addresses, for the scope check; `None`: nothing a scope limits (a source's
    /// name, an asset, a rules version).
    fn address(&self) -> Option<Address<'_>>;
}

/// Why a route's path value was not handed to its handler.
#[derive(Debug)]
pub enum Refused {
    /// The segment does not decode or parse.
    Unreadable(PathProblem),
    /// The caller's scope does not reach what it addresses.
    OutOfScope(OutOfScope),
}

/// The route's one path value, read from its segment, and handed over only once the caller's
/// `scope` admits what it addresses (no caller: nothing addressed is admitted): the one place
/// every path-addressed route decides who may see it.
pub async fn addressed<T: PathValue, S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    scope: Option<Scope>,
) -> Result<T, Refused> {
    let raw = Path::<String>::from_request_parts(parts, state)
        .await
        .map(|Path(raw)| raw)
        .map_err(|_| {
            Refused::Unreadable(PathProblem {
                field: T::FIELD,
                code: "invalid_path",
                message: format!(
                    "the {} in the path is not valid percent-encoded UTF-8",
                    T::FIELD
                ),
            })
        })?;
    let value = T::parse(&raw).map_err(Refused::Unreadable)?;
    if let Some(address) = value.address() {
        let scope = scope.ok_or(Refused::OutOfScope(OutOfScope))?;
        admit(scope, &address).map_err(Refused::OutOfScope)?;
    }
    Ok(value)
}

impl PathValue for EntityId {
    const FIELD: &'static str = "entity";

    fn parse(raw: &str) -> Result<Self, PathProblem> {
        EntityId::parse(raw).map_err(|e| PathProblem {
            field: Self::FIELD,
            code: "invalid_entity",
            message: e.0,
        })
    }

    fn address(&self) -> Option<Address<'_>> {
        Some(Address::Entity(self))
    }
}

/// A whole id in the path (`{id}`): what it names, and the scope's address of it.
macro_rules! whole_ids {
    ($($(#[$doc:meta])* $name:ident: $what:literal => $address:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name(pub i64);

        impl $name {
            /// What the id names, with its article (`an action`).
            pub const WHAT: &'static str = $what;
        }

        impl PathValue for $name {
            const FIELD: &'static str = "id";

            fn parse(raw: &str) -> Result<Self, PathProblem> {
                raw.parse().map(Self).map_err(|_| PathProblem {
                    field: Self::FIELD,
                    code: "invalid_id",
                    message: format!("{} id is a whole number", $what),
                })
            }

            fn address(&self) -> Option<Address<'_>> {
                Some(Address::$address(self.0))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    )*};
}

whole_ids! {
    /// An action's id (`/v1/actions/{id}/...`, `/console/actions/{id}`).
    ActionId: "an action" => Action;
    /// A statement of reasons' id.
    StatementId: "a statement" => Statement;
    /// An appeal's id.
    AppealId: "an appeal" => Appeal;
    /// A review queue item's id (its flag action's).
    ReviewItemId: "a review item" => ReviewItem;
}

/// A rules version to make active again: a whole number from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RulesVersion(pub i64);

impl PathValue for RulesVersion {
    const FIELD: &'static str = "version";

    fn parse(raw: &str) -> Result<Self, PathProblem> {
        raw.parse::<i64>()
            .ok()
            .filter(|v| *v >= 1)
            .map(Self)
            .ok_or_else(|| PathProblem {
                field: Self::FIELD,
                code: "invalid_path",
                message: "the version must be a whole number from 1".to_owned(),
            })
    }

    fn address(&self) -> Option<Address<'_>> {
        None
    }
}

/// A name in the path, any text, that its route looks up (and answers when it names nothing):
/// it addresses nothing a scope limits.
macro_rules! names {
    ($($(#[$doc:meta])* $name:ident: $field:literal;)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name(pub String);

        impl PathValue for $name {
            const FIELD: &'static str = $field;

            fn parse(raw: &str) -> Result<Self, PathProblem> {
                Ok(Self(raw.to_owned()))
            }

            fn address(&self) -> Option<Address<'_>> {
                None
            }
        }
    )*};
}

names! {
    /// A configured source's name (`/v1/sources/{source}/events`).
    SourceName: "source";
    /// A console asset's file name (`/console/assets/{file}`).
    AssetName: "file";
}

#[cfg(test)]
mod tests {
    use axum::{Router, body::Body, http::Request, routing::get};
    use tower::ServiceExt;

    use super::*;

    /// What `addressed` answers for the entity in `uri`'s path: its id, or the refusal's words.
    async fn entity_at(uri: &str) -> String {
        let router = Router::new().route(
            "/x/{entity}",
            get(|mut parts: Parts| async move {
                match addressed::<EntityId, ()>(&mut parts, &(), Some(Scope::Platform)).await {
                    Ok(entity) => entity.to_string(),
                    Err(Refused::Unreadable(p)) => format!("{} {} {}", p.field, p.code, p.message),
                    Err(Refused::OutOfScope(_)) => "out of scope".to_owned(),
                }
            }),
        );
        let request = Request::get(uri).body(Body::empty()).unwrap();
        let response = router.oneshot(request).await.unwrap();
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[test]
    fn each_value_is_refused_in_the_apis_words() {
        let problem = ActionId::parse("seven").unwrap_err();
        assert_eq!(
            (problem.field, problem.code, problem.message.as_str()),
            ("id", "invalid_id", "an action id is a whole number")
        );
        assert_eq!(
            ReviewItemId::parse("x").unwrap_err().message,
            "a review item id is a whole number"
        );
        assert_eq!(AppealId::parse("12").unwrap(), AppealId(12));
        let problem = RulesVersion::parse("0").unwrap_err();
        assert_eq!((problem.field, problem.code), ("version", "invalid_path"));
        let problem = <EntityId as PathValue>::parse("post").unwrap_err();
        assert_eq!((problem.field, problem.code), ("entity", "invalid_entity"));
    }

    #[tokio::test]
    async fn a_segment_is_decoded_parsed_and_admitted() {
        assert_eq!(entity_at("/x/post:9").await, "post:9");
        assert_eq!(entity_at("/x/post%3A9").await, "post:9");
        assert_eq!(
            entity_at("/x/post:%FF").await,
            "entity invalid_path the entity in the path is not valid percent-encoded UTF-8"
        );
        assert!(
            entity_at("/x/post")
                .await
                .starts_with("entity invalid_entity ")
        );
        let router = Router::new().route(
            "/x/{entity}",
            get(|mut parts: Parts| async move {
                let read = addressed::<EntityId, ()>(&mut parts, &(), None).await;
                matches!(read, Err(Refused::OutOfScope(_))).to_string()
            }),
        );
        let request = Request::get("/x/post:9").body(Body::empty()).unwrap();
        let response = router.oneshot(request).await.unwrap();
        let body = axum::body::to_bytes(response.into_body(), 64)
            .await
            .unwrap();
        assert_eq!(
            &body[..],
            b"true",
            "without a caller, nothing addressed is admitted"
        );
    }
}
