//! How each kind of setting is read from a layer and written back: text from the environment,
//! a flag or a default, or a native TOML value from the file. Errors name the problem and never
//! echo a secret.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::builder::ValueRange;
use figment::value::Value;
use secrecy::{ExposeSecret, SecretString};

use crate::credentials::{ApiToken, ServiceUrl, WebhookSecret};

/// Why a value given for a setting is refused: the reason [`super::ConfigError::Invalid`] shows
/// beside the setting's names, its value (never a secret's) and the layer it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidValue(String);

impl InvalidValue {
    pub fn reason(&self) -> &str {
        &self.0
    }
}

impl From<String> for InvalidValue {
    fn from(reason: String) -> Self {
        Self(reason)
    }
}

impl From<crate::credentials::TokenSpecError> for InvalidValue {
    fn from(error: crate::credentials::TokenSpecError) -> Self {
        Self(error.to_string())
    }
}

impl From<crate::credentials::WebhookSecretError> for InvalidValue {
    fn from(error: crate::credentials::WebhookSecretError) -> Self {
        Self(error.to_string())
    }
}

impl From<&str> for InvalidValue {
    fn from(reason: &str) -> Self {
        Self(reason.to_owned())
    }
}

/// A type a setting can have.
pub trait Setting: Sized {
    /// What `--help` calls the value.
    const VALUE_NAME: &'static str;
    /// Shown as `[REDACTED]`, and never echoed in an error.
    const SECRET: bool = false;

    /// Reads the value a layer gave.
    fn read(value: &Value) -> Result<Self, InvalidValue>;

    /// The value when no layer gives one: `Some(None)` for optional settings.
    fn absent() -> Option<Self> {
        None
    }

    /// The value as an environment variable or a flag would give it (secrets included);
    /// `None`: not set.
    fn to_text(&self) -> Option<String>;

    /// The value for `quiesce config` and `--help`: secrets redacted.
    fn show(&self) -> String {
        match self.to_text() {
            _ if Self::SECRET => "[REDACTED]".to_owned(),
            Some(text) => text,
            None => "none".to_owned(),
        }
    }

    /// How many values its flag takes: a switch may be given without one.
    fn flag_arity() -> ValueRange {
        ValueRange::new(1)
    }

    /// The value of a switch given without one.
    fn flag_missing_value() -> Option<&'static str> {
        None
    }
}

/// The text of a string value; other kinds are refused as `expected`.
pub(super) fn text<'a>(value: &'a Value, expected: &str) -> Result<&'a str, InvalidValue> {
    match value {
        Value::String(_, text) => Ok(text.trim()),
        _ => Err(format!("expected {expected}").into()),
    }
}

/// Any number TOML can hold, as a float.
pub(super) fn number(n: figment::value::Num) -> Option<f64> {
    n.to_f64()
        .or_else(|| n.to_i128().map(|i| i as f64))
        .or_else(|| n.to_u128().map(|u| u as f64))
}

/// Items of a list: a TOML array of strings, or comma-separated text.
pub(super) fn items(value: &Value) -> Result<Vec<String>, InvalidValue> {
    match value {
        Value::Array(_, values) => values
            .iter()
            .map(|v| text(v, "an array of strings").map(str::to_owned))
            .collect(),
        Value::String(_, raw) => Ok(raw
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()),
        _ => Err("expected a list, comma-separated or a TOML array of strings".into()),
    }
}

impl Setting for Duration {
    const VALUE_NAME: &'static str = "DURATION";

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        let raw = text(
            value,
            "a duration string such as \"15s\", \"500ms\" or \"2m\"",
        )?;
        humantime::parse_duration(raw)
            .map_err(|e| format!("{e}; expected a duration such as 15s, 500ms or 2m").into())
    }

    fn to_text(&self) -> Option<String> {
        Some(humantime::format_duration(*self).to_string())
    }
}

macro_rules! whole_numbers {
    ($($ty:ty),+) => {$(
        impl Setting for $ty {
            const VALUE_NAME: &'static str = "N";

            fn read(value: &Value) -> Result<Self, InvalidValue> {
                let number = match value {
                    Value::Num(_, n) => n.to_u128_lossy(),
                    Value::String(_, raw) => raw.trim().parse::<u128>().ok(),
                    _ => None,
                };
                number
                    .and_then(|n| <$ty>::try_from(n).ok())
                    .ok_or_else(|| format!("expected a whole number from 0 to {}", <$ty>::MAX).into())
            }

            fn to_text(&self) -> Option<String> {
                Some(self.to_string())
            }
        }
    )+};
}

