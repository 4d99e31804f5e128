//! The task table: every task's A2A state, history, artifacts and event log,
//! behind one `Mutex` with one `Condvar` that is notified on every change.
//! Handlers wait on it (blocking sends, cancels, streams); procman writes it.
//! No sockets, no processes here.
//!
//! ```text
//!  SUBMITTED ──▶ WORKING ──▶ COMPLETED | FAILED | CANCELED | REJECTED
//!      │            │  ▲
//!      │            ▼  │ (follow-up message)
//!      │     INPUT_REQUIRED / AUTH_REQUIRED
//!      └──────────────────────▶ CANCELED (cancelled while queued)
//! ```
//! Terminal tasks are immutable and kept for a bounded time and count.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::clock;
use crate::control::Cause;
use crate::ext::events::Feed;
use crate::limits;
use crate::principal::Principal;
use crate::wire::{
    Artifact, ListTasksResponse, Message, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent,
};

/// Metadata key holding the machine-readable reason a task ended.
pub const TERMINAL_KEY: &str = "agentd.dev/terminal";

#[derive(Debug, Clone)]
pub struct TableLimits {
    pub max_running: usize,
    pub max_queued: usize,
    pub retain_max: usize,
    pub retain_ms: u64,
}

/// One entry of a task's event log; `seq` increases by one per event.
#[derive(Debug, Clone)]
pub struct LoggedEvent {
    pub seq: u64,
    pub event: StreamResponse,
}

struct Entry {
    task: Task,
    principal: String,
    status_ms: u64,
    artifacts: Vec<Artifact>,
    history: VecDeque<Message>,
    events: VecDeque<LoggedEvent>,
    last_seq: u64,
    /// The worker has said something (a status, artifact, message or end):
    /// from then on a stream knows whether this is a task or a direct reply.
    spoke: bool,
    /// The agent answered with a Message instead of a task.
    direct_reply: Option<Message>,
    /// Notified on every change of this task, so a waiter wakes only for
    /// its own task (one table-wide condvar woke every blocked client on
    /// every event of every task).
    changed: Arc<Condvar>,
    /// The W3C trace context of the request that created it.
    trace: Option<crate::trace::TraceContext>,
}

/// What a stream gets when it asks for events after a sequence number.
#[derive(Debug)]
pub enum Next {
    /// New events, in order.
    Events(Vec<LoggedEvent>),
    /// The client fell behind the retained log: a fresh snapshot and the
    /// sequence it reflects.
    Resync(Box<Task>, u64),
    /// Nothing new within the timeout.
    Timeout,
    /// The task is no longer visible (pruned).
    Gone,
}

/// How a stream should begin, as far as the task table can tell.
#[derive(Debug)]
pub enum Opening {
    /// The agent replied with a Message: that is the whole stream.
    Reply(Message),
    /// The agent works on a task: stream it.
    Task,
    /// The worker has not said anything yet.
    Waiting,
    /// The task is not visible (any more).
    Gone,
}

#[derive(Default)]
struct Inner {
    tasks: HashMap<String, Entry>,
    /// Finished tasks, oldest first, for retention.
    finished: VecDeque<(u64, String)>,
    submitted: usize,
}

pub struct TaskTable {
    inner: Mutex<Inner>,
    limits: TableLimits,
    /// The running cap in force (the command extension changes it).
    max_running: AtomicUsize,
    /// The daemon-wide lifecycle feed (the events extension).
    feed: Arc<Feed>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateError {
    QueueFull { max: usize },
}

/// Why a follow-up message cannot go to a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContinueError {
    NotFound,
    Terminal(TaskState),
    Busy(TaskState),
    ContextMismatch { task_context: String },
}

/// What a ListTasks page asks for, validated.
pub struct ListQuery {
    pub context_id: Option<String>,
    pub status: Option<TaskState>,
    pub after_ms: Option<u64>,
    pub page_size: usize,
    pub cursor: Option<(u64, String)>,
    pub history_length: Option<usize>,
    pub include_artifacts: bool,
    /// Task-annotation labels every listed task must carry.
    pub labels: Option<crate::ext::annotations::Labels>,
}

