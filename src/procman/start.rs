//! A task's way to a worker as a pure machine, keyed by task id: one
//! [`Way`] per task on its way, one transition, [`StartPath::step`]`(event,
//! now) → actions`. The pool (asking the fork server, keeping idle workers)
//! reports what happened; the driver carries the actions out. **Every
//! ending of a task that never reached a worker is decided here** — it
//! could not be started, its helpers were lost too often, it was cancelled
//! while queued or asked, the daemon stops — and so is when the next ask
//! may be made (the back-off). One place answers "where is task X and who
//! may end it": here while it is on its way, the worker's lifecycle once
//! it is [`Way::Bound`].
//!
//! ```text
//!              Submitted                    asked (spawn in the pipe)
//!   (new) ───────────────▶ Queued{attempts} ─────────────────────────▶ Asked
//!                            ▲  │  │ idle worker                        │ │ named by the fork server,
//!        not born, taken back│  │  └────────────────────▶ Bound{pid} ◀──┘ │ or it said hello
//!   ─────────────────────────┘  │                          │  ▲           │ lost, the frame read
//!   given back (< 3 in a row) ◀─┼──────────────────────────┘  └─ hello ─ Adopting
//!                               │ cancel, drain, no worker N times,       │ no word, or gone
//!                               ▼ 3 workers never read it                  ▼
//!                             Ended ◀──────────────────────────────────── Ended
//! ```
//! A task is Queued with the workers it was given that never read it;
//! given back, it starts again first. Asked or Adopting, a stop (cancel,
//! the daemon stopping) waits for the worker to be named, or ends the task
//! if no worker can have read it. A lost helper (a fork server that died,
//! stopped or answered late) costs no task: what no worker read goes back,
//! and a worker that read its task is adopted when it says who it is.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::lifecycle::{Ending, Stop};
use crate::control::Cause;
use crate::ids::{IdHash, TaskId};
use crate::limits;
use crate::wire::TaskState;

/// Where a task is on its way to a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Way {
    /// SUBMITTED (or given back), waiting for room under tasks.max_running
    /// and a worker; `attempts`: workers it was given that never read it.
    Queued { attempts: u32 },
    /// Its `spawn` frame is in the pipe of a worker asked of the fork
    /// server and not yet named; `attempt`: which worker in a row (1: the
    /// first); `stop`: to be stopped as soon as it is named.
    Asked { attempt: u32, stop: Option<Stop> },
    /// The fork server was lost before it named that worker, and the worker
    /// read the task: it is adopted once it says who it is.
    Adopting { attempt: u32, stop: Option<Stop> },
    /// A worker has it; the worker's lifecycle decides from here.
    Bound { pid: i32, attempt: u32 },
}

/// What happened on a task's way, or to the start path as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartEvent {
    /// A task was created in SUBMITTED.
    Submitted(TaskId),
    /// Stop it wherever it is.
    Cancel(TaskId),
    /// The daemon stops: nothing more starts; what waits ends.
    Drain,
    /// The second SIGTERM: a worker named from now on is killed at once.
    KillAll,
    /// It went to idle worker `pid`, or the worker asked for it was named
    /// (by the fork server, or by itself: its hello).
    Bound { task: TaskId, pid: i32 },
    /// Its `spawn` frame went into the pipe of a worker asked for.
    Asked(TaskId),
    /// The worker asked for it was not had (the fork failed, the fork
    /// server was lost first, it could not be contained); `taken_back`:
    /// its frame came back out of the pipe unread, so no worker can have it.
    NotBorn { task: TaskId, taken_back: bool },
    /// Adopting, the worker never said who it is: it ended without a word
    /// (`gone`) or stayed silent past its bound (`why`).
    Unnamed { task: TaskId, gone: bool, why: String },
    /// The worker it was given never read it and gave it back.
    GivenBack(TaskId),
    /// Its worker is gone and so is the task (the lifecycle's verdict).
    Released(TaskId),
    /// A queued task the table no longer waits for (it ended meanwhile).
    Dropped(TaskId),
    /// The fork server made a worker: failures in a row are over.
    Forked,
    /// The fork server is behind (its request queue is full): ask later.
    Busy,
    /// No worker could be had (the fork or the fork server's start failed).
    NoWorker(String),
    /// The fork server was lost (it died, stopped or answered too late).
    HelperLost(String),
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartAction {
    /// The task ends, never having reached a worker (or having reached one
    /// that was lost without a word).
    End { task: TaskId, ending: Ending },
    /// The ladder on the worker that has it.
    StopWorker { pid: i32, stop: Stop },
    /// SIGKILL to the worker that has it, now.
    KillWorker { pid: i32 },
}

