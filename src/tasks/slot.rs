//! One task as the table holds it: what never changes outside its lock
//! (ids, principal, trace), its [`Entry`] behind its own lock, and the two
//! condvars its waiters sleep on.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use super::entry::{Entry, View};
use super::About;
use crate::trace::TraceContext;
use crate::wire::Task;

pub(super) struct Slot {
    /// Shared, not copied: every record of the events feed names them.
    pub id: Arc<str>,
    pub context_id: Arc<str>,
    pub principal: Arc<str>,
    /// Bytes of the first message, counted against queued_max_bytes while
    /// the task waits in SUBMITTED.
    pub queued_bytes: usize,
    /// The W3C trace context of the request that created it (set once,
    /// right after creation, before procman hears of the task).
    pub trace: OnceLock<TraceContext>,
    entry: Mutex<Entry>,
    /// Notified on every change, for streams (every event counts).
    changed: Condvar,
    /// Notified only when the task settles (see `TaskLife::is_settled`), for
    /// blocking calls: a blocked SendMessage sleeps through WORKING and
    /// every artifact instead of waking for each.
    settled: Condvar,
    /// Threads asleep on each condvar, counted under the task's lock: a
    /// change nobody waits for wakes nobody (no futex call).
    waiting_changed: AtomicUsize,
    waiting_settled: AtomicUsize,
}

/// What a waiter wakes for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Interest {
    AnyChange,
    Settled,
}

impl Slot {
    pub fn new(id: Arc<str>, context_id: Arc<str>, principal: Arc<str>, queued_bytes: usize, entry: Entry) -> Slot {
        Slot {
            id,
            context_id,
            principal,
            queued_bytes,
            trace: OnceLock::new(),
            entry: Mutex::new(entry),
            changed: Condvar::new(),
            settled: Condvar::new(),
            waiting_changed: AtomicUsize::new(0),
            waiting_settled: AtomicUsize::new(0),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Entry> {
        // A panic while holding the lock leaves consistent-enough data
        // (every mutation is a few assignments); keep serving.
        self.entry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The one way a task changes: `f` runs under the task's lock; when it
    /// returns `Ok`, whoever waits on this task is woken, once, after the
    /// lock is released.
    pub fn change<R, E>(&self, f: impl FnOnce(&mut Entry) -> Result<R, E>) -> Result<R, E> {
        let mut entry = self.lock();
        let out = f(&mut entry);
        let (watch, settle) = match out {
            Ok(_) => (
                self.waiting_changed.load(Ordering::Relaxed) > 0,
                self.waiting_settled.load(Ordering::Relaxed) > 0 && entry.life.is_settled(),
            ),
            Err(_) => (false, false),
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

    pub fn may_see(&self, principal: &crate::principal::Principal) -> bool {
        principal.is_operator() || principal.is_named(&self.principal)
    }

    /// Its names, as observers get them.
    pub fn about(&self) -> About<'_> {
        About {
            principal: &self.principal,
            task_id: &self.id,
            context_id: &self.context_id,
        }
    }

    /// Waits on this task's condvar for `interest` until `ready` returns
    /// something or `deadline` passes (then `timeout` gives the answer).
    pub fn wait<R>(
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
                Interest::AnyChange => (&self.changed, &self.waiting_changed),
                Interest::Settled => (&self.settled, &self.waiting_settled),
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

    /// The task for the wire, from a view taken under the lock (the deep
    /// copy is made here, without it).
    pub fn render(&self, view: View) -> Task {
        view.render(&self.id, &self.context_id)
    }
}
