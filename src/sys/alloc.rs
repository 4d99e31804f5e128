//! The global allocator: libc's malloc behind a small cache of freed
//! blocks per size class.
//!
//! Why: musl's malloc (mallocng) is built for hardening, not speed — every
//! call checks its out-of-band metadata and takes one process-wide lock.
//! Under load (16 clients, one core) malloc and free were ~15% of the core
//! (measured with perf on the static build), fed by the JSON trees and
//! strings of every request, frame and event. Small blocks now go back to
//! a per-class LIFO list and come off it again: a lock word and two
//! pointer moves. The small classes reach 8 KiB, a quarter apart above
//! 1 KiB: three blocks a connection takes for every request (the header
//! array it parses the head into, 2 KiB; the answer, about 3 KiB; the
//! response, about 1.4 KiB) went to musl, and musl mapped and unmapped a
//! fresh group for them about one request in seven. Anything between the
//! small and the large classes (above 8 KiB, up to 32 KiB), larger than
//! the biggest class, or aligned beyond 16, goes straight to libc.
//!
//! Bounds: at most CLASS_KEEP_BYTES are kept per class (past that a freed
//! block goes back to libc), so the small classes hold at most 1.5 MiB
//! however bursty the load.
//!
//! The large classes, 40 KiB to 1 MiB a quarter apart, take requests of
//! more than 32 KiB: chiefly the chunks of a program's output (each read
//! into a buffer of its own, which the task then keeps: 64 KiB from the
//! text runner, a line's text from the jsonl runner). musl gives blocks
//! that large back to the kernel when they are freed, so a large output's
//! chunks were faulted in page by page, and the chunks of the task dropped
//! to make room for it unmapped, for every large task: ~12,900 faults for
//! 50 MB. The large classes keep up to LARGE_KEEP_BYTES of freed blocks
//! (64 MiB, all of them together), so the next large output fills the
//! pages the last dropped one left. They are given back to libc once none
//! has been taken for a while ([`release_large_blocks`], called by procman
//! when large outputs stopped coming): an idle daemon does not sit on them.
//! A task worker keeps none (it has no procman to give them back).
//!
//! Blocks are carved by libc with one fixed layout per class and
//! returned to it with that layout. A lock per class that is never waited
//! for: a thread that finds a class's list busy takes its block from libc
//! (or gives it back there) at once, so no thread spins or yields inside
//! the allocator, where a connection thread under SCHED_BATCH could hold
//! up the one it waits for. Nothing here allocates, uses thread-locals or
//! can panic.
//!
//! A task worker (a fork of the fork server) first allocates from the
//! **worker arena** instead: WORKER_ARENA_BYTES of zeroed static memory,
//! handed out in order and never reused. A fresh worker's first allocations
//! would otherwise touch the free lists, musl's own state and a fresh heap
//! page per size class — a page fault each, in a process that lives for
//! one task; from the arena they touch a page or two, side by side. A block
//! freed goes nowhere (the worker's life is short, and the arena is small);
//! past its end allocations take the usual path. [`start_worker_arena`]
//! turns it on, in a worker, after the fork.
//!
//! The fork server allocates from an arena of its own from its first
//! allocation ([`start_fork_server_arena`], before anything else runs), and
//! not at all once it serves: musl's malloc is never called there, so it
//! has no heap and no malloc mappings — three memory areas fewer, each of
//! which every fork copied and every worker's exit tore down. It is the
//! fork server's own so the worker arena's first page is still untouched
//! (one fault for a worker's first allocations, as before). The daemon
//! touches neither.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The size classes, in bytes: a request is served from the smallest class
/// that holds it. The first 24 are small: up to 1 KiB as a slab allocator
/// would have them, then up to 8 KiB a quarter apart. The rest, from 40 KiB
/// to 1 MiB a quarter apart, are the large classes (see the module's
/// notes). Above 1 KiB a request so gets at most 1.25× what it asked for.
const CLASSES: [usize; 44] = [
    16,
    32,
    48,
    64,
    96,
    128,
    192,
    256,
    384,
    512,
    768,
    1024,
    1280,
    1536,
    1792,
    2048,
    2560,
    3072,
    3584,
    4096,
    5120,
    6144,
    7168,
    8192,
    40 << 10,
    48 << 10,
    56 << 10,
    64 << 10,
    80 << 10,
    96 << 10,
    112 << 10,
    128 << 10,
    160 << 10,
    192 << 10,
    224 << 10,
    256 << 10,
    320 << 10,
    384 << 10,
    448 << 10,
    512 << 10,
    640 << 10,
    768 << 10,
    896 << 10,
    1 << 20,
];
/// The alignment every class block has (what malloc guarantees on 64-bit
/// Linux); a request aligned beyond it goes to libc.
const CLASS_ALIGN: usize = 16;
/// Most bytes of freed blocks kept per small class.
const CLASS_KEEP_BYTES: usize = 64 * 1024;
/// The first large class.
const FIRST_LARGE: usize = 24;
/// Requests above the small classes and up to this go to libc; above it
/// (up to the last class) they take a large block.
const LARGE_REQUEST_MIN_BYTES: usize = 32 * 1024;
/// Most bytes of freed large blocks kept, all large classes together: a
/// large output's worth.
const LARGE_KEEP_BYTES: usize = 64 * 1024 * 1024;

