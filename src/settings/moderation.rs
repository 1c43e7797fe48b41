//! The rules, and what follows a moderator's decision.

use super::value::InvalidValue;
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use figment::value::Value;

use super::{
    declare::{nonzero, section},
    value::{Setting, text},
};

section! {
    /// The rules, and what follows a moderator's decision.
    pub struct Moderation("moderation", heading "Moderation"), flags ModerationFlags {
        /// Rules file (TOML) that seeds rules version 1 when the database has no version yet.
        /// Once versions exist the database's active version is in force and this file is not
        /// read again (publish a new version instead). Default: rules/default.toml when the
        /// working directory has it (a checkout, `make run`), else `built-in`, the copy of that
        /// file compiled into the binary.
        rules: RulesSource = RulesSource::shipped();
        /// How often each process checks which rules version is active, besides hearing of
        /// publishes at once (Postgres LISTEN): what a lost notification can cost at most.
        rules_poll_interval: Duration = Duration::from_secs(10), check nonzero;
        /// How long a reversal keeps automation from redoing the action (an implied override;
        /// also the default `until` of an override).
        override_after_reversal: Duration = Duration::from_secs(7 * 24 * 3600);
        /// How long a moderator's claim on a review queue item lasts; past it another
        /// moderator may claim the item.
        review_claim: Duration = Duration::from_secs(10 * 60), check nonzero;
        /// How long after a restricting decision its author may appeal it (DSA Art. 20 asks
        /// for at least six months).
        appeal_window: Duration = Duration::from_secs(183 * 24 * 3600), check nonzero;
        /// An appeal waiting longer than this fires the appeals alert; exported as
        /// quiesce_appeal_wait_alert_seconds.
        appeal_alert_after: Duration = Duration::from_secs(48 * 3600), check nonzero;
        /// A rule's 24h reversal rate above which the reversal-rate alert fires; exported as
        /// quiesce_reversal_rate_alert_threshold.
        #[value_name = "FRACTION"]
        reversal_alert_threshold: f64 = 0.2, check fraction;
        /// The guard: a live rule whose last `guard_actions` actions (within `guard_window`)
        /// moderators reversed at a rate above `guard_threshold` is turned to shadow by quiesce
        /// (a new rules version by quiesce-guard). A rule with `guard = false` is left alone.
        guard: bool = true;
        /// How many of a rule's latest actions the guard weighs; it acts only once the rule has
        /// taken this many within the window.
        guard_actions: u32 = 50, check nonzero;
        /// The reversal rate over those actions above which the guard turns the rule to shadow.
        #[value_name = "FRACTION"]
        guard_threshold: f64 = 0.5, check fraction;
        /// How far back the guard looks for those actions.
        guard_window: Duration = Duration::from_secs(7 * 24 * 3600), check nonzero;
    }
}

fn fraction(value: &f64) -> Result<(), InvalidValue> {
    if (0.0..=1.0).contains(value) {
        Ok(())
    } else {
        Err("must be a fraction from 0 to 1, e.g. 0.2".into())
    }
}

/// The shipped rules file, relative to the working directory.
pub const SHIPPED_RULES: &str = "rules/default.toml";

/// Where the seed rules come from: a file, or the copy of `rules/default.toml` compiled into
/// the binary (for a binary run outside a checkout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RulesSource {
    File(PathBuf),
    BuiltIn,
}

impl RulesSource {
    /// The shipped file when the working directory has it; else the built-in copy.
    pub fn shipped() -> Self {
        let path = Path::new(SHIPPED_RULES);
        if path.is_file() {
            Self::File(path.to_owned())
        } else {
            Self::BuiltIn
        }
    }

    /// The file to read, or `None` for the built-in copy.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Self::File(path) => Some(path),
            Self::BuiltIn => None,
        }
    }
}

impl Setting for RulesSource {
    const VALUE_NAME: &'static str = "FILE";

    fn read(value: &Value) -> Result<Self, InvalidValue> {
        match text(value, "a file path or built-in")? {
            "" => Err("must not be empty (built-in for the rules compiled in)".into()),
            "built-in" => Ok(Self::BuiltIn),
            path => Ok(Self::File(PathBuf::from(path))),
        }
    }

    fn to_text(&self) -> Option<String> {
        Some(match self {
            Self::File(path) => path.display().to_string(),
            Self::BuiltIn => "built-in".to_owned(),
        })
    }
}
