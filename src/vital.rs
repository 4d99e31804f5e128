//! Threads the daemon cannot serve without — procman, the accept loops,
//! the signal thread. A panic on one of them ends the process at once,
//! logged, with [`EXIT_PANIC`]: never a daemon that goes on accepting with
//! a part of it gone. Workers are children of procman's thread and die
//! with it (PDEATHSIG), so a daemon without procman would take requests it
//! can never run; a service manager restarts a daemon that exits, and the
//! restart kills and removes the dead one's cgroup slots. A connection
//! thread is not vital: its panic ends only its connection.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::JoinHandle;

/// The exit code of a daemon whose vital thread panicked (sysexits'
/// EX_SOFTWARE: an internal error).
pub const EXIT_PANIC: i32 = 70;

/// Starts thread `name` running `body`; if `body` panics, the daemon exits
/// with [`EXIT_PANIC`] once the panic is logged. (The panic's own message
/// and place are written to stderr, the log, by std's hook first.)
pub fn spawn<T, F>(name: &str, body: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let thread = name.to_string();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || match catch_unwind(AssertUnwindSafe(body)) {
            Ok(out) => out,
            Err(payload) => {
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".into());
                log::error!(
                    "agentd.panic thread={thread} error={what}; the daemon cannot serve without it: exiting \
                     (tasks die with it; a restart cleans their cgroup slots)"
                );
                log::logger().flush();
                crate::sys::exit_now(EXIT_PANIC)
            }
        })
}
