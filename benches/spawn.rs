//! µs per worker spawn for each way `sys::spawn_worker` can start one, at a
//! small and a large parent RSS (fork-like clones copy page tables, so
//! their cost grows with the parent's memory; posix_spawn's does not).
//!
//! `cargo bench --bench spawn` (root, on a host with a writable cgroup v2
//! hierarchy for the cgroup rows). Each spawn execs this bench binary,
//! which exits at once when it sees `__worker`; a row is spawn + exec +
//! exit + waitpid, one at a time.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Instant;

use agentd::sys::{self, WorkerSpawn};

/// Spawns per batch; a row reports its fastest of BATCHES batches (the
/// machine is shared: the minimum is the least disturbed).
const ROUNDS: u32 = 100;
const BATCHES: u32 = 7;

fn main() {
    if std::env::args().nth(1).as_deref() == Some("__worker") {
        return;
    }
    let cgroup = make_cgroup();
    let argv = [CString::new("bench").unwrap(), CString::new("__worker").unwrap()];
    let envp: Vec<CString> = std::env::vars()
        .filter(|(k, _)| k == "PATH" || k == "HOME")
        .map(|(k, v)| CString::new(format!("{k}={v}")).unwrap())
        .collect();
    let (_ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut ballast: Vec<u8> = Vec::new();
    for rss_mb in [2usize, 20] {
        // Grow RSS to about rss_mb: touch every page of a ballast buffer.
        ballast.resize(rss_mb.saturating_sub(2) * 1024 * 1024, 1);
        ballast.iter_mut().step_by(4096).for_each(|b| *b = 2);
        let rss = rss_kb();
        let spawn = |cgroup_fd| WorkerSpawn {
            argv: &argv,
            envp: &envp,
            control_fd: theirs.as_raw_fd(),
            cgroup_fd,
        };
        row(rss, "posix_spawn", || sys::spawn_worker(&spawn(None)));
        if let Some((dir, fd)) = &cgroup {
            row(rss, "clone3 CLONE_INTO_CGROUP", || {
                sys::spawn_worker(&spawn(Some(fd.as_raw_fd())))
            });
            let procs = dir.join("cgroup.procs");
            row(rss, "posix_spawn + cgroup.procs write", || {
                let pid = sys::spawn_worker(&spawn(None))?;
                std::fs::write(&procs, pid.to_string())?;
                Ok(pid)
            });
        }
        row(rss, "std Command (posix_spawn)", || {
            let child = std::process::Command::new("/proc/self/exe")
                .arg("__worker")
                .env_clear()
                .stdout(std::process::Stdio::null())
                .process_group(0)
                .spawn()?;
            Ok(child.id() as i32)
        });
    }
    if let Some((dir, _)) = cgroup {
        let _ = std::fs::remove_dir(dir);
    }
    std::hint::black_box(&ballast);
}

use std::os::unix::process::CommandExt;

fn row(rss_kb: u64, name: &str, mut spawn: impl FnMut() -> std::io::Result<i32>) {
    let mut us = f64::MAX;
    for _ in 0..BATCHES {
        let start = Instant::now();
        for _ in 0..ROUNDS {
            match spawn().and_then(sys::wait_pid) {
                Ok(sys::ExitStatus::Code(0)) => {}
                other => {
                    eprintln!("{name}: {other:?}");
                    std::process::exit(1);
                }
            }
        }
        us = us.min(start.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS));
    }
    println!("rss {:>6} kB  {name:<34} {us:>7.0} µs/spawn", rss_kb);
}

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A scratch cgroup v2 directory under our own, if we may make one.
fn make_cgroup() -> Option<(PathBuf, std::fs::File)> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        post.starts_with("cgroup2 ")
            .then(|| pre.split_whitespace().nth(4).map(PathBuf::from))?
    })?;
    let dir = mount
        .join(path.trim_start_matches('/'))
        .join(format!("agentd-bench-{}", std::process::id()));
    std::fs::create_dir(&dir).ok()?;
    let fd = std::fs::File::open(&dir).ok()?;
    Some((dir, fd))
}
