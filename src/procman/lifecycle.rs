//! A worker's lifecycle as a type: one [`WorkerPhase`] and one pure
//! transition, [`WorkerLife::step`]`(event, now) → actions`. procman's
//! driver carries the actions out (frames, signals, sweeps, the task's
//! verdict) and reports what the kernel and the worker said back as
//! events; nothing here does I/O, so the table tests walk every path
//! without a process. **Every verdict of a task that reached a worker is
//! made here**: a reported result, a stop's cause, a crash, a frame that
//! cannot be sent, and what the final sweep found in the task's cgroup
//! (forks refused at pids.max, the OOM killer). Which of the worker's
//! frames reach the task table, and when input goes to the worker, is
//! decided here too (the `Relay` and `SendInput` actions). The way of a
//! task *to* a worker is the start path's machine (`start.rs`).
//!
//! ```text
//!          assign            done                 exit
//!   Idle ─────────▶ Running ─────▶ Reported ───────────┐
//!    │               │  ▲ input-required / input       │
//!    │ retire        │  └──────┘ (Running{waiting})    ▼
//!    │               │ stop(cause)              Draining ──EOF or drain──▶ Emptying ──swept, nothing left──▶ Finished
//!    ▼               ▼                             ▲                         │ sweep every group_poll
//!   Stopping{no task}  Stopping: cancel frame ─cancel_grace─▶ SIGTERM+SIGCONT│ (SIGKILL what is left)
//!                           ─term_grace─▶ SIGKILL (again every group_poll) ──┘ exit
//! ```
//! Liveness is judged on what is read: any frame is life. After `ping_every`
//! of silence one ping goes out; `stall_after` more of silence stops the task
//! as `stalled`. A worker that reported its result has `exit_grace` to exit.
//! A worker that has not read its task's `spawn` frame within `take_within`
//! (a stopped or lost helper of agentd's own), or that is lost before it
//! read it, gives the task back to be started on a fresh worker: the task
//! had not started, so it is not failed. The task's verdict is decided when
//! the process is gone, from what came before: a result reported before any
//! stop wins; a stop decides otherwise.

use std::time::{Duration, Instant};

use crate::control::{Cause, FromWorker};
use crate::ids::TaskId;
use crate::limits;
use crate::sys::ExitStatus;
use crate::wire::Message;

mod ladder;
mod names;
mod running;
mod verdict;
pub use ladder::Rung;
use ladder::{kill_now, ladder, terminate};
use names::{event_name, phase_name, task_of};
use running::{relay_any, relay_output, running};
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
    /// How long a worker may leave its task's `spawn` frame unread. Not
    /// sooner where pings come sooner: a worker only slow to be scheduled
    /// would be killed for it, and its task given back three times fails
    /// (a 1 ms ping interval did that). Until it has read its task a
    /// worker is not judged stalled, so the two clocks need not agree.
    pub take_within: Duration,
}

impl Timing {
    /// The clocks tasks.* configures, and agentd's own.
    pub fn of(cfg: &crate::config::Config) -> Timing {
        let t = &cfg.tasks;
        let ms = Duration::from_millis;
        Timing {
            cancel_grace: ms(t.cancel_grace_ms),
            term_grace: ms(t.term_grace_ms),
            ping_every: ms(t.ping_interval_ms),
            stall_after: ms(t.stall_timeout_ms),
            input_idle: ms(t.input_idle_ms),
            exit_grace: ms(limits::WORKER_EXIT_GRACE_MS),
            drain: ms(limits::WORKER_CHANNEL_DRAIN_MS),
            group_poll: ms(limits::GROUP_POLL_MS),
            take_within: ms(limits::WORKER_TAKE_MS),
        }
    }
}

