//! One cgroup per task, where the machine lets agentd make them; otherwise
//! the process group alone is the unit (and agentd says which at start-up).
//!
//! ```text
//!  cgroup v2 (unified)   <ours>/agentd-PID/slot-N/   cgroup.kill; pids.max and
//!                                                    memory.max when those
//!                                                    controllers are delegated
//!  cgroup v1 pids        <ours>/agentd-PID/slot-N/   pids.max
//!  cgroup v1 memory      <ours>/agentd-PID/slot-N/   memory.limit_in_bytes
//! ```
//! A hybrid host (v2 mounted beside v1 controllers, as here) uses both: v2
//! for `cgroup.kill`, v1 for the limits. A cgroup catches what a process
//! group cannot: a program that calls `setsid` to leave its group is still
//! in its task's cgroup, and is killed with it.
//!
//! procman puts a worker into its cgroups before sending it `spawn`, so
//! everything the task forks is inside from the first instruction.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

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
}

/// The per-task limits a cgroup enforces (0 = none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub pids_max: u64,
    pub memory_max_bytes: u64,
}

/// What agentd isolates tasks with. Task cgroups are slots reused from
/// task to task: creating and removing a cgroup costs the kernel more than
/// the rest of a short task together.
#[derive(Debug, Clone, Default)]
pub struct Isolation {
    hierarchies: Vec<Hierarchy>,
    limits: Limits,
    /// Slots (`slot-N` in every hierarchy) free for the next task.
    free: Vec<usize>,
    /// Slots made so far.
    made: usize,
}

/// Cumulative counters of a slot, read when a task enters it, so a
/// reused slot reports only its current task.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    pids_max_hits: u64,
    oom_kills: u64,
    mem_failcnt: u64,
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.hierarchies.is_empty() {
            return f.write_str("process-group");
        }
        let parts: Vec<&str> = self
            .hierarchies
            .iter()
            .map(|h| match h.kind {
                Kind::V2 => "cgroup2",
                Kind::V1Pids => "cgroup1-pids",
                Kind::V1Memory => "cgroup1-memory",
            })
            .collect();
        write!(f, "process-group+{}", parts.join("+"))
    }
}

/// A task's cgroups.
#[derive(Debug, Default)]
pub struct TaskCgroups {
    slot: usize,
    dirs: Vec<(Kind, PathBuf)>,
    baseline: Counters,
}

impl Isolation {
    /// Finds where agentd may create cgroups: `mode` is `auto`, `off`, or a
    /// directory in a cgroup v2 hierarchy to create them in.
    pub fn detect(mode: &str, limits: Limits) -> Isolation {
        let mut found = Vec::new();
        if mode == "off" {
            return Isolation::default();
        }
        let pid = std::process::id();
        let candidates: Vec<(Kind, PathBuf)> = if mode == "auto" {
            own_cgroups()
        } else {
            vec![(Kind::V2, PathBuf::from(mode))]
        };
        for (kind, base) in candidates {
            remove_stale(&base);
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
            }
            found.push(Hierarchy { kind, parent });
        }
        Isolation {
            hierarchies: found,
            limits,
            free: Vec::new(),
            made: 0,
        }
    }

    pub fn is_cgroup(&self) -> bool {
        !self.hierarchies.is_empty()
    }

    /// Puts `pid` (a worker) into a free slot's cgroups, making a new slot
    /// when none is free. Limits the kernel does not offer here are
    /// skipped, not errors.
    pub fn enter(&mut self, pid: i32) -> io::Result<TaskCgroups> {
        let (slot, new) = match self.free.pop() {
            Some(n) => (n, false),
            None => {
                self.made += 1;
                (self.made, true)
            }
        };
        let mut task = TaskCgroups {
            slot,
            ..TaskCgroups::default()
        };
        for h in &self.hierarchies {
            let dir = h.parent.join(format!("slot-{slot}"));
            if new {
                fs::create_dir(&dir)?;
                self.limit(h.kind, &dir)?;
            }
            task.dirs.push((h.kind, dir));
        }
        task.baseline = task.counters();
        for (_, dir) in &task.dirs {
            fs::write(dir.join("cgroup.procs"), pid.to_string())?;
        }
        Ok(task)
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

    /// Gives a finished task's slot back, if nothing is left in it.
    pub fn release(&mut self, task: TaskCgroups) {
        if task.populated() {
            log::warn!("cgroup.slot slot={} still has processes; not reused", task.slot);
        } else {
            self.free.push(task.slot);
        }
    }

    /// Removes agentd's slots and parent cgroups (at exit, once tasks are
    /// gone).
    pub fn remove(&self) {
        for h in &self.hierarchies {
            for n in 1..=self.made {
                let _ = fs::remove_dir(h.parent.join(format!("slot-{n}")));
            }
            let _ = fs::remove_dir(&h.parent);
        }
    }
}

