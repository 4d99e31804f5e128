//! The task table: every task's A2A state, history, artifacts and event log.
//! Handlers wait on it (blocking sends, cancels, streams); procman writes it.
//! No sockets, no processes, no extensions here: whoever wants to hear of
//! every change (the events feed) subscribes as an [`Observer`].
//!
//! ```text
//!  SUBMITTED ──▶ WORKING ──▶ COMPLETED | FAILED | CANCELED | REJECTED
//!      │            │  ▲
//!      │            ▼  │ (follow-up message)
//!      │     INPUT_REQUIRED / AUTH_REQUIRED
//!      └──────────────────────▶ CANCELED (cancelled while queued)
//! ```
//! These rules are one pure function, `life::step`; every change of a task
//! goes through it (`TaskTable::apply`), and the index counts each task by
//! the stage its life is in. Terminal tasks are immutable and kept within
//! three bounds: count (`retain_max`), age (`retain_ms`, enforced by
//! [`TaskTable::expire`] from procman's timers) and bytes (`retain_bytes`),
//! oldest first.
//!
//! Locks: the index (id → task, counters, the finished list; `index`) is
//! held only to find, add, count or drop a task — never while a task's own
//! lock is held. Each task has its own lock and condvars (`slot`); a change
//! of a task notifies them once, after its lock is released, so a blocked
//! client wakes for its own task only. Messages are copied before the lock
//! is taken, and rendering a task for the wire copies after it is released
//! (see `entry`); a task answer is written straight from a [`Snapshot`] —
//! reference counts taken under the lock — with no copy at all (`json`).

mod entry;
mod index;
mod json;
mod life;
mod list;
mod slot;
#[cfg(test)]
mod tests;
mod watch;

pub use list::{decode_cursor, ListQuery, MetadataFilter};
pub use watch::{LoggedEvent, Next, Opening, Watch};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::clock;
use crate::control::Cause;
use crate::cost::Cost;
pub use crate::cost::COST_KEY;
use crate::principal::Principal;
use crate::trace::TraceContext;
use crate::wire::{Artifact, Message, Task, TaskState, TaskStatus};
use entry::Entry;
use index::Index;
use life::{Change, Record, Refusal, Stage};
use slot::{Interest, Slot};

/// Metadata key holding the machine-readable reason a task ended.
pub const TERMINAL_KEY: &str = "agentd.dev/terminal";

#[derive(Debug, Clone)]
pub struct TableLimits {
    pub max_running: usize,
    pub max_queued: usize,
    /// Bytes of the first messages of tasks waiting in SUBMITTED.
    pub queued_max_bytes: usize,
    pub retain_max: usize,
    pub retain_ms: u64,
    /// Estimated bytes all finished tasks may hold together.
    pub retain_bytes: usize,
}

/// Something that hears of every change of every task (the events
/// extension's feed). Called with the task's own lock held, so notices of
/// one task arrive in order: it must be quick and must not call the table.
pub trait Observer: Send + Sync {
    fn notice(&self, about: About<'_>, notice: &Notice<'_>);
}

/// Whose task a notice is about, and its ids: the table's own shared
/// strings, which an observer keeps by reference count (no copy).
#[derive(Debug, Clone, Copy)]
pub struct About<'a> {
    pub principal: &'a Arc<str>,
    pub task_id: &'a Arc<str>,
    pub context_id: &'a Arc<str>,
}

