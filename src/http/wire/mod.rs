//! The API's wire contract: the JSON shapes its routes return, each named as in the OpenAPI
//! document and converted from the store's row it shows (`From`). The store's rows are not
//! the contract: a column added to a row reaches the API only once a type here shows it.
//! Field order is the JSON's (serde writes fields as declared).

mod audit;
mod moderation;
mod review;
mod rules;
mod statements;

pub use self::{
    audit::AuditRecord,
    moderation::{ActionRecord, EndedTimer, LabelRecord, Override, Reversal},
    review::{ReviewItem, ReviewOutcome},
    rules::{RuleHits, RulesVersion, RulesVersionSummary},
    statements::{AppealDecision, AppealRecord, StatementRecord},
};

/// A wire type: the struct as declared (its doc comments are the OpenAPI descriptions), and
/// `From` the store's row, each field converted with `Into` (fields of the row not declared
/// here are not shown).
macro_rules! wire {
    (
        $(#[$meta:meta])*
        pub struct $name:ident from $row:ty {
            $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, serde::Serialize, utoipa::ToSchema)]
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        impl From<$row> for $name {
            fn from(row: $row) -> Self {
                Self {
                    $($field: row.$field.into(),)*
                }
            }
        }
    };
}
use wire;
