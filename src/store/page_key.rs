//! A place in a listing ordered by a time and an id (dead letters oldest first, an entity's
//! evaluations newest first): the `next_cursor` a page hands back and the next request sends.

use chrono::{DateTime, Utc};

/// After (or before) this row: its time in unix microseconds (Postgres' precision), then its
/// id among rows of the same time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageKey {
    pub at_micros: i64,
    pub id: i64,
}

impl PageKey {
    /// The key of a row at `at` with `id`.
    pub fn of(at: DateTime<Utc>, id: i64) -> Self {
        Self {
            at_micros: at.timestamp_micros(),
            id,
        }
    }

    /// `<time, unix microseconds>.<id>`, as [`PageKey::encode`] writes it.
    pub fn parse(raw: &str) -> Option<Self> {
        let (at, id) = raw.split_once('.')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(at) || !digits(id) {
            return None;
        }
        Some(Self {
            at_micros: at.parse().ok()?,
            id: id.parse().ok()?,
        })
    }

    pub fn encode(&self) -> String {
        format!("{}.{}", self.at_micros, self.id)
    }

    /// The time, for a statement that compares it with a `timestamptz` column.
    pub fn at(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_micros(self.at_micros).unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_wrote_and_refuses_anything_else() {
        let key = PageKey {
            at_micros: 1_764_000_000_123_456,
            id: 42,
        };
        assert_eq!(PageKey::parse(&key.encode()), Some(key));
        assert_eq!(PageKey::of(key.at(), 42), key);
        for bad in ["", "1", "1.", ".1", "a.1", "1.-2", "+1.2", "1.2.3"] {
            assert_eq!(PageKey::parse(bad), None, "{bad}");
        }
    }
}
