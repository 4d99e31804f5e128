//! One cgroup per task, where the machine lets agentd make them; otherwise
//! the process group alone is the unit (and agentd says which at start-up).
//!
//! ```text
//!  cgroup v2 (unified)   <ours>/agentd-PID/slot-N/   containment: the worker is
//!                                                    born inside (clone3
//!                                                    CLONE_INTO_CGROUP), killed
//!                                                    with cgroup.kill; pids.max
//!                                                    and memory.max when those
//!                                                    controllers are delegated
//!  cgroup v1 pids        <ours>/agentd-PID/slot-N/   pids.max, only when
//!                                                    tasks.pids_max is set
//!  cgroup v1 memory      <ours>/agentd-PID/slot-N/   memory.limit_in_bytes, only
//!                                                    when tasks.memory_max_bytes
//!                                                    is set
//!  cgroup v1 freezer     <ours>/agentd-PID/slot-N/   containment on a host with
//!                                                    no usable v2 hierarchy
//! ```
//! A hybrid host (an empty v2 hierarchy beside v1 controllers) uses v2 for
//! containment and a v1 hierarchy only for a limit that is configured: a
//! `cgroup.procs` write (migration) takes a machine-wide lock that stalls
//! every fork, so agentd makes one only when it buys something. A cgroup
//! catches what a process group cannot: a program that calls `setsid` to
//! leave its group is still in its task's cgroup, and dies with it — also
//! when agentd is SIGKILLed: the worker's parent-death handler writes the
//! slot's `cgroup.kill`, and a restarted agentd kills and removes the slots
//! of a dead one.
//!
//! Here: where agentd makes slots, and handing them out and back. Which
//! cgroups are ours is `discover.rs`; a task's slot, its open files and
//! counters (what a fork bomb or the OOM killer did, what the task cost)
//! `slot.rs`; killing what is in a cgroup, and the slots dead
//! daemons left, `kill.rs`.

mod discover;
mod kill;
mod slot;

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use slot::{Counters, SlotDirs, SlotFiles};
pub use slot::{TaskCgroups, Usage};

/// One cgroup hierarchy agentd can create task cgroups in.
#[derive(Debug, Clone)]
struct Hierarchy {
    kind: Kind,
    /// `<mount>/<our cgroup>/agentd-PID`
    parent: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    V2,
    V1Pids,
    V1Memory,
    V1Freezer,
}

/// The per-task limits a cgroup enforces (0 = none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub pids_max: u64,
    pub memory_max_bytes: u64,
    /// A pids limit applied only where it costs nothing: when `pids_max`
    /// is 0 and agentd's own cgroup v2 slots can enforce `pids.max`
    /// (never through a cgroup v1 move per task).
    pub pids_max_where_free: u64,
}

/// What agentd isolates tasks with. Task cgroups are slots reused from
/// task to task: creating and removing a cgroup costs the kernel more than
/// the rest of a short task together.
#[derive(Debug, Default)]
pub struct Isolation {
    hierarchies: Vec<Hierarchy>,
    limits: Limits,
    /// Slots (`slot-N` in every hierarchy) free for the next task.
    free: Vec<usize>,
    /// What each slot has open, and its paths, made once and kept while it
    /// lives: every open is a kernfs path walk, and these were several per
    /// task.
    slot_files: std::collections::HashMap<usize, (SlotDirs, Arc<SlotFiles>)>,
    /// Slots made so far.
    made: usize,
    /// False once the kernel refused CLONE_INTO_CGROUP: migrate instead.
    clone_into: bool,
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.hierarchies.is_empty() {
            return f.write_str("process-group+subreaper");
        }
        let parts: Vec<&str> = self
            .hierarchies
            .iter()
            .map(|h| match h.kind {
                Kind::V2 => "cgroup2",
                Kind::V1Pids => "cgroup1-pids",
                Kind::V1Memory => "cgroup1-memory",
                Kind::V1Freezer => "cgroup1-freezer",
            })
            .collect();
        write!(f, "process-group+{}", parts.join("+"))
    }
}

