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

use std::fmt;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// What each slot has open, opened once and kept while it lives: every
    /// open is a kernfs path walk, and these were several per task.
    slot_files: std::collections::HashMap<usize, Arc<SlotFiles>>,
    /// Slots made so far.
    made: usize,
    /// False once the kernel refused CLONE_INTO_CGROUP: migrate instead.
    clone_into: bool,
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

/// A slot's files agentd keeps open. Whatever could not be opened is
/// absent, and its path is used instead.
#[derive(Debug, Default)]
struct SlotFiles {
    /// The v2 directory, for forking a worker straight into it.
    dir: Option<fs::File>,
    /// The v2 `cgroup.kill`, for the worker's parent-death path.
    kill: Option<fs::File>,
    /// Each hierarchy's `cgroup.procs`, in the order of `TaskCgroups::dirs`:
    /// "is anything left?" after every task, and (v1 freezer) the worker's
    /// parent-death path.
    procs: Vec<Option<fs::File>>,
}

impl SlotFiles {
    fn open(dirs: &[(Kind, PathBuf)]) -> SlotFiles {
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
    slot: usize,
    dirs: Vec<(Kind, PathBuf)>,
    files: Arc<SlotFiles>,
    baseline: Counters,
    /// Which counters mean anything: a limit that is not set is never hit,
    /// so its files are not read (each read is a kernfs path walk).
    limits: Limits,
    /// Set once anything in it had to be killed: see [`Isolation::release`].
    killed: std::cell::Cell<bool>,
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
            own_cgroups(
                &fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
                &fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(),
            )
        } else {
            vec![(Kind::V2, PathBuf::from(mode))]
        };
        let pid = std::process::id();
        for (kind, base) in &own {
            kill_stale(*kind, base, pid);
        }
        let mut found = Vec::new();
        for (kind, base) in wanted(&own, limits) {
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
        let dirs: Vec<(Kind, PathBuf)> = self
            .hierarchies
            .iter()
            .map(|h| (h.kind, h.parent.join(format!("slot-{slot}"))))
            .collect();
        let files = self
            .slot_files
            .entry(slot)
            .or_insert_with(|| Arc::new(SlotFiles::open(&dirs)))
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
        for (kind, dir) in &task.dirs {
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
            for (_, dir) in &task.dirs {
                let _ = fs::remove_dir(dir);
            }
        } else {
            log::debug!("cgroup.release slot={}", task.slot);
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
    /// SIGKILLs everything in the task's cgroups: cgroup.kill where the
    /// kernel has it, else freeze-and-kill (v1 freezer), else each pid.
    pub fn kill(&self) {
        for (kind, dir) in &self.dirs {
            if kill_cgroup(*kind, dir) > 0 {
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

    fn counters(&self) -> Counters {
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

/// SIGKILLs everything in one cgroup; returns the pids seen there.
fn kill_cgroup(kind: Kind, dir: &Path) -> usize {
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
fn kill_stale(kind: Kind, base: &Path, own_pid: u32) {
    for parent in stale_parents(base, own_pid, |p| Path::new(&format!("/proc/{p}")).exists()) {
        let Ok(slots) = fs::read_dir(&parent) else { continue };
        for slot in slots.flatten().map(|s| s.path()).filter(|p| p.is_dir()) {
            let killed = kill_cgroup(kind, &slot);
            let deadline = Instant::now() + Duration::from_secs(2);
            while !procs(&slot).is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            let removed = fs::remove_dir(&slot).is_ok();
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

/// Of our own cgroups, the ones agentd uses: v2 (containment, and limits
/// where it has the controllers), a v1 pids or memory hierarchy only when
/// that limit is set, and the v1 freezer as containment only when there is
/// no v2 (dropped in [`Isolation::detect`] once v2 works).
fn wanted(own: &[(Kind, PathBuf)], limits: Limits) -> Vec<(Kind, PathBuf)> {
    let used = own.iter().filter(|(kind, _)| match kind {
        Kind::V2 | Kind::V1Freezer => true,
        Kind::V1Pids => limits.pids_max > 0,
        Kind::V1Memory => limits.memory_max_bytes > 0,
    });
    // v2 first: whether it works decides whether the freezer is needed.
    let (mut out, v1): (Vec<_>, Vec<_>) = used.cloned().partition(|(kind, _)| *kind == Kind::V2);
    out.extend(v1);
    out
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

/// Our own cgroups that agentd could use (from /proc/self/cgroup and
/// /proc/self/mountinfo): the v2 one, and the v1 pids, memory and freezer
/// ones, each joined to where its hierarchy is mounted.
fn own_cgroups(cgroups: &str, mounts: &str) -> Vec<(Kind, PathBuf)> {
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
            c if c.split(',').any(|x| x == "freezer") => Kind::V1Freezer,
            _ => continue,
        };
        if let Some(mount) = mount_of(mounts, kind) {
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
            Kind::V1Freezer => fstype == "cgroup" && options.split(',').any(|o| o == "freezer"),
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
    fn off_means_process_groups_and_a_subreaper() {
        let iso = Isolation::detect("off", Limits::default());
        assert!(!iso.is_cgroup());
        assert_eq!(iso.to_string(), "process-group+subreaper");
    }

    const HYBRID_CGROUP: &str = "\
8:pids:/
6:freezer:/
4:memory:/svc/x
0::/
";

    fn v1_mounts() -> String {
        MOUNTINFO.replace(
            "39 31 0:36",
            "37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n39 31 0:36",
        )
    }

    #[test]
    fn a_hybrid_host_uses_v2_and_v1_only_for_a_set_limit() {
        let own = own_cgroups(HYBRID_CGROUP, &v1_mounts());
        assert_eq!(
            own,
            vec![
                (Kind::V1Pids, "/sys/fs/cgroup/pids".into()),
                (Kind::V1Freezer, "/sys/fs/cgroup/freezer".into()),
                (Kind::V1Memory, "/sys/fs/cgroup/memory/svc/x".into()),
                (Kind::V2, "/sys/fs/cgroup/unified".into()),
            ]
        );
        // No limit: v2 only (the freezer is dropped once v2 works).
        let kinds = |l| wanted(&own, l).into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(kinds(Limits::default()), vec![Kind::V2, Kind::V1Freezer]);
        // A pids limit only where it is free never asks for v1.
        let free_only = Limits {
            pids_max_where_free: 1024,
            ..Limits::default()
        };
        assert_eq!(kinds(free_only), vec![Kind::V2, Kind::V1Freezer]);
        let pids = Limits {
            pids_max: 64,
            ..Limits::default()
        };
        assert_eq!(kinds(pids), vec![Kind::V2, Kind::V1Pids, Kind::V1Freezer]);
        let both = Limits {
            pids_max: 64,
            memory_max_bytes: 1 << 30,
            pids_max_where_free: 0,
        };
        assert_eq!(
            kinds(both),
            vec![Kind::V2, Kind::V1Pids, Kind::V1Freezer, Kind::V1Memory]
        );
    }

    #[test]
    fn a_pure_v2_host_and_a_v1_only_host() {
        let v2 = "25 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let own = own_cgroups("0::/system.slice/agentd.service\n", v2);
        assert_eq!(
            own,
            vec![(Kind::V2, "/sys/fs/cgroup/system.slice/agentd.service".into())]
        );
        let limits = Limits {
            pids_max: 64,
            memory_max_bytes: 1 << 30,
            pids_max_where_free: 0,
        };
        assert_eq!(wanted(&own, limits), own, "v2 enforces the limits itself");
        // v1 only: the freezer contains; no v2 line, or v2 not mounted.
        let mounts = v1_mounts().replace(
            "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
            "",
        );
        let own = own_cgroups(HYBRID_CGROUP, &mounts);
        let kinds: Vec<Kind> = wanted(&own, Limits::default()).into_iter().map(|(k, _)| k).collect();
        assert_eq!(kinds, vec![Kind::V1Freezer]);
        assert!(own_cgroups("", "").is_empty());
    }

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
