//! Starting processes. agentd spawns one process image of itself, the fork
//! server (`posix_spawn` of /proc/self/exe, once); the fork server forks
//! each task's worker with `CLONE_PARENT`, so agentd is the worker's parent
//! (it reaps it, and the worker's PDEATHSIG is tied to agentd), straight
//! into the task's cgroup with `CLONE_INTO_CGROUP`. The requests travel on
//! a SOCK_SEQPACKET pair with the descriptors as SCM_RIGHTS. A worker
//! starts its task's program with [`prepare_child`]'s steps before exec.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

use super::cvt;

/// What [`spawn_self`] starts.
#[derive(Debug, Clone, Copy)]
pub struct SelfSpawn<'a> {
    /// argv[0] is only the name it shows in `ps`.
    pub argv: &'a [std::ffi::CString],
    pub envp: &'a [std::ffi::CString],
    /// Becomes its stdin (fd 0).
    pub stdin_fd: RawFd,
}

const SELF_EXE: &std::ffi::CStr = c"/proc/self/exe";

/// A NULL-terminated pointer array over `strings`, for posix_spawn.
fn c_array(strings: &[std::ffi::CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Starts `/proc/self/exe` in its own process group, `stdin_fd` as its
/// stdin, /dev/null as stdout, stderr inherited, every other descriptor
/// left to close-on-exec (all of agentd's are), no signal blocked and
/// every handler default. posix_spawn is vfork-like: its cost does not grow
/// with agentd's memory. Returns the pid; the caller reaps it.
pub fn spawn_self(s: &SelfSpawn<'_>) -> io::Result<i32> {
    let argv = c_array(s.argv);
    let envp = c_array(s.envp);
    let check = |ret: libc::c_int| {
        if ret == 0 {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(ret))
        }
    };
    // SAFETY: zeroed storage, initialised by the *_init calls below before
    // any other use and destroyed at the end.
    let mut actions: libc::posix_spawn_file_actions_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut attr: libc::posix_spawnattr_t = unsafe { std::mem::zeroed() };
    // SAFETY: `actions` is valid storage for a file-actions object.
    check(unsafe { libc::posix_spawn_file_actions_init(&mut actions) })?;
    // SAFETY: `attr` is valid storage for an attributes object.
    if let Err(e) = check(unsafe { libc::posix_spawnattr_init(&mut attr) }) {
        // SAFETY: `actions` was initialised above.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut actions) };
        return Err(e);
    }
    let result = (|| {
        // SAFETY: an initialised file-actions object and integer fds.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut actions, s.stdin_fd, 0) })?;
        // SAFETY: as above, with a NUL-terminated path.
        check(unsafe {
            libc::posix_spawn_file_actions_addopen(&mut actions, 1, c"/dev/null".as_ptr(), libc::O_WRONLY, 0)
        })?;
        let no_signals = super::signals::empty_sigset();
        let mut all_signals = super::signals::empty_sigset();
        // SAFETY: `all_signals` is a valid sigset_t.
        unsafe { libc::sigfillset(&mut all_signals) };
        // SAFETY: an initialised attributes object and a valid sigset.
        check(unsafe { libc::posix_spawnattr_setsigmask(&mut attr, &no_signals) })?;
        // SAFETY: as above.
        check(unsafe { libc::posix_spawnattr_setsigdefault(&mut attr, &all_signals) })?;
        // SAFETY: as above; pgroup 0 = a new group led by the child.
        check(unsafe { libc::posix_spawnattr_setpgroup(&mut attr, 0) })?;
        let flags = libc::POSIX_SPAWN_SETPGROUP | libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
        // SAFETY: as above.
        check(unsafe { libc::posix_spawnattr_setflags(&mut attr, flags as libc::c_short) })?;
        let mut pid: libc::pid_t = 0;
        // SAFETY: valid objects, a NUL-terminated path, and NULL-terminated
        // argv/envp arrays whose strings outlive the call.
        check(unsafe {
            libc::posix_spawn(
                &mut pid,
                SELF_EXE.as_ptr(),
                &actions,
                &attr,
                argv.as_ptr() as *const *mut libc::c_char,
                envp.as_ptr() as *const *mut libc::c_char,
            )
        })?;
        Ok(pid)
    })();
    // SAFETY: both objects were initialised above.
    unsafe { libc::posix_spawnattr_destroy(&mut attr) };
    // SAFETY: as above.
    unsafe { libc::posix_spawn_file_actions_destroy(&mut actions) };
    result
}

/// clone3(2) flag: start the child in the cgroup `cgroup` names (5.7+).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` of clone3(2), up to `cgroup` (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Which side of [`fork_sibling`] we are on.
#[derive(Debug)]
pub enum Forked {
    /// The new process.
    Child,
    /// The caller: the new process's pid, and why it was not born in the
    /// cgroup it was asked into (it was forked outside; move it in).
    Parent {
        pid: i32,
        placement_refused: Option<io::Error>,
    },
}

/// True for the errors with which clone3 says it cannot place a child in a
/// cgroup here (old kernel, seccomp, a cgroup that takes no processes).
pub fn placement_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSYS | libc::EPERM | libc::EINVAL | libc::EBUSY | libc::EOPNOTSUPP)
    )
}

