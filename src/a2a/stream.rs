//! Streaming methods: which events a stream carries, in which order, and
//! when it ends. The events come from the task table's per-task log; the
//! bytes go to a sink the server provides (SSE over chunked HTTP), so this
//! module does no I/O itself.
//!
//! ```text
//! SendStreamingMessage   task(snapshot at creation) ─▶ statusUpdate/artifactUpdate… ─▶
//!                        ends after a terminal or interrupted status (the turn is over)
//!                        or: one `message` event when the agent replies directly
//! SubscribeToTask        task(snapshot now) ─▶ events… ─▶ ends after a terminal status
//!   with Last-Event-ID   the retained events after that sequence, no snapshot
//! ```

use std::time::Duration;

use crate::ext::events::Emit;
use crate::tasks::{Next, Opening, Watch};
use crate::wire::{Message, StreamResponse, Task, TaskState};

/// When a stream is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The agent's turn ended: terminal, or waiting on the client.
    TurnEnd,
    /// The task is finished.
    Terminal,
}

impl Until {
    fn reached(self, state: TaskState) -> bool {
        match self {
            Until::TurnEnd => state.is_terminal() || state.is_interrupted(),
            Until::Terminal => state.is_terminal(),
        }
    }
}

/// How a stream begins.
#[derive(Debug)]
pub enum Start {
    /// With this snapshot (taken at sequence `seq`). With `may_reply`, the
    /// agent may still answer with a direct Message, so wait until it has
    /// spoken before committing to a task stream.
    Snapshot { task: Task, seq: u64, may_reply: bool },
    /// Replaying the retained events after `seq` (Last-Event-ID).
    Replay { seq: u64 },
    /// No task: the whole stream is this one message (a command's reply).
    Reply(Message),
}

/// A stream the server should open.
#[derive(Debug)]
pub struct Plan {
    /// The task streamed (taken before the task could move, so none of its
    /// events is trimmed away before the stream reads it); `None` for a
    /// stream that is one reply.
    pub watch: Option<Watch>,
    pub start: Start,
    pub until: Until,
}

impl Plan {
    pub fn task_id(&self) -> &str {
        self.watch.as_ref().map_or("", Watch::task_id)
    }
}

/// Runs a stream to its end. A sink error (the client went away) ends only
/// this stream; the task and every other stream go on.
pub fn pump(plan: Plan, keepalive: Duration, sink: &mut dyn FnMut(Emit) -> std::io::Result<()>) -> std::io::Result<()> {
    if let Start::Reply(m) = plan.start {
        return sink(message_event(m));
    }
    let Some(watch) = plan.watch else {
        return Ok(());
    };
    let mut seq = match plan.start {
        Start::Snapshot { task, seq, may_reply } => {
            if may_reply {
                loop {
                    match watch.opening(keepalive) {
                        Opening::Reply(m) => return sink(message_event(m)),
                        Opening::Task => break,
                        Opening::Waiting => sink(Emit::KeepAlive)?,
                        Opening::Gone => return Ok(()),
                    }
                }
            }
            let state = task.status.state;
            sink(event(Some(seq), StreamResponse::Task(task)))?;
            if plan.until.reached(state) {
                return Ok(());
            }
            seq
        }
        Start::Replay { seq } => seq,
        Start::Reply(_) => return Ok(()),
    };
    loop {
        match watch.next_events(seq, keepalive) {
            Next::Events(events) => {
                for e in events {
                    seq = e.seq;
                    let ends =
                        matches!(&e.event, StreamResponse::StatusUpdate(s) if plan.until.reached(s.status.state));
                    sink(event(Some(e.seq), e.event))?;
                    if ends {
                        return Ok(());
                    }
                }
            }
            Next::Resync(task, at) => {
                // Fell behind the retained log: a fresh snapshot instead of
                // the events that are gone.
                crate::metrics::task_stream_resynced();
                seq = at;
                let state = task.status.state;
                sink(event(Some(at), StreamResponse::Task(*task)))?;
                if plan.until.reached(state) {
                    return Ok(());
                }
            }
            Next::Timeout => sink(Emit::KeepAlive)?,
            Next::Gone => return Ok(()),
        }
    }
}

fn message_event(m: Message) -> Emit {
    event(None, StreamResponse::Message(m))
}

fn event(seq: Option<u64>, r: StreamResponse) -> Emit {
    Emit::Response(seq, Box::new(r))
}
