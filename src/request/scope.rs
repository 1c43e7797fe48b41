//! Who may see what: the one place a route that addresses an entity, an action, a statement,
//! an appeal or a review item decides whether its caller may. The edges reach it only through
//! their path extractors ([`super::path::addressed`]), so no route can address something
//! without asking.
//!
//! Today every token and every console session is the platform's, and the platform sees every
//! entity: [`admit`] admits all. A scope narrower than the platform's (a community's, carried
//! by its tokens and sessions) is one more variant here, answered here.

use crate::domain::EntityId;

/// Whose entities a caller may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The platform's: every entity, and everything about each.
    Platform,
}

/// What a route addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Address<'a> {
    Entity(&'a EntityId),
    Action(i64),
    Statement(i64),
    Appeal(i64),
    ReviewItem(i64),
}

/// The caller may not see what the route addresses: answered as "not found", which tells
/// nothing of whether it exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfScope;

/// Whether `scope` reaches `address`.
pub fn admit(scope: Scope, address: &Address<'_>) -> Result<(), OutOfScope> {
    match scope {
        Scope::Platform => {
            let _ = address;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_platform_sees_everything() {
        let entity = EntityId::parse("post:1").unwrap();
        for address in [
            Address::Entity(&entity),
            Address::Action(1),
            Address::Statement(1),
            Address::Appeal(1),
            Address::ReviewItem(1),
        ] {
            assert_eq!(admit(Scope::Platform, &address), Ok(()));
        }
    }
}
