//! Cross-site request forgery: every console form that changes something is a POST carrying the
//! session's CSRF token in a hidden field, and a POST whose token is missing or is not its
//! session's is refused before anything is read or written. The token is a random 32 bytes
//! per session, kept in the signed session cookie (so a forged form cannot know it) and
//! compared in constant time. The cookie being `SameSite=Strict` is the second line: another
//! site's form does not even carry the session.

use maud::{Markup, html};

use super::session::Session;

/// The hidden field's name.
pub const FIELD: &str = "csrf";

/// Why a form was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The form carried no token.
    Missing,
    /// The token is not this session's.
    Mismatch,
}

/// The hidden field a form of this session carries.
pub fn field(session: &Session) -> Markup {
    html! { input type="hidden" name=(FIELD) value=(session.csrf); }
}

/// Refuses a form whose CSRF token (`presented`, its [`FIELD`]) is missing or is not the
/// session's.
pub fn check(session: &Session, presented: Option<&str>) -> Result<(), Refusal> {
    let presented = presented.ok_or(Refusal::Missing)?;
    if same(presented.as_bytes(), session.csrf.as_bytes()) {
        Ok(())
    } else {
        Err(Refusal::Mismatch)
    }
}

/// Constant-time equality: every byte is looked at, whatever differs.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        Session {
            csrf: "the-token".into(),
            expires: chrono::Utc::now(),
            user: None,
        }
    }

    #[test]
    fn a_form_passes_only_with_its_sessions_token() {
        assert_eq!(check(&session(), Some("the-token")), Ok(()));
        assert_eq!(check(&session(), None), Err(Refusal::Missing));
        assert_eq!(check(&session(), Some("the-tokeN")), Err(Refusal::Mismatch));
        assert_eq!(
            check(&session(), Some("the-token-longer")),
            Err(Refusal::Mismatch)
        );
        assert_eq!(check(&session(), Some("")), Err(Refusal::Mismatch));
        let field = field(&session()).into_string();
        assert_eq!(
            field,
            r#"<input type="hidden" name="csrf" value="the-token">"#
        );
    }
}
