//! What wakes procman's poll: an eventfd for requests from the rest of
//! agentd, and a signalfd for SIGCHLD.
//!
//! Why not sockets and a signal handler: a byte over a unix socket is an
//! skb allocated and freed, and reading it back takes a second read to see
//! the socket empty; a SIGCHLD handler interrupts whichever thread the
//! kernel picks (often a connection thread asleep in a read, woken just to
//! write a byte to a self-pipe). An eventfd is a counter; a signalfd takes
//! the signal where procman polls, with no handler run at all.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::cvt;

/// A non-blocking, close-on-exec eventfd, at zero.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes integers and returns a new fd or -1.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: eventfd just created it; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd: its reader's poll sees it readable. A counter at
/// its maximum (EAGAIN) is readable already, which is all a wake needs.
pub fn eventfd_signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: write(2) of the 8 bytes of `one` from a valid pointer.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Sets an eventfd back to zero (one read takes the whole count).
pub fn eventfd_drain(fd: RawFd) {
    let mut count: u64 = 0;
    // SAFETY: read(2) of at most 8 bytes into `count`; EAGAIN (already
    // zero) leaves it alone.
    unsafe { libc::read(fd, (&mut count as *mut u64).cast(), 8) };
}

/// Blocks SIGCHLD in the calling thread and in every thread it starts from
/// now on (they inherit the mask), so the kernel keeps it pending for a
/// signalfd instead of interrupting one of them with the handler.
pub fn block_sigchld() {
    let mut set = super::empty_sigset();
    // SAFETY: `set` is a valid sigset_t; SIGCHLD is a valid signal.
    unsafe { libc::sigaddset(&mut set, libc::SIGCHLD) };
    // SAFETY: a valid set; affects only this thread.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// A non-blocking, close-on-exec signalfd for SIGCHLD (which must be
/// blocked in every thread for it to see them all: [`block_sigchld`]).
pub fn sigchld_fd() -> io::Result<OwnedFd> {
    let mut set = super::empty_sigset();
    // SAFETY: `set` is a valid sigset_t; SIGCHLD is a valid signal.
    unsafe { libc::sigaddset(&mut set, libc::SIGCHLD) };
    // SAFETY: -1 asks for a new fd; `set` is valid for the call.
    let fd = cvt(unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) })?;
    // SAFETY: signalfd just created it; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Takes every pending signal off a signalfd (their details are not
/// needed: the caller reaps with waitpid until nothing is left).
pub fn signalfd_drain(fd: RawFd) {
    const INFO: usize = std::mem::size_of::<libc::signalfd_siginfo>();
    let mut buf = [0u8; 8 * INFO];
    loop {
        // SAFETY: read(2) of at most `buf.len()` bytes into `buf`.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < buf.len() as isize {
            return; // drained (EAGAIN), or a short read: nothing more
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn readable(fd: RawFd) -> bool {
        let mut p = [libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }];
        super::super::poll(&mut p, 0).unwrap();
        p[0].revents & libc::POLLIN != 0
    }

    #[test]
    fn an_eventfd_is_readable_once_signalled_however_often_until_drained() {
        let fd = eventfd().unwrap();
        assert!(!readable(fd.as_raw_fd()));
        eventfd_signal(fd.as_raw_fd());
        eventfd_signal(fd.as_raw_fd());
        assert!(readable(fd.as_raw_fd()));
        eventfd_drain(fd.as_raw_fd());
        assert!(!readable(fd.as_raw_fd()), "one read takes the whole count");
    }

    #[test]
    fn a_blocked_sigchld_shows_on_the_signalfd_until_drained() {
        // A thread of its own (the mask is per thread), and the signal sent
        // to that thread: one for the whole process could go to another
        // test thread, which does not block it.
        std::thread::spawn(|| {
            block_sigchld();
            let fd = sigchld_fd().unwrap();
            assert!(!readable(fd.as_raw_fd()));
            // SAFETY: pthread_kill to the calling thread with a valid signal.
            unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGCHLD) };
            assert!(readable(fd.as_raw_fd()), "a pending SIGCHLD makes it readable");
            signalfd_drain(fd.as_raw_fd());
            assert!(!readable(fd.as_raw_fd()), "drained");
        })
        .join()
        .unwrap();
    }
}
