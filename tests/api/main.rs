//! Integration tests against real Redis and Postgres. One binary; `helpers` builds an
//! isolated app (own database, own Redis prefix, own port) per test.

mod helpers;
#[path = "../support/private_redis.rs"]
#[allow(dead_code)]
mod private_redis;
mod proxy;
#[path = "../support/secrets.rs"]
mod secrets;

mod attribute_rules;
mod attributes;
mod audit;
mod backtest;
mod bad_input;
mod concurrency;
mod console;
mod crash;
mod dead_letters;
mod debounce;
mod dsa_stand_in;
mod edge;
mod effects;
mod example_discord;
mod examples;
mod fold;
mod guard;
mod harness;
mod ingest;
mod limits;
mod loadgen;
mod long_windows;
mod maintenance;
mod moderation;
mod outages;
mod read_api;
mod read_replica;
mod repair;
mod retention;
mod retention_migration;
mod review_queue;
mod roles;
mod rules;
mod rules_versions;
mod service_manager;
mod shard_change;
mod shard_index;
mod signatures;
mod stale_writer;
mod startup_errors;
mod statements;
mod supervision;
mod timed_actions;
mod traces;
mod version_fence;
mod wakeups;
mod webhooks;