impl Isolation {
    /// Finds where agentd may create cgroups: `mode` is `auto`, `off`, or a
    /// directory in a cgroup v2 hierarchy to create them in. Kills and
    /// removes the slots of agentd daemons that died without cleaning up.
    pub fn detect(mode: &str, mut limits: Limits) -> Isolation {
        if mode == "off" {
            return Isolation::default();
        }
        let own = if mode == "auto" {
            discover::own_cgroups(
                &fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
                &fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(),
            )
        } else {
            vec![(Kind::V2, PathBuf::from(mode))]
        };
        let pid = std::process::id();
        for (kind, base) in &own {
            kill::kill_stale(*kind, base, pid);
        }
        let mut found = Vec::new();
        for (kind, base) in discover::wanted(&own, limits) {
            if kind == Kind::V1Freezer && found.iter().any(|h: &Hierarchy| h.kind == Kind::V2) {
                continue; // v2 contains already
            }
            let parent = base.join(format!("agentd-{pid}"));
            match fs::create_dir(&parent) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    log::debug!("cgroup.skip {} error={e}", parent.display());
                    continue;
                }
            }
            if kind == Kind::V2 {
                // Delegate what our own cgroup offers; fine if it offers none.
                let _ = fs::write(parent.join("cgroup.subtree_control"), "+pids +memory");
                let delegated = fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
                if limits.pids_max == 0 && delegated.split_whitespace().any(|c| c == "pids") {
                    limits.pids_max = limits.pids_max_where_free;
                }
            }
            found.push(Hierarchy { kind, parent });
        }
        let clone_into = found.iter().any(|h| h.kind == Kind::V2);
        Isolation {
            hierarchies: found,
            limits,
            clone_into,
            ..Isolation::default()
        }
    }

    pub fn is_cgroup(&self) -> bool {
        !self.hierarchies.is_empty()
    }

    /// The pids limit in force (0 = none), once detection resolved it.
    pub fn pids_max(&self) -> u64 {
        self.limits.pids_max
    }

    /// A free slot for the next worker, made (with its limits) when none is
    /// free. Nothing is in it yet: the worker is born into it
    /// ([`Isolation::slot_dir`]) or moved in ([`Isolation::enter`]).
    pub fn acquire(&mut self) -> io::Result<TaskCgroups> {
        let slot = match self.free.pop() {
            Some(n) => n,
            None => {
                let n = self.made + 1;
                for h in &self.hierarchies {
                    let dir = h.parent.join(format!("slot-{n}"));
                    match fs::create_dir(&dir) {
                        Ok(()) => {}
                        // Left by a daemon of our pid, emptied by kill_stale.
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                        Err(e) => return Err(e),
                    }
                    self.limit(h.kind, &dir)?;
                }
                self.made = n;
                n
            }
        };
        // A slot's paths are made once, with its files: a slot is taken
        // for every task.
        let (dirs, files) = self
            .slot_files
            .entry(slot)
            .or_insert_with(|| {
                let dirs: SlotDirs = self
                    .hierarchies
                    .iter()
                    .map(|h| (h.kind, h.parent.join(format!("slot-{slot}"))))
                    .collect();
                let files = Arc::new(SlotFiles::open(&dirs, self.limits));
                (dirs, files)
            })
            .clone();
        let mut task = TaskCgroups {
            slot,
            dirs,
            files,
            baseline: Counters::default(),
            limits: self.limits,
            killed: std::cell::Cell::new(false),
        };
        task.baseline = task.counters();
        log::debug!("cgroup.acquire slot={slot} free={}", self.free.len());
        Ok(task)
    }

    /// The slot's v2 directory, open (and kept open while the slot lives),
    /// for forking a worker straight into it (the fork request carries it);
    /// None when the worker must be moved in.
    pub fn slot_dir<'a>(&self, task: &'a TaskCgroups) -> Option<&'a fs::File> {
        if !self.clone_into {
            return None;
        }
        task.files.dir.as_ref()
    }

    /// Whether a worker can be born inside every cgroup of its slot, so
    /// that nothing is done to it between its birth and its task: v2 only
    /// (no v1 hierarchy to move it into), with CLONE_INTO_CGROUP.
    pub fn born_whole(&self) -> bool {
        self.clone_into && self.hierarchies.iter().all(|h| h.kind == Kind::V2)
    }

    /// The kernel refused CLONE_INTO_CGROUP (`sys::placement_refused`):
    /// from now on workers are spawned outside and moved in. Logged once.
    pub fn placement_refused(&mut self, e: &io::Error) {
        if self.clone_into {
            log::warn!("cgroup.clone_into error={e}; moving each worker into its cgroup instead (slower under load)");
        }
        self.clone_into = false;
    }

    /// Moves `pid` (a worker) into the slot's cgroups it was not born in:
    /// the v1 ones, and v2 unless `born_inside`.
    pub fn enter(&self, pid: i32, task: &TaskCgroups, born_inside: bool) -> io::Result<()> {
        for (kind, dir) in task.dirs.iter() {
            if *kind == Kind::V2 && born_inside {
                continue;
            }
            fs::write(dir.join("cgroup.procs"), pid.to_string())?;
        }
        Ok(())
    }

    fn limit(&self, kind: Kind, dir: &Path) -> io::Result<()> {
        let l = self.limits;
        match kind {
            Kind::V2 => {
                if l.pids_max > 0 {
                    let _ = fs::write(dir.join("pids.max"), l.pids_max.to_string());
                }
                if l.memory_max_bytes > 0 {
                    let _ = fs::write(dir.join("memory.max"), l.memory_max_bytes.to_string());
                    let _ = fs::write(dir.join("memory.swap.max"), "0");
                }
            }
            Kind::V1Pids if l.pids_max > 0 => fs::write(dir.join("pids.max"), l.pids_max.to_string())?,
            Kind::V1Memory if l.memory_max_bytes > 0 => {
                fs::write(dir.join("memory.limit_in_bytes"), l.memory_max_bytes.to_string())?;
                let _ = fs::write(dir.join("memory.memsw.limit_in_bytes"), l.memory_max_bytes.to_string());
            }
            _ => {}
        }
        Ok(())
    }

    /// Gives a finished task's slot back, if nothing is left in it. A slot
    /// whose `cgroup.kill` was written is removed instead: on the kernel
    /// measured (6.18) every later clone3 CLONE_INTO_CGROUP into it is
    /// SIGKILLed at birth (the kill sequence is compared against the
    /// parent's cgroup, not the target's).
    pub fn release(&mut self, task: TaskCgroups) {
        if task.populated() {
            log::warn!("cgroup.slot slot={} still has processes; not reused", task.slot);
        } else {
            // A worker that never reached procman's driver (a fork that
            // failed half-way) may have run here: its CPU time and peak are
            // no next task's. (A rare path; the driver reads once per task.)
            let _ = task.usage();
            self.release_empty(task);
        }
    }

    /// [`Isolation::release`] for a slot just seen empty (procman's sweep
    /// found nothing left of the task, and nothing can enter it any more):
    /// no second read of its process list.
    pub fn release_empty(&mut self, task: TaskCgroups) {
        if task.killed.get() {
            log::debug!("cgroup.retire slot={} (killed in)", task.slot);
            self.slot_files.remove(&task.slot);
            for (_, dir) in task.dirs.iter() {
                let _ = fs::remove_dir(dir);
            }
        } else {
            log::debug!("cgroup.release slot={}", task.slot);
            self.free.push(task.slot);
        }
    }

    /// Removes agentd's slots and parent cgroups (at exit, once every task
    /// is over). Nothing of a task outlives the daemon: a process still in
    /// a slot is SIGKILLed first, and named in the log (it should not be
    /// there); a slot that still cannot be removed is reported, not
    /// silently left.
    pub fn remove(&self) {
        // Every slot that refuses rmdir is killed first, then all are waited
        // for together: the stop is held up 2 s at most, however many.
        let deadline = Instant::now() + Duration::from_secs(2);
        for h in &self.hierarchies {
            let mut refused = Vec::new();
            for n in 1..=self.made {
                let slot = h.parent.join(format!("slot-{n}"));
                match fs::remove_dir(&slot) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(_) => {
                        let left = kill::procs(&slot);
                        let killed = kill::kill_cgroup(h.kind, &slot);
                        refused.push((slot, left, killed));
                    }
                }
            }
            for (slot, left, killed) in refused {
                let removed = kill::remove_when_empty(&slot, deadline);
                if left.is_empty() && removed {
                    // Its last process was still exiting: not worth a warning.
                    log::debug!("cgroup.exit slot={} removed on a retry", slot.display());
                } else {
                    log::warn!(
                        "cgroup.exit slot={} pids={left:?} killed={killed} removed={removed} (left in a slot after every task ended)",
                        slot.display()
                    );
                }
            }
            // Called again on procman's later turns while the daemon exits:
            // gone already is done.
            match fs::remove_dir(&h.parent) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => log::warn!("cgroup.exit path={} error={e}; not removed", h.parent.display()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_means_process_groups_and_a_subreaper() {
        let iso = Isolation::detect("off", Limits::default());
        assert!(!iso.is_cgroup());
        assert_eq!(iso.to_string(), "process-group+subreaper");
    }
}
