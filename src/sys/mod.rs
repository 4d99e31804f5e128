//! The libc boundary. Every `unsafe` block in agentd lives here: one call per
//! block, a `// SAFETY:` line saying why it holds, and [`cvt`] turning the C
//! convention (-1 + errno) into `io::Result`.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

mod alloc;
mod mem;
mod wake;
pub use wake::*;
mod spawn;
pub use spawn::*;
mod cmdline;
pub use cmdline::*;

/// Every allocation of agentd's, its workers' and its tests' goes through
/// the size-class cache in front of libc's malloc (see alloc.rs for why).
#[global_allocator]
static GLOBAL: alloc::CachingAlloc = alloc::CachingAlloc;

/// Turns a C return value of -1 into the current `errno` as `io::Error`.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Who is on the other end of a unix socket, as the kernel saw it at connect().
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// Reads SO_PEERCRED of a connected unix socket.
pub fn peer_cred(sock: &impl AsRawFd) -> io::Result<PeerCred> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes and `len` is the size of
    // `cred`; the kernel writes at most `len` bytes.
    cvt(unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok(PeerCred {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

pub fn geteuid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

pub fn getppid() -> i32 {
    // SAFETY: getppid cannot fail and touches no memory.
    unsafe { libc::getppid() }
}

/// Makes this process adopt orphaned descendants (prctl(2)
/// PR_SET_CHILD_SUBREAPER), so a task's grandchildren are reaped by us, not
/// by init, and `kill(-pgid, 0)` turns ESRCH once they are really gone.
pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: plain prctl with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }).map(drop)
}

/// Names the calling thread (prctl(2) PR_SET_NAME; `ps -o comm` shows it
/// for the main thread). The kernel keeps 15 bytes.
pub fn set_process_name(name: &std::ffi::CStr) {
    // SAFETY: `name` is a valid NUL-terminated string for the call's length;
    // the kernel copies at most 16 bytes of it.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) };
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

/// Sets or clears FD_CLOEXEC on `fd`. Async-signal-safe.
pub fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    let flag = if on { libc::FD_CLOEXEC } else { 0 };
    // SAFETY: fcntl F_SETFD with an integer flag; a bad fd is EBADF.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFD, flag) }).map(drop)
}

/// Closes every descriptor from `first` up. Uses close_range(2) where the
/// kernel has it (5.9+), else closes one by one up to the soft RLIMIT_NOFILE.
pub fn close_fds_from(first: RawFd) {
    // SAFETY: close_range takes integers only; failure leaves fds open and
    // is handled by the fallback below.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first as libc::c_uint, u32::MAX, 0) };
    if ret == 0 {
        return;
    }
    let max = rlimit_nofile_soft().unwrap_or(4096).min(65_536) as RawFd;
    for fd in first..max {
        // SAFETY: closing an fd number we do not use; EBADF is harmless.
        unsafe { libc::close(fd) };
    }
}

fn rlimit_nofile_soft() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is valid for writes.
    let ret = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (ret == 0).then_some(lim.rlim_cur)
}

/// The per-task resource limits that setrlimit(2) can express.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rlimit {
    AddressSpace,
    CpuSeconds,
    OpenFiles,
    CoreSize,
}

/// RLIMIT_NOFILE as (soft, hard); RLIM_INFINITY reads as u64::MAX (rlim_t
/// is 64-bit on every Linux target agentd builds for, glibc and musl).
pub fn nofile_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit the kernel writes.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    Ok((lim.rlim_cur, lim.rlim_max))
}

/// Sets RLIMIT_NOFILE's soft limit, keeping the hard one.
pub fn set_nofile_soft(soft: u64, hard: u64) -> io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: `lim` is a valid rlimit read by the kernel.
    cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }).map(drop)
}

/// Sets both soft and hard limit. Async-signal-safe.
pub fn set_rlimit(which: Rlimit, value: u64) -> io::Result<()> {
    let resource = match which {
        Rlimit::AddressSpace => libc::RLIMIT_AS,
        Rlimit::CpuSeconds => libc::RLIMIT_CPU,
        Rlimit::OpenFiles => libc::RLIMIT_NOFILE,
        Rlimit::CoreSize => libc::RLIMIT_CORE,
    };
    let lim = libc::rlimit {
        rlim_cur: value as libc::rlim_t,
        rlim_max: value as libc::rlim_t,
    };
    // SAFETY: `lim` is a valid rlimit read by the kernel.
    cvt(unsafe { libc::setrlimit(resource, &lim) }).map(drop)
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

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGSTKFLT => "SIGSTKFLT",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        libc::SIGSYS => "SIGSYS",
        _ => "a real-time signal",
    }
}

