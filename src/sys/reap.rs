//! How children end: wait4(2) and waitpid(2) (with what they used), and the exit vocabulary of the shell
//! (tini's too) that every status text uses.

use std::io;

use super::cvt;
use super::signal_name;

/// How a reaped child ended, in the shell's vocabulary (tini's too):
/// exit code as is, a signal as 128+N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

impl ExitStatus {
    pub fn shell_code(self) -> i32 {
        match self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal(s) => 128 + s,
        }
    }
}

/// The manual's words, used in the feed's `exit` and every status text:
/// `exit status 3`, `killed by signal 9 (SIGKILL, exit status 137)`.
impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exit status {c}"),
            ExitStatus::Signal(s) => write!(f, "killed by signal {s} ({}, exit status {})", signal_name(*s), 128 + s),
        }
    }
}

/// What the kernel counted for a reaped child (wait4's `struct rusage`):
/// the child and every descendant it waited for, as RUSAGE_BOTH adds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rusage {
    pub user_usec: u64,
    pub system_usec: u64,
    /// `ru_maxrss` in bytes: the largest resident set of any *one* of
    /// those processes (the kernel keeps a maximum, not a sum).
    pub maxrss_bytes: u64,
}

/// One child reaped: its pid, how it ended, what it used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    pub pid: i32,
    pub status: ExitStatus,
    pub usage: Rusage,
}

/// One `wait4(-1, WNOHANG)`: `Ok(None)` when no child has changed state
/// (or there are no children at all). The rusage comes with the reap
/// itself: no call more than waitpid.
pub fn reap_any() -> io::Result<Option<Reaped>> {
    let mut status: libc::c_int = 0;
    // SAFETY: all-zero is a valid `struct rusage` (integers and timevals).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `status` and `ru` are valid for writes; WNOHANG never blocks.
    let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut ru) };
    match pid {
        0 => Ok(None),
        -1 => {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::ECHILD) => Ok(None),
                Some(libc::EINTR) => reap_any(),
                _ => Err(err),
            }
        }
        pid => Ok(Some(Reaped {
            pid,
            status: exit_status(status),
            usage: rusage(&ru),
        })),
    }
}

fn usec(t: libc::timeval) -> u64 {
    (t.tv_sec.max(0) as u64) * 1_000_000 + t.tv_usec.max(0) as u64
}

fn rusage(ru: &libc::rusage) -> Rusage {
    Rusage {
        user_usec: usec(ru.ru_utime),
        system_usec: usec(ru.ru_stime),
        // Linux counts ru_maxrss in KiB.
        maxrss_bytes: (ru.ru_maxrss.max(0) as u64) * 1024,
    }
}

/// One `waitpid(-1, WNOHANG)` that keeps no status: `Ok(pid)` of a child
/// reaped, `Ok(0)` while children are left but none has ended, ECHILD when
/// there are none at all, zombies included. Not retried on EINTR.
/// Async-signal-safe.
pub fn reap_one_quietly() -> io::Result<i32> {
    // SAFETY: waitpid with WNOHANG and a null status pointer.
    cvt(unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) })
}

/// Blocking waitpid(2) on one child.
pub fn wait_pid(pid: i32) -> io::Result<ExitStatus> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is valid for writes.
        let ret = unsafe { libc::waitpid(pid, &mut status, 0) };
        if ret == pid {
            break;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    Ok(exit_status(status))
}

fn exit_status(status: libc::c_int) -> ExitStatus {
    if libc::WIFSIGNALED(status) {
        ExitStatus::Signal(libc::WTERMSIG(status))
    } else {
        ExitStatus::Code(libc::WEXITSTATUS(status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_read_as_the_manual_writes_them() {
        assert_eq!(ExitStatus::Code(3).to_string(), "exit status 3");
        assert_eq!(
            ExitStatus::Signal(libc::SIGKILL).to_string(),
            "killed by signal 9 (SIGKILL, exit status 137)"
        );
        assert_eq!(ExitStatus::Signal(libc::SIGTERM).shell_code(), 143);
        assert_eq!(ExitStatus::Code(0).shell_code(), 0);
    }
}
