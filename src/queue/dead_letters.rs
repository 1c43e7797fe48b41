//! Redis' copy of the dead letters: entities that failed fatally or ran out of attempts, with
//! their failure records. It is a cache: Postgres holds the durable record (`store::dead_letters`),
//! which the API lists and redrives from. Here: the shard-by-shard listing the repair sweep
//! reconciles into Postgres, the restore of entries Redis lost, and the redrive step.

use std::time::Duration;

use super::{Queue, Result, scripts::SCRIPTS};
use crate::domain::{DeadLetter, EntityId, FailureRecord};

/// How far ahead of Redis' clock a lease counts as expiring: the reap that follows the read
/// of the failure floors may run that much later.
const EXPIRING_MARGIN: Duration = Duration::from_secs(1);

/// Position in a dead-letter listing: a shard and an offset in its set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeadLetterCursor {
    pub shard: u16,
    pub offset: usize,
}

impl DeadLetterCursor {
    pub fn parse(raw: &str) -> Option<Self> {
        let (shard, offset) = raw.split_once('.')?;
        Some(Self {
            shard: shard.parse().ok()?,
            offset: offset.parse().ok()?,
        })
    }

    pub fn encode(&self) -> String {
        format!("{}.{}", self.shard, self.offset)
    }
}

/// The entity a dead set's member names; a member that is none is reported and passed over
/// (every member is written from an entity id, so one is a sign of a foreign write).
pub(super) fn entity_of_member(member: &str, shard: u16) -> Option<EntityId> {
    match EntityId::parse(member) {
        Ok(entity) => Some(entity),
        Err(error) => {
            tracing::error!(%member, shard, %error, "a dead set holds a member that is not an entity id; passed over");
            None
        }
    }
}

#[derive(Debug, Default)]
pub struct DeadLetterPage {
    pub entries: Vec<DeadLetter>,
    pub next: Option<DeadLetterCursor>,
}

impl Queue {
    /// The dead-letter entries Redis holds, shard by shard; `cursor` continues a listing.
    pub async fn dead_letters(
        &self,
        cursor: DeadLetterCursor,
        limit: usize,
    ) -> Result<DeadLetterPage> {
        self.dead_letters_before(cursor, limit, self.keys.shards())
            .await
    }

    /// As [`Self::dead_letters`], up to (not including) shard `end`: the listing ends there.
    pub async fn dead_letters_before(
        &self,
        cursor: DeadLetterCursor,
        limit: usize,
        end: u16,
    ) -> Result<DeadLetterPage> {
        let end = end.min(self.keys.shards());
        let mut page = DeadLetterPage::default();
        let mut shard = cursor.shard;
        let mut offset = cursor.offset;
        while shard < end && page.entries.len() < limit {
            let keys = self.keys.for_shard(super::Shard {
                count: self.keys.shards(),
                index: shard,
            });
            let want = limit - page.entries.len();
            let mut redis = self.redis.clone();
            let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(keys.dead())
                .arg(offset)
                .arg(offset + want - 1)
                .arg("WITHSCORES")
                .query_async(&mut redis)
                .await?;
            if !members.is_empty() {
                let infos: Vec<Option<String>> = redis::cmd("HMGET")
                    .arg(keys.dead_info())
                    .arg(members.iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>())
                    .query_async(&mut redis)
                    .await?;
                for ((member, at), info) in members.iter().zip(infos) {
                    let Some(entity) = entity_of_member(member, shard) else {
                        continue;
                    };
                    let record: FailureRecord = info
                        .and_then(|raw| serde_json::from_str(&raw).ok())
                        .unwrap_or_default();
                    page.entries.push(DeadLetter {
                        entity,
                        dead_lettered_at_ms: *at as i64,
                        record,
                    });
                }
            }
            if members.len() == want {
                offset += want;
            } else {
                shard += 1;
                offset = 0;
            }
        }
        if shard < end {
            page.next = Some(DeadLetterCursor { shard, offset });
        }
        Ok(page)
    }

