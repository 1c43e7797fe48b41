//! Domain values that parse at the edge, so an invalid one cannot exist past it: identifiers,
//! events, statuses and actions, and the snapshot the rules decide on. Nothing here does I/O.

mod attribute_figures;
mod attributes;
mod audit;
pub mod dsa_schema;
mod event;
mod failure;
mod ids;
mod introspect;
mod schedule;
mod snapshot;
mod statement;
mod statement_2023;
mod status;
mod timer;
mod webhook;
mod windows;

pub use self::{
    attribute_figures::{
        AttributeReads, AttributeStats, AuthorContext, SnapshotAttributes, WindowStats,
    },
    attributes::{
        AttributeError, AttributeLimits, AttributeType, Attributes, DeclarationAt, Declarations,
        Declared, InvalidDeclaration, Scalar, Scope, attributes_from_json,
    },
    audit::{Actor, AuditAction, AuditEntry},
    event::{Event, EventBody, FieldError, MAX_ACTOR_LEN, MAX_WEIGHT, Priority},
    failure::{DeadLetter, DeadReason, FailureRecord},
    ids::{EntityId, EventId, Signal},
    introspect::field_names,
    schedule::{ScheduleMode, Timing},
    snapshot::{SignalStats, SignalTotals, Snapshot, WINDOWS},
    statement::{
        Automation, Classification, Ground, LabelVisibility, Restriction, Source, StatementBody,
        StatementDraft, new_puid,
    },
    statement_2023::upgrade_2023,
    status::{Action, ReviewDecision, Status},
    timer::{MAX_DURATION_SECS, OVERRIDE_TIMER, Timer, parse_duration},
    webhook::{
        ActionApplied, ActionReversed, AppealDecided, AppliedBy, EntityOverridden, LabelApplied,
        LabelRemoved, Payload, Receiver, ReviewEscalated, RulesActionApplied, RulesDemoted,
        StatementIssued, StatementSubmitted, Topic,
    },
    windows::{DAY_WINDOWS, DAYS_KEPT, MAX_HALF_LIFE_SECS, Windows, decay_weight, parse_half_life},
};

/// Why a value was refused; the HTTP layer adds the field name and batch position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

fn invalid(message: impl Into<String>) -> Invalid {
    Invalid(message.into())
}
