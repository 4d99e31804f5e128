//! A worker's lifecycle as a type: one [`Phase`] and one pure transition,
//! [`Life::step`]`(event, now) → actions`. procman's driver carries the
//! actions out (frames, signals, sweeps, the task's verdict) and reports what
//! the kernel said back as events; nothing here does I/O, so the table tests
//! walk every path without a process. **Every verdict is made here**: a
//! reported result, a stop's cause, a crash, and what the final sweep found
//! in the task's cgroup (forks refused at pids.max, the OOM killer).
//!
//! ```text
//!          assign            done                 exit
//!   Idle ─────────▶ Running ─────▶ Reported ───────────┐
//!                    │  ▲ input-required / input       │
//!                    │  └──────┘ (Running{waiting})    ▼
//!                    │ stop(cause)              Draining ──EOF or drain──▶ Emptying ──swept, nothing left──▶ Finished
//!                    ▼                             ▲                         │ sweep every group_poll
//!                 Stopping: cancel frame ─cancel_grace─▶ SIGTERM+SIGCONT     │ (SIGKILL what is left)
//!                           ─term_grace─▶ SIGKILL (again every group_poll) ──┘ exit
//! ```
//! Liveness is judged on what is read: any frame is life. After `ping_every`
//! of silence one ping goes out; `stall_after` more of silence stops the task
//! as `stalled`. A worker that reported its result has `exit_grace` to exit.
//! A worker that has not read its task's `spawn` frame within `take_within`
//! (a stopped or lost helper of agentd's own) gives the task back to be
//! started on a fresh worker: the task had not started, so it is not failed.
//! The task's verdict is decided when the process is gone, from what came
//! before: a result reported before any stop wins; a stop decides otherwise.

use std::time::{Duration, Instant};

use crate::control::Cause;
use crate::sys::ExitStatus;

mod verdict;
pub use verdict::{Before, Counters, Ending, Stop};

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
    /// How long a worker may leave its task's `spawn` frame unread.
    pub take_within: Duration,
}

impl Timing {
    /// When a worker that has said nothing yet is asked whether it read its
    /// task. Not sooner where pings come sooner: a worker only slow to be
    /// scheduled would be killed for it, and its task given back three times
    /// fails (a 1 ms ping interval did that). Until it has read its task a
    /// worker is not judged stalled, so the two clocks need not agree.
    fn take_check(&self) -> Duration {
        self.take_within
    }
}

fn running(waiting: Option<Instant>, deadline: Option<Instant>, taken: bool) -> Phase {
    Phase::Running {
        waiting,
        deadline,
        taken,
    }
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Spawned ahead of demand; no task yet.
    Idle,
    /// Working on its task: `waiting` since when it waits for input, the
    /// task's wall-clock `deadline`, and whether it has read its `spawn`.
    Running {
        waiting: Option<Instant>,
        deadline: Option<Instant>,
        taken: bool,
    },
    /// It reported its result; its exit is due by `due`.
    Reported { verdict: Ending, due: Instant },
    /// The kill ladder runs for `stop`; the next rung at `due`.
    Stopping { stop: Stop, rung: Rung, due: Instant },
    /// Reaped; its channel may still hold frames until EOF or `due`.
    Draining {
        before: Before,
        exit: ExitStatus,
        due: Instant,
    },
    /// Channel done; whatever is left of the task is SIGKILLed until a
    /// sweep finds nothing.
    Emptying {
        ending: Option<Ending>,
        exit: ExitStatus,
        due: Instant,
    },
    /// Nothing of it is left; the task has its verdict.
    Finished,
}

