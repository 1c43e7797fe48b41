//! The test's Redis keys: what is scheduled, and losing it all.

use quiesce::settings::Settings;

use super::TestApp;

impl TestApp {
    /// Nothing due or in flight in any shard.
    pub async fn queue_is_empty(&self) -> bool {
        let depths = self.backends.queue.depths().await.expect("redis");
        depths.iter().all(|d| d.due == 0 && d.inflight == 0)
    }

    /// Every Redis key under this test's prefix (on every primary of a cluster).
    pub async fn redis_keys(&self) -> Vec<String> {
        self.backends
            .queue
            .keys_under_prefix()
            .await
            .expect("redis SCAN")
    }

    /// This test's Redis keys that hold or record work: every key but the index rescan's lock
    /// and cursor, which maintenance writes on a timer. A check that nothing was scheduled or
    /// written compares these.
    pub async fn work_keys(&self) -> Vec<String> {
        let index = self.backends.queue.keys().index();
        let mut keys = self.redis_keys().await;
        keys.retain(|key| !index.is_rescan_bookkeeping(key));
        keys
    }

    /// When the entity is due in Redis (unix ms), if it is scheduled.
    pub async fn due_at(&self, entity: &str) -> Option<i64> {
        let entity = quiesce::domain::EntityId::parse(entity).unwrap();
        self.backends
            .queue
            .state_of(&entity)
            .await
            .unwrap()
            .due_at_ms
    }

    /// Deletes the entity's shard's due set, as a Redis that lost the schedule (its events stay
    /// in Postgres).
    pub async fn lose_schedule_of(&self, entity: &str) {
        let entity = quiesce::domain::EntityId::parse(entity).unwrap();
        let keys = self.backends.queue.keys().for_entity(&entity);
        let mut redis = self.backends.queue.connection();
        let _: () = redis::cmd("DEL")
            .arg(keys.due())
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(self.due_at(entity.as_str()).await, None);
    }

    /// The entity's max-wait anchor (unix ms) in Redis, if it has one.
    pub async fn max_wait_anchor(&self, entity: &quiesce::domain::EntityId) -> Option<i64> {
        self.backends.queue.max_wait_anchor(entity).await.unwrap()
    }

    /// Deletes every Redis key of this test, as a restart without persistence or a flush would
    /// (only this test's prefix: the server is shared).
    pub async fn lose_redis_data(&self) {
        self.backends
            .queue
            .delete_prefix()
            .await
            .expect("delete the prefix's keys");
        assert!(self.redis_keys().await.is_empty());
    }
}

/// Deletes every key under a test's prefix, by SCAN on every primary (never KEYS or FLUSHDB
/// on a shared server), on a connection of its own (the test's runtime may be gone).
pub(super) async fn delete_redis_prefix(settings: &Settings) {
    let Ok((redis, _)) = quiesce::startup::connect_redis(settings).await else {
        return;
    };
    let queue = quiesce::queue::Queue::new(
        redis,
        quiesce::startup::keyspace(settings),
        settings.schedule.timing(),
    );
    let _ = queue.delete_prefix().await;
}
