//! A worker's lifecycle as a type: one [`Phase`] and one pure transition,
//! [`Life::step`]`(event, now) → actions`. procman's driver carries the
//! actions out (frames, signals, the task's verdict); nothing here does I/O,
//! so the table tests below walk every path without a process.
//!
//! ```text
//!          assign            done                 exit
//!   Idle ─────────▶ Running ─────▶ Reported ───────────┐
//!                    │  ▲ input-required / input       │
//!                    │  └──────┘ (Running{waiting})    ▼
//!                    │ stop(cause)              Draining ──EOF or drain──▶ Emptying ──group empty──▶ Finished
//!                    ▼                             ▲                         │ sweep every group_poll
//!                 Stopping: cancel frame ─cancel_grace─▶ SIGTERM+SIGCONT     │
//!                           ─term_grace─▶ SIGKILL (again every group_poll) ──┘ exit
//! ```
//! Liveness is judged on what is read: any frame is life. After `ping_every`
//! of silence one ping goes out; `stall_after` more of silence stops the task
//! as `stalled`. A worker that reported its result has `exit_grace` to exit.
//! The task's verdict is decided when the process is gone, from what came
//! before: a result reported before any stop wins; a stop decides otherwise.

use std::time::{Duration, Instant};

use crate::control::{Cause, Outcome};
use crate::sys::ExitStatus;
use crate::wire::TaskState;

/// The clocks of a lifecycle, from config.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub cancel_grace: Duration,
    pub term_grace: Duration,
    pub ping_every: Duration,
    pub stall_after: Duration,
    pub input_idle: Duration,
    /// After `done`, how long the worker has to exit on its own.
    pub exit_grace: Duration,
    /// After the exit, how long its channel may stay open.
    pub drain: Duration,
    /// How often a group that outlives its worker is SIGKILLed and checked.
    pub group_poll: Duration,
}

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
}

/// Why procman stops a worker, and the readable reason when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    pub cause: Cause,
    pub why: Option<String>,
}