/// One `waitpid(-1, WNOHANG)`: `Ok(None)` when no child has changed state
/// (or there are no children at all).
pub fn reap_any() -> io::Result<Option<(i32, ExitStatus)>> {
    let mut status: libc::c_int = 0;
    // SAFETY: `status` is valid for writes; WNOHANG never blocks.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
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
        pid => {
            let how = if libc::WIFSIGNALED(status) {
                ExitStatus::Signal(libc::WTERMSIG(status))
            } else {
                ExitStatus::Code(libc::WEXITSTATUS(status))
            };
            Ok(Some((pid, how)))
        }
    }
}

/// Fills `buf` from the kernel's CSPRNG (getrandom(2)).
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: `rest` is valid for writes of `rest.len()` bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        filled += n as usize;
    }
    Ok(())
}

/// shutdown(2) the read side of a listening socket: a thread blocked in
/// accept() on it returns EINVAL, which is how accept loops are stopped.
pub fn shutdown_read(sock: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: shutdown takes integers; a bad fd is EBADF.
    cvt(unsafe { libc::shutdown(sock.as_raw_fd(), libc::SHUT_RD) }).map(drop)
}

/// The signal a worker asks for when agentd dies: caught (not SIGKILL), so
/// the worker can take its whole task — grandchildren that left its
/// process group included — down with it before it goes.
pub const PARENT_DEATH_SIGNAL: libc::c_int = libc::SIGUSR2;

/// The task cgroup's `cgroup.kill` (v2), open for writing, or -1.
static CGROUP_KILL_FD: AtomicI32 = AtomicI32::new(-1);
/// The task cgroup's `cgroup.procs` (v1 freezer), open for reading, or -1.
static CGROUP_PROCS_FD: AtomicI32 = AtomicI32::new(-1);

/// How a worker contains its task, armed at start-up by [`arm_containment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Containment {
    /// The task's cgroup (v2): parent death writes its `cgroup.kill`.
    CgroupKill,
    /// The task's v1 cgroup: parent death SIGKILLs each pid it lists.
    CgroupProcs,
    /// No cgroup: the worker is a child subreaper, so whatever leaves its
    /// process group is re-parented to it, and parent death kills its
    /// children until none is left.
    Subreaper,
}

/// Arms the parent-death path with the task cgroup's `cgroup.kill` (v2)
/// or freezer `cgroup.procs` (v1), already open (`kill_fd`, `procs_fd`);
/// with neither, makes the caller a child subreaper. Then installs the
/// parent-death handler and PDEATHSIG.
pub fn arm_containment(kill_fd: Option<RawFd>, procs_fd: Option<RawFd>) -> io::Result<Containment> {
    let how = if let Some(fd) = kill_fd {
        CGROUP_KILL_FD.store(fd, Ordering::SeqCst);
        Containment::CgroupKill
    } else if let Some(fd) = procs_fd {
        CGROUP_PROCS_FD.store(fd, Ordering::SeqCst);
        Containment::CgroupProcs
    } else {
        set_child_subreaper()?;
        Containment::Subreaper
    };
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = kill_task_handler as *const () as libc::sighandler_t;
    // SAFETY: `action` is valid; the handler makes only async-signal-safe
    // system calls (see kill_task), and the old action is not requested.
    cvt(unsafe { libc::sigaction(PARENT_DEATH_SIGNAL, &action, std::ptr::null_mut()) })?;
    set_parent_death_signal(PARENT_DEATH_SIGNAL)?;
    Ok(how)
}

extern "C" fn kill_task_handler(_sig: libc::c_int) {
    kill_task();
}

