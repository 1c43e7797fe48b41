//! What the guard reads and writes: a rule's latest actions and how many of them moderators
//! reversed, and a demotion (the rules version that turns the rule to shadow, its audit
//! entries and its outbound webhook) in one transaction.

use chrono::{DateTime, Utc};

use super::{
    Result, Store,
    audit::record_audit_in,
    outbox::enqueue,
    rules_versions::{NewRulesVersion, active_in, lock_versions, publish_in},
};
use crate::domain::{Actor, AuditEntry, RulesDemoted};

/// A rule's latest actions as the guard weighs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleFigures {
    pub actions: i64,
    pub reversals: i64,
}

/// A demotion to store, if the active version is still `over`.
#[derive(Debug, Clone)]
pub struct Demotion<'a> {
    /// The active version the new text was made from.
    pub over: i64,
    pub rules: NewRulesVersion<'a>,
    /// The guard's own audit entry, beside the publish's.
    pub entry: AuditEntry,
    /// The outbound webhook's payload; its `rules_version` is set here once published.
    pub payload: RulesDemoted,
}

/// The store's handle on what the guard reads and writes (`Store::guard`).
#[derive(Clone, Copy)]
pub struct Guard<'a> {
    pub(super) store: &'a Store,
}

impl Guard<'_> {
    /// Rule `rule`'s latest `last` actions (restores aside) taken since `since` and since the
    /// newest activation not made by `guard` (a human's publish or rollback starts the count
    /// afresh), with how many of them were reversed.
    pub async fn rule_figures(
        self,
        rule: &str,
        since: DateTime<Utc>,
        last: i64,
        guard: &str,
    ) -> Result<RuleFigures> {
        let row = sqlx::query!(
            r#"WITH armed AS (
                   SELECT COALESCE(MAX(activated_at), '-infinity') AS at
                   FROM rules_activations WHERE author <> $4
               ),
               recent AS (
                   SELECT reversed_at IS NOT NULL AS reversed FROM actions
                   WHERE rule = $1 AND action NOT IN ('restore', 'review')
                     AND created_at >= GREATEST($2, (SELECT at FROM armed))
                   ORDER BY rule, id DESC
                   LIMIT $3
               )
               SELECT count(*) AS "actions!", count(*) FILTER (WHERE reversed) AS "reversals!"
               FROM recent"#,
            rule,
            since,
            last,
            guard,
        )
        .fetch_one(&self.store.pool)
        .await?;
        Ok(RuleFigures {
            actions: row.actions,
            reversals: row.reversals,
        })
    }

    /// Publishes the demotion's version by `actor`, with the publish's audit entry, the
    /// guard's and the `rules.demoted` outbox row, if the active version is still
    /// `demotion.over` (a concurrent demotion or publish came first otherwise: `None`).
    pub async fn demote_rule(self, actor: &Actor, demotion: Demotion<'_>) -> Result<Option<i64>> {
        let mut tx = self.store.pool.begin().await?;
        lock_versions(&mut tx).await?;
        if active_in(&mut tx).await? != Some(demotion.over) {
            return Ok(None);
        }
        let version = publish_in(&mut tx, actor, &demotion.rules).await?;
        let mut entry = demotion.entry;
        if let Some(serde_json::Value::Object(after)) = entry.after.as_mut() {
            after.insert("version".into(), version.into());
        }
        record_audit_in(&mut *tx, actor, &entry).await?;
        let payload = RulesDemoted {
            rules_version: version,
            ..demotion.payload
        };
        enqueue(&mut tx, &format!("rules.demoted:{version}"), &payload).await?;
        tx.commit().await?;
        Ok(Some(version))
    }
}
