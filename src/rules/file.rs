//! The rules file as TOML: read (a file, the shipped defaults, a stored version whose 2023
//! statement categories are read as those in force) and written back (`to_toml`, `text`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{
    DEFAULT_RULES, RuleSet, RulesError,
    statement::{CategoryMapped, StatementFile, StatementSpec},
};
use crate::domain::{Action, Declarations};

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RulesFile {
    #[serde(default, rename = "rule")]
    pub(super) rules: Vec<RuleSpec>,
    /// What the rules read of attributes, declared: `[attributes.event.<name>]`,
    /// `[attributes.entity.<name>]` (`domain/attributes.rs`).
    #[serde(default, skip_serializing_if = "Declarations::is_empty")]
    pub(super) attributes: Declarations,
    /// The statements of reasons' defaults, kinds and notices (`rules/statement/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) statement: Option<StatementFile>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleSpec {
    pub(super) name: String,
    /// Entity kinds the rule applies to; empty or absent: all kinds.
    #[serde(default)]
    pub(super) kinds: Vec<String>,
    pub(super) when: String,
    /// The status action; a rule without one gives labels only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) action: Option<Action>,
    /// Labels the rule records on the entity (no status change).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) labels: Vec<String>,
    /// An exemption: when this condition holds too, the rule does not act.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) unless: Option<String>,
    pub(super) reason: String,
    /// A shadow rule is evaluated and recorded but never acts.
    #[serde(default)]
    pub(super) shadow: bool,
    /// A timed action: how long it holds (`"24h"`) before quiesce restores the entity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) duration: Option<String>,
    /// A canary: the share of entities (0 to 1, stable per entity and rule) for which the rule
    /// is live; for the others it runs as a shadow rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) rollout: Option<f64>,
    /// `false`: the guard never turns this rule to shadow, whatever its reversal rate.
    #[serde(default = "armed", skip_serializing_if = "is_armed")]
    pub(super) guard: bool,
    /// What its restricting decisions' statements of reasons say (`rules/statement/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) statement: Option<StatementSpec>,
}

fn armed() -> bool {
    true
}

fn is_armed(guard: &bool) -> bool {
    *guard
}

impl RuleSet {
    /// A rules file: it must be in the Transparency Database's schema in force (a category of
    /// the 2023 schema is refused with the one to write now).
    pub fn from_toml(text: &str) -> Result<Self, RulesError> {
        let file: RulesFile = toml::from_str(text).map_err(|e| RulesError::Parse(e.to_string()))?;
        let mut set = Self::from_specs(file.rules, file.attributes, file.statement)?;
        set.source = Some(text.to_owned());
        Ok(set)
    }

    /// A stored rules version: as [`Self::from_toml`], except that the categories of the
    /// Transparency Database's 2023 schema a version published before the schema changed may
    /// name are read as those in force (`domain/dsa_schema.rs`, `CATEGORIES_2023`), so that a
    /// process starts and serves with it. The stored text stays as it was published (versions
    /// are never changed); which categories were read otherwise is returned.
    pub fn from_stored(text: &str) -> Result<(Self, Vec<CategoryMapped>), RulesError> {
        let mut file: RulesFile =
            toml::from_str(text).map_err(|e| RulesError::Parse(e.to_string()))?;
        let mut mapped = Vec::new();
        if let Some(statement) = &mut file.statement {
            statement.upgrade_2023(&mut mapped);
        }
        for rule in &mut file.rules {
            if let Some(statement) = &mut rule.statement {
                statement.upgrade_2023(&rule.name, &mut mapped);
            }
        }
        let mut set = Self::from_specs(file.rules, file.attributes, file.statement)?;
        set.source = Some(text.to_owned());
        Ok((set, mapped))
    }

    /// The rules file's text: the one it was read from, comments and all, or else
    /// [`Self::to_toml`]. What a publish stores.
    pub fn text(&self) -> String {
        self.source.clone().unwrap_or_else(|| self.to_toml())
    }

    pub fn from_file(path: &Path) -> Result<Self, RulesError> {
        let text = std::fs::read_to_string(path).map_err(|error| RulesError::Read {
            path: path.display().to_string(),
            error,
        })?;
        Self::from_toml(&text)
    }

    pub fn default_rules() -> Self {
        Self::from_toml(DEFAULT_RULES).expect("the shipped default rules are valid")
    }

    pub(super) fn specs(&self) -> Vec<RuleSpec> {
        self.rules
            .iter()
            .map(|rule| RuleSpec {
                name: rule.name.clone(),
                kinds: rule.kinds.clone(),
                when: rule.when.clone(),
                action: rule.action,
                labels: rule.labels.clone(),
                unless: rule.unless.as_ref().map(|(source, _)| source.clone()),
                reason: rule.reason.clone(),
                shadow: rule.shadow,
                duration: rule.duration_text.clone(),
                rollout: rule.rollout,
                guard: rule.guard,
                statement: rule.statement_spec.clone(),
            })
            .collect()
    }

    /// The rule set as a rules file (without the comments of the file it came from): what a
    /// moderator edits into a candidate for a backtest.
    pub fn to_toml(&self) -> String {
        toml::to_string(&RulesFile {
            rules: self.specs(),
            attributes: self.declarations.clone(),
            statement: self.statement.clone(),
        })
        .expect("a rule set serializes")
    }
}
