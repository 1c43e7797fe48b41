//! The attribute aggregates of a snapshot, added up here rather than in SQL: the snapshot's
//! statement returns the folded rows (store/fold.rs) and the attributes of the events not
//! folded yet as they are, one scan of each per entity, and this adds them into the figures
//! the rules read. Grouping per entity in the statement (a `jsonb_each` and a `GROUP BY` per
//! aggregate, the windows joined per event) cost the evaluations about half their rate
//! (BENCHMARKS.md, "Attributes on every event").

use std::collections::BTreeMap;

use sqlx::types::Json;

use crate::domain::{AttributeStats, Attributes, Scalar, WINDOWS};

/// (signal, attribute, value, events) per folded value of a string or boolean attribute.
pub(super) type FoldedValues = Vec<(String, String, String, i64)>;
/// (signal, attribute, max, latest) per folded number attribute.
pub(super) type FoldedNumbers = Vec<(String, String, f64, f64)>;
/// (signal, attribute, value ('' for a number), age in seconds of its minute, events, max,
/// latest) per folded minute bucket of the last 24 hours.
pub(super) type FoldedBuckets = Vec<(String, String, String, i64, i64, Option<f64>, Option<f64>)>;
/// (signal, attributes, age in seconds of its minute, received within 24 hours) per event not
/// folded yet, oldest first (by transaction, then id).
pub(super) type UnfoldedAttributes = Vec<(String, Attributes, i64, bool)>;

/// What the snapshot's statement returned of attributes: the folded values and numbers when
/// the aggregates were read, the folded buckets when their windows were, and the unfolded
/// events' attributes when either was.
pub(super) struct AttributeRows {
    pub(super) values: Option<Json<FoldedValues>>,
    pub(super) numbers: Option<Json<FoldedNumbers>>,
    pub(super) buckets: Option<Json<FoldedBuckets>>,
    pub(super) unfolded: Option<Json<UnfoldedAttributes>>,
}

/// The aggregates by signal, then attribute: events per value and the largest and latest
/// number over all events, and the same per trailing window (`1m` to `24h`) when read.
pub(super) fn attribute_stats(rows: AttributeRows) -> Stats {
    let mut stats = Stats::new();
    let unfolded = rows.unfolded.map(|Json(u)| u).unwrap_or_default();
    let totals_read = rows.values.is_some() || rows.numbers.is_some();
    for (signal, attribute, value, count) in rows.values.map(|Json(v)| v).unwrap_or_default() {
        *entry(&mut stats, &signal, &attribute)
            .values
            .entry(value)
            .or_default() += count;
    }
    for (signal, attribute, max, latest) in rows.numbers.map(|Json(n)| n).unwrap_or_default() {
        let stats = entry(&mut stats, &signal, &attribute);
        stats.max = Some(stats.max.map_or(max, |m| m.max(max)));
        // A folded latest is older than every unfolded event, which come after it here.
        stats.latest = Some(latest);
    }
    if totals_read {
        for (signal, attributes, _, _) in &unfolded {
            for (attribute, value) in attributes {
                let stats = entry(&mut stats, signal, attribute);
                match value {
                    Scalar::Num(n) => {
                        stats.max = Some(stats.max.map_or(*n, |m| m.max(*n)));
                        stats.latest = Some(*n);
                    }
                    other => *stats.values.entry(other.key()).or_default() += 1,
                }
            }
        }
    }
    if let Some(Json(mut buckets)) = rows.buckets {
        let in_window = |age: i64| WINDOWS.iter().filter(move |(_, seconds)| age <= *seconds);
        // Oldest first, then the unfolded events (newer than any folded one) in their order,
        // so that each window's latest is the last one added.
        buckets.sort_by_key(|bucket| std::cmp::Reverse(bucket.3));
        for (signal, attribute, value, age, count, max, latest) in buckets {
            for (window, _) in in_window(age) {
                let figures = Figures { count, max, latest };
                add_to_window(
                    entry(&mut stats, &signal, &attribute),
                    window,
                    value.clone(),
                    figures,
                );
            }
        }
        for (signal, attributes, age, within_day) in &unfolded {
            if !within_day {
                continue;
            }
            for (window, _) in in_window(*age) {
                for (attribute, value) in attributes {
                    let (value, figures) = match value {
                        Scalar::Num(n) => (
                            String::new(),
                            Figures {
                                count: 1,
                                max: Some(*n),
                                latest: Some(*n),
                            },
                        ),
                        other => (
                            other.key(),
                            Figures {
                                count: 1,
                                max: None,
                                latest: None,
                            },
                        ),
                    };
                    add_to_window(entry(&mut stats, signal, attribute), window, value, figures);
                }
            }
        }
    }
    stats
}

type Stats = BTreeMap<String, BTreeMap<String, AttributeStats>>;

fn entry<'a>(stats: &'a mut Stats, signal: &str, attribute: &str) -> &'a mut AttributeStats {
    stats
        .entry(signal.to_owned())
        .or_default()
        .entry(attribute.to_owned())
        .or_default()
}

