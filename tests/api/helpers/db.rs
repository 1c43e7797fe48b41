//! The test's database: what a test reads from it, and the rows it moves into the past.
//!
//! The statements here and in the tests are `sqlx::query*!` macros, checked against the
//! migrations' schema when the tests compile (the `.sqlx/` data, as for the crate's own), not
//! first when a test runs: [`scalar!`] for a value one test reads, the methods below for what
//! many ask. The few that cannot be (DDL, transaction control, a statement built at run time or
//! run on another server's database) are strings and say why where they stand.

use std::time::Duration;

use quiesce::domain::Status;

use super::TestApp;

/// The one value that `sql` (a literal; `$1`, `$2`... bound to the arguments that follow)
/// selects on `app`'s database, checked at compile time; a NULL or an error fails the test.
macro_rules! scalar {
    ($app:expr, $sql:literal $(, $arg:expr)* $(,)?) => {
        $crate::helpers::NotNull::not_null(
            sqlx::query_scalar!($sql $(, $arg)*)
                .fetch_one(&$app.pool)
                .await
                .expect($sql),
            $sql,
        )
    };
}
pub(crate) use scalar;

/// A selected value that must not be NULL: what Postgres cannot vouch for (an aggregate, a
/// view's column) comes as an `Option`, and a test that reads it expects a value.
pub trait NotNull<T> {
    fn not_null(self, sql: &str) -> T;
}

impl<T> NotNull<T> for Option<T> {
    fn not_null(self, sql: &str) -> T {
        self.unwrap_or_else(|| panic!("{sql} selected NULL"))
    }
}

macro_rules! not_null_as_is {
    ($($t:ty),*) => {$(
        impl NotNull<$t> for $t {
            fn not_null(self, _sql: &str) -> $t {
                self
            }
        }
    )*};
}
not_null_as_is!(
    i16,
    i32,
    i64,
    f64,
    bool,
    String,
    serde_json::Value,
    chrono::DateTime<chrono::Utc>
);

/// An action as its row holds it (the columns a test asks about).
#[derive(Debug, Clone)]
pub struct ActionRow {
    pub entity: String,
    pub action: String,
    pub rule: String,
    pub reason: String,
    pub new_status: String,
    pub ends_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// The statements of reasons of the decisions this app's database holds.
impl TestApp {
    /// Every restricting decision here has exactly one statement of reasons and nothing else
    /// has one: an automated hide or suspend, a moderator's review decision or override that
    /// hides or suspends. Each statement passes the Transparency Database's validation (the
    /// stand-in's rules, `dsa.rs`) and names no actor.
    pub async fn assert_statements_complete(&self) {
        let unexplained = sqlx::query_scalar!(
            r#"SELECT count(*) AS "n!" FROM actions a
               WHERE (a.action IN ('hide', 'suspend')
                      OR (a.action = 'review' AND a.new_status IN ('hidden', 'suspended')))
                 AND (SELECT count(*) FROM statements s WHERE s.action_id = a.id) <> 1"#
        )
        .fetch_one(&self.pool)
        .await
        .unwrap();
        assert_eq!(
            unexplained, 0,
            "restricting actions without exactly one statement"
        );
        let stray = sqlx::query_scalar!(
            r#"SELECT count(*) AS "n!" FROM statements s
               WHERE s.action_id IS NOT NULL AND NOT EXISTS (
                   SELECT 1 FROM actions a WHERE a.id = s.action_id
                     AND (a.action IN ('hide', 'suspend')
                          OR (a.action = 'review' AND a.new_status IN ('hidden', 'suspended'))))"#
        )
        .fetch_one(&self.pool)
        .await
        .unwrap();
        assert_eq!(stray, 0, "statements of decisions that restrict nothing");
        let (overrides, override_statements) = sqlx::query!(
            r#"SELECT
                 (SELECT count(*) FROM moderator_decisions
                  WHERE kind = 'override' AND status IN ('hidden', 'suspended')) AS "decisions!",
                 (SELECT count(*) FROM statements WHERE decided_by = 'override') AS "statements!""#
        )
        .fetch_one(&self.pool)
        .await
        .map(|row| (row.decisions, row.statements))
        .unwrap();
        assert_eq!(
            overrides, override_statements,
            "one statement per restricting override"
        );
        let (reversals, reversal_statements) = sqlx::query!(
            r#"SELECT
                 (SELECT count(*) FROM moderator_decisions
                  WHERE kind = 'reversal' AND status IN ('hidden', 'suspended')) AS "decisions!",
                 (SELECT count(*) FROM statements WHERE decided_by = 'reversal') AS "statements!""#
        )
        .fetch_one(&self.pool)
        .await
        .map(|row| (row.decisions, row.statements))
        .unwrap();
        assert_eq!(
            reversals, reversal_statements,
            "one statement per restricting reversal"
        );
        let statements: Vec<(String, serde_json::Value)> =
            sqlx::query!("SELECT puid, body FROM statements ORDER BY id")
                .fetch_all(&self.pool)
                .await
                .unwrap()
                .into_iter()
                .map(|row| (row.puid, row.body))
                .collect();
        // Who acted and which events: none of it may be in a statement (its identifier and
        // the content's URL, which names the entity, left out of the comparison).
        let people: Vec<String> = sqlx::query_scalar!(
            r#"SELECT DISTINCT actor AS "actor!" FROM events WHERE actor IS NOT NULL
               UNION SELECT DISTINCT id FROM events
               UNION SELECT DISTINCT moderator FROM moderator_decisions"#
        )
        .fetch_all(&self.pool)
        .await
        .unwrap();
        for (puid, body) in statements {
            // What the Transparency Database is sent: the statement without quiesce's own keys
            // (store/outbox.rs), in the schema in force, no key of it one the database drops.
            let mut sent = body.clone();
            sent.as_object_mut()
                .unwrap()
                .retain(|key, _| !key.starts_with("quiesce_"));
            assert_eq!(super::dsa_errors(&sent), None, "statement {puid}: {body}");
            assert_eq!(
                super::dsa_unknown_fields(&sent),
                Vec::<String>::new(),
                "statement {puid} has fields the database drops: {body}"
            );
            let mut read = sent.clone();
            read.as_object_mut().unwrap().remove("puid");
            let text = read.to_string();
            for name in &people {
                assert!(
                    !text.contains(&format!("\"{name}\"")) && !text.contains(&format!(" {name} ")),
                    "statement {puid} names {name}: {text}"
                );
            }
        }
    }
}

/// Rows counted in a table.
impl TestApp {
    pub async fn count_events(&self) -> i64 {
        scalar!(self, "SELECT count(*) FROM events")
    }

