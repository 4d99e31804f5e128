//! This process: its ids and prctl settings, process groups and signals
//! sent to them or to one pid, a thread's scheduling policy, a pause, and
//! `_exit`.

use std::io;

use super::cvt;

pub fn getpid() -> i32 {
    std::process::id() as i32
}

/// The size of a memory page (4 KiB unless the kernel says otherwise).
pub fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system and touches no memory.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(4096)
}

pub fn getppid() -> i32 {
    // SAFETY: getppid cannot fail and touches no memory.
    unsafe { libc::getppid() }
}

pub fn geteuid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// Makes this process adopt orphaned descendants (prctl(2)
/// PR_SET_CHILD_SUBREAPER), so a task's grandchildren are reaped by us, not
/// by init, and `kill(-pgid, 0)` turns ESRCH once they are really gone.
pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: plain prctl with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }).map(drop)
}

/// A process name as the kernel keeps one (comm): up to 15 bytes, then
/// NULs to 16. A value, not a string literal: a fresh worker names itself
/// first thing, and a literal lies among the binary's strings, a page of
/// read-only data it faulted in for that alone; 16 bytes of value are one
/// of the small constants link/worker-text.ld places with the worker's.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ProcessName([u8; 16]);

impl ProcessName {
    /// Made at compile time: a name of 16 bytes or more fails the build.
    pub const fn new(name: &str) -> ProcessName {
        let bytes = name.as_bytes();
        assert!(bytes.len() < 16, "the kernel keeps 15 bytes of a process name");
        let mut out = [0u8; 16];
        let mut i = 0;
        while i < bytes.len() {
            assert!(bytes[i] != 0, "a process name has no NUL inside");
            out[i] = bytes[i];
            i += 1;
        }
        ProcessName(out)
    }

    /// The name, without its NULs.
    pub fn bytes(&self) -> &[u8] {
        let len = self.0.iter().position(|&b| b == 0).unwrap_or(self.0.len());
        &self.0[..len]
    }
}

/// Names the calling thread (prctl(2) PR_SET_NAME; `ps -o comm` shows it
/// for the main thread).
pub fn set_process_name(name: &ProcessName) {
    // SAFETY: `name` is 16 bytes ending in at least one NUL (ProcessName::new
    // keeps 15 at most); the kernel copies at most 16 bytes of it.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.0.as_ptr(), 0, 0, 0) };
}

/// prctl(2) PR_SET_PDEATHSIG: `sig` is sent to us when the *thread* that
/// forked us exits. Async-signal-safe, so usable between fork and exec.
pub fn set_parent_death_signal(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: plain prctl with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) }).map(drop)
}

/// setpgid(0, 0): become leader of a new process group whose id is our pid.
/// Async-signal-safe.
pub fn become_group_leader() -> io::Result<()> {
    // SAFETY: setpgid with (0, 0) only affects the calling process.
    cvt(unsafe { libc::setpgid(0, 0) }).map(drop)
}

/// setpgid(pid, pid): makes the child `pid` lead its own process group.
/// Called by the parent as well as by the child itself, so the group
/// exists before either goes on (the classic race of job control).
pub fn make_group_leader(pid: i32) -> io::Result<()> {
    // SAFETY: setpgid takes integers.
    cvt(unsafe { libc::setpgid(pid, pid) }).map(drop)
}

/// Sends `sig` to every process of group `pgid`. `Ok(false)` means ESRCH:
/// the group is already empty (that rung of the ladder already won).
pub fn kill_group(pgid: i32, sig: libc::c_int) -> io::Result<bool> {
    if pgid <= 1 {
        // killpg(0 or 1, …) would hit ourselves or everything: never.
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: killpg takes integers; pgid > 1 was checked above.
    match cvt(unsafe { libc::killpg(pgid, sig) }) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
        Err(e) => Err(e),
    }
}

/// True while any process (zombies included) is in group `pgid`.
pub fn group_alive(pgid: i32) -> bool {
    !matches!(kill_group(pgid, 0), Ok(false))
}

/// Sends `sig` to one process. Async-signal-safe.
pub fn kill_pid(pid: i32, sig: libc::c_int) -> io::Result<()> {
    if pid <= 1 {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: kill takes integers; pid > 1 was checked above.
    cvt(unsafe { libc::kill(pid, sig) }).map(drop)
}

/// Sends `sig` to our own process group (kill(2) with pid 0), us included:
/// for a worker, its task's group, which it leads. Async-signal-safe.
pub fn signal_own_group(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) takes integers; 0 means "my process group".
    cvt(unsafe { libc::kill(0, sig) }).map(drop)
}

