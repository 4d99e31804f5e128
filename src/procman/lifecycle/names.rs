//! A worker's phases and events by name, for the log lines that say what
//! the lifecycle ignored (without the frames an event may carry).

use super::{WorkerEvent as Ev, WorkerPhase as Ph};
use crate::control::FromWorker;

pub(super) fn task_of(phase: &Ph) -> &str {
    match phase {
        Ph::Running { task, .. } | Ph::Reported { task, .. } => &task.id,
        Ph::Stopping { task: Some((t, _)), .. } | Ph::Draining { task: Some(t), .. } => &t.id,
        Ph::Emptying {
            ended: Some((t, _)), ..
        } => &t.id,
        _ => "-",
    }
}

/// An event's name, for a log line (without the frames it may carry).
pub(super) fn event_name(event: &Ev) -> &'static str {
    match event {
        Ev::Assigned { .. } => "assigned",
        Ev::Said(FromWorker::Hello { .. }) => "said hello",
        Ev::Said(FromWorker::Pong) => "said pong",
        Ev::Said(FromWorker::Status { .. }) => "said status",
        Ev::Said(FromWorker::Artifact { .. }) => "said artifact",
        Ev::Said(FromWorker::Reply { .. }) => "said reply",
        Ev::Said(FromWorker::Done { .. }) => "said done",
        Ev::Input(_) => "input",
        Ev::Stop(_) => "stop",
        Ev::KillNow(_) => "kill-now",
        Ev::Retire => "retire",
        Ev::ChannelClosed { broken: false } => "channel-closed",
        Ev::ChannelClosed { broken: true } => "channel-broken",
        Ev::Unwritable => "unwritable",
        Ev::Unsendable(_) => "unsendable",
        Ev::Exited { .. } => "exited",
        Ev::Took => "took",
        Ev::Untouched => "untouched",
        Ev::Counters(_) => "counters",
        Ev::Swept { .. } => "swept",
        Ev::Tick => "tick",
    }
}

/// A phase's name, for a log line.
pub(super) fn phase_name(phase: &Ph) -> &'static str {
    match phase {
        Ph::Idle => "idle",
        Ph::Running { .. } => "running",
        Ph::Reported { .. } => "reported",
        Ph::Stopping { task: None, .. } => "stopping (no task)",
        Ph::Stopping { .. } => "stopping",
        Ph::Draining { .. } => "draining",
        Ph::Emptying { .. } => "emptying",
        Ph::Finished => "finished",
    }
}
