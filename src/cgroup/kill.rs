//! What is in a cgroup (its `cgroup.procs`), killing it (cgroup.kill, or
//! freeze-and-kill each pid), and the slots that agentd daemons which died
//! without cleaning up left.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Kind;

/// SIGKILLs everything in one cgroup; returns the pids seen there.
pub(super) fn kill_cgroup(kind: Kind, dir: &Path) -> usize {
    let before = procs(dir);
    if before.is_empty() {
        return 0;
    }
    if kind == Kind::V2 && fs::write(dir.join("cgroup.kill"), "1").is_ok() {
        return before.len();
    }
    // A frozen cgroup cannot fork while we go through its list.
    let frozen = kind == Kind::V1Freezer && freeze(dir, true);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..100 {
        let now = procs(dir);
        let fresh: Vec<i32> = now.into_iter().filter(|p| seen.insert(*p)).collect();
        if fresh.is_empty() {
            break;
        }
        for pid in fresh {
            let _ = crate::sys::kill_pid(pid, libc::SIGKILL);
        }
    }
    if frozen {
        freeze(dir, false); // SIGKILLed tasks die once thawed
    }
    seen.len()
}

/// v1 freezer: writes FROZEN (or THAWED) and, for FROZEN, waits up to a
/// second for the state to settle. False if it could not freeze.
fn freeze(dir: &Path, on: bool) -> bool {
    let state = dir.join("freezer.state");
    if fs::write(&state, if on { "FROZEN" } else { "THAWED" }).is_err() {
        return false;
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while on && Instant::now() < deadline {
        if fs::read_to_string(&state).is_ok_and(|s| s.trim() == "FROZEN") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    !on
}

/// SIGKILLs whatever is in the cgroup `dir`, waits (up to 2 s) for it to
/// be gone, and removes the directory: (pids killed, removed).
pub(super) fn kill_and_remove(kind: Kind, dir: &Path) -> (usize, bool) {
    let killed = kill_cgroup(kind, dir);
    (killed, remove_when_empty(dir, Instant::now() + Duration::from_secs(2)))
}

/// Removes the cgroup `dir` once nothing is left in it, waiting until
/// `deadline` at most; true when it is gone.
pub(super) fn remove_when_empty(dir: &Path, deadline: Instant) -> bool {
    while !procs(dir).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    // Emptied, a v2 cgroup can refuse rmdir (EBUSY) a moment longer while
    // its last process finishes exiting.
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Err(_) => return false,
        }
    }
}

/// The `agentd-PID` directories under `base` left by daemons that are gone
/// (no such pid), and ours if one exists already (a dead daemon had our
/// pid: we just started, so nothing in it is ours).
fn stale_parents(base: &Path, own_pid: u32, alive: impl Fn(i32) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(base) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.strip_prefix("agentd-"))
                .and_then(|p| p.parse::<i32>().ok());
            pid.is_some_and(|p| p as u32 == own_pid || !alive(p))
        })
        .map(|e| e.path())
        .collect()
}

/// Kills and removes the cgroups of agentd daemons that died without
/// cleaning up (SIGKILL): every slot's processes are SIGKILLed (cgroup.kill
/// or freeze-and-kill), then the slot and its parent are removed.
pub(super) fn kill_stale(kind: Kind, base: &Path, own_pid: u32) {
    for parent in stale_parents(base, own_pid, |p| Path::new(&format!("/proc/{p}")).exists()) {
        let Ok(slots) = fs::read_dir(&parent) else { continue };
        for slot in slots.flatten().map(|s| s.path()).filter(|p| p.is_dir()) {
            let (killed, removed) = kill_and_remove(kind, &slot);
            if killed > 0 || !removed {
                log::warn!(
                    "cgroup.stale_slot path={} killed={killed} removed={removed} (left by an agentd that died)",
                    slot.display()
                );
            }
        }
        match fs::remove_dir(&parent) {
            Ok(()) => log::info!("cgroup.stale removed path={}", parent.display()),
            Err(e) => log::warn!("cgroup.stale path={} error={e}; not removed", parent.display()),
        }
    }
}

/// The pids a cgroup's `cgroup.procs` lists (none if it cannot be read).
pub(super) fn procs(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_parents_are_those_of_gone_daemons_and_our_own_pid() {
        let base = std::env::temp_dir().join(format!("agentd-cgs-{}", crate::ids::new_id()));
        for d in ["agentd-100", "agentd-200", "agentd-300", "agentd-x", "other", "agentd-"] {
            fs::create_dir_all(base.join(d).join("slot-1")).unwrap();
        }
        let alive = |p: i32| p == 200 || p == 300;
        let mut stale = stale_parents(&base, 300, alive);
        stale.sort();
        assert_eq!(stale, vec![base.join("agentd-100"), base.join("agentd-300")]);
        assert!(stale_parents(&base.join("missing"), 1, alive).is_empty());
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_fake_slot_with_no_processes_is_not_killed() {
        let dir = std::env::temp_dir().join(format!("agentd-cgk-{}", crate::ids::new_id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("cgroup.procs"), "").unwrap();
        assert_eq!(kill_cgroup(Kind::V2, &dir), 0);
        assert_eq!(kill_cgroup(Kind::V1Freezer, &dir), 0);
        fs::remove_dir_all(&dir).unwrap();
    }
}