    pub async fn count_actions(&self) -> i64 {
        scalar!(self, "SELECT count(*) FROM actions")
    }

    pub async fn count_evaluations(&self) -> i64 {
        scalar!(self, "SELECT count(*) FROM evaluations")
    }

    pub async fn count_outbox(&self) -> i64 {
        scalar!(self, "SELECT count(*) FROM outbox")
    }

    pub async fn count_entities(&self) -> i64 {
        scalar!(self, "SELECT count(*) FROM entities")
    }

    pub async fn count_unfolded_events(&self) -> i64 {
        scalar!(self, "SELECT count(*) FROM unfolded_events")
    }

    pub async fn count_moderator_decisions(&self) -> i64 {
        scalar!(self, "SELECT count(*) FROM moderator_decisions")
    }

    pub async fn count_github_deliveries(&self) -> i64 {
        scalar!(self, "SELECT count(*) FROM github_deliveries")
    }

    pub async fn count_attribute_buckets(&self) -> i64 {
        scalar!(self, "SELECT count(*) FROM attribute_buckets")
    }

    #[allow(dead_code)] // The console suite's.
    pub async fn count_dead_letters(&self) -> i64 {
        scalar!(self, "SELECT count(*) FROM dead_letters")
    }

    /// Entities whose status is hidden.
    pub async fn count_hidden(&self) -> i64 {
        scalar!(
            self,
            "SELECT count(*) FROM entities WHERE status = 'hidden'"
        )
    }

    /// Entities evaluated at least once.
    pub async fn count_evaluated_entities(&self) -> i64 {
        scalar!(self, "SELECT count(DISTINCT entity) FROM evaluations")
    }

    /// Outbox messages not delivered yet.
    pub async fn count_undelivered(&self) -> i64 {
        scalar!(
            self,
            "SELECT count(*) FROM outbox WHERE delivered_at IS NULL"
        )
    }

    /// (entity, action) pairs applied more than once: none, when dedup holds.
    pub async fn count_duplicate_actions(&self) -> i64 {
        scalar!(
            self,
            "SELECT count(*) FROM (SELECT entity, action FROM actions GROUP BY 1, 2 HAVING count(*) > 1) d"
        )
    }

    /// Entities with events that no evaluation has covered yet.
    pub async fn count_unevaluated_events(&self) -> i64 {
        scalar!(
            self,
            "SELECT count(*) FROM entity_counts WHERE event_count <> evaluated_event_count"
        )
    }

    /// Entities never evaluated, or not since their last event.
    #[allow(dead_code)] // The load check's (cluster, chaos and HA suites).
    pub async fn count_stale_entities(&self) -> i64 {
        scalar!(
            self,
            "SELECT count(*) FROM entities WHERE last_evaluated_at IS NULL OR last_evaluated_at < last_event_at"
        )
    }
}

/// One entity's rows.
impl TestApp {
    pub async fn evaluation_count(&self, entity: &str) -> i64 {
        scalar!(
            self,
            "SELECT count(*) FROM evaluations WHERE entity = $1",
            entity
        )
    }

