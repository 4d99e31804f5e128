//! A stream's view of one task: its event log, read through a hold on the
//! task itself (no index lookup per event).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::entry::{self, View};
use super::slot::{Interest, Slot};
use super::TaskTable;
use crate::principal::Principal;
use crate::wire::{Message, StreamResponse, Task};

/// One entry of a task's event log; `seq` increases by one per event.
#[derive(Debug, Clone)]
pub struct LoggedEvent {
    pub seq: u64,
    pub event: StreamResponse,
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
    /// The task is no longer visible (evicted).
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

/// A stream's hold on one task: reads its log without the table's index,
/// and keeps a finished task's log whole until the stream has read it.
pub struct Watch {
    slot: Arc<Slot>,
}

impl TaskTable {
    /// A stream's hold on task `id` (see [`Watch`]), if `principal` may see it.
    pub fn watch(&self, principal: &Principal, id: &str) -> Option<Watch> {
        let slot = self.visible(principal, id)?;
        slot.lock().streams += 1;
        Some(Watch { slot })
    }
}

impl Watch {
    pub fn task_id(&self) -> &str {
        &self.slot.id
    }

    /// The task now and the last event sequence it reflects.
    pub fn snapshot(&self, history_length: Option<usize>) -> (Task, u64) {
        let (view, seq) = {
            let e = self.slot.lock();
            (e.view(history_length, true), e.last_seq)
        };
        (self.slot.render(view), seq)
    }

    /// Waits (up to `timeout`) until the worker has spoken or the task
    /// ended, then says how a stream should open.
    pub fn opening(&self, timeout: Duration) -> Opening {
        self.slot.wait(
            Interest::AnyChange,
            Some(Instant::now() + timeout),
            |e| {
                if let Some(m) = e.life.reply() {
                    Some(Opening::Reply(Message::clone(m)))
                } else if e.life.has_spoken() {
                    Some(Opening::Task)
                } else if e.life.is_gone() {
                    Some(Opening::Gone)
                } else {
                    None
                }
            },
            |_| Opening::Waiting,
        )
    }

    /// Events after sequence `after`, waiting up to `timeout` for the first.
    pub fn next_events(&self, after: u64, timeout: Duration) -> Next {
        enum Got {
            Events(Vec<entry::Logged>),
            Resync(View, u64),
            Gone,
        }
        let got = self.slot.wait(
            Interest::AnyChange,
            Some(Instant::now() + timeout),
            |e| {
                if e.last_seq > after {
                    if e.oldest_seq() > after + 1 {
                        return Some(Some(Got::Resync(e.view(None, true), e.last_seq)));
                    }
                    return Some(Some(Got::Events(e.events_after(after))));
                }
                e.life.is_gone().then_some(Some(Got::Gone))
            },
            |_| None,
        );
        // The copies for the wire are made here, without the lock.
        let (id, context) = (&self.slot.id, &self.slot.context_id);
        match got {
            None => Next::Timeout,
            Some(Got::Gone) => Next::Gone,
            Some(Got::Resync(view, seq)) => Next::Resync(Box::new(self.slot.render(view)), seq),
            Some(Got::Events(events)) => Next::Events(
                events
                    .iter()
                    .map(|l| LoggedEvent {
                        seq: l.seq,
                        event: l.render(id, context),
                    })
                    .collect(),
            ),
        }
    }

    /// Whether events after `seq` are still all retained (for Last-Event-ID).
    pub fn can_replay_from(&self, seq: u64) -> bool {
        let e = self.slot.lock();
        seq <= e.last_seq && e.oldest_seq() <= seq + 1
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut e = self.slot.lock();
        e.streams = e.streams.saturating_sub(1);
        if e.streams == 0 && e.state().is_terminal() {
            e.trim_log();
        }
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Watch(task={})", self.slot.id)
    }
}
