//! A shard count change under way (docs/state-machine.md, "Changing the shard count"): the
//! previous layout drains in place (its entities stay there, max-wait anchors included, until
//! evaluated). Its dead letters stay there too while processes of the old count may run (they
//! look nowhere else); a redrive clears them in both layouts, and once every process runs the
//! new count `quiesce shards --move-dead-letters` moves them (`dead_letters`).
//! `quiesce shards` reads what each layout still holds.

use std::collections::{BTreeMap, HashSet};

use super::{Queue, Result, Shard, dead_letters::entity_of_member, scripts::SCRIPTS};
use crate::domain::{DeadLetter, EntityId, FailureRecord};

/// Dead letters read from one draining shard at a time.
const DEAD_READ_PER_SHARD: usize = 1000;

/// What one layout's shards hold in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LayoutDepth {
    pub shards: u16,
    /// Whether this is the layout being drained.
    pub draining: bool,
    pub due: u64,
    /// Max-wait anchors: entities with events not yet claimed.
    pub pending: u64,
    pub inflight: u64,
    pub dead: u64,
}

impl LayoutDepth {
    /// Nothing left to evaluate: the layout's entities have all been evaluated (its dead
    /// letters, if any, still have to move).
    pub fn is_drained(&self) -> bool {
        self.due == 0 && self.pending == 0 && self.inflight == 0
    }
}

impl Queue {
    /// The current layout's totals, then those of the layout being drained (if any).
    pub async fn layout_depths(&self) -> Result<Vec<LayoutDepth>> {
        let mut layouts = vec![
            self.layout_depth(self.keys.current_shards().collect(), false)
                .await?,
        ];
        let previous: Vec<Shard> = self.keys.previous_shards().collect();
        if !previous.is_empty() {
            layouts.push(self.layout_depth(previous, true).await?);
        }
        Ok(layouts)
    }

    async fn layout_depth(&self, shards: Vec<Shard>, draining: bool) -> Result<LayoutDepth> {
        let mut depth = LayoutDepth {
            shards: shards.len() as u16,
            draining,
            ..LayoutDepth::default()
        };
        let replies: Vec<(u64, u64, u64, u64)> = self
            .per_shard(shards.into_iter(), |keys, pipe| {
                pipe.zcard(keys.due())
                    .hlen(keys.pending())
                    .zcard(keys.inflight())
                    .zcard(keys.dead());
            })
            .await?;
        for (due, pending, inflight, dead) in replies {
            depth.due += due;
            depth.pending += pending;
            depth.inflight += inflight;
            depth.dead += dead;
        }
        Ok(depth)
    }

    /// The dead letters the draining layout holds (up to a thousand per shard), with their
    /// failure records; none when no change is under way.
    pub async fn draining_dead_letters(&self) -> Result<Vec<DeadLetter>> {
        let mut found = Vec::new();
        for shard in self.keys.previous_shards() {
            let keys = self.keys.for_shard(shard);
            let mut redis = self.redis.clone();
            let dead: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(keys.dead())
                .arg(0)
                .arg(DEAD_READ_PER_SHARD - 1)
                .arg("WITHSCORES")
                .query_async(&mut redis)
                .await?;
            if dead.is_empty() {
                continue;
            }
            let infos: Vec<Option<String>> = redis::cmd("HMGET")
                .arg(keys.dead_info())
                .arg(dead.iter().map(|(e, _)| e.as_str()).collect::<Vec<_>>())
                .query_async(&mut redis)
                .await?;
            for ((member, at), info) in dead.into_iter().zip(infos) {
                let Some(entity) = entity_of_member(&member, shard.index) else {
                    continue;
                };
                let record: FailureRecord = info
                    .and_then(|raw| serde_json::from_str(&raw).ok())
                    .unwrap_or_default();
                found.push(DeadLetter {
                    entity,
                    dead_lettered_at_ms: at as i64,
                    record,
                });
            }
        }
        Ok(found)
    }

    /// Those of `entities` that the draining layout holds as dead letters.
    pub(super) async fn dead_in_draining_layout<'a>(
        &self,
        entities: impl IntoIterator<Item = &'a EntityId>,
    ) -> Result<HashSet<String>> {
        let mut dead = HashSet::new();
        for (shard, members) in self.by_draining_shard(entities) {
            let keys = self.keys.for_shard(shard);
            let mut pipe = redis::pipe();
            for entity in &members {
                pipe.zscore(keys.dead(), entity.as_str());
            }
            let mut redis = self.redis.clone();
            let scores: Vec<Option<f64>> = pipe.query_async(&mut redis).await?;
            dead.extend(
                members
                    .into_iter()
                    .zip(scores)
                    .filter(|(_, score)| score.is_some())
                    .map(|(entity, _)| entity.as_str().to_owned()),
            );
        }
        Ok(dead)
    }

    /// Takes `entities` out of the draining layout's dead set (with their failure records),
    /// each only if it was dead-lettered at the time given (a later dead-lettering stays).
    /// Returns how many went.
    pub async fn forget_draining_dead_letters(&self, dead: &[(EntityId, i64)]) -> Result<usize> {
        let mut forgotten = 0;
        let mut at: BTreeMap<&str, i64> = BTreeMap::new();
        for (entity, when) in dead {
            at.insert(entity.as_str(), *when);
        }
        for (shard, members) in self.by_draining_shard(dead.iter().map(|(e, _)| e)) {
            let keys = self.keys.for_shard(shard);
            let mut invocation = SCRIPTS.forget_dead.prepare_invoke();
            invocation
                .key(keys.dead())
                .key(keys.dead_info())
                .key(keys.failures());
            for entity in members {
                invocation.arg(entity.as_str()).arg(at[entity.as_str()]);
            }
            let mut redis = self.redis.clone();
            forgotten += invocation.invoke_async::<usize>(&mut redis).await?;
        }
        Ok(forgotten)
    }

    /// Groups entities by their shard in the draining layout (none without a change).
    fn by_draining_shard<'a>(
        &self,
        entities: impl IntoIterator<Item = &'a EntityId>,
    ) -> BTreeMap<Shard, Vec<&'a EntityId>> {
        let mut groups: BTreeMap<Shard, Vec<&EntityId>> = BTreeMap::new();
        for entity in entities {
            if let Some(shard) = self.keys.previous_shard_of(entity) {
                groups.entry(shard).or_default().push(entity);
            }
        }
        groups
    }
}