    pub async fn action_count_of(&self, entity: &str) -> i64 {
        scalar!(
            self,
            "SELECT count(*) FROM actions WHERE entity = $1",
            entity
        )
    }

    pub async fn dead_letter_count_of(&self, entity: &str) -> i64 {
        scalar!(
            self,
            "SELECT count(*) FROM dead_letters WHERE entity = $1",
            entity
        )
    }

    /// The ids of the entity's actions, oldest first.
    pub async fn action_ids_of(&self, entity: &str) -> Vec<i64> {
        sqlx::query_scalar!(
            "SELECT id FROM actions WHERE entity = $1 ORDER BY id",
            entity
        )
        .fetch_all(&self.pool)
        .await
        .unwrap()
    }

    /// The entity's events as counted (recorded, folded or not).
    pub async fn event_count_of(&self, entity: &str) -> i64 {
        scalar!(
            self,
            "SELECT event_count FROM entity_counts WHERE entity = $1",
            entity
        )
    }

    /// The entity's `signal` events as counted.
    pub async fn signal_count_of(&self, entity: &str, signal: &str) -> i64 {
        scalar!(
            self,
            "SELECT count FROM signal_counts WHERE entity = $1 AND signal = $2",
            entity,
            signal
        )
    }

    pub async fn moderation_version_of(&self, entity: &str) -> i64 {
        scalar!(
            self,
            "SELECT moderation_version FROM entities WHERE entity = $1",
            entity
        )
    }

    /// The entity's actions, oldest first.
    pub async fn actions_of(&self, entity: &str) -> Vec<ActionRow> {
        sqlx::query_as!(
            ActionRow,
            "SELECT entity, action, rule, reason, new_status, ends_at
             FROM actions WHERE entity = $1 ORDER BY id",
            entity
        )
        .fetch_all(&self.pool)
        .await
        .unwrap()
    }

    /// Every action, by entity, each entity's oldest first.
    pub async fn actions(&self) -> Vec<ActionRow> {
        sqlx::query_as!(
            ActionRow,
            "SELECT entity, action, rule, reason, new_status, ends_at
             FROM actions ORDER BY entity, id"
        )
        .fetch_all(&self.pool)
        .await
        .unwrap()
    }

    pub async fn status_of(&self, entity: &str) -> Status {
        let status = scalar!(
            self,
            "SELECT status FROM entities WHERE entity = $1",
            entity
        );
        Status::parse(&status).expect("a status the schema allows")
    }
}

impl TestApp {
    /// The entity's snapshot as an evaluation reads it (without distinct actors); it must exist.
    pub async fn snapshot(&self, entity: &str) -> quiesce::domain::Snapshot {
        let entity = quiesce::domain::EntityId::parse(entity).unwrap();
        self.backends
            .store
            .snapshots()
            .snapshot(&entity, false)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{entity} has no events"))
    }

    /// Moves these events `ago` into the past, into a partition made for them (from an hour
    /// before that time to an hour after: once per test, partitions may not overlap).
    pub async fn age_events(&self, ids: &[&str], ago: Duration) {
        let hour = Duration::from_secs(3600);
        self.add_past_partition(quiesce::store::Partitioned::Events, ago + hour, ago - hour)
            .await;
        let ids: Vec<String> = ids.iter().map(|&id| id.to_owned()).collect();
        let moved = sqlx::query!(
            "UPDATE events SET received_at = now() - make_interval(secs => $2) WHERE id = ANY($1)",
            &ids,
            ago.as_secs_f64()
        )
        .execute(&self.pool)
        .await
        .expect("events moved into the past")
        .rows_affected();
        assert_eq!(moved, ids.len() as u64, "{ids:?}");
    }

    /// Adds the partition of `table` for the times from `from_ago` to `to_ago` before now
    /// (rows of that time can then be written there).
    pub async fn add_past_partition(
        &self,
        table: quiesce::store::Partitioned,
        from_ago: Duration,
        to_ago: Duration,
    ) -> String {
        let now = chrono::Utc::now();
        self.backends
            .store
            .partitions()
            .add_partition(table, now - from_ago, now - to_ago)
            .await
            .expect("a partition in the past")
    }
}

/// A flag event as the store takes it, for tests that write through `Store` directly.
pub fn domain_event(id: &str, entity: &str) -> quiesce::domain::Event {
    use quiesce::domain::{EntityId, Event, EventId, Priority, Signal};
    Event {
        id: EventId::parse(id).unwrap(),
        entity: EntityId::parse(entity).unwrap(),
        signal: Signal::parse("flag").unwrap(),
        actor: None,
        weight: 1.0,
        occurred_at: None,
        priority: Priority::Normal,
        author: None,
        attributes: None,
    }
}