/// The clocks and counts of the start path.
#[derive(Debug, Clone, Copy)]
pub struct StartLimits {
    /// After a failed ask, no ask before this.
    pub retry: Duration,
    /// Workers in a row that never read a task before it fails.
    pub take_attempts: u32,
    /// Asks in a row that failed before the first task in line fails.
    pub fork_attempts: u32,
    /// Fork servers lost in a row before a loss counts as a failed ask.
    pub losses_max: u32,
}

impl Default for StartLimits {
    fn default() -> StartLimits {
        StartLimits {
            retry: Duration::from_millis(limits::FORK_RETRY_MS),
            take_attempts: limits::WORKER_TAKE_ATTEMPTS,
            fork_attempts: limits::FORK_ATTEMPTS,
            losses_max: limits::FORK_SERVER_LOSSES_MAX,
        }
    }
}

/// Whether the start path takes new tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admit {
    Open,
    /// The daemon stops (`killing`: the second SIGTERM came).
    Draining {
        killing: bool,
    },
}

pub struct StartPath {
    ways: HashMap<TaskId, Way, IdHash>,
    /// Tasks given back by workers that never read them: they start first.
    again: VecDeque<TaskId>,
    /// Tasks submitted, in order.
    fresh: VecDeque<TaskId>,
    /// Asks in a row that failed.
    fork_failures: u32,
    /// Fork servers lost in a row, none of which made a worker.
    helper_losses: u32,
    /// No ask before then.
    retry_at: Option<Instant>,
    admit: Admit,
    limits: StartLimits,
}

impl StartPath {
    pub fn new(limits: StartLimits) -> StartPath {
        StartPath {
            ways: HashMap::default(),
            again: VecDeque::new(),
            fresh: VecDeque::new(),
            fork_failures: 0,
            helper_losses: 0,
            retry_at: None,
            admit: Admit::Open,
            limits,
        }
    }

    /// Where task `id` is, if it is on its way or bound.
    pub fn way(&self, id: &str) -> Option<&Way> {
        self.ways.get(id)
    }

    /// The worker that has task `id`, if one has.
    pub fn worker_of(&self, id: &str) -> Option<i32> {
        match self.ways.get(id) {
            Some(Way::Bound { pid, .. }) => Some(*pid),
            _ => None,
        }
    }

    /// The task first in line, and which worker in a row it would go to.
    pub fn front(&self) -> Option<(&TaskId, u32)> {
        let id = self.again.front().or(self.fresh.front())?;
        match self.ways.get(id) {
            Some(Way::Queued { attempts }) => Some((id, attempts + 1)),
            _ => None,
        }
    }

    /// Tasks waiting for a worker.
    pub fn queued(&self) -> usize {
        self.again.len() + self.fresh.len()
    }

    /// Tasks asked for, being adopted, or with a worker (stopping ones
    /// too: their processes still run): what counts against the cap.
    pub fn started(&self) -> usize {
        self.ways.len() - self.queued()
    }

    /// Whether new tasks start (false once the daemon stops).
    pub fn is_open(&self) -> bool {
        self.admit == Admit::Open
    }

    /// Whether the fork server may be asked now (the back-off has passed).
    pub fn may_ask(&self, now: Instant) -> bool {
        self.retry_at.is_none_or(|t| now >= t)
    }

    /// When the next ask may be made, if one is held back.
    pub fn next_due(&self) -> Option<Instant> {
        self.retry_at
    }

    /// A back-off that has passed and that this turn did not need is
    /// dropped, so the loop does not wake for it again.
    pub fn forget_passed_retry(&mut self, now: Instant) {
        if self.retry_at.is_some_and(|t| t <= now) {
            self.retry_at = None;
        }
    }