impl Stop {
    fn ending(&self, status: ExitStatus) -> Ending {
        let state = match self.cause {
            Cause::Cancelled | Cause::Shutdown => TaskState::Canceled,
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

/// What came before the exit: it decides the task's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Before {
    Idle,
    Running,
    Reported(Ending),
    Stopping(Stop),
}

impl Before {
    fn ending(&self, status: ExitStatus) -> Option<Ending> {
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Spawned ahead of demand; no task yet.
    Idle,
    /// Working on its task; `waiting` since when it waits for input.
    Running { waiting: Option<Instant> },
    /// It reported its result; its exit is due by `due`.
    Reported { verdict: Ending, due: Instant },
    /// The kill ladder runs for `stop`; the next rung at `due`.
    Stopping { stop: Stop, rung: Rung, due: Instant },
    /// Reaped; its channel may still hold frames until EOF or `due`.
    Draining {
        before: Before,
        status: ExitStatus,
        due: Instant,
    },
    /// Channel done; whatever is left of the task is SIGKILLed until empty.
    Emptying { ending: Option<Ending>, due: Instant },
    /// Nothing of it is left; the task has its verdict.
    Finished,
}

/// What happened to a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An idle worker got a task (its `spawn` frame is queued).
    Assigned,
    /// A frame arrived (any frame: liveness).
    Heard,
    /// It asked for input (input-required / auth-required).
    Asked,
    /// Input went to it, or it said it is working again.
    Resumed,
    /// Its `done` frame.
    Reported(Ending),
    /// procman wants it stopped.
    Stop(Stop),
    /// Straight to SIGKILL (a second SIGTERM to agentd; a broken channel).
    KillNow(Stop),
    /// Its control channel reached EOF (`broken`: a bad frame or I/O error).
    ChannelClosed { broken: bool },
    /// Frames to it could not be queued: it stopped reading.
    Unwritable,
    /// waitpid reported it.
    Exited(ExitStatus),
    /// The driver found its process group and cgroup empty.
    GroupEmpty,
    /// Time passed (`now` is the step's).
    Tick,
}

/// What the driver must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    SendPing,
    SendCancel,
    /// SIGTERM + SIGCONT to the group.
    Terminate,
    /// SIGKILL to the group and the cgroup.
    Kill,
    /// SIGKILL whatever is left of the task's group and cgroup, if
    /// anything; when nothing is, the driver answers `GroupEmpty`.
    Sweep,
    /// Log the rung or stop reached (for the operator).
    Note(&'static str),
    /// The task ends with this (None: it had no task).
    Finish(Option<Ending>),
}

/// One worker's lifecycle: its phase plus the clocks every phase shares.
#[derive(Debug, Clone)]
pub struct Life {
    pub phase: Phase,
    deadline: Option<Instant>,
    heard: Instant,
    ping_sent: Option<Instant>,
    channel_open: bool,
    exit: Option<ExitStatus>,
    timing: Timing,
}

impl Life {
    pub fn idle(now: Instant, timing: Timing) -> Life {
        Life {
            phase: Phase::Idle,
            deadline: None,
            heard: now,
            ping_sent: None,
            channel_open: true,
            exit: None,
            timing,
        }
    }

    /// The task's wall-clock budget starts when it is assigned.
    pub fn set_deadline(&mut self, at: Option<Instant>) {
        self.deadline = at;
    }

    /// How the worker process ended, once reaped.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.exit
    }

    pub fn is_finished(&self) -> bool {
        self.phase == Phase::Finished
    }

    /// Whether it still works for its task (not idle, not stopping, not gone).
    pub fn is_running(&self) -> bool {
        matches!(self.phase, Phase::Running { .. })
    }

    /// When `step(Tick)` next has something to do.
    pub fn next_due(&self) -> Option<Instant> {
        let t = &self.timing;
        match &self.phase {
            Phase::Idle | Phase::Finished => None,
            Phase::Running { waiting } => {
                let liveness = match self.ping_sent {
                    Some(at) => at + t.stall_after,
                    None => self.heard + t.ping_every,
                };
                [Some(liveness), self.deadline, waiting.map(|w| w + t.input_idle)]
                    .into_iter()
                    .flatten()
                    .min()
            }
            Phase::Reported { due, .. }
            | Phase::Stopping { due, .. }
            | Phase::Draining { due, .. }
            | Phase::Emptying { due, .. } => Some(*due),
        }
    }

    /// The transition. Unexpected events in a phase change nothing.
    pub fn step(&mut self, event: Event, now: Instant) -> Vec<Action> {
        let t = self.timing;
        if event == Event::Heard {
            self.heard = now;
            self.ping_sent = None;
            return Vec::new();
        }
        match event {
            Event::ChannelClosed { .. } => self.channel_open = false,
            Event::Exited(status) => self.exit = Some(status),
            _ => {}
        }
        let phase = std::mem::replace(&mut self.phase, Phase::Finished);
        let (next, actions) = match (phase, event) {
            (Phase::Idle, Event::Assigned) => {
                self.heard = now;
                (Phase::Running { waiting: None }, vec![])
            }
            (Phase::Idle, Event::Stop(_) | Event::KillNow(_) | Event::Unwritable) => (Phase::Idle, vec![Action::Kill]),
            (Phase::Idle, Event::ChannelClosed { .. }) => (Phase::Idle, vec![Action::Kill]),

            (Phase::Running { .. }, Event::Asked) => (Phase::Running { waiting: Some(now) }, vec![]),
            (Phase::Running { .. }, Event::Resumed) => (Phase::Running { waiting: None }, vec![]),
            (Phase::Running { .. }, Event::Reported(verdict)) => (
                Phase::Reported {
                    verdict,
                    due: now + t.exit_grace,
                },
                vec![],
            ),
            (Phase::Running { .. }, Event::Stop(stop)) => self.ladder(stop, now),
            (Phase::Running { .. }, Event::Unwritable) => Self::terminate(
                Stop {
                    cause: Cause::Stalled,
                    why: Some("failed: the worker stopped reading its control channel".into()),
                },
                now,
                t,
            ),
            (Phase::Running { .. }, Event::ChannelClosed { broken: true }) => Self::kill_now(
                Stop {
                    cause: Cause::Crashed,
                    why: None,
                },
                now,
                t,
            ),
            // A clean EOF without a result: it is on its way out. The exit
            // says how; if it lingers, the ladder (minus the frame) ends it.
            (Phase::Running { .. }, Event::ChannelClosed { broken: false }) => (
                Phase::Stopping {
                    stop: Stop {
                        cause: Cause::Crashed,
                        why: None,
                    },
                    rung: Rung::Asked,
                    due: now + t.cancel_grace,
                },
                vec![],
            ),
            (Phase::Running { waiting }, Event::Tick) => self.running_tick(waiting, now),

            // A result came: later stops change nothing, but it must exit.
            (Phase::Reported { verdict, due }, Event::Tick) if now >= due => (
                Phase::Reported {
                    verdict,
                    due: now + t.group_poll,
                },
                vec![Action::Note("exit_grace"), Action::Kill],
            ),
            (Phase::Reported { verdict, .. }, Event::KillNow(_)) => (
                Phase::Reported {
                    verdict,
                    due: now + t.group_poll,
                },
                vec![Action::Kill],
            ),
            (Phase::Reported { verdict, due }, Event::ChannelClosed { broken: true }) => {
                (Phase::Reported { verdict, due }, vec![Action::Kill])
            }

            (Phase::Stopping { stop, rung, due }, Event::Tick) if now >= due => {
                let (rung, actions) = match rung {
                    Rung::Asked => (Rung::Terminated, vec![Action::Note("SIGTERM"), Action::Terminate]),
                    Rung::Terminated => (Rung::Killed, vec![Action::Note("SIGKILL"), Action::Kill]),
                    Rung::Killed => (Rung::Killed, vec![Action::Kill]),
                };
                let wait = match rung {
                    Rung::Terminated => t.term_grace,
                    _ => t.group_poll,
                };
                (
                    Phase::Stopping {
                        stop,
                        rung,
                        due: now + wait,
                    },
                    actions,
                )
            }
            (Phase::Stopping { stop, rung, .. }, Event::KillNow(_)) if rung != Rung::Killed => (
                Phase::Stopping {
                    stop,
                    rung: Rung::Killed,
                    due: now + t.group_poll,
                },
                vec![Action::Kill],
            ),
            (Phase::Stopping { stop, rung, .. }, Event::ChannelClosed { broken: true }) if rung != Rung::Killed => (
                Phase::Stopping {
                    stop,
                    rung: Rung::Killed,
                    due: now + t.group_poll,
                },
                vec![Action::Kill],
            ),

            (
                phase @ (Phase::Idle | Phase::Running { .. } | Phase::Reported { .. } | Phase::Stopping { .. }),
                Event::Exited(status),
            ) => {
                let before = match phase {
                    Phase::Idle => Before::Idle,
                    Phase::Running { .. } => Before::Running,
                    Phase::Reported { verdict, .. } => Before::Reported(verdict),
                    Phase::Stopping { stop, .. } => Before::Stopping(stop),
                    _ => unreachable!("matched above"),
                };
                if self.channel_open {
                    (
                        Phase::Draining {
                            before,
                            status,
                            due: now + t.drain,
                        },
                        vec![],
                    )
                } else {
                    Self::empty(before.ending(status), now, t)
                }
            }

            // Frames read after the exit still count: a `done` that was
            // written before the worker died is its verdict.
            (
                Phase::Draining {
                    before: Before::Running,
                    status,
                    due,
                },
                Event::Reported(verdict),
            ) => (
                Phase::Draining {
                    before: Before::Reported(verdict),
                    status,
                    due,
                },
                vec![],
            ),
            (Phase::Draining { before, status, .. }, Event::ChannelClosed { .. }) => {
                Self::empty(before.ending(status), now, t)
            }
            (Phase::Draining { before, status, due }, Event::Tick) if now >= due => {
                Self::empty(before.ending(status), now, t)
            }

            (Phase::Emptying { ending, .. }, Event::GroupEmpty) => (Phase::Finished, vec![Action::Finish(ending)]),
            (Phase::Emptying { ending, due }, Event::Tick) if now >= due => (
                Phase::Emptying {
                    ending,
                    due: now + t.group_poll,
                },
                vec![Action::Sweep],
            ),

            (phase, _) => (phase, vec![]),
        };
        self.phase = next;
        actions
    }

    fn running_tick(&mut self, waiting: Option<Instant>, now: Instant) -> (Phase, Vec<Action>) {
        let t = self.timing;
        let stop = |cause| Stop { cause, why: None };
        if self.deadline.is_some_and(|d| now >= d) {
            return self.ladder(stop(Cause::Deadline), now);
        }
        if waiting.is_some_and(|w| now >= w + t.input_idle) {
            return self.ladder(stop(Cause::Idle), now);
        }
        match self.ping_sent {
            Some(at) if now >= at + t.stall_after => self.ladder(stop(Cause::Stalled), now),
            None if now >= self.heard + t.ping_every => {
                self.ping_sent = Some(now);
                (Phase::Running { waiting }, vec![Action::SendPing])
            }
            _ => (Phase::Running { waiting }, vec![]),
        }
    }

    /// The first rung: ask, then signal when due.
    fn ladder(&self, stop: Stop, now: Instant) -> (Phase, Vec<Action>) {
        let actions = if self.channel_open {
            vec![Action::SendCancel]
        } else {
            vec![]
        };
        (
            Phase::Stopping {
                stop,
                rung: Rung::Asked,
                due: now + self.timing.cancel_grace,
            },
            actions,
        )
    }

    /// Skips the frame: straight to SIGTERM.
    fn terminate(stop: Stop, now: Instant, t: Timing) -> (Phase, Vec<Action>) {
        (
            Phase::Stopping {
                stop,
                rung: Rung::Terminated,
                due: now + t.term_grace,
            },
            vec![Action::Note("SIGTERM"), Action::Terminate],
        )
    }

    fn kill_now(stop: Stop, now: Instant, t: Timing) -> (Phase, Vec<Action>) {
        (
            Phase::Stopping {
                stop,
                rung: Rung::Killed,
                due: now + t.group_poll,
            },
            vec![Action::Kill],
        )
    }

    /// Whatever the program left behind goes now; the verdict waits until
    /// the group and the cgroup are empty.
    fn empty(ending: Option<Ending>, now: Instant, t: Timing) -> (Phase, Vec<Action>) {
        (
            Phase::Emptying {
                ending,
                due: now + t.group_poll,
            },
            vec![Action::Sweep],
        )
    }
}

#[cfg(test)]
mod tests;
