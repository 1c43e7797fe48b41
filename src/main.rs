use std::process::ExitCode;

use clap::Parser;
use quiesce::cli::{self, Cli};

// mimalloc instead of the system allocator: single-event ingest allocates per request, and
// mimalloc's per-thread free lists measured faster there (BENCHMARKS.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    match cli::run(Cli::parse()).await {
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
