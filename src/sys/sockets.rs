//! Sockets: who the peer of a unix socket is, whether a peer is gone,
//! waiting for a connection, stopping an accept, and adopting a listening
//! socket that systemd passed.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use super::cvt;

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

/// shutdown(2) the read side of a listening socket: a thread blocked in
/// accept() on it returns EINVAL, which is how accept loops are stopped.
pub fn shutdown_read(sock: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: shutdown takes integers; a bad fd is EBADF.
    cvt(unsafe { libc::shutdown(sock.as_raw_fd(), libc::SHUT_RD) }).map(drop)
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
    super::set_cloexec(fd, true)?;
    // SAFETY: the fd is open (getsockopt succeeded) and was handed to this
    // process to own; nothing else in agentd refers to it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}
