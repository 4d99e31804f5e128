//! What a task ends with, and how what came before its worker's exit —
//! a result reported, a stop, nothing — and what its cgroup counted decide
//! that ending. Pure: the lifecycle calls it once its worker is gone.

use crate::control::{Cause, Outcome};
use crate::sys::ExitStatus;
use crate::wire::TaskState;

/// What a task ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    pub state: TaskState,
    pub cause: Cause,
    pub text: Option<String>,
}

impl Ending {
    /// The verdict a worker reports in its `done` frame.
    pub fn reported(outcome: Outcome, cause: Cause, text: Option<String>) -> Ending {
        let state = match outcome {
            Outcome::Completed => TaskState::Completed,
            Outcome::Failed => TaskState::Failed,
            Outcome::Rejected => TaskState::Rejected,
            Outcome::Canceled => TaskState::Canceled,
        };
        Ending { state, cause, text }
    }

    pub(super) fn exhausted(text: String) -> Ending {
        Ending {
            state: TaskState::Failed,
            cause: Cause::Exhausted,
            text: Some(text),
        }
    }
}

/// Why procman stops a worker, and the readable reason when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    pub cause: Cause,
    pub why: Option<String>,
}

impl Stop {
    pub fn new(cause: Cause) -> Stop {
        Stop { cause, why: None }
    }

    fn ending(&self, status: ExitStatus) -> Ending {
        let state = match self.cause {
            Cause::Canceled | Cause::Shutdown => TaskState::Canceled,
            _ => TaskState::Failed,
        };
        let text = match (&self.why, self.cause) {
            (Some(why), _) => Some(why.clone()),
            (None, Cause::Crashed) => Some(crashed_text(status)),
            (None, _) => None,
        };
        Ending {
            state,
            cause: self.cause,
            text,
        }
    }
}

fn crashed_text(status: ExitStatus) -> String {
    format!("the worker ended without a result: {status}")
}

pub(super) fn fork_bomb_text(c: &Counters) -> String {
    format!(
        "the task hit tasks.pids_max ({} processes) {} time(s): a fork bomb?",
        c.pids_max, c.pids_refused
    )
}

/// What a task's cgroup counted since the task began.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Forks refused at pids.max.
    pub pids_refused: u64,
    /// The pids.max those forks hit.
    pub pids_max: u64,
    /// The OOM killer (or the memory limit) struck.
    pub out_of_memory: bool,
}

/// What came before the exit: it decides the task's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Before {
    Idle,
    Running,
    Reported(Ending),
    Stopping(Stop),
}

impl Before {
    pub(super) fn ending(&self, status: ExitStatus) -> Option<Ending> {
        match self {
            Before::Idle => None,
            Before::Running => Some(Ending {
                state: TaskState::Failed,
                cause: Cause::Crashed,
                text: Some(crashed_text(status)),
            }),
            Before::Reported(v) => Some(v.clone()),
            Before::Stopping(stop) => Some(stop.ending(status)),
        }
    }
}

/// What the cgroup counted overrides the ending: forks refused at
/// pids.max (unless the task was cancelled), the OOM killer (always).
pub fn counted(ending: Ending, counters: Option<Counters>) -> Ending {
    let Some(c) = counters else { return ending };
    if c.out_of_memory {
        return Ending::exhausted("out of memory: the task went over tasks.memory_max_bytes".into());
    }
    if c.pids_refused > 0 && ending.state != TaskState::Canceled {
        return Ending::exhausted(fork_bomb_text(&c));
    }
    ending
}
