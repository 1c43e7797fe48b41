//! The review queue: the actions automation flagged, waiting for a moderator, oldest first.
//! An item is the flag action's own row; a moderator claims it (for a while, so two do not
//! work the same one) and decides. A decision that changes the entity's status is an action
//! of its own (kind `review`): version-checked against what the moderator saw, deduplicated
//! by the item, delivered through the outbox and reversible like any other. Who may claim or
//! decide is the use case's rule (`review.rs`): the store locks the row, shows it, and writes.

use chrono::{DateTime, Utc};

use super::{
    Result, Store, StoreError, Tx,
    audit::record_audit_in,
    interval,
    moderation::{ModeratorDecision, record_decision},
    outbox::enqueue,
    statements::{DecidedBy, IssuedStatement, issue_in},
};
use crate::domain::{
    ActionApplied, Actor, AppliedBy, AuditAction, AuditEntry, ReviewDecision, ReviewEscalated,
    StatementDraft, Status,
};

/// One waiting item, with the entity as it is now.
#[derive(Debug, Clone)]
pub struct ReviewItem {
    /// The flag action's id, which is the item's.
    pub id: i64,
    pub entity: String,
    pub rule: String,
    pub reason: String,
    /// When automation flagged it: the item waits from then.
    pub flagged_at: DateTime<Utc>,
    /// The entity's status and version now; a decision names the version it was made on.
    pub status: String,
    pub moderation_version: i64,
    /// Who holds the claim, while it lasts.
    pub claimed_by: Option<String>,
    pub claim_until: Option<DateTime<Utc>>,
    /// Escalated to an admin: only an admin may claim it now.
    pub escalated_at: Option<DateTime<Utc>>,
}

/// Which waiting items to list: all filters optional, a page after `after` (an item id).
#[derive(Debug, Clone, Default)]
pub struct ReviewFilter {
    pub rule: Option<String>,
    /// Only items flagged at or before this time (waiting at least so long).
    pub flagged_before: Option<DateTime<Utc>>,
    /// Only items this moderator holds a live claim on.
    pub claimed_by: Option<String>,
    /// Only claimed (true) or unclaimed (false) items; an expired claim is no claim.
    pub claimed: Option<bool>,
    pub escalated: Option<bool>,
    pub after: Option<i64>,
    pub limit: i64,
}

/// A decision as recorded.
#[derive(Debug, Clone)]
pub struct ReviewOutcome {
    pub item: i64,
    pub entity: String,
    pub decision: ReviewDecision,
    /// The moderator's action, when the decision changed the status (not for `escalate`).
    pub action_id: Option<i64>,
    pub status: String,
    pub moderation_version: i64,
}

/// The queue's figures for the Quality page.
#[derive(Debug, Clone, Default)]
pub struct ReviewFigures {
    pub waiting: i64,
    pub oldest_flagged_at: Option<DateTime<Utc>>,
    /// Decisions per moderator over the window, most first.
    pub per_moderator: Vec<(String, i64)>,
    /// Of the window's decisions, those that agreed with automation (hide) and all of them.
    pub agreed: i64,
    pub decided: i64,
}

/// The store's handle on the review queue (`Store::review`).
#[derive(Clone, Copy)]
pub struct Review<'a> {
    pub(super) store: &'a Store,
}

