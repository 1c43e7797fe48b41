//! Actions once applied: their delivery to the platform. An action is applied behind the
//! version fence with the evaluation that decided it (`store::evaluations`), reversed by a
//! moderator (`moderation`), and announced through the outbox, delivered from here.

mod dsa;
mod outbox;

pub use self::{
    dsa::{DsaSettings, DsaSubmitter},
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

/// The HTTP client of a delivery: no custom TLS, each request bounded by `timeout`.
fn http_client(timeout: std::time::Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .expect("an HTTP client without custom TLS settings builds")
}

/// Runs `pass` until `shutdown`: again at once after a full batch (`pass` says so: more may
/// be due), after `idle` otherwise. The webhooks' dispatcher and the Transparency Database's
/// submitter alike.
async fn run_passes<F, Fut>(
    shutdown: tokio_util::sync::CancellationToken,
    idle: std::time::Duration,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    loop {
        let pause = if pass().await {
            std::time::Duration::ZERO
        } else {
            idle
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}