/// One nanosleep(2) of `nanos` (under a second), not resumed when a signal
/// cuts it short (std's sleep resumes). Async-signal-safe.
pub fn nap(nanos: u32) {
    let pause = libc::timespec {
        tv_sec: 0,
        tv_nsec: nanos.min(999_999_999) as libc::c_long,
    };
    // SAFETY: nanosleep with a valid timespec and no remainder wanted.
    unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
}

/// Ends the process now, without exit handlers: for a forked worker,
/// whose output is never buffered.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes an integer and does not return.
    unsafe { libc::_exit(code) }
}

/// Whether the variable `name` is set, read without allocating (libc's
/// environ as the process started): for what must be decided before the
/// first allocation.
pub fn env_is_set(name: &std::ffi::CStr) -> bool {
    // SAFETY: `name` is NUL-terminated; getenv only reads environ, and this
    // is called before any thread exists that could change it.
    unsafe { !libc::getenv(name.as_ptr()).is_null() }
}

/// Puts the calling thread under SCHED_BATCH if it runs under the default
/// policy (true: it does now); any other policy is the operator's choice
/// and stays (false). Woken, a SCHED_BATCH thread does not preempt the
/// thread running but waits for it to block or end its slice, with the
/// same share of the CPU as before; no privilege is needed. What the
/// thread forks inherits it (SCHED_RESET_ON_FORK resets only real-time
/// policies): see [`default_scheduling`].
pub fn yield_on_wakeup() -> io::Result<bool> {
    // SAFETY: sched_getscheduler takes a tid (0 = the caller), no memory.
    let policy = cvt(unsafe { libc::syscall(libc::SYS_sched_getscheduler, 0) } as libc::c_int)?;
    if policy != libc::SCHED_OTHER {
        return Ok(false);
    }
    set_scheduling(libc::SCHED_BATCH).map(|()| true)
}

/// Puts the calling thread back under SCHED_OTHER, the default policy.
/// Async-signal-safe (one system call), so usable between fork and exec.
pub fn default_scheduling() -> io::Result<()> {
    set_scheduling(libc::SCHED_OTHER)
}

/// sched_setscheduler(2) on the calling thread (tid 0) at priority 0. The
/// system call itself: musl's wrapper is a stub that fails with ENOSYS.
fn set_scheduling(policy: libc::c_int) -> io::Result<()> {
    // The kernel's struct sched_param is one int (musl's has more fields).
    let priority: libc::c_int = 0;
    // SAFETY: sched_setscheduler reads one int (the priority) from a valid
    // pointer and changes only the calling thread's policy.
    let ret = unsafe { libc::syscall(libc::SYS_sched_setscheduler, 0, policy, &priority as *const libc::c_int) };
    cvt(ret as libc::c_int).map(drop)
}

/// glibc's malloc, left alone, raises its mmap threshold to the size of
/// each large block freed (up to 32 MiB), so the next large buffers come
/// from its heaps and stay there when freed: a daemon that renders a few
/// 8 MiB answers kept 1.65× every finished task's output (six tasks of
/// 8 MiB, measured). A fixed threshold turns that off: blocks of 128 KiB
/// and more are mapped and unmapped, and what is kept is the tasks' own
/// (1.05×). musl's malloc (the static build) never did this. Call before
/// any thread starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn keep_large_blocks_out_of_mallocs_heap() {
    const THRESHOLD_BYTES: libc::c_int = 128 * 1024;
    // SAFETY: mallopt with a documented parameter and an int value; it
    // only sets a field of glibc's malloc state.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD_BYTES) };
}

/// See the glibc version: other allocators need nothing.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn keep_large_blocks_out_of_mallocs_heap() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_name_is_its_bytes_padded_with_nuls_to_the_kernels_16() {
        const IDLE: ProcessName = ProcessName::new("agentd-idle");
        assert_eq!(IDLE.bytes(), b"agentd-idle");
        assert_eq!(IDLE.0, *b"agentd-idle\0\0\0\0\0");
        const LONGEST: ProcessName = ProcessName::new("fifteen-bytes-x");
        assert_eq!(LONGEST.bytes(), b"fifteen-bytes-x", "15 bytes and one NUL fill it");
        assert_eq!(ProcessName::new("").bytes(), b"");
    }
}
