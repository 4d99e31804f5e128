//! A running worker: what its frames mean for its task (its status whether
//! it waits for input, its `done` its result, its output the table's), its
//! timers (deadline, input idle, ping and stall, the take check), and the
//! task it gives back when it never read it.

use std::time::Instant;

use super::ladder::{kill_now, ladder};
use super::{Ending, Stop, TaskRef, WorkerAction as Do, WorkerAction, WorkerLife, WorkerPhase as Ph, WorkerPhase};
use crate::control::{Cause, FromWorker, Progress};

impl WorkerLife {
    /// A frame while it runs: its status changes whether it waits for
    /// input, its `done` is its result, and what it says of its task goes
    /// to the table.
    pub(super) fn running_said(
        &mut self,
        task: TaskRef,
        waiting: Option<Instant>,
        deadline: Option<Instant>,
        taken: bool,
        frame: FromWorker,
        now: Instant,
    ) -> (WorkerPhase, Vec<WorkerAction>) {
        match frame {
            FromWorker::Done { outcome, cause, text } => (
                Ph::Reported {
                    task,
                    verdict: Ending::reported(outcome, cause, text),
                    due: now + self.timing.exit_grace,
                },
                vec![],
            ),
            FromWorker::Status { state, .. } => {
                let waiting = match state {
                    Progress::InputRequired | Progress::AuthRequired => Some(now),
                    Progress::Working => None,
                };
                (running(task, waiting, deadline, taken), vec![Do::Relay(frame)])
            }
            other => (running(task, waiting, deadline, taken), relay_any(other)),
        }
    }

    pub(super) fn running_tick(
        &mut self,
        task: TaskRef,
        waiting: Option<Instant>,
        deadline: Option<Instant>,
        taken: bool,
        now: Instant,
    ) -> (WorkerPhase, Vec<WorkerAction>) {
        let t = self.timing;
        if deadline.is_some_and(|d| now >= d) {
            return ladder(task, Stop::new(Cause::Deadline), now, t);
        }
        if waiting.is_some_and(|w| now >= w + t.input_idle) {
            return ladder(task, Stop::new(Cause::Idle), now, t);
        }
        if !taken {
            // A worker that has not read its task is not stalled: it is a
            // helper that failed (stopped, lost), and the task moves. The
            // driver answers at once: Took or Untouched.
            let take_due = now >= task.since + t.take_within;
            let actions = if take_due { vec![Do::CheckTaken] } else { vec![] };
            return (running(task, waiting, deadline, taken), actions);
        }
        match self.ping_sent {
            Some(at) if now >= at + t.stall_after => ladder(task, Stop::new(Cause::Stalled), now, t),
            None if now >= self.heard + t.ping_every => {
                self.ping_sent = Some(now);
                (running(task, waiting, deadline, taken), vec![Do::SendPing])
            }
            _ => (running(task, waiting, deadline, taken), vec![]),
        }
    }

    /// The worker never read its task: the task goes back (it had not
    /// started) and the worker, agentd's own problem, is killed.
    pub(super) fn give_back(&mut self, task: TaskRef, now: Instant) -> (WorkerPhase, Vec<WorkerAction>) {
        let (phase, mut actions) = kill_now(None, now, self.timing);
        actions.insert(0, Do::GiveBack(task.id));
        (phase, actions)
    }
}

pub(super) fn running(task: TaskRef, waiting: Option<Instant>, deadline: Option<Instant>, taken: bool) -> WorkerPhase {
    Ph::Running {
        task,
        waiting,
        deadline,
        taken,
    }
}

/// A frame that is the task's output (an artifact, a direct reply) is
/// relayed; anything else is only life.
pub(super) fn relay_output(frame: FromWorker) -> Vec<WorkerAction> {
    match frame {
        FromWorker::Artifact { .. } | FromWorker::Reply { .. } => vec![Do::Relay(frame)],
        _ => vec![],
    }
}

/// A frame of a running task: output and status are relayed; hello and
/// pong are only life (and `done` is taken by the caller).
pub(super) fn relay_any(frame: FromWorker) -> Vec<WorkerAction> {
    match frame {
        FromWorker::Status { .. } => vec![Do::Relay(frame)],
        other => relay_output(other),
    }
}