    /// Makes entities due now with fresh attempts, out of the dead-letter set if they were in
    /// it (Postgres said they are dead-lettered: they are made due even if Redis lost them);
    /// returns how many were in Redis' dead-letter set.
    pub async fn redrive(&self, entities: &[EntityId]) -> Result<usize> {
        // A shard count change under way: out of the draining layout's dead set too (whenever
        // it was dead-lettered there), and due in the current layout.
        let whenever: Vec<(EntityId, i64)> = entities.iter().map(|e| (e.clone(), -1)).collect();
        let drained = self.forget_draining_dead_letters(&whenever).await?;
        let current = self
            .count_per_shard("redrive", &SCRIPTS.redrive, entities, |k| {
                vec![k.dead(), k.dead_info(), k.due(), k.pending(), k.failures()]
            })
            .await?;
        Ok(current + drained)
    }

    /// Whether Redis holds the entity as dead-lettered.
    pub async fn is_dead_lettered(&self, entity: &EntityId) -> Result<bool> {
        let mut redis = self.redis.clone();
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(self.keys.for_entity(entity).dead())
            .arg(entity.as_str())
            .query_async(&mut redis)
            .await?;
        Ok(score.is_some() || !self.dead_in_draining_layout([entity]).await?.is_empty())
    }

    /// Puts dead letters Redis lost back in its dead-letter set (the check that stops their
    /// scheduling) and takes them out of the due set, one atomic transaction per shard; an
    /// entry Redis still holds is left as it is. Returns how many were missing.
    pub async fn restore_dead_letters(&self, dead: &[DeadLetter]) -> Result<usize> {
        // During a shard count change, one the draining layout holds stays there (processes
        // of the old count look nowhere else).
        let draining = self
            .dead_in_draining_layout(dead.iter().map(|d| &d.entity))
            .await?;
        let current: Vec<&DeadLetter> = dead
            .iter()
            .filter(|d| !draining.contains(d.entity.as_str()))
            .collect();
        self.restore_in_current_layout(&current).await
    }

    /// Puts dead letters in the current layout's dead set (an entry it holds stays as it is)
    /// and out of its due set, one atomic transaction per shard; returns how many were missing.
    pub async fn restore_in_current_layout(&self, dead: &[&DeadLetter]) -> Result<usize> {
        let mut restored = 0;
        for (keys, members) in self.group(dead.iter().map(|d| (&d.entity, *d)), |e| {
            self.keys.shard_of(e)
        }) {
            let mut pipe = redis::pipe();
            pipe.atomic();
            for (entity, letter) in &members {
                let info =
                    serde_json::to_string(&letter.record).expect("a failure record serializes");
                pipe.cmd("ZADD")
                    .arg(keys.dead())
                    .arg("NX")
                    .arg(letter.dead_lettered_at_ms)
                    .arg(entity.as_str())
                    .cmd("HSETNX")
                    .arg(keys.dead_info())
                    .arg(entity.as_str())
                    .arg(info)
                    .ignore()
                    .cmd("ZREM")
                    .arg(keys.due())
                    .arg(entity.as_str())
                    .ignore()
                    .cmd("HDEL")
                    .arg(keys.pending())
                    .arg(entity.as_str())
                    .ignore()
                    .cmd("HDEL")
                    .arg(keys.failures())
                    .arg(entity.as_str())
                    .ignore();
            }
            let mut redis = self.redis.clone();
            let added: Vec<usize> = pipe.query_async(&mut redis).await?;
            restored += added.iter().sum::<usize>();
        }
        Ok(restored)
    }

    /// Entities of one shard whose lease has expired, or will within a second, by Redis' clock
    /// (at most `limit`): those the next reap may count an attempt for.
    pub async fn expiring_leases(&self, shard: super::Shard, limit: usize) -> Result<Vec<String>> {
        let mut redis = self.redis.clone();
        Ok(SCRIPTS
            .expiring
            .key(self.keys.for_shard(shard).inflight())
            .arg(EXPIRING_MARGIN.as_millis() as u64)
            .arg(limit)
            .invoke_async(&mut redis)
            .await?)
    }
}
