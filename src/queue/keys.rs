//! The one place Redis key names are made. Every key of a shard shares its hash tag, so each
//! script touches one cluster slot; the tags are chosen so that a layout's shards sit evenly
//! over the 16,384 slots, and so over the masters that own even slot ranges.

use std::sync::Arc;

use crate::domain::EntityId;

/// Redis Cluster's hash slots.
pub const SLOTS: u16 = 16_384;

/// One shard of one layout: its index and its layout's shard count (so the shards of a
/// previous layout, still draining, are told apart from the current ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shard {
    pub count: u16,
    pub index: u16,
}

impl Shard {
    /// The shard's name in the shard index: `<count>.<index>`.
    pub fn id(&self) -> String {
        format!("{}.{}", self.count, self.index)
    }

    pub fn parse(id: &str) -> Option<Self> {
        let (count, index) = id.split_once('.')?;
        let shard = Self {
            count: count.parse().ok()?,
            index: index.parse().ok()?,
        };
        (shard.index < shard.count).then_some(shard)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The shards of one shard count, with their hash tags.
#[derive(Debug, Clone)]
struct Layout {
    count: u16,
    /// `{<prefix>:<count>.<index>.<salt>}`: the salt is the first that puts the tag in the
    /// shard's own stretch of slots.
    tags: Arc<Vec<String>>,
}

impl Layout {
    fn new(prefix: &str, count: u16) -> Self {
        let tags = (0..count)
            .map(|index| shard_tag(prefix, count, index))
            .collect();
        Self {
            count,
            tags: Arc::new(tags),
        }
    }

    /// The shard that owns an entity: FNV-1a of its id, stable across processes and versions.
    fn shard_of(&self, entity: &EntityId) -> Shard {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in entity.as_str().bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        Shard {
            count: self.count,
            index: (hash % u64::from(self.count)) as u16,
        }
    }
}

/// The hash tag of shard `index` of `count`: the first salt that puts it in the shard's own
/// stretch of slots.
fn shard_tag(prefix: &str, count: u16, index: u16) -> String {
    let stretch = spread_slots(count, index);
    (0u32..)
        .map(|salt| format!("{prefix}:{count}.{index}.{salt}"))
        .find(|tag| stretch.contains(&slot_of(tag)))
        .map(|tag| format!("{{{tag}}}"))
        .expect("some salt lands in every stretch of slots")
}

/// The slots shard `index` of `count` may use: the `index`-th of `count` equal stretches.
fn spread_slots(count: u16, index: u16) -> std::ops::Range<u16> {
    let at = |i: u32| (i * u32::from(SLOTS) / u32::from(count)) as u16;
    at(u32::from(index))..at(u32::from(index) + 1)
}

/// The cluster slot of a hash tag's content (CRC16/XMODEM, as Redis computes it).
pub fn slot_of(tag: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % SLOTS
}

#[derive(Debug, Clone)]
pub struct Keyspace {
    prefix: String,
    current: Layout,
    /// A layout being drained after the shard count changed: entities it still holds stay
    /// there until evaluated; new ones go to the current layout.
    previous: Option<Layout>,
}

impl Keyspace {
    pub fn new(prefix: impl Into<String>, shards: u16) -> Self {
        assert!(shards > 0, "at least one shard");
        let prefix = prefix.into();
        Self {
            current: Layout::new(&prefix, shards),
            previous: None,
            prefix,
        }
    }

    /// Also drains the layout of `shards` shards (the count before a change); none if it is
    /// the current count.
    pub fn draining(mut self, shards: Option<u16>) -> Self {
        self.previous = shards
            .filter(|&count| count > 0 && count != self.current.count)
            .map(|count| Layout::new(&self.prefix, count));
        self
    }

    pub fn shards(&self) -> u16 {
        self.current.count
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Every shard of the current layout.
    pub fn current_shards(&self) -> impl Iterator<Item = Shard> + '_ {
        (0..self.current.count).map(|index| Shard {
            count: self.current.count,
            index,
        })
    }

    /// Every shard of the layout being drained (none when no shard count change is under way).
    pub fn previous_shards(&self) -> impl Iterator<Item = Shard> + '_ {
        self.previous.iter().flat_map(|layout| {
            (0..layout.count).map(|index| Shard {
                count: layout.count,
                index,
            })
        })
    }

    /// The shard of the current layout that owns an entity.
    pub fn shard_of(&self, entity: &EntityId) -> Shard {
        self.current.shard_of(entity)
    }

    /// The shard of the layout being drained that owned an entity, when it differs from the
    /// current one.
    pub fn previous_shard_of(&self, entity: &EntityId) -> Option<Shard> {
        let previous = self.previous.as_ref()?.shard_of(entity);
        let current = self.shard_of(entity);
        (self.tag(previous) != self.tag(current)).then_some(previous)
    }

    /// The keys of a shard of the current or the draining layout.
    pub fn for_shard(&self, shard: Shard) -> ShardKeys {
        ShardKeys {
            shard,
            tag: self.tag(shard).to_owned(),
        }
    }

    pub fn for_entity(&self, entity: &EntityId) -> ShardKeys {
        self.for_shard(self.shard_of(entity))
    }

    fn tag(&self, shard: Shard) -> &str {
        let layout = if shard.count == self.current.count {
            &self.current
        } else {
            self.previous
                .as_ref()
                .filter(|l| l.count == shard.count)
                .expect("a shard of the current or the draining layout")
        };
        &layout.tags[usize::from(shard.index)]
    }

    /// The keys of a shard of a layout this process does not use (another process's, during a
    /// shard count change), to see whether it still holds anything.
    pub fn for_foreign_shard(&self, shard: Shard) -> ShardKeys {
        ShardKeys {
            shard,
            tag: shard_tag(&self.prefix, shard.count, shard.index),
        }
    }

    /// Whether a shard belongs to the current or the draining layout.
    pub fn knows(&self, shard: Shard) -> bool {
        shard.index < shard.count
            && (shard.count == self.current.count
                || self
                    .previous
                    .as_ref()
                    .is_some_and(|l| l.count == shard.count))
    }

    /// The keys that span shards: the shard indexes and the wake-up channel, under one hash
    /// tag of their own.
    pub fn index(&self) -> IndexKeys {
        IndexKeys {
            tag: format!("{{{}}}", self.prefix),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ShardKeys {
    shard: Shard,
    tag: String,
}

impl ShardKeys {
    pub fn shard(&self) -> Shard {
        self.shard
    }
    /// ZSET entity -> fire-at (unix ms).
    pub fn due(&self) -> String {
        format!("{}:due", self.tag)
    }
    /// HASH entity -> first unclaimed event time (unix ms), the max-wait anchor.
    pub fn pending(&self) -> String {
        format!("{}:pending", self.tag)
    }
    /// ZSET entity -> lease deadline (unix ms) of a running evaluation.
    pub fn inflight(&self) -> String {
        format!("{}:inflight", self.tag)
    }
    /// HASH entity -> claim token of the running evaluation.
    pub fn claims(&self) -> String {
        format!("{}:claims", self.tag)
    }
    /// HASH entity -> JSON failure record (attempts, first/last failure, last error) of an
    /// entity that is still being retried.
    pub fn failures(&self) -> String {
        format!("{}:failures", self.tag)
    }
    /// ZSET entity -> time it was dead-lettered (unix ms).
    pub fn dead(&self) -> String {
        format!("{}:dead", self.tag)
    }
    /// HASH entity -> JSON failure record of a dead-lettered entity, with its reason.
    pub fn dead_info(&self) -> String {
        format!("{}:dead:info", self.tag)
    }
    /// STRING holding the token of the evaluation that owns the entity.
    pub fn lock(&self, entity: &EntityId) -> String {
        format!("{}:lock:{}", self.tag, entity)
    }
    /// STRING holding the dedup key of the entity's last applied action, for a day: a cache of
    /// the Postgres constraint, read by the lock and written by the ack.
    pub fn applied(&self, entity: &EntityId) -> String {
        format!("{}:applied:{}", self.tag, entity)
    }
}

/// Which shard index: of due times, or of lease deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    Due,
    Leases,
}

impl IndexKind {
    fn name(self) -> &'static str {
        match self {
            IndexKind::Due => "due",
            IndexKind::Leases => "leases",
        }
    }
}

/// Keys of the shard indexes (docs/state-machine.md): which shards may hold something due (or
/// an expired lease) and from when, so that idle workers ask one key instead of every shard.
#[derive(Debug, Clone)]
pub struct IndexKeys {
    tag: String,
}

impl IndexKeys {
    /// ZSET shard id -> the earliest time anything in the shard may be due; never later than
    /// the truth.
    pub fn times(&self, kind: IndexKind) -> String {
        format!("{}:shards:{}", self.tag, kind.name())
    }
    /// HASH shard id -> how many reports the shard has had (a reader that read another count
    /// than the current one only lowers the shard's time).
    pub fn reports(&self, kind: IndexKind) -> String {
        format!("{}:shards:{}:reports", self.tag, kind.name())
    }
    /// STRING held by the process taking the current step of the index rescan of the layouts
    /// of `shards` shards (processes of another count, during a change, rescan their own).
    pub fn rescan_lock(&self, shards: u16) -> String {
        format!("{}:shards:rescan:{shards}", self.tag)
    }
    /// STRING counter: how many shards that rescan has read, so far (its position).
    pub fn rescan_cursor(&self, shards: u16) -> String {
        format!("{}:shards:rescan:{shards}:next", self.tag)
    }
    /// Whether `key` is the rescan's own bookkeeping (its lock and cursor), which the rescan
    /// writes on a timer whatever else happens: a check that nothing was scheduled skips them.
    pub fn is_rescan_bookkeeping(&self, key: &str) -> bool {
        key.strip_prefix(self.tag.as_str())
            .is_some_and(|rest| rest.starts_with(":shards:rescan:"))
    }
    /// Pub/sub channel told when something became due sooner than the index said.
    pub fn wake_channel(&self) -> String {
        format!("{}:wake", self.tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_shard_carries_the_same_hash_tag() {
        let keys = Keyspace::new("q", 16);
        let entity = EntityId::parse("post:9842").unwrap();
        let shard = keys.for_entity(&entity);
        let tag = keys.tag(shard.shard()).to_owned();
        for key in [
            shard.due(),
            shard.pending(),
            shard.inflight(),
            shard.claims(),
            shard.failures(),
            shard.dead(),
            shard.dead_info(),
            shard.lock(&entity),
            shard.applied(&entity),
        ] {
            assert!(key.starts_with(&tag), "{key}");
        }
        let index = keys.index();
        for kind in [IndexKind::Due, IndexKind::Leases] {
            for key in [index.times(kind), index.reports(kind)] {
                assert!(key.starts_with("{q}:"), "{key}");
            }
        }
    }

    #[test]
    fn shards_are_stable_and_spread() {
        let keys = Keyspace::new("q", 16);
        let entity = EntityId::parse("post:1").unwrap();
        assert_eq!(keys.shard_of(&entity), keys.shard_of(&entity.clone()));
        let used: std::collections::HashSet<u16> = (0..1000)
            .map(|i| {
                keys.shard_of(&EntityId::parse(&format!("post:{i}")).unwrap())
                    .index
            })
            .collect();
        assert_eq!(used.len(), 16);
    }

    /// The slot of a full key, hash tag included, as Redis computes it.
    fn key_slot(key: &str) -> u16 {
        let open = key.find('{').unwrap();
        let close = open + key[open..].find('}').unwrap();
        slot_of(&key[open + 1..close])
    }

    #[test]
    fn slot_function_matches_redis() {
        // Values from CLUSTER KEYSLOT on Redis 7.
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("somekey"), 11058);
    }

    #[test]
    fn the_default_layout_spreads_evenly_over_3_to_10_masters_with_even_slot_ranges() {
        let count = crate::settings::Redis::default().shards;
        let keys = Keyspace::new("quiesce", count);
        let slots: Vec<u16> = keys
            .current_shards()
            .map(|s| key_slot(&keys.for_shard(s).due()))
            .collect();
        for masters in 3u32..=10 {
            // The ranges `redis-cli --cluster create` gives: equal, contiguous.
            let per_master: Vec<u32> = (0..masters)
                .map(|m| {
                    let (from, to) = (
                        m * u32::from(SLOTS) / masters,
                        (m + 1) * u32::from(SLOTS) / masters,
                    );
                    slots
                        .iter()
                        .filter(|&&s| (from..to).contains(&u32::from(s)))
                        .count() as u32
                })
                .collect();
            let (max, min) = (
                *per_master.iter().max().unwrap(),
                *per_master.iter().min().unwrap(),
            );
            assert!(
                f64::from(max) <= 1.25 * f64::from(min),
                "{masters} masters: {per_master:?}"
            );
        }
    }

    #[test]
    fn a_draining_layout_has_keys_of_its_own_and_is_named_by_count() {
        let keys = Keyspace::new("q", 12).draining(Some(8));
        let entity = EntityId::parse("post:77").unwrap();
        let current = keys.shard_of(&entity);
        assert_eq!(current.count, 12);
        let previous: Vec<Shard> = keys.previous_shards().collect();
        assert_eq!(previous.len(), 8);
        assert!(keys.knows(previous[3]) && keys.knows(current));
        assert!(!keys.knows(Shard { count: 9, index: 0 }));
        assert_ne!(
            keys.for_shard(previous[0]).due(),
            keys.for_shard(Shard {
                count: 12,
                index: 0
            })
            .due()
        );
        assert_eq!(Shard::parse(&current.id()), Some(current));
        assert_eq!(Shard::parse("4.4"), None);
        assert!(
            Keyspace::new("q", 12)
                .draining(Some(12))
                .previous_shards()
                .next()
                .is_none()
        );
    }
}