/// One change, as an observer hears it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice<'a> {
    Created {
        task_id: &'a str,
        context_id: &'a str,
    },
    /// A non-terminal status.
    State {
        task_id: &'a str,
        context_id: &'a str,
        state: TaskState,
    },
    Artifact {
        task_id: &'a str,
        context_id: &'a str,
        artifact_id: &'a str,
        append: bool,
        last_chunk: bool,
    },
    Terminal {
        task_id: &'a str,
        context_id: &'a str,
        state: TaskState,
        cause: Option<Cause>,
    },
    /// procman started a worker for the task.
    WorkerSpawn {
        task_id: &'a str,
        pid: i32,
    },
    /// The task's worker is gone (reaped, its group empty).
    WorkerExit {
        task_id: &'a str,
        pid: i32,
        exit_code: i32,
        exit: &'a str,
        cause: Cause,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateError {
    /// tasks.max_queued tasks are waiting already.
    QueueFull { max: usize },
    /// The waiting tasks' messages hold tasks.queued_max_bytes already.
    QueueBytes { max_bytes: usize },
}

/// Why a follow-up message cannot go to a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContinueError {
    NotFound,
    Terminal(TaskState),
    Busy(TaskState),
    ContextMismatch { task_context: String },
}

/// A task as it was at one moment, not yet copied for the wire: its ids
/// and reference counts only. A caller that needs only the id (a blocking
/// send, which answers with the task as it ends) never pays for the copy.
pub struct Snapshot {
    slot: Arc<Slot>,
    view: entry::View,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Snapshot({})", self.slot.id)
    }
}

impl Snapshot {
    pub fn id(&self) -> &str {
        &self.slot.id
    }

    /// The task's id as the table holds it (shared, not copied).
    pub fn task_id(&self) -> crate::ids::TaskId {
        self.slot.id.clone()
    }

    /// The task for the wire (the deep copy).
    pub fn render(self) -> Task {
        self.slot.render(self.view)
    }

    /// The task's JSON, written from the snapshot itself: what
    /// [`render`](Self::render) would give, without the copy.
    pub fn json(&self) -> impl serde::Serialize + '_ {
        json::TaskJson {
            id: &self.slot.id,
            context_id: &self.slot.context_id,
            view: &self.view,
        }
    }

    /// About how many bytes [`json`](Self::json) writes.
    pub fn json_bytes_hint(&self) -> usize {
        self.view.json_bytes_hint()
    }

    /// Whether any metadata map of the task holds `key` (a caller that
    /// must leave a key out renders the task and strips it).
    pub fn mentions(&self, key: &str) -> bool {
        json::mentions(&self.view, key)
    }

    pub fn state(&self) -> TaskState {
        self.view.status.state
    }
}

pub struct TaskTable {
    index: Mutex<Index>,
    limits: TableLimits,
    /// The running cap in force (the command extension changes it).
    max_running: AtomicUsize,
    observers: Vec<Arc<dyn Observer>>,
}

impl TaskTable {
    pub fn new(limits: TableLimits) -> TaskTable {
        TaskTable {
            index: Mutex::new(Index::default()),
            max_running: AtomicUsize::new(limits.max_running),
            limits,
            observers: Vec::new(),
        }
    }

