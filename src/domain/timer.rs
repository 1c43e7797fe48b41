//! Timed actions: an action taken for a while (`duration = "24h"` on a rule, or a moderator's
//! timed override) and the timer that ends it. When the timer ends, quiesce restores the entity
//! itself: the entity's evaluation at that time applies a `restore` action (version-checked,
//! deduplicated, delivered by the outbox and reversible like any other) that sets the status
//! the timed action found. The timer lives on the entity's row in Postgres (the truth) and is
//! scheduled in Redis like an evaluation; the repair sweep schedules a due timer Redis lost.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Invalid, Status};

/// Longest duration a timed action may have: a year.
pub const MAX_DURATION_SECS: i64 = 365 * 86_400;

/// What a timer set by a moderator's timed override names as its setter.
pub const OVERRIDE_TIMER: &str = "override";

/// The timer in force on an entity: when it ends, and what its end restores.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Timer {
    pub ends_at: DateTime<Utc>,
    /// The status the timed action found, which its end sets again.
    pub restores_to: Status,
    /// The timed action; `None` for a moderator's timed override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_id: Option<i64>,
    /// What set it: the rule's name, or `override`.
    pub set_by: String,
}

impl Timer {
    /// Whether the timer has ended at `at`.
    pub fn due(&self, at: DateTime<Utc>) -> bool {
        self.ends_at <= at
    }

    /// The reason its restore records.
    pub fn restore_reason(&self) -> String {
        match self.action_id {
            Some(id) => format!(
                "the timed action #{id} of {} ended; restored to {}",
                self.set_by,
                self.restores_to.as_str()
            ),
            None => format!(
                "the timed override ended; restored to {}",
                self.restores_to.as_str()
            ),
        }
    }
}

/// A timed action's length as a rule or a request names it: a positive whole number and a
/// unit (`s`, `m`, `h` or `d`), at most 365 days.
pub fn parse_duration(text: &str) -> Result<Duration, Invalid> {
    let seconds = super::windows::parse_seconds(text, MAX_DURATION_SECS).map_err(|_| {
        Invalid(format!(
            "duration {text:?} must be a whole number and a unit (s, m, h or d), from 1s to 365d"
        ))
    })?;
    Ok(Duration::from_secs(seconds as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_their_unit_and_bounds() {
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(
            parse_duration("365d"),
            Ok(Duration::from_secs(365 * 86_400))
        );
        for bad in ["", "24", "0h", "366d", "1.5h", "h", "-1m"] {
            let error = parse_duration(bad).unwrap_err();
            assert!(error.0.contains("duration"), "{bad:?}: {error}");
        }
    }

    #[test]
    fn a_timer_is_due_at_its_end() {
        let ends_at = DateTime::<Utc>::UNIX_EPOCH + chrono::Duration::seconds(60);
        let timer = Timer {
            ends_at,
            restores_to: Status::Visible,
            action_id: Some(7),
            set_by: "timeout".into(),
        };
        assert!(!timer.due(ends_at - chrono::Duration::milliseconds(1)));
        assert!(timer.due(ends_at));
        assert!(timer.restore_reason().contains("#7"));
    }
}
