use std::process::ExitCode;

use clap::Parser;
use quiesce::cli::{self, Cli};

// mimalloc instead of the system allocator: single-event ingest allocates per request, and
// mimalloc's per-thread free lists measured faster there (BENCHMARKS.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let result = cli::run(Cli::parse()).await;
    // The spans a command made are sent before it exits (when traces are exported).
    quiesce::telemetry::traces::shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // Whatever a library put in its message, no address leaves with its password.
            eprintln!(
                "quiesce: {}",
                quiesce::credentials::redact_passwords(&format!("{error:#}"))
            );
            ExitCode::FAILURE
        }
    }
}
