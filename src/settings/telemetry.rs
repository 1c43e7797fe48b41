//! Logs and metrics.

use super::value::InvalidValue;
use std::net::SocketAddr;

use figment::value::Value;

use super::{declare::section, value::Setting};
use crate::telemetry::LogFormat;

section! {
    /// Logs and metrics.
    pub struct Telemetry("telemetry", heading "Logs and metrics"), flags TelemetryFlags {
        /// Listener serving only /metrics and /healthz, apart from the API; off for none.
        /// Processes on one host need different ports.
        metrics_listen: Option<SocketAddr> = Some(SocketAddr::from(([127, 0, 0, 1], 9464)));
        /// Log format, text or json; the level comes from RUST_LOG.
        #[value_name = "FORMAT"]
        log_format: LogFormat = LogFormat::Text;
    }
}

impl Setting for LogFormat {
    const VALUE_NAME: &'static str = "FORMAT";

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        match value.as_str().map(str::trim) {
            Some("text") => Ok(LogFormat::Text),
            Some("json") => Ok(LogFormat::Json),
            _ => Err("expected text or json".into()),
        }
    }

    fn to_text(&self) -> Option<String> {
        Some(
            match self {
                LogFormat::Text => "text",
                LogFormat::Json => "json",
            }
            .to_owned(),
        )
    }
}