whole_numbers!(u16, u32, usize);

impl Setting for f64 {
    const VALUE_NAME: &'static str = "NUMBER";

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        let number = match value {
            Value::Num(_, n) => number(*n),
            Value::String(_, raw) => raw.trim().parse::<f64>().ok(),
            _ => None,
        };
        number
            .filter(|n| n.is_finite())
            .ok_or_else(|| "expected a number, e.g. 0.2".into())
    }

    fn to_text(&self) -> Option<String> {
        Some(self.to_string())
    }
}

impl Setting for bool {
    const VALUE_NAME: &'static str = "BOOL";

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        match value {
            Value::Bool(_, b) => Ok(*b),
            Value::String(_, raw) => match raw.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err("expected true or false".into()),
            },
            _ => Err("expected true or false".into()),
        }
    }

    fn to_text(&self) -> Option<String> {
        Some(self.to_string())
    }

    fn flag_arity() -> ValueRange {
        ValueRange::new(0..=1)
    }

    fn flag_missing_value() -> Option<&'static str> {
        Some("true")
    }
}

impl Setting for String {
    const VALUE_NAME: &'static str = "TEXT";

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        match text(value, "a string")? {
            "" => Err("must not be empty".into()),
            text => Ok(text.to_owned()),
        }
    }

    fn to_text(&self) -> Option<String> {
        Some(self.clone())
    }
}

impl Setting for SecretString {
    const VALUE_NAME: &'static str = "SECRET";
    const SECRET: bool = true;

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        match text(value, "a string")? {
            "" => Err("must not be empty".into()),
            text => Ok(SecretString::from(text)),
        }
    }

    fn to_text(&self) -> Option<String> {
        Some(self.expose_secret().to_owned())
    }
}

/// A connection URL: shown with its password redacted, its address kept.
impl Setting for ServiceUrl {
    const VALUE_NAME: &'static str = "URL";

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        match text(value, "a URL")? {
            "" => Err("must not be empty".into()),
            text => Ok(ServiceUrl::from(text)),
        }
    }

    fn to_text(&self) -> Option<String> {
        Some(self.expose_secret().to_owned())
    }

    fn show(&self) -> String {
        self.shown()
    }
}

/// A connection URL that may be left unset.
impl Setting for Option<ServiceUrl> {
    const VALUE_NAME: &'static str = "URL";

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        ServiceUrl::read(value).map(Some)
    }

    fn absent() -> Option<Self> {
        Some(None)
    }

    fn to_text(&self) -> Option<String> {
        self.as_ref().map(|url| url.expose_secret().to_owned())
    }

    fn show(&self) -> String {
        self.as_ref()
            .map_or_else(|| "none".to_owned(), ServiceUrl::shown)
    }
}

/// A secret that may be left unset.
impl Setting for Option<SecretString> {
    const VALUE_NAME: &'static str = "SECRET";
    const SECRET: bool = true;

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        SecretString::read(value).map(Some)
    }

    fn absent() -> Option<Self> {
        Some(None)
    }

    fn to_text(&self) -> Option<String> {
        self.as_ref().map(|s| s.expose_secret().to_owned())
    }

    fn show(&self) -> String {
        self.as_ref()
            .map_or_else(|| "none".to_owned(), |_| "[REDACTED]".to_owned())
    }
}

impl Setting for SocketAddr {
    const VALUE_NAME: &'static str = "ADDR";

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        text(value, "host:port")?
            .parse()
            .map_err(|_| "expected host:port, e.g. 127.0.0.1:8080".into())
    }

    fn to_text(&self) -> Option<String> {
        Some(self.to_string())
    }
}

/// An address, or `off` for none.
impl Setting for Option<SocketAddr> {
    const VALUE_NAME: &'static str = "ADDR";

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        match text(value, "host:port or off")? {
            off if off.eq_ignore_ascii_case("off") => Ok(None),
            raw => raw
                .parse()
                .map(Some)
                .map_err(|_| "expected host:port, e.g. 127.0.0.1:9464, or off".into()),
        }
    }

    fn absent() -> Option<Self> {
        Some(None)
    }

    fn to_text(&self) -> Option<String> {
        Some(self.map_or_else(|| "off".to_owned(), |a| a.to_string()))
    }
}

impl Setting for Option<PathBuf> {
    const VALUE_NAME: &'static str = "FILE";

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        match text(value, "a file path")? {
            "" => Err("must not be empty".into()),
            path => Ok(Some(PathBuf::from(path))),
        }
    }

    fn absent() -> Option<Self> {
        Some(None)
    }

    fn to_text(&self) -> Option<String> {
        self.as_ref().map(|p| p.display().to_string())
    }
}

