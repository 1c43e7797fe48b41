//! The guard ([`RuleDemoter`]): after each reversal, the reversed action's rule is weighed over
//! its latest actions; a live rule that moderators reverse too often is turned to shadow by
//! quiesce itself, as a new rules version (authored by [`GUARD_AUTHOR`], its message carrying the
//! figures), with an audit entry, a metric the alert rules watch and an outbound webhook event.
//! Every process puts that version in force as it does any publish.

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use serde_json::json;

use super::{ActiveRulesError, hash, sync};
use crate::{
    domain::{Actor, AuditAction, AuditEntry, RulesDemoted},
    rules::{RuleSet, Rules},
    settings::Moderation,
    store::{Demotion, NewRulesVersion, RuleFigures, Store},
    telemetry::{Chain, names},
};

/// Who the guard's versions and audit entries are by.
pub const GUARD_AUTHOR: &str = "quiesce-guard";

/// Tries when a concurrent publish moved the active version between the guard's read and
/// its write.
const ATTEMPTS: usize = 3;

/// The guard, which turns a live rule reversed too often to shadow: its settings, and the rules
/// in force in this process (put in force at once after a demotion; the other processes hear
/// of it).
#[derive(Clone)]
pub struct RuleDemoter {
    pub enabled: bool,
    /// How many of a rule's latest actions it weighs, and needs before it acts.
    pub actions: u32,
    /// The reversal rate above which it acts.
    pub threshold: f64,
    /// How far back those actions may go.
    pub window: Duration,
    pub rules: Option<Arc<Rules>>,
}

impl RuleDemoter {
    pub fn new(settings: &Moderation, rules: Option<Arc<Rules>>) -> Self {
        Self {
            enabled: settings.guard,
            actions: settings.guard_actions,
            threshold: settings.guard_threshold,
            window: settings.guard_window,
            rules,
        }
    }

    /// After a reversal of one of `rule`'s actions: turns the rule to shadow if its reversal
    /// rate is now above the threshold. A failure is logged, not returned: the reversal stands
    /// and the next one checks again.
    pub async fn after_reversal(&self, store: &Store, rule: &str) {
        if !self.enabled {
            return;
        }
        if let Err(error) = self.check(store, rule).await {
            tracing::error!(error = %Chain(&error), rule, "the guard could not weigh a rule after a reversal");
        }
    }

    /// The version that turned `rule` to shadow, if this check published one.
    pub async fn check(&self, store: &Store, rule: &str) -> Result<Option<i64>, ActiveRulesError> {
        for _ in 0..ATTEMPTS {
            let Some(active) = store.rules_versions().active_rules().await? else {
                return Ok(None);
            };
            let over = active.marker.version;
            let set = super::stored_rules(over, &active.rules.text)?;
            let armed = set
                .rules()
                .iter()
                .any(|r| r.name == rule && !r.shadow && r.guard);
            if !armed {
                return Ok(None);
            }
            let since = Utc::now()
                - chrono::Duration::from_std(self.window).unwrap_or(chrono::Duration::MAX);
            let figures = store
                .guard()
                .rule_figures(rule, since, i64::from(self.actions), GUARD_AUTHOR)
                .await?;
            if !self.trips(figures) {
                return Ok(None);
            }
            let text = match shadowing(&active.rules.text, rule) {
                Some(text) => text,
                None => set.demoting(rule).expect("the rule is live in this set"),
            };
            // The same text with one rule in shadow: read as its stored version is.
            RuleSet::from_stored(&text)?;
            if let Some(version) = self.demote(store, rule, over, &text, figures).await? {
                if let Some(rules) = &self.rules {
                    sync(store, rules).await?;
                }
                return Ok(Some(version));
            }
        }
        Ok(None)
    }

    /// More than the threshold of a full sample of actions reversed.
    fn trips(&self, figures: RuleFigures) -> bool {
        figures.actions >= i64::from(self.actions)
            && figures.actions > 0
            && figures.reversals as f64 / figures.actions as f64 > self.threshold
    }

