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

/// How long a receiver that answered 429 asks to be left alone: its `Retry-After` (RFC 9110
/// section 10.2.3: a number of seconds, or an HTTP date, in any of the three forms a recipient
/// must read), at most `max`; `None` for another answer, or one without a header that reads.
/// The webhooks' dispatcher and the Transparency Database's submitter alike.
fn retry_after(
    status: u16,
    headers: &reqwest::header::HeaderMap,
    max: std::time::Duration,
) -> Option<std::time::Duration> {
    if status != 429 {
        return None;
    }
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    let wait = match value.parse::<u64>() {
        Ok(seconds) => std::time::Duration::from_secs(seconds),
        Err(_) => {
            let at = http_date(value)?;
            (at - chrono::Utc::now()).to_std().unwrap_or_default()
        }
    };
    Some(wait.min(max))
}

/// An HTTP date: the IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), or the obsolete RFC 850
/// (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6 08:49:37 1994`) forms.
fn http_date(value: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    if let Ok(at) = chrono::DateTime::parse_from_rfc2822(value) {
        return Some(at.to_utc());
    }
    ["%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y"]
        .iter()
        .find_map(|format| chrono::NaiveDateTime::parse_from_str(value, format).ok())
        .map(|at| at.and_utc())
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};

    use super::*;

    fn asked(value: &str) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
        retry_after(429, &headers, Duration::from_secs(600))
    }

    #[test]
    fn retry_after_reads_seconds_and_every_form_of_http_date() {
        assert_eq!(asked("2"), Some(Duration::from_secs(2)));
        assert_eq!(asked(" 120 "), Some(Duration::from_secs(120)));
        assert_eq!(
            asked("86400"),
            Some(Duration::from_secs(600)),
            "at most max"
        );
        let in_a_minute = chrono::Utc::now() + chrono::Duration::seconds(60);
        for form in [
            "%a, %d %b %Y %H:%M:%S GMT",
            "%A, %d-%b-%y %H:%M:%S GMT",
            "%a %b %e %H:%M:%S %Y",
        ] {
            let wait = asked(&in_a_minute.format(form).to_string()).unwrap();
            assert!(
                wait > Duration::from_secs(55) && wait <= Duration::from_secs(60),
                "{form}: {wait:?}"
            );
        }
        assert_eq!(
            asked("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(Duration::ZERO),
            "a date past is now"
        );
        assert_eq!(asked("soon"), None);
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("2"));
        assert_eq!(
            retry_after(503, &headers, Duration::from_secs(600)),
            None,
            "a 429's only"
        );
    }
}
