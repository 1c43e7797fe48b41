//! Actions once applied: their delivery to the platform. An action is applied behind the
//! version fence with the evaluation that decided it (`store::evaluations`), reversed by a
//! moderator (`moderation`), and announced through the outbox, delivered from here.

mod dsa;
mod outbox;

pub use self::{
    dsa::{DSA_BATCH, DsaSettings, DsaSubmitter},
    outbox::{DeliveryRound, DeliverySettings, Dispatcher},
};

/// A delivery's backoff after `attempts` failed ones, with full jitter: a random share of
/// min(max, base * 2^(attempts - 1)). The webhooks' and the Transparency Database's alike.
fn full_jitter(
    base: std::time::Duration,
    max: std::time::Duration,
    attempts: i32,
) -> std::time::Duration {
    use rand::Rng;
    let exponent = attempts.clamp(1, 30) as u32 - 1;
    let cap = base.saturating_mul(2u32.saturating_pow(exponent)).min(max);
    cap.mul_f64(rand::rng().random::<f64>())
}
