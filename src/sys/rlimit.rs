//! Resource limits: a task's, set between fork and exec, and agentd's own
//! RLIMIT_NOFILE, raised as far as the connection cap needs.

use std::io;

use super::cvt;

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
/// Async-signal-safe.
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
