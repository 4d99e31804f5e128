//! Directories by fd: the unix listener works inside a directory it has
//! opened and checked, never re-resolving its path (see transport/unix.rs);
//! and getdents64, which reads a directory's entries without allocating
//! (the worker's parent-death path lists its threads with it).

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use super::cvt;

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

/// One getdents64(2): as many `struct linux_dirent64` records of the
/// directory `dir` as fit in `buf`, from where the last call stopped;
/// `Ok(0)` at the end. Async-signal-safe.
pub fn getdents64(dir: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: getdents64 writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
