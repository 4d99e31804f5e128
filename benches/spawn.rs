//! µs per worker for each way agentd could start one, at a small and a
//! large parent RSS (fork-like clones copy page tables, so their cost grows
//! with the forking process's memory; posix_spawn's does not).
//!
//! `cargo bench --bench spawn` (root, on a host with a writable cgroup v2
//! hierarchy for the cgroup rows). The spawn rows exec this bench binary,
//! which exits at once when it sees `__worker`: spawn + exec + exit +
//! waitpid, one at a time. The fork-server rows are how agentd does it: a
//! single-threaded server process (this binary, `__forkserver`) forks a
//! child of ours with sys::fork_sibling on each request; the row is the
//! request, the fork, the child's exit and our waitpid.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Instant;

use agentd::sys::{self, SelfSpawn};

/// Spawns per batch; a row reports its fastest of BATCHES batches (the
/// machine is shared: the minimum is the least disturbed).
const ROUNDS: u32 = 100;
const BATCHES: u32 = 7;

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("__worker") => return,
        Some("__forkserver") => return fork_server(std::env::args().nth(2)),
        _ => {}
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
        let spawn = SelfSpawn {
            argv: &argv,
            envp: &envp,
            stdin_fd: theirs.as_raw_fd(),
        };
        row(rss, "posix_spawn + exec", || sys::spawn_self(&spawn));
        if let Some((dir, _)) = &cgroup {
            let procs = dir.join("cgroup.procs");
            row(rss, "posix_spawn + exec + cgroup.procs write", || {
                let pid = sys::spawn_self(&spawn)?;
                std::fs::write(&procs, pid.to_string())?;
                Ok(pid)
            });
        }
        for into in [None, cgroup.as_ref().map(|(dir, _)| dir.clone())] {
            let name = match into {
                None => "fork server",
                Some(_) => "fork server, CLONE_INTO_CGROUP",
            };
            let (mut ours, server) = start_fork_server(&envp, into.as_deref());
            row(rss, name, || {
                ours.write_all(&[1])?;
                let mut pid = [0u8; 4];
                ours.read_exact(&mut pid)?;
                Ok(i32::from_le_bytes(pid))
            });
            drop(ours);
            let _ = sys::wait_pid(server);
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

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;

/// Starts this binary as `__forkserver [CGROUP_DIR]` on a socket.
fn start_fork_server(envp: &[CString], into: Option<&std::path::Path>) -> (std::os::unix::net::UnixStream, i32) {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut argv = vec![CString::new("bench").unwrap(), CString::new("__forkserver").unwrap()];
    argv.extend(into.map(|d| CString::new(d.to_str().unwrap()).unwrap()));
    let pid = sys::spawn_self(&SelfSpawn {
        argv: &argv,
        envp,
        stdin_fd: theirs.as_raw_fd(),
    })
    .unwrap();
    (ours, pid)
}

/// The server: one fork per byte read on stdin; the child's pid back.
fn fork_server(into: Option<String>) {
    let dir = into.map(|d| std::fs::File::open(d).unwrap());
    let mut sock = std::os::unix::net::UnixStream::from(std::io::stdin().as_fd().try_clone_to_owned().unwrap());
    let mut byte = [0u8; 1];
    while sock.read_exact(&mut byte).is_ok() {
        match sys::fork_sibling(dir.as_ref().map(|d| d.as_raw_fd())) {
            Ok(sys::Forked::Child) => std::process::exit(0),
            Ok(sys::Forked::Parent { pid, .. }) => sock.write_all(&pid.to_le_bytes()).unwrap(),
            Err(e) => panic!("fork_sibling: {e}"),
        }
    }
}

use std::os::fd::AsFd;

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
