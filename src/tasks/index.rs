//! The table's index: id → task, the tasks counted by stage, and the
//! finished ones in the order retention drops them. Its lock is held only
//! to find, add, count or drop a task, never with a task's own lock.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::life::Stage;
use super::slot::Slot;
use super::TableLimits;
use crate::ids::IdHash;

struct Finished {
    at_ms: u64,
    slot: Arc<Slot>,
    bytes: usize,
}

#[derive(Default)]
pub(super) struct Index {
    pub tasks: HashMap<Arc<str>, Arc<Slot>, IdHash>,
    /// Finished tasks, oldest first, for retention.
    finished: VecDeque<Finished>,
    retained_bytes: usize,
    submitted: usize,
    queued_bytes: usize,
    /// Started and not finished.
    active: usize,
}

impl Index {
    /// Counts a task that entered `stage`: the one place a count grows.
    /// `bytes` is what a finished task holds.
    pub fn enter(&mut self, stage: Stage, slot: &Arc<Slot>, bytes: usize, now_ms: u64) {
        match stage {
            Stage::Queued => {
                self.submitted += 1;
                self.queued_bytes += slot.queued_bytes;
            }
            Stage::Active => self.active += 1,
            Stage::Finished => {
                self.retained_bytes += bytes;
                self.finished.push_back(Finished {
                    at_ms: now_ms,
                    slot: slot.clone(),
                    bytes,
                });
            }
        }
    }

    /// Uncounts a task that left `stage`. A finished task leaves only by
    /// eviction, which takes it out of the finished list itself.
    pub fn leave(&mut self, stage: Stage, slot: &Slot) {
        match stage {
            Stage::Queued => {
                self.submitted = self.submitted.saturating_sub(1);
                self.queued_bytes = self.queued_bytes.saturating_sub(slot.queued_bytes);
            }
            Stage::Active => self.active = self.active.saturating_sub(1),
            Stage::Finished => {}
        }
    }

    /// Tasks waiting in SUBMITTED, and the bytes of their first messages.
    pub fn queued(&self) -> (usize, usize) {
        (self.submitted, self.queued_bytes)
    }

    /// Counts of (submitted, active, finished) tasks.
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.submitted, self.active, self.finished.len())
    }

    pub fn retained_bytes(&self) -> usize {
        self.retained_bytes
    }

    /// Takes the finished tasks past the count, byte or age bound out of
    /// the index, oldest first. The caller tells them they are gone after
    /// the index lock is released (and drops them there, so freeing a big
    /// task does not hold the index).
    pub fn evict(&mut self, l: &TableLimits, now_ms: u64) -> Vec<Arc<Slot>> {
        let mut out = Vec::new();
        while let Some(oldest) = self.finished.front() {
            let over = self.finished.len() > l.retain_max
                || self.retained_bytes > l.retain_bytes
                || now_ms.saturating_sub(oldest.at_ms) > l.retain_ms;
            if !over {
                break;
            }
            let Some(f) = self.finished.pop_front() else { break };
            self.retained_bytes = self.retained_bytes.saturating_sub(f.bytes);
            if self.tasks.remove(&f.slot.id).is_some() {
                log::debug!("tasks.evicted task={} bytes={}", f.slot.id, f.bytes);
                out.push(f.slot);
            }
        }
        out
    }

    /// How long until the oldest finished task is past `retain_ms`.
    pub fn next_due(&self, retain_ms: u64, now_ms: u64) -> Option<Duration> {
        self.finished.front().map(|f| {
            let due = f.at_ms.saturating_add(retain_ms).saturating_add(1);
            Duration::from_millis(due.saturating_sub(now_ms))
        })
    }
}
