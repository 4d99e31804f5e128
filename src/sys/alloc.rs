//! The global allocator: libc's malloc behind a small cache of freed
//! blocks per size class.
//!
//! Why: musl's malloc (mallocng) is built for hardening, not speed — every
//! call checks its out-of-band metadata and takes one process-wide lock.
//! Under load (16 clients, one core) malloc and free were ~15% of the core
//! (measured with perf on the static build), fed by the JSON trees and
//! strings of every request, frame and event. Small blocks now go back to
//! a per-class LIFO list and come off it again: a lock word and two
//! pointer moves. Anything larger than the biggest class, or aligned
//! beyond 16, goes straight to libc, as before.
//!
//! Bounds: at most CLASS_KEEP_BYTES are kept per class (past that a freed
//! block goes back to libc), so the cache holds < 1 MiB however bursty the
//! load. Blocks are carved by libc with one fixed layout per class and
//! returned to it with that layout. A lock per class: a spin, then
//! sched_yield (a holder preempted on a one-core machine gets the core
//! back). Nothing here allocates, uses thread-locals or can panic.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

/// The size classes, in bytes: a request is served from the smallest class
/// that holds it.
const CLASSES: [usize; 12] = [16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024];
/// The alignment every class block has (what malloc guarantees on 64-bit
/// Linux); a request aligned beyond it goes to libc.
const CLASS_ALIGN: usize = 16;
/// Most bytes of freed blocks kept per class.
const CLASS_KEEP_BYTES: usize = 64 * 1024;

/// The smallest class that holds `size` bytes at `align`, if any.
fn class_of(size: usize, align: usize) -> Option<usize> {
    if align > CLASS_ALIGN {
        return None;
    }
    CLASSES.iter().position(|&c| size <= c)
}

/// One class's free list, threaded through the free blocks themselves.
struct FreeList {
    locked: AtomicBool,
    head: std::cell::UnsafeCell<*mut FreeBlock>,
    count: std::cell::UnsafeCell<usize>,
}

struct FreeBlock {
    next: *mut FreeBlock,
}

// SAFETY: `head` and `count` are only touched between lock() and unlock(),
// which order every access (Acquire/Release on `locked`).
unsafe impl Sync for FreeList {}

impl FreeList {
    const fn new() -> FreeList {
        FreeList {
            locked: AtomicBool::new(false),
            head: std::cell::UnsafeCell::new(ptr::null_mut()),
            count: std::cell::UnsafeCell::new(0),
        }
    }

    fn lock(&self) {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                // SAFETY: sched_yield takes nothing and cannot fail here.
                unsafe { libc::sched_yield() };
            }
        }
    }

    fn unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }

    /// A cached block, or null.
    fn pop(&self) -> *mut u8 {
        self.lock();
        // SAFETY: under the lock; a non-null head is a free block we own,
        // whose first word is the next free block (written by push).
        let block = unsafe {
            let head = *self.head.get();
            if !head.is_null() {
                *self.head.get() = (*head).next;
                *self.count.get() -= 1;
            }
            head
        };
        self.unlock();
        block as *mut u8
    }

    /// Keeps `block` unless the class is full; false = the caller frees it.
    fn push(&self, block: *mut u8, keep: usize) -> bool {
        self.lock();
        // SAFETY: under the lock; `block` is a block of this class no one
        // else uses any more (it was freed), at least 16 bytes, 16-aligned.
        let kept = unsafe {
            if *self.count.get() < keep {
                let b = block as *mut FreeBlock;
                (*b).next = *self.head.get();
                *self.head.get() = b;
                *self.count.get() += 1;
                true
            } else {
                false
            }
        };
        self.unlock();
        kept
    }
}

static LISTS: [FreeList; CLASSES.len()] = [const { FreeList::new() }; CLASSES.len()];

/// The global allocator of the static (musl) binary (installed in main.rs).
pub struct CachingAlloc;

fn class_layout(class: usize) -> Layout {
    // SAFETY: every class size is a non-zero multiple of CLASS_ALIGN, a
    // power of two.
    unsafe { Layout::from_size_align_unchecked(CLASSES[class], CLASS_ALIGN) }
}