/// The class that holds `size` bytes at `align`, if any.
fn class_of(size: usize, align: usize) -> Option<usize> {
    if align > CLASS_ALIGN || (size > CLASSES[FIRST_LARGE - 1] && size <= LARGE_REQUEST_MIN_BYTES) {
        return None;
    }
    CLASSES.iter().position(|&c| size <= c)
}

/// One class's free list, threaded through the free blocks themselves.
struct FreeList {
    locked: AtomicBool,
    slots: std::cell::UnsafeCell<Slots>,
}

/// What the lock guards: the first free block, and how many there are.
struct Slots {
    head: *mut FreeBlock,
    count: usize,
}

struct FreeBlock {
    next: *mut FreeBlock,
}

// SAFETY: `slots` is only touched inside `with_slots`, between taking and
// releasing `locked` (Acquire/Release), by one thread at a time.
unsafe impl Sync for FreeList {}

impl FreeList {
    const fn new() -> FreeList {
        FreeList {
            locked: AtomicBool::new(false),
            slots: std::cell::UnsafeCell::new(Slots {
                head: ptr::null_mut(),
                count: 0,
            }),
        }
    }

    /// Runs `f` on the list if no other thread holds it; None if one does.
    /// It never waits: a thread that finds the list busy goes to libc at
    /// once (under SCHED_BATCH a spinning or yielding waiter could hold up
    /// the holder it waits for).
    fn with_slots<R>(&self, f: impl FnOnce(&mut Slots) -> R) -> Option<R> {
        if self
            .locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        // SAFETY: we hold the lock just taken: no other reference exists.
        let slots = unsafe { &mut *self.slots.get() };
        let out = f(slots);
        self.locked.store(false, Ordering::Release);
        Some(out)
    }

    /// A cached block, or null (none, or the list is busy).
    fn pop(&self) -> *mut u8 {
        let block = self.with_slots(|s| {
            let head = s.head;
            if !head.is_null() {
                // SAFETY: a non-null head is a free block the list owns,
                // whose first word push wrote: the next free block.
                s.head = unsafe { (*head).next };
                s.count -= 1;
            }
            head
        });
        block.unwrap_or(ptr::null_mut()) as *mut u8
    }

    /// Keeps `block` unless the class is full or busy; false = the caller
    /// frees it.
    fn push(&self, block: *mut u8, keep: usize) -> bool {
        self.with_slots(|s| {
            if s.count >= keep {
                return false;
            }
            let b = block as *mut FreeBlock;
            // SAFETY: `block` is a block of this class nobody uses any
            // more (it was freed), at least 16 bytes and 16-aligned.
            unsafe { b.write(FreeBlock { next: s.head }) };
            s.head = b;
            s.count += 1;
            true
        })
        .unwrap_or(false)
    }
}

