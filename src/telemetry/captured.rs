//! Unit tests' log capture: what a `tracing` subscriber writes, kept in memory.

use std::sync::{Arc, Mutex};

/// A writer that keeps what it is given; clones share it.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// What was written so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `f` under a subscriber that writes lines at `level` and above, without colours, into
/// memory; returns what `f` returned and the lines.
pub fn logged<T>(level: tracing::Level, f: impl FnOnce() -> T) -> (T, String) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let output = tracing::subscriber::with_default(subscriber, f);
    (output, captured.text())
}