/// SIGKILL to the whole task, the caller (its worker) last: the cgroup
/// through `cgroup.kill` or its pid list, else every child until none is
/// left (we are their subreaper), then our own process group. Only
/// async-signal-safe system calls on stack buffers: it runs in a signal
/// handler.
fn kill_task() {
    let kill_fd = CGROUP_KILL_FD.load(Ordering::SeqCst);
    if kill_fd >= 0 {
        // SAFETY: write(2) of one byte from a static string to an fd we
        // opened; this SIGKILLs the whole cgroup, us included.
        unsafe { libc::write(kill_fd, b"1".as_ptr().cast(), 1) };
    }
    let procs_fd = CGROUP_PROCS_FD.load(Ordering::SeqCst);
    if procs_fd >= 0 {
        let me = getpid();
        for _ in 0..1000 {
            let mut others = 0;
            read_pids(procs_fd, true, |pid| {
                if pid != me {
                    others += 1;
                    // SAFETY: kill(2) with integers; pid > 1 (parsed, ≠ us).
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            });
            if others == 0 {
                break;
            }
        }
    }
    kill_children();
    // SAFETY: kill(2) is async-signal-safe; 0 means "my process group",
    // which is the task's group: the worker is its leader.
    unsafe { libc::kill(0, libc::SIGKILL) };
}

/// SIGKILLs every child of ours, reaps them, and again, until none is left:
/// as a subreaper we inherit each killed child's children, so this takes
/// the whole tree. Async-signal-safe (raw system calls, stack buffers).
pub fn kill_children() {
    for _ in 0..1000 {
        // No child at all, not even a zombie: nothing of the tree is left
        // (as subreaper we inherit every orphan in it, so none can be
        // elsewhere). One system call where /proc would take a dozen.
        // SAFETY: waitpid with WNOHANG and a null status pointer.
        let reaped = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if reaped == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
            return;
        }
        let mut found = 0;
        for_each_thread(|tid| {
            let mut path = [0u8; 64];
            let mut n = 0;
            for part in [
                &b"/proc/self/task/"[..],
                fmt_decimal(tid, &mut [0u8; 12]),
                b"/children\0",
            ] {
                path[n..n + part.len()].copy_from_slice(part);
                n += part.len();
            }
            // SAFETY: `path` is NUL-terminated (the last part ends in \0).
            let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
            if fd < 0 {
                return;
            }
            read_pids(fd, false, |pid| {
                found += 1;
                // SAFETY: kill(2) with integers; pid > 1 (parsed).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            });
            // SAFETY: closing the fd opened above.
            unsafe { libc::close(fd) };
        });
        // SAFETY: waitpid with WNOHANG and a null status pointer.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        if found == 0 {
            return;
        }
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        // SAFETY: nanosleep with a valid timespec and no remainder wanted.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    }
}

/// Calls `f` with each thread id of ours (getdents64 on /proc/self/task).
fn for_each_thread(mut f: impl FnMut(i32)) {
    // SAFETY: a NUL-terminated path.
    let dir = unsafe {
        libc::open(
            c"/proc/self/task".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return;
    }
    let mut buf = [0u8; 2048];
    loop {
        // SAFETY: getdents64 writes at most `buf.len()` bytes into `buf`.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len()) };
        if n <= 0 {
            break;
        }
        let mut at = 0usize;
        while at + 19 < n as usize {
            // struct linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, name.
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            let name = &buf[at + 19..(at + reclen).min(n as usize)];
            let tid = name
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .fold(0i32, |acc, b| acc.saturating_mul(10).saturating_add((b - b'0') as i32));
            if tid > 0 {
                f(tid);
            }
            if reclen == 0 {
                break;
            }
            at += reclen;
        }
    }
    // SAFETY: closing the fd opened above.
    unsafe { libc::close(dir) };
}

/// Whether a file (a kernfs list such as `cgroup.procs`) has anything in
/// it, read from its start; a file that cannot be read has nothing.
pub fn has_content(fd: RawFd) -> bool {
    let mut buf = [0u8; 32];
    // SAFETY: pread writes at most `buf.len()` bytes into `buf`.
    unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) > 0 }
}

/// Reads decimal pids separated by whitespace from `fd` (from offset 0 if
/// `rewind`) and calls `f` with each one > 1. Stack buffer, no allocation.
fn read_pids(fd: RawFd, rewind: bool, mut f: impl FnMut(i32)) {
    let mut buf = [0u8; 1024];
    let mut offset: libc::off_t = 0;
    let mut num: i32 = 0;
    let mut digits = false;
    loop {
        let n = if rewind {
            // SAFETY: pread writes at most `buf.len()` bytes into `buf`.
            unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), offset) }
        } else {
            // SAFETY: read writes at most `buf.len()` bytes into `buf`.
            unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) }
        };
        if n <= 0 {
            break;
        }
        offset += n as libc::off_t;
        for &b in &buf[..n as usize] {
            if b.is_ascii_digit() {
                num = num.saturating_mul(10).saturating_add((b - b'0') as i32);
                digits = true;
            } else {
                if digits && num > 1 {
                    f(num);
                }
                num = 0;
                digits = false;
            }
        }
    }
    if digits && num > 1 {
        f(num);
    }
}

