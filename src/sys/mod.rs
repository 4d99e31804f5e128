//! The libc boundary. Every `unsafe` block in agentd lives here: one call per
//! block, a `// SAFETY:` line saying why it holds, and [`cvt`] turning the C
//! convention (-1 + errno) into `io::Result`.
//!
//! One room per kind of call, all re-exported here (callers write
//! `sys::pipe`): `fds` (descriptors, pipes, poll, plain reads and writes),
//! `dirfd` (directories by fd, getdents64), `sockets` (peer credentials,
//! hang-ups, adopting a listener), `signals` (masks, handlers, names),
//! `process` (ids, prctl, process groups, kill, scheduling policy, `_exit`), `cmdline` (the
//! command line `ps` shows, rewritten in place), `reap` (wait4 with its
//! rusage, waitpid, and the exit vocabulary), `rlimit`, `random`, `pid1`
//! (mounts, modules, console and power-off for a VM guest's init), `spawn` (the fork
//! server, `clone3`, descriptors over sockets, a program's pre-exec steps)
//! and `wake` (procman's eventfd and signalfd). What agentd *does* with
//! them lives with its room: the worker's parent-death containment, for one,
//! is worker/containment.rs.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io;

mod alloc;
pub use alloc::{
    large_blocks_reused, large_bytes_kept, release_large_blocks, start_fork_server_arena, start_worker_arena,
    CachingAlloc,
};
mod wake;
pub use wake::*;
mod spawn;
pub use spawn::*;
mod cmdline;
pub use cmdline::*;
mod dirfd;
pub use dirfd::*;
mod fds;
pub use fds::*;
mod pid1;
pub use pid1::*;
mod process;
pub use process::*;
mod random;
pub use random::*;
mod reap;
pub use reap::*;
mod rlimit;
pub use rlimit::*;
mod signals;
pub use signals::*;
mod sockets;
pub use sockets::*;

/// Turns a C return value of -1 into the current `errno` as `io::Error`.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}
