//! The rule set in force in this process: a [`Rules`] handle that swaps the whole set when
//! another rules version becomes active, never back to an older activation.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
};

use super::RuleSet;

/// The rule set in force, swapped whole when another version becomes active; an evaluation
/// holds the set it started with, so it decides with one version from start to end.
pub struct Rules {
    current: RwLock<InForce>,
    source: Option<PathBuf>,
}

struct InForce {
    set: Arc<RuleSet>,
    /// The activation that made `set` active (`None`: not from the versions table yet).
    activation: Option<i64>,
}

impl Rules {
    /// `set` (the rules file's, or the built-in rules) until a stored version is installed;
    /// `source` is the file it came from, which seeds an empty versions table.
    pub fn new(set: RuleSet, source: Option<PathBuf>) -> Self {
        let rules = Self {
            current: RwLock::new(InForce {
                set: Arc::new(set),
                activation: None,
            }),
            source,
        };
        rules.record_version();
        rules
    }

    pub fn current(&self) -> Arc<RuleSet> {
        Arc::clone(&self.current.read().expect("not poisoned").set)
    }

    /// The file the rules were first read from, if any (the built-in rules otherwise).
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    /// The activation the rules in force came from, if any.
    pub fn activation(&self) -> Option<i64> {
        self.current.read().expect("not poisoned").activation
    }

    /// Puts `set` in force as of `activation`, unless a later activation is in force already
    /// (two checks racing never put an older version back). Returns whether it did.
    pub fn install(&self, set: RuleSet, activation: i64) -> bool {
        {
            let mut current = self.current.write().expect("not poisoned");
            if current.activation.is_some_and(|known| known >= activation) {
                return false;
            }
            *current = InForce {
                set: Arc::new(set),
                activation: Some(activation),
            };
        }
        self.record_version();
        true
    }

    /// The version in force as a gauge (0: not a stored version), for the fleet's alert.
    fn record_version(&self) {
        let version = self.current().version().unwrap_or(0);
        metrics::gauge!(crate::telemetry::names::RULES_VERSION).set(version as f64);
    }
}
