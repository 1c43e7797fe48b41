//! When an entity is evaluated, and how a failed evaluation is retried.

use super::value::InvalidValue;
use std::time::Duration;

use figment::value::Value;

use super::{
    declare::{nonzero, section},
    value::Setting,
};
use crate::domain::{ScheduleMode, Timing};

section! {
    /// When an entity is evaluated, and how a failed evaluation is retried.
    pub struct Schedule("schedule", heading "Schedule"), flags ScheduleFlags {
        /// Quiet time after an entity's last event before it is evaluated.
        debounce_window: Duration = Duration::from_secs(15), check nonzero;
        /// Longest an entity with pending events waits, however steady its stream; at least the
        /// debounce window.
        max_wait: Duration = Duration::from_secs(120);
        /// `sliding` (each event moves the fire time to now + window) or `fixed` (the first
        /// pending event fixes it).
        schedule_mode: ScheduleMode = ScheduleMode::Sliding;
        /// Failed attempts (errors, panics, timeouts, expired leases) before an entity is
        /// dead-lettered.
        max_attempts: u32 = 5, check nonzero;
        /// Backoff after the first failed attempt; doubles per attempt, with full jitter.
        backoff_base: Duration = Duration::from_secs(1), check nonzero;
        /// Longest backoff; at least backoff_base.
        backoff_max: Duration = Duration::from_secs(300);
    }
}

impl Schedule {
    /// How the queue's scripts take these settings.
    pub fn timing(&self) -> Timing {
        Timing {
            window_ms: self.debounce_window.as_millis() as u64,
            max_wait_ms: self.max_wait.as_millis() as u64,
            mode: self.schedule_mode,
            max_attempts: self.max_attempts,
            backoff_base_ms: self.backoff_base.as_millis() as u64,
            backoff_max_ms: self.backoff_max.as_millis() as u64,
        }
    }
}

impl Setting for ScheduleMode {
    const VALUE_NAME: &'static str = "MODE";

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        match value.as_str().map(str::trim) {
            Some("sliding") => Ok(ScheduleMode::Sliding),
            Some("fixed") => Ok(ScheduleMode::Fixed),
            _ => Err("expected sliding or fixed".into()),
        }
    }

    fn to_text(&self) -> Option<String> {
        Some(self.as_str().to_owned())
    }
}
