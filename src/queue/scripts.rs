//! The Lua scripts of `lua/`, embedded once and run with EVALSHA (reloaded on NOSCRIPT).

use std::sync::LazyLock;

use redis::Script;

pub struct Scripts {
    pub schedule: Script,
    pub claim: Script,
    pub ack: Script,
    pub retry: Script,
    pub reap: Script,
    pub renew: Script,
    pub unlock: Script,
    pub repair: Script,
    pub fail: Script,
    pub redrive: Script,
}

pub static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    schedule: Script::new(include_str!("../../lua/schedule.lua")),
    claim: Script::new(include_str!("../../lua/claim.lua")),
    ack: Script::new(include_str!("../../lua/ack.lua")),
    retry: Script::new(include_str!("../../lua/retry.lua")),
    reap: Script::new(include_str!("../../lua/reap.lua")),
    renew: Script::new(include_str!("../../lua/renew.lua")),
    unlock: Script::new(include_str!("../../lua/unlock.lua")),
    repair: Script::new(include_str!("../../lua/repair.lua")),
    fail: Script::new(include_str!("../../lua/fail.lua")),
    redrive: Script::new(include_str!("../../lua/redrive.lua")),
});
