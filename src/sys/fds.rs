//! Descriptors: close-on-exec, closing all but a few, pipes, poll, a
//! worker's fds put in place after its fork, and the plain reads and writes
//! the worker's parent-death path is made of (one system call each on the
//! caller's buffers: async-signal-safe, nothing allocated).

use std::ffi::CStr;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::cvt;

/// A byte count from read(2) and friends, or the errno of their -1.
fn cvt_len(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
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
    let soft = super::nofile_limit().ok().map(|(soft, _)| soft);
    let max = soft.unwrap_or(4096).min(65_536) as RawFd;
    for fd in first..max {
        // SAFETY: closing an fd number we do not use; EBADF is harmless.
        unsafe { libc::close(fd) };
    }
}

/// A pipe, both ends close-on-exec: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 just created both; nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A close-on-exec duplicate of `fd` (procman's tests hold a worker's
/// ends of its pipes this way, as a fork server would).
pub fn dup_cloexec(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl F_DUPFD_CLOEXEC on an fd number; a bad fd is EBADF.
    let new = cvt(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) })?;
    // SAFETY: fcntl just made `new`; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Sets O_NONBLOCK on a pipe end made by [`pipe`]. F_SETFL replaces the
/// status flags, and such an end has none to keep (the access mode is not
/// one F_SETFL changes), so no F_GETFL first: one call per end per worker.
pub fn set_pipe_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl F_SETFL on an fd number; a bad fd is EBADF.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) }).map(drop)
}

/// Reads once from `fd` into the spare room of `buf` (up to `max` bytes,
/// and no more than the room there is) and keeps what came: a read
/// straight into its final place, nothing zeroed first.
pub fn read_appending(fd: RawFd, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    let room = buf.spare_capacity_mut();
    let want = room.len().min(max);
    // SAFETY: `room` is `want` or more bytes of `buf`'s own allocation,
    // writable; read(2) writes at most `want` of them.
    let n = cvt_len(unsafe { libc::read(fd, room.as_mut_ptr().cast(), want) })?;
    // SAFETY: the kernel initialized the first `n` (≤ `want`) bytes of the
    // spare room, which directly follow the vector's length.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// Asks the kernel to let a pipe hold `bytes` (F_SETPIPE_SZ; rounded up to
/// a power of two pages); the capacity it got. Refused (EPERM) past
/// /proc/sys/fs/pipe-max-size, or when the user's pipes already hold their
/// share (pipe-user-pages-soft) — the pipe then keeps what it had.
pub fn set_pipe_capacity(fd: RawFd, bytes: usize) -> io::Result<usize> {
    let want = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: fcntl F_SETPIPE_SZ on an fd number with an int argument; a
    // bad fd is EBADF, a non-pipe EBADF too.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, want) }).map(|got| got as usize)
}

/// Bytes written into a pipe and not yet read (FIONREAD works on either
/// end of a pipe, and after the reader is gone).
pub fn pipe_unread(fd: RawFd) -> io::Result<usize> {
    let mut unread: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int to the pointer, which is a live local.
    cvt(unsafe { libc::ioctl(fd, libc::FIONREAD, &mut unread) })?;
    Ok(unread.max(0) as usize)
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

/// open(2) of `path` for reading, close-on-exec; `directory` adds
/// O_DIRECTORY (anything else is ENOTDIR). Async-signal-safe: the path is
/// the caller's, nothing is allocated.
pub fn open_read_only(path: &CStr, directory: bool) -> io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_CLOEXEC | if directory { libc::O_DIRECTORY } else { 0 };
    // SAFETY: a NUL-terminated path that outlives the call; without
    // O_CREAT no mode argument is read.
    let fd = cvt(unsafe { libc::open(path.as_ptr(), flags) })?;
    // SAFETY: open just returned this fd; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One read(2) into `buf`; `Ok(0)` at the end. Async-signal-safe.
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: read writes at most `buf.len()` bytes into `buf`.
    cvt_len(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) })
}

/// One pread(2) into `buf` from `offset` (the file position stays where
/// it is); `Ok(0)` at the end. Async-signal-safe.
pub fn read_at(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    // SAFETY: pread writes at most `buf.len()` bytes into `buf`.
    cvt_len(unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), offset as libc::off_t) })
}

/// One write(2) of `bytes`: how many were written. Async-signal-safe.
pub fn write(fd: RawFd, bytes: &[u8]) -> io::Result<usize> {
    // SAFETY: write reads at most `bytes.len()` bytes from `bytes`.
    cvt_len(unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) })
}

/// Whether a file (a kernfs list such as `cgroup.procs`) has anything in
/// it, read from its start; a file that cannot be read has nothing.
pub fn has_content(fd: RawFd) -> bool {
    let mut buf = [0u8; 32];
    // SAFETY: pread writes at most `buf.len()` bytes into `buf`.
    unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) > 0 }
}

/// Where [`settle_worker_fds`] places a worker's containment file.
pub const WORKER_CONTAINMENT_FD: RawFd = 5;

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
    const FROM: RawFd = 3;
    const TO: RawFd = 4;
    const KEPT: RawFd = WORKER_CONTAINMENT_FD;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

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
            super::super::exit_now(code);
        }
        super::super::wait_pid(pid).map_or(99, |s| s.shell_code())
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

    #[test]
    fn the_plain_reads_and_writes_report_counts_and_errors() {
        let (r, w) = pipe().unwrap();
        assert_eq!(write(w.as_raw_fd(), b"12 34").unwrap(), 5);
        let mut buf = [0u8; 8];
        assert_eq!(read(r.as_raw_fd(), &mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"12 34");
        drop(w);
        assert_eq!(read(r.as_raw_fd(), &mut buf).unwrap(), 0, "end of a pipe");
        let e = read_at(r.as_raw_fd(), &mut buf, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESPIPE), "a pipe has no offsets");
        let e = open_read_only(c"/proc/self/status", true).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR));
        let status = open_read_only(c"/proc/self/status", false).unwrap();
        let n = read_at(status.as_raw_fd(), &mut buf, 0).unwrap();
        assert!(buf[..n].starts_with(b"Name:"), "{:?}", &buf[..n]);
        assert!(has_content(status.as_raw_fd()));
    }
}
