//! Actions once applied: their delivery to the platform. An action is applied behind the
//! version fence with the evaluation that decided it (`store::evaluations`), reversed by a
//! moderator (`moderation`), and announced through the outbox, delivered from here.

mod outbox;

pub use self::outbox::{DeliveryRound, DeliverySettings, Dispatcher};