impl TaskTable {
    pub fn new(limits: TableLimits, feed: Arc<Feed>) -> TaskTable {
        TaskTable {
            inner: Mutex::new(Inner::default()),
            max_running: AtomicUsize::new(limits.max_running),
            feed,
            limits,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent-enough data
        // (every mutation is a few assignments); keep serving.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates a task in SUBMITTED for `message`, filling in its ids. The
    /// context is the message's, or a fresh one.
    pub fn create(
        &self,
        principal: &Principal,
        mut message: Message,
        metadata: Option<Map<String, Value>>,
    ) -> Result<Task, CreateError> {
        let mut inner = self.lock();
        // Tasks about to take a free running slot are not "waiting".
        let active = inner
            .tasks
            .values()
            .filter(|e| !e.task.status.state.is_terminal() && e.task.status.state != TaskState::Submitted)
            .count();
        let free_slots = self.max_running().saturating_sub(active);
        if inner.submitted >= self.limits.max_queued + free_slots {
            return Err(CreateError::QueueFull {
                max: self.limits.max_queued,
            });
        }
        let id = crate::ids::new_id();
        let context_id = message.context_id.clone().unwrap_or_else(crate::ids::new_id);
        message.task_id = Some(id.clone());
        message.context_id = Some(context_id.clone());
        let now = clock::now_ms();
        let task = Task {
            id: id.clone(),
            context_id,
            status: TaskStatus {
                state: TaskState::Submitted,
                message: None,
                timestamp: Some(clock::format_ms(now)),
            },
            artifacts: None,
            history: None,
            metadata,
        };
        let entry = Entry {
            task,
            principal: principal.name(),
            status_ms: now,
            artifacts: Vec::new(),
            history: VecDeque::from([message]),
            events: VecDeque::new(),
            last_seq: 0,
            spoke: false,
            direct_reply: None,
            changed: Arc::new(Condvar::new()),
            trace: None,
        };
        let snapshot = render(&entry, None, true);
        self.feed.publish(
            &entry.principal,
            "task.created",
            fields(&[("taskId", json!(id)), ("contextId", json!(snapshot.context_id))]),
        );
        inner.tasks.insert(id, entry);
        inner.submitted += 1;
        prune(&mut inner, &self.limits, now);
        Ok(snapshot)
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
        let mut inner = self.lock();
        let entry = visible_mut(&mut inner, principal, id).ok_or(ContinueError::NotFound)?;
        let cv = entry.changed.clone();
        let state = entry.task.status.state;
        if state.is_terminal() {
            return Err(ContinueError::Terminal(state));
        }
        if !state.is_interrupted() {
            return Err(ContinueError::Busy(state));
        }
        match &message.context_id {
            Some(c) if *c != entry.task.context_id => {
                return Err(ContinueError::ContextMismatch {
                    task_context: entry.task.context_id.clone(),
                })
            }
            _ => message.context_id = Some(entry.task.context_id.clone()),
        }
        message.task_id = Some(id.to_string());
        push_history(entry, message.clone());
        set_status(&self.feed, entry, TaskState::Working, None);
        let snapshot = (render(entry, None, true), entry.last_seq);
        drop(inner);
        cv.notify_all();
        Ok(snapshot)
    }

    /// The task as `principal` may see it, or `None` (absent and not
    /// visible are the same answer: no existence leaks).
    pub fn get(&self, principal: &Principal, id: &str, history_length: Option<usize>) -> Option<Task> {
        let inner = self.lock();
        let entry = visible(&inner, principal, id)?;
        Some(render(entry, history_length, true))
    }

    pub fn state(&self, id: &str) -> Option<TaskState> {
        self.lock().tasks.get(id).map(|e| e.task.status.state)
    }

    /// The first message of a task and its context: what a worker starts on.
    pub fn start_info(&self, id: &str) -> Option<(String, Message)> {
        let inner = self.lock();
        let e = inner.tasks.get(id)?;
        Some((e.task.context_id.clone(), e.history.front()?.clone()))
    }

    /// Waits until `done(state)` holds for task `id` or `timeout` passes;
    /// returns the task then (or `None` if it vanished).
    pub fn wait_until(
        &self,
        principal: &Principal,
        id: &str,
        history_length: Option<usize>,
        timeout: Option<Duration>,
        done: impl Fn(TaskState) -> bool,
    ) -> Option<Task> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut inner = self.lock();
        loop {
            let entry = visible(&inner, principal, id)?;
            if done(entry.task.status.state) || entry.direct_reply.is_some() {
                return Some(render(entry, history_length, true));
            }
            let cv = entry.changed.clone();
            inner = match deadline {
                None => cv.wait(inner).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Some(render(entry, history_length, true));
                    }
                    cv.wait_timeout(inner, left).unwrap_or_else(|p| p.into_inner()).0
                }
            };
        }
    }

    /// Moves a task to a non-terminal state (WORKING, INPUT_REQUIRED, …),
    /// with an optional agent message. Ignored for finished tasks.
    pub fn set_progress(&self, id: &str, state: TaskState, text: Option<String>) {
        debug_assert!(!state.is_terminal());
        let mut inner = self.lock();
        let Some(entry) = inner.tasks.get_mut(id) else {
            return;
        };
        let cv = entry.changed.clone();
        if entry.task.status.state.is_terminal() {
            log::debug!("tasks ignoring {state:?} for finished task={id}");
            return;
        }
        if entry.task.status.state == state && text.is_none() {
            return; // nothing new to tell anyone
        }
        let was_submitted = entry.task.status.state == TaskState::Submitted;
        let message = text.map(|t| {
            let m = Message::agent_text(t, id, &entry.task.context_id);
            push_history(entry, m.clone());
            m
        });
        set_status(&self.feed, entry, state, message);
        if was_submitted && state != TaskState::Submitted {
            inner.submitted = inner.submitted.saturating_sub(1);
        }
        drop(inner);
        cv.notify_all();
    }

    /// Ends a task: terminal state, readable text and machine-readable cause.
    pub fn finish(&self, id: &str, state: TaskState, cause: Cause, text: Option<String>) {
        debug_assert!(state.is_terminal());
        let now = clock::now_ms();
        let mut inner = self.lock();
        let Some(entry) = inner.tasks.get_mut(id) else {
            return;
        };
        let cv = entry.changed.clone();
        if entry.task.status.state.is_terminal() {
            return;
        }
        let was_submitted = entry.task.status.state == TaskState::Submitted;
        let text = text.unwrap_or_else(|| default_text(state, cause).to_string());
        let mut message = Message::agent_text(text, id, &entry.task.context_id);
        let mut md = Map::new();
        md.insert(TERMINAL_KEY.into(), Value::String(cause.as_str().into()));
        message.metadata = Some(md);
        push_history(entry, message.clone());
        set_status(&self.feed, entry, state, Some(message));
        if was_submitted {
            inner.submitted = inner.submitted.saturating_sub(1);
        }
        inner.finished.push_back((now, id.to_string()));
        prune(&mut inner, &self.limits, now);
        drop(inner);
        cv.notify_all();
    }

    /// Adds an artifact or a chunk of one (`append` extends the artifact
    /// with the same id; otherwise it is added or replaced).
    pub fn add_artifact(&self, id: &str, artifact: Artifact, append: bool, last_chunk: bool) {
        let mut inner = self.lock();
        let Some(entry) = inner.tasks.get_mut(id) else {
            return;
        };
        let cv = entry.changed.clone();
        if entry.task.status.state.is_terminal() {
            return;
        }
        match entry
            .artifacts
            .iter_mut()
            .find(|a| a.artifact_id == artifact.artifact_id)
        {
            Some(existing) if append => merge_parts(existing, &artifact),
            Some(existing) => *existing = artifact.clone(),
            None => entry.artifacts.push(artifact.clone()),
        }
        let event = StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: id.to_string(),
            context_id: entry.task.context_id.clone(),
            artifact,
            append,
            last_chunk,
            metadata: None,
        });
        log_event(&self.feed, entry, event);
        drop(inner);
        cv.notify_all();
    }

    /// One page of the tasks `principal` may see, newest status first.
    pub fn list(&self, principal: &Principal, q: &ListQuery) -> ListTasksResponse {
        let inner = self.lock();
        let mut rows: Vec<&Entry> = inner
            .tasks
            .values()
            .filter(|e| may_see(principal, e))
            .filter(|e| q.context_id.as_ref().is_none_or(|c| *c == e.task.context_id))
            .filter(|e| q.status.is_none_or(|s| s == e.task.status.state))
            .filter(|e| q.after_ms.is_none_or(|t| e.status_ms >= t))
            .filter(|e| {
                q.labels
                    .as_ref()
                    .is_none_or(|l| crate::ext::annotations::matches(e.task.metadata.as_ref(), l))
            })
            .collect();
        rows.sort_by(|a, b| b.status_ms.cmp(&a.status_ms).then_with(|| a.task.id.cmp(&b.task.id)));
        let total = rows.len();
        let start = match &q.cursor {
            None => 0,
            // The first row after the cursor in the sort order (newest
            // status first, then id): tasks that changed since keep their
            // place by their new timestamp, none is skipped or repeated.
            Some((ms, id)) => rows
                .iter()
                .position(|e| e.status_ms < *ms || (e.status_ms == *ms && e.task.id > *id))
                .unwrap_or(total),
        };
        let page: Vec<&Entry> = rows.iter().skip(start).take(q.page_size).copied().collect();
        let next = if start + page.len() < total {
            page.last()
                .map(|e| encode_cursor(e.status_ms, &e.task.id))
                .unwrap_or_default()
        } else {
            String::new()
        };
        ListTasksResponse {
            tasks: page
                .iter()
                .map(|e| render(e, q.history_length, q.include_artifacts))
                .collect(),
            next_page_token: next,
            page_size: q.page_size as i32,
            total_size: total as i32,
        }
    }

    /// Records that the worker of task `id` said something.
    pub fn mark_spoke(&self, id: &str) {
        let mut inner = self.lock();
        if let Some(e) = inner.tasks.get_mut(id) {
            if !e.spoke {
                e.spoke = true;
                let cv = e.changed.clone();
                drop(inner);
                cv.notify_all();
            }
        }
    }

    /// The agent answered with a Message instead of working on a task.
    pub fn set_direct_reply(&self, id: &str, mut message: Message) {
        let mut inner = self.lock();
        let Some(entry) = inner.tasks.get_mut(id) else { return };
        let cv = entry.changed.clone();
        if entry.task.status.state.is_terminal() {
            return;
        }
        message.context_id = Some(entry.task.context_id.clone());
        message.task_id = None;
        message.role = crate::wire::Role::Agent;
        if message.message_id.is_empty() {
            message.message_id = crate::ids::new_id();
        }
        push_history(entry, message.clone());
        entry.direct_reply = Some(message);
        entry.spoke = true;
        drop(inner);
        cv.notify_all();
    }

    /// The Message a task's agent replied with, if it did.
    pub fn direct_reply(&self, id: &str) -> Option<Message> {
        self.lock().tasks.get(id)?.direct_reply.clone()
    }

    /// The task's snapshot and the last event sequence it reflects.
    pub fn snapshot(&self, principal: &Principal, id: &str, history_length: Option<usize>) -> Option<(Task, u64)> {
        let inner = self.lock();
        let entry = visible(&inner, principal, id)?;
        Some((render(entry, history_length, true), entry.last_seq))
    }

    /// Waits (up to `timeout`) until the worker of `id` has spoken or the
    /// task ended, then says how a stream should open.
    pub fn opening(&self, principal: &Principal, id: &str, timeout: Duration) -> Opening {
        let deadline = Instant::now() + timeout;
        let mut inner = self.lock();
        loop {
            let Some(entry) = visible(&inner, principal, id) else {
                return Opening::Gone;
            };
            if let Some(m) = &entry.direct_reply {
                return Opening::Reply(m.clone());
            }
            if entry.spoke || entry.task.status.state.is_terminal() {
                return Opening::Task;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Opening::Waiting;
            }
            let cv = entry.changed.clone();
            inner = cv.wait_timeout(inner, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Events of task `id` after sequence `after`, waiting up to `timeout`
    /// for the first one.
    pub fn next_events(&self, principal: &Principal, id: &str, after: u64, timeout: Duration) -> Next {
        let deadline = Instant::now() + timeout;
        let mut inner = self.lock();
        loop {
            let Some(entry) = visible(&inner, principal, id) else {
                return Next::Gone;
            };
            if entry.last_seq > after {
                let oldest = entry.events.front().map(|e| e.seq).unwrap_or(entry.last_seq + 1);
                if oldest > after + 1 {
                    return Next::Resync(Box::new(render(entry, None, true)), entry.last_seq);
                }
                let events = entry.events.iter().filter(|e| e.seq > after).cloned().collect();
                return Next::Events(events);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Next::Timeout;
            }
            let cv = entry.changed.clone();
            inner = cv.wait_timeout(inner, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Whether events after `seq` are still all retained (for Last-Event-ID).
    pub fn can_replay_from(&self, principal: &Principal, id: &str, seq: u64) -> bool {
        let inner = self.lock();
        let Some(entry) = visible(&inner, principal, id) else {
            return false;
        };
        let oldest = entry.events.front().map(|e| e.seq).unwrap_or(entry.last_seq + 1);
        seq <= entry.last_seq && oldest <= seq + 1
    }

    pub fn max_running(&self) -> usize {
        self.max_running.load(Ordering::SeqCst)
    }

    pub fn set_max_running(&self, n: usize) {
        self.max_running.store(n.max(1), Ordering::SeqCst);
    }

    pub fn feed(&self) -> &Feed {
        &self.feed
    }

    /// Who created task `id` (for records about it), if it exists.
    pub fn principal_of(&self, id: &str) -> Option<String> {
        self.lock().tasks.get(id).map(|e| e.principal.clone())
    }

    /// Merges task-annotation labels into a task (follow-up messages).
    pub fn add_labels(&self, id: &str, labels: &crate::ext::annotations::Labels) -> Result<(), crate::rpc::RpcError> {
        let mut inner = self.lock();
        match inner.tasks.get_mut(id) {
            Some(e) => crate::ext::annotations::merge_into(&mut e.task.metadata, labels),
            None => Ok(()),
        }
    }

    /// Whether `labels` would fit on task `id` (checked before a follow-up
    /// changes anything).
    pub fn check_labels(&self, id: &str, labels: &crate::ext::annotations::Labels) -> Result<(), crate::rpc::RpcError> {
        let inner = self.lock();
        match inner.tasks.get(id) {
            Some(e) => crate::ext::annotations::check_fits(e.task.metadata.as_ref(), labels),
            None => Ok(()),
        }
    }

    /// Records the trace context a task was created under.
    pub fn set_trace(&self, id: &str, trace: crate::trace::TraceContext) {
        if let Some(e) = self.lock().tasks.get_mut(id) {
            e.trace = Some(trace);
        }
    }

    /// The trace context a task was created under, if any.
    pub fn trace(&self, id: &str) -> Option<crate::trace::TraceContext> {
        self.lock().tasks.get(id).and_then(|e| e.trace.clone())
    }

    /// Counts of (submitted, active, finished) tasks.
    pub fn counts(&self) -> (usize, usize, usize) {
        let inner = self.lock();
        let finished = inner.finished.len();
        (
            inner.submitted,
            inner.tasks.len() - finished - inner.submitted,
            finished,
        )
    }

    /// Ids of every task not yet finished.
    pub fn unfinished(&self) -> Vec<String> {
        let inner = self.lock();
        inner
            .tasks
            .values()
            .filter(|e| !e.task.status.state.is_terminal())
            .map(|e| e.task.id.clone())
            .collect()
    }
}

/// A JSON object from a few fields.
pub fn fields(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

/// Parses a ListTasks `pageToken` (hex of `MS:ID`).
pub fn decode_cursor(token: &str) -> Option<(u64, String)> {
    if token.len() % 2 != 0 || token.len() > 512 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let (ms, id) = text.split_once(':')?;
    Some((ms.parse().ok()?, id.to_string()))
}

fn encode_cursor(ms: u64, id: &str) -> String {
    format!("{ms}:{id}").bytes().map(|b| format!("{b:02x}")).collect()
}

fn may_see(principal: &Principal, e: &Entry) -> bool {
    principal.is_operator() || e.principal == principal.name()
}

fn visible<'a>(inner: &'a Inner, principal: &Principal, id: &str) -> Option<&'a Entry> {
    inner.tasks.get(id).filter(|e| may_see(principal, e))
}

fn visible_mut<'a>(inner: &'a mut Inner, principal: &Principal, id: &str) -> Option<&'a mut Entry> {
    inner.tasks.get_mut(id).filter(|e| may_see(principal, e))
}

fn set_status(feed: &Feed, entry: &mut Entry, state: TaskState, message: Option<Message>) {
    let now = clock::now_ms();
    entry.status_ms = now;
    entry.task.status = TaskStatus {
        state,
        message,
        timestamp: Some(clock::format_ms(now)),
    };
    let event = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: entry.task.id.clone(),
        context_id: entry.task.context_id.clone(),
        status: entry.task.status.clone(),
        metadata: None,
    });
    log_event(feed, entry, event);
}

