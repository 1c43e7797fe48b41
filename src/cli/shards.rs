//! `quiesce shards`: what each shard layout of the schedule holds, and the move of the draining
//! layout's dead letters.

use crate::{
    audit, dead_letters,
    domain::{AuditAction, AuditEntry},
    queue::Queue,
    settings::Settings,
    startup::{connect_postgres, connect_redis, keyspace},
};

pub(super) async fn run(settings: &Settings, move_dead_letters: bool) -> anyhow::Result<()> {
    let queue = Queue::new(
        connect_redis(settings).await?.0,
        keyspace(settings),
        settings.schedule.timing(),
    );
    if move_dead_letters {
        let store = connect_postgres(settings).await?;
        let moved = dead_letters::move_draining(&store, &queue).await?;
        let entry = AuditEntry {
            action: AuditAction::ShardsMove,
            subject: "shards".into(),
            before: None,
            after: Some(serde_json::json!({
                "moved": moved.moved,
                "recorded": moved.recorded,
                "forgotten": moved.forgotten,
            })),
        };
        audit::record(&store, &audit::command_line(), entry).await;
        println!(
            "dead letters moved to the current layout: {} ({} recorded in Postgres first; {} left the draining layout)",
            moved.moved, moved.recorded, moved.forgotten
        );
    }
    let layouts = queue.layout_depths().await?;
    for layout in &layouts {
        println!(
            "{} shards{}\tdue={}\tpending={}\tin_flight={}\tdead={}",
            layout.shards,
            if layout.draining { " (draining)" } else { "" },
            layout.due,
            layout.pending,
            layout.inflight,
            layout.dead
        );
    }
    let current = layouts[0].shards;
    match layouts.iter().find(|l| l.draining) {
        Some(old) if old.is_drained() && old.dead == 0 => println!(
            "the {} shards drained are empty: set previous_shards to 0 on every process",
            old.shards
        ),
        Some(old) if old.is_drained() => println!(
            "the {} shards drained hold only {} dead letters: once every process runs {current} shards, \
             run quiesce shards --move-dead-letters, then set previous_shards to 0",
            old.shards, old.dead
        ),
        Some(old) => println!(
            "the {} shards drained still hold entities; they leave as they are evaluated",
            old.shards
        ),
        None => {}
    }
    Ok(())
}
