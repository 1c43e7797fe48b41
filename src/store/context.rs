//! Entity context: what the platform tells quiesce of an entity (`PUT
//! /v1/entities/{entity}/attributes`), appended, never rewritten. The latest row of an entity is
//! its context now; snapshots read it in their one statement (`store/snapshots.rs`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::types::Json;

use super::{Result, Store};
use crate::domain::{Attributes, EntityId};

/// One change of an entity's context.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextChange {
    pub attributes: Attributes,
    pub set_at: DateTime<Utc>,
    pub set_by: String,
}

/// The store's handle on an entity's context as the platform tells it (`Store::context`).
#[derive(Clone, Copy)]
pub struct Context<'a> {
    pub(super) store: &'a Store,
}

impl Context<'_> {
    /// Records the entity's context as `attributes` (the whole of it), set by `by`; returns
    /// when. The rows before stay: they are what earlier evaluations read.
    pub async fn set_context(
        self,
        entity: &EntityId,
        attributes: &Attributes,
        by: &str,
    ) -> Result<DateTime<Utc>> {
        Ok(sqlx::query_scalar!(
            "INSERT INTO entity_context (entity, attributes, set_by) VALUES ($1, $2, $3)
             RETURNING set_at",
            entity.as_str(),
            Json(attributes) as Json<&Attributes>,
            by,
        )
        .fetch_one(&self.store.pool)
        .await?)
    }

    /// The entity's context changes, newest first, at most `limit`.
    pub async fn context_history(
        self,
        entity: &EntityId,
        limit: i64,
    ) -> Result<Vec<ContextChange>> {
        let rows = sqlx::query!(
            r#"SELECT attributes AS "attributes!: Json<Attributes>", set_at, set_by
               FROM entity_context WHERE entity = $1 ORDER BY id DESC LIMIT $2"#,
            entity.as_str(),
            limit,
        )
        .fetch_all(&self.store.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| ContextChange {
                attributes: row.attributes.0,
                set_at: row.set_at,
                set_by: row.set_by,
            })
            .collect())
    }
}
