//! Verification of signed inbound webhooks, on the raw body before any JSON parsing:
//! Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>`)
//! and the GitHub style `X-Hub-Signature-256: sha256=<hex>` with `X-GitHub-Delivery`. Several
//! secrets may be configured at once, so a secret can be rotated without downtime. Comparisons
//! are constant time over the whole MAC (a truncated or empty signature never matches).
//!
//! The GitHub style signs the body alone, with no timestamp, so a captured request verifies
//! forever: ingest takes each delivery once ([`github_delivery`] names it).

use std::time::Duration;

use axum::http::HeaderMap;
use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;

use crate::credentials::{WebhookSecret, decode_hex};

/// The delivery id header GitHub sends with each delivery (a GUID); required on GitHub-signed
/// requests.
const DELIVERY: &str = "x-github-delivery";
/// The longest delivery id taken (GitHub's are 36 characters).
const MAX_DELIVERY_ID: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the {0} header is missing")]
    MissingHeader(&'static str),
    #[error("the {0} header is malformed")]
    Malformed(&'static str),
    #[error("the {0} header is empty")]
    Empty(&'static str),
    #[error("the webhook-timestamp is {0} seconds away from now, more than the tolerance")]
    OutsideTolerance(i64),
    #[error("no signature matches")]
    Mismatch,
}

/// Secrets that inbound requests must be signed with.
#[derive(Clone, Default)]
pub struct InboundSecrets {
    /// Standard Webhooks secrets (`whsec_...`).
    pub standard: Vec<WebhookSecret>,
    /// GitHub-style shared secrets (raw bytes).
    pub github: Vec<Vec<u8>>,
    pub tolerance: Duration,
}

impl InboundSecrets {
    /// What requests must be signed with: any of these secrets, within `tolerance` of now.
    pub fn new(standard: &[WebhookSecret], github: &[SecretString], tolerance: Duration) -> Self {
        Self {
            standard: standard.to_vec(),
            github: github
                .iter()
                .map(|s| s.expose_secret().as_bytes().to_vec())
                .collect(),
            tolerance,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.standard.is_empty() && self.github.is_empty()
    }

    /// Checks a request: the Standard Webhooks headers when present, else GitHub's.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<(), SignatureError> {
        if is_github(headers) {
            return self.verify_github(headers, body);
        }
        self.verify_standard(headers, body, now)
    }

    fn verify_standard(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: i64,
    ) -> Result<(), SignatureError> {
        let header = |name: &'static str| {
            headers
                .get(name)
                .ok_or(SignatureError::MissingHeader(name))?
                .to_str()
                .map_err(|_| SignatureError::Malformed(name))
        };
        let id = header("webhook-id")?;
        // As the reference libraries do: an empty message id is no id.
        if id.is_empty() {
            return Err(SignatureError::Empty("webhook-id"));
        }
        let timestamp: i64 = header("webhook-timestamp")?
            .parse()
            .map_err(|_| SignatureError::Malformed("webhook-timestamp"))?;
        // Every webhook-signature line counts (a header sent twice is one list, RFC 9110
        // section 5.3), each a space-separated list of signatures.
        let mut lines = Vec::new();
        for value in headers.get_all("webhook-signature") {
            lines.push(
                value
                    .to_str()
                    .map_err(|_| SignatureError::Malformed("webhook-signature"))?,
            );
        }
        if lines.is_empty() {
            return Err(SignatureError::MissingHeader("webhook-signature"));
        }
        let skew = now - timestamp;
        if skew.unsigned_abs() > self.tolerance.as_secs() {
            return Err(SignatureError::OutsideTolerance(skew));
        }
        let candidates: Vec<Vec<u8>> = lines
            .iter()
            .flat_map(|line| line.split(' '))
            .filter_map(|s| s.strip_prefix("v1,"))
            .filter_map(|s| STANDARD.decode(s).ok())
            .collect();
        let matches = self.standard.iter().any(|secret| {
            candidates.iter().any(|candidate| {
                let mut mac = secret.mac();
                mac.update(format!("{id}.{timestamp}.").as_bytes());
                mac.update(body);
                mac.verify_slice(candidate).is_ok()
            })
        });
        if matches {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }

    fn verify_github(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), SignatureError> {
        const HEADER: &str = "x-hub-signature-256";
        delivery_id(headers)?;
        let value = headers
            .get(HEADER)
            .and_then(|v| v.to_str().ok())
            .ok_or(SignatureError::Malformed(HEADER))?;
        let candidate = value
            .strip_prefix("sha256=")
            .and_then(decode_hex)
            .ok_or(SignatureError::Malformed(HEADER))?;
        let matches = self.github.iter().any(|secret| {
            let mut mac =
                Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
            mac.update(body);
            mac.verify_slice(&candidate).is_ok()
        });
        if matches {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }
}

/// Whether a request is signed the GitHub way (what [`InboundSecrets::verify`] checks then).
fn is_github(headers: &HeaderMap) -> bool {
    headers.contains_key("x-hub-signature-256") && !headers.contains_key("webhook-signature")
}

/// The `X-GitHub-Delivery` id: present, not empty, visible ASCII, at most 128 characters.
fn delivery_id(headers: &HeaderMap) -> Result<&str, SignatureError> {
    let id = headers
        .get(DELIVERY)
        .ok_or(SignatureError::MissingHeader(DELIVERY))?
        .to_str()
        .map_err(|_| SignatureError::Malformed(DELIVERY))?;
    if id.is_empty() {
        return Err(SignatureError::Empty(DELIVERY));
    }
    if id.len() > MAX_DELIVERY_ID || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(SignatureError::Malformed(DELIVERY));
    }
    Ok(id)
}

/// The delivery id of a request that `signing` verifies in the GitHub style, which ingest
/// takes once; `None` for any other request.
pub fn github_delivery<'h>(
    headers: &'h HeaderMap,
    signing: Option<&InboundSecrets>,
) -> Option<&'h str> {
    match signing {
        Some(_) if is_github(headers) => delivery_id(headers).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue};

    use super::*;

    fn secrets() -> InboundSecrets {
        InboundSecrets {
            standard: vec![WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap()],
            github: vec![b"It's a Secret to Everybody".to_vec()],
            tolerance: Duration::from_secs(300),
        }
    }

    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1614265330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn standard(signature: &str, timestamp: i64) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("webhook-id", HeaderValue::from_static(ID));
        headers.insert(
            "webhook-timestamp",
            HeaderValue::from_str(&timestamp.to_string()).unwrap(),
        );
        headers.insert(
            "webhook-signature",
            HeaderValue::from_str(signature).unwrap(),
        );
        headers
    }

    #[test]
    fn the_standard_webhooks_vector_passes_and_tampering_fails() {
        let s = secrets();
        assert_eq!(s.verify(&standard(SIG, TS), BODY, TS), Ok(()));
        let mut tampered = BODY.to_vec();
        tampered[3] ^= 1;
        assert_eq!(
            s.verify(&standard(SIG, TS), &tampered, TS),
            Err(SignatureError::Mismatch)
        );
        for bad in [
            "v1,",
            "v1,g0hM9SsE+OTPJTGt",
            &format!("{SIG}AAAA"),
            "v2,abc",
            "",
        ] {
            assert_eq!(
                s.verify(&standard(bad, TS), BODY, TS),
                Err(SignatureError::Mismatch),
                "{bad:?}"
            );
        }
        assert!(matches!(
            s.verify(&standard(SIG, TS), BODY, TS + 301),
            Err(SignatureError::OutsideTolerance(301))
        ));
        assert!(matches!(
            s.verify(&standard(SIG, TS), BODY, TS - 301),
            Err(SignatureError::OutsideTolerance(-301))
        ));
        for missing in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
            let mut headers = standard(SIG, TS);
            headers.remove(missing);
            assert_eq!(
                s.verify(&headers, BODY, TS),
                Err(SignatureError::MissingHeader(missing))
            );
        }
    }

    #[test]
    fn several_signatures_and_rotated_secrets_are_accepted() {
        let mut s = secrets();
        s.standard.insert(
            0,
            WebhookSecret::parse("whsec_QVFBQUFBQUFBQUFBQUFBQUFBQUE=").unwrap(),
        );
        let both = format!("v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= {SIG}");
        assert_eq!(s.verify(&standard(&both, TS), BODY, TS), Ok(()));
    }

    #[test]
    fn every_webhook_signature_line_is_considered() {
        let s = secrets();
        let mut headers = standard("v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", TS);
        assert_eq!(s.verify(&headers, BODY, TS), Err(SignatureError::Mismatch));
        headers.append("webhook-signature", HeaderValue::from_static(SIG));
        assert_eq!(s.verify(&headers, BODY, TS), Ok(()));
        // In either order.
        let mut headers = standard(SIG, TS);
        headers.append("webhook-signature", HeaderValue::from_static("v1,AAAA"));
        assert_eq!(s.verify(&headers, BODY, TS), Ok(()));
    }

    #[test]
    fn an_empty_webhook_id_is_refused() {
        let s = secrets();
        let mut headers = standard(SIG, TS);
        headers.insert("webhook-id", HeaderValue::from_static(""));
        assert_eq!(
            s.verify(&headers, BODY, TS),
            Err(SignatureError::Empty("webhook-id"))
        );
        // Even when the signature is right for the empty id.
        let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        headers.insert(
            "webhook-signature",
            HeaderValue::from_str(&secret.sign("", TS, BODY)).unwrap(),
        );
        assert_eq!(
            s.verify(&headers, BODY, TS),
            Err(SignatureError::Empty("webhook-id"))
        );
    }

    #[test]
    fn the_github_vector_passes() {
        let s = secrets();
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-github-delivery",
            HeaderValue::from_static("72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        );
        headers.insert(
            "x-hub-signature-256",
            HeaderValue::from_static(
                "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            ),
        );
        assert_eq!(s.verify(&headers, b"Hello, World!", 0), Ok(()));
        assert_eq!(
            s.verify(&headers, b"Hello, World?", 0),
            Err(SignatureError::Mismatch)
        );
        // Without a delivery id, or with an empty or unusable one, even a valid signature fails.
        let mut without = headers.clone();
        without.remove("x-github-delivery");
        assert_eq!(
            s.verify(&without, b"Hello, World!", 0),
            Err(SignatureError::MissingHeader("x-github-delivery"))
        );
        for (bad, error) in [
            ("", SignatureError::Empty("x-github-delivery")),
            ("a b", SignatureError::Malformed("x-github-delivery")),
            (
                &"a".repeat(129),
                SignatureError::Malformed("x-github-delivery"),
            ),
        ] {
            let mut headers = headers.clone();
            headers.insert("x-github-delivery", HeaderValue::from_str(bad).unwrap());
            assert_eq!(
                s.verify(&headers, b"Hello, World!", 0),
                Err(error),
                "{bad:?}"
            );
        }
        headers.insert(
            "x-hub-signature-256",
            HeaderValue::from_static("sha256=7571"),
        );
        assert_eq!(
            s.verify(&headers, b"Hello, World!", 0),
            Err(SignatureError::Mismatch)
        );
    }
}

#[cfg(test)]
mod properties {
    use axum::http::{HeaderMap, HeaderValue};
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Random headers and bodies never panic the verifier, and never verify.
        #[test]
        fn random_signatures_never_verify(
            id in "[ -~]{0,40}",
            timestamp in any::<i64>(),
            signature in "[ -~]{0,120}",
            body in prop::collection::vec(any::<u8>(), 0..256),
            github in proptest::option::of("[ -~]{0,80}"),
        ) {
            let secrets = InboundSecrets {
                standard: vec![WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap()],
                github: vec![b"secret".to_vec()],
                tolerance: Duration::from_secs(300),
            };
            let mut headers = HeaderMap::new();
            for (name, value) in [("webhook-id", id), ("webhook-timestamp", timestamp.to_string()), ("webhook-signature", signature)] {
                if let Ok(value) = HeaderValue::from_str(&value) {
                    headers.insert(name, value);
                }
            }
            if let Some(github) = github.and_then(|g| HeaderValue::from_str(&g).ok()) {
                headers.insert("x-hub-signature-256", github);
            }
            prop_assert!(secrets.verify(&headers, &body, timestamp).is_err());
        }
    }
}
