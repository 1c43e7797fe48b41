//! The shard indexes (docs/state-machine.md): a shard is reported only when its earliest entry
//! moves earlier, a settle never raises a shard's time over a report made since its read, a
//! poll's hold keeps other readers off the shards it read for a while and misses nothing, and
//! the rescan rebuilds an index Redis lost, a slice of shards each second.

use std::time::Duration;

use quiesce::{
    domain::{EntityId, Priority},
    queue::{IndexKind, Queue, ReadShard, Settle, Shard},
};

use crate::helpers::{TestOptions, spawn_app, wait_for};

/// `count` entities of one shard (the first one's).
fn same_shard(queue: &Queue, count: usize) -> Vec<EntityId> {
    let first = EntityId::parse("post:index-0").unwrap();
    let shard = queue.keys().shard_of(&first);
    (0..)
        .map(|i| EntityId::parse(&format!("post:index-{i}")).unwrap())
        .filter(|e| queue.keys().shard_of(e) == shard)
        .take(count)
        .collect()
}

/// How many reports the shard has had in an index.
async fn reports(queue: &Queue, kind: IndexKind, shard: Shard) -> i64 {
    let mut redis = queue.connection();
    let count: Option<i64> = redis::cmd("HGET")
        .arg(queue.keys().index().reports(kind))
        .arg(shard.id())
        .query_async(&mut redis)
        .await
        .unwrap();
    count.unwrap_or(0)
}

async fn read_due(queue: &Queue) -> quiesce::queue::IndexRead {
    queue.read_index(IndexKind::Due, 64).await.unwrap()
}

/// A worker poll's read: what it reads is held for `hold`.
async fn hold_due(queue: &Queue, hold: Duration) -> quiesce::queue::IndexRead {
    queue.read_and_hold(IndexKind::Due, 64, hold).await.unwrap()
}

/// `count` entities of one shard, the first made due now (a critical event).
async fn first_due(queue: &Queue, count: usize) -> (Vec<EntityId>, Shard) {
    let entities = same_shard(queue, count);
    queue
        .schedule(&[(entities[0].clone(), Priority::Critical)])
        .await
        .unwrap();
    let shard = queue.keys().shard_of(&entities[0]);
    (entities, shard)
}

/// The shard as a poll holding for `hold` reads it.
async fn hold_shard(queue: &Queue, shard: Shard, hold: Duration) -> ReadShard {
    let read = hold_due(queue, hold).await;
    let found = read.shards.iter().find(|r| r.shard == shard).cloned();
    found.unwrap_or_else(|| panic!("{shard} is not due: {read:?}"))
}

#[tokio::test]
async fn a_shard_is_reported_only_when_its_earliest_entry_moves_earlier_and_nothing_is_missed() {
    let app = spawn_app(TestOptions::idle()).await;
    let queue = &app.backends.queue;
    let entities = same_shard(queue, 3);
    let shard = queue.keys().shard_of(&entities[0]);

    queue
        .schedule(&[(entities[0].clone(), Priority::Normal)])
        .await
        .unwrap();
    assert_eq!(reports(queue, IndexKind::Due, shard).await, 1);
    // Later than the shard's earliest entry: the index already holds a time no later.
    queue
        .schedule(&[(entities[1].clone(), Priority::Normal)])
        .await
        .unwrap();
    assert_eq!(reports(queue, IndexKind::Due, shard).await, 1);
    // A critical event fires now, before the others: reported.
    queue
        .schedule(&[(entities[2].clone(), Priority::Critical)])
        .await
        .unwrap();
    assert_eq!(reports(queue, IndexKind::Due, shard).await, 2);

    // Every one of them is claimed once its window has passed.
    let worker = app.worker();
    let claimed = std::sync::Mutex::new(Vec::new());
    wait_for(
        Duration::from_secs(10),
        "all three to be claimed",
        || async {
            let round = worker.claim_once(10).await.unwrap();
            let mut claimed = claimed.lock().unwrap();
            claimed.extend(round.claims.into_iter().map(|c| c.entity));
            claimed.len() == 3
        },
    )
    .await;
    let mut claimed = claimed.into_inner().unwrap();
    claimed.sort();
    let mut expected = entities.clone();
    expected.sort();
    assert_eq!(claimed, expected);
    // Nothing left: the shard left the index.
    let read = read_due(queue).await;
    assert!(read.shards.is_empty() && read.next_ms.is_none(), "{read:?}");
}