impl Setting for Option<String> {
    const VALUE_NAME: &'static str = "TEXT";

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        String::read(value).map(Some)
    }

    fn absent() -> Option<Self> {
        Some(None)
    }

    fn to_text(&self) -> Option<String> {
        self.clone()
    }
}

impl Setting for Option<WebhookSecret> {
    const VALUE_NAME: &'static str = "SECRET";
    const SECRET: bool = true;

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        Ok(Some(WebhookSecret::parse(text(value, "a whsec_ secret")?)?))
    }

    fn absent() -> Option<Self> {
        Some(None)
    }

    fn to_text(&self) -> Option<String> {
        self.as_ref().map(WebhookSecret::expose)
    }

    fn show(&self) -> String {
        self.as_ref()
            .map_or_else(|| "none".to_owned(), |_| "[REDACTED]".to_owned())
    }
}

/// How a list of secrets is shown: how many there are, never what they are.
fn redacted_list(len: usize) -> String {
    match len {
        0 => "none".to_owned(),
        n => format!("[REDACTED] x {n}"),
    }
}

impl Setting for Vec<WebhookSecret> {
    const VALUE_NAME: &'static str = "SECRETS";
    const SECRET: bool = true;

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        items(value)?
            .iter()
            .map(|s| WebhookSecret::parse(s).map_err(InvalidValue::from))
            .collect()
    }

    fn to_text(&self) -> Option<String> {
        Some(
            self.iter()
                .map(WebhookSecret::expose)
                .collect::<Vec<_>>()
                .join(","),
        )
    }

    fn show(&self) -> String {
        redacted_list(self.len())
    }
}

impl Setting for Vec<SecretString> {
    const VALUE_NAME: &'static str = "SECRETS";
    const SECRET: bool = true;

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        Ok(items(value)?.into_iter().map(SecretString::from).collect())
    }

    fn to_text(&self) -> Option<String> {
        Some(
            self.iter()
                .map(|s| s.expose_secret().to_owned())
                .collect::<Vec<_>>()
                .join(","),
        )
    }

    fn show(&self) -> String {
        redacted_list(self.len())
    }
}

/// Tokens are stored as hashes: shown by role and label, never by hash.
impl Setting for Vec<ApiToken> {
    const VALUE_NAME: &'static str = "SPECS";
    const SECRET: bool = true;

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        items(value)?
            .iter()
            .map(|s| ApiToken::parse(s).map_err(InvalidValue::from))
            .collect()
    }

    fn to_text(&self) -> Option<String> {
        Some(
            self.iter()
                .map(ApiToken::spec)
                .collect::<Vec<_>>()
                .join(","),
        )
    }

    fn show(&self) -> String {
        if self.is_empty() {
            return "none".to_owned();
        }
        self.iter()
            .map(|t| format!("{} {}", t.role.as_str(), t.label()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(raw: &str) -> Value {
        Value::from(raw)
    }

    #[test]
    fn values_read_from_text_and_from_toml_and_write_back() {
        assert_eq!(
            Duration::read(&string("2m")).unwrap(),
            Duration::from_secs(120)
        );
        assert_eq!(Duration::from_secs(120).to_text().unwrap(), "2m");
        assert!(Duration::read(&Value::from(5u32)).is_err());
        assert_eq!(u32::read(&string("4")).unwrap(), 4);
        assert_eq!(u32::read(&Value::from(4u32)).unwrap(), 4);
        assert!(u16::read(&string("70000")).is_err());
        assert!(u32::read(&string("-1")).is_err());
        assert!(bool::read(&string("yes")).unwrap());
        assert!(bool::read(&string("maybe")).is_err());
        assert_eq!(
            Option::<SocketAddr>::read(&string("off")).unwrap(),
            None,
            "off turns a listener off"
        );
        assert_eq!(
            Vec::<SecretString>::read(&string(" a, ,b ")).unwrap().len(),
            2
        );
        assert!(String::read(&string("")).is_err());
    }

    #[test]
    fn secrets_are_redacted_and_errors_never_echo_them() {
        let secret = SecretString::read(&string("hunter2-secret")).unwrap();
        assert_eq!(secret.show(), "[REDACTED]");
        let err = Vec::<WebhookSecret>::read(&string("whsec_hunter2-secret")).unwrap_err();
        assert!(!err.reason().contains("hunter2"), "{err}");
        let err = Vec::<ApiToken>::read(&string("admin:hunter2-secret")).unwrap_err();
        assert!(!err.reason().contains("hunter2"), "{err}");
    }
}