/// The task a worker works for, and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRef {
    pub id: TaskId,
    pub since: Instant,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerPhase {
    /// Spawned ahead of demand; no task yet.
    Idle,
    /// Working on its task: `waiting` since when it waits for input, the
    /// task's wall-clock `deadline`, and whether it has read its `spawn`.
    Running {
        task: TaskRef,
        waiting: Option<Instant>,
        deadline: Option<Instant>,
        taken: bool,
    },
    /// It reported its result; its exit is due by `due`.
    Reported {
        task: TaskRef,
        verdict: Ending,
        due: Instant,
    },
    /// The kill ladder runs, for the task's `stop` (None: a worker without
    /// a task — retired, or one whose task went back); the next rung at `due`.
    Stopping {
        task: Option<(TaskRef, Stop)>,
        rung: Rung,
        due: Instant,
    },
    /// Reaped; its channel may still hold frames until EOF or `due`.
    Draining {
        task: Option<TaskRef>,
        before: Before,
        exit: ExitStatus,
        due: Instant,
    },
    /// Channel done; whatever is left of the task is SIGKILLed until a
    /// sweep finds nothing. `ended`: the task and its verdict, if it had one.
    Emptying {
        ended: Option<(TaskRef, Ending)>,
        exit: ExitStatus,
        due: Instant,
    },
    /// Nothing of it is left; the task has its verdict.
    Finished,
}