/// Forks the caller as a child of the caller's *parent* (CLONE_PARENT):
/// the fork server makes agentd's workers this way, so agentd reaps them
/// and their PDEATHSIG follows agentd. With `cgroup_fd` the child is born
/// in that cgroup v2 directory (no `cgroup.procs` write, whose machine-wide
/// lock stalls every fork); a kernel that refuses the placement gets a
/// plain fork, and the refusal is returned with the pid.
///
/// Only for a single-threaded caller that holds no lock (the fork server):
/// the child is a copy of it, as after fork(2). The child must not rely on
/// libc's cached thread id (`raise`, `abort` signal the fork server, which
/// keeps SIGABRT blocked for that reason); Rust's own locks do not use it.
pub fn fork_sibling(cgroup_fd: Option<RawFd>) -> io::Result<Forked> {
    let mut placement_refused_by = None;
    if let Some(fd) = cgroup_fd {
        match fork_sibling_into(fd) {
            Err(e) if placement_refused(&e) => placement_refused_by = Some(e),
            born => return born,
        }
    }
    // SAFETY: clone(2) as fork(2) with CLONE_PARENT: no stack, no tid
    // pointers, no TLS (zeros in every ABI's argument order).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::CLONE_PARENT as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    match ret {
        0 => Ok(Forked::Child),
        pid if pid > 0 => Ok(Forked::Parent {
            pid: pid as i32,
            placement_refused: placement_refused_by,
        }),
        _ => Err(io::Error::last_os_error()),
    }
}

/// [`fork_sibling`] born in the cgroup v2 directory `cgroup_fd` or not at
/// all: a refused placement is the error (see [`placement_refused`]).
pub fn fork_sibling_into(cgroup_fd: RawFd) -> io::Result<Forked> {
    let args = CloneArgs {
        flags: libc::CLONE_PARENT as u64 | CLONE_INTO_CGROUP,
        // Must be 0 with CLONE_PARENT: the child's exit signal is ours
        // (SIGCHLD, as posix_spawn set it), sent to agentd.
        exit_signal: 0,
        cgroup: cgroup_fd as u64,
        ..CloneArgs::default()
    };
    // SAFETY: the kernel reads `args` (valid, its size passed). No stack is
    // given: like fork(2), the child returns here on a copy of ours, in a
    // copy of our memory (no CLONE_VM).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    match ret {
        0 => Ok(Forked::Child),
        pid if pid > 0 => Ok(Forked::Parent {
            pid: pid as i32,
            placement_refused: None,
        }),
        _ => Err(io::Error::last_os_error()),
    }
}

/// A connected SOCK_SEQPACKET pair, both ends close-on-exec: each message
/// arrives whole, with the descriptors sent along with it.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: socketpair just created both; nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Most descriptors one message carries.
pub const FDS_PER_MESSAGE: usize = 4;

