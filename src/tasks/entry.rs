//! One task's state as the table holds it, behind that task's own lock.
//!
//! Nothing here is copied twice: an artifact is the list of chunks the
//! worker sent (`Arc`s), and the event log points at the same chunks and
//! the same status. Taking a view under the lock is reference counting
//! only; the deep copy for the wire (joining chunks, cloning text) is made
//! by `View::render` after the lock is released.
//!
//! Sizes are estimates from what is stored (text and data bytes plus the
//! struct overhead of each part, message, artifact and event), so the
//! retention budget tracks what a finished task really holds without
//! rendering it.

use std::collections::{HashMap, VecDeque};
use std::mem::size_of;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::life::TaskLife;
use crate::cost::{Cost, COST_KEY};
use crate::limits;
use crate::wire::{
    Artifact, Message, Part, PartContent, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent,
};

/// Up to this many artifacts are found by their ids one by one; past it
/// through an index.
pub(super) const ARTIFACTS_SCANNED: usize = 8;

/// One artifact: its first chunk (name, description, metadata and first
/// parts) and the chunks appended to it, joined only when rendered.
#[derive(Clone)]
pub(super) struct Stored {
    pub chunks: Vec<Arc<Artifact>>,
    bytes: usize,
}

/// An event in a task's log, sharing its bytes with the task.
#[derive(Clone)]
pub(super) enum Body {
    /// A status, and with the terminal one what the task cost.
    Status(Arc<TaskStatus>, Option<Cost>),
    Artifact {
        chunk: Arc<Artifact>,
        append: bool,
        last_chunk: bool,
    },
}

#[derive(Clone)]
pub(super) struct Logged {
    pub seq: u64,
    pub body: Body,
}

impl Logged {
    /// The wire event (a deep copy: call it without the task's lock).
    pub fn render(&self, task_id: &str, context_id: &str) -> StreamResponse {
        match &self.body {
            Body::Status(status, cost) => StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: task_id.to_string(),
                context_id: context_id.to_string(),
                status: TaskStatus::clone(status),
                metadata: with_cost(None, *cost),
            }),
            Body::Artifact {
                chunk,
                append,
                last_chunk,
            } => StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: task_id.to_string(),
                context_id: context_id.to_string(),
                artifact: Arc::clone(chunk),
                append: *append,
                last_chunk: *last_chunk,
                metadata: None,
            }),
        }
    }
}

pub(super) struct Entry {
    pub status: Arc<TaskStatus>,
    pub status_ms: u64,
    pub metadata: Option<Arc<Map<String, Value>>>,
    history: VecDeque<Arc<Message>>,
    history_bytes: usize,
    artifacts: Vec<Arc<Stored>>,
    /// Artifact id → its place in `artifacts`, made once there are more
    /// than [`ARTIFACTS_SCANNED`]: an append is a lookup. Most tasks have
    /// one artifact, found by a look at it; a map for it was two
    /// allocations and a hash per task, freed again when the task goes.
    by_id: HashMap<String, usize>,
    artifact_bytes: usize,
    events: VecDeque<Logged>,
    pub last_seq: u64,
    /// Where the task is in the A2A model (its rules: `life::step`).
    pub life: TaskLife,
    /// Streams reading the log; a finished task trims its log when none is.
    pub streams: usize,
    /// What the task cost, once it ended having run.
    pub cost: Option<Cost>,
}

/// What a reader takes under the lock: reference counts only.
pub(super) struct View {
    pub status: Arc<TaskStatus>,
    pub metadata: Option<Arc<Map<String, Value>>>,
    pub cost: Option<Cost>,
    pub history: Vec<Arc<Message>>,
    pub artifacts: Vec<Arc<Stored>>,
}

impl View {
    /// About how many bytes the task's JSON takes (what it holds, before
    /// escaping): what a buffer for it starts with, so that a large output
    /// is not copied over and over as the buffer grows.
    pub fn json_bytes_hint(&self) -> usize {
        let artifacts: usize = self.artifacts.iter().map(|s| s.bytes).sum();
        let history: usize = self.history.iter().map(|m| message_bytes(m)).sum();
        artifacts + history
    }

    /// The task for the wire.
    pub fn render(self, id: &str, context_id: &str) -> Task {
        let history: Vec<Message> = self.history.iter().map(|m| Message::clone(m)).collect();
        let artifacts: Vec<Artifact> = self.artifacts.iter().map(|s| s.render()).collect();
        Task {
            id: id.to_string(),
            context_id: context_id.to_string(),
            status: TaskStatus::clone(&self.status),
            artifacts: Some(artifacts).filter(|a| !a.is_empty()),
            history: Some(history).filter(|h| !h.is_empty()),
            metadata: with_cost(self.metadata.map(Arc::unwrap_or_clone), self.cost),
        }
    }
}

