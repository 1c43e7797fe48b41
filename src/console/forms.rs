//! Reading what the console's forms and links send: each field once, checked on its own, and a
//! refusal that names the field and the problem (a 4xx page; nothing is written).

use axum::{
    body::Bytes,
    http::{HeaderMap, header},
};
use chrono::{DateTime, NaiveDateTime, Utc};

use super::{csrf, errors::PageError, session::Session};
use crate::{
    domain::Status,
    moderation::{TEXT_RULE, acceptable_text},
};

/// The largest form body the console reads.
pub const MAX_FORM_BYTES: usize = 64 * 1024;

/// The fields of a form (or a query string), each name at most once.
#[derive(Debug, Clone, Default)]
pub struct Fields(Vec<(String, String)>);

/// The longest rule name a listing's filter takes (as the API's).
const MAX_RULE_FILTER: usize = 200;

impl Fields {
    /// Refuses a field given twice.
    pub fn new(pairs: Vec<(String, String)>) -> Result<Self, PageError> {
        for (i, (name, _)) in pairs.iter().enumerate() {
            if pairs[..i].iter().any(|(earlier, _)| earlier == name) {
                return Err(PageError::bad_field(name, "is given twice"));
            }
        }
        Ok(Self(pairs))
    }

    /// A POST form of `session`'s: its CSRF token checked before any other field is looked at,
    /// and no field but `allowed` (and the token).
    pub fn posted(
        headers: &HeaderMap,
        body: &Bytes,
        session: &Session,
        allowed: &[&str],
    ) -> Result<Self, PageError> {
        let fields = Self::from_form(headers, body)?;
        csrf::check(session, fields.get(csrf::FIELD))?;
        fields.only(allowed)?;
        Ok(fields)
    }

    /// A form body, `application/x-www-form-urlencoded`.
    pub fn from_form(headers: &HeaderMap, body: &Bytes) -> Result<Self, PageError> {
        let urlencoded = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| {
                v.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            });
        if !urlencoded {
            return Err(PageError::new(
                axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Not a form",
                "The console takes forms sent as application/x-www-form-urlencoded. Nothing was changed.",
            ));
        }
        Self::new(form_urlencoded::parse(body).into_owned().collect())
    }

    /// A query string (GET forms: filters, paging).
    pub fn from_query(query: Option<&str>) -> Result<Self, PageError> {
        Self::new(
            form_urlencoded::parse(query.unwrap_or_default().as_bytes())
                .into_owned()
                .collect(),
        )
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The field's value, trimmed; `None` when absent or empty.
    pub fn optional(&self, name: &str) -> Option<&str> {
        self.get(name).map(str::trim).filter(|v| !v.is_empty())
    }

    /// The `rule` filter of a listing: at most 200 characters, no NUL; `None` when absent.
    pub fn rule_filter(&self) -> Result<Option<&str>, PageError> {
        match self.optional("rule") {
            Some(rule) if rule.contains('\0') || rule.chars().count() > MAX_RULE_FILTER => Err(
                PageError::bad_field("rule", "must be at most 200 characters"),
            ),
            rule => Ok(rule),
        }
    }

    /// Free text a moderator writes (a name, a reason): required, and held to the API's rule.
    pub fn text(&self, name: &str) -> Result<String, PageError> {
        let value = self
            .optional(name)
            .ok_or_else(|| PageError::bad_field(name, "is required"))?;
        if !acceptable_text(value) {
            return Err(PageError::bad_field(name, TEXT_RULE));
        }
        Ok(value.to_owned())
    }

    /// Refuses a query or form field other than `allowed` (and the CSRF token).
    pub fn only(&self, allowed: &[&str]) -> Result<(), PageError> {
        match self
            .0
            .iter()
            .find(|(n, _)| n != super::csrf::FIELD && !allowed.contains(&n.as_str()))
        {
            Some((name, _)) => Err(PageError::bad_field(
                name,
                &format!(
                    "is not a field of this form; it takes {}",
                    allowed.join(", ")
                ),
            )),
            None => Ok(()),
        }
    }

    /// A status: visible, flagged, hidden or suspended.
    pub fn status(&self, name: &str) -> Result<Status, PageError> {
        let raw = self
            .optional(name)
            .ok_or_else(|| PageError::bad_field(name, "is required"))?;
        Status::parse(raw).map_err(|_| {
            PageError::bad_field(name, "must be visible, flagged, hidden or suspended")
        })
    }
}