/// Room for FDS_PER_MESSAGE descriptors' control message, aligned for
/// cmsghdr.
#[repr(C, align(8))]
struct CmsgBuf([u8; 64]);

/// Sends one message with `fds` attached (SCM_RIGHTS). `nonblocking`:
/// EAGAIN (WouldBlock) instead of waiting when the peer's queue is full.
/// A gone peer is EPIPE, never SIGPIPE.
pub fn send_with_fds(sock: RawFd, bytes: &[u8], fds: &[RawFd], nonblocking: bool) -> io::Result<()> {
    assert!(fds.len() <= FDS_PER_MESSAGE);
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let mut cbuf = CmsgBuf([0; 64]);
    let fd_bytes = std::mem::size_of_val(fds) as u32;
    // SAFETY: a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
    // SAFETY: zeroed msghdr is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = cbuf.0.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` (<= 64) valid bytes, so the
        // first header fits.
        let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        // SAFETY: `cmsg` points into `cbuf` (checked non-null by the
        // space above); CMSG_DATA leaves room for `fd_bytes` after it.
        unsafe {
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr() as *const u8, libc::CMSG_DATA(cmsg), fd_bytes as usize);
        }
    }
    let flags = libc::MSG_NOSIGNAL | if nonblocking { libc::MSG_DONTWAIT } else { 0 };
    loop {
        // Without descriptors, send(2): musl's sendmsg reserves a 1 KiB
        // stack buffer for control data, and the fork server, which
        // answers this way after every fork, would write one more stack
        // page shared with the worker it just made (a copy-on-write fault).
        let n = if fds.is_empty() {
            // SAFETY: `bytes` is valid for reads of its length.
            unsafe { libc::send(sock, bytes.as_ptr().cast(), bytes.len(), flags) }
        } else {
            // SAFETY: `msg` and what it points at are valid for the call.
            unsafe { libc::sendmsg(sock, &msg, flags) }
        };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one message into `buf`, the descriptors that came with it
/// (close-on-exec) into `fds`. `Ok(0)` is the peer gone. A message longer
/// than `buf` or with more than FDS_PER_MESSAGE descriptors is refused
/// (InvalidData), its descriptors closed.
pub fn recv_with_fds(sock: RawFd, buf: &mut [u8], fds: &mut ReceivedFds, nonblocking: bool) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut cbuf = CmsgBuf([0; 64]);
    // SAFETY: zeroed msghdr is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = cbuf.0.len() as _;
    let flags = libc::MSG_CMSG_CLOEXEC | if nonblocking { libc::MSG_DONTWAIT } else { 0 };
    let n = loop {
        // SAFETY: `msg` and the buffers it points at are valid for writes.
        let n = unsafe { libc::recvmsg(sock, &mut msg, flags) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    // SAFETY: `msg` was filled by recvmsg; CMSG_FIRSTHDR/NXTHDR stay within
    // msg_controllen.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: a header recvmsg wrote, inside `cbuf`.
        let (level, kind, len) = unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type, (*cmsg).cmsg_len as usize) };
        if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
            // SAFETY: a pure size computation.
            let header = unsafe { libc::CMSG_LEN(0) } as usize;
            let count = len.saturating_sub(header) / std::mem::size_of::<RawFd>();
            for i in 0..count {
                // SAFETY: the kernel wrote `count` fds after the header;
                // read unaligned, as CMSG_DATA promises no alignment.
                let fd = unsafe { std::ptr::read_unaligned((libc::CMSG_DATA(cmsg) as *const RawFd).add(i)) };
                // SAFETY: each received descriptor is new and ours alone.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
        // SAFETY: as above.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        fds.clear();
        return Err(io::Error::new(io::ErrorKind::InvalidData, "message truncated"));
    }
    if fds.overflowed {
        fds.clear();
        return Err(io::Error::new(io::ErrorKind::InvalidData, "too many descriptors"));
    }
    Ok(n)
}

