//! The active rules version, one rule set for every process of the fleet: rules live in
//! Postgres as numbered versions, one of them active. A publish validates a rules file and
//! stores it as the next version; a rollback makes an earlier one active again (a new
//! activation). Every process puts the active version in force ([`sync`]) when it hears of a
//! change ([`follow`]) and on a poll, swapping its whole rule set at once, so an evaluation never
//! mixes versions. On an empty database the rules file (or the built-in rules) seeds version 1
//! ([`start`]). The guard ([`RuleDemoter`]) publishes a version of its own to turn a rule that
//! moderators reverse too often to shadow.

mod demoter;
mod follow;

use serde_json::Value;
use sha2::{Digest, Sha256};

pub use self::{
    demoter::{GUARD_AUTHOR, RuleDemoter},
    follow::follow,
};
use crate::{
    domain::Actor,
    rules::{RuleSet, Rules, RulesError},
    store::{NewRulesVersion, Store, StoreError},
};

/// The longest publish or rollback message.
pub const MAX_MESSAGE: usize = 1000;

/// Why a seed, a sync, a publish or a rollback failed.
#[derive(Debug, thiserror::Error)]
pub enum ActiveRulesError {
    /// The rules do not compile: nothing was stored.
    #[error(transparent)]
    Invalid(#[from] RulesError),
    /// The message is empty, too long or holds a NUL.
    #[error("message {0}")]
    Message(String),
    /// A stored version that this binary cannot compile (written by another release): the
    /// rules in force stay.
    #[error("rules version {version} cannot be put in force: {error}")]
    Stored { version: i64, error: RulesError },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A stored version as a rule set: read as [`RuleSet::from_stored`] reads it, so that one
/// published before the Transparency Database's schema changed still goes in force (its 2023
/// categories read as those in force, which is logged).
pub(crate) fn stored_rules(version: i64, text: &str) -> Result<RuleSet, ActiveRulesError> {
    let (set, mapped) =
        RuleSet::from_stored(text).map_err(|error| ActiveRulesError::Stored { version, error })?;
    for change in &mapped {
        tracing::warn!(
            version,
            field = %change.field,
            from = %change.from,
            to = change.to,
            "a stored rules version names a category of the Transparency Database's 2023 schema; it is read as the one in force (publish a version that names it)"
        );
    }
    Ok(set.versioned(version))
}

/// Where a process stands after a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synced {
    /// The version in force.
    pub version: i64,
    /// Its rule count.
    pub rules: usize,
    /// Whether this check put it in force.
    pub changed: bool,
}

/// A publish's answer, as `POST /v1/rules` and `quiesce rules publish` give it: the version,
/// then its hash, in the order the README shows (`json!` would sort the keys).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[schema(as = RulesPublished)]
pub struct Published {
    /// The new version's number, now active.
    pub version: i64,
    /// Hex SHA-256 of the rules text.
    pub hash: String,
}

impl Published {
    pub fn new(version: i64, text: &str) -> Self {
        Self {
            version,
            hash: hash(text),
        }
    }
}

/// Hex SHA-256 of a rules file's text: what a version is known by.
pub fn hash(text: &str) -> String {
    format!("{:x}", Sha256::digest(text.as_bytes()))
}

/// A publish or rollback message: 1 to [`MAX_MESSAGE`] characters, no NUL.
pub fn check_message(message: &str) -> Result<(), ActiveRulesError> {
    if message.trim().is_empty() || message.chars().count() > MAX_MESSAGE {
        return Err(ActiveRulesError::Message(format!(
            "must be 1-{MAX_MESSAGE} characters"
        )));
    }
    if message.contains('\0') {
        return Err(ActiveRulesError::Message("must not contain NUL".into()));
    }
    Ok(())
}

/// Seeds an empty versions table with the rules the process started with (its rules file or
/// the built-in rules) as version 1, then puts the active version in force. Concurrent starts
/// seed once.
pub async fn start(store: &Store, rules: &Rules) -> Result<Option<Synced>, ActiveRulesError> {
    let text = rules.current().text();
    let message = match rules.source() {
        Some(path) => format!("seeded from {}", path.display()),
        None => "seeded from the built-in rules".to_owned(),
    };
    let seed = NewRulesVersion {
        text: &text,
        hash: &hash(&text),
        message: &message,
        backtest: None,
    };
    if store
        .rules_versions()
        .seed_rules(&Actor::named("quiesce", None), seed)
        .await?
    {
        tracing::info!(%message, "rules version 1 stored");
    }
    sync(store, rules).await
}

/// Puts the active version in force here if it is not already (one read when it is);
/// `None` while no version is stored.
pub async fn sync(store: &Store, rules: &Rules) -> Result<Option<Synced>, ActiveRulesError> {
    let Some(marker) = store.rules_versions().active_rules_marker().await? else {
        return Ok(None);
    };
    if rules.activation() == Some(marker.activation) {
        return Ok(Some(Synced {
            version: marker.version,
            rules: rules.current().rules().len(),
            changed: false,
        }));
    }
    let Some(active) = store.rules_versions().active_rules().await? else {
        return Ok(None);
    };
    let version = active.marker.version;
    let set = stored_rules(version, &active.rules.text)?;
    let count = set.rules().len();
    let changed = rules.install(set, active.marker.activation);
    if changed {
        tracing::info!(
            version,
            rules = count,
            hash = %active.rules.hash,
            "rules version in force"
        );
    }
    let current = rules.current();
    Ok(Some(Synced {
        version: current.version().unwrap_or(version),
        rules: current.rules().len(),
        changed,
    }))
}

/// Validates `text` and stores it as the next version, active at once, by `actor` (with its
/// audit entry, and a backtest report if it was published from one); puts it in force in
/// this process's `rules` at once (the others hear of it). Returns the new version. An
/// invalid file stores nothing.
pub async fn publish(
    store: &Store,
    rules: Option<&Rules>,
    actor: &Actor,
    text: &str,
    message: &str,
    backtest: Option<&Value>,
) -> Result<i64, ActiveRulesError> {
    check_message(message)?;
    // Postgres text holds no NUL; a TOML file has none outside a comment anyway.
    if text.contains('\0') {
        return Err(RulesError::Parse("the rules text must not contain NUL".into()).into());
    }
    RuleSet::from_toml(text)?;
    let version = store
        .rules_versions()
        .publish_rules(
            actor,
            NewRulesVersion {
                text,
                hash: &hash(text),
                message,
                backtest,
            },
        )
        .await?;
    if let Some(rules) = rules {
        sync(store, rules).await?;
    }
    Ok(version)
}

/// Makes the stored `version` active again by `actor` (a new activation, with its audit
/// entry), once it is known to compile here; puts it in force in `rules` as a publish does.
pub async fn rollback(
    store: &Store,
    rules: Option<&Rules>,
    actor: &Actor,
    version: i64,
    message: &str,
) -> Result<(), ActiveRulesError> {
    check_message(message)?;
    let stored = store
        .rules_versions()
        .rules_version(version)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("there is no rules version {version}")))?;
    stored_rules(version, &stored.text)?;
    store
        .rules_versions()
        .activate_rules(actor, version, message)
        .await?;
    if let Some(rules) = rules {
        sync(store, rules).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_is_the_texts_sha256_in_hex() {
        assert_eq!(
            hash(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn a_message_is_needed_and_bounded() {
        assert!(check_message("tighter flag threshold").is_ok());
        assert!(check_message(" ").is_err());
        assert!(check_message(&"x".repeat(MAX_MESSAGE + 1)).is_err());
        assert!(check_message("a\0b").is_err());
    }
}
