//! The console's refusals and failures as pages: a 4xx names the field and the problem, a 5xx
//! says only that something failed (its cause goes, as the API's do, to the one log line the
//! HTTP layer writes for it).

use std::{error::Error, sync::Arc};

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use maud::html;

use super::{csrf, layout};
use crate::{
    appeals::{AppealError, AppealRefusal},
    moderation::{ReversalError, ReversalRefusal},
    review::{ReviewError, ReviewRefusal},
    store::StoreError,
};

/// Why a console request was refused or failed.
#[derive(Debug, Clone)]
pub struct PageError {
    pub status: StatusCode,
    pub title: String,
    pub message: String,
    /// The form or query field at fault.
    pub field: Option<String>,
    /// Offer the sign-in page (the session is missing or ended).
    pub sign_in: bool,
    cause: Option<Arc<dyn Error + Send + Sync>>,
}

impl PageError {
    pub fn new(status: StatusCode, title: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            title: title.to_owned(),
            message: message.into(),
            field: None,
            sign_in: false,
            cause: None,
        }
    }

    /// A field of a form or query that is missing or wrong: 422 for a form, as the API answers
    /// a bad body (see [`PageError::bad_query`] for links and filters).
    pub fn bad_field(field: &str, problem: &str) -> Self {
        let field = field.chars().take(64).collect::<String>();
        Self {
            field: Some(field.clone()),
            ..Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Check the form",
                format!("{field} {problem}. Nothing was changed."),
            )
        }
    }

    /// A bad query parameter (a filter or a page link): 400.
    pub fn bad_query(error: PageError) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            title: "Check the filters".into(),
            message: error.message.replace(" Nothing was changed.", ""),
            ..error
        }
    }

    /// Names the field at fault.
    pub fn with_field(mut self, field: &str) -> Self {
        self.field = Some(field.to_owned());
        self
    }

    pub fn forbidden(message: &str) -> Self {
        Self::new(StatusCode::FORBIDDEN, "Refused", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "Not found", message)
    }

    /// No session, or one that ended: sign in (again).
    pub fn signed_out() -> Self {
        Self {
            sign_in: true,
            ..Self::new(
                StatusCode::UNAUTHORIZED,
                "Signed out",
                "Your console session has ended (or you never signed in). Nothing was changed; sign in and try again.",
            )
        }
    }

    /// A form larger than the console reads (`limit` bytes, `forms::MAX_FORM_BYTES`): 413.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Too large",
            format!(
                "The form is larger than the console takes: at most {} KiB. Nothing was changed; shorten it and send it again.",
                limit / 1024
            ),
        )
    }

    /// Something of ours failed: opaque to the moderator, its cause logged once.
    pub fn internal(cause: impl Error + Send + Sync + 'static) -> Self {
        Self {
            cause: Some(Arc::new(cause)),
            ..Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Something went wrong",
                "The console could not do this; the error is logged. Try again in a moment.",
            )
        }
    }

    /// Redis or Postgres did not answer in time.
    pub fn unavailable(cause: impl Error + Send + Sync + 'static) -> Self {
        Self {
            cause: Some(Arc::new(cause)),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Storage unavailable",
                "Redis or Postgres did not answer in time. Nothing was changed; try again in a moment.",
            )
        }
    }
}

impl From<csrf::Refusal> for PageError {
    fn from(refusal: csrf::Refusal) -> Self {
        PageError::forbidden(match refusal {
            csrf::Refusal::Missing => {
                "The form carried no CSRF token, so it may not have come from the console. Nothing was changed; open the page again and resubmit."
            }
            csrf::Refusal::Mismatch => {
                "The form's CSRF token is not this session's (the page may be older than your sign-in). Nothing was changed; open the page again and resubmit."
            }
        })
    }
}

/// How a store error reaches a moderator, as `http::error::store_error` answers the API: an
/// outage is 503, a missing or conflicting record its 4xx, anything else an opaque 500.
impl From<StoreError> for PageError {
    fn from(error: StoreError) -> Self {
        match &error {
            _ if error.is_unavailable() => PageError::unavailable(error),
            StoreError::NotFound(message) => PageError::not_found(format!("{message}.")),
            StoreError::VersionConflict { .. } => PageError::entity_changed(),
            _ => PageError::internal(error),
        }
    }
}

impl PageError {
    /// A refusal, as the console says it: `title`, then why and that nothing changed.
    fn refused(title: &str, refusal: impl std::fmt::Display) -> Self {
        PageError::new(
            StatusCode::CONFLICT,
            title,
            format!("{refusal}. Nothing was changed."),
        )
    }

    /// The entity moved on from the version the page showed.
    fn entity_changed() -> Self {
        PageError::new(
            StatusCode::CONFLICT,
            "The entity changed",
            "The entity changed since this page was read. Nothing was changed: look again and decide on what it is now.",
        )
    }
}

/// A review queue refusal, as `http::error` answers it to the API: 409.
impl From<ReviewError> for PageError {
    fn from(error: ReviewError) -> Self {
        match error {
            ReviewError::Refused(ReviewRefusal::EntityChanged { .. }) => {
                PageError::entity_changed()
            }
            ReviewError::Refused(refusal) => PageError::refused("Not done", refusal),
            ReviewError::Store(error) => error.into(),
        }
    }
}

/// A reversal refused, as `http::error` answers it to the API: 409.
impl From<ReversalError> for PageError {
    fn from(error: ReversalError) -> Self {
        match error {
            ReversalError::Refused(refusal @ ReversalRefusal::AlreadyReversed { .. }) => {
                PageError::refused("Already reversed", refusal)
            }
            ReversalError::Refused(refusal @ ReversalRefusal::Superseded { .. }) => {
                PageError::refused("Superseded", refusal)
            }
            ReversalError::Store(error) => error.into(),
        }
    }
}

/// An appeal refused, as `http::appeals` answers it to the API: 409, with the reason in words.
impl From<AppealError> for PageError {
    fn from(error: AppealError) -> Self {
        match error {
            AppealError::Refused(refusal @ AppealRefusal::Decided(_)) => {
                PageError::refused("Already decided", refusal)
            }
            AppealError::Refused(refusal) => PageError::refused("Not done", refusal),
            AppealError::Reversal(refusal) => ReversalError::Refused(refusal).into(),
            error @ AppealError::NothingToAppeal(_) => PageError::refused("Not done", error),
            AppealError::Store(error) => error.into(),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = html! {
            div.notice.error role="alert" {
                h1 { (self.title) }
                p #error-message { (self.message) }
                @if let Some(field) = &self.field {
                    p { "Field: " code #error-field { (field) } }
                }
            }
            p {
                @if self.sign_in {
                    a href="/console/login" { "Sign in" }
                } @else {
                    a href="/console/review" { "Back to Review" }
                }
            }
        };
        let mut response = (self.status, layout::bare(&self.title, body)).into_response();
        if let Some(cause) = self.cause {
            // The type the HTTP layer's error logging looks for.
            response.extensions_mut().insert(cause);
        }
        response
    }
}
