//! The command line `ps` shows (`/proc/PID/cmdline`): the argv strings exec
//! laid out, rewritten in place so a worker forked from the fork server
//! does not show as `agentd __forkserver` too.
//!
//! Written through `/proc/self/mem` at the addresses `/proc/self/stat`
//! gives (`arg_start`, `arg_end`): no pointer is made up, and a bad address
//! is an error, not a crash. Best effort — without /proc the line stays.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
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
pub fn set_cmdline(title: &std::ffi::CStr) {
    let title = title.to_bytes();
    let Some((start, end)) = arg_area() else { return };
    let len = usize::try_from(end - start).unwrap_or(0);
    let mut bytes = vec![0u8; len];
    // Keep the last byte NUL: the kernel then shows exactly this area.
    let n = title.len().min(len.saturating_sub(1));
    bytes[..n].copy_from_slice(&title[..n]);
    if let Ok(mem) = OpenOptions::new().write(true).open("/proc/self/mem") {
        let _ = mem.write_all_at(&bytes, start);
    }
}
