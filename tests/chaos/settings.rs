//! The soak's settings, from the environment (see chaos.rs).

use std::path::PathBuf;

use crate::breaks::Breaks;
use crate::{common, rng};

pub struct Settings {
    pub secs: u64,
    /// AGENTD_CHAOS_BREAK, parsed.
    pub breaks: Breaks,
    pub seed: u64,
    pub clients: usize,
    pub default_run: bool,
    pub bin: PathBuf,
    pub log: String,
    /// Tasks get a memory limit (tasks.memory_max_bytes).
    pub memory_limit: bool,
}

pub fn settings() -> Settings {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let secs_var = var("AGENTD_CHAOS_SECS");
    let default_run = secs_var.is_none();
    let secs = secs_var.map_or(25, |v| v.parse().expect("AGENTD_CHAOS_SECS: a number of seconds"));
    assert!(secs >= 15, "AGENTD_CHAOS_SECS: at least 15 (every fault needs a turn)");
    let seed = var("AGENTD_CHAOS_SEED").map_or_else(rng::fresh_seed, |v| {
        let parsed = match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => v.parse(),
        };
        parsed.expect("AGENTD_CHAOS_SEED: a number (decimal or 0x…)")
    });
    let clients = var("AGENTD_CHAOS_CLIENTS").map_or(if default_run { 6 } else { 16 }, |v| {
        v.parse().expect("AGENTD_CHAOS_CLIENTS: a number")
    });
    Settings {
        secs,
        breaks: Breaks::parse(&var("AGENTD_CHAOS_BREAK").unwrap_or_default()).unwrap_or_else(|e| panic!("{e}")),
        seed,
        clients,
        default_run,
        bin: var("AGENTD_CHAOS_BIN").map_or_else(|| PathBuf::from(common::BIN), PathBuf::from),
        log: var("AGENTD_CHAOS_LOG").unwrap_or_else(|| "info".into()),
        memory_limit: var("AGENTD_CHAOS_MEMORY_LIMIT").is_none_or(|v| match v.as_str() {
            "on" => true,
            "off" => false,
            _ => panic!("AGENTD_CHAOS_MEMORY_LIMIT: on or off, not {v:?}"),
        }),
    }
}