impl Review<'_> {
    /// Waiting items, oldest first.
    pub async fn review_items(self, filter: &ReviewFilter) -> Result<Vec<ReviewItem>> {
        let rows = sqlx::query_as!(
            ReviewItem,
            r#"SELECT a.id, a.entity, a.rule, a.reason, a.created_at AS flagged_at,
                      e.status, e.moderation_version,
                      CASE WHEN a.review_claim_until > now() THEN a.review_claimed_by END AS claimed_by,
                      CASE WHEN a.review_claim_until > now() THEN a.review_claim_until END AS claim_until,
                      a.review_escalated_at AS escalated_at
               FROM actions a JOIN entities e ON e.entity = a.entity
               WHERE a.action = 'flag' AND a.reviewed_at IS NULL AND a.reversed_at IS NULL
                 AND a.id > $1
                 AND ($2::text IS NULL OR a.rule = $2)
                 AND ($3::timestamptz IS NULL OR a.created_at <= $3)
                 AND ($4::text IS NULL OR (a.review_claimed_by = $4 AND a.review_claim_until > now()))
                 AND ($5::bool IS NULL OR (a.review_claim_until IS NOT NULL
                                           AND a.review_claim_until > now()) = $5)
                 AND ($6::bool IS NULL OR (a.review_escalated_at IS NOT NULL) = $6)
               ORDER BY a.id
               LIMIT $7"#,
            filter.after.unwrap_or(0),
            filter.rule,
            filter.flagged_before,
            filter.claimed_by,
            filter.claimed,
            filter.escalated,
            filter.limit,
        )
        .fetch_all(&self.store.pool)
        .await?;
        Ok(rows)
    }

    /// One item, waiting or not (`None`: no flag action has this id).
    pub async fn review_item(self, id: i64) -> Result<Option<ReviewItem>> {
        item_in(&self.store.pool, id).await
    }

    /// Item `id`, which must exist: its absence is [`StoreError::NotFound`].
    pub async fn existing_review_item(self, id: i64) -> Result<ReviewItem> {
        self.review_item(id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("no review item {id}")))
    }

    /// The queue now, and its decisions over the last `window`.
    pub async fn review_figures(self, window: std::time::Duration) -> Result<ReviewFigures> {
        let waiting = sqlx::query!(
            r#"SELECT count(*) AS "waiting!", min(created_at) AS oldest FROM actions
               WHERE action = 'flag' AND reviewed_at IS NULL AND reversed_at IS NULL"#,
        )
        .fetch_one(&self.store.pool)
        .await?;
        let rows = sqlx::query!(
            r#"SELECT reviewed_by AS "moderator!", count(*) AS "decided!",
                      count(*) FILTER (WHERE review_decision = 'hide') AS "agreed!"
               FROM actions WHERE reviewed_at >= now() - $1::interval
               GROUP BY reviewed_by ORDER BY count(*) DESC, reviewed_by"#,
            interval(window),
        )
        .fetch_all(&self.store.pool)
        .await?;
        Ok(ReviewFigures {
            waiting: waiting.waiting,
            oldest_flagged_at: waiting.oldest,
            agreed: rows.iter().map(|r| r.agreed).sum(),
            decided: rows.iter().map(|r| r.decided).sum(),
            per_moderator: rows.into_iter().map(|r| (r.moderator, r.decided)).collect(),
        })
    }
}

impl Tx {
    /// Locks item `id`'s row until the transaction ends and reads it, with its entity as it is
    /// ([`StoreError::NotFound`]: no flag action has this id).
    pub async fn lock_review_item(&mut self, id: i64) -> Result<LockedReviewItem> {
        lock_item(&mut self.tx, id).await
    }

    /// Locks the entity of `locked`'s item too (after the item's row), and reads its status and
    /// version into it: the version a decision checks holds until commit.
    pub async fn lock_review_entity(&mut self, locked: &mut LockedReviewItem) -> Result<()> {
        let entity = sqlx::query!(
            "SELECT status, moderation_version FROM entities WHERE entity = $1 FOR UPDATE",
            locked.item.entity,
        )
        .fetch_one(&mut *self.tx)
        .await?;
        locked.item.status = entity.status;
        locked.item.moderation_version = entity.moderation_version;
        Ok(())
    }

