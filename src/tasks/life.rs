//! The A2A rules of one task, as one pure function:
//! `step(life, change) → (life, record)` or a refusal. The table carries
//! out the record under the task's lock (a status to log and announce, an
//! artifact to store) and counts every task by [`TaskLife::stage`], so each
//! rule of the task model is here and each counter follows from one map.
//!
//! ```text
//!            Progress                 Finish                Evict
//!  Queued ─────────────▶ Running ─────────────▶ Finished ─────────▶ Gone
//!    │                   │  ▲  state: WORKING │ INPUT_REQUIRED │ AUTH_REQUIRED
//!    │                   └──┘  voice: Silent → Spoke │ Replied(message)
//!    │                   Progress, Continue (interrupted → WORKING),
//!    │                   Artifact, Spoke, Reply
//!    └──────────── Finish (cancelled while queued) ──────────▶ Finished
//! ```

use std::fmt;
use std::sync::Arc;

use crate::wire::{Message, TaskState};

/// Where a task is in its life.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum TaskLife {
    /// SUBMITTED: waiting for a running slot; its worker has not started.
    Queued,
    /// Started and not ended: WORKING, INPUT_REQUIRED or AUTH_REQUIRED.
    Running { state: TaskState, voice: Voice },
    /// Ended: terminal and immutable. `reply` if the agent answered with a
    /// Message instead of working on a task.
    Finished {
        state: TaskState,
        reply: Option<Arc<Message>>,
    },
    /// Finished and evicted from the table: whoever still holds it learns
    /// it is gone (and a waiter that got what it waited for still gets it).
    Gone {
        state: TaskState,
        reply: Option<Arc<Message>>,
    },
}

/// What a running task's worker has said so far: a stream waits for it to
/// know whether it streams a task or answers with one message.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Voice {
    Silent,
    /// A status, an artifact or its end: this is a task.
    Spoke,
    /// The agent answered with this Message instead of a task.
    Replied(Arc<Message>),
}

/// Which of the table's counts a task is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// Counted against tasks.max_queued and tasks.queued_max_bytes.
    Queued,
    /// Counted against the running cap.
    Active,
    /// In the retention list (count, bytes, age).
    Finished,
}

/// Something that happens to a task.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Change {
    /// A non-terminal status (procman starting the task, or its worker);
    /// `said`: it carries an agent message.
    Progress { to: TaskState, said: bool },
    /// A client's follow-up message; `same_context`: it names the task's
    /// context, or none.
    Continue { same_context: bool },
    /// The verdict: a terminal state.
    Finish(TaskState),
    /// The worker sent an artifact or a chunk of one.
    Artifact,
    /// The worker said something (any frame but its answer to a ping).
    Spoke,
    /// The agent answered with a Message instead of a task.
    Reply(Arc<Message>),
    /// Retention dropped the finished task.
    Evict,
}

/// What the table records for a change the rules allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Record {
    /// A new status in this state: logged as an event, told to observers.
    Status(TaskState),
    /// The artifact: stored, logged, told to observers.
    Artifact,
    /// Nothing is logged; whoever waits on the task looks again.
    Quiet,
}

/// Why a change does not apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Nothing new to tell anyone (the same state without a message, or a
    /// worker that had spoken already).
    Unchanged,
    /// The task ended in this state: it is immutable.
    Ended(TaskState),
    /// A follow-up message while the task is not waiting for one.
    Busy(TaskState),
    /// A follow-up message that names another context.
    ContextMismatch,
    /// The task was evicted.
    Gone,
    /// The worker of a task that has not started yet, or a second reply.
    Unexpected,
    /// Not a state this change may lead to (progress to a terminal state
    /// or back to SUBMITTED, a verdict that is not terminal, the eviction of
    /// an unfinished task): a caller's bug.
    Invalid,
}

impl TaskLife {
    /// The task's A2A state (its status says the same, with its message).
    pub fn state(&self) -> TaskState {
        match self {
            TaskLife::Queued => TaskState::Submitted,
            TaskLife::Running { state, .. } | TaskLife::Finished { state, .. } | TaskLife::Gone { state, .. } => *state,
        }
    }

