//! One consistent read of an entity, what the rules decide on, and the dedup key that makes an
//! action on it take effect once.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{EntityId, SnapshotAttributes, Status, Timer};

/// The trailing windows rules can count over (minute-granular: by receive-time minute).
pub const WINDOWS: [(&str, i64); 4] = [("1m", 60), ("5m", 300), ("1h", 3600), ("24h", 86_400)];

/// A count of events and the sum of their weights.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SignalTotals {
    pub count: i64,
    pub weight: f64,
}

/// What a snapshot knows of one signal on one entity.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SignalStats {
    /// Events ever recorded (the totals survive event retention).
    pub count: i64,
    /// Their summed weights: an actor-weighted score when weights model reporters' trust.
    pub weight: f64,
    /// Distinct actors among the retained events; counted only when a rule asks for them
    /// (it reads every retained event of the entity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actors: Option<i64>,
    /// Count and weight over each trailing window of [`WINDOWS`] and [`super::DAY_WINDOWS`];
    /// only the windows the rules use were read (none: empty).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub windows: BTreeMap<String, SignalTotals>,
    /// Decayed counts by half-life as the rules name it (`"30d"`): each event weighs
    /// 0.5^(age / half-life), its age in whole minutes from the start of its bucket (its
    /// minute today, its UTC day before) to the start of the minute of `taken_at`, so an event
    /// of that minute weighs exactly 1. Only the half-lives the rules use were read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub decayed: BTreeMap<String, f64>,
}

/// One consistent read of an entity: what the rules decide on.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    pub entity: EntityId,
    pub kind: String,
    pub status: Status,
    pub moderation_version: i64,
    /// Events recorded when the snapshot was taken; the evaluation covers these.
    pub event_count: i64,
    /// Events covered by the evaluations before this one: the difference is how many events
    /// this evaluation collapses.
    #[serde(skip)]
    pub previously_evaluated: i64,
    /// Of `event_count`, the events not folded into the figures yet when it was read: the
    /// worker folds an entity that has gathered many (`evaluation/batches.rs`).
    #[serde(skip)]
    pub unfolded: i64,
    pub signals: BTreeMap<String, SignalStats>,
    pub taken_at: DateTime<Utc>,
    /// A moderator's override in force: automation does not go past this status.
    pub override_cap: Option<Status>,
    /// Who wrote the entity, if an event said so.
    pub author: Option<EntityId>,
    /// The attribute aggregates and context read for the rules (only what they read).
    #[serde(skip_serializing_if = "SnapshotAttributes::is_empty")]
    pub attributes: SnapshotAttributes,
    /// The timed action in force, if any: once it is due, the evaluation restores the entity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timer: Option<Timer>,
    /// The day the content was posted, as the sender gave it (the latest `content_date` event
    /// attribute): its statements' `content_date`. Not what the rules read, nor stored.
    #[serde(skip)]
    pub content_date: Option<NaiveDate>,
    /// When the entity's first event was recorded (its row's creation): its statements'
    /// `content_date` when the sender gave none.
    #[serde(skip)]
    pub first_event_at: Option<DateTime<Utc>>,
    /// Where the events it covers entered their traces (`traceparent`s, oldest first), when
    /// spans are exported: not part of what the rules see or what is stored.
    #[serde(skip)]
    pub traces: Vec<String>,
}

impl Snapshot {
    /// An entity with no events, for checking rules before any data exists.
    pub fn empty_for_validation() -> Self {
        Self {
            entity: EntityId::parse("post:0").expect("valid id"),
            kind: "post".into(),
            status: Status::Visible,
            moderation_version: 0,
            event_count: 0,
            previously_evaluated: 0,
            unfolded: 0,
            signals: BTreeMap::new(),
            taken_at: DateTime::<Utc>::UNIX_EPOCH,
            override_cap: None,
            author: None,
            attributes: SnapshotAttributes::default(),
            timer: None,
            content_date: None,
            first_event_at: None,
            traces: Vec::new(),
        }
    }

    /// A visible entity with these signal counts (each event weighing 1) and nothing else: what
    /// the rules would see on exactly those totals.
    pub fn with_counts<'a>(
        entity: EntityId,
        counts: impl IntoIterator<Item = (&'a str, i64)>,
    ) -> Self {
        let mut snapshot = Self::empty_for_validation();
        snapshot.kind = entity.kind().to_owned();
        snapshot.entity = entity;
        for (signal, count) in counts {
            snapshot.signals.insert(
                signal.to_owned(),
                SignalStats {
                    count,
                    weight: count as f64,
                    ..Default::default()
                },
            );
        }
        snapshot
    }

    /// The timer in force if it has ended when the snapshot was taken: the evaluation restores
    /// the entity.
    pub fn due_timer(&self) -> Option<&Timer> {
        self.timer.as_ref().filter(|t| t.due(self.taken_at))
    }

    /// The dedup key of the restore that ends the timer in force: one per version of the
    /// entity (a rule's key has its rule name where this has `restore`, which a `-` keeps
    /// apart from any rule's).
    pub fn restore_key(&self) -> String {
        format!("restore-{}", self.dedup_key(""))
    }

    /// hash(entity, rule, hour of the snapshot, moderation version): the same rule acts on the
    /// same version of an entity once. The version is in the key so that after a moderator's
    /// reversal (which bumps it) the rule may act again, once the override allows.
    pub fn dedup_key(&self, rule: &str) -> String {
        let hour = self.taken_at.timestamp().div_euclid(3600);
        let digest = Sha256::digest(format!(
            "{}\n{}\n{}\n{}",
            self.entity, rule, hour, self.moderation_version
        ));
        digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
    }
}