/// The task's metadata with its cost under [`COST_KEY`]: agentd's own key,
/// so whatever a client sent under it is not kept.
fn with_cost(metadata: Option<Map<String, Value>>, cost: Option<Cost>) -> Option<Map<String, Value>> {
    match (metadata, cost) {
        (md, Some(c)) => {
            let mut md = md.unwrap_or_default();
            md.insert(COST_KEY.to_string(), c.to_json());
            Some(md)
        }
        (Some(mut md), None) => {
            md.remove(COST_KEY);
            Some(md).filter(|m| !m.is_empty())
        }
        (None, None) => None,
    }
}

impl Stored {
    fn new(chunk: Arc<Artifact>) -> Stored {
        Stored {
            bytes: artifact_bytes(&chunk),
            chunks: vec![chunk],
        }
    }

    /// Its id: its first chunk's.
    fn artifact_id(&self) -> &str {
        self.chunks.first().map_or("", |c| c.artifact_id.as_str())
    }

    /// The artifact, its chunks joined (a copy).
    pub fn render(&self) -> Artifact {
        let mut chunks = self.chunks.iter();
        let mut out = chunks.next().map(|c| Artifact::clone(c)).unwrap_or_else(|| Artifact {
            artifact_id: String::new(),
            name: None,
            description: None,
            parts: Vec::new(),
            metadata: None,
            extensions: Vec::new(),
        });
        for chunk in chunks {
            merge_parts(&mut out, chunk);
        }
        out
    }
}

impl Entry {
    pub fn new(status: TaskStatus, status_ms: u64, first: Message, metadata: Option<Map<String, Value>>) -> Entry {
        let mut entry = Entry {
            status: Arc::new(status),
            status_ms,
            metadata: metadata.map(Arc::new),
            history: VecDeque::new(),
            history_bytes: 0,
            artifacts: Vec::new(),
            by_id: HashMap::new(),
            artifact_bytes: 0,
            events: VecDeque::new(),
            last_seq: 0,
            life: TaskLife::Queued,
            streams: 0,
            cost: None,
        };
        entry.push_history(Arc::new(first));
        entry
    }

    pub fn state(&self) -> TaskState {
        self.life.state()
    }

    pub fn first_message(&self) -> Option<Arc<Message>> {
        self.history.front().cloned()
    }

    /// A new status, logged as an event; returns it (for notices).
    pub fn set_status(&mut self, status: TaskStatus, now_ms: u64) -> Arc<TaskStatus> {
        self.status_ms = now_ms;
        self.status = Arc::new(status);
        // The cost is set before the terminal status: a stream's last
        // event says it too.
        let cost = self.cost.filter(|_| self.status.state.is_terminal());
        self.log(Body::Status(self.status.clone(), cost));
        self.status.clone()
    }

    /// Adds an artifact or a chunk of one: `append` extends the artifact
    /// with the same id (or starts it); otherwise it is added or replaced.
    pub fn add_artifact(&mut self, chunk: Arc<Artifact>, append: bool, last_chunk: bool) {
        match self.artifact_at(&chunk.artifact_id) {
            Some(at) => {
                let stored = Arc::make_mut(&mut self.artifacts[at]);
                let bytes = artifact_bytes(&chunk);
                self.artifact_bytes -= stored.bytes;
                if append {
                    stored.chunks.push(chunk.clone());
                    stored.bytes += bytes;
                } else {
                    *stored = Stored::new(chunk.clone());
                }
                self.artifact_bytes += stored.bytes;
            }
            None => {
                let stored = Stored::new(chunk.clone());
                self.artifact_bytes += stored.bytes;
                self.artifacts.push(Arc::new(stored));
                if self.artifacts.len() > ARTIFACTS_SCANNED {
                    // The index holds the first artifacts, one each: the
                    // rest join it (the first time, all of them).
                    for (at, stored) in self.artifacts.iter().enumerate().skip(self.by_id.len()) {
                        self.by_id.insert(stored.artifact_id().to_string(), at);
                    }
                }
            }
        }
        self.log(Body::Artifact {
            chunk,
            append,
            last_chunk,
        });
    }

    /// Where the artifact with this id is in `artifacts`.
    fn artifact_at(&self, artifact_id: &str) -> Option<usize> {
        if self.artifacts.len() > ARTIFACTS_SCANNED {
            return self.by_id.get(artifact_id).copied();
        }
        self.artifacts.iter().position(|s| s.artifact_id() == artifact_id)
    }

    /// Appends to the history, dropping the oldest messages past
    /// TASK_HISTORY_MAX messages or TASK_HISTORY_MAX_BYTES (the newest one
    /// always stays).
    pub fn push_history(&mut self, message: Arc<Message>) {
        self.history_bytes += message_bytes(&message);
        self.history.push_back(message);
        while self.history.len() > 1
            && (self.history.len() > limits::TASK_HISTORY_MAX || self.history_bytes > limits::TASK_HISTORY_MAX_BYTES)
        {
            if let Some(old) = self.history.pop_front() {
                self.history_bytes -= message_bytes(&old);
            }
        }
    }

    fn log(&mut self, body: Body) {
        self.last_seq += 1;
        self.events.push_back(Logged {
            seq: self.last_seq,
            body,
        });
        if self.events.len() > limits::TASK_EVENTS_MAX {
            self.events.pop_front();
        }
    }