    /// Adds an observer of every change (before the table is shared).
    pub fn subscribe(&mut self, observer: Arc<dyn Observer>) {
        self.observers.push(observer);
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn find(&self, id: &str) -> Option<Arc<Slot>> {
        self.index().tasks.get(id).cloned()
    }

    fn visible(&self, principal: &Principal, id: &str) -> Option<Arc<Slot>> {
        self.find(id).filter(|s| s.may_see(principal))
    }

    fn tell(&self, about: About<'_>, notice: &Notice<'_>) {
        for o in &self.observers {
            o.notice(about, notice);
        }
    }

    /// Applies `change` to a task by the rules (`life::step`) under the
    /// task's lock: `carry_out` records what they say, and the index counts
    /// the task where its new stage says, once the task's lock is released.
    /// (The changes that move a task between stages, its start and its
    /// verdict, all come from procman's one thread: the index hears them
    /// in order.)
    fn apply<R>(
        &self,
        slot: &Arc<Slot>,
        change: Change,
        carry_out: impl FnOnce(&mut Entry, Record) -> R,
    ) -> Result<R, Refusal> {
        let (out, from, to, bytes) = slot.change(|e| {
            let (life, record) = life::step(&e.life, &change).inspect_err(|why| {
                if *why != Refusal::Unchanged {
                    log::debug!("tasks ignoring {change} in {} task={}: {why:?}", e.life, slot.id);
                }
            })?;
            let from = std::mem::replace(&mut e.life, life).stage();
            let out = carry_out(e, record);
            let to = e.life.stage();
            let mut bytes = 0;
            if to == Stage::Finished && from != to {
                if e.streams == 0 {
                    e.trim_log();
                }
                bytes = e.bytes();
            }
            Ok((out, from, to, bytes))
        })?;
        if from != to {
            let now = clock::now_ms();
            let evicted = {
                let mut ix = self.index();
                ix.leave(from, slot);
                ix.enter(to, slot, bytes, now);
                // Only a task that finished can take the table over a bound.
                match to {
                    Stage::Finished => ix.evict(&self.limits, now),
                    Stage::Queued | Stage::Active => Vec::new(),
                }
            };
            self.gone(evicted);
        }
        Ok(out)
    }

    /// Evicted tasks: whoever still waits on one learns it is gone.
    fn gone(&self, evicted: Vec<Arc<Slot>>) {
        for slot in evicted {
            let _ = self.apply(&slot, Change::Evict, |_, _| ());
        }
    }

    /// Records a status the rules decided, and tells the observers (under
    /// the task's lock, from inside an `apply`).
    fn set_status(
        &self,
        slot: &Slot,
        e: &mut Entry,
        record: Record,
        message: Option<Arc<Message>>,
        cause: Option<Cause>,
    ) {
        let Record::Status(state) = record else { return };
        let now = clock::now_ms();
        e.set_status(
            TaskStatus {
                state,
                message,
                timestamp: Some(clock::format_ms(now)),
            },
            now,
        );
        let (task_id, context_id) = (&*slot.id, &*slot.context_id);
        let notice = if state.is_terminal() {
            Notice::Terminal {
                task_id,
                context_id,
                state,
                cause,
            }
        } else {
            Notice::State {
                task_id,
                context_id,
                state,
            }
        };
        self.tell(slot.about(), &notice);
    }

    /// Creates a task in SUBMITTED for `message`, filling in its ids. The
    /// context is the message's, or a fresh one.
    pub fn create(
        &self,
        principal: &Principal,
        mut message: Message,
        metadata: Option<Map<String, Value>>,
    ) -> Result<Snapshot, CreateError> {
        let id = crate::ids::new_id();
        let context_id = message.context_id.take().unwrap_or_else(crate::ids::new_id);
        // The table's shared copies; the message keeps the strings made.
        let (shared_id, shared_context): (Arc<str>, Arc<str>) = (id.as_str().into(), context_id.as_str().into());
        message.task_id = Some(id);
        message.context_id = Some(context_id);
        let now = clock::now_ms();
        let status = TaskStatus {
            state: TaskState::Submitted,
            message: None,
            timestamp: Some(clock::format_ms(now)),
        };
        let queued_bytes = entry::message_bytes(&message);
        let entry = Entry::new(status, now, message, metadata);
        let slot = Arc::new(Slot::new(
            shared_id,
            shared_context,
            principal.name().into(),
            queued_bytes,
            entry,
        ));
        let view = slot.lock().view(None, true);
        {
            let mut ix = self.index();
            let (submitted, bytes) = ix.queued();
            // Tasks about to take a free running slot are not "waiting".
            let free_slots = self.max_running().saturating_sub(ix.counts().1);
            if submitted >= self.limits.max_queued + free_slots {
                return Err(CreateError::QueueFull {
                    max: self.limits.max_queued,
                });
            }
            // One message alone always fits: it is bounded by the body size.
            if submitted > 0 && bytes + queued_bytes > self.limits.queued_max_bytes {
                return Err(CreateError::QueueBytes {
                    max_bytes: self.limits.queued_max_bytes,
                });
            }
            ix.enter(Stage::Queued, &slot, 0, now);
            ix.tasks.insert(slot.id.clone(), slot.clone());
        }
        self.tell(
            slot.about(),
            &Notice::Created {
                task_id: &slot.id,
                context_id: &slot.context_id,
            },
        );
        Ok(Snapshot { slot, view })
    }

    /// Checks that `message` may continue task `id` (interrupted, same
    /// context), appends it to the history and moves the task to WORKING;
    /// `message` then names the task and its context. Returns the task as
    /// it is now and the event sequence that reflects.
    pub fn continue_with(
        &self,
        principal: &Principal,
        id: &str,
        message: &mut Message,
    ) -> Result<(Snapshot, u64), ContinueError> {
        let slot = self.visible(principal, id).ok_or(ContinueError::NotFound)?;
        let same_context = message.context_id.as_ref().is_none_or(|c| **c == *slot.context_id);
        message.context_id = Some(slot.context_id.to_string());
        message.task_id = Some(id.to_string());
        // The copy for the history is made here, not under the task's lock.
        let stored = Arc::new(message.clone());
        let (view, seq) = self
            .apply(&slot, Change::Continue { same_context }, |e, record| {
                e.push_history(stored);
                self.set_status(&slot, e, record, None, None);
                (e.view(None, true), e.last_seq)
            })
            .map_err(|why| match why {
                Refusal::Ended(state) => ContinueError::Terminal(state),
                Refusal::Busy(state) => ContinueError::Busy(state),
                Refusal::ContextMismatch => ContinueError::ContextMismatch {
                    task_context: slot.context_id.to_string(),
                },
                _ => ContinueError::NotFound,
            })?;
        Ok((Snapshot { slot, view }, seq))
    }

    /// The task as `principal` may see it, or `None` (absent and not
    /// visible are the same answer: no existence leaks).
    pub fn get(&self, principal: &Principal, id: &str, history_length: Option<usize>) -> Option<Task> {
        Some(self.peek(principal, id, history_length)?.render())
    }

    /// [`get`](Self::get), not yet copied for the wire (a [`Snapshot`]).
    pub fn peek(&self, principal: &Principal, id: &str, history_length: Option<usize>) -> Option<Snapshot> {
        let slot = self.visible(principal, id)?;
        let view = slot.lock().view(history_length, true);
        Some(Snapshot { slot, view })
    }

    pub fn state(&self, id: &str) -> Option<TaskState> {
        Some(self.find(id)?.lock().state())
    }

    /// The first message of a task and its context: what a worker starts on.
    pub fn start_info(&self, id: &str) -> Option<(String, Arc<Message>)> {
        let slot = self.find(id)?;
        let first = slot.lock().first_message()?;
        Some((slot.context_id.to_string(), first))
    }

    /// Waits until `done(state)` holds for task `id` (or the agent replied
    /// directly) or `timeout` passes; returns the task then. A task that is
    /// evicted while waited on is still answered if it got there. It wakes
    /// only when the task settles (terminal, interrupted, a direct reply),
    /// so `done` may hold only in such states.
    pub fn wait_until(
        &self,
        principal: &Principal,
        id: &str,
        history_length: Option<usize>,
        timeout: Option<Duration>,
        done: impl Fn(TaskState) -> bool,
    ) -> Option<Snapshot> {
        let slot = self.visible(principal, id)?;
        let deadline = timeout.map(|t| Instant::now() + t);
        let view = slot.wait(
            Interest::Settled,
            deadline,
            |e| {
                if done(e.state()) || e.life.reply().is_some() {
                    Some(Some(e.view(history_length, true)))
                } else if e.life.is_gone() {
                    Some(None)
                } else {
                    None
                }
            },
            |e| Some(e.view(history_length, true)),
        )?;
        Some(Snapshot { slot, view })
    }

    /// Moves a task to a non-terminal state (WORKING, INPUT_REQUIRED, …),
    /// with an optional agent message. Ignored for finished tasks.
    pub fn set_progress(&self, id: &str, state: TaskState, text: Option<String>) {
        debug_assert!(!state.is_terminal());
        let Some(slot) = self.find(id) else { return };
        // One message, kept in the history and shown in the status.
        let said = text.map(|t| Arc::new(Message::agent_text(t, id, &slot.context_id)));
        let change = Change::Progress {
            to: state,
            said: said.is_some(),
        };
        let _ = self.apply(&slot, change, |e, record| {
            if let Some(m) = &said {
                e.push_history(Arc::clone(m));
            }
            self.set_status(&slot, e, record, said, None);
        });
    }

    /// Ends a task: terminal state, readable text and machine-readable cause.
    pub fn finish(&self, id: &str, state: TaskState, cause: Cause, text: Option<String>) {
        self.finish_with_cost(id, state, cause, text, None);
    }

    /// [`finish`](Self::finish), with what the task cost (it ran): kept
    /// with the verdict, in the same change, so whoever sees the task
    /// terminal sees its cost too. It is rendered into the task's metadata
    /// under [`COST_KEY`] only when the task is read. True if the task
    /// ended now (false: it had ended already, or is not known).
    pub fn finish_with_cost(
        &self,
        id: &str,
        state: TaskState,
        cause: Cause,
        text: Option<String>,
        cost: Option<Cost>,
    ) -> bool {
        debug_assert!(state.is_terminal());
        let Some(slot) = self.find(id) else { return false };
        let text = text.unwrap_or_else(|| default_text(state, cause).to_string());
        let mut message = Message::agent_text(text, id, &slot.context_id);
        let why = Value::String(cause.as_str().into());
        message.metadata = Some(Map::from_iter([(TERMINAL_KEY.to_string(), why)]));
        // One message, kept in the history and shown in the status.
        let message = Arc::new(message);
        self.apply(&slot, Change::Finish(state), |e, record| {
            e.push_history(Arc::clone(&message));
            e.cost = cost;
            self.set_status(&slot, e, record, Some(message), Some(cause));
        })
        .is_ok()
    }

    /// Drops the finished tasks older than retain_ms; returns how long
    /// until the next one is due (`None`: no finished task). procman calls
    /// it from its timers, so an idle daemon forgets on time too.
    pub fn expire(&self) -> Option<Duration> {
        let now = clock::now_ms();
        let (evicted, next) = {
            let mut ix = self.index();
            let evicted = ix.evict(&self.limits, now);
            (evicted, ix.next_due(self.limits.retain_ms, now))
        };
        self.gone(evicted);
        next
    }

    /// Adds an artifact or a chunk of one (`append` extends the artifact
    /// with the same id; otherwise it is added or replaced).
    pub fn add_artifact(&self, id: &str, artifact: Artifact, append: bool, last_chunk: bool) {
        let Some(slot) = self.find(id) else { return };
        let artifact = Arc::new(artifact);
        let _ = self.apply(&slot, Change::Artifact, |e, _| {
            self.tell(
                slot.about(),
                &Notice::Artifact {
                    task_id: &slot.id,
                    context_id: &slot.context_id,
                    artifact_id: &artifact.artifact_id,
                    append,
                    last_chunk,
                },
            );
            e.add_artifact(artifact, append, last_chunk);
        });
    }

    /// Records that the worker of task `id` said something.
    pub fn mark_spoke(&self, id: &str) {
        if let Some(slot) = self.find(id) {
            let _ = self.apply(&slot, Change::Spoke, |_, _| ());
        }
    }

    /// The agent answered with a Message instead of working on a task.
    pub fn set_direct_reply(&self, id: &str, mut message: Message) {
        let Some(slot) = self.find(id) else { return };
        message.context_id = Some(slot.context_id.to_string());
        message.task_id = None;
        message.role = crate::wire::Role::Agent;
        if message.message_id.is_empty() {
            message.message_id = crate::ids::new_id();
        }
        let reply = Arc::new(message);
        let _ = self.apply(&slot, Change::Reply(reply.clone()), |e, _| e.push_history(reply));
    }

    /// The Message a task's agent replied with, if it did.
    pub fn direct_reply(&self, id: &str) -> Option<Message> {
        let slot = self.find(id)?;
        let reply = slot.lock().life.reply().cloned()?;
        Some(Message::clone(&reply))
    }

    /// The task's snapshot and the last event sequence it reflects.
    pub fn snapshot(&self, principal: &Principal, id: &str, history_length: Option<usize>) -> Option<(Task, u64)> {
        let slot = self.visible(principal, id)?;
        let (view, seq) = {
            let e = slot.lock();
            (e.view(history_length, true), e.last_seq)
        };
        Some((slot.render(view), seq))
    }

    pub fn max_running(&self) -> usize {
        self.max_running.load(Ordering::SeqCst)
    }

    pub fn set_max_running(&self, n: usize) {
        self.max_running.store(n.max(1), Ordering::SeqCst);
    }

    /// Records the trace context a task was created under.
    pub fn set_trace(&self, id: &str, trace: TraceContext) {
        if let Some(slot) = self.find(id) {
            let _ = slot.trace.set(trace);
        }
    }

    /// The trace context a task was created under, if any.
    pub fn trace(&self, id: &str) -> Option<TraceContext> {
        self.find(id)?.trace.get().cloned()
    }

    /// A worker record (spawn, exit) for the observers, under the task's
    /// principal (empty if the task is gone).
    pub fn worker_notice(&self, notice: &Notice<'_>) {
        let task_id = match notice {
            Notice::WorkerSpawn { task_id, .. } | Notice::WorkerExit { task_id, .. } => task_id,
            _ => {
                debug_assert!(false, "worker_notice takes worker records only: {notice:?}");
                return;
            }
        };
        match self.find(task_id) {
            Some(slot) => self.tell(slot.about(), notice),
            None => {
                // The task is gone: no principal, and names of its own.
                let (nobody, id): (Arc<str>, Arc<str>) = (Arc::from(""), Arc::from(*task_id));
                let about = About {
                    principal: &nobody,
                    task_id: &id,
                    context_id: &nobody,
                };
                self.tell(about, notice);
            }
        }
    }

    /// Changes task `id`'s metadata with `f` (the annotations extension's
    /// labels); an error from `f` leaves it as it was. A task that does not
    /// exist, or that `principal` may not see, is left alone and `f` is not
    /// called: its error would tell that the task exists.
    pub fn update_metadata<E>(
        &self,
        principal: &Principal,
        id: &str,
        f: impl FnOnce(&mut Option<Map<String, Value>>) -> Result<(), E>,
    ) -> Result<(), E> {
        let Some(slot) = self.visible(principal, id) else {
            return Ok(());
        };
        slot.change(|e| {
            let mut md = e.metadata.as_deref().cloned();
            f(&mut md)?;
            e.metadata = md.map(Arc::new);
            Ok(())
        })
    }

    /// Counts of (submitted, active, finished) tasks.
    pub fn counts(&self) -> (usize, usize, usize) {
        self.index().counts()
    }

    /// Estimated bytes the retained finished tasks hold (tasks.retain_bytes
    /// bounds it).
    pub fn retained_bytes(&self) -> usize {
        self.index().retained_bytes()
    }

    /// Ids of every task not yet finished.
    pub fn unfinished(&self) -> Vec<String> {
        let slots: Vec<Arc<Slot>> = self.index().tasks.values().cloned().collect();
        slots
            .into_iter()
            .filter(|s| !s.lock().state().is_terminal())
            .map(|s| s.id.to_string())
            .collect()
    }
}

fn default_text(state: TaskState, cause: Cause) -> &'static str {
    match (state, cause) {
        (TaskState::Completed, _) => "completed",
        (_, Cause::Canceled) => "canceled by request",
        (_, Cause::Shutdown) => "canceled: agentd is shutting down",
        (_, Cause::Deadline) => "failed: the task ran past tasks.deadline_ms",
        (_, Cause::Stalled) => "failed: the worker stopped answering",
        (_, Cause::Exhausted) => "failed: the task went over its output budget",
        (_, Cause::Idle) => "failed: nobody answered the agent's question within tasks.input_idle_ms",
        (_, Cause::Crashed) => "failed: the worker crashed",
        (TaskState::Rejected, _) => "rejected by the agent",
        _ => "failed",
    }
}