    /// The one map from a task's life to the table's counts. An evicted
    /// task stays where it was: eviction itself took it out of the
    /// finished list, under the index lock.
    pub fn stage(&self) -> Stage {
        match self {
            TaskLife::Queued => Stage::Queued,
            TaskLife::Running { .. } => Stage::Active,
            TaskLife::Finished { .. } | TaskLife::Gone { .. } => Stage::Finished,
        }
    }

    /// The Message the agent answered with, if it did.
    pub fn reply(&self) -> Option<&Arc<Message>> {
        match self {
            TaskLife::Running {
                voice: Voice::Replied(m),
                ..
            } => Some(m),
            TaskLife::Finished { reply, .. } | TaskLife::Gone { reply, .. } => reply.as_ref(),
            _ => None,
        }
    }

    /// Whether a stream knows what it streams: the worker spoke, or the
    /// task ended.
    pub fn has_spoken(&self) -> bool {
        !matches!(
            self,
            TaskLife::Queued
                | TaskLife::Running {
                    voice: Voice::Silent,
                    ..
                }
        )
    }

    pub fn is_gone(&self) -> bool {
        matches!(self, TaskLife::Gone { .. })
    }

    /// Whether a blocking call may be done with the task: it ended, waits
    /// on its client, answered with a direct reply, or was evicted.
    pub fn is_settled(&self) -> bool {
        let state = self.state();
        state.is_terminal() || state.is_interrupted() || self.reply().is_some()
    }
}

/// The A2A task model, whole: what `change` does to a task in `life`.
pub(super) fn step(life: &TaskLife, change: &Change) -> Result<(TaskLife, Record), Refusal> {
    use Change as C;
    use TaskLife as L;
    match (life, change) {
        (L::Gone { .. }, _) => Err(Refusal::Gone),
        (L::Finished { state, reply }, C::Evict) => Ok((
            L::Gone {
                state: *state,
                reply: reply.clone(),
            },
            Record::Quiet,
        )),
        (L::Finished { state, .. }, _) => Err(Refusal::Ended(*state)),
        (_, C::Evict) => Err(Refusal::Invalid),
        (_, C::Finish(to)) if to.is_terminal() => Ok((
            L::Finished {
                state: *to,
                reply: life.reply().cloned(),
            },
            Record::Status(*to),
        )),
        (_, C::Finish(_)) => Err(Refusal::Invalid),
        (_, C::Progress { to, .. }) if to.is_terminal() || *to == TaskState::Submitted => Err(Refusal::Invalid),
        (L::Queued, C::Progress { to, .. }) => Ok((
            L::Running {
                state: *to,
                voice: Voice::Silent,
            },
            Record::Status(*to),
        )),
        (L::Queued, C::Continue { .. }) => Err(Refusal::Busy(TaskState::Submitted)),
        (L::Queued, C::Artifact | C::Spoke | C::Reply(_)) => Err(Refusal::Unexpected),
        (L::Running { state, voice }, change) => running(*state, voice, change),
    }
}

/// The rules of a started task (see [`step`]).
fn running(state: TaskState, voice: &Voice, change: &Change) -> Result<(TaskLife, Record), Refusal> {
    let to = |state: TaskState, voice: Voice, record: Record| Ok((TaskLife::Running { state, voice }, record));
    match change {
        Change::Progress { to: next, said } if *next == state && !said => Err(Refusal::Unchanged),
        Change::Progress { to: next, .. } => to(*next, voice.clone(), Record::Status(*next)),
        Change::Continue { .. } if !state.is_interrupted() => Err(Refusal::Busy(state)),
        Change::Continue { same_context: false } => Err(Refusal::ContextMismatch),
        Change::Continue { same_context: true } => {
            to(TaskState::Working, voice.clone(), Record::Status(TaskState::Working))
        }
        Change::Artifact => to(state, voice.spoken(), Record::Artifact),
        Change::Spoke if *voice == Voice::Silent => to(state, Voice::Spoke, Record::Quiet),
        Change::Spoke => Err(Refusal::Unchanged),
        Change::Reply(_) if matches!(voice, Voice::Replied(_)) => Err(Refusal::Unexpected),
        Change::Reply(m) => to(state, Voice::Replied(m.clone()), Record::Quiet),
        // Taken by `step` before it gets here.
        Change::Finish(_) | Change::Evict => Err(Refusal::Invalid),
    }
}