/// `n` in decimal, in `buf`.
fn fmt_decimal(mut n: i32, buf: &mut [u8; 12]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

/// Sends `sig` to one process.
pub fn kill_pid(pid: i32, sig: libc::c_int) -> io::Result<()> {
    if pid <= 1 {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: kill takes integers; pid > 1 was checked above.
    cvt(unsafe { libc::kill(pid, sig) }).map(drop)
}

/// Ends the process now, without exit handlers: for a forked worker,
/// whose output is never buffered.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes an integer and does not return.
    unsafe { libc::_exit(code) }
}

pub fn getpid() -> i32 {
    std::process::id() as i32
}

/// A just-forked worker's descriptors: /dev/null (`null`) on stdin, in
/// place of the fork server's socket; the control pipes moved to fds 3
/// (from agentd) and 4 (to agentd) and the containment file, if any, to 5,
/// all close-on-exec, so a task's program never sees them; every other fd
/// the fork server had closed. The sources are fds the fork server
/// received (never 0: its socket is there). Each is placed with one dup3
/// (musl's fcntl(F_DUPFD_CLOEXEC) costs two calls), parking first only a
/// source that sits where an earlier one is to go.
pub fn settle_worker_fds(
    from_agentd: RawFd,
    to_agentd: RawFd,
    containment: Option<RawFd>,
    null: RawFd,
) -> io::Result<(std::fs::File, std::fs::File, Option<RawFd>)> {
    use std::os::fd::FromRawFd;
    const FROM: RawFd = 3;
    const TO: RawFd = 4;
    const KEPT: RawFd = 5;
    // SAFETY: dup2 onto stdin replaces the fork server's socket in this
    // process only.
    cvt(unsafe { libc::dup2(null, 0) })?;
    let mut sources = [Some(from_agentd), Some(to_agentd), containment];
    let targets = [FROM, TO, KEPT];
    for i in 0..sources.len() {
        let Some(fd) = sources[i] else { continue };
        // A later source where this one goes would be overwritten: park it
        // above every target first.
        for later in sources.iter_mut().skip(i + 1) {
            if *later == Some(targets[i]) {
                // SAFETY: fcntl F_DUPFD_CLOEXEC on fd numbers; a bad fd is EBADF.
                *later = Some(cvt(unsafe {
                    libc::fcntl(targets[i], libc::F_DUPFD_CLOEXEC, KEPT + 1)
                })?);
            }
        }
        if fd != targets[i] {
            // SAFETY: dup3 onto a target fd (whatever was there is no longer
            // needed: no later source is there any more), close-on-exec.
            cvt(unsafe { libc::dup3(fd, targets[i], libc::O_CLOEXEC) })?;
        } else {
            // Already in place (not how the fork server's fds arrive).
            set_cloexec(fd, true)?;
        }
    }
    close_fds_from(if containment.is_some() { KEPT + 1 } else { KEPT });
    // SAFETY: fds 3 and 4 are the control pipes, owned by nothing else.
    let pipes = unsafe { (std::fs::File::from_raw_fd(FROM), std::fs::File::from_raw_fd(TO)) };
    Ok((pipes.0, pipes.1, containment.map(|_| KEPT)))
}

/// A pipe, both ends close-on-exec: (read end, write end).
pub fn pipe() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [-1; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 just created both; nothing else owns them.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

/// Sets O_NONBLOCK on a pipe end made by [`pipe`]. F_SETFL replaces the
/// status flags, and such an end has none to keep (the access mode is not
/// one F_SETFL changes), so no F_GETFL first: one call per end per worker.
pub fn set_pipe_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl F_SETFL on an fd number; a bad fd is EBADF.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) }).map(drop)
}