// SAFETY: every block handed out is either libc's for the caller's layout,
// or a libc block of a class layout that holds the request (size and
// alignment) and that nobody else holds: it came off a free list, where
// only dealloc puts blocks of that class.
unsafe impl GlobalAlloc for CachingAlloc {
    // Out of line: inlined at every allocation site it grew the binary by
    // 150 KiB and measured slower.
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match class_of(layout.size(), layout.align()) {
            Some(class) => {
                let block = LISTS[class].pop();
                if !block.is_null() {
                    return block;
                }
                // SAFETY: a valid non-zero layout.
                unsafe { System.alloc(class_layout(class)) }
            }
            // SAFETY: the caller's layout, as GlobalAlloc requires.
            None => unsafe { System.alloc(layout) },
        }
    }

    // Out of line: inlined at every allocation site it grew the binary by
    // 150 KiB and measured slower.
    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match class_of(layout.size(), layout.align()) {
            Some(class) => {
                if !LISTS[class].push(ptr, CLASS_KEEP_BYTES / CLASSES[class]) {
                    // SAFETY: `ptr` was allocated with this class's layout.
                    unsafe { System.dealloc(ptr, class_layout(class)) }
                }
            }
            // SAFETY: `ptr` came from System.alloc with this layout.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    // Out of line: inlined at every allocation site it grew the binary by
    // 150 KiB and measured slower.
    #[inline(never)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match class_of(layout.size(), layout.align()) {
            Some(_) => {
                // SAFETY: as alloc.
                let block = unsafe { self.alloc(layout) };
                if !block.is_null() {
                    // SAFETY: the block holds at least layout.size() bytes.
                    unsafe { ptr::write_bytes(block, 0, layout.size()) };
                }
                block
            }
            // SAFETY: the caller's layout; calloc's zeroed pages come free.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    // Out of line: inlined at every allocation site it grew the binary by
    // 150 KiB and measured slower.
    #[inline(never)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = class_of(layout.size(), layout.align());
        let new = class_of(new_size, layout.align());
        match (old, new) {
            // Big to big: libc may grow it in place (mremap).
            // SAFETY: `ptr` came from System with `layout`.
            (None, None) => unsafe { System.realloc(ptr, layout, new_size) },
            (Some(a), Some(b)) if a == b => ptr,
            _ => {
                // SAFETY: new_size is non-zero and, rounded to the alignment,
                // does not overflow (GlobalAlloc::realloc's contract).
                let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                // SAFETY: as alloc.
                let moved = unsafe { self.alloc(new_layout) };
                if !moved.is_null() {
                    // SAFETY: both blocks hold the bytes copied and do not
                    // overlap; the old one is then freed with its layout.
                    unsafe {
                        ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                moved
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The type itself, called directly: it is installed only in the static
    //! binary (main.rs), never in test builds. The free lists are global, so
    //! each test keeps to classes no other test uses.
    use super::*;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 8).unwrap()
    }

    /// Blocks kept in `class` right now.
    fn kept(class: usize) -> usize {
        let list = &LISTS[class];
        list.lock();
        // SAFETY: under the lock.
        let n = unsafe { *list.count.get() };
        list.unlock();
        n
    }

    #[test]
    fn requests_go_to_the_smallest_class_that_holds_them() {
        assert_eq!(class_of(1, 1), Some(0));
        assert_eq!(class_of(16, 8), Some(0));
        assert_eq!(class_of(17, 8), Some(1));
        assert_eq!(class_of(1024, 16), Some(CLASSES.len() - 1));
        assert_eq!(class_of(1025, 8), None, "bigger than every class");
        assert_eq!(class_of(64, 32), None, "aligned beyond the classes");
    }

    #[test]
    fn a_freed_block_is_the_next_one_handed_out_and_zeroed_when_asked() {
        let a = CachingAlloc;
        let l = layout(700); // the 768-byte class
                             // SAFETY: a valid layout; every block is freed with the layout it
                             // was allocated with.
        unsafe {
            let first = a.alloc(l);
            ptr::write_bytes(first, 0xAB, 700);
            a.dealloc(first, l);
            let again = a.alloc(l);
            assert_eq!(again, first, "LIFO: the block just freed comes back");
            a.dealloc(again, l);
            let zeroed = a.alloc_zeroed(l);
            assert_eq!(zeroed, first);
            assert!(
                (0..700).all(|i| *zeroed.add(i) == 0),
                "alloc_zeroed zeroes a reused block"
            );
            a.dealloc(zeroed, l);
        }
    }

    #[test]
    fn a_full_class_gives_blocks_back_to_libc() {
        let a = CachingAlloc;
        let l = layout(500); // the 512-byte class
        let class = class_of(500, 8).unwrap();
        let keep = CLASS_KEEP_BYTES / CLASSES[class];
        // SAFETY: as above.
        unsafe {
            let blocks: Vec<*mut u8> = (0..keep + 50).map(|_| a.alloc(l)).collect();
            assert!(blocks.iter().all(|b| !b.is_null()));
            for b in &blocks {
                a.dealloc(*b, l);
            }
            assert_eq!(kept(class), keep, "the cache is bounded");
            let again: Vec<*mut u8> = (0..keep).map(|_| a.alloc(l)).collect();
            assert_eq!(kept(class), 0);
            for b in again {
                a.dealloc(b, l);
            }
        }
    }

    #[test]
    fn realloc_keeps_the_bytes_across_classes_and_into_libc() {
        let a = CachingAlloc;
        // SAFETY: as above; each pointer is used only with its current size.
        unsafe {
            let l = Layout::from_size_align(1000, 16).unwrap(); // 1024 class
            let p = a.alloc(l);
            for i in 0..1000 {
                *p.add(i) = (i % 251) as u8;
            }
            let same = a.realloc(p, l, 1020);
            assert_eq!(same, p, "within its class it stays put");
            let big = a.realloc(same, Layout::from_size_align(1020, 16).unwrap(), 100_000);
            assert!((0..1000).all(|i| *big.add(i) == (i % 251) as u8));
            a.dealloc(big, Layout::from_size_align(100_000, 16).unwrap());
        }
    }

    #[test]
    fn blocks_survive_many_threads_freeing_each_others() {
        // Blocks made on one thread are freed on another (as a task's JSON
        // moves from procman to a connection thread) and reused: each
        // carries its own pattern, checked before it is freed. Sizes up to
        // the 384-byte class and beyond every class (the other tests use
        // the larger classes).
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<(usize, usize)>>(64);
        let makers: Vec<_> = (0..4u8)
            .map(|t| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for round in 0..2_000usize {
                        let batch: Vec<(usize, usize)> = (1..40usize)
                            .map(|i| {
                                let n = (i * 29 + round) % 384 + 1;
                                let n = if i % 7 == 0 { n + 2000 } else { n };
                                let fill = t.wrapping_mul(31).wrapping_add(i as u8);
                                // SAFETY: a valid layout; the block is ours.
                                let p = unsafe { CachingAlloc.alloc(layout(n)) };
                                assert!(!p.is_null());
                                // SAFETY: the block holds n bytes.
                                unsafe { ptr::write_bytes(p, fill, n) };
                                (p as usize, n)
                            })
                            .collect();
                        tx.send(batch).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let mut seen = 0;
        for batch in rx {
            for (p, n) in batch {
                let p = p as *mut u8;
                // SAFETY: the maker wrote n bytes there and handed it over.
                let bytes = unsafe { std::slice::from_raw_parts(p, n) };
                assert!(bytes.iter().all(|b| *b == bytes[0]), "a block was reused while held");
                // SAFETY: freed once, with its layout.
                unsafe { CachingAlloc.dealloc(p, layout(n)) };
                seen += 1;
            }
        }
        for m in makers {
            m.join().unwrap();
        }
        assert_eq!(seen, 4 * 2_000 * 39);
    }
}
