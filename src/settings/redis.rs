//! Redis, which holds the debounce schedule, and how the schedule is laid out in it.

use secrecy::SecretString;

use super::declare::{nonzero, section};

section! {
    /// Redis, which holds the debounce schedule, and how the schedule is laid out in it.
    pub struct Redis("redis", heading "Redis"), flags RedisFlags {
        /// Redis connection URL (the debounce schedule).
        #[value_name = "URL"]
        redis_url: SecretString = SecretString::from("redis://127.0.0.1:6379");
        /// Namespace of every Redis key; 1-64 characters, no braces.
        #[value_name = "PREFIX"]
        redis_prefix: String = "quiesce".to_owned(), check redis_prefix;
        /// Queue shards (Redis hash tags, so a cluster can spread them); every process must use
        /// the same number.
        shards: u16 = 16, check nonzero;
    }
}

fn redis_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() || prefix.len() > 64 || prefix.contains(['{', '}']) {
        Err("must be 1-64 characters without braces".into())
    } else {
        Ok(())
    }
}