    /// The sequence of the oldest event still in the log.
    pub fn oldest_seq(&self) -> u64 {
        self.events.front().map_or(self.last_seq + 1, |e| e.seq)
    }

    /// The logged events after `after` (reference counts only).
    pub fn events_after(&self, after: u64) -> Vec<Logged> {
        let skip = after.saturating_sub(self.oldest_seq().saturating_sub(1)) as usize;
        self.events.iter().skip(skip).cloned().collect()
    }

    /// A finished task keeps of its log only the final status: everything
    /// a late reader can use (one further behind gets a snapshot). The
    /// log's room for the others goes too: a retained task would otherwise
    /// hold it until it is dropped, several hundred bytes each.
    pub fn trim_log(&mut self) {
        while self.events.len() > 1 {
            self.events.pop_front();
        }
        self.events.shrink_to_fit();
    }

    pub fn view(&self, history_length: Option<usize>, include_artifacts: bool) -> View {
        let keep = history_length.unwrap_or(usize::MAX).min(self.history.len());
        View {
            status: self.status.clone(),
            metadata: self.metadata.clone(),
            cost: self.cost,
            history: self.history.iter().skip(self.history.len() - keep).cloned().collect(),
            artifacts: if include_artifacts {
                self.artifacts.clone()
            } else {
                Vec::new()
            },
        }
    }

    /// Estimated bytes this task holds (see the module comment). A
    /// finished task is charged for its trimmed log, even while a stream
    /// that is still reading keeps the rest a little longer.
    pub fn bytes(&self) -> usize {
        let events = if self.state().is_terminal() {
            self.events.len().min(1)
        } else {
            self.events.len()
        };
        // The agent's status message is the last one in the history, shared.
        let shared = |m: &Arc<Message>| self.history.back().is_some_and(|h| Arc::ptr_eq(h, m));
        let status = match &self.status.message {
            Some(m) if !shared(m) => message_bytes(m),
            _ => 0,
        };
        let metadata = self.metadata.as_deref().map_or(0, map_bytes);
        let index = self
            .by_id
            .keys()
            .map(|k| k.len() + size_of::<(String, usize)>())
            .sum::<usize>();
        size_of::<Entry>()
            + status
            + metadata
            + self.history_bytes
            + self.artifact_bytes
            + index
            + events * size_of::<Logged>()
    }

    #[cfg(test)]
    pub fn events_len(&self) -> usize {
        self.events.len()
    }

    #[cfg(test)]
    pub fn by_id_len(&self) -> usize {
        self.by_id.len()
    }

    #[cfg(test)]
    pub fn position_of(&self, artifact_id: &str) -> Option<usize> {
        self.artifact_at(artifact_id)
    }
}

/// Joins a chunk's parts onto an artifact: consecutive text chunks become
/// one text part, so the stored artifact reads as the program wrote it.
pub(super) fn merge_parts(existing: &mut Artifact, chunk: &Artifact) {
    for part in &chunk.parts {
        match (existing.parts.last_mut(), part.as_text()) {
            (Some(last), Some(more)) if last.as_text().is_some() && part.metadata.is_none() => {
                if let PartContent::Text(t) = &mut last.content {
                    t.push_str(more);
                }
            }
            _ => existing.parts.push(part.clone()),
        }
    }
}

pub(super) fn message_bytes(m: &Message) -> usize {
    size_of::<Message>()
        + m.message_id.len()
        + m.context_id.as_ref().map_or(0, String::len)
        + m.task_id.as_ref().map_or(0, String::len)
        + m.parts.iter().map(part_bytes).sum::<usize>()
        + m.metadata.as_ref().map_or(0, map_bytes)
        + m.extensions
            .iter()
            .chain(&m.reference_task_ids)
            .map(String::len)
            .sum::<usize>()
}

fn artifact_bytes(a: &Artifact) -> usize {
    size_of::<Artifact>()
        + a.artifact_id.len()
        + a.name.as_ref().map_or(0, String::len)
        + a.description.as_ref().map_or(0, String::len)
        + a.parts.iter().map(part_bytes).sum::<usize>()
        + a.metadata.as_ref().map_or(0, map_bytes)
        + a.extensions.iter().map(String::len).sum::<usize>()
}

fn part_bytes(p: &Part) -> usize {
    let content = match &p.content {
        PartContent::Text(s) | PartContent::Raw(s) | PartContent::Url(s) => s.len(),
        PartContent::Data(v) => value_bytes(v),
    };
    size_of::<Part>()
        + content
        + p.metadata.as_ref().map_or(0, map_bytes)
        + p.filename.as_ref().map_or(0, String::len)
        + p.media_type.as_ref().map_or(0, String::len)
}

fn map_bytes(m: &Map<String, Value>) -> usize {
    m.iter()
        .map(|(k, v)| k.len() + size_of::<String>() + value_bytes(v))
        .sum()
}

fn value_bytes(v: &Value) -> usize {
    size_of::<Value>()
        + match v {
            Value::String(s) => s.len(),
            Value::Array(items) => items.iter().map(value_bytes).sum(),
            Value::Object(m) => map_bytes(m),
            _ => 0,
        }
}