static LISTS: [FreeList; CLASSES.len()] = [const { FreeList::new() }; CLASSES.len()];
/// Large blocks handed out from the lists so far: procman's sign that they
/// are still wanted.
static LARGE_REUSED: AtomicUsize = AtomicUsize::new(0);
/// Bytes of large blocks on the lists now, counted beside them: the bound,
/// and what procman looks at without taking a list's lock.
static LARGE_KEPT_BYTES: AtomicUsize = AtomicUsize::new(0);

/// How many large blocks have been handed out again so far.
pub fn large_blocks_reused() -> usize {
    LARGE_REUSED.load(Ordering::Relaxed)
}

/// Bytes of freed large blocks kept now.
pub fn large_bytes_kept() -> usize {
    LARGE_KEPT_BYTES.load(Ordering::Relaxed)
}

/// Keeps a freed large block unless that would pass LARGE_KEEP_BYTES (or
/// its list is busy); false = the caller frees it. Two threads may both
/// pass the test at once: the bound is then over by a block, no more.
fn keep_large(block: *mut u8, class: usize) -> bool {
    // A task worker keeps none: it has no procman to give them back, and
    // it frees few large buffers (its text runner reusing its own read
    // buffers measured no faster).
    if WORKER_ARENA.is_on() {
        return false;
    }
    let size = CLASSES[class];
    if LARGE_KEPT_BYTES.load(Ordering::Relaxed) + size > LARGE_KEEP_BYTES {
        return false;
    }
    let kept = LISTS[class].push(block, usize::MAX);
    if kept {
        LARGE_KEPT_BYTES.fetch_add(size, Ordering::Relaxed);
    }
    kept
}

/// A block off `class`'s list, or null; a large one is counted off what
/// is kept (and, when `reused`, as handed out again).
fn pop_block(class: usize, reused: bool) -> *mut u8 {
    let block = LISTS[class].pop();
    if !block.is_null() && class >= FIRST_LARGE {
        LARGE_KEPT_BYTES.fetch_sub(CLASSES[class], Ordering::Relaxed);
        if reused {
            LARGE_REUSED.fetch_add(1, Ordering::Relaxed);
        }
    }
    block
}

/// Gives every kept large block back to libc (which gives them back to
/// the kernel); how many bytes. A no-op where this allocator is not
/// installed.
pub fn release_large_blocks() -> usize {
    let mut released = 0;
    for (class, &size) in CLASSES.iter().enumerate().skip(FIRST_LARGE) {
        loop {
            let block = pop_block(class, false);
            if block.is_null() {
                break;
            }
            // SAFETY: blocks on a class's list were allocated from libc
            // with that class's layout, and nobody holds this one any more.
            unsafe { System.dealloc(block, class_layout(class)) };
            released += size;
        }
    }
    released
}

/// The worker arena's size: what a worker allocates for an ordinary task
/// (its spawn frame and what it answers) fits, many times over.
const WORKER_ARENA_BYTES: usize = 64 * 1024;
/// The fork server arena's size: what the fork server allocates while it
/// starts (its environment, its logger) fits, with room to spare.
const FORK_SERVER_ARENA_BYTES: usize = 16 * 1024;

/// An arena: zeroed static memory, handed out in order. All of it is zero
/// until turned on, its count too, so it lies in .bss: no bytes in the
/// binary, no RSS until a worker touches it. Page-aligned, its count
/// first: the count and the first blocks share a page, and a worker
/// touches as few pages as its allocations need.
#[repr(C, align(4096))]
struct Arena<const BYTES: usize> {
    /// 0 while off; once on, 1 + the bytes handed out.
    mark: AtomicUsize,
    bytes: std::cell::UnsafeCell<[u8; BYTES]>,
}

// SAFETY: each byte of `bytes` is handed out once (`mark` only grows, by
// compare-and-swap), to one owner, who alone touches it.
unsafe impl<const BYTES: usize> Sync for Arena<BYTES> {}

impl<const BYTES: usize> Arena<BYTES> {
    const fn new() -> Arena<BYTES> {
        Arena {
            mark: AtomicUsize::new(0),
            bytes: std::cell::UnsafeCell::new([0; BYTES]),
        }
    }