impl Voice {
    fn spoken(&self) -> Voice {
        match self {
            Voice::Silent => Voice::Spoke,
            other => other.clone(),
        }
    }
}

impl fmt::Display for TaskLife {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskLife::Queued => f.write_str("submitted"),
            TaskLife::Running { state, .. } => f.write_str(state.short_name()),
            TaskLife::Finished { state, .. } => write!(f, "finished ({})", state.short_name()),
            TaskLife::Gone { state, .. } => write!(f, "evicted ({})", state.short_name()),
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Progress { to, .. } => write!(f, "progress to {}", to.short_name()),
            Change::Continue { .. } => f.write_str("a follow-up message"),
            Change::Finish(to) => write!(f, "the verdict {}", to.short_name()),
            Change::Artifact => f.write_str("an artifact"),
            Change::Spoke => f.write_str("the worker speaking"),
            Change::Reply(_) => f.write_str("a direct reply"),
            Change::Evict => f.write_str("eviction"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Part, Role};
    use TaskState::*;

    fn reply() -> Arc<Message> {
        Arc::new(Message {
            message_id: "r".into(),
            context_id: None,
            task_id: None,
            role: Role::Agent,
            parts: vec![Part::text("hi")],
            metadata: None,
            extensions: vec![],
            reference_task_ids: vec![],
        })
    }

    fn run(state: TaskState, voice: Voice) -> TaskLife {
        TaskLife::Running { state, voice }
    }

    fn done(state: TaskState) -> TaskLife {
        TaskLife::Finished { state, reply: None }
    }

    fn gone(state: TaskState) -> TaskLife {
        TaskLife::Gone { state, reply: None }
    }

    fn progress(to: TaskState) -> Change {
        Change::Progress { to, said: false }
    }

    fn said(to: TaskState) -> Change {
        Change::Progress { to, said: true }
    }

    const FOLLOW_UP: Change = Change::Continue { same_context: true };

    use Voice::{Silent, Spoke};

    /// `(life, change) => (life, record)` or `=> refusal`, one row each.
    macro_rules! rules {
        ($($name:ident: $life:expr, $change:expr => $want:expr;)*) => {$(
            #[test]
            fn $name() {
                assert_eq!(step(&$life, &$change), $want);
            }
        )*};
    }

    fn to(life: TaskLife, record: Record) -> Result<(TaskLife, Record), Refusal> {
        Ok((life, record))
    }

