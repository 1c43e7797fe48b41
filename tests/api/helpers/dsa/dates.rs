//! The dates of a statement as Laravel's rules read them: `date_format:Y-m-d` wants the value
//! PHP writes back unchanged, while `after_or_equal` and `before_or_equal` (in a field with a
//! `date_format`) compare what PHP's lenient `DateTime::createFromFormat('!Y-m-d', ..)` makes
//! of it, or failing that what Carbon parses (`Validator::checkDateTimeOrder`).

use chrono::{Days, Months, NaiveDate, NaiveDateTime};
use serde_json::Value;

/// `date_format:Y-m-d`: four-digit year, two-digit month and day, a real date (anything else
/// does not come back unchanged).
pub fn in_format(value: &Value) -> bool {
    let Some(text) = text(value) else {
        return false;
    };
    let widths: Vec<usize> = text.split('-').map(str::len).collect();
    widths == [4, 2, 2]
        && lenient(&text).is_some_and(|at| at.format("%Y-%m-%d").to_string() == text)
}

/// The moment a comparison reads: `2023-4-4` as 2023-04-04, a 13th month or a 32nd day carried
/// over as in PHP; else a date and time Carbon would read; else nothing (the comparison
/// fails).
pub fn read(value: &Value) -> Option<NaiveDateTime> {
    let text = text(value)?;
    lenient(&text).or_else(|| {
        ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S"]
            .iter()
            .find_map(|format| NaiveDateTime::parse_from_str(&text, format).ok())
    })
}

/// A rule's bound (`2000-01-01`), at its midnight.
pub fn bound(date: &str) -> NaiveDateTime {
    NaiveDate::parse_from_str(date, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .expect("a bound is a date")
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `createFromFormat('!Y-m-d')`: up to four digits of year, one or two of month and day,
/// out-of-range ones carried over, nothing after.
fn lenient(text: &str) -> Option<NaiveDateTime> {
    let parts: Vec<&str> = text.split('-').collect();
    let [year, month, day] = parts[..] else {
        return None;
    };
    let number = |s: &str, max: usize| {
        (!s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    let (year, month, day) = (number(year, 4)?, number(month, 2)?, number(day, 2)?);
    // Month 0 is the December before, day 0 the last day of the month before.
    let january = NaiveDate::from_ymd_opt(year as i32, 1, 1)?.and_hms_opt(0, 0, 0)?;
    let first = match month {
        0 => january.checked_sub_months(Months::new(1))?,
        m => january.checked_add_months(Months::new(m - 1))?,
    };
    match day {
        0 => first.checked_sub_days(Days::new(1)),
        d => first.checked_add_days(Days::new(u64::from(d) - 1)),
    }
}