    fn is_on(&self) -> bool {
        self.mark.load(Ordering::Relaxed) != 0
    }

    fn turn_on(&self) {
        let _ = self.mark.compare_exchange(0, 1, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn start(&self) -> usize {
        self.bytes.get() as usize
    }

    /// Whether `ptr` is a block of the arena.
    fn contains(&self, ptr: *mut u8) -> bool {
        let p = ptr as usize;
        p >= self.start() && p < self.start() + BYTES
    }

    /// `layout`'s bytes, if the arena is on and has room.
    fn alloc(&self, layout: Layout) -> Option<*mut u8> {
        let mut mark = self.mark.load(Ordering::Relaxed);
        loop {
            // None while off (mark 0).
            let used = mark.checked_sub(1)?;
            // Aligned as an address: the bytes start 8 past a page.
            let at = self
                .start()
                .checked_add(used)?
                .checked_next_multiple_of(layout.align())?;
            let start = at - self.start();
            let end = start.checked_add(layout.size()).filter(|&e| e <= BYTES)?;
            match self
                .mark
                .compare_exchange_weak(mark, end + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                // SAFETY: start < end <= BYTES: within the arena.
                Ok(_) => return Some(unsafe { (self.bytes.get() as *mut u8).add(start) }),
                Err(now) => mark = now,
            }
        }
    }

    /// Grows the block at `ptr` of `size` bytes to `new_size` in place, if
    /// it is the last one handed out and the arena has room: a growing Vec
    /// or String then moves no bytes. (Nothing shrinks: every byte is
    /// handed out once, so what the arena hands out is still zero.)
    fn grow_last(&self, ptr: *mut u8, size: usize, new_size: usize) -> bool {
        let start = ptr as usize - self.start();
        let (Some(end), Some(new_end)) = (start.checked_add(size), start.checked_add(new_size)) else {
            return false;
        };
        new_end > end
            && new_end <= BYTES
            && self
                .mark
                .compare_exchange(end + 1, new_end + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

static WORKER_ARENA: Arena<WORKER_ARENA_BYTES> = Arena::new();
static FORK_SERVER_ARENA: Arena<FORK_SERVER_ARENA_BYTES> = Arena::new();

/// Turns the worker arena on in this process: called once by a task worker
/// right after the fork server forked it (the fork server keeps it off, so
/// each worker finds its first page untouched).
pub fn start_worker_arena() {
    WORKER_ARENA.turn_on();
}

/// Turns the fork server arena on: called by the fork server first thing,
/// before its first allocation (see the module's notes). Its workers
/// inherit it on; they use the worker arena first.
pub fn start_fork_server_arena() {
    FORK_SERVER_ARENA.turn_on();
}

/// A block from an arena that is on and has room: the worker's first.
fn arena_alloc(layout: Layout) -> Option<*mut u8> {
    WORKER_ARENA.alloc(layout).or_else(|| FORK_SERVER_ARENA.alloc(layout))
}

fn in_an_arena(ptr: *mut u8) -> bool {
    WORKER_ARENA.contains(ptr) || FORK_SERVER_ARENA.contains(ptr)
}

/// Grows an arena block in place (see [`Arena::grow_last`]).
fn arena_grow_last(ptr: *mut u8, size: usize, new_size: usize) -> bool {
    if WORKER_ARENA.contains(ptr) {
        WORKER_ARENA.grow_last(ptr, size, new_size)
    } else {
        FORK_SERVER_ARENA.grow_last(ptr, size, new_size)
    }
}

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
        if let Some(block) = arena_alloc(layout) {
            return block;
        }
        match class_of(layout.size(), layout.align()) {
            Some(class) => {
                let block = pop_block(class, true);
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
        if in_an_arena(ptr) {
            return; // arena bytes are never reused
        }
        match class_of(layout.size(), layout.align()) {
            Some(class) => {
                let kept = if class >= FIRST_LARGE {
                    keep_large(ptr, class)
                } else {
                    LISTS[class].push(ptr, CLASS_KEEP_BYTES / CLASSES[class])
                };
                if !kept {
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
        if let Some(block) = arena_alloc(layout) {
            return block; // zeroed static memory, never handed out before
        }
        match class_of(layout.size(), layout.align()) {
            Some(class) => {
                let block = pop_block(class, true);
                if block.is_null() {
                    // From libc zeroed: a large block's fresh pages then stay
                    // untouched (no RSS) until they are written.
                    // SAFETY: a valid non-zero layout.
                    return unsafe { System.alloc_zeroed(class_layout(class)) };
                }
                // SAFETY: the block holds at least layout.size() bytes.
                unsafe { ptr::write_bytes(block, 0, layout.size()) };
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
        if in_an_arena(ptr) {
            // Smaller: the block as it is holds it (its tail is simply not
            // used again).
            if new_size <= layout.size() || arena_grow_last(ptr, layout.size(), new_size) {
                return ptr;
            }
            // SAFETY: new_size is non-zero and, rounded to the alignment,
            // does not overflow (GlobalAlloc::realloc's contract).
            let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            // SAFETY: as alloc.
            let moved = unsafe { self.alloc(new_layout) };
            if !moved.is_null() {
                // SAFETY: both blocks hold the bytes copied and do not
                // overlap (arena bytes are handed out once); the old block
                // needs no freeing.
                unsafe { ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size)) };
            }
            return moved;
        }
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
        LISTS[class].with_slots(|s| s.count).expect("no other thread holds it")
    }

    #[test]
    fn requests_go_to_the_smallest_class_that_holds_them() {
        assert_eq!(class_of(1, 1), Some(0));
        assert_eq!(class_of(16, 8), Some(0));
        assert_eq!(class_of(17, 8), Some(1));
        assert_eq!(class_of(1025, 8), Some(12), "the first class above 1 KiB");
        assert_eq!(class_of(8192, 16), Some(FIRST_LARGE - 1));
        assert_eq!(class_of(8193, 8), None, "between the small classes and the large ones");
        assert_eq!(class_of(32 * 1024, 8), None);
        assert_eq!(class_of(32 * 1024 + 1, 8), Some(FIRST_LARGE), "40 KiB");
        assert_eq!(
            CLASSES[class_of(64 * 1024, 16).unwrap()],
            64 * 1024,
            "a text chunk fills its block"
        );
        assert_eq!(
            CLASSES[class_of(1_000_000, 16).unwrap()],
            1 << 20,
            "a jsonl line of 1 MB"
        );
        assert_eq!(class_of((1 << 20) + 1, 8), None, "bigger than every class");
        assert_eq!(class_of(64, 32), None, "aligned beyond the classes");
        // No request above 1 KiB gets more than 1.25x what it asked for.
        let small_above_1k = 1025..=CLASSES[FIRST_LARGE - 1];
        for size in small_above_1k.chain(LARGE_REQUEST_MIN_BYTES + 1..=1 << 20).step_by(97) {
            let block = CLASSES[class_of(size, 8).unwrap()];
            assert!(
                block >= size && block * 4 <= size * 5,
                "{size} bytes in a block of {block}"
            );
        }
    }

    #[test]
    fn large_blocks_are_reused_up_to_their_bound_and_released_on_request() {
        let a = CachingAlloc;
        let chunk = layout(64 * 1024); // a text chunk's buffer
        let line = layout(1_000_000); // a jsonl line's
        let chunks = LARGE_KEEP_BYTES / (64 * 1024);
        // SAFETY: as above.
        unsafe {
            let mut blocks: Vec<(*mut u8, Layout)> = (0..chunks).map(|_| (a.alloc(chunk), chunk)).collect();
            blocks.extend((0..4).map(|_| (a.alloc(line), line)));
            assert!(blocks.iter().all(|(b, _)| !b.is_null()));
            let last_chunk = blocks[chunks - 1].0;
            for &(b, l) in &blocks {
                a.dealloc(b, l);
            }
            assert_eq!(large_bytes_kept(), LARGE_KEEP_BYTES, "bounded: the lines went to libc");
            let reused = large_blocks_reused();
            let again = a.alloc(layout(60 * 1024));
            assert_eq!(again, last_chunk, "a request of the class gets the block last kept");
            assert_eq!(large_blocks_reused(), reused + 1, "and it is counted");
            assert_eq!(large_bytes_kept(), LARGE_KEEP_BYTES - 64 * 1024);
            ptr::write_bytes(again, 7, 60 * 1024);
            a.dealloc(again, layout(60 * 1024));
            assert_eq!(release_large_blocks(), LARGE_KEEP_BYTES);
            assert_eq!(large_bytes_kept(), 0, "all given back to libc");
            let big = a.alloc(line);
            a.dealloc(big, line);
            assert_eq!(large_bytes_kept(), 1 << 20, "with room, a line's block is kept");
            let again = a.alloc(layout(950_000));
            assert_eq!(again, big, "and a line of its class takes it");
            a.dealloc(again, layout(950_000));
            assert_eq!(release_large_blocks(), 1 << 20);
            assert_eq!(release_large_blocks(), 0);
        }
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
    fn a_busy_class_is_never_waited_for() {
        let list = FreeList::new();
        let mut block = [0u128; 4];
        let p = block.as_mut_ptr() as *mut u8;
        assert!(list.push(p, 8), "free: kept");
        let inside = list.with_slots(|_| {
            // Held: another thread would find it busy and go to libc.
            (list.pop().is_null(), list.push(p, 8))
        });
        assert_eq!(inside, Some((true, false)), "busy: no block, and none kept");
        assert_eq!(list.pop(), p, "free again: the block kept before");
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

    const ARENA_BYTES: usize = 64 * 1024;
    static TEST_ARENA: Arena<ARENA_BYTES> = Arena::new();

    #[test]
    fn an_arena_hands_out_aligned_zeroed_blocks_in_order_once_turned_on() {
        let arena = Arena::<ARENA_BYTES>::new();
        assert_eq!(arena.alloc(layout(8)), None, "off until turned on");
        arena.turn_on();
        let a = arena.alloc(Layout::from_size_align(3, 1).unwrap()).unwrap();
        let b = arena.alloc(Layout::from_size_align(40, 16).unwrap()).unwrap();
        let c = arena.alloc(Layout::from_size_align(4096, 4096).unwrap()).unwrap();
        assert_eq!(a as usize, arena.start(), "the first block starts the arena");
        assert_eq!(a as usize % 4096, 8, "on the page of the count, after it");
        assert!(
            b as usize % 16 == 0 && b as usize >= a as usize + 3,
            "aligned past the first"
        );
        assert!(b as usize - (a as usize + 3) < 16, "and no further");
        assert_eq!(c as usize % 4096, 0, "aligned as an address");
        assert!([a, b, c].iter().all(|p| arena.contains(*p)));
        assert!(!arena.contains(ptr::null_mut()) && !arena.contains((arena.start() + ARENA_BYTES) as *mut u8));
        // SAFETY: c is 4096 bytes of the arena, handed to this test alone.
        assert!(unsafe { std::slice::from_raw_parts(c, 4096) }.iter().all(|x| *x == 0));
        // Past the end: none; a block that still fits does.
        let used = arena.mark.load(Ordering::Relaxed) - 1;
        assert_eq!(arena.alloc(layout(ARENA_BYTES - used + 1)), None);
        assert!(arena.alloc(layout(ARENA_BYTES - used)).is_some());
        assert_eq!(arena.alloc(layout(1)), None, "full");
    }

    #[test]
    fn only_the_last_arena_block_grows_in_place() {
        let arena = &TEST_ARENA;
        arena.turn_on();
        let a = arena.alloc(layout(32)).unwrap();
        let b = arena.alloc(layout(32)).unwrap();
        assert!(!arena.grow_last(a, 32, 64), "another block follows it");
        assert!(arena.grow_last(b, 32, 100), "the last one grows");
        let c = arena.alloc(layout(8)).unwrap();
        assert!(c as usize >= b as usize + 100, "the next block comes after the growth");
        assert!(!arena.grow_last(c, 8, 8), "no growth is no change");
        assert!(!arena.grow_last(c, 8, ARENA_BYTES), "past the end");
    }

    #[test]
    fn arena_blocks_taken_by_many_threads_never_overlap() {
        let arena = Arena::<ARENA_BYTES>::new();
        arena.turn_on();
        let blocks = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    while let Some(p) = arena.alloc(layout(24)) {
                        blocks.lock().unwrap().push(p as usize);
                    }
                });
            }
        });
        let mut blocks = blocks.into_inner().unwrap();
        blocks.sort_unstable();
        assert_eq!(
            blocks.len(),
            ARENA_BYTES / 24,
            "every 24 bytes (aligned to 8), to the end"
        );
        assert!(blocks.windows(2).all(|w| w[1] - w[0] >= 24), "disjoint");
    }

    /// Runs `check` in a forked child and asserts it exited 0 (its code
    /// says which check failed; 99 a panic). The child calls only the
    /// allocator's arena paths (no locks another test thread may have held
    /// at the fork) and _exit.
    fn in_forked_child(check: impl FnOnce() -> i32 + std::panic::UnwindSafe) {
        // SAFETY: fork in a test; the child runs `check` and _exit only.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = std::panic::catch_unwind(check).unwrap_or(99);
            // SAFETY: _exit ends the forked child without running anything
            // of the parent's.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "{status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "the child's check that failed");
    }

    /// The allocator with the arena on, as a worker has it: in a forked
    /// child (the parent's test threads never see the arena on), blocks
    /// come from the arena, grow in place, shrink where they are, are
    /// freed to nowhere, and the class lists (whose locks another test
    /// thread may have held at the fork) are never touched.
    #[test]
    fn a_worker_allocates_from_its_arena() {
        in_forked_child(|| {
            start_worker_arena();
            let a = CachingAlloc;
            // SAFETY: valid layouts; each pointer is used within its size.
            unsafe {
                let p = a.alloc(layout(10));
                if !WORKER_ARENA.contains(p) {
                    return 10;
                }
                ptr::write_bytes(p, 7, 10);
                if a.realloc(p, layout(10), 200) != p || *p.add(9) != 7 {
                    return 11; // the last block grows in place
                }
                let q = a.alloc_zeroed(layout(64));
                if !WORKER_ARENA.contains(q) || (0..64).any(|i| *q.add(i) != 0) {
                    return 12;
                }
                if a.realloc(p, layout(200), 50) != p {
                    return 13; // smaller: where it is
                }
                let moved = a.realloc(p, layout(50), 300);
                if moved == p || !WORKER_ARENA.contains(moved) || *moved.add(9) != 7 {
                    return 14; // not the last one any more: moved, bytes kept
                }
                a.dealloc(moved, layout(300));
                a.dealloc(q, layout(64));
                let r = a.alloc(layout(16));
                if r == q || r == moved {
                    return 15; // freed arena bytes are not handed out again
                }
                // A large block past the arena goes back to libc when freed.
                let kept = large_bytes_kept();
                let big = a.alloc(layout(100 * 1024));
                if big.is_null() || WORKER_ARENA.contains(big) {
                    return 16;
                }
                a.dealloc(big, layout(100 * 1024));
                if large_bytes_kept() != kept {
                    return 17; // a worker keeps no large blocks
                }
            }
            0
        });
    }

    /// The fork server's allocations, from its first, come from its own
    /// arena; the worker arena stays untouched until a worker turns it on,
    /// and then serves the worker first.
    #[test]
    fn the_fork_server_allocates_from_its_own_arena_and_its_workers_from_theirs() {
        in_forked_child(|| {
            start_fork_server_arena();
            let a = CachingAlloc;
            // SAFETY: valid layouts; each pointer is used within its size.
            unsafe {
                let p = a.alloc(layout(24));
                if !FORK_SERVER_ARENA.contains(p) || WORKER_ARENA.mark.load(Ordering::Relaxed) != 0 {
                    return 20;
                }
                start_worker_arena();
                let w = a.alloc(layout(24));
                if !WORKER_ARENA.contains(w) {
                    return 21; // a worker's blocks: its own arena first
                }
                a.dealloc(w, layout(24));
                a.dealloc(p, layout(24));
            }
            0
        });
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