/// What happened to a worker: from the rest of agentd, its frames, the
/// clock, and what the driver read from the kernel.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerEvent {
    /// An idle worker got a task (its `spawn` frame is queued), with the
    /// task's wall-clock deadline.
    Assigned { task: TaskId, deadline: Option<Instant> },
    /// A frame from it (any frame is life).
    Said(FromWorker),
    /// A follow-up message for its task (the task table took it).
    Input(Box<Message>),
    /// procman wants its task stopped (an idle worker is killed).
    Stop(Stop),
    /// Straight to SIGKILL (a second SIGTERM to agentd).
    KillNow(Stop),
    /// agentd no longer needs this worker (the pool shrank, it could not
    /// be contained, the daemon stops): it is killed without a verdict.
    Retire,
    /// Its control channel reached EOF (`broken`: a bad frame or I/O error).
    ChannelClosed { broken: bool },
    /// Frames to it could not be queued: it stopped reading.
    Unwritable,
    /// A frame to it cannot be sent at all (over the frame limit): why.
    Unsendable(String),
    /// wait4 reported it; `channel_open`: its control channel has not
    /// reached EOF yet (the channel's own flag, read by the driver).
    Exited { exit: ExitStatus, channel_open: bool },
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
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerAction {
    SendPing,
    SendCancel,
    SendInput(Box<Message>),
    /// A frame of the worker's that counts for its task: to the task table.
    Relay(FromWorker),
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
    /// if not; answer `Took` or `Untouched` at once.
    CheckTaken,
    /// Step this event again, after the answer to the actions before it
    /// (a loss heard before the worker was known to have read its task).
    Again(Box<WorkerEvent>),
    /// The task goes back to the start path, to start on a fresh worker.
    GiveBack(TaskId),
    /// Log the rung or stop reached (for the operator).
    Note(&'static str),
    /// The worker is gone and so is everything of its task: the task ends
    /// (`ended`: the task and its verdict; None: it had none).
    Finish {
        ended: Option<(TaskRef, Ending)>,
        exit: ExitStatus,
    },
}

use WorkerAction as Do;
use WorkerEvent as Ev;
use WorkerPhase as Ph;

/// One worker's lifecycle: its phase (which holds its task) and the
/// clocks every phase shares.
#[derive(Debug, Clone)]
pub struct WorkerLife {
    pid: i32,
    phase: WorkerPhase,
    heard: Instant,
    ping_sent: Option<Instant>,
    /// In a cgroup of its own, which holds whatever escapes its group.
    contained: bool,
    timing: Timing,
}

impl WorkerLife {
    pub fn idle(pid: i32, contained: bool, now: Instant, timing: Timing) -> WorkerLife {
        WorkerLife {
            pid,
            phase: Ph::Idle,
            heard: now,
            ping_sent: None,
            contained,
            timing,
        }
    }

    #[cfg(test)]
    pub fn phase(&self) -> &WorkerPhase {
        &self.phase
    }

    /// The task it works for, if any.
    pub fn task(&self) -> Option<&TaskRef> {
        match &self.phase {
            Ph::Running { task, .. } | Ph::Reported { task, .. } => Some(task),
            Ph::Stopping { task, .. } => task.as_ref().map(|(t, _)| t),
            Ph::Draining { task, .. } => task.as_ref(),
            Ph::Emptying { ended, .. } => ended.as_ref().map(|(t, _)| t),
            Ph::Idle | Ph::Finished => None,
        }
    }

    /// The task's id, or `-` (for log lines).
    pub fn task_id(&self) -> &str {
        self.task().map_or("-", |t| &*t.id)
    }

    pub fn is_idle(&self) -> bool {
        self.phase == Ph::Idle
    }

    #[cfg(test)]
    pub fn is_finished(&self) -> bool {
        self.phase == Ph::Finished
    }

    /// Whether it still works for its task (not idle, not stopping, not gone).
    pub fn is_running(&self) -> bool {
        matches!(self.phase, Ph::Running { .. })
    }

    /// When `step(Tick)` next has something to do.
    pub fn next_due(&self) -> Option<Instant> {
        let t = &self.timing;
        match &self.phase {
            Ph::Idle | Ph::Finished => None,
            Ph::Running {
                task,
                waiting,
                deadline,
                taken,
            } => {
                // Until it has read its task, only whether it will is
                // asked; liveness (ping, stall) is judged once it has.
                let judged = if *taken {
                    match self.ping_sent {
                        Some(at) => at + t.stall_after,
                        None => self.heard + t.ping_every,
                    }
                } else {
                    task.since + t.take_within
                };
                [Some(judged), *deadline, waiting.map(|w| w + t.input_idle)]
                    .into_iter()
                    .flatten()
                    .min()
            }
            Ph::Reported { due, .. }
            | Ph::Stopping { due, .. }
            | Ph::Draining { due, .. }
            | Ph::Emptying { due, .. } => Some(*due),
        }
    }

    /// The transition.
    pub fn step(&mut self, event: WorkerEvent, now: Instant) -> Vec<WorkerAction> {
        let t = self.timing;
        if let Ev::Said(_) = &event {
            // Any frame is life, and a worker that speaks read its spawn.
            self.heard = now;
            self.ping_sent = None;
            if let Ph::Running { taken, .. } = &mut self.phase {
                *taken = true;
            }
        }
        let phase = std::mem::replace(&mut self.phase, Ph::Finished);
        let (next, actions) = match (phase, event) {
            (Ph::Idle, Ev::Assigned { task, deadline }) => {
                self.heard = now;
                let task = TaskRef { id: task, since: now };
                (running(task, None, deadline, false), vec![])
            }
            // An idle worker has no task to ask: it is killed (retired,
            // refused, gone quiet) and ends as a worker without a task.
            (Ph::Idle, Ev::Stop(_) | Ev::KillNow(_) | Ev::Retire | Ev::Unwritable | Ev::ChannelClosed { .. }) => {
                kill_now(None, now, t)
            }
            // A frame it says while idle is only life (its hello, a pong).
            (phase @ Ph::Idle, Ev::Said(_)) => (phase, vec![]),

            (Ph::Running { task, taken: false, .. }, Ev::Untouched) => self.give_back(task, now),
            // Lost before it was known to have read its task: ask first.
            (phase @ Ph::Running { taken: false, .. }, event @ (Ev::Exited { .. } | Ev::ChannelClosed { .. })) => {
                (phase, vec![Do::CheckTaken, Do::Again(Box::new(event))])
            }
            (
                Ph::Running {
                    task,
                    waiting,
                    deadline,
                    ..
                },
                Ev::Took,
            ) => (running(task, waiting, deadline, true), vec![]),
            (
                Ph::Running {
                    task,
                    waiting,
                    deadline,
                    taken,
                },
                Ev::Said(frame),
            ) => self.running_said(task, waiting, deadline, taken, frame, now),
            (
                Ph::Running {
                    task, deadline, taken, ..
                },
                Ev::Input(message),
            ) => (running(task, None, deadline, taken), vec![Do::SendInput(message)]),
            (Ph::Running { task, .. }, Ev::Counters(c)) if c.pids_refused > 0 => {
                let stop = Stop {
                    cause: Cause::Exhausted,
                    why: Some(verdict::fork_bomb_text(&c)),
                };
                ladder(task, stop, now, t)
            }
            (phase @ Ph::Running { .. }, Ev::Counters(_)) => (phase, vec![]),
            (Ph::Running { task, .. }, Ev::Stop(stop)) => ladder(task, stop, now, t),
            (Ph::Running { task, .. }, Ev::KillNow(stop)) => kill_now(Some((task, stop)), now, t),
            (Ph::Running { task, .. }, Ev::Retire) => kill_now(Some((task, Stop::new(Cause::Shutdown))), now, t),
            (Ph::Running { task, .. }, Ev::Unwritable) => terminate(
                task,
                Stop {
                    cause: Cause::Stalled,
                    why: Some("failed: the worker stopped reading its control channel".into()),
                },
                now,
                t,
            ),
            (Ph::Running { task, .. }, Ev::Unsendable(why)) => ladder(
                task,
                Stop {
                    cause: Cause::Failed,
                    why: Some(format!("failed: {why}")),
                },
                now,
                t,
            ),
            (Ph::Running { task, .. }, Ev::ChannelClosed { broken: true }) => {
                kill_now(Some((task, Stop::new(Cause::Crashed))), now, t)
            }
            // A clean EOF without a result: it is on its way out. The exit
            // says how; if it lingers, the ladder (minus the frame) ends it.
            (Ph::Running { task, .. }, Ev::ChannelClosed { broken: false }) => (
                Ph::Stopping {
                    task: Some((task, Stop::new(Cause::Crashed))),
                    rung: Rung::Asked,
                    due: now + t.cancel_grace,
                },
                vec![],
            ),
            (
                Ph::Running {
                    task,
                    waiting,
                    deadline,
                    taken,
                },
                Ev::Tick,
            ) => self.running_tick(task, waiting, deadline, taken, now),

            // A result came: later stops change nothing, but it must exit.
            (Ph::Reported { task, verdict, due }, Ev::Tick) if now >= due => (
                Ph::Reported {
                    task,
                    verdict,
                    due: now + t.group_poll,
                },
                vec![Do::Note("exit_grace"), Do::Kill],
            ),
            (Ph::Reported { task, verdict, .. }, Ev::KillNow(_) | Ev::ChannelClosed { broken: true }) => (
                Ph::Reported {
                    task,
                    verdict,
                    due: now + t.group_poll,
                },
                vec![Do::Kill],
            ),
            // What it wrote before its `done` is still its task's output.
            (phase @ Ph::Reported { .. }, Ev::Said(frame)) => {
                let relay = relay_output(frame);
                (phase, relay)
            }

            (Ph::Stopping { task, rung, due }, Ev::Tick) if now >= due => {
                let (rung, actions) = match rung {
                    Rung::Asked => (Rung::Terminated, vec![Do::Note("SIGTERM"), Do::Terminate]),
                    Rung::Terminated => (Rung::Killed, vec![Do::Note("SIGKILL"), Do::Kill]),
                    Rung::Killed => (Rung::Killed, vec![Do::Kill]),
                };
                let wait = match rung {
                    Rung::Terminated => t.term_grace,
                    _ => t.group_poll,
                };
                (
                    Ph::Stopping {
                        task,
                        rung,
                        due: now + wait,
                    },
                    actions,
                )
            }
            (Ph::Stopping { task, rung, .. }, Ev::KillNow(_) | Ev::ChannelClosed { broken: true } | Ev::Unwritable)
                if rung != Rung::Killed =>
            {
                kill_now(task, now, t)
            }
            // Output it wrote while being stopped is still its task's; a
            // status no longer is (the stop decides its state).
            (phase @ Ph::Stopping { task: Some(_), .. }, Ev::Said(frame)) => {
                let relay = relay_output(frame);
                (phase, relay)
            }

            (
                phase @ (Ph::Idle | Ph::Running { .. } | Ph::Reported { .. } | Ph::Stopping { .. }),
                Ev::Exited { exit, channel_open },
            ) => {
                let (task, before) = match phase {
                    Ph::Idle => (None, Before::Idle),
                    Ph::Running { task, .. } => (Some(task), Before::Running),
                    Ph::Reported { task, verdict, .. } => (Some(task), Before::Reported(verdict)),
                    Ph::Stopping {
                        task: Some((task, stop)),
                        ..
                    } => (Some(task), Before::Stopping(stop)),
                    Ph::Stopping { task: None, .. } => (None, Before::Idle),
                    _ => unreachable!("matched above"),
                };
                if channel_open {
                    let due = now + t.drain;
                    (
                        Ph::Draining {
                            task,
                            before,
                            exit,
                            due,
                        },
                        vec![],
                    )
                } else {
                    self.empty(task, before, exit, now)
                }
            }

            // Frames read after the exit still count: a `done` that was
            // written before the worker died is its verdict, and what it
            // said of its task while it ran is relayed.
            (
                Ph::Draining {
                    task: Some(task),
                    before: Before::Running,
                    exit,
                    due,
                },
                Ev::Said(frame),
            ) => {
                let (before, actions) = match frame {
                    FromWorker::Done { outcome, cause, text } => {
                        (Before::Reported(Ending::reported(outcome, cause, text)), vec![])
                    }
                    other => (Before::Running, relay_any(other)),
                };
                (
                    Ph::Draining {
                        task: Some(task),
                        before,
                        exit,
                        due,
                    },
                    actions,
                )
            }
            (phase @ Ph::Draining { task: Some(_), .. }, Ev::Said(frame)) => {
                let relay = relay_output(frame);
                (phase, relay)
            }
            (Ph::Draining { task, before, exit, .. }, Ev::ChannelClosed { .. }) => self.empty(task, before, exit, now),
            (
                Ph::Draining {
                    task,
                    before,
                    exit,
                    due,
                },
                Ev::Tick,
            ) if now >= due => self.empty(task, before, exit, now),

            (Ph::Emptying { ended, exit, .. }, Ev::Swept { left: true, .. }) => (
                Ph::Emptying {
                    ended,
                    exit,
                    due: now + t.group_poll,
                },
                vec![Do::Kill],
            ),
            (Ph::Emptying { ended, exit, .. }, Ev::Swept { left: false, counters }) => {
                let ended = ended.map(|(task, e)| (task, verdict::counted(e, counters)));
                (Ph::Finished, vec![Do::Finish { ended, exit }])
            }
            (Ph::Emptying { ended, exit, due }, Ev::Tick) if now >= due => {
                let sweep = self.sweep(exit);
                (
                    Ph::Emptying {
                        ended,
                        exit,
                        due: now + t.group_poll,
                    },
                    vec![sweep],
                )
            }

            // Every other pair is ignored on purpose (the table test holds
            // the list): a tick that is not due, frames, counters and
            // orders that come after the task's course is set, input for a
            // worker that no longer runs, answers nobody asked for. Every
            // event is named, so a new one cannot fall in here unnoticed.
            (
                phase,
                event @ (Ev::Assigned { .. }
                | Ev::Said(_)
                | Ev::Input(_)
                | Ev::Stop(_)
                | Ev::KillNow(_)
                | Ev::Retire
                | Ev::ChannelClosed { .. }
                | Ev::Unwritable
                | Ev::Unsendable(_)
                | Ev::Exited { .. }
                | Ev::Took
                | Ev::Untouched
                | Ev::Counters(_)
                | Ev::Swept { .. }
                | Ev::Tick),
            ) => {
                if !matches!(event, Ev::Tick | Ev::Took | Ev::Counters(_)) {
                    log::debug!(
                        "procman.lifecycle pid={} task={} ignoring {} in {}",
                        self.pid,
                        task_of(&phase),
                        event_name(&event),
                        phase_name(&phase)
                    );
                }
                (phase, vec![])
            }
        };
        self.phase = next;
        actions
    }

    /// Whatever the program left behind goes now; the verdict waits until
    /// a sweep finds nothing of it.
    fn empty(
        &self,
        task: Option<TaskRef>,
        before: Before,
        exit: ExitStatus,
        now: Instant,
    ) -> (WorkerPhase, Vec<WorkerAction>) {
        let ended = task.and_then(|task| Some((task, before.ending(exit)?)));
        let phase = Ph::Emptying {
            ended,
            exit,
            due: now + self.timing.group_poll,
        };
        (phase, vec![self.sweep(exit)])
    }

    /// Without a cgroup, a worker is the subreaper of what its program
    /// started; SIGKILLed, it could not take that with it, and it comes to
    /// agentd. With one, the cgroup holds it.
    fn sweep(&self, exit: ExitStatus) -> WorkerAction {
        Do::Sweep {
            adopted: !self.contained && exit == ExitStatus::Signal(libc::SIGKILL),
        }
    }
}

#[cfg(test)]
mod tests;
