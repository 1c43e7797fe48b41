//! The dates of a statement as Laravel's rules read them: `date_format:Y-m-d-H` wants the
//! value PHP writes back unchanged, while `after` and `after_or_equal` compare what PHP's
//! lenient `createFromFormat` makes of it, or failing that what Carbon parses.

use chrono::{Days, Months, NaiveDate, NaiveDateTime};
use serde_json::Value;

/// `date_format:Y-m-d-H`: four-digit year, two-digit month, day and hour, a real date and an
/// hour below 24 (anything else does not come back unchanged).
pub fn in_format(value: &Value) -> bool {
    let Some(text) = text(value) else {
        return false;
    };
    let parts: Vec<&str> = text.split('-').collect();
    let widths = parts.iter().map(|p| p.len()).collect::<Vec<_>>();
    widths == [4, 2, 2, 2]
        && lenient(&text).is_some_and(|at| at.format("%Y-%m-%d-%H").to_string() == text)
}

/// The date `after` and `after_or_equal` compare: `2023-4-4-4` reads as 2023-04-04 04:00, a
/// 13th month or a 24th hour overflows as in PHP; a value without the hour as a plain date
/// or date and time; anything else as nothing (and fails the comparison).
pub fn read(value: &Value) -> Option<NaiveDateTime> {
    let text = text(value)?;
    lenient(&text).or_else(|| {
        ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S"]
            .iter()
            .find_map(|format| NaiveDateTime::parse_from_str(&text, format).ok())
            .or_else(|| {
                let date = NaiveDate::parse_from_str(&text, "%Y-%m-%d").ok()?;
                date.and_hms_opt(0, 0, 0)
            })
    })
}

/// `after:2020-01-01`: its midnight.
pub fn start() -> NaiveDateTime {
    NaiveDate::from_ymd_opt(2020, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .unwrap()
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `createFromFormat('!Y-m-d-H')`: up to four digits of year, one or two of month, day and
/// hour, out-of-range ones carried over.
fn lenient(text: &str) -> Option<NaiveDateTime> {
    let parts: Vec<&str> = text.split('-').collect();
    let [year, month, day, hour] = parts[..] else {
        return None;
    };
    let number = |s: &str, max: usize| {
        (!s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    let (year, month, day, hour) = (
        number(year, 4)?,
        number(month, 2)?,
        number(day, 2)?,
        number(hour, 2)?,
    );
    // Month 0 is the December before, day 0 the last day of the month before.
    let january = NaiveDate::from_ymd_opt(year as i32, 1, 1)?.and_hms_opt(0, 0, 0)?;
    let first = match month {
        0 => january.checked_sub_months(Months::new(1))?,
        m => january.checked_add_months(Months::new(m - 1))?,
    };
    let date = match day {
        0 => first.checked_sub_days(Days::new(1))?,
        d => first.checked_add_days(Days::new(u64::from(d) - 1))?,
    };
    date.checked_add_signed(chrono::TimeDelta::hours(i64::from(hour)))
}
