//! A shard count change under way (docs/operations.md, "Changing the shard count"): the
//! previous layout drains in place (its entities stay there, max-wait anchors included, until
//! evaluated), its dead letters move to the current layout, where redrive and the repair sweep
//! look for them, and `quiesce shards` reads what each layout still holds.

use std::collections::HashMap;

use super::{Queue, Result, Shard};
use crate::domain::EntityId;

/// Dead letters one move takes from one draining shard.
const DEAD_MOVED_PER_SHARD: usize = 1000;

/// A dead letter found in the draining layout, on its way to the current one.
struct Moving {
    from: Shard,
    entity: EntityId,
    dead_at: f64,
    info: Option<String>,
}

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
    /// Nothing left to evaluate or to move: the layout can be retired.
    pub fn is_empty(&self) -> bool {
        self.due == 0 && self.pending == 0 && self.inflight == 0 && self.dead == 0
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

    /// Moves dead letters out of the draining layout into the current one: of `entities`, or
    /// (with `None`) up to a thousand per draining shard. Each is added to the current layout
    /// before it leaves the old one, so it is dead-lettered in one of them at every moment and
    /// never scheduled meanwhile. Returns how many moved.
    pub async fn move_draining_dead_letters(&self, entities: Option<&[EntityId]>) -> Result<usize> {
        let mut found: Vec<Moving> = Vec::new();
        match entities {
            Some(entities) => {
                let groups = self.group(
                    entities
                        .iter()
                        .filter(|e| self.keys.previous_shard_of(e).is_some())
                        .map(|e| (e, ())),
                    |e| self.keys.previous_shard_of(e).expect("filtered on it"),
                );
                for (keys, members) in groups {
                    let mut pipe = redis::pipe();
                    for (entity, ()) in &members {
                        pipe.zscore(keys.dead(), entity.as_str())
                            .hget(keys.dead_info(), entity.as_str());
                    }
                    let mut redis = self.redis.clone();
                    let replies: Vec<(Option<f64>, Option<String>)> =
                        pipe.query_async(&mut redis).await?;
                    for ((entity, ()), (score, info)) in members.into_iter().zip(replies) {
                        if let Some(dead_at) = score {
                            found.push(Moving {
                                from: keys.shard(),
                                entity: entity.clone(),
                                dead_at,
                                info,
                            });
                        }
                    }
                }
            }
            None => {
                for shard in self.keys.previous_shards() {
                    let keys = self.keys.for_shard(shard);
                    let mut redis = self.redis.clone();
                    let dead: Vec<(String, f64)> = redis::cmd("ZRANGE")
                        .arg(keys.dead())
                        .arg(0)
                        .arg(DEAD_MOVED_PER_SHARD - 1)
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
                    for ((member, dead_at), info) in dead.into_iter().zip(infos) {
                        if let Ok(entity) = EntityId::parse(&member) {
                            found.push(Moving {
                                from: shard,
                                entity,
                                dead_at,
                                info,
                            });
                        }
                    }
                }
            }
        }
        if found.is_empty() {
            return Ok(0);
        }
        // Into the current layout first, one atomic pipeline per shard.
        let mut by_current: HashMap<Shard, Vec<&Moving>> = HashMap::new();
        for item in &found {
            by_current
                .entry(self.keys.shard_of(&item.entity))
                .or_default()
                .push(item);
        }
        for (shard, items) in by_current {
            let keys = self.keys.for_shard(shard);
            let mut pipe = redis::pipe();
            pipe.atomic();
            for item in items {
                pipe.cmd("ZADD")
                    .arg(keys.dead())
                    .arg("NX")
                    .arg(item.dead_at)
                    .arg(item.entity.as_str())
                    .ignore();
                if let Some(info) = &item.info {
                    pipe.cmd("HSETNX")
                        .arg(keys.dead_info())
                        .arg(item.entity.as_str())
                        .arg(info)
                        .ignore();
                }
            }
            let mut redis = self.redis.clone();
            pipe.exec_async(&mut redis).await?;
        }
        // Then out of the draining one.
        let mut by_previous: HashMap<Shard, Vec<&EntityId>> = HashMap::new();
        for item in &found {
            by_previous.entry(item.from).or_default().push(&item.entity);
        }
        for (shard, entities) in by_previous {
            let keys = self.keys.for_shard(shard);
            let members: Vec<&str> = entities.iter().map(|e| e.as_str()).collect();
            let mut redis = self.redis.clone();
            redis::pipe()
                .atomic()
                .zrem(keys.dead(), &members)
                .ignore()
                .hdel(keys.dead_info(), &members)
                .ignore()
                .exec_async(&mut redis)
                .await?;
        }
        Ok(found.len())
    }
}