    async fn demote(
        &self,
        store: &Store,
        rule: &str,
        over: i64,
        text: &str,
        figures: RuleFigures,
    ) -> Result<Option<i64>, ActiveRulesError> {
        let rate = figures.reversals as f64 / figures.actions as f64;
        let message = format!(
            "guard: rule {rule} turned to shadow: {} of its last {} actions reversed (rate {rate:.3}, threshold {})",
            figures.reversals, figures.actions, self.threshold
        );
        let tripped = json!({
            "rule": rule,
            "actions": figures.actions,
            "reversals": figures.reversals,
            "rate": rate,
            "threshold": self.threshold,
            "window_secs": self.window.as_secs(),
        });
        let mut after = tripped;
        after["shadow"] = true.into();
        let payload = RulesDemoted {
            rule: rule.to_owned(),
            actions: figures.actions,
            reversals: figures.reversals,
            rate,
            threshold: self.threshold,
            window_secs: self.window.as_secs(),
            previous_rules_version: over,
            message: message.clone(),
            // The version published: `demote_rule` sets it once it is.
            rules_version: over,
        };
        let demotion = Demotion {
            over,
            rules: NewRulesVersion {
                text,
                hash: &hash(text),
                message: &message,
                backtest: None,
            },
            entry: AuditEntry {
                action: AuditAction::RulesGuard,
                subject: "rules".into(),
                before: Some(json!({ "version": over, "rule": rule, "shadow": false })),
                after: Some(after),
            },
            payload,
        };
        let actor = Actor::named(GUARD_AUTHOR, None);
        let Some(version) = store.guard().demote_rule(&actor, demotion).await? else {
            return Ok(None);
        };
        metrics::counter!(names::GUARD_DEMOTIONS, "rule" => rule.to_owned()).increment(1);
        metrics::gauge!(names::GUARD_DEMOTED_AT, "rule" => rule.to_owned())
            .set(Utc::now().timestamp() as f64);
        tracing::warn!(rule, version, %message, "the guard turned a rule to shadow");
        Ok(Some(version))
    }
}

/// The rules file `text` with `shadow = true` on rule `rule`, its comments kept; `None` when
/// the text is not laid out as `[[rule]]` tables naming it.
fn shadowing(text: &str, rule: &str) -> Option<String> {
    let mut document: toml_edit::DocumentMut = text.parse().ok()?;
    let table = document
        .get_mut("rule")?
        .as_array_of_tables_mut()?
        .iter_mut()
        .find(|t| t.get("name").and_then(|n| n.as_str()) == Some(rule))?;
    table["shadow"] = toml_edit::value(true);
    Some(document.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "# the rules\n[[rule]]\nname = \"a\"\nwhen = 'count(\"flag\") >= 2'\naction = \"hide\"\nreason = \"r\" # why\n\n[[rule]]\nname = \"b\"\nwhen = 'count(\"flag\") >= 3'\naction = \"flag\"\nreason = \"r\"\nshadow = false\n";

    fn demoter(actions: u32, threshold: f64) -> RuleDemoter {
        RuleDemoter {
            enabled: true,
            actions,
            threshold,
            window: Duration::from_secs(3600),
            rules: None,
        }
    }

    #[test]
    fn shadowing_sets_the_one_rule_and_keeps_the_comments() {
        let text = shadowing(TWO, "b").unwrap();
        assert!(
            text.contains("# the rules") && text.contains("# why"),
            "{text}"
        );
        let set = RuleSet::from_toml(&text).unwrap();
        let shadow: Vec<_> = set
            .rules()
            .iter()
            .map(|r| (r.name.as_str(), r.shadow))
            .collect();
        assert_eq!(shadow, [("a", false), ("b", true)]);
        assert!(shadowing(TWO, "c").is_none());
        let inline = "rule = [{ name = \"a\", when = 'true', action = \"flag\", reason = \"r\" }]";
        assert!(shadowing(inline, "a").is_none());
        let fallback = RuleSet::from_toml(inline).unwrap().demoting("a").unwrap();
        assert!(RuleSet::from_toml(&fallback).unwrap().rules()[0].shadow);
    }

    #[test]
    fn it_trips_on_a_full_sample_above_the_threshold_only() {
        let figures = |actions, reversals| RuleFigures { actions, reversals };
        assert!(demoter(4, 0.5).trips(figures(4, 3)));
        assert!(!demoter(4, 0.5).trips(figures(4, 2)), "at the threshold");
        assert!(!demoter(4, 0.5).trips(figures(3, 3)), "too few actions");
    }

    #[test]
    fn a_rule_may_opt_out_and_the_field_is_checked() {
        let off = TWO.replace("shadow = false", "guard = false");
        let set = RuleSet::from_toml(&off).unwrap();
        assert!(set.rules()[0].guard && !set.rules()[1].guard);
        let bad = TWO.replace("shadow = false", "guard = \"no\"");
        assert!(RuleSet::from_toml(&bad).is_err());
    }
}
