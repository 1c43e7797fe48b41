//! The debounce's timing, as settings declare it and the schedule's scripts take it: a value
//! shared by the settings and the queue, so neither imports the other.

/// How an event moves an entity's fire-at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleMode {
    /// Every event pushes the fire-at to now + window (capped by max wait).
    Sliding,
    /// The first pending event fixes the fire-at at its time + window.
    Fixed,
}

impl ScheduleMode {
    /// As `lua/schedule.lua` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleMode::Sliding => "sliding",
            ScheduleMode::Fixed => "fixed",
        }
    }
}

/// Debounce timing and the retry policy, in milliseconds as the scripts take them.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub window_ms: u64,
    pub max_wait_ms: u64,
    pub mode: ScheduleMode,
    pub max_attempts: u32,
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
}