/// The descriptors one message brought, at most FDS_PER_MESSAGE, held in
/// place: receiving writes no heap memory (in the fork server each heap
/// page written after a fork is a copy-on-write fault).
#[derive(Debug, Default)]
pub struct ReceivedFds {
    fds: [Option<OwnedFd>; FDS_PER_MESSAGE],
    len: usize,
    overflowed: bool,
}

impl ReceivedFds {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `i`th descriptor, in the order they were sent.
    pub fn get(&self, i: usize) -> Option<&OwnedFd> {
        self.fds.get(i)?.as_ref()
    }

    /// Closes every descriptor held: with one close_range(2) when they are
    /// consecutive numbers (as a message's usually arrive: the lowest free
    /// ones, in order), else one by one.
    pub fn clear(&mut self) {
        let raw = |i: usize| self.get(i).map(AsRawFd::as_raw_fd);
        let first = raw(0).filter(|&first| self.len > 1 && (1..self.len).all(|i| raw(i) == Some(first + i as RawFd)));
        if let Some(first) = first {
            let last = first + self.len as RawFd - 1;
            // SAFETY: close_range takes integers; every fd in first..=last
            // is one held here (checked just above), and each is given up
            // below without another close.
            if unsafe { libc::syscall(libc::SYS_close_range, first as libc::c_uint, last as libc::c_uint, 0) } == 0 {
                for fd in self.fds.iter_mut().filter_map(Option::take) {
                    let _closed_already = fd.into_raw_fd();
                }
            }
        }
        self.fds = Default::default();
        self.len = 0;
        self.overflowed = false;
    }

    /// Keeps `fd`, or closes it if FDS_PER_MESSAGE are held already.
    fn push(&mut self, fd: OwnedFd) {
        match self.fds.get_mut(self.len) {
            Some(slot) => {
                *slot = Some(fd);
                self.len += 1;
            }
            None => self.overflowed = true,
        }
    }
}

/// The steps a task's program takes between fork and exec, in this order
/// (tini's `isolate_child`, firecracker's jailer). It stays in the
/// worker's process group, so the kill ladder reaches it and all it forks.
/// 1. PDEATHSIG — it dies with the thread that forked it;
/// 2. rlimits;
/// 3. the default scheduling policy (SCHED_OTHER), if asked.
#[derive(Debug, Clone, Default)]
pub struct ChildSetup {
    pub parent_death: Option<libc::c_int>,
    pub rlimits: Vec<(super::Rlimit, u64)>,
    /// Back under SCHED_OTHER: the worker runs under SCHED_BATCH because
    /// agentd put it there, not its operator.
    pub default_policy: bool,
}