    /// The transition.
    pub fn step(&mut self, event: StartEvent, now: Instant) -> Vec<StartAction> {
        use StartEvent as E;
        let mut out = Vec::new();
        match event {
            E::Submitted(id) => {
                if self.admit != Admit::Open {
                    out.push(end_unstarted(id, Cause::Shutdown));
                } else if !self.ways.contains_key(&id) {
                    self.ways.insert(id.clone(), Way::Queued { attempts: 0 });
                    self.fresh.push_back(id);
                }
            }
            E::Cancel(id) => self.stop(id, Stop::new(Cause::Canceled), &mut out),
            E::Drain => {
                if self.admit == Admit::Open {
                    self.admit = Admit::Draining { killing: false };
                }
                for id in self.again.drain(..).chain(self.fresh.drain(..)).collect::<Vec<_>>() {
                    self.ways.remove(&id);
                    out.push(end_unstarted(id, Cause::Shutdown));
                }
                for way in self.ways.values_mut() {
                    if let Way::Asked { stop, .. } | Way::Adopting { stop, .. } = way {
                        stop.get_or_insert(Stop::new(Cause::Shutdown));
                    }
                }
            }
            E::KillAll => {
                out = self.step(E::Drain, now);
                self.admit = Admit::Draining { killing: true };
                for way in self.ways.values() {
                    if let Way::Bound { pid, .. } = way {
                        out.push(StartAction::KillWorker { pid: *pid });
                    }
                }
            }
            E::Bound { task, pid } => match self.ways.get(&task).cloned() {
                Some(Way::Queued { attempts }) => {
                    self.unqueue(&task);
                    self.ways.insert(
                        task,
                        Way::Bound {
                            pid,
                            attempt: attempts + 1,
                        },
                    );
                }
                Some(Way::Asked { attempt, stop } | Way::Adopting { attempt, stop }) => {
                    self.ways.insert(task, Way::Bound { pid, attempt });
                    match (self.admit, stop) {
                        (Admit::Draining { killing: true }, _) => out.push(StartAction::KillWorker { pid }),
                        (_, Some(stop)) => out.push(StartAction::StopWorker { pid, stop }),
                        (Admit::Draining { killing: false }, None) => out.push(StartAction::StopWorker {
                            pid,
                            stop: Stop::new(Cause::Shutdown),
                        }),
                        (Admit::Open, None) => {}
                    }
                }
                Some(Way::Bound { .. }) | None => {
                    log::debug!("procman.start task={task} pid={pid} bound, but not waiting; ignored");
                }
            },
            E::Asked(task) => {
                if let Some(Way::Queued { attempts }) = self.ways.get(&task).cloned() {
                    self.unqueue(&task);
                    let attempt = attempts + 1;
                    self.ways.insert(task, Way::Asked { attempt, stop: None });
                }
            }
            E::NotBorn { task, taken_back } => match self.ways.get(&task).cloned() {
                Some(Way::Asked { attempt, stop }) => match (taken_back, stop) {
                    (true, Some(stop)) => {
                        self.ways.remove(&task);
                        out.push(end_unstarted(task, stop.cause));
                    }
                    // No worker can have it: it starts again first, and a
                    // worker not had is not a worker that never read it.
                    (true, None) => {
                        let attempts = attempt - 1;
                        self.ways.insert(task.clone(), Way::Queued { attempts });
                        if attempts > 0 {
                            self.again.push_front(task);
                        } else {
                            self.fresh.push_front(task);
                        }
                    }
                    (false, stop) => {
                        self.ways.insert(task, Way::Adopting { attempt, stop });
                    }
                },
                other => log::debug!("procman.start task={task} not born, but {other:?}; ignored"),
            },
            E::Unnamed { task, gone, why } => {
                if let Some(Way::Adopting { stop, .. }) = self.ways.get(&task).cloned() {
                    self.ways.remove(&task);
                    let ending = match stop {
                        Some(stop) => unstarted(stop.cause),
                        None => Ending {
                            state: TaskState::Failed,
                            cause: if gone { Cause::Crashed } else { Cause::Stalled },
                            text: Some(why),
                        },
                    };
                    out.push(StartAction::End { task, ending });
                }
            }
            E::GivenBack(task) => {
                if let Some(Way::Bound { attempt, .. }) = self.ways.get(&task).cloned() {
                    if attempt >= self.limits.take_attempts {
                        self.ways.remove(&task);
                        log::error!("task.spawn_failed task={task} workers={attempt} none read it");
                        let text = format!("agentd could not start a worker: {attempt} in a row never read the task");
                        out.push(StartAction::End {
                            task,
                            ending: could_not_start(text),
                        });
                    } else if self.admit != Admit::Open {
                        self.ways.remove(&task);
                        out.push(end_unstarted(task, Cause::Shutdown));
                    } else {
                        self.ways.insert(task.clone(), Way::Queued { attempts: attempt });
                        self.again.push_back(task);
                    }
                }
            }
            E::Released(task) => {
                if let Some(Way::Bound { .. }) = self.ways.get(&task) {
                    self.ways.remove(&task);
                }
            }
            E::Dropped(task) => {
                if let Some(Way::Queued { .. }) = self.ways.get(&task) {
                    self.unqueue(&task);
                    self.ways.remove(&task);
                }
            }
            E::Forked => {
                self.fork_failures = 0;
                self.helper_losses = 0;
            }
            E::Busy => self.hold_back(now),
            E::HelperLost(why) => {
                self.helper_losses += 1;
                if self.helper_losses <= self.limits.losses_max {
                    // agentd's own helper failed, not the fork: the next
                    // one is asked soon.
                    self.hold_back(now);
                } else {
                    self.no_worker(
                        format!("{} fork servers in a row were lost: {why}", self.helper_losses),
                        now,
                        &mut out,
                    );
                }
            }
            E::NoWorker(why) => self.no_worker(why, now, &mut out),
        }
        out
    }

