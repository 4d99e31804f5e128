//! The kill ladder's first steps, as the lifecycle takes them: ask (the
//! `cancel` frame), SIGTERM + SIGCONT, SIGKILL. Each returns the phase it
//! leads to and what the driver does now; the rungs after the first are
//! climbed in `step` as their time comes.

use std::time::Instant;

use super::{Stop, TaskRef, Timing, WorkerAction as Do, WorkerAction, WorkerPhase as Ph, WorkerPhase};

/// The rungs of the kill ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rung {
    /// The `cancel` frame went out (or could not): SIGTERM when due.
    Asked,
    /// SIGTERM + SIGCONT went to the group: SIGKILL when due.
    Terminated,
    /// SIGKILL went out; again every group_poll until the worker is reaped.
    Killed,
}

/// The first rung: ask (a frame into a channel already closed is dropped
/// by the channel), then signal when due.
pub(super) fn ladder(task: TaskRef, stop: Stop, now: Instant, t: Timing) -> (WorkerPhase, Vec<WorkerAction>) {
    (
        Ph::Stopping {
            task: Some((task, stop)),
            rung: Rung::Asked,
            due: now + t.cancel_grace,
        },
        vec![Do::SendCancel],
    )
}

/// Skips the frame: straight to SIGTERM.
pub(super) fn terminate(task: TaskRef, stop: Stop, now: Instant, t: Timing) -> (WorkerPhase, Vec<WorkerAction>) {
    (
        Ph::Stopping {
            task: Some((task, stop)),
            rung: Rung::Terminated,
            due: now + t.term_grace,
        },
        vec![Do::Note("SIGTERM"), Do::Terminate],
    )
}

pub(super) fn kill_now(task: Option<(TaskRef, Stop)>, now: Instant, t: Timing) -> (WorkerPhase, Vec<WorkerAction>) {
    (
        Ph::Stopping {
            task,
            rung: Rung::Killed,
            due: now + t.group_poll,
        },
        vec![Do::Kill],
    )
}