#[tokio::test]
async fn a_settle_does_not_raise_a_shard_over_a_report_made_since_its_read() {
    let app = spawn_app(TestOptions::idle()).await;
    let queue = &app.backends.queue;
    let entities = same_shard(queue, 2);
    let shard = queue.keys().shard_of(&entities[0]);
    let (busy, lease) = (Duration::from_millis(250), Duration::from_secs(5));

    queue
        .schedule(&[(entities[0].clone(), Priority::Critical)])
        .await
        .unwrap();
    let read = read_due(queue).await;
    let taken = read.shards.into_iter().find(|r| r.shard == shard).unwrap();
    let batch = queue.claim(shard, 10, busy, lease).await.unwrap();
    assert_eq!(batch.claims.len(), 1);
    assert_eq!(
        batch.next_due_ms, None,
        "the shard is empty after the claim"
    );
    // Another process schedules into the shard after the claim, before the settle.
    queue
        .schedule(&[(entities[1].clone(), Priority::Critical)])
        .await
        .unwrap();
    queue
        .settle_index(IndexKind::Due, &[(taken, Settle::Empty)])
        .await
        .unwrap();
    let again = read_due(queue).await;
    assert!(
        again.shards.iter().any(|r| r.shard == shard),
        "the report outlives the settle: {again:?}"
    );
    let batch = queue.claim(shard, 10, busy, lease).await.unwrap();
    assert_eq!(batch.claims[0].entity, entities[1]);
}