/// What happened to a worker: from the rest of agentd, its frames, the
/// clock, and what the driver read from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An idle worker got a task (its `spawn` frame is queued), with the
    /// task's wall-clock deadline.
    Assigned { task: String, deadline: Option<Instant> },
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
    /// Straight to SIGKILL (a second SIGTERM to agentd).
    KillNow(Stop),
    /// Its control channel reached EOF (`broken`: a bad frame or I/O error).
    ChannelClosed { broken: bool },
    /// Frames to it could not be queued: it stopped reading.
    Unwritable,
    /// wait4 reported it.
    Exited(ExitStatus),
    /// It has read its `spawn` frame.
    Took,
    /// Its `spawn` frame was still unread, all of it, and is taken back
    /// out of its pipe: it can never start the task.
    Untouched,
    /// Its cgroup's counters while it runs (read now and then).
    Counters(Counters),
    /// A sweep's findings: whether anything of the task is `left` (its
    /// group, its cgroup, adopted escapees), and its cgroup's counters.
    Swept { left: bool, counters: Option<Counters> },
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
    /// Reap, then look for what is left of the task (its group, its
    /// cgroup, and with `adopted` agentd's children that are no worker's:
    /// escapees a SIGKILLed worker could not take with it) and SIGKILL it;
    /// answer with `Swept`.
    Sweep {
        adopted: bool,
    },
    /// Look whether the worker has read its `spawn` frame, taking it back
    /// if not; answer `Took` or `Untouched`.
    CheckTaken,
    /// The task goes back to the queue, to start on a fresh worker.
    Requeue(String),
    /// Log the rung or stop reached (for the operator).
    Note(&'static str),
    /// The worker is gone and so is everything of its task: the task ends
    /// with `ending` (None: it had no task).
    Finish {
        ending: Option<Ending>,
        exit: ExitStatus,
    },
}

/// One worker's lifecycle: its phase, its task, and the clocks every phase
/// shares.
#[derive(Debug, Clone)]
pub struct Life {
    pid: i32,
    phase: Phase,
    /// The task and when it was assigned; only `Assigned` sets it.
    task: Option<(String, Instant)>,
    heard: Instant,
    ping_sent: Option<Instant>,
    channel_open: bool,
    /// In a cgroup of its own, which holds whatever escapes its group.
    contained: bool,
    timing: Timing,
}

impl Life {
    pub fn idle(pid: i32, contained: bool, now: Instant, timing: Timing) -> Life {
        Life {
            pid,
            phase: Phase::Idle,
            task: None,
            heard: now,
            ping_sent: None,
            channel_open: true,
            contained,
            timing,
        }
    }

    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The task it works for, and since when.
    pub fn task(&self) -> Option<(&str, Instant)> {
        self.task.as_ref().map(|(id, at)| (id.as_str(), *at))
    }

    pub fn is_idle(&self) -> bool {
        self.phase == Phase::Idle
    }

    pub fn is_finished(&self) -> bool {
        self.phase == Phase::Finished
    }

    /// Whether it still works for its task (not idle, not stopping, not gone).
    pub fn is_running(&self) -> bool {
        matches!(self.phase, Phase::Running { .. })
    }

    /// Whether what it says of its task's progress still counts: while it
    /// runs, and after it exited without being stopped (frames it wrote
    /// before it died are read after the exit was reaped).
    pub fn speaks_for_its_task(&self) -> bool {
        matches!(
            self.phase,
            Phase::Running { .. }
                | Phase::Draining {
                    before: Before::Running,
                    ..
                }
        )
    }

    /// Whether it has a task whose `spawn` frame it may not have read yet.
    pub fn may_not_have_taken(&self) -> bool {
        matches!(self.phase, Phase::Running { taken: false, .. })
    }