    /// `moderator` holds item `id` for `claim_for` from now.
    pub async fn claim_review(
        &mut self,
        id: i64,
        moderator: &str,
        claim_for: std::time::Duration,
    ) -> Result<()> {
        sqlx::query!(
            "UPDATE actions SET review_claimed_by = $2, review_claim_until = now() + $3
             WHERE id = $1",
            id,
            moderator,
            interval(claim_for),
        )
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Writes `decided` on `item` (as its locked rows hold it). Approve, hide and dismiss set
    /// the status (approve and hide with an override lasting `override_for`, so automation does
    /// not flag it again meanwhile; dismiss without one) as an action of kind `review`, and
    /// close the item; escalate hands it to the admins (claim released, still waiting).
    pub async fn decide_review(
        &mut self,
        item: &ReviewItem,
        decided: &ReviewDecided<'_>,
    ) -> Result<ReviewOutcome> {
        let ReviewDecided {
            by,
            decision,
            reason,
            ..
        } = *decided;
        let id = item.id;
        let moderator = by.name.as_str();
        let after = serde_json::json!({ "item": id, "decision": decision, "reason": reason });
        let outcome = match decision.sets() {
            None => {
                sqlx::query!(
                    "UPDATE actions SET review_escalated_at = now(), review_claimed_by = NULL,
                            review_claim_until = NULL
                     WHERE id = $1",
                    id,
                )
                .execute(&mut *self.tx)
                .await?;
                let escalated = ReviewEscalated {
                    item: id,
                    entity: item.entity.clone(),
                    rule: item.rule.clone(),
                    moderator: moderator.to_owned(),
                    reason: reason.to_owned(),
                };
                enqueue(&mut self.tx, &format!("review-escalated:{id}"), &escalated).await?;
                ReviewOutcome {
                    item: id,
                    entity: item.entity.clone(),
                    decision,
                    action_id: None,
                    status: item.status.clone(),
                    moderation_version: item.moderation_version,
                }
            }
            Some(status) => self.apply_decision(item, status, decided).await?,
        };
        record_decision(
            &mut self.tx,
            &ModeratorDecision {
                entity: &item.entity,
                kind: "review",
                action_id: outcome.action_id,
                moderator,
                reason,
                status: &outcome.status,
                until: None,
            },
        )
        .await?;
        record_audit_in(
            &mut *self.tx,
            by,
            &AuditEntry {
                action: AuditAction::ReviewDecide,
                subject: item.entity.clone(),
                before: Some(serde_json::json!({
                    "status": item.status, "moderation_version": item.moderation_version,
                })),
                after: Some(after),
            },
        )
        .await?;
        Ok(outcome)
    }

    /// The status change of an approve, hide or dismiss: the moderator's action, the entity
    /// (an override for approve and hide), the item closed, the platform told.
    async fn apply_decision(
        &mut self,
        item: &ReviewItem,
        status: Status,
        decided: &ReviewDecided<'_>,
    ) -> Result<ReviewOutcome> {
        let ReviewDecided {
            by,
            decision,
            reason,
            override_for,
            statement,
        } = *decided;
        let (id, entity, previous) = (item.id, item.entity.as_str(), item.status.as_str());
        let moderator = by.name.as_str();
        let seen_version = item.moderation_version;
        let dedup_key = format!("review:{id}");
        let action_reason = format!("{} by {moderator}: {reason}", decision.as_str());
        let action_id = sqlx::query_scalar!(
            "INSERT INTO actions (entity, action, rule, reason, previous_status, new_status,
                                  snapshot, applied_version, dedup_key)
             VALUES ($1, 'review', 'review', $2, $3, $4, $5, $6, $7)
             RETURNING id",
            entity,
            action_reason,
            previous,
            status.as_str(),
            serde_json::json!({ "review_item": id, "decision": decision, "moderator": moderator,
                                "status": previous, "moderation_version": seen_version }),
            seen_version,
            dedup_key,
        )
        .fetch_one(&mut *self.tx)
        .await?;
        // An override keeps automation from flagging it again (approve) or from undoing the
        // hide; a dismiss leaves automation free. Either way the decision replaces any timer.
        let lasting = decision.keeps_automation_off();
        let version = sqlx::query_scalar!(
            "UPDATE entities SET
                 status = $2,
                 moderation_version = moderation_version + 1,
                 override_status = CASE WHEN $3 THEN $2 END,
                 override_until = CASE WHEN $3 THEN now() + $4 END,
                 override_by = CASE WHEN $3 THEN $5 END,
                 override_reason = CASE WHEN $3 THEN $6 END,
                 timer_ends_at = NULL, timer_restores_to = NULL, timer_action = NULL,
                 timer_set_by = NULL
             WHERE entity = $1
             RETURNING moderation_version",
            entity,
            status.as_str(),
            lasting,
            interval(override_for),
            moderator,
            reason,
        )
        .fetch_one(&mut *self.tx)
        .await?;
        sqlx::query!(
            "UPDATE actions SET reviewed_at = now(), reviewed_by = $2, review_decision = $3,
                    review_reason = $4, review_action = $5, review_claimed_by = NULL,
                    review_claim_until = NULL
             WHERE id = $1",
            id,
            moderator,
            decision.as_str(),
            reason,
            action_id,
        )
        .execute(&mut *self.tx)
        .await?;
        let applied = ActionApplied {
            action_id,
            entity: entity.to_owned(),
            action: "review".to_owned(),
            rule: "review".to_owned(),
            reason: action_reason,
            status,
            moderation_version: version,
            by: AppliedBy::Review {
                decision,
                review_item: id,
            },
        };
        enqueue(&mut self.tx, &dedup_key, &applied).await?;
        // After the action's own webhook: the outbox delivers an entity's rows in the order
        // they are written.
        if let Some(draft) = statement {
            let issued = IssuedStatement {
                draft,
                entity,
                action_id: Some(action_id),
                rule: None,
                decided_by: DecidedBy::Review,
                previous_status: previous,
                status: status.as_str(),
            };
            issue_in(&mut self.tx, issued, self.submit_statements).await?;
        }
        Ok(ReviewOutcome {
            item: id,
            entity: entity.to_owned(),
            decision,
            action_id: Some(action_id),
            status: status.as_str().to_owned(),
            moderation_version: version,
        })
    }
}

