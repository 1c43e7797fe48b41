//! The frame of every console page (head, navigation, who is signed in, the sign-out form) and
//! the small pieces pages share: times, statuses, links. Every value is interpolated by maud,
//! which escapes it; nothing here builds HTML from strings.

use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, html};

use super::{ReadSource, SignedInSession, assets, csrf, session};
use crate::backtest::Estimate;

/// Which section of the console a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Queue,
    Appeals,
    Review,
    Quality,
    Operations,
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="referrer" content="same-origin";
            title { (title) " · quiesce console" }
            link rel="stylesheet" href=(assets::STYLESHEET.href());
            link rel="icon" type="image/svg+xml" href=(assets::ICON.href());
        }
    }
}

/// A page of the console for a signed-in moderator.
pub fn page(signed_in: &SignedInSession, section: Section, title: &str, body: Markup) -> Markup {
    let user = &signed_in.user;
    let item = |this: Section, href: &str, label: &str| {
        html! {
            li {
                @if this == section {
                    a href=(href) aria-current="page" { (label) }
                } @else {
                    a href=(href) { (label) }
                }
            }
        }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/console/review" { "quiesce" span { " console" } }
                    nav aria-label="Console sections" {
                        ul {
                            (item(Section::Queue, "/console/queue", "Queue"))
                            (item(Section::Appeals, "/console/appeals", "Appeals"))
                            (item(Section::Review, "/console/review", "Review"))
                            (item(Section::Quality, "/console/quality", "Quality"))
                            @if user.is_admin() {
                                (item(Section::Operations, "/console/operations", "Operations"))
                            }
                        }
                    }
                    div.who {
                        span {
                            "Signed in as " strong #signed-in-as { (user.name) }
                            " (" (user.role.as_str()) ")"
                        }
                        form method="post" action="/console/logout" {
                            (csrf::field(&signed_in.session))
                            button.link type="submit" { "Sign out" }
                        }
                    }
                }
                @if user.token == session::INSECURE_DEV {
                    p.banner role="status" {
                        "quiesce runs with --insecure-dev and no API tokens: anyone who can reach it may use the console as an admin."
                    }
                }
                @match signed_in.reads {
                    Some(ReadSource::Replica { lag }) => p.banner.reads role="status" {
                        "Lists and figures are read from a replica (replay lag "
                        (format!("{:.1}", lag.as_secs_f64()))
                        " s): a change made a moment ago may take that long to show."
                    },
                    Some(ReadSource::PrimaryForReplica) => p.banner.reads role="status" {
                        "Lists and figures are read from the primary: the replica lags past read_max_lag or does not answer."
                    },
                    None => {},
                }
                main #main tabindex="-1" { (body) }
            }
        }
    }
}

/// A page without the navigation: sign-in, and errors (which may have no session).
pub fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/console/review" { "quiesce" span { " console" } }
                }
                main #main tabindex="-1" { (body) }
            }
        }
    }
}

/// A time, readable and machine-readable: `2026-12-01 10:00:03 UTC`.
pub fn time(at: DateTime<Utc>) -> Markup {
    html! {
        time datetime=(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)) {
            (at.format("%Y-%m-%d %H:%M:%S UTC"))
        }
    }
}

/// A time that may be absent.
pub fn maybe_time(at: Option<DateTime<Utc>>) -> Markup {
    match at {
        Some(at) => time(at),
        None => html! { span.muted { "never" } },
    }
}

/// A moderation status, as a badge.
pub fn status(status: &str) -> Markup {
    let class = match status {
        "visible" | "flagged" | "hidden" | "suspended" => status,
        _ => "other",
    };
    html! { span class={ "status " (class) } { (status) } }
}

/// The link to an entity's page. Entity ids are `[a-z0-9_]:[A-Za-z0-9_.:-]`, all safe in a
/// path; maud escapes the attribute all the same.
pub fn entity_link(entity: &str) -> Markup {
    html! { a.entity href={ "/console/entities/" (entity) } { (entity) } }
}

/// A wait as `3h 04m`, `12m 30s` or `8s`.
pub fn wait(waited: chrono::Duration) -> String {
    let seconds = waited.num_seconds().max(0);
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m {s:02}s"),
        _ => format!("{h}h {m:02}m"),
    }
}

/// A notice after a decision (`?done=` of the redirect that follows a form).
pub fn done_notice(message: Option<&str>) -> Markup {
    html! {
        @if let Some(message) = message {
            p.notice.ok role="status" #done { (message) }
        }
    }
}

/// A ratio as `1 of 4 (25%)`.
pub fn rate(part: i64, whole: i64) -> String {
    if whole == 0 {
        format!("{part} of {whole}")
    } else {
        format!(
            "{part} of {whole} ({:.0}%)",
            100.0 * part as f64 / whole as f64
        )
    }
}

fn percent(rate: f64) -> String {
    format!("{:.1}%", 100.0 * rate)
}

/// An expected reversal rate with its 95% interval, as the Backtest page shows it.
pub fn estimate(e: Option<Estimate>) -> Markup {
    html! {
        @match e {
            Some(e) => { (percent(e.rate)) " " span.muted { "(95%: " (percent(e.low)) "–" (percent(e.high)) ", of " (e.basis) ")" } }
            None => span.muted { "no action of both" },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_wherever_they_land() {
        let hostile = "post:1\"><script>alert(1)</script>";
        let link = entity_link(hostile).into_string();
        assert!(!link.contains("<script>"), "{link}");
        assert!(link.contains("&lt;script&gt;"), "{link}");
        assert!(!status("<img src=x>").into_string().contains("<img"));
        assert_eq!(rate(1, 1), "1 of 1 (100%)");
        assert_eq!(rate(0, 0), "0 of 0");
    }
}
