//! The process table from /proc, and signals through pidfds: a pid read in
//! a scan is opened as a pidfd and checked against the scan's start time,
//! so a signal never reaches a process that merely reused the pid.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub comm: String,
    pub state: char,
    /// Start time in clock ticks after boot (stat field 22).
    pub start: u64,
}

fn parse_stat(pid: i32, stat: &str) -> Option<Proc> {
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(Proc {
        pid,
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        pgid: f.get(2)?.parse().ok()?,
        comm,
        start: f.get(19)?.parse().ok()?,
    })
}

pub fn stat(pid: i32) -> Option<Proc> {
    parse_stat(pid, &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process now.
pub fn scan() -> HashMap<i32, Proc> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Some(p) = stat(pid) {
            out.insert(pid, p);
        }
    }
    out
}

/// The value of `name` in a process's environment; Some("") when it is
/// there and empty, None when it is not (or the process is gone).
pub fn env_var(pid: i32, name: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{name}=");
    env.split(|b| *b == 0).find_map(|kv| {
        kv.strip_prefix(prefix.as_bytes())
            .map(|v| String::from_utf8_lossy(v).into_owned())
    })
}

/// Whether `pid` descends from `ancestor` in `table`.
pub fn descends(table: &HashMap<i32, Proc>, pid: i32, ancestor: i32) -> bool {
    let mut at = pid;
    for _ in 0..64 {
        match table.get(&at) {
            Some(p) if p.ppid == ancestor => return true,
            Some(p) if p.ppid > 1 => at = p.ppid,
            _ => return false,
        }
    }
    false
}

pub fn children(table: &HashMap<i32, Proc>, ppid: i32) -> impl Iterator<Item = &Proc> {
    table.values().filter(move |p| p.ppid == ppid)
}

pub fn threads_fds_rss(pid: i32) -> Option<(usize, usize, u64)> {
    let count = |dir: String| std::fs::read_dir(dir).map(|d| d.count()).ok();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())?;
    Some((
        count(format!("/proc/{pid}/task"))?,
        count(format!("/proc/{pid}/fd"))?,
        rss_kb,
    ))
}

/// A process's open fds by kind (pipe, socket, cgroup file, …), for a report.
pub fn fd_kinds(pid: i32) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let target = std::fs::read_link(e.path())
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default();
        let kind = if target.starts_with("/sys/fs/cgroup") {
            "cgroup".to_string()
        } else if let Some((k, _)) = target.split_once(':') {
            k.to_string()
        } else {
            "file".to_string()
        };
        *out.entry(kind).or_default() += 1;
    }
    out
}

pub use crate::common::lowest_free_fd;

/// How many of a process's fds are cgroup files.
pub fn cgroup_fds(pid: i32) -> usize {
    fd_kinds(pid).get("cgroup").copied().unwrap_or(0)
}

/// A process held by a pidfd, checked to be the one a scan saw.
pub struct Held {
    pub pid: i32,
    fd: OwnedFd,
}

impl Held {
    /// Opens `p` if it is still the same process (same start time).
    pub fn open(p: &Proc) -> Option<Held> {
        #[allow(unsafe_code)]
        // SAFETY: pidfd_open(2) takes a pid and flags; it returns a new fd
        // or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p.pid, 0) } as i32;
        if fd < 0 {
            return None;
        }
        #[allow(unsafe_code)]
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Opened after the check below would race; opened before it, the
        // fd names whatever had the pid then, and the start time says if
        // that is still the process the scan saw. Its name is checked
        // again too: an idle worker renames itself when its task arrives.
        let now = stat(p.pid)?;
        (now.start == p.start && now.comm == p.comm && now.state != 'Z').then_some(Held { pid: p.pid, fd })
    }

    pub fn signal(&self, sig: i32) -> io::Result<()> {
        #[allow(unsafe_code)]
        // SAFETY: pidfd_send_signal(2) on a pidfd we own, no siginfo.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Whether the process has exited (the pidfd polls readable).
    pub fn exited(&self) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        #[allow(unsafe_code)]
        // SAFETY: one pollfd we own, zero timeout.
        let r = unsafe { libc::poll(&mut pfd, 1, 0) };
        r > 0
    }
}

/// RLIMIT_NOFILE of another process: sets (soft, hard), returns the old pair.
pub fn set_nofile(pid: i32, soft: u64, hard: u64) -> io::Result<(u64, u64)> {
    let new = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    #[allow(unsafe_code)]
    // SAFETY: prlimit(2) with two valid, owned structs.
    let r = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &new, &mut old) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((old.rlim_cur, old.rlim_max))
}

pub fn nofile(pid: i32) -> io::Result<(u64, u64)> {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    #[allow(unsafe_code)]
    // SAFETY: prlimit(2) reading only, into an owned struct.
    let r = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((old.rlim_cur, old.rlim_max))
}

pub use crate::common::daemon_cgroups;

/// The memory cgroup of a process and its limit file: v1
/// `memory.limit_in_bytes` or v2 `memory.max`.
pub fn memory_limit_file(pid: i32) -> Option<(PathBuf, PathBuf)> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    for line in cgroups.lines() {
        let mut f = line.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        let want_v1 = controllers.split(',').any(|c| c == "memory");
        for m in mounts.lines() {
            let Some((pre, post)) = m.split_once(" - ") else {
                continue;
            };
            let mut post = post.split_whitespace();
            let fstype = post.next().unwrap_or("");
            let opts = post.nth(1).unwrap_or("");
            let Some(mount) = pre.split_whitespace().nth(4) else {
                continue;
            };
            let dir = Path::new(mount).join(path.trim_start_matches('/'));
            if want_v1 && fstype == "cgroup" && opts.split(',').any(|o| o == "memory") {
                return Some((dir.join("memory.limit_in_bytes"), dir.join("memory.usage_in_bytes")));
            }
            if controllers.is_empty() && fstype == "cgroup2" && dir.join("memory.max").exists() {
                return Some((dir.join("memory.max"), dir.join("memory.current")));
            }
        }
    }
    None
}

/// The processes in `cgroups` and the cgroups below them.
pub fn in_cgroups(cgroups: &[PathBuf]) -> Vec<Proc> {
    fn walk(dir: &Path, out: &mut Vec<Proc>) {
        let pids = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        out.extend(pids.split_whitespace().filter_map(|p| stat(p.parse().ok()?)));
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), out);
            }
        }
    }
    let mut out = Vec::new();
    for c in cgroups {
        walk(c, &mut out);
    }
    out
}

/// The processes marked as the run's agent's (CHAOS_RUN=`run_id`) whose
/// CHAOS_CTX `ctx` accepts.
pub fn marked(run_id: &str, ctx: impl Fn(&str) -> bool) -> Vec<Proc> {
    scan()
        .into_values()
        .filter(|p| p.state != 'Z')
        .filter(|p| env_var(p.pid, "CHAOS_RUN").as_deref() == Some(run_id))
        .filter(|p| env_var(p.pid, "CHAOS_CTX").is_some_and(|c| ctx(&c)))
        .collect()
}
