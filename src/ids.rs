//! Opaque identifiers for tasks, contexts, messages and artifacts: random
//! UUIDv4 text from the kernel's CSPRNG, so no client can guess another's.
//!
//! A thread that makes ids all the time (a connection's, procman) may take
//! them from a batch: one getrandom(2) call for [`BATCH_IDS`] ids instead of
//! one call each (three a task, ~0.5 µs each on the per-task path). The
//! bytes are the kernel's either way.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A task's id as it travels inside agentd: the task table's own string,
/// shared. procman names a task in every event and action of its machines;
/// a clone is a reference count, not a copy of 36 bytes.
pub type TaskId = Arc<str>;

/// Hashes task ids for the maps keyed by them (the task table's index,
/// procman's start path). The keys are ids agentd drew itself (random
/// UUIDs): no client picks one that is stored, so the maps need no defence
/// against chosen collisions (std's SipHash), and FNV-1a over 36 bytes is a
/// fraction of its cost on maps looked up several times per task.
#[derive(Default, Clone, Copy)]
pub struct IdHash;

pub struct Fnv(u64);

impl std::hash::BuildHasher for IdHash {
    type Hasher = Fnv;
    fn build_hasher(&self) -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// How many ids one batch holds.
pub const BATCH_IDS: usize = 16;
const ID_BYTES: usize = 16;

/// Random bytes fetched ahead for this thread's ids; each id's are taken
/// once (`used` only grows until the next fill).
struct Batch {
    bytes: [u8; BATCH_IDS * ID_BYTES],
    used: usize,
}

thread_local! {
    static BATCH: RefCell<Option<Batch>> = const { RefCell::new(None) };
    /// Whether this thread has a batch, read before `BATCH` is borrowed: a
    /// borrow writes, and a fresh worker (which never batches) would take a
    /// copy-on-write fault of its thread's page for that write alone.
    static BATCHED: Cell<bool> = const { Cell::new(false) };
}

/// Lets this thread take its ids from batches. Only for a thread of a
/// process that never forks without exec once it has (a forked copy would
/// hand out the ids its parent will): the daemon's threads qualify, since
/// the daemon only spawns (exec) and workers are forked by the fork
/// server, a process of its own whose threads never call this.
pub fn batch_on_this_thread() {
    BATCH.with(|b| {
        let mut b = b.borrow_mut();
        if b.is_none() {
            *b = Some(Batch {
                bytes: [0; BATCH_IDS * ID_BYTES],
                used: BATCH_IDS * ID_BYTES,
            });
        }
    });
    BATCHED.with(|b| b.set(true));
}

/// Sixteen random bytes: from this thread's batch if it has one.
fn random_16() -> [u8; ID_BYTES] {
    let mut out = [0u8; ID_BYTES];
    let batched = BATCHED.with(Cell::get)
        && BATCH.with(|b| {
            let mut b = b.borrow_mut();
            let Some(batch) = b.as_mut() else { return false };
            if batch.used == batch.bytes.len() {
                if crate::sys::random_bytes(&mut batch.bytes).is_err() {
                    return false;
                }
                batch.used = 0;
            }
            out.copy_from_slice(&batch.bytes[batch.used..batch.used + ID_BYTES]);
            batch.used += ID_BYTES;
            true
        });
    if !batched && crate::sys::random_bytes(&mut out).is_err() {
        // getrandom cannot fail once the pool is initialised; if it somehow
        // does, stay unique (not unguessable) rather than fail a request.
        fallback_bytes(&mut out);
    }
    out
}

/// A fresh random UUID (version 4) in its usual hyphenated form.
pub fn new_id() -> String {
    let mut b = random_16();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    // By hand, not format!: ids are made several times per task.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(char::from(HEX[usize::from(byte >> 4)]));
        s.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    s
}

fn fallback_bytes(b: &mut [u8; 16]) {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = crate::clock::now_ms();
    b[..8].copy_from_slice(&t.to_be_bytes());
    b[8..].copy_from_slice(&(n ^ u64::from(std::process::id())).to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_v4_uuids_and_differ() {
        let a = new_id();
        let b = new_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
        let hyphens: Vec<usize> = a.match_indices('-').map(|(i, _)| i).collect();
        assert_eq!(hyphens, [8, 13, 18, 23]);
        assert!(a
            .chars()
            .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }

    #[test]
    fn a_batched_thread_hands_out_distinct_ids_across_refills() {
        let ids = std::thread::spawn(|| {
            batch_on_this_thread();
            (0..BATCH_IDS * 3 + 1).map(|_| new_id()).collect::<Vec<_>>()
        })
        .join()
        .unwrap();
        let distinct: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        assert!(ids.iter().all(|id| id.len() == 36 && &id[14..15] == "4"));
    }
}
