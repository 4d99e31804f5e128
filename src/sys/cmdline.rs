//! The command line `ps` shows (`/proc/PID/cmdline`): the argv strings exec
//! laid out, rewritten in place so a worker forked from the fork server
//! does not show as `agentd __forkserver` too.
//!
//! Written in place at the addresses `/proc/self/stat` gives (`arg_start`,
//! `arg_end`), read once by the fork server before it forks anything: no
//! pointer is made up. Without /proc the line stays as it was.

use std::sync::OnceLock;

/// `[arg_start, arg_end)` of this image, read once. A fork keeps the same
/// layout, so the fork server reads it and every worker inherits it.
static ARGS: OnceLock<Option<(u64, u64)>> = OnceLock::new();

fn arg_area() -> Option<(u64, u64)> {
    *ARGS.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after `(comm)` start at field 3; arg_start is field 48.
        let mut rest = stat.rsplit_once(')')?.1.split_whitespace().skip(45);
        let start: u64 = rest.next()?.parse().ok()?;
        let end: u64 = rest.next()?.parse().ok()?;
        (end > start).then_some((start, end))
    })
}

/// Reads where argv lies now, so children forked later know it without
/// reading /proc again.
pub fn remember_cmdline_area() {
    let _ = arg_area();
}

/// Makes `title` this process's whole command line, cut to the area exec
/// gave (for a worker: the 20 bytes of `agentd __forkserver`) and padded
/// with NULs. Only this process changes: a forked child's memory is its own.
/// Call it only while the process has one thread.
pub fn set_cmdline(title: &[u8]) {
    let Some((start, end)) = arg_area() else { return };
    let Ok(len) = usize::try_from(end - start) else { return };
    // Keep the last byte NUL: the kernel then shows exactly this area.
    let n = title.len().min(len.saturating_sub(1));
    let area = start as usize as *mut u8;
    // SAFETY: [start, end) is this process's argv area as the kernel reports
    // it: the strings exec laid out at the top of the initial stack, mapped
    // read-write for the process's whole life, `len` bytes long, and we
    // write within it. No Rust value refers into it: std copies argv into
    // owned strings only when env::args() is called, which a worker never
    // does, and the caller has one thread, so nothing reads it meanwhile.
    // (A write here costs no system call, unlike one through /proc/self/mem.)
    unsafe {
        std::ptr::copy_nonoverlapping(title.as_ptr(), area, n);
        std::ptr::write_bytes(area.add(n), 0, len - n);
    }
}
