//! The rules, and what follows a moderator's decision.

use std::{path::PathBuf, time::Duration};

use super::declare::section;

section! {
    /// The rules, and what follows a moderator's decision.
    pub struct Moderation("moderation", heading "Moderation"), flags ModerationFlags {
        /// Rules file (TOML); none: the shipped default rules.
        rules: Option<PathBuf> = None;
        /// How long a reversal keeps automation from redoing the action (an implied override;
        /// also the default `until` of an override).
        override_after_reversal: Duration = Duration::from_secs(7 * 24 * 3600);
        /// A rule's 24h reversal rate above which the reversal-rate alert fires; exported as
        /// quiesce_reversal_rate_alert_threshold.
        #[value_name = "FRACTION"]
        reversal_alert_threshold: f64 = 0.2, check fraction;
    }
}

fn fraction(value: &f64) -> Result<(), String> {
    if (0.0..=1.0).contains(value) {
        Ok(())
    } else {
        Err("must be a fraction from 0 to 1, e.g. 0.2".into())
    }
}
