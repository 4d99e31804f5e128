//! A task's slot: its cgroup in every hierarchy agentd uses, the files of
//! it kept open, and what its counters say (pids.max hits, OOM kills).

use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Kind, Limits};

/// Cumulative counters of a slot, read when a task enters it, so a
/// reused slot reports only its current task.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Counters {
    pids_max_hits: u64,
    oom_kills: u64,
    mem_failcnt: u64,
}

/// A slot's files agentd keeps open. Whatever could not be opened is
/// absent, and its path is used instead.
#[derive(Debug, Default)]
pub(super) struct SlotFiles {
    /// The v2 directory, for forking a worker straight into it.
    pub(super) dir: Option<fs::File>,
    /// The v2 `cgroup.kill`, for the worker's parent-death path.
    pub(super) kill: Option<fs::File>,
    /// Each hierarchy's `cgroup.procs`, in the order of `TaskCgroups::dirs`:
    /// "is anything left?" after every task, and (v1 freezer) the worker's
    /// parent-death path.
    pub(super) procs: Vec<Option<fs::File>>,
}

impl SlotFiles {
    pub(super) fn open(dirs: &[(Kind, PathBuf)]) -> SlotFiles {
        let v2 = dirs.iter().find(|(k, _)| *k == Kind::V2).map(|(_, d)| d);
        SlotFiles {
            dir: v2.and_then(|d| fs::File::open(d).ok()),
            kill: v2.and_then(|d| fs::OpenOptions::new().write(true).open(d.join("cgroup.kill")).ok()),
            procs: dirs
                .iter()
                .map(|(_, d)| fs::File::open(d.join("cgroup.procs")).ok())
                .collect(),
        }
    }
}

/// A task's cgroups: one slot, in every hierarchy agentd uses.
#[derive(Debug, Default)]
pub struct TaskCgroups {
    pub(super) slot: usize,
    pub(super) dirs: Vec<(Kind, PathBuf)>,
    pub(super) files: Arc<SlotFiles>,
    pub(super) baseline: Counters,
    /// Which counters mean anything: a limit that is not set is never hit,
    /// so its files are not read (each read is a kernfs path walk).
    pub(super) limits: Limits,
    /// Set once anything in it had to be killed: see
    /// [`Isolation::release`](super::Isolation::release).
    pub(super) killed: std::cell::Cell<bool>,
}

impl TaskCgroups {
    /// SIGKILLs everything in the task's cgroups: cgroup.kill where the
    /// kernel has it, else freeze-and-kill (v1 freezer), else each pid.
    pub fn kill(&self) {
        for (kind, dir) in &self.dirs {
            if super::kill::kill_cgroup(*kind, dir) > 0 {
                self.killed.set(true);
            }
        }
    }

    /// The slot's v2 `cgroup.kill`, open, for the worker's parent-death path.
    pub fn kill_file(&self) -> Option<&fs::File> {
        self.files.kill.as_ref()
    }

    /// The slot's v1 freezer `cgroup.procs`, open (a host without v2): the
    /// worker's parent-death path SIGKILLs every pid listed there.
    pub fn freezer_procs_file(&self) -> Option<&fs::File> {
        let i = self.dirs.iter().position(|(k, _)| *k == Kind::V1Freezer)?;
        self.files.procs.get(i)?.as_ref()
    }

    /// True while any process is left in the task's cgroups: one read of
    /// each kept `cgroup.procs` from its start.
    pub fn populated(&self) -> bool {
        self.dirs
            .iter()
            .enumerate()
            .any(|(i, (_, d))| match self.files.procs.get(i) {
                Some(Some(f)) => crate::sys::has_content(f.as_raw_fd()),
                _ => !procs(d).is_empty(),
            })
    }

    pub(super) fn counters(&self) -> Counters {
        let mut c = Counters::default();
        for (kind, d) in &self.dirs {
            match kind {
                Kind::V2 => {
                    if self.limits.pids_max > 0 {
                        c.pids_max_hits += counter(&d.join("pids.events"), "max");
                    }
                    if self.limits.memory_max_bytes > 0 {
                        c.oom_kills += counter(&d.join("memory.events"), "oom_kill");
                    }
                }
                Kind::V1Pids => c.pids_max_hits += counter(&d.join("pids.events"), "max"),
                Kind::V1Memory => {
                    c.oom_kills += counter(&d.join("memory.oom_control"), "oom_kill");
                    c.mem_failcnt += fs::read_to_string(d.join("memory.failcnt"))
                        .ok()
                        .and_then(|s| s.trim().parse::<u64>().ok())
                        .unwrap_or(0);
                }
                Kind::V1Freezer => {}
            }
        }
        c
    }

    /// How many times this task hit pids.max (a fork bomb) so far.
    pub fn pids_exhausted(&self) -> u64 {
        self.counters()
            .pids_max_hits
            .saturating_sub(self.baseline.pids_max_hits)
    }

    /// Whether the OOM killer (or the memory limit) struck in this task.
    pub fn out_of_memory(&self) -> bool {
        let now = self.counters();
        now.oom_kills > self.baseline.oom_kills || now.mem_failcnt > self.baseline.mem_failcnt
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

/// The value of `key N` in a flat-keyed cgroup file.
fn counter(file: &Path, key: &str) -> u64 {
    fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flat_keyed_counters() {
        let dir = std::env::temp_dir().join(format!("agentd-cg-{}", crate::ids::new_id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("pids.events"), "max 3\n").unwrap();
        fs::write(dir.join("memory.events"), "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n").unwrap();
        assert_eq!(counter(&dir.join("pids.events"), "max"), 3);
        assert_eq!(counter(&dir.join("memory.events"), "oom_kill"), 1);
        assert_eq!(counter(&dir.join("memory.events"), "missing"), 0);
        assert_eq!(counter(&dir.join("nope"), "max"), 0);
        fs::remove_dir_all(&dir).unwrap();
    }
}