    /// When `step(Tick)` next has something to do.
    pub fn next_due(&self) -> Option<Instant> {
        let t = &self.timing;
        match &self.phase {
            Phase::Idle | Phase::Finished => None,
            Phase::Running {
                waiting,
                deadline,
                taken,
            } => {
                let liveness = match self.ping_sent {
                    Some(at) => at + t.stall_after,
                    None => self.heard + t.ping_every,
                };
                // Until it has read its task, only whether it will is asked;
                // liveness (ping, stall) is judged once it has.
                let liveness = Some(liveness).filter(|_| *taken);
                let take = self
                    .task
                    .as_ref()
                    .filter(|_| !taken)
                    .map(|(_, at)| *at + t.take_check());
                [liveness, *deadline, waiting.map(|w| w + t.input_idle), take]
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

    /// The transition.
    pub fn step(&mut self, event: Event, now: Instant) -> Vec<Action> {
        let t = self.timing;
        match &event {
            Event::Heard => {
                self.heard = now;
                self.ping_sent = None;
                if let Phase::Running { taken, .. } = &mut self.phase {
                    *taken = true; // it spoke: it read its spawn
                }
                return Vec::new();
            }
            Event::ChannelClosed { .. } => self.channel_open = false,
            _ => {}
        }
        let phase = std::mem::replace(&mut self.phase, Phase::Finished);
        let (next, actions) = match (phase, event) {
            (Phase::Idle, Event::Assigned { task, deadline }) => {
                self.heard = now;
                self.task = Some((task, now));
                (running(None, deadline, false), vec![])
            }
            // An idle worker has no task to ask: it is killed (retired,
            // refused, gone quiet) and ends as a worker without a task.
            (Phase::Idle, Event::Stop(stop) | Event::KillNow(stop)) => Self::kill_now(stop, now, t),
            (Phase::Idle, Event::Unwritable | Event::ChannelClosed { .. }) => {
                Self::kill_now(Stop::new(Cause::Shutdown), now, t)
            }

            (Phase::Running { deadline, taken, .. }, Event::Asked) => (running(Some(now), deadline, taken), vec![]),
            (Phase::Running { deadline, taken, .. }, Event::Resumed) => (running(None, deadline, taken), vec![]),
            (Phase::Running { waiting, deadline, .. }, Event::Took) => (running(waiting, deadline, true), vec![]),
            (Phase::Running { taken: false, .. }, Event::Untouched) => self.give_back(now),
            (Phase::Running { .. }, Event::Counters(c)) if c.pids_refused > 0 => self.ladder(
                Stop {
                    cause: Cause::Exhausted,
                    why: Some(verdict::fork_bomb_text(&c)),
                },
                now,
            ),
            (phase @ Phase::Running { .. }, Event::Counters(_)) => (phase, vec![]),
            (Phase::Running { .. }, Event::Reported(verdict)) => (
                Phase::Reported {
                    verdict,
                    due: now + t.exit_grace,
                },
                vec![],
            ),
            (Phase::Running { .. }, Event::Stop(stop)) => self.ladder(stop, now),
            (Phase::Running { .. }, Event::KillNow(stop)) => Self::kill_now(stop, now, t),
            (Phase::Running { .. }, Event::Unwritable) => Self::terminate(
                Stop {
                    cause: Cause::Stalled,
                    why: Some("failed: the worker stopped reading its control channel".into()),
                },
                now,
                t,
            ),
            (Phase::Running { .. }, Event::ChannelClosed { broken: true }) => {
                Self::kill_now(Stop::new(Cause::Crashed), now, t)
            }
            // A clean EOF without a result: it is on its way out. The exit
            // says how; if it lingers, the ladder (minus the frame) ends it.
            (Phase::Running { .. }, Event::ChannelClosed { broken: false }) => (
                Phase::Stopping {
                    stop: Stop::new(Cause::Crashed),
                    rung: Rung::Asked,
                    due: now + t.cancel_grace,
                },
                vec![],
            ),
            (
                Phase::Running {
                    waiting,
                    deadline,
                    taken,
                },
                Event::Tick,
            ) => self.running_tick(waiting, deadline, taken, now),

            // A result came: later stops change nothing, but it must exit.
            (Phase::Reported { verdict, due }, Event::Tick) if now >= due => (
                Phase::Reported {
                    verdict,
                    due: now + t.group_poll,
                },
                vec![Action::Note("exit_grace"), Action::Kill],
            ),
            (Phase::Reported { verdict, .. }, Event::KillNow(_) | Event::ChannelClosed { broken: true }) => (
                Phase::Reported {
                    verdict,
                    due: now + t.group_poll,
                },
                vec![Action::Kill],
            ),

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
            (Phase::Stopping { stop, rung, .. }, Event::KillNow(_) | Event::ChannelClosed { broken: true })
                if rung != Rung::Killed =>
            {
                Self::kill_now(stop, now, t)
            }

            (
                phase @ (Phase::Idle | Phase::Running { .. } | Phase::Reported { .. } | Phase::Stopping { .. }),
                Event::Exited(exit),
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
                            exit,
                            due: now + t.drain,
                        },
                        vec![],
                    )
                } else {
                    self.empty(before, exit, now)
                }
            }

            // Frames read after the exit still count: a `done` that was
            // written before the worker died is its verdict.
            (
                Phase::Draining {
                    before: Before::Running,
                    exit,
                    due,
                },
                Event::Reported(verdict),
            ) => (
                Phase::Draining {
                    before: Before::Reported(verdict),
                    exit,
                    due,
                },
                vec![],
            ),
            (Phase::Draining { before, exit, .. }, Event::ChannelClosed { .. }) => self.empty(before, exit, now),
            (Phase::Draining { before, exit, due }, Event::Tick) if now >= due => self.empty(before, exit, now),

            (Phase::Emptying { ending, exit, .. }, Event::Swept { left: true, .. }) => (
                Phase::Emptying {
                    ending,
                    exit,
                    due: now + t.group_poll,
                },
                vec![Action::Kill],
            ),
            (Phase::Emptying { ending, exit, .. }, Event::Swept { left: false, counters }) => {
                let ending = ending.map(|e| verdict::counted(e, counters));
                (Phase::Finished, vec![Action::Finish { ending, exit }])
            }
            (Phase::Emptying { ending, exit, due }, Event::Tick) if now >= due => {
                let sweep = self.sweep(exit);
                (
                    Phase::Emptying {
                        ending,
                        exit,
                        due: now + t.group_poll,
                    },
                    vec![sweep],
                )
            }

            // Expected and harmless: a tick that is not due, frames and
            // counters that come after the task's course is set.
            (phase, Event::Tick | Event::Asked | Event::Resumed | Event::Took | Event::Counters(_)) => (phase, vec![]),
            (phase, event) => {
                log::debug!(
                    "procman.lifecycle pid={} task={} ignoring {event:?} in {phase:?}",
                    self.pid,
                    self.task().map_or("-", |(id, _)| id)
                );
                (phase, vec![])
            }
        };
        self.phase = next;
        actions
    }

