//! Statements of reasons: one written in its decision's transaction with its two deliveries
//! (the platform's `statement.issued` webhook and, when configured, the Transparency
//! Database's batch), and the listings. The appeals against them are `appeals.rs`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, types::Json};

use super::{Result, Store};
use crate::domain::{StatementDraft, Topic};

/// Who took the decision a statement explains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    /// A rule.
    Automated,
    /// A moderator deciding a review queue item.
    Review,
    /// A moderator's override.
    Override,
    /// A moderator's reversal that puts a restriction back.
    Reversal,
}

impl DecidedBy {
    /// Every way a decision is taken, as `decided_by` names them.
    pub const ALL: [DecidedBy; 4] = [
        DecidedBy::Automated,
        DecidedBy::Review,
        DecidedBy::Override,
        DecidedBy::Reversal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Automated => "automated",
            DecidedBy::Review => "review",
            DecidedBy::Override => "override",
            DecidedBy::Reversal => "reversal",
        }
    }
}

/// A statement to write beside its decision.
#[derive(Debug, Clone, Copy)]
pub struct IssuedStatement<'a> {
    pub draft: &'a StatementDraft,
    pub entity: &'a str,
    pub action_id: Option<i64>,
    pub rule: Option<&'a str>,
    pub decided_by: DecidedBy,
    pub previous_status: &'a str,
    pub status: &'a str,
}

/// A stored statement.
#[derive(Debug, Clone, Serialize)]
pub struct StatementRecord {
    pub id: i64,
    /// The platform unique identifier the Transparency Database knows it by.
    pub puid: String,
    pub entity: String,
    /// The action it explains; none for a moderator's override, a reversal or a label.
    pub action_id: Option<i64>,
    /// The rule that decided; none for a moderator.
    pub rule: Option<String>,
    /// `automated`, `review`, `override` or `reversal` ([`DecidedBy`]).
    pub decided_by: String,
    pub previous_status: String,
    /// The status the decision set.
    pub status: String,
    pub created_at: DateTime<Utc>,
    /// The statement in the Transparency Database's schema in force (API v1 since 2025-07-01),
    /// and quiesce's own `quiesce_url`, `quiesce_ends_at` and `quiesce_keywords` (never sent
    /// to the database). A statement written before quiesce wrote that schema is shown as it
    /// was written (the 2023 schema) and converted when it is sent.
    pub statement: serde_json::Value,
}

/// Which statements to list: every filter optional, a page after `after` (a statement id).
#[derive(Debug, Clone, Default)]
pub struct StatementFilter {
    pub entity: Option<String>,
    pub rule: Option<String>,
    pub decided_by: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub after: Option<i64>,
    pub limit: i64,
}