/// A time given in UTC: RFC 3339, or what a `datetime-local` input sends
/// (`2026-12-31T18:00`, seconds optional), or the same with a space.
pub fn parse_utc(raw: &str) -> Option<DateTime<Utc>> {
    let raw = raw.trim();
    if let Ok(time) = DateTime::parse_from_rfc3339(raw) {
        return Some(time.with_timezone(&Utc));
    }
    let raw = raw.replacen(' ', "T", 1);
    ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(&raw, format).ok())
        .map(|naive| naive.and_utc())
}

/// An override's end: a duration from now (`24h`, `7days`) or a UTC time, in the future; at
/// most ten years ahead.
pub fn parse_until(raw: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let until = match humantime::parse_duration(raw.trim()) {
        Ok(duration) => chrono::Duration::from_std(duration)
            .ok()
            .and_then(|d| now.checked_add_signed(d))
            .ok_or("is too far ahead")?,
        Err(_) => parse_utc(raw).ok_or(
            "must be a duration such as 24h or 7days, or a UTC time such as 2026-12-31 18:00",
        )?,
    };
    if until <= now {
        return Err("must be in the future".into());
    }
    if until > now + chrono::Duration::days(3650) {
        return Err("must be at most ten years ahead".into());
    }
    Ok(until)
}

/// The query string of a list's filters as typed (those given) and its keyset cursor, for the
/// links that page through it.
pub fn page_query(filters: &[(&str, &Option<String>)], cursor: Option<(&str, i64)>) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in filters {
        if let Some(value) = value {
            query.append_pair(name, value);
        }
    }
    if let Some((name, id)) = cursor {
        query.append_pair(name, &id.to_string());
    }
    query.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations_read_as_a_moderator_writes_them() {
        let now = parse_utc("2026-12-01T10:00:00Z").unwrap();
        assert_eq!(parse_utc("2026-12-01T10:00"), Some(now));
        assert_eq!(parse_utc("2026-12-01 10:00:00"), Some(now));
        assert_eq!(parse_utc("2026-12-01T11:00:00+01:00"), Some(now));
        assert_eq!(parse_utc("yesterday"), None);
        assert_eq!(
            parse_until("24h", now).unwrap(),
            now + chrono::Duration::hours(24)
        );
        assert_eq!(
            parse_until("2026-12-02 10:00", now).unwrap(),
            now + chrono::Duration::days(1)
        );
        assert_eq!(
            parse_until("2026-11-30 10:00", now).unwrap_err(),
            "must be in the future"
        );
        assert!(parse_until("soon", now).unwrap_err().contains("duration"));
        assert!(parse_until("100years", now).is_err());
    }

    #[test]
    fn fields_are_named_once_and_text_follows_the_apis_rule() {
        let pairs = |list: &[(&str, &str)]| {
            list.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        let refused = Fields::new(pairs(&[("reason", "a"), ("reason", "b")])).unwrap_err();
        assert_eq!(refused.field.as_deref(), Some("reason"));
        let fields = Fields::new(pairs(&[("reason", "  "), ("name", "x\u{7}")])).unwrap();
        assert_eq!(
            fields.text("reason").unwrap_err().field.as_deref(),
            Some("reason")
        );
        assert!(fields.text("name").unwrap_err().message.contains("control"));
        assert!(fields.only(&["reason"]).is_err());
    }
}
