//! Keeping Redis' dead sets and Postgres' dead letters in step: the repair sweep's
//! reconciliation, and the move of a draining layout's dead letters after a shard count
//! change. Postgres decides; its rows are locked for share while Redis is written, so a redrive
//! of one of them waits and cannot be undone by a restore.

use super::{PAGE, Result};
use crate::{
    domain::{DeadLetter, EntityId},
    queue::{DeadLetterCursor, Queue},
    store::Store,
};

/// What one reconciliation of Redis and Postgres did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetterSync {
    /// Dead letters Redis held that Postgres had not recorded (its write had failed).
    pub recorded: usize,
    /// Dead letters Redis had lost, put back in its dead set.
    pub restored: usize,
    /// The shard where the next reconciliation goes on reading Redis' dead sets.
    pub next_shard: u16,
}

/// Which shards' dead sets a reconciliation reads: `count` of them from shard `from`,
/// wrapping round after the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardWalk {
    pub from: u16,
    pub count: u16,
}

impl ShardWalk {
    /// The walk over `total` shards as at most two stretches `[from, end)` (to the last shard,
    /// then round from the first), at most `total` shards in all; and where the next walk
    /// begins.
    fn stretches(self, total: u16) -> (Vec<(u16, u16)>, u16) {
        let total = u32::from(total.max(1));
        let first = u32::from(self.from) % total;
        let to = first + u32::from(self.count).clamp(1, total);
        let mut stretches = vec![(first as u16, to.min(total) as u16)];
        if to > total {
            stretches.push((0, (to - total) as u16));
        }
        (stretches, (to % total) as u16)
    }
}

/// Reconciles the two copies: dead letters Redis holds that Postgres has not recorded are
/// recorded (their write failed), then dead letters Redis lost are put back in its dead set,
/// out of the due set (so a dead entity is not evaluated again until redriven), and failure
/// records no longer current are deleted. Run by the repair sweep before it re-schedules
/// anything. Redis' dead sets are read in `shards`, at most as many shards as the layout has
/// (wrapping round after the last); the report says where the next call goes on.
#[tracing::instrument(skip_all, fields(from = shards.from, count = shards.count))]
pub async fn sync(store: &Store, queue: &Queue, shards: ShardWalk) -> Result<DeadLetterSync> {
    let (stretches, next_shard) = shards.stretches(queue.keys().shards());
    let mut report = DeadLetterSync {
        next_shard,
        ..Default::default()
    };
    for (from, end) in stretches {
        let mut cursor = Some(DeadLetterCursor {
            shard: from,
            offset: 0,
        });
        while let Some(at) = cursor {
            let page = queue.dead_letters_before(at, PAGE, end).await?;
            for dead in &page.entries {
                if store.dead_letters().record_dead_letter(dead).await? {
                    report.recorded += 1;
                }
            }
            cursor = page.next;
        }
    }

    let mut after = 0;
    loop {
        // Locked for share while Redis is written: a redrive of one of these waits, so it
        // cannot be undone by this restore.
        let page = store
            .dead_letters()
            .lock_live_dead_letters(after, PAGE)
            .await?;
        let (dead, next) = &page.value;
        if !dead.is_empty() {
            report.restored += queue.restore_dead_letters(dead).await?;
        }
        let next = *next;
        page.commit().await?;
        match next {
            Some(last) => after = last,
            None => break,
        }
    }

    store.dead_letters().forget_ended_failures().await?;
    Ok(report)
}

/// What moving a draining layout's dead letters did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MovedDeadLetters {
    /// Put in the current layout's dead set (Postgres holds them as not redriven).
    pub moved: usize,
    /// Found in the draining layout but missing from Postgres: recorded first.
    pub recorded: usize,
    /// Taken out of the draining layout (the moved ones, and any Postgres says were redriven).
    pub forgotten: usize,
}

/// The last step of a shard count change, once every process runs the new count: the draining
/// layout's dead letters move to the current one (`quiesce shards --move-dead-letters`).
/// Postgres decides, as in the sweep's restore: one it holds as not redriven goes to the
/// current layout's dead set, one it says was redriven just leaves; one it lacks is recorded
/// first. The rows are locked for share while Redis is written, so a redrive of one of them
/// waits and then clears it in both layouts.
#[tracing::instrument(skip_all)]
pub async fn move_draining(store: &Store, queue: &Queue) -> Result<MovedDeadLetters> {
    let mut report = MovedDeadLetters::default();
    loop {
        let found = queue.draining_dead_letters().await?;
        if found.is_empty() {
            return Ok(report);
        }
        for dead in &found {
            if store.dead_letters().record_dead_letter(dead).await? {
                report.recorded += 1;
            }
        }
        let entities: Vec<&str> = found.iter().map(|d| d.entity.as_str()).collect();
        let live = store
            .dead_letters()
            .lock_live_dead_letters_of(&entities)
            .await?;
        let live_letters: Vec<&DeadLetter> = live.value.iter().collect();
        report.moved += queue.restore_in_current_layout(&live_letters).await?;
        let read: Vec<(EntityId, i64)> = found
            .iter()
            .map(|d| (d.entity.clone(), d.dead_lettered_at_ms))
            .collect();
        let forgotten = queue.forget_draining_dead_letters(&read).await?;
        live.commit().await?;
        report.forgotten += forgotten;
        // What is left was dead-lettered again since it was read: the next run takes it.
        if forgotten == 0 {
            return Ok(report);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_of_the_dead_sets_goes_round_the_shards_a_stretch_at_a_time() {
        let walk = |from, count| ShardWalk { from, count }.stretches(1000);
        assert_eq!(walk(0, 128), (vec![(0, 128)], 128));
        assert_eq!(walk(900, 128), (vec![(900, 1000), (0, 28)], 28));
        assert_eq!(walk(872, 128), (vec![(872, 1000)], 0));
        // Never more than every shard once, wherever it starts.
        assert_eq!(
            ShardWalk {
                from: 2,
                count: 128
            }
            .stretches(4),
            (vec![(2, 4), (0, 2)], 2)
        );
        assert_eq!(
            ShardWalk {
                from: 7,
                count: 128
            }
            .stretches(4),
            (vec![(3, 4), (0, 3)], 3)
        );
    }
}