/// Installs `setup` as the command's pre-exec hook.
pub fn prepare_child(cmd: &mut std::process::Command, setup: ChildSetup) {
    use std::os::unix::process::CommandExt;
    let hook = move || -> io::Result<()> {
        if let Some(sig) = setup.parent_death {
            super::set_parent_death_signal(sig)?;
        }
        for &(which, value) in &setup.rlimits {
            super::set_rlimit(which, value)?;
        }
        if setup.default_policy {
            super::default_scheduling()?;
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec. It makes only
    // async-signal-safe system calls (prctl, setrlimit, sched_setscheduler), reads data captured before the fork, and allocates
    // nothing (io::Error::last_os_error does not allocate).
    unsafe { cmd.pre_exec(hook) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_open(fd: RawFd) -> bool {
        // SAFETY: F_GETFD only asks about the number; EBADF if it is closed.
        unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
    }

    /// `n` pipes: the read ends, non-blocking, and the write ends' numbers
    /// sent in one message over `sock` (ours are dropped after): a read
    /// end then sees EOF only once the received copies are closed too.
    fn send_write_ends(sock: RawFd, n: usize) -> Vec<std::io::PipeReader> {
        let pipes: Vec<_> = (0..n).map(|_| std::io::pipe().expect("pipe")).collect();
        let raw: Vec<RawFd> = pipes.iter().map(|(_, w)| w.as_raw_fd()).collect();
        send_with_fds(sock, b"fork\0", &raw, false).expect("send");
        pipes.into_iter().map(|(r, _)| nonblocking(r)).collect()
    }

    /// `r` with O_NONBLOCK: a read is EAGAIN, not a hang, while a write
    /// end is open.
    fn nonblocking(r: std::io::PipeReader) -> std::io::PipeReader {
        // SAFETY: O_NONBLOCK on our own read end.
        unsafe { libc::fcntl(r.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        r
    }

    fn at_eof(r: &std::io::PipeReader) -> bool {
        matches!(std::io::Read::read(&mut &*r, &mut [0u8; 1]), Ok(0))
    }

    #[test]
    fn descriptors_arrive_in_order_and_are_closed_when_cleared() {
        let (a, b) = seqpacket_pair().expect("socketpair");
        let readers = send_write_ends(a.as_raw_fd(), 4);
        let mut buf = [0u8; 64];
        let mut fds = ReceivedFds::default();
        assert_eq!(
            recv_with_fds(b.as_raw_fd(), &mut buf, &mut fds, false).expect("recv"),
            5
        );
        assert_eq!(&buf[..5], b"fork\0");
        assert_eq!(fds.len(), 4);
        assert!(readers.iter().all(|r| !at_eof(r)), "held: the write ends are open");
        fds.clear();
        assert!(fds.is_empty() && fds.get(0).is_none());
        assert!(readers.iter().all(at_eof), "cleared: every write end closed");
    }

    #[test]
    fn descriptors_not_side_by_side_are_closed_one_by_one() {
        let (a, b) = seqpacket_pair().expect("socketpair");
        // Free numbers with one of ours between them, where the two
        // received descriptors should land: only they may be closed.
        let null = || OwnedFd::from(std::fs::File::open("/dev/null").expect("open"));
        let (low, kept, high) = (null(), null(), null());
        drop((low, high));
        let readers = send_write_ends(a.as_raw_fd(), 2);
        let mut fds = ReceivedFds::default();
        recv_with_fds(b.as_raw_fd(), &mut [0u8; 64], &mut fds, false).expect("recv");
        fds.clear();
        assert!(readers.iter().all(at_eof), "both received write ends closed");
        assert!(is_open(kept.as_raw_fd()), "the descriptor between them is untouched");
    }

    #[test]
    fn more_descriptors_than_a_message_holds_are_refused_and_closed() {
        let (a, b) = seqpacket_pair().expect("socketpair");
        // Six pipes; their write ends go in one message, then ours are
        // dropped: each read end sees EOF only once the received copies
        // are closed too.
        let pipes: Vec<(std::io::PipeReader, std::io::PipeWriter)> =
            (0..6).map(|_| std::io::pipe().expect("pipe")).collect();
        let raw: Vec<RawFd> = pipes.iter().map(|(_, w)| w.as_raw_fd()).collect();
        // send_with_fds itself sends at most FDS_PER_MESSAGE: build the
        // message by hand, as a peer could.
        let mut cbuf = CmsgBuf([0; 64]);
        let fd_bytes = std::mem::size_of_val(&raw[..]) as u32;
        let mut iov = libc::iovec {
            iov_base: b"x".as_ptr() as *mut libc::c_void,
            iov_len: 1,
        };
        // SAFETY: as in send_with_fds; 6 fds (24 bytes) fit the 64-byte buffer.
        unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.0.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = libc::CMSG_SPACE(fd_bytes) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
            std::ptr::copy_nonoverlapping(raw.as_ptr() as *const u8, libc::CMSG_DATA(cmsg), fd_bytes as usize);
            assert_eq!(libc::sendmsg(a.as_raw_fd(), &msg, 0), 1);
        }
        let readers: Vec<std::io::PipeReader> = pipes.into_iter().map(|(r, _)| nonblocking(r)).collect();
        let mut fds = ReceivedFds::default();
        let err = recv_with_fds(b.as_raw_fd(), &mut [0u8; 64], &mut fds, false).expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        assert!(fds.is_empty());
        assert!(readers.iter().all(at_eof), "every received write end was closed");
    }
}
