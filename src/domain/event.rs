//! One event as quiesce records it.

use serde::{Deserialize, Serialize};

use super::{EntityId, EventId, Signal};

/// Critical events skip the debounce window and fire at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    #[default]
    Normal,
    Critical,
}

impl Priority {
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Normal => "normal",
            Priority::Critical => "critical",
        }
    }
}

/// One validated event, ready to be recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: EventId,
    pub entity: EntityId,
    pub signal: Signal,
    pub actor: Option<String>,
    pub weight: f64,
    pub occurred_at: Option<chrono::DateTime<chrono::Utc>>,
    pub priority: Priority,
    /// Who wrote the entity (`user:77`); automated actions on the entity feed back to it.
    pub author: Option<EntityId>,
}