impl TaskCgroups {
    /// SIGKILLs everything in the task's cgroups (cgroup.kill where the
    /// kernel has it, else each pid listed).
    pub fn kill(&self) {
        for (kind, dir) in &self.dirs {
            if *kind == Kind::V2 && fs::write(dir.join("cgroup.kill"), "1").is_ok() {
                continue;
            }
            for pid in procs(dir) {
                let _ = crate::sys::kill_pid(pid, libc::SIGKILL);
            }
        }
    }

    /// True while any process is left in the task's cgroups.
    pub fn populated(&self) -> bool {
        self.dirs.iter().any(|(_, d)| !procs(d).is_empty())
    }

    fn counters(&self) -> Counters {
        let mut c = Counters::default();
        for (kind, d) in &self.dirs {
            match kind {
                Kind::V2 => {
                    c.pids_max_hits += counter(&d.join("pids.events"), "max");
                    c.oom_kills += counter(&d.join("memory.events"), "oom_kill");
                }
                Kind::V1Pids => c.pids_max_hits += counter(&d.join("pids.events"), "max"),
                Kind::V1Memory => {
                    c.oom_kills += counter(&d.join("memory.oom_control"), "oom_kill");
                    c.mem_failcnt += fs::read_to_string(d.join("memory.failcnt"))
                        .ok()
                        .and_then(|s| s.trim().parse::<u64>().ok())
                        .unwrap_or(0);
                }
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

/// Removes the cgroups of agentd daemons that died without cleaning up
/// (SIGKILL): `agentd-PID` whose PID is gone, once their slots are empty.
/// Their task processes died with them (PDEATHSIG).
fn remove_stale(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else { return };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("agentd-"))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Ok(slots) = fs::read_dir(e.path()) {
            for t in slots.flatten().filter(|t| t.path().is_dir()) {
                let _ = fs::remove_dir(t.path());
            }
        }
        if fs::remove_dir(e.path()).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        log::info!(
            "cgroup.stale removed={removed} under {} (daemons that died without cleaning up)",
            base.display()
        );
    }
}

fn procs(dir: &Path) -> Vec<i32> {
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

/// Our own cgroups that agentd could use: the v2 one, and the v1 pids and
/// memory ones, each joined to where its hierarchy is mounted.
fn own_cgroups() -> Vec<(Kind, PathBuf)> {
    let cgroups = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out = Vec::new();
    for line in cgroups.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let kind = match controllers {
            "" => Kind::V2,
            c if c.split(',').any(|x| x == "pids") => Kind::V1Pids,
            c if c.split(',').any(|x| x == "memory") => Kind::V1Memory,
            _ => continue,
        };
        if let Some(mount) = mount_of(&mounts, kind) {
            out.push((kind, mount.join(path.trim_start_matches('/'))));
        }
    }
    out
}

/// The mount point of a hierarchy, from /proc/self/mountinfo.
fn mount_of(mountinfo: &str, kind: Kind) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mount_point = pre.split_whitespace().nth(4)?;
        let mut post = post.split_whitespace();
        let fstype = post.next()?;
        let options = post.nth(1).unwrap_or("");
        let wanted = match kind {
            Kind::V2 => fstype == "cgroup2",
            Kind::V1Pids => fstype == "cgroup" && options.split(',').any(|o| o == "pids"),
            Kind::V1Memory => fstype == "cgroup" && options.split(',').any(|o| o == "memory"),
        };
        wanted.then(|| PathBuf::from(mount_point))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn finds_each_hierarchy_mount() {
        assert_eq!(mount_of(MOUNTINFO, Kind::V2), Some("/sys/fs/cgroup/unified".into()));
        assert_eq!(mount_of(MOUNTINFO, Kind::V1Pids), Some("/sys/fs/cgroup/pids".into()));
        assert_eq!(
            mount_of(MOUNTINFO, Kind::V1Memory),
            Some("/sys/fs/cgroup/memory".into())
        );
        assert_eq!(mount_of("", Kind::V2), None);
    }

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

    #[test]
    fn off_means_process_groups() {
        let iso = Isolation::detect("off", Limits::default());
        assert!(!iso.is_cgroup());
        assert_eq!(iso.to_string(), "process-group");
    }
}