    rules! {
        queued_starts_working: TaskLife::Queued, progress(Working) => to(run(Working, Silent), Record::Status(Working));
        queued_may_be_cancelled: TaskLife::Queued, Change::Finish(Canceled) => to(done(Canceled), Record::Status(Canceled));
        queued_takes_no_follow_up: TaskLife::Queued, FOLLOW_UP => Err(Refusal::Busy(Submitted));
        queued_has_no_worker_to_speak: TaskLife::Queued, Change::Spoke => Err(Refusal::Unexpected);
        queued_has_no_artifacts: TaskLife::Queued, Change::Artifact => Err(Refusal::Unexpected);
        queued_has_no_reply: TaskLife::Queued, Change::Reply(reply()) => Err(Refusal::Unexpected);
        queued_is_not_evicted: TaskLife::Queued, Change::Evict => Err(Refusal::Invalid);
        same_state_without_text_is_nothing: run(Working, Spoke), progress(Working) => Err(Refusal::Unchanged);
        same_state_with_text_is_news: run(Working, Spoke), said(Working) => to(run(Working, Spoke), Record::Status(Working));
        working_asks_for_input: run(Working, Spoke), said(InputRequired)
            => to(run(InputRequired, Spoke), Record::Status(InputRequired));
        the_worker_resumes_by_itself: run(AuthRequired, Spoke), progress(Working)
            => to(run(Working, Spoke), Record::Status(Working));
        progress_is_never_terminal: run(Working, Spoke), progress(Completed) => Err(Refusal::Invalid);
        progress_never_goes_back_to_submitted: run(Working, Spoke), progress(Submitted) => Err(Refusal::Invalid);
        a_follow_up_resumes_an_interrupted_task: run(InputRequired, Spoke), FOLLOW_UP
            => to(run(Working, Spoke), Record::Status(Working));
        a_follow_up_while_working_is_busy: run(Working, Spoke), FOLLOW_UP => Err(Refusal::Busy(Working));
        a_follow_up_in_another_context: run(AuthRequired, Spoke), Change::Continue { same_context: false }
            => Err(Refusal::ContextMismatch);
        busy_is_told_before_the_context: run(Working, Spoke), Change::Continue { same_context: false }
            => Err(Refusal::Busy(Working));
        an_artifact_is_the_worker_speaking: run(Working, Silent), Change::Artifact
            => to(run(Working, Spoke), Record::Artifact);
        an_artifact_keeps_the_reply: run(Working, Voice::Replied(reply())), Change::Artifact
            => to(run(Working, Voice::Replied(reply())), Record::Artifact);
        speaking_once_wakes_streams: run(Working, Silent), Change::Spoke => to(run(Working, Spoke), Record::Quiet);
        speaking_again_is_nothing: run(Working, Spoke), Change::Spoke => Err(Refusal::Unchanged);
        a_reply_is_kept: run(Working, Silent), Change::Reply(reply())
            => to(run(Working, Voice::Replied(reply())), Record::Quiet);
        a_second_reply_is_refused: run(Working, Voice::Replied(reply())), Change::Reply(reply())
            => Err(Refusal::Unexpected);
        the_verdict_keeps_the_reply: run(Working, Voice::Replied(reply())), Change::Finish(Completed)
            => to(TaskLife::Finished { state: Completed, reply: Some(reply()) }, Record::Status(Completed));
        an_interrupted_task_may_fail: run(InputRequired, Spoke), Change::Finish(Failed)
            => to(done(Failed), Record::Status(Failed));
        a_verdict_is_terminal: run(Working, Spoke), Change::Finish(InputRequired) => Err(Refusal::Invalid);
        finished_is_final: done(Completed), Change::Finish(Failed) => Err(Refusal::Ended(Completed));
        finished_takes_no_progress: done(Canceled), progress(Working) => Err(Refusal::Ended(Canceled));
        finished_takes_no_follow_up: done(Rejected), FOLLOW_UP => Err(Refusal::Ended(Rejected));
        finished_takes_no_artifacts: done(Failed), Change::Artifact => Err(Refusal::Ended(Failed));
        finished_is_evicted: TaskLife::Finished { state: Completed, reply: Some(reply()) }, Change::Evict
            => to(TaskLife::Gone { state: Completed, reply: Some(reply()) }, Record::Quiet);
        gone_takes_nothing: gone(Failed), FOLLOW_UP => Err(Refusal::Gone);
        gone_is_gone_once: gone(Failed), Change::Evict => Err(Refusal::Gone);
    }

    #[test]
    fn counts_follow_the_stage() {
        let cases = [
            (TaskLife::Queued, Stage::Queued),
            (run(Working, Silent), Stage::Active),
            (run(InputRequired, Spoke), Stage::Active),
            (done(Completed), Stage::Finished),
            // Eviction took it out of the finished list itself.
            (gone(Completed), Stage::Finished),
        ];
        for (life, stage) in cases {
            assert_eq!(life.stage(), stage, "{life}");
        }
    }

    #[test]
    fn settled_and_spoken_as_blocking_calls_and_streams_need() {
        // (life, settled, spoken, state)
        let cases = [
            (TaskLife::Queued, false, false, Submitted),
            (run(Working, Silent), false, false, Working),
            (run(Working, Spoke), false, true, Working),
            (run(Working, Voice::Replied(reply())), true, true, Working),
            (run(AuthRequired, Spoke), true, true, AuthRequired),
            (done(Canceled), true, true, Canceled),
            (gone(Failed), true, true, Failed),
        ];
        for (life, settled, spoken, state) in cases {
            assert_eq!(
                (life.is_settled(), life.has_spoken(), life.state()),
                (settled, spoken, state),
                "{life}"
            );
        }
        let replied = TaskLife::Gone {
            state: Completed,
            reply: Some(reply()),
        };
        assert!(replied.reply().is_some());
    }
}