/// Appends to the task's own log and mirrors it into the daemon-wide feed.
fn log_event(feed: &Feed, entry: &mut Entry, event: StreamResponse) {
    let ids = [
        ("taskId", json!(entry.task.id)),
        ("contextId", json!(entry.task.context_id)),
    ];
    match &event {
        StreamResponse::StatusUpdate(u) => {
            let state = u.status.state;
            let mut f = fields(&ids);
            f.insert("state".into(), json!(state));
            let kind = if state.is_terminal() {
                let cause = u
                    .status
                    .message
                    .as_ref()
                    .and_then(|m| m.metadata.as_ref()?.get(TERMINAL_KEY).cloned());
                f.insert("cause".into(), cause.unwrap_or(Value::Null));
                "task.terminal"
            } else {
                "task.state"
            };
            feed.publish(&entry.principal, kind, f);
        }
        StreamResponse::ArtifactUpdate(a) => {
            let mut f = fields(&ids);
            f.insert("artifactId".into(), json!(a.artifact.artifact_id));
            f.insert("append".into(), json!(a.append));
            f.insert("lastChunk".into(), json!(a.last_chunk));
            feed.publish(&entry.principal, "task.artifact", f);
        }
        _ => {}
    }
    entry.last_seq += 1;
    entry.events.push_back(LoggedEvent {
        seq: entry.last_seq,
        event,
    });
    if entry.events.len() > limits::TASK_EVENTS_MAX {
        entry.events.pop_front();
    }
}