/// A decision on a review item, to write: `by` decided `decision` for `reason`; approve and
/// hide hold automation off for `override_for`; `statement`: a hide's statement of reasons.
#[derive(Debug, Clone, Copy)]
pub struct ReviewDecided<'a> {
    pub by: &'a Actor,
    pub decision: ReviewDecision,
    pub reason: &'a str,
    pub override_for: std::time::Duration,
    pub statement: Option<&'a StatementDraft>,
}

/// A review item as its locked row holds it: what the use case's rule reads (`review.rs`)
/// before the store writes. Only a live claim shows.
#[derive(Debug, Clone)]
pub struct LockedReviewItem {
    /// The entity's status and version: locked too when deciding, as read when claiming.
    pub item: ReviewItem,
    pub decided: bool,
    pub flag_reversed: bool,
}

/// One item, waiting or not, read by `executor`.
async fn item_in(executor: impl sqlx::PgExecutor<'_>, id: i64) -> Result<Option<ReviewItem>> {
    Ok(sqlx::query_as!(
        ReviewItem,
        r#"SELECT a.id, a.entity, a.rule, a.reason, a.created_at AS flagged_at,
                      e.status, e.moderation_version,
                      CASE WHEN a.review_claim_until > now() THEN a.review_claimed_by END AS claimed_by,
                      CASE WHEN a.review_claim_until > now() THEN a.review_claim_until END AS claim_until,
                      a.review_escalated_at AS escalated_at
               FROM actions a JOIN entities e ON e.entity = a.entity
               WHERE a.id = $1 AND a.action = 'flag'"#,
        id,
    )
    .fetch_optional(executor)
    .await?)
}

/// Locks item `id`'s row until the transaction ends and reads it.
async fn lock_item(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    id: i64,
) -> Result<LockedReviewItem> {
    let row = sqlx::query!(
        "SELECT entity, rule, reviewed_at, reversed_at, review_escalated_at,
                    CASE WHEN review_claim_until > now() THEN review_claimed_by END AS claimed_by
             FROM actions WHERE id = $1 AND action = 'flag' FOR UPDATE",
        id,
    )
    .fetch_optional(&mut **tx)
    .await?
    .ok_or_else(|| StoreError::NotFound(format!("no review item {id}")))?;
    let item = item_in(&mut **tx, id)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("no review item {id}")))?;
    Ok(LockedReviewItem {
        decided: row.reviewed_at.is_some(),
        flag_reversed: row.reversed_at.is_some(),
        item,
    })
}