#[tokio::test]
async fn a_settle_with_no_report_since_its_read_sets_the_shard_to_its_next_entry() {
    let app = spawn_app(TestOptions::idle()).await;
    let queue = &app.backends.queue;
    let entities = same_shard(queue, 2);
    let shard = queue.keys().shard_of(&entities[0]);

    // One due now, one after the window (300 ms in tests).
    queue
        .schedule(&[(entities[1].clone(), Priority::Normal)])
        .await
        .unwrap();
    queue
        .schedule(&[(entities[0].clone(), Priority::Critical)])
        .await
        .unwrap();
    let taken = read_due(queue)
        .await
        .shards
        .into_iter()
        .find(|r| r.shard == shard)
        .unwrap();
    let batch = queue
        .claim(
            shard,
            10,
            Duration::from_millis(250),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(batch.claims.len(), 1);
    let next = batch.next_due_ms.expect("the second entity waits");
    queue
        .settle_index(IndexKind::Due, &[(taken, Settle::of(Some(next)))])
        .await
        .unwrap();
    let read = read_due(queue).await;
    assert!(read.shards.iter().all(|r| r.shard != shard), "{read:?}");
    assert_eq!(read.next_ms, Some(next));
}

#[tokio::test]
async fn the_lease_index_hears_of_a_claim_only_when_its_lease_ends_first_in_the_shard() {
    let app = spawn_app(TestOptions::idle()).await;
    let queue = &app.backends.queue;
    let entities = same_shard(queue, 2);
    let shard = queue.keys().shard_of(&entities[0]);
    let busy = Duration::from_millis(250);
    let pairs: Vec<_> = entities
        .iter()
        .map(|e| (e.clone(), Priority::Critical))
        .collect();
    queue.schedule(&pairs).await.unwrap();

    let first = queue
        .claim(shard, 1, busy, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(first.leases_moved_earlier);
    assert_eq!(reports(queue, IndexKind::Leases, shard).await, 1);
    // A longer lease ends after the first one: nothing to tell.
    let second = queue
        .claim(shard, 1, busy, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(second.claims.len(), 1);
    assert!(!second.leases_moved_earlier);
    assert_eq!(reports(queue, IndexKind::Leases, shard).await, 1);
}

#[tokio::test]
async fn a_worker_round_tells_the_lease_index_of_every_shard_it_claimed_in() {
    // The round's lease reports go in one call after its claims: each shard claimed in must
    // still be known to the reaper's index, with the lease's end.
    let app = spawn_app(TestOptions::idle()).await;
    let queue = &app.backends.queue;
    let mut shards = std::collections::BTreeMap::new();
    for i in 0.. {
        let entity = EntityId::parse(&format!("post:round-{i}")).unwrap();
        shards
            .entry(queue.keys().shard_of(&entity))
            .or_insert(entity);
        if shards.len() == 3 {
            break;
        }
    }
    let pairs: Vec<_> = shards
        .values()
        .map(|e| (e.clone(), Priority::Critical))
        .collect();
    queue.schedule(&pairs).await.unwrap();

    let round = app.worker().claim_once(10).await.unwrap();
    assert_eq!(round.claims.len(), 3);
    let mut redis = queue.connection();
    for shard in shards.keys() {
        assert_eq!(
            reports(queue, IndexKind::Leases, *shard).await,
            1,
            "{shard}"
        );
        let ends: Option<f64> = redis::cmd("ZSCORE")
            .arg(queue.keys().index().times(IndexKind::Leases))
            .arg(shard.id())
            .query_async(&mut redis)
            .await
            .unwrap();
        let ends = ends.expect("the shard's lease is in the index") as i64;
        let claim = round.claims.iter().find(|c| c.shard == *shard).unwrap();
        assert!(
            ends > chrono::Utc::now().timestamp_millis(),
            "{shard}: {ends}"
        );
        assert!(ends >= claim.due_at_ms, "{shard}");
    }
}

#[tokio::test]
async fn the_rescan_rebuilds_an_index_redis_lost_a_slice_of_shards_at_a_time() {
    let app = spawn_app(TestOptions::idle()).await;
    let queue = &app.backends.queue;
    let entities: Vec<_> = (0..40)
        .map(|i| {
            (
                EntityId::parse(&format!("post:rescan-{i}")).unwrap(),
                Priority::Critical,
            )
        })
        .collect();
    queue.schedule(&entities).await.unwrap();
    let shards = queue.keys().shards() as usize;
    assert_eq!(read_due(queue).await.shards.len(), shards);

    // The index is lost (a failover that dropped its writes, say); the shards still hold
    // their entities.
    let index = queue.keys().index();
    let mut redis = queue.connection();
    let _: () = redis::cmd("DEL")
        .arg(index.times(IndexKind::Due))
        .arg(index.reports(IndexKind::Due))
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(read_due(queue).await.shards.is_empty());

    // With a round of 2 s, a step reads half the shards; one process takes a step a second.
    let every = Duration::from_secs(2);
    assert_eq!(queue.rescan_slice(every), shards / 2);
    assert_eq!(queue.rescan_index(every).await.unwrap(), shards / 2);
    assert_eq!(
        queue.rescan_index(every).await.unwrap(),
        0,
        "another step within the second waits"
    );
    assert_eq!(read_due(queue).await.shards.len(), shards / 2);
    wait_for(Duration::from_secs(5), "the next step", || async {
        queue.rescan_index(every).await.unwrap() > 0
    })
    .await;
    assert_eq!(read_due(queue).await.shards.len(), shards);
}

#[tokio::test]
async fn a_held_shard_is_left_to_its_reader_and_due_again_after_the_hold_if_the_reader_died() {
    let app = spawn_app(TestOptions::idle()).await;
    let queue = &app.backends.queue;
    let (entities, shard) = first_due(queue, 1).await;

    // Two processes woken by the same due time: the second does not read what the first
    // holds, and learns to look again by the end of the hold.
    let hold = Duration::from_secs(2);
    let first = hold_due(queue, hold).await;
    assert!(first.shards.iter().any(|r| r.shard == shard), "{first:?}");
    let second = hold_due(queue, hold).await;
    assert!(second.shards.iter().all(|r| r.shard != shard), "{second:?}");
    assert!(
        second.next_ms.is_some_and(|at| at <= first.now_ms + 2_000),
        "{second:?}"
    );

    // The first reader dies before its settle: once the hold ends the shard is due again,
    // and a worker claims the entity.
    let worker = app.worker();
    wait_for(
        Duration::from_secs(10),
        "the entity to be claimed after the hold",
        || async {
            let round = worker.claim_once(10).await.unwrap();
            round.claims.iter().any(|c| c.entity == entities[0])
        },
    )
    .await;
}

#[tokio::test]
async fn a_held_shard_its_reader_did_not_get_to_is_due_again_at_its_settle() {
    let app = spawn_app(TestOptions::idle()).await;
    let queue = &app.backends.queue;
    let (_, shard) = first_due(queue, 1).await;
    // A hold far longer than the test: only the settle can give the shard back.
    let taken = hold_shard(queue, shard, Duration::from_secs(300)).await;
    assert!(read_due(queue).await.shards.is_empty());
    queue
        .settle_index(IndexKind::Due, &[(taken, Settle::Untouched)])
        .await
        .unwrap();
    let again = read_due(queue).await;
    assert!(again.shards.iter().any(|r| r.shard == shard), "{again:?}");
}

#[tokio::test]
async fn a_report_during_a_hold_shows_the_shard_to_other_readers_and_outlives_the_settle() {
    let app = spawn_app(TestOptions::idle()).await;
    let queue = &app.backends.queue;
    let (entities, shard) = first_due(queue, 2).await;
    let (busy, lease) = (Duration::from_millis(250), Duration::from_secs(5));
    let hold = Duration::from_secs(300);
    let taken = hold_shard(queue, shard, hold).await;
    let batch = queue.claim(shard, 10, busy, lease).await.unwrap();
    assert_eq!(batch.claims.len(), 1);
    assert_eq!(batch.next_due_ms, None);
    // Another process makes an entity of the shard due while the shard is held.
    queue
        .schedule(&[(entities[1].clone(), Priority::Critical)])
        .await
        .unwrap();
    // The report shows the held shard to other readers at once.
    let seen = hold_shard(queue, shard, hold).await;
    // The holder's settle (as it answered before the report) removes nothing.
    queue
        .settle_index(IndexKind::Due, &[(taken, Settle::Empty)])
        .await
        .unwrap();
    // The other reader did not get to it either: the shard is due for the next.
    queue
        .settle_index(IndexKind::Due, &[(seen, Settle::Untouched)])
        .await
        .unwrap();
    let round = app.worker().claim_once(10).await.unwrap();
    assert_eq!(round.claims.len(), 1);
    assert_eq!(round.claims[0].entity, entities[1]);
}
