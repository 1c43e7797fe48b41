//! Dead letters: entities that failed fatally or ran out of attempts, with their failure
//! records; listed shard by shard and redriven (made due again with fresh attempts).

use super::{Queue, Result, scripts::SCRIPTS};
use crate::domain::EntityId;

/// Dead letters read, and redriven, per call of [`Queue::redrive_matching`].
const REDRIVE_PAGE: usize = 1000;

/// The failure history an entity carries in Redis while retried, and into the dead letters.
#[derive(
    Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct FailureRecord {
    /// `fatal` or `attempts_exhausted`, for dead letters.
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub last_error: String,
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub first_failure_ms: i64,
    #[serde(default)]
    pub last_failure_ms: i64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct DeadLetter {
    pub entity: String,
    pub dead_lettered_at_ms: i64,
    #[serde(flatten)]
    pub record: FailureRecord,
}

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

#[derive(Debug, Default)]
pub struct DeadLetterPage {
    pub entries: Vec<DeadLetter>,
    pub next: Option<DeadLetterCursor>,
}

impl Queue {
    /// Dead-lettered entities, oldest first, shard by shard; `cursor` continues a listing.
    pub async fn dead_letters(
        &self,
        cursor: DeadLetterCursor,
        limit: usize,
    ) -> Result<DeadLetterPage> {
        let mut page = DeadLetterPage::default();
        let mut shard = cursor.shard;
        let mut offset = cursor.offset;
        while shard < self.keys.shards() && page.entries.len() < limit {
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
                for ((entity, at), info) in members.iter().zip(infos) {
                    let record: FailureRecord = info
                        .and_then(|raw| serde_json::from_str(&raw).ok())
                        .unwrap_or_default();
                    page.entries.push(DeadLetter {
                        entity: entity.clone(),
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
        if shard < self.keys.shards() {
            page.next = Some(DeadLetterCursor { shard, offset });
        }
        Ok(page)
    }

    /// Takes entities out of the dead-letter set, due now with fresh attempts; returns how
    /// many were dead-lettered.
    pub async fn redrive(&self, entities: &[EntityId]) -> Result<usize> {
        self.count_per_shard("redrive", &SCRIPTS.redrive, entities, |k| {
            vec![k.dead(), k.dead_info(), k.due(), k.pending(), k.failures()]
        })
        .await
    }

    /// Redrives every dead letter (of `reason`, if given); returns how many.
    pub async fn redrive_matching(&self, reason: Option<&str>) -> Result<usize> {
        let mut matching = Vec::new();
        let mut cursor = Some(DeadLetterCursor::default());
        while let Some(at) = cursor {
            let page = self.dead_letters(at, REDRIVE_PAGE).await?;
            matching.extend(
                page.entries
                    .into_iter()
                    .filter(|d| reason.is_none() || d.record.reason.as_deref() == reason)
                    .filter_map(|d| EntityId::parse(&d.entity).ok()),
            );
            cursor = page.next;
        }
        let mut redriven = 0;
        for chunk in matching.chunks(REDRIVE_PAGE) {
            redriven += self.redrive(chunk).await?;
        }
        Ok(redriven)
    }
}
