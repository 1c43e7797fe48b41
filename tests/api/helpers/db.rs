//! The test's database: what a test reads from it, and the rows it moves into the past.

use std::time::Duration;

use super::TestApp;

impl TestApp {
    pub async fn scalar(&self, sql: &str) -> i64 {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(&self.pool)
            .await
            .expect(sql)
    }

    pub async fn evaluation_count(&self, entity: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM evaluations WHERE entity = $1")
            .bind(entity)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    pub async fn status_of(&self, entity: &str) -> String {
        sqlx::query_scalar("SELECT status FROM entities WHERE entity = $1")
            .bind(entity)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// The entity's snapshot as an evaluation reads it (without distinct actors); it must exist.
    pub async fn snapshot(&self, entity: &str) -> quiesce::domain::Snapshot {
        let entity = quiesce::domain::EntityId::parse(entity).unwrap();
        self.backends
            .store
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
        let moved = sqlx::query(
            "UPDATE events SET received_at = now() - make_interval(secs => $2) WHERE id = ANY($1)",
        )
        .bind(ids)
        .bind(ago.as_secs_f64())
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
            .add_partition(table, now - from_ago, now - to_ago)
            .await
            .expect("a partition in the past")
    }
}
