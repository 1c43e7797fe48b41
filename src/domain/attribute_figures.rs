//! What a snapshot read of attributes for the rules: the aggregates of the entity's event
//! attributes (per signal and attribute; per trailing window too), its context and its
//! author's. An evaluation keeps them in its snapshot, so a backtest replays them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Attributes, Status};

/// Which attribute figures a snapshot reads: the rules in force decide
/// (`RuleSet::attribute_reads`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
pub struct AttributeReads {
    /// The aggregates of the entity's event attributes.
    #[serde(default)]
    pub events: bool,
    /// The entity's context, and its author's (status, context, counts).
    #[serde(default)]
    pub context: bool,
    /// The aggregates over the trailing windows (`count_in` with a filter, `max_in`).
    #[serde(default)]
    pub windows: bool,
}

impl AttributeReads {
    /// Everything (the read API).
    pub const ALL: Self = Self {
        events: true,
        context: true,
        windows: true,
    };
}

/// One attribute over one trailing window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WindowStats {
    /// Events per value, for a string or boolean attribute.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, i64>,
    /// The largest value, for a number attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// The value of the latest event in the window that carried it, for a number attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<f64>,
}

/// What a snapshot knows of one attribute over one signal's events.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AttributeStats {
    /// Events per value, for a string or boolean attribute.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, i64>,
    /// The largest value, for a number attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// The value of the latest event (received last) that carried it, for a number attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<f64>,
    /// Per trailing window (`1m` to `24h`), when the rules read windows of attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub windows: BTreeMap<String, WindowStats>,
}

/// An entity's author as a snapshot saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuthorContext {
    pub id: String,
    /// Its status (`visible` if quiesce has no record of it).
    pub status: Status,
    /// Its context (`PUT /v1/entities/{entity}/attributes`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: Attributes,
    /// Its signal counts (e.g. `auto.hide`, the hides of its entities).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counts: BTreeMap<String, i64>,
}

/// The attribute figures a snapshot read: only those the rules in force read, and the
/// evaluation keeps them so that a backtest replays the same.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SnapshotAttributes {
    /// What was read (a backtest tells a snapshot read without aggregates or context from one
    /// where there were none).
    #[serde(default, skip_serializing_if = "is_default")]
    pub read: AttributeReads,
    /// Aggregates of the events' attributes, by signal, then attribute.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub events: BTreeMap<String, BTreeMap<String, AttributeStats>>,
    /// The entity's own context.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub context: Attributes,
    /// Its author, when the context was read and the entity has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<AuthorContext>,
}

fn is_default(reads: &AttributeReads) -> bool {
    *reads == AttributeReads::default()
}

impl SnapshotAttributes {
    /// Nothing read, nothing found.
    pub fn is_empty(&self) -> bool {
        is_default(&self.read)
            && self.events.is_empty()
            && self.context.is_empty()
            && self.author.is_none()
    }
}
