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
//! Terminal tasks are immutable and kept within three bounds: count
//! (`retain_max`), age (`retain_ms`, enforced by [`TaskTable::expire`] from
//! procman's timers) and bytes (`retain_bytes`), oldest first.
//!
//! Locks: the index (id → task, counters, the finished list) is held only
//! to find, add or drop a task — never while a task's own lock is held.
//! Each task has its own lock and condvar; a change of a task notifies its
//! condvar once, after its lock is released ([`Slot::change`]), so a blocked
//! client wakes for its own task only. Rendering a task for the wire copies
//! after the lock is released (see `entry`).

mod entry;
mod list;
#[cfg(test)]
mod tests;
mod watch;

pub use list::{decode_cursor, ListQuery, MetadataFilter};
pub use watch::{LoggedEvent, Next, Opening, Watch};

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::clock;
use crate::control::Cause;
use crate::principal::Principal;
use crate::trace::TraceContext;
use crate::wire::{Artifact, Message, Task, TaskState, TaskStatus};
use entry::{Entry, View};

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
    fn notice(&self, principal: &str, notice: &Notice<'_>);
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
        cause: Option<&'a str>,
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
        cause: &'a str,
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

/// One task: what never changes outside its lock, its state inside.
struct Slot {
    id: String,
    context_id: String,
    principal: String,
    /// Bytes of the first message, counted against queued_max_bytes while
    /// the task waits in SUBMITTED.
    queued_bytes: usize,
    /// The W3C trace context of the request that created it (set once,
    /// right after creation, before procman hears of the task).
    trace: OnceLock<TraceContext>,
    entry: Mutex<Entry>,
    /// Notified on every change, for streams (every event counts).
    changed: Condvar,
    /// Notified only when the task settles (see [`Entry::is_settled`]), for
    /// blocking calls: a blocked SendMessage sleeps through WORKING and
    /// every artifact instead of waking for each.
    settled: Condvar,
    /// Threads blocked on each condvar, counted under the task's lock: a
    /// change nobody waits for wakes nobody (no futex call).
    watchers: AtomicUsize,
    settlers: AtomicUsize,
}

/// What a waiter wakes for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Interest {
    AnyChange,
    Settled,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Entry> {
        // A panic while holding the lock leaves consistent-enough data
        // (every mutation is a few assignments); keep serving.
        self.entry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The one way a task changes: `f` runs under the task's lock and
    /// returns `None` when nothing changed; otherwise whoever waits on this
    /// task is woken, once, after the lock is released.
    fn change<R>(&self, f: impl FnOnce(&mut Entry) -> Option<R>) -> Option<R> {
        let mut entry = self.lock();
        let out = f(&mut entry);
        let (watch, settle) = match out {
            Some(_) => (
                self.watchers.load(Ordering::Relaxed) > 0,
                self.settlers.load(Ordering::Relaxed) > 0 && entry.is_settled(),
            ),
            None => (false, false),
        };
        drop(entry);
        if watch {
            self.changed.notify_all();
        }
        if settle {
            self.settled.notify_all();
        }
        out
    }

    fn may_see(&self, principal: &Principal) -> bool {
        principal.is_operator() || self.principal == principal.name()
    }

    /// Waits on this task's condvar for `interest` until `ready` returns
    /// something or `deadline` passes (then `timeout` gives the answer).
    fn wait<R>(
        &self,
        interest: Interest,
        deadline: Option<Instant>,
        mut ready: impl FnMut(&Entry) -> Option<R>,
        timeout: impl FnOnce(&Entry) -> R,
    ) -> R {
        let mut entry = self.lock();
        loop {
            if let Some(r) = ready(&entry) {
                return r;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return timeout(&entry);
            }
            let (cv, count) = match interest {
                Interest::AnyChange => (&self.changed, &self.watchers),
                Interest::Settled => (&self.settled, &self.settlers),
            };
            // Counted while the lock is held, so a change made under it
            // after our look at `ready` sees us.
            count.fetch_add(1, Ordering::Relaxed);
            entry = match left {
                None => cv.wait(entry).unwrap_or_else(|p| p.into_inner()),
                Some(left) => cv.wait_timeout(entry, left).unwrap_or_else(|p| p.into_inner()).0,
            };
            count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn render(&self, view: View) -> Task {
        view.render(&self.id, &self.context_id)
    }
}

struct Finished {
    at_ms: u64,
    id: String,
    bytes: usize,
}

#[derive(Default)]
struct Index {
    tasks: HashMap<String, Arc<Slot>>,
    /// Finished tasks, oldest first, for retention.
    finished: VecDeque<Finished>,
    retained_bytes: usize,
    submitted: usize,
    queued_bytes: usize,
    /// Started and not finished.
    active: usize,
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

    fn tell(&self, principal: &str, notice: &Notice<'_>) {
        for o in &self.observers {
            o.notice(principal, notice);
        }
    }

    /// Sets a task's status, logs it and tells the observers (under the
    /// task's lock, from inside a `change`).
    fn set_status(&self, slot: &Slot, entry: &mut Entry, state: TaskState, message: Option<Message>) {
        let now = clock::now_ms();
        let status = entry.set_status(
            TaskStatus {
                state,
                message,
                timestamp: Some(clock::format_ms(now)),
            },
            now,
        );
        let (task_id, context_id) = (slot.id.as_str(), slot.context_id.as_str());
        let notice = if state.is_terminal() {
            let cause = status
                .message
                .as_ref()
                .and_then(|m| m.metadata.as_ref()?.get(TERMINAL_KEY)?.as_str());
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
        self.tell(&slot.principal, &notice);
    }

    /// Creates a task in SUBMITTED for `message`, filling in its ids. The
    /// context is the message's, or a fresh one.
    pub fn create(
        &self,
        principal: &Principal,
        mut message: Message,
        metadata: Option<Map<String, Value>>,
    ) -> Result<Task, CreateError> {
        let id = crate::ids::new_id();
        let context_id = message.context_id.clone().unwrap_or_else(crate::ids::new_id);
        message.task_id = Some(id.clone());
        message.context_id = Some(context_id.clone());
        let now = clock::now_ms();
        let status = TaskStatus {
            state: TaskState::Submitted,
            message: None,
            timestamp: Some(clock::format_ms(now)),
        };
        let queued_bytes = entry::message_bytes(&message);
        let slot = Arc::new(Slot {
            id: id.clone(),
            context_id,
            principal: principal.name(),
            queued_bytes,
            trace: OnceLock::new(),
            entry: Mutex::new(Entry::new(status, now, message, metadata)),
            changed: Condvar::new(),
            settled: Condvar::new(),
            watchers: AtomicUsize::new(0),
            settlers: AtomicUsize::new(0),
        });
        let view = slot.lock().view(None, true);
        {
            let mut ix = self.index();
            // Tasks about to take a free running slot are not "waiting".
            let free_slots = self.max_running().saturating_sub(ix.active);
            if ix.submitted >= self.limits.max_queued + free_slots {
                return Err(CreateError::QueueFull {
                    max: self.limits.max_queued,
                });
            }
            // One message alone always fits: it is bounded by the body size.
            if ix.submitted > 0 && ix.queued_bytes + queued_bytes > self.limits.queued_max_bytes {
                return Err(CreateError::QueueBytes {
                    max_bytes: self.limits.queued_max_bytes,
                });
            }
            ix.submitted += 1;
            ix.queued_bytes += queued_bytes;
            ix.tasks.insert(id.clone(), slot.clone());
        }
        self.tell(
            &slot.principal,
            &Notice::Created {
                task_id: &slot.id,
                context_id: &slot.context_id,
            },
        );
        Ok(slot.render(view))
    }

    /// Checks that `message` may continue task `id` (interrupted, same
    /// context), appends it to the history and moves the task to WORKING.
    /// Returns the task as it is now and the event sequence that reflects.
    pub fn continue_with(
        &self,
        principal: &Principal,
        id: &str,
        message: &mut Message,
    ) -> Result<(Task, u64), ContinueError> {
        let slot = self.visible(principal, id).ok_or(ContinueError::NotFound)?;
        let mut refused = None;
        let changed = slot.change(|e| {
            let state = e.state();
            refused = if e.gone {
                Some(ContinueError::NotFound)
            } else if state.is_terminal() {
                Some(ContinueError::Terminal(state))
            } else if !state.is_interrupted() {
                Some(ContinueError::Busy(state))
            } else {
                match &message.context_id {
                    Some(c) if *c != slot.context_id => Some(ContinueError::ContextMismatch {
                        task_context: slot.context_id.clone(),
                    }),
                    _ => None,
                }
            };
            if refused.is_some() {
                return None;
            }
            message.context_id = Some(slot.context_id.clone());
            message.task_id = Some(id.to_string());
            e.push_history(message.clone());
            self.set_status(&slot, e, TaskState::Working, None);
            Some((e.view(None, true), e.last_seq))
        });
        match (changed, refused) {
            (Some((view, seq)), _) => Ok((slot.render(view), seq)),
            (None, Some(why)) => Err(why),
            (None, None) => Err(ContinueError::NotFound),
        }
    }

    /// The task as `principal` may see it, or `None` (absent and not
    /// visible are the same answer: no existence leaks).
    pub fn get(&self, principal: &Principal, id: &str, history_length: Option<usize>) -> Option<Task> {
        let slot = self.visible(principal, id)?;
        let view = slot.lock().view(history_length, true);
        Some(slot.render(view))
    }

    pub fn state(&self, id: &str) -> Option<TaskState> {
        Some(self.find(id)?.lock().state())
    }

    /// The first message of a task and its context: what a worker starts on.
    pub fn start_info(&self, id: &str) -> Option<(String, Message)> {
        let slot = self.find(id)?;
        let first = slot.lock().first_message()?.clone();
        Some((slot.context_id.clone(), first))
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
    ) -> Option<Task> {
        let slot = self.visible(principal, id)?;
        let deadline = timeout.map(|t| Instant::now() + t);
        let view = slot.wait(
            Interest::Settled,
            deadline,
            |e| {
                if done(e.state()) || e.direct_reply.is_some() {
                    Some(Some(e.view(history_length, true)))
                } else if e.gone {
                    Some(None)
                } else {
                    None
                }
            },
            |e| Some(e.view(history_length, true)),
        )?;
        Some(slot.render(view))
    }

    /// Moves a task to a non-terminal state (WORKING, INPUT_REQUIRED, …),
    /// with an optional agent message. Ignored for finished tasks.
    pub fn set_progress(&self, id: &str, state: TaskState, text: Option<String>) {
        debug_assert!(!state.is_terminal());
        let Some(slot) = self.find(id) else { return };
        let from = slot.change(|e| {
            let from = e.state();
            if from.is_terminal() {
                log::debug!("tasks ignoring {state:?} for finished task={id}");
                return None;
            }
            if from == state && text.is_none() {
                return None; // nothing new to tell anyone
            }
            let message = text.map(|t| {
                let m = Message::agent_text(t, id, &slot.context_id);
                e.push_history(m.clone());
                m
            });
            self.set_status(&slot, e, state, message);
            Some(from)
        });
        if let Some(from) = from {
            self.moved(&slot, from, state, 0);
        }
    }

    /// Ends a task: terminal state, readable text and machine-readable cause.
    pub fn finish(&self, id: &str, state: TaskState, cause: Cause, text: Option<String>) {
        debug_assert!(state.is_terminal());
        let Some(slot) = self.find(id) else { return };
        let done = slot.change(|e| {
            let from = e.state();
            if from.is_terminal() {
                return None;
            }
            let text = text.unwrap_or_else(|| default_text(state, cause).to_string());
            let mut message = Message::agent_text(text, id, &slot.context_id);
            let mut md = Map::new();
            md.insert(TERMINAL_KEY.into(), Value::String(cause.as_str().into()));
            message.metadata = Some(md);
            e.push_history(message.clone());
            self.set_status(&slot, e, state, Some(message));
            if e.watchers == 0 {
                e.trim_log();
            }
            Some((from, e.bytes()))
        });
        if let Some((from, bytes)) = done {
            self.moved(&slot, from, state, bytes);
        }
    }

    /// Keeps the index's counters and finished list in step with a task
    /// that went from `from` to `to` (called after its lock is released).
    fn moved(&self, slot: &Slot, from: TaskState, to: TaskState, bytes: usize) {
        let queued = |s: TaskState| s == TaskState::Submitted;
        let active = |s: TaskState| !s.is_terminal() && s != TaskState::Submitted;
        if from == to || (active(from) && active(to)) {
            return;
        }
        let evicted = {
            let mut ix = self.index();
            if queued(from) {
                ix.submitted = ix.submitted.saturating_sub(1);
                ix.queued_bytes = ix.queued_bytes.saturating_sub(slot.queued_bytes);
            } else if active(from) {
                ix.active = ix.active.saturating_sub(1);
            }
            if active(to) {
                ix.active += 1;
            }
            if !to.is_terminal() {
                return;
            }
            ix.retained_bytes += bytes;
            ix.finished.push_back(Finished {
                at_ms: clock::now_ms(),
                id: slot.id.clone(),
                bytes,
            });
            self.evict(&mut ix, clock::now_ms())
        };
        gone(evicted);
    }

    /// Takes the finished tasks past the count, byte or age bound out of
    /// the index, oldest first. The caller tells them they are gone after
    /// the index lock is released (and drops them there, so freeing a big
    /// task does not hold the index).
    fn evict(&self, ix: &mut Index, now_ms: u64) -> Vec<Arc<Slot>> {
        let l = &self.limits;
        let mut out = Vec::new();
        while let Some(oldest) = ix.finished.front() {
            let over = ix.finished.len() > l.retain_max
                || ix.retained_bytes > l.retain_bytes
                || now_ms.saturating_sub(oldest.at_ms) > l.retain_ms;
            if !over {
                break;
            }
            let Some(f) = ix.finished.pop_front() else { break };
            ix.retained_bytes = ix.retained_bytes.saturating_sub(f.bytes);
            if let Some(slot) = ix.tasks.remove(&f.id) {
                log::debug!("tasks.evicted task={} bytes={}", f.id, f.bytes);
                out.push(slot);
            }
        }
        out
    }

    /// Drops the finished tasks older than retain_ms; returns how long
    /// until the next one is due (`None`: no finished task). procman calls
    /// it from its timers, so an idle daemon forgets on time too.
    pub fn expire(&self) -> Option<Duration> {
        let now = clock::now_ms();
        let (evicted, next) = {
            let mut ix = self.index();
            let evicted = self.evict(&mut ix, now);
            let next = ix.finished.front().map(|f| {
                let due = f.at_ms.saturating_add(self.limits.retain_ms).saturating_add(1);
                Duration::from_millis(due.saturating_sub(now))
            });
            (evicted, next)
        };
        gone(evicted);
        next
    }

    /// Adds an artifact or a chunk of one (`append` extends the artifact
    /// with the same id; otherwise it is added or replaced).
    pub fn add_artifact(&self, id: &str, artifact: Artifact, append: bool, last_chunk: bool) {
        let Some(slot) = self.find(id) else { return };
        slot.change(|e| {
            if e.state().is_terminal() {
                return None;
            }
            self.tell(
                &slot.principal,
                &Notice::Artifact {
                    task_id: &slot.id,
                    context_id: &slot.context_id,
                    artifact_id: &artifact.artifact_id,
                    append,
                    last_chunk,
                },
            );
            e.add_artifact(artifact, append, last_chunk);
            Some(())
        });
    }

    /// Records that the worker of task `id` said something.
    pub fn mark_spoke(&self, id: &str) {
        if let Some(slot) = self.find(id) {
            slot.change(|e| (!e.spoke).then(|| e.spoke = true));
        }
    }

    /// The agent answered with a Message instead of working on a task.
    pub fn set_direct_reply(&self, id: &str, mut message: Message) {
        let Some(slot) = self.find(id) else { return };
        slot.change(|e| {
            if e.state().is_terminal() {
                return None;
            }
            message.context_id = Some(slot.context_id.clone());
            message.task_id = None;
            message.role = crate::wire::Role::Agent;
            if message.message_id.is_empty() {
                message.message_id = crate::ids::new_id();
            }
            e.direct_reply = Some(e.push_history(message));
            e.spoke = true;
            Some(())
        });
    }

    /// The Message a task's agent replied with, if it did.
    pub fn direct_reply(&self, id: &str) -> Option<Message> {
        let slot = self.find(id)?;
        let reply = slot.lock().direct_reply.clone()?;
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

    /// Who created task `id` (for records about it), if it exists.
    pub fn principal_of(&self, id: &str) -> Option<String> {
        Some(self.find(id)?.principal.clone())
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
        let principal = self.principal_of(task_id).unwrap_or_default();
        self.tell(&principal, notice);
    }

    /// Changes task `id`'s metadata with `f` (the annotations extension's
    /// labels); an error from `f` leaves it as it was. A task that does not
    /// exist is left alone.
    pub fn update_metadata<E>(
        &self,
        id: &str,
        f: impl FnOnce(&mut Option<Map<String, Value>>) -> Result<(), E>,
    ) -> Result<(), E> {
        let Some(slot) = self.find(id) else { return Ok(()) };
        let mut outcome = Ok(());
        slot.change(|e| {
            let mut md = e.metadata.as_deref().cloned();
            outcome = f(&mut md);
            outcome.is_ok().then(|| e.metadata = md.map(Arc::new))
        });
        outcome
    }

    /// Counts of (submitted, active, finished) tasks.
    pub fn counts(&self) -> (usize, usize, usize) {
        let ix = self.index();
        (ix.submitted, ix.active, ix.finished.len())
    }

    /// Estimated bytes the retained finished tasks hold (tasks.retain_bytes
    /// bounds it).
    pub fn retained_bytes(&self) -> usize {
        self.index().retained_bytes
    }

    /// Ids of every task not yet finished.
    pub fn unfinished(&self) -> Vec<String> {
        let slots: Vec<Arc<Slot>> = self.index().tasks.values().cloned().collect();
        slots
            .into_iter()
            .filter(|s| !s.lock().state().is_terminal())
            .map(|s| s.id.clone())
            .collect()
    }
}

/// Evicted tasks: whoever still waits on one learns it is gone.
fn gone(evicted: Vec<Arc<Slot>>) {
    for slot in evicted {
        slot.change(|e| {
            e.gone = true;
            Some(())
        });
    }
}

fn default_text(state: TaskState, cause: Cause) -> &'static str {
    match (state, cause) {
        (TaskState::Completed, _) => "completed",
        (_, Cause::Cancelled) => "canceled by request",
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
