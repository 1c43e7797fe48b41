//! The trailing figures a snapshot may read beyond its totals: minute windows (1m to 24h, from
//! minute buckets), day windows (7d to 90d, from day buckets) and decayed counts (each event
//! weighing 0.5^(age / half-life)). A snapshot reads only those the rules use ([`Windows`]),
//! and keeps what it read, so that a backtest replays it exactly.

use super::Invalid;

/// The day windows rules can count over (by UTC receive day): a window of N days sums the day
/// buckets of today and the N days before it, as a minute window sums the current minute and
/// the N minutes before it (never less than the window).
pub const DAY_WINDOWS: [(&str, i64); 3] = [("7d", 7), ("30d", 30), ("90d", 90)];

/// Day buckets kept per entity and signal: today and the 90 days before (the longest window).
/// A fold deletes the older ones of the entities it folds, so no entity and signal ever has
/// more rows than this.
pub const DAYS_KEPT: i64 = 91;

/// Shortest half-life a decayed count may name: an event's age is whole minutes, from the start
/// of its bucket (its minute today, its day before) to the start of the current minute, so a
/// shorter one would weigh an event by where in its minute it fell.
pub const MIN_HALF_LIFE_SECS: i64 = 3600;

/// Longest half-life a decayed count may name: older day buckets are not kept, so a longer
/// one would count a 90-day-old event at more than half its weight and then drop it whole.
pub const MAX_HALF_LIFE_SECS: i64 = 90 * 86_400;

/// Which trailing figures a snapshot reads: only those the rules use (each costs a read).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Windows {
    /// The minute windows of [`super::WINDOWS`] (1m to 24h).
    pub minutes: bool,
    /// The day windows of [`DAY_WINDOWS`] (7d, 30d, 90d).
    pub days: bool,
    /// The half-lives of the decayed counts, as the rules name them (`"30d"`), sorted, once
    /// each.
    pub half_lives: Vec<String>,
}

impl Windows {
    /// No trailing figure: the totals only.
    pub const NONE: Windows = Windows {
        minutes: false,
        days: false,
        half_lives: Vec::new(),
    };

    /// Every window (minutes and days) and no decayed count: what the read API and the console
    /// show.
    pub const ALL: Windows = Windows {
        minutes: true,
        days: true,
        half_lives: Vec::new(),
    };

    /// Whether any day bucket is read (a day window or a decayed count).
    pub fn reads_days(&self) -> bool {
        self.days || !self.half_lives.is_empty()
    }
}

/// A half-life as a rule names it: a positive whole number and a unit (`s`, `m`, `h` or `d`),
/// from 1 hour to 90 days; in seconds.
pub fn parse_half_life(text: &str) -> Result<i64, Invalid> {
    parse_seconds(text, MAX_HALF_LIFE_SECS)
        .ok()
        .filter(|seconds| *seconds >= MIN_HALF_LIFE_SECS)
        .ok_or_else(|| {
            Invalid(format!(
                "half-life {text:?} must be a whole number and a unit (s, m, h or d), from 1h to 90d"
            ))
        })
}

/// A positive whole number and a unit (`s`, `m`, `h` or `d`), at most `max` seconds; in
/// seconds.
pub(super) fn parse_seconds(text: &str, max: i64) -> Result<i64, Invalid> {
    let problem = || Invalid(format!("{text:?} is not a span of 1s to {max}s"));
    let unit_at = text
        .char_indices()
        .last()
        .map(|(i, _)| i)
        .ok_or_else(problem)?;
    let (number, unit) = text.split_at(unit_at);
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(problem()),
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(problem());
    }
    let seconds = number
        .parse::<i64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(problem)?;
    if seconds <= 0 || seconds > max {
        return Err(problem());
    }
    Ok(seconds)
}

/// What one event of age `age_secs` weighs in a decayed count of this half-life.
pub fn decay_weight(age_secs: f64, half_life_secs: i64) -> f64 {
    0.5f64.powf(age_secs.max(0.0) / half_life_secs as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_lives_parse_with_their_unit_and_bounds() {
        assert_eq!(parse_half_life("30d"), Ok(30 * 86_400));
        assert_eq!(parse_half_life("3600s"), Ok(3600));
        assert_eq!(parse_half_life("2h"), Ok(7200));
        assert_eq!(parse_half_life("90m"), Ok(5400));
        for bad in [
            "59m",
            "90s",
            "",
            "d",
            "30",
            "0d",
            "-1d",
            "1.5d",
            "91d",
            "30w",
            "9999999999999999999d",
        ] {
            assert!(parse_half_life(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_event_weighs_half_after_one_half_life() {
        assert_eq!(decay_weight(0.0, 60), 1.0);
        assert!((decay_weight(60.0, 60) - 0.5).abs() < 1e-12);
        assert!((decay_weight(120.0, 60) - 0.25).abs() < 1e-12);
        assert_eq!(
            decay_weight(-5.0, 60),
            1.0,
            "a clock skew never weighs more than 1"
        );
    }
}