/// The steps a child takes between fork and exec, in this order (tini's
/// `isolate_child`, firecracker's jailer):
/// 1. own process group — so the kill ladder reaches it and all it forks;
/// 2. PDEATHSIG — it dies with the thread that forked it;
/// 3. rlimits.
#[derive(Debug, Clone, Default)]
pub struct ChildSetup {
    pub new_group: bool,
    pub parent_death: Option<libc::c_int>,
    pub rlimits: Vec<(Rlimit, u64)>,
}

/// Installs `setup` as the command's pre-exec hook.
pub fn prepare_child(cmd: &mut std::process::Command, setup: ChildSetup) {
    use std::os::unix::process::CommandExt;
    let hook = move || -> io::Result<()> {
        if setup.new_group {
            become_group_leader()?;
        }
        if let Some(sig) = setup.parent_death {
            set_parent_death_signal(sig)?;
        }
        for &(which, value) in &setup.rlimits {
            set_rlimit(which, value)?;
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec. It makes only
    // async-signal-safe system calls (setpgid, prctl, setrlimit), reads data captured before the fork, and allocates
    // nothing (io::Error::last_os_error does not allocate).
    unsafe { cmd.pre_exec(hook) };
}

/// SIGKILL to the worker's whole task (its cgroup, or its children and
/// process group; see [`arm_containment`]): used when the supervisor is gone.
pub fn kill_own_task() -> ! {
    kill_task();
    // Unreachable in practice: SIGKILL to our own group includes us.
    std::process::exit(137)
}

extern "C" fn ignore_signal(_sig: libc::c_int) {}

/// Catches SIGTERM with a handler that does nothing. The kill ladder's
/// SIGTERM is for the task's program; the worker stays to report how the
/// program ended. (Caught, not SIG_IGN: exec resets a caught signal to its
/// default, so the program still sees SIGTERM normally.)
pub fn outlast_sigterm() -> io::Result<()> {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = ignore_signal as *const () as libc::sighandler_t;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action` is valid and its handler does nothing at all.
    cvt(unsafe { libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut()) }).map(drop)
}

/// mount(2) with no data. EBUSY (already mounted) is success.
pub fn mount(source: &str, target: &str, fstype: &str, flags: libc::c_ulong) -> io::Result<()> {
    use std::ffi::CString;
    let c = |s: &str| CString::new(s).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    let (source, target, fstype) = (c(source)?, c(target)?, c(fstype)?);
    // SAFETY: three valid NUL-terminated strings and a null data pointer.
    match cvt(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            std::ptr::null(),
        )
    }) {
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
        other => other.map(drop),
    }
}

/// finit_module(2): loads a kernel module from an open file. `compressed`
/// asks the kernel to decompress it (MODULE_INIT_COMPRESSED_FILE, 5.17+).
/// EEXIST (already loaded) is success.
pub fn load_module(file: &std::fs::File, compressed: bool) -> io::Result<()> {
    const MODULE_INIT_COMPRESSED_FILE: libc::c_long = 4;
    let flags = if compressed { MODULE_INIT_COMPRESSED_FILE } else { 0 };
    let params = c"";
    // SAFETY: a valid open fd, a NUL-terminated empty parameter string,
    // and integer flags.
    let ret = unsafe { libc::syscall(libc::SYS_finit_module, file.as_raw_fd(), params.as_ptr(), flags) };
    if ret == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EEXIST) {
        Ok(())
    } else {
        Err(err)
    }
}

/// Flushes filesystems and powers the machine off (PID 1 must never exit:
/// the kernel would panic).
pub fn power_off() -> ! {
    // SAFETY: sync takes no arguments.
    unsafe { libc::sync() };
    // SAFETY: reboot(2) with a constant command; it does not return on success.
    unsafe { libc::reboot(libc::RB_POWER_OFF) };
    std::process::exit(0)
}

/// Gives PID 1 a stdin, stdout and stderr: the kernel starts an
/// initramfs's /init with none unless /dev/console was in the archive.
/// Each of fds 0–2 that is not open becomes /dev/console.
pub fn console_on_missing_stdio() -> io::Result<()> {
    use std::os::fd::IntoRawFd;
    for fd in 0..3 {
        // SAFETY: F_GETFD only reads the flags of an fd number.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1 {
            continue;
        }
        let console = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/console")?;
        let raw = console.into_raw_fd();
        if raw != fd {
            // SAFETY: dup2 onto a closed fd number; then our temporary fd,
            // which we own, is closed.
            cvt(unsafe { libc::dup2(raw, fd) })?;
            // SAFETY: `raw` came from into_raw_fd and is owned by us.
            unsafe { libc::close(raw) };
        }
    }
    Ok(())
}

/// Restores SIGPIPE's default action (Rust ignores it), so a client whose
/// output pipe closes (`agentd events | head`) ends quietly like any Unix
/// tool instead of panicking on a failed print. Never for the daemon.
pub fn default_sigpipe() {
    // SAFETY: installing SIG_DFL for SIGPIPE touches no memory.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

// --- directories by fd: the unix listener works inside a directory it has
// opened and checked, never re-resolving its path (see transport/unix.rs).

fn c_name(name: &str) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Opens `path` as a directory, refusing a symlink in its last component
/// (ELOOP) and anything that is not a directory (ENOTDIR).
pub fn open_dir_nofollow(path: &std::path::Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// `openat(dir, name, O_DIRECTORY|O_NOFOLLOW)`: the directory `name` inside `dir`.
pub fn open_dir_at(dir: &impl AsRawFd, name: &str) -> io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    let name = c_name(name)?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid dir fd and a NUL-terminated name that outlives the call.
    let fd = cvt(unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) })?;
    // SAFETY: openat just returned this fd; nothing else owns it.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// `mkdirat(dir, name, mode)`.
pub fn mkdir_at(dir: &impl AsRawFd, name: &str, mode: u32) -> io::Result<()> {
    let name = c_name(name)?;
    // SAFETY: a valid dir fd and a NUL-terminated name that outlives the call.
    cvt(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) }).map(drop)
}

/// `renameat(from_dir, from, to_dir, to)`: atomic, within one filesystem.
pub fn rename_at(from_dir: &impl AsRawFd, from: &str, to_dir: &impl AsRawFd, to: &str) -> io::Result<()> {
    let (from, to) = (c_name(from)?, c_name(to)?);
    // SAFETY: valid dir fds and NUL-terminated names that outlive the call.
    cvt(unsafe { libc::renameat(from_dir.as_raw_fd(), from.as_ptr(), to_dir.as_raw_fd(), to.as_ptr()) }).map(drop)
}

/// `unlinkat(dir, name)`, with AT_REMOVEDIR when `is_dir`.
pub fn unlink_at(dir: &impl AsRawFd, name: &str, is_dir: bool) -> io::Result<()> {
    let name = c_name(name)?;
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: a valid dir fd and a NUL-terminated name that outlives the call.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

/// `fchmodat(dir, name, mode)`.
pub fn chmod_at(dir: &impl AsRawFd, name: &str, mode: u32) -> io::Result<()> {
    let name = c_name(name)?;
    // SAFETY: a valid dir fd and a NUL-terminated name that outlives the call.
    cvt(unsafe { libc::fchmodat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t, 0) }).map(drop)
}

/// Whether the peer of the connected stream socket `fd` is gone: closed
/// (POLLHUP) or the socket failed (POLLERR). A peer that only shut down its
/// writing side (POLLRDHUP alone, a legal HTTP half-close) may still read
/// an answer, so it does not count. Never blocks (poll timeout 0).
pub fn peer_hung_up(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, count 1, timeout 0.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// Waits up to `timeout_ms` for `fd` to become readable (for a listening
/// socket: a connection to accept). `Ok(false)` on timeout.
pub fn wait_readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, count 1.
    match cvt(unsafe { libc::poll(&mut p, 1, timeout_ms) }) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

/// poll(2) over `fds`; `timeout_ms` -1 waits for ever. EINTR is a wake-up
/// like any other (`Ok(0)`).
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfds and
    // the count passed is its length.
    match cvt(unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) }) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

fn empty_sigset() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigfillset set it up.
    unsafe { std::mem::zeroed() }
}

/// Unblocks every signal of the calling thread: a worker forked by the
/// fork server begins with all of them blocked (see [`block_all_signals`]).
pub fn unblock_all_signals() {
    let set = empty_sigset();
    // SAFETY: an all-zero sigset_t is the empty set on Linux; a valid
    // pointer, affects only this thread.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) };
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
    Ok(if libc::WIFSIGNALED(status) {
        ExitStatus::Signal(libc::WTERMSIG(status))
    } else {
        ExitStatus::Code(libc::WEXITSTATUS(status))
    })
}

/// Takes ownership of an inherited listening socket (systemd socket
/// activation passes them as fds 3, 4, …): it must be an open socket in
/// the listening state; it is made close-on-exec so no task inherits it.
pub fn adopt_listening_socket(fd: RawFd) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let mut listening: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `listening`/`len` are valid for writes of `len` bytes; a bad
    // fd or a non-socket is an error (EBADF, ENOTSOCK), nothing else.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut listening as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    if listening == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a listening stream socket",
        ));
    }
    set_cloexec(fd, true)?;
    // SAFETY: the fd is open (getsockopt succeeded) and was handed to this
    // process to own; nothing else in agentd refers to it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (device, inode) of an open fd, or None if it is not open.
    fn identity(fd: RawFd) -> Option<(u64, u64)> {
        // SAFETY: a zeroed stat is valid storage for fstat to fill.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes into `st`, a valid pointer.
        (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
    }

    fn cloexec(fd: RawFd) -> bool {
        // SAFETY: fcntl F_GETFD on an fd number.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        flags >= 0 && flags & libc::FD_CLOEXEC != 0
    }

    /// In a forked child (no allocation there: other test threads may hold
    /// malloc's lock): put the three sources on `at`, settle, and check
    /// that 3, 4 and 5 are what they should be and nothing above is open.
    /// The exit code says which check failed.
    fn settle_in_child(at: [RawFd; 3]) -> i32 {
        let null = std::fs::File::open("/dev/null").unwrap();
        let (a, b) = pipe().unwrap();
        let (c, _d) = pipe().unwrap();
        let sources = [a.as_raw_fd(), b.as_raw_fd(), c.as_raw_fd()];
        let want = sources.map(|fd| identity(fd).unwrap());
        let null_id = identity(null.as_raw_fd()).unwrap();
        // SAFETY: the child only makes system calls on stack data and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // Park the sources high, then place them where the case says
            // (over whatever the test process had there).
            // SAFETY: fcntl on fd numbers; /dev/null goes high first, out
            // of the way of the placing below.
            let null_fd = unsafe { libc::fcntl(null.as_raw_fd(), libc::F_DUPFD, 110) };
            let mut parked = [0; 3];
            for i in 0..3 {
                // SAFETY: fcntl on fd numbers.
                parked[i] = unsafe { libc::fcntl(sources[i], libc::F_DUPFD, 100) };
            }
            for i in 0..3 {
                // SAFETY: dup2 on fd numbers.
                unsafe { libc::dup2(parked[i], at[i]) };
            }
            let code = match settle_worker_fds(at[0], at[1], Some(at[2]), null_fd) {
                Err(_) => 10,
                Ok((from, to, kept)) => {
                    use std::os::fd::IntoRawFd;
                    let (from, to) = (from.into_raw_fd(), to.into_raw_fd());
                    if (from, to, kept) != (3, 4, Some(5)) {
                        11
                    } else if [3, 4, 5].iter().zip(want).any(|(&fd, id)| identity(fd) != Some(id)) {
                        12
                    } else if ![3, 4, 5].iter().all(|&fd| cloexec(fd)) {
                        13
                    } else if identity(0) != Some(null_id) {
                        14
                    } else if (6..128).any(|fd| identity(fd).is_some()) {
                        15
                    } else {
                        0
                    }
                }
            };
            exit_now(code);
        }
        wait_pid(pid).map_or(99, |s| s.shell_code())
    }

    #[test]
    fn worker_fds_land_on_3_4_5_whatever_order_they_arrive_in() {
        for at in [
            [7, 8, 9],
            [4, 3, 5],
            [5, 4, 3],
            [3, 5, 4],
            [4, 5, 3],
            [3, 4, 5],
            [9, 3, 4],
        ] {
            assert_eq!(settle_in_child(at), 0, "sources on {at:?}");
        }
    }
}