    /// Stops a task wherever it is.
    fn stop(&mut self, id: TaskId, stop: Stop, out: &mut Vec<StartAction>) {
        match self.ways.get_mut(&id) {
            Some(Way::Queued { .. }) => {
                self.unqueue(&id);
                self.ways.remove(&id);
                out.push(end_unstarted(id, stop.cause));
            }
            Some(Way::Asked { stop: s, .. } | Way::Adopting { stop: s, .. }) => {
                s.get_or_insert(stop);
            }
            Some(Way::Bound { pid, .. }) => out.push(StartAction::StopWorker { pid: *pid, stop }),
            // Not on its way: its Submitted is still in flight (the task
            // table ends it only if it still waits), or it ended.
            None => out.push(end_unstarted(id, stop.cause)),
        }
    }

    /// Asks wait a retry interval from now, unless they are held back
    /// already. A hold whose time has passed is no hold: kept, it would
    /// let the very next turn ask again at once.
    fn hold_back(&mut self, now: Instant) {
        if self.retry_at.is_none_or(|t| t <= now) {
            self.retry_at = Some(now + self.limits.retry);
        }
    }

    /// A worker could not be had: after `fork_attempts` in a row, the task
    /// first in line fails with the reason (nothing waits for ever on a
    /// fork that keeps failing); until then it waits for the next try.
    fn no_worker(&mut self, why: String, now: Instant, out: &mut Vec<StartAction>) {
        self.fork_failures += 1;
        log::warn!("procman.fork failed ({} in a row) error={why}", self.fork_failures);
        self.retry_at = Some(now + self.limits.retry);
        if self.fork_failures < self.limits.fork_attempts {
            return;
        }
        self.fork_failures = 0;
        let Some(id) = self.again.pop_front().or_else(|| self.fresh.pop_front()) else {
            return;
        };
        self.ways.remove(&id);
        log::error!("task.spawn_failed task={id} error={why}");
        out.push(StartAction::End {
            task: id,
            ending: could_not_start(format!("agentd could not start a worker: {why}")),
        });
    }

    fn unqueue(&mut self, id: &str) {
        for q in [&mut self.again, &mut self.fresh] {
            if q.front().is_some_and(|f| **f == *id) {
                q.pop_front();
                return;
            }
            if let Some(at) = q.iter().position(|f| **f == *id) {
                q.remove(at);
                return;
            }
        }
    }
}

/// A task stopped before any worker had it ends CANCELED.
fn unstarted(cause: Cause) -> Ending {
    Ending {
        state: TaskState::Canceled,
        cause,
        text: None,
    }
}

fn end_unstarted(task: TaskId, cause: Cause) -> StartAction {
    StartAction::End {
        task,
        ending: unstarted(cause),
    }
}

fn could_not_start(text: String) -> Ending {
    Ending {
        state: TaskState::Failed,
        cause: Cause::Crashed,
        text: Some(text),
    }
}

#[cfg(test)]
mod tests;
