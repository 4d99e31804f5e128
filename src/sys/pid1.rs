//! What agentd needs as PID 1 of a VM guest (see init.rs): mounts, kernel
//! modules, a console for stdio, and powering off instead of exiting.

use std::io;
use std::os::fd::AsRawFd;

use super::cvt;

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
