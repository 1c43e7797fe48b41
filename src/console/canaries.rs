//! Quality's canaries: for each rule in force with a `rollout`, its two groups of entities side
//! by side over the window. In the live share it acts (its matches are live matches and its
//! actions can be reversed); in the rest it runs as a shadow rule. The window's evaluations are
//! read once, counted per entity, and split for each canary with its own hash
//! (`rules/rollout.rs`), so the groups are exactly the ones the evaluations ran in.

use std::{collections::BTreeMap, time::Duration};

use maud::{Markup, html};

use super::layout::rate;
use crate::{
    domain::EntityId,
    rules::RuleSet,
    store::{ReversalCounts, RuleHits, Store, StoreError},
};

/// One canary rule's figures over the window.
pub struct CanaryRow {
    rule: String,
    rollout: f64,
    live_evaluations: i64,
    shadow_evaluations: i64,
}

/// The canaries of the rules in force, with their groups' evaluations.
pub async fn canary_rows(
    store: &Store,
    rules: &RuleSet,
    window: Duration,
) -> Result<Vec<CanaryRow>, StoreError> {
    let canaries: Vec<_> = rules
        .rules()
        .iter()
        .filter_map(|rule| Some((rule, rule.rollout.filter(|_| !rule.shadow)?)))
        .collect();
    if canaries.is_empty() {
        return Ok(Vec::new());
    }
    // One read for every canary: each takes the entities of its kinds.
    let evaluated: Vec<(EntityId, i64)> = store
        .read()
        .evaluations_per_entity(window)
        .await?
        .into_iter()
        .filter_map(|(entity, n)| Some((EntityId::parse(&entity).ok()?, n)))
        .collect();
    let mut rows = Vec::new();
    for (rule, rollout) in canaries {
        let (mut live_evaluations, mut shadow_evaluations) = (0, 0);
        let of_its_kinds = evaluated
            .iter()
            .filter(|(id, _)| rule.kinds.is_empty() || rule.kinds.iter().any(|k| k == id.kind()));
        for (id, evaluations) in of_its_kinds {
            if rule.live_for(id) {
                live_evaluations += evaluations;
            } else {
                shadow_evaluations += evaluations;
            }
        }
        rows.push(CanaryRow {
            rule: rule.name.clone(),
            rollout,
            live_evaluations,
            shadow_evaluations,
        });
    }
    Ok(rows)
}

/// Matches per 1,000 evaluations, or a dash without an evaluation.
fn per_1000(matches: i64, evaluations: i64) -> String {
    if evaluations == 0 {
        "-".to_owned()
    } else {
        format!("{:.1}", 1000.0 * matches as f64 / evaluations as f64)
    }
}

/// The section, from the canaries and each rule's matches and reversal counts.
pub fn section(
    canaries: &[CanaryRow],
    hits: &BTreeMap<String, RuleHits>,
    reversals: &BTreeMap<String, ReversalCounts>,
) -> Markup {
    html! {
        @if !canaries.is_empty() {
            section.card aria-labelledby="canaries-title" {
                h2 #canaries-title { "Canaries" }
                p.muted {
                    "A rule with a rollout acts for its share of entities (the live group) and runs as a shadow rule for the rest. "
                    "Compare the groups' matches per 1,000 evaluations; only the live group has actions moderators can reverse. "
                    "Matches recorded before the rule had its rollout count where they were recorded."
                }
                div.table-wrap {
                    table.cards #canaries {
                        thead {
                            tr {
                                th scope="col" { "Rule" }
                                th.num scope="col" { "Rollout" }
                                th.num scope="col" { "Live: evaluations" }
                                th.num scope="col" { "Live: matches per 1,000" }
                                th scope="col" { "Live: reversed within 24h" }
                                th.num scope="col" { "Shadow: evaluations" }
                                th.num scope="col" { "Shadow: matches per 1,000" }
                            }
                        }
                        tbody {
                            @for row in canaries {
                                @let RuleHits { live, shadow, .. } = hits.get(&row.rule).copied().unwrap_or_default();
                                @let counts = reversals.get(&row.rule).cloned().unwrap_or_default();
                                tr data-rule=(row.rule) {
                                    th scope="row" data-label="Rule" { code { (row.rule) } }
                                    td.num data-label="Rollout" { (format!("{:.0}%", row.rollout * 100.0)) }
                                    td.num.live-evaluations data-label="Live: evaluations" { (row.live_evaluations) }
                                    td.num.live-rate data-label="Live: matches per 1,000" { (per_1000(live, row.live_evaluations)) }
                                    td data-label="Live: reversed within 24h" { (rate(counts.reversed, counts.actions)) }
                                    td.num.shadow-evaluations data-label="Shadow: evaluations" { (row.shadow_evaluations) }
                                    td.num.shadow-rate data-label="Shadow: matches per 1,000" { (per_1000(shadow, row.shadow_evaluations)) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
