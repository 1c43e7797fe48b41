//! The one place Redis key names are made. Every key of a shard shares the hash tag
//! `{<prefix>:<shard>}`, so each script touches one cluster slot.

use crate::domain::EntityId;

#[derive(Debug, Clone)]
pub struct Keyspace {
    prefix: String,
    shards: u16,
}

impl Keyspace {
    pub fn new(prefix: impl Into<String>, shards: u16) -> Self {
        assert!(shards > 0, "at least one shard");
        Self {
            prefix: prefix.into(),
            shards,
        }
    }

    pub fn shards(&self) -> u16 {
        self.shards
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The shard that owns an entity: FNV-1a of its id, stable across processes and versions.
    pub fn shard_of(&self, entity: &EntityId) -> u16 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in entity.as_str().bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        (hash % u64::from(self.shards)) as u16
    }

    pub fn for_shard(&self, shard: u16) -> ShardKeys {
        debug_assert!(shard < self.shards);
        ShardKeys {
            shard,
            tag: format!("{{{}:{}}}", self.prefix, shard),
        }
    }

    pub fn for_entity(&self, entity: &EntityId) -> ShardKeys {
        self.for_shard(self.shard_of(entity))
    }
}

#[derive(Debug, Clone)]
pub struct ShardKeys {
    shard: u16,
    tag: String,
}

impl ShardKeys {
    pub fn shard(&self) -> u16 {
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
    /// STRING marking an action dedup key as applied (a cache of the Postgres constraint).
    pub fn applied_action(&self, dedup_key: &str) -> String {
        format!("{}:applied:{}", self.tag, dedup_key)
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
        let tag = format!("{{q:{}}}", shard.shard());
        for key in [
            shard.due(),
            shard.pending(),
            shard.inflight(),
            shard.claims(),
            shard.failures(),
            shard.dead(),
            shard.dead_info(),
            shard.lock(&entity),
            shard.applied_action("abc"),
        ] {
            assert!(key.starts_with(&tag), "{key}");
        }
    }

    #[test]
    fn shards_are_stable_and_spread() {
        let keys = Keyspace::new("q", 16);
        let entity = EntityId::parse("post:1").unwrap();
        assert_eq!(keys.shard_of(&entity), keys.shard_of(&entity.clone()));
        let used: std::collections::HashSet<u16> = (0..1000)
            .map(|i| keys.shard_of(&EntityId::parse(&format!("post:{i}")).unwrap()))
            .collect();
        assert_eq!(used.len(), 16);
    }
}