/// Writes a statement and its deliveries on this connection (the decision's transaction):
/// the platform's `statement.issued` webhook and, when `submit`, the Transparency Database's
/// row (its statement without quiesce's keys). A statement without a `content_date` (a
/// moderator's) gets its entity's. Returns the statement's id.
pub(super) async fn issue_in(
    connection: &mut PgConnection,
    statement: IssuedStatement<'_>,
    submit: bool,
) -> Result<i64> {
    let id = sqlx::query_scalar!(
        r#"WITH issued AS (
               INSERT INTO statements (puid, entity, action_id, rule, decided_by, previous_status,
                                       status, body)
               -- A moderator's statement has no content date yet: the entity's, as a
               -- snapshot reads it (the sender's latest, else the day of its first event),
               -- else the day of the decision.
               VALUES ($1, $2, $3, $4, $5, $6, $9,
                       CASE WHEN $7::jsonb ? 'content_date' THEN $7::jsonb
                       ELSE $7::jsonb || jsonb_build_object('content_date', coalesce(
                           (SELECT coalesce(
                                (SELECT ev.attributes ->> 'content_date' FROM events ev
                                 WHERE ev.entity = e.entity AND ev.xid >= e.folded_horizon
                                   AND ev.attributes ->> 'content_date' ~ '^\d{4}-\d{2}-\d{2}$'
                                 ORDER BY ev.xid DESC, ev.id DESC LIMIT 1),
                                CASE WHEN e.content_date ~ '^\d{4}-\d{2}-\d{2}$'
                                     THEN e.content_date END,
                                to_char(e.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'))
                            FROM entities e WHERE e.entity = $2),
                           to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD')))
                       END)
               RETURNING id, puid, entity, action_id
           ),
           notes AS (
               INSERT INTO outbox (topic, idempotency_key, payload, receiver)
               SELECT $10::text, 'statement:' || s.puid,
                      jsonb_build_object('statement_id', s.id, 'puid', s.puid,
                                         'entity', s.entity, 'action_id', s.action_id),
                      'platform'
               FROM issued s
               UNION ALL
               SELECT $11::text, 'dsa:' || s.puid,
                      jsonb_build_object('statement_id', s.id),
                      'dsa'
               FROM issued s WHERE $8
           )
           SELECT id AS "id!" FROM issued"#,
        statement.draft.puid,
        statement.entity,
        statement.action_id,
        statement.rule,
        statement.decided_by.as_str(),
        statement.previous_status,
        Json(statement.draft.stored()) as _,
        submit,
        statement.status,
        Topic::StatementIssued.name(),
        Topic::StatementSubmitted.name(),
    )
    .fetch_one(&mut *connection)
    .await?;
    Ok(id)
}

/// The store's handle on statements of reasons (`Store::statements`).
#[derive(Clone, Copy)]
pub struct Statements<'a> {
    pub(super) store: &'a Store,
}

impl Statements<'_> {
    /// Whether statements are queued for the Transparency Database too.
    pub(super) fn submits_statements(self) -> bool {
        self.store.submit_statements
    }

    /// Statements, oldest first, a page at a time (from the replica when it keeps up).
    pub async fn list(self, filter: &StatementFilter) -> Result<Vec<StatementRecord>> {
        Ok(sqlx::query_as!(
            StatementRecord,
            r#"SELECT id, puid, entity, action_id, rule, decided_by, previous_status, status,
                      created_at, body AS statement
               FROM statements
               -- An entity's: those of its actions, found through the actions' entity index,
               -- and its others (statements_entity_idx covers only those).
               WHERE ($1::text IS NULL
                      OR id IN (SELECT s.id FROM actions a JOIN statements s ON s.action_id = a.id
                                WHERE a.entity = $1
                                UNION ALL
                                SELECT s.id FROM statements s
                                WHERE s.action_id IS NULL AND s.entity = $1))
                 AND ($2::text IS NULL OR rule = $2)
                 AND ($3::text IS NULL OR decided_by = $3)
                 AND ($4::timestamptz IS NULL OR created_at >= $4)
                 AND id > COALESCE($5::int8, 0)
               ORDER BY id LIMIT $6"#,
            filter.entity,
            filter.rule,
            filter.decided_by,
            filter.since,
            filter.after,
            filter.limit,
        )
        .fetch_all(self.store.reader())
        .await?)
    }

    /// The statement of an action, if it restricted.
    pub async fn statement_of_action(self, action_id: i64) -> Result<Option<StatementRecord>> {
        Ok(sqlx::query_as!(
            StatementRecord,
            r#"SELECT id, puid, entity, action_id, rule, decided_by, previous_status, status,
                      created_at, body AS statement
               FROM statements WHERE action_id = $1"#,
            action_id,
        )
        .fetch_optional(&self.store.pool)
        .await?)
    }

    pub async fn statement(self, id: i64) -> Result<Option<StatementRecord>> {
        Ok(sqlx::query_as!(
            StatementRecord,
            r#"SELECT id, puid, entity, action_id, rule, decided_by, previous_status, status,
                      created_at, body AS statement
               FROM statements WHERE id = $1"#,
            id,
        )
        .fetch_optional(&self.store.pool)
        .await?)
    }
}
