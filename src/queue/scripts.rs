//! The Lua scripts of `lua/`, embedded once and run with EVALSHA (reloaded on NOSCRIPT). The
//! scripts that touch the pending hash start with `lua/anchor.lua`, its encoding of anchors.

use std::sync::LazyLock;

use redis::Script;

pub struct Scripts {
    pub schedule: Script,
    pub schedule_at: Script,
    pub claim: Script,
    pub lock: Script,
    pub ack: Script,
    pub retry: Script,
    pub reap: Script,
    pub expiring: Script,
    pub renew: Script,
    pub unlock: Script,
    pub repair: Script,
    pub fail: Script,
    pub redrive: Script,
    pub forget_dead: Script,
    pub index_report: Script,
    pub index_read: Script,
    pub index_settle: Script,
}

/// The script with the anchor encoding's functions in front.
fn with_anchor(script: &str) -> Script {
    Script::new(&[include_str!("../../lua/anchor.lua"), script].concat())
}

pub static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    schedule: with_anchor(include_str!("../../lua/schedule.lua")),
    schedule_at: Script::new(include_str!("../../lua/schedule_at.lua")),
    claim: with_anchor(include_str!("../../lua/claim.lua")),
    lock: Script::new(include_str!("../../lua/lock.lua")),
    ack: Script::new(include_str!("../../lua/ack.lua")),
    retry: with_anchor(include_str!("../../lua/retry.lua")),
    reap: with_anchor(include_str!("../../lua/reap.lua")),
    expiring: Script::new(include_str!("../../lua/expiring.lua")),
    renew: Script::new(include_str!("../../lua/renew.lua")),
    unlock: Script::new(include_str!("../../lua/unlock.lua")),
    repair: with_anchor(include_str!("../../lua/repair.lua")),
    fail: with_anchor(include_str!("../../lua/fail.lua")),
    redrive: with_anchor(include_str!("../../lua/redrive.lua")),
    forget_dead: Script::new(include_str!("../../lua/forget_dead.lua")),
    index_report: Script::new(include_str!("../../lua/index_report.lua")),
    index_read: Script::new(include_str!("../../lua/index_read.lua")),
    index_settle: Script::new(include_str!("../../lua/index_settle.lua")),
});