/// What one bucket or event adds to a window: a number's maximum and latest value, or a value's
/// events.
struct Figures {
    count: i64,
    max: Option<f64>,
    latest: Option<f64>,
}

/// Adds one bucket or event to a window, after every older one.
fn add_to_window(stats: &mut AttributeStats, window: &str, value: String, figures: Figures) {
    let window = stats.windows.entry(window.to_owned()).or_default();
    match figures.max {
        Some(max) => {
            window.max = Some(window.max.map_or(max, |m| m.max(max)));
            window.latest = figures.latest.or(window.latest);
        }
        None => *window.values.entry(value).or_default() += figures.count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pairs: &[(&str, Scalar)]) -> Attributes {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn folded_and_unfolded_add_up_and_the_latest_unfolded_event_wins() {
        let rows = AttributeRows {
            values: Some(Json(vec![(
                "flag".into(),
                "reason".into(),
                "spam".into(),
                4,
            )])),
            numbers: Some(Json(vec![("flag".into(), "score".into(), 0.95, 0.2)])),
            buckets: None,
            unfolded: Some(Json(vec![
                (
                    "flag".into(),
                    attrs(&[
                        ("reason", Scalar::Str("spam".into())),
                        ("score", Scalar::Num(0.5)),
                    ]),
                    0,
                    true,
                ),
                (
                    "flag".into(),
                    attrs(&[
                        ("reason", Scalar::Str("abuse".into())),
                        ("score", Scalar::Num(0.3)),
                    ]),
                    0,
                    true,
                ),
                (
                    "flag".into(),
                    attrs(&[("verified", Scalar::Bool(true))]),
                    0,
                    true,
                ),
            ])),
        };
        let stats = attribute_stats(rows);
        let flag = &stats["flag"];
        assert_eq!(
            flag["reason"].values,
            BTreeMap::from([("abuse".into(), 1), ("spam".into(), 5)])
        );
        assert_eq!(flag["score"].max, Some(0.95));
        assert_eq!(flag["score"].latest, Some(0.3));
        assert_eq!(
            flag["verified"].values,
            BTreeMap::from([("true".into(), 1)])
        );
        assert!(flag["score"].windows.is_empty(), "windows were not read");
    }

    #[test]
    fn windows_take_what_their_minutes_cover_and_unfolded_events_only_within_a_day() {
        let rows = AttributeRows {
            values: None,
            numbers: None,
            buckets: Some(Json(vec![
                (
                    "flag".into(),
                    "reason".into(),
                    "spam".into(),
                    120,
                    2,
                    None,
                    None,
                ),
                (
                    "flag".into(),
                    "score".into(),
                    String::new(),
                    120,
                    1,
                    Some(0.2),
                    Some(0.2),
                ),
                (
                    "flag".into(),
                    "score".into(),
                    String::new(),
                    3_000,
                    1,
                    Some(0.9),
                    Some(0.9),
                ),
            ])),
            unfolded: Some(Json(vec![
                (
                    "flag".into(),
                    attrs(&[
                        ("reason", Scalar::Str("spam".into())),
                        ("score", Scalar::Num(0.4)),
                    ]),
                    0,
                    true,
                ),
                (
                    "flag".into(),
                    attrs(&[("reason", Scalar::Str("spam".into()))]),
                    86_400,
                    false,
                ),
            ])),
        };
        let stats = attribute_stats(rows);
        let reason = &stats["flag"]["reason"];
        assert!(reason.values.is_empty(), "the totals were not read");
        assert_eq!(reason.windows["1m"].values["spam"], 1);
        assert_eq!(reason.windows["5m"].values["spam"], 3);
        assert_eq!(reason.windows["24h"].values["spam"], 3);
        let score = &stats["flag"]["score"];
        assert_eq!(score.windows["1m"].max, Some(0.4));
        assert_eq!(score.windows["5m"].max, Some(0.4));
        assert_eq!(score.windows["1h"].max, Some(0.9));
        // The latest is the newest event's: the unfolded one, then the newest bucket's.
        assert_eq!(score.windows["1h"].latest, Some(0.4));
        assert_eq!(score.windows["24h"].latest, Some(0.4));
        assert_eq!(score.max, None);
    }

    #[test]
    fn a_windows_latest_without_unfolded_events_is_its_newest_buckets() {
        let bucket = |age: i64, score: f64| {
            (
                "flag".into(),
                "score".into(),
                String::new(),
                age,
                1,
                Some(score),
                Some(score),
            )
        };
        let rows = AttributeRows {
            values: None,
            numbers: None,
            buckets: Some(Json(vec![
                bucket(120, 0.2),
                bucket(3_000, 0.9),
                bucket(60, 0.5),
            ])),
            unfolded: Some(Json(vec![])),
        };
        let stats = attribute_stats(rows);
        let windows = &stats["flag"]["score"].windows;
        assert_eq!(windows["1m"].latest, Some(0.5));
        assert_eq!(windows["1h"].latest, Some(0.5));
        assert_eq!(windows["1h"].max, Some(0.9));
    }
}