    fn running_tick(
        &mut self,
        waiting: Option<Instant>,
        deadline: Option<Instant>,
        taken: bool,
        now: Instant,
    ) -> (Phase, Vec<Action>) {
        let t = self.timing;
        if deadline.is_some_and(|d| now >= d) {
            return self.ladder(Stop::new(Cause::Deadline), now);
        }
        if waiting.is_some_and(|w| now >= w + t.input_idle) {
            return self.ladder(Stop::new(Cause::Idle), now);
        }
        let running = running(waiting, deadline, taken);
        if !taken {
            // A worker that has not read its task is not stalled: it is a
            // helper that failed (stopped, lost), and the task moves. The
            // driver answers at once: Took or Untouched.
            let take_due = self.task.as_ref().is_some_and(|(_, at)| now >= *at + t.take_check());
            let actions = if take_due { vec![Action::CheckTaken] } else { vec![] };
            return (running, actions);
        }
        match self.ping_sent {
            Some(at) if now >= at + t.stall_after => self.ladder(Stop::new(Cause::Stalled), now),
            None if now >= self.heard + t.ping_every => {
                self.ping_sent = Some(now);
                (running, vec![Action::SendPing])
            }
            _ => (running, vec![]),
        }
    }

    /// The worker never read its task: the task goes back (it had not
    /// started) and the worker, agentd's own problem, is killed.
    fn give_back(&mut self, now: Instant) -> (Phase, Vec<Action>) {
        let (id, _) = self.task.take().expect("Running has a task");
        let (phase, mut actions) = Self::kill_now(Stop::new(Cause::Shutdown), now, self.timing);
        actions.insert(0, Action::Requeue(id));
        (phase, actions)
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
    /// a sweep finds nothing of it.
    fn empty(&self, before: Before, exit: ExitStatus, now: Instant) -> (Phase, Vec<Action>) {
        // A task given back is no longer this worker's to end.
        let ending = self.task.as_ref().and_then(|_| before.ending(exit));
        let phase = Phase::Emptying {
            ending,
            exit,
            due: now + self.timing.group_poll,
        };
        (phase, vec![self.sweep(exit)])
    }

    /// Without a cgroup, a worker is the subreaper of what its program
    /// started; SIGKILLed, it could not take that with it, and it comes to
    /// agentd. With one, the cgroup holds it.
    fn sweep(&self, exit: ExitStatus) -> Action {
        Action::Sweep {
            adopted: !self.contained && exit == ExitStatus::Signal(libc::SIGKILL),
        }
    }
}

#[cfg(test)]
mod tests;