fn push_history(entry: &mut Entry, message: Message) {
    entry.history.push_back(message);
    if entry.history.len() > limits::TASK_HISTORY_MAX {
        entry.history.pop_front();
    }
}

fn merge_parts(existing: &mut Artifact, chunk: &Artifact) {
    for part in &chunk.parts {
        // Consecutive text chunks join into one text part, so the stored
        // artifact reads as the program wrote it.
        match (existing.parts.last_mut(), part.as_text()) {
            (Some(last), Some(more)) if last.as_text().is_some() && part.metadata.is_none() => {
                if let crate::wire::PartContent::Text(t) = &mut last.content {
                    t.push_str(more);
                }
            }
            _ => existing.parts.push(part.clone()),
        }
    }
}

/// A copy of the task for the wire: history trimmed to the last `n`
/// (`Some(0)` = none), artifacts only when asked for and present.
fn render(entry: &Entry, history_length: Option<usize>, include_artifacts: bool) -> Task {
    let mut task = entry.task.clone();
    let keep = history_length.unwrap_or(usize::MAX).min(entry.history.len());
    if keep > 0 {
        task.history = Some(entry.history.iter().skip(entry.history.len() - keep).cloned().collect());
    }
    if include_artifacts && !entry.artifacts.is_empty() {
        task.artifacts = Some(entry.artifacts.clone());
    }
    task
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

/// Drops finished tasks past the retention time or count, oldest first.
fn prune(inner: &mut Inner, limits: &TableLimits, now: u64) {
    while let Some((at, id)) = inner.finished.front().cloned() {
        let too_many = inner.finished.len() > limits.retain_max;
        let too_old = now.saturating_sub(at) > limits.retain_ms;
        if !(too_many || too_old) {
            break;
        }
        inner.finished.pop_front();
        if let Some(gone) = inner.tasks.remove(&id) {
            // Whoever waits on it learns it is gone.
            gone.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Part, Role};

    fn table(retain_max: usize) -> TaskTable {
        TaskTable::new(
            TableLimits {
                max_running: 0,
                max_queued: 3,
                retain_max,
                retain_ms: 60_000,
            },
            Arc::new(Feed::new(16)),
        )
    }

    fn op() -> Principal {
        Principal::Unix { uid: 0, pid: 1 }
    }

    fn msg(text: &str) -> Message {
        Message {
            message_id: "m".into(),
            context_id: None,
            task_id: None,
            role: Role::User,
            parts: vec![Part::text(text)],
            metadata: None,
            extensions: vec![],
            reference_task_ids: vec![],
        }
    }

    #[test]
    fn queue_cap_refuses_without_creating() {
        let t = table(10);
        for _ in 0..3 {
            t.create(&op(), msg("x"), None).unwrap();
        }
        assert_eq!(t.create(&op(), msg("x"), None), Err(CreateError::QueueFull { max: 3 }));
        assert_eq!(t.counts(), (3, 0, 0));
    }

    #[test]
    fn finish_is_final_and_retention_is_bounded() {
        let t = table(2);
        let ids: Vec<String> = (0..3).map(|_| t.create(&op(), msg("x"), None).unwrap().id).collect();
        for id in &ids {
            t.set_progress(id, TaskState::Working, None);
            t.finish(id, TaskState::Completed, Cause::Completed, None);
            t.finish(id, TaskState::Failed, Cause::Crashed, None);
        }
        assert!(t.get(&op(), &ids[0], None).is_none(), "oldest pruned");
        let last = t.get(&op(), &ids[2], None).unwrap();
        assert_eq!(last.status.state, TaskState::Completed);
        let md = last.status.message.unwrap().metadata.unwrap();
        assert_eq!(md[TERMINAL_KEY], "completed");
    }

    #[test]
    fn appended_chunks_join() {
        let t = table(2);
        let id = t.create(&op(), msg("x"), None).unwrap().id;
        let chunk = |s: &str| Artifact {
            artifact_id: "a".into(),
            name: None,
            description: None,
            parts: vec![Part::text(s)],
            metadata: None,
            extensions: vec![],
        };
        t.add_artifact(&id, chunk("hel"), false, false);
        t.add_artifact(&id, chunk("lo"), true, true);
        let task = t.get(&op(), &id, Some(0)).unwrap();
        assert!(task.history.is_none());
        assert_eq!(task.artifacts.unwrap()[0].parts, vec![Part::text("hello")]);
    }

    #[test]
    fn cursor_round_trips_and_rejects_junk() {
        assert_eq!(decode_cursor(&encode_cursor(12, "ab-c")), Some((12, "ab-c".into())));
        assert_eq!(decode_cursor("zz"), None);
        assert_eq!(decode_cursor("abc"), None);
    }

    #[test]
    fn pages_cover_everything_once() {
        let t = TaskTable::new(
            TableLimits {
                max_running: 0,
                max_queued: 100,
                retain_max: 100,
                retain_ms: 60_000,
            },
            Arc::new(Feed::new(16)),
        );
        let mut ids: Vec<String> = (0..7).map(|_| t.create(&op(), msg("x"), None).unwrap().id).collect();
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let page = t.list(
                &op(),
                &ListQuery {
                    context_id: None,
                    status: None,
                    after_ms: None,
                    page_size: 3,
                    cursor: cursor.clone(),
                    history_length: None,
                    include_artifacts: false,
                    labels: None,
                },
            );
            assert_eq!(page.total_size, 7);
            seen.extend(page.tasks.iter().map(|t| t.id.clone()));
            if page.next_page_token.is_empty() {
                break;
            }
            cursor = decode_cursor(&page.next_page_token);
        }
        ids.sort();
        seen.sort();
        assert_eq!(ids, seen);
    }
}
