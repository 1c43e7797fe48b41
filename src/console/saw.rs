//! What the rules saw of attributes in one evaluation, from its stored snapshot: the aggregates
//! of the events' attributes, the entity's context and its author's (status, context, counts).
//! Shown on the entity page beside each evaluation, as the backtest replays it.

use maud::{Markup, html};

use crate::domain::{Attributes, Scalar, SnapshotAttributes};

fn scalar(value: &Scalar) -> String {
    match value {
        Scalar::Str(s) => format!("{s:?}"),
        Scalar::Num(n) => n.to_string(),
        Scalar::Bool(b) => b.to_string(),
    }
}

fn context_list(attributes: &Attributes) -> Markup {
    html! {
        @for (name, value) in attributes {
            " " code { (name) " = " (scalar(value)) }
        }
    }
}

/// The attributes part of a stored snapshot (nothing when the rules read none).
pub fn attributes_seen(snapshot: Option<&serde_json::Value>) -> Markup {
    let seen: SnapshotAttributes = snapshot
        .and_then(|s| s.get("attributes"))
        .and_then(|a| serde_json::from_value(a.clone()).ok())
        .unwrap_or_default();
    if seen.events.is_empty() && seen.context.is_empty() && seen.author.is_none() {
        return html! {};
    }
    html! {
        details.saw-attributes {
            summary { "What the rules saw of attributes" }
            ul {
                @for (signal, by_attribute) in &seen.events {
                    @for (attribute, stats) in by_attribute {
                        li.saw-aggregate {
                            code { (signal) "." (attribute) } ":"
                            @for (value, count) in &stats.values { " " (value) " ×" (count) }
                            @if let Some(max) = stats.max { " max " (max) }
                            @if let Some(latest) = stats.latest { ", latest " (latest) }
                            @for (window, figures) in &stats.windows {
                                "; " (window) ":"
                                @for (value, count) in &figures.values { " " (value) " ×" (count) }
                                @if let Some(max) = figures.max { " max " (max) }
                            }
                        }
                    }
                }
                @if !seen.context.is_empty() {
                    li.saw-context { "context:" (context_list(&seen.context)) }
                }
                @if let Some(author) = &seen.author {
                    li.saw-author {
                        "author " code { (author.id) } " (" (author.status.as_str()) ")"
                        @if !author.attributes.is_empty() { ": " (context_list(&author.attributes)) }
                        @for (signal, count) in &author.counts { "; " code { (signal) } " " (count) }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attributes_a_snapshot_kept_are_shown() {
        let snapshot = serde_json::json!({"attributes": {
            "events": {"flag": {"reason": {"values": {"spam": 3}, "windows": {"1h": {"values": {"spam": 2}}}},
                                "score": {"max": 0.93, "latest": 0.5}}},
            "context": {"verified": false},
            "author": {"id": "user:77", "status": "hidden", "attributes": {"account_age_days": 3.0},
                       "counts": {"auto.hide": 2}}
        }});
        let html = attributes_seen(Some(&snapshot)).into_string();
        for part in [
            "flag.reason",
            "spam ×3",
            "1h: spam ×2",
            "max 0.93",
            "latest 0.5",
            "verified = false",
            "user:77",
            "(hidden)",
            "account_age_days = 3",
            "auto.hide",
        ] {
            assert!(html.contains(part), "{part}: {html}");
        }
        assert!(
            attributes_seen(Some(&serde_json::json!({"status": "visible"})))
                .into_string()
                .is_empty()
        );
    }
}
