//! Actions once applied: their delivery to the platform. An action is applied behind the
//! version fence with the evaluation that decided it (`store::evaluations`), reversed by a
//! moderator (`moderation`), and announced through the outbox, delivered from here.

mod dsa;
mod outbox;

pub use self::{
    dsa::{DSA_BATCH, DsaSettings, DsaSubmitter},
    outbox::{DeliveryRound, DeliverySettings, Dispatcher},
};
