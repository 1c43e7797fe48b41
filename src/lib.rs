//! quiesce: evaluate moderation rules once per entity, when it has gone quiet.
//!
//! Events are recorded in Postgres (the source of truth) and the entity's evaluation is
//! pushed into the future in a Redis sorted set. When the entity is quiet a worker claims it
//! atomically, locks it, reads one snapshot, runs the rules and applies at most one
//! version-checked action. README.md states the guarantees; docs/state-machine.md follows an
//! entity through the Redis sets.

pub mod actions;
pub mod active_rules;
pub mod appeals;
pub mod audit;
pub mod backtest;
pub mod cli;
pub mod coalesce;
pub mod console;
pub mod credentials;
pub mod dead_letters;
pub mod domain;
pub mod evaluation;
pub mod http;
pub mod ingest;
pub mod loadgen;
pub mod maintenance;
pub mod moderation;
pub mod queue;
pub mod request;
pub mod review;
pub mod rules;
pub mod settings;
pub mod startup;
pub mod store;
pub mod telemetry;
pub mod worker;
