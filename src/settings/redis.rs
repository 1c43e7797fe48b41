//! Redis, which holds the debounce schedule, and how the schedule is laid out in it.

use super::value::InvalidValue;
use crate::credentials::ServiceUrl;

use std::time::Duration;

use super::declare::{nonzero, section};

section! {
    /// Redis, which holds the debounce schedule, and how the schedule is laid out in it.
    pub struct Redis("redis", heading "Redis"), flags RedisFlags {
        /// Redis connection URL (the debounce schedule); `redis+cluster://h1:p1,h2:p2` (or
        /// `rediss+cluster://`) names a Redis Cluster by its seed nodes.
        #[value_name = "URL"]
        redis_url: ServiceUrl = ServiceUrl::from("redis://127.0.0.1:6379");
        /// Namespace of every Redis key; 1-64 characters, no braces.
        #[value_name = "PREFIX"]
        redis_prefix: String = "quiesce".to_owned(), check redis_prefix;
        /// Queue shards, each a Redis hash tag placed in its own stretch of cluster slots; the
        /// default spreads evenly over 3-10 masters. Every process uses the same number; to
        /// change it online, see previous_shards.
        shards: u16 = 120, check shard_count;
        /// The shard count before a change, while its shards drain (0: no change under way).
        /// Entities it still holds stay there, max-wait anchors included, until evaluated; new
        /// ones go to the new layout. Start every process with it and the new shards (old and new
        /// processes may run side by side meanwhile); back to 0 once `quiesce shards` says the
        /// old layout is empty.
        previous_shards: u16 = 0, check shard_count_or_zero;
        /// How long the rescan of the shard indexes takes to read every shard's head into them,
        /// repairing an index Redis lost: a slice of shards each second, by whichever process
        /// takes that second's lock; at most 16 shards a second, so above 16 shards per second of
        /// it (480 shards at 30s) a round takes shards / 16 seconds.
        index_rescan: Duration = Duration::from_secs(30), check nonzero;
    }
}

fn redis_prefix(prefix: &str) -> Result<(), InvalidValue> {
    if prefix.is_empty() || prefix.len() > 64 || prefix.contains(['{', '}']) {
        Err("must be 1-64 characters without braces".into())
    } else {
        Ok(())
    }
}

/// Redis Cluster has 16,384 slots; a shard takes at least one.
fn shard_count(count: &u16) -> Result<(), InvalidValue> {
    match count {
        0 => Err("must be greater than zero".into()),
        1..=16_384 => Ok(()),
        _ => Err("must be at most 16384 (Redis Cluster's slots)".into()),
    }
}

fn shard_count_or_zero(count: &u16) -> Result<(), InvalidValue> {
    if *count == 0 {
        Ok(())
    } else {
        shard_count(count)
    }
}
