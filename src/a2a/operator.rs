//! The command extension's operations carried out on the daemon: status,
//! drain, resume, limits. The extension (parsing, the reply shape) lives in
//! `ext::command`; what the operations touch (the table, procman, the
//! daemon's flags) lives here, above them.

use serde_json::{json, Map, Value};

use super::Agent;
use crate::ext::command::Op;

/// Runs an operation; the reply's data.
pub fn run(agent: &Agent, op: &Op) -> Map<String, Value> {
    use std::sync::atomic::Ordering;
    match op {
        Op::Status => {}
        Op::Drain => agent.daemon.draining.store(true, Ordering::SeqCst),
        Op::Resume => agent.daemon.draining.store(false, Ordering::SeqCst),
        Op::Limits { max_running: Some(n) } => {
            agent.tasks.set_max_running(*n);
            if let Err(gone) = agent.procman.wake() {
                log::warn!("a2a.limits {gone}");
            }
        }
        Op::Limits { max_running: None } => {}
    }
    let (queued, active, retained) = agent.tasks.counts();
    let t = &agent.cfg.tasks;
    let limits = json!({
        "maxRunning": agent.tasks.max_running(),
        "maxQueued": t.max_queued,
        "deadlineMs": t.deadline_ms,
        "inputIdleMs": t.input_idle_ms,
        "outputMaxBytes": t.output_max_bytes,
        "maxConnections": agent.daemon.max_connections,
        "retainMax": t.retain_max,
        "retainMs": t.retain_ms,
        "retainBytes": t.retain_bytes,
    });
    if let Op::Limits { .. } = op {
        return Map::from_iter([("op".to_string(), json!("limits")), ("limits".to_string(), limits)]);
    }
    let op_name = op.name();
    Map::from_iter([
        ("op".to_string(), json!(op_name)),
        ("version".to_string(), json!(env!("CARGO_PKG_VERSION"))),
        ("pid".to_string(), json!(std::process::id())),
        (
            "uptimeMs".to_string(),
            json!(agent.daemon.started.elapsed().as_millis() as u64),
        ),
        ("listeners".to_string(), json!(agent.daemon.listeners)),
        ("runner".to_string(), json!(agent.cfg.runner.name())),
        ("isolation".to_string(), json!(agent.daemon.isolation)),
        (
            "draining".to_string(),
            json!(agent.daemon.draining.load(Ordering::SeqCst)),
        ),
        (
            "tasks".to_string(),
            json!({"running": active, "queued": queued, "retained": retained, "retainedBytes": agent.tasks.retained_bytes()}),
        ),
        ("limits".to_string(), limits),
    ])
}
