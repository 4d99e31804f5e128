//! A task's slot: its cgroup in every hierarchy agentd uses, the files of
//! it kept open, and what its counters say (pids.max hits, OOM kills, and
//! what the task cost: CPU time and peak memory).
//!
//! The cost counters are cumulative over every task a slot serves, so a
//! task's share is a difference; each is read once per task, at its end
//! (the slot is empty then, and until the next worker is born in it), and
//! that reading is the next task's baseline. A peak cannot be subtracted:
//! it is reset instead, through the same kept fd, after it is read.
//!
//! ```text
//!  v2  cpu.stat                    user_usec, system_usec: the CPU readings
//!  v2  memory.peak (kernel ≥ 6.12) a write resets the peak seen through this fd;
//!                                  older kernels cannot, and it is not used
//!  v1  memory.max_usage_in_bytes   a write resets it (a memory limit made the slot)
//! ```

use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::kill::procs;
use super::{Kind, Limits};
use crate::cost::{CpuTimes, MEMORY_CGROUP1, MEMORY_CGROUP2};

/// Cumulative counters of a slot, read when a task enters it, so a
/// reused slot reports only its current task.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Counters {
    pids_max_hits: u64,
    oom_kills: u64,
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
    /// The v2 `cpu.stat` (every v2 cgroup has one, controllers or not).
    cpu_stat: Option<fs::File>,
    /// Its reading at the end of the slot's last task (or when opened).
    cpu_seen: [AtomicU64; 2],
    /// The slot's peak-memory file, open for reading and resetting, and
    /// which it is: v2 `memory.peak` where the memory controller is on and
    /// the kernel resets it per fd, else v1 `memory.max_usage_in_bytes`
    /// where a memory limit made a v1 slot.
    peak: Option<(fs::File, &'static str)>,
    /// Each hierarchy's counter files that the limits make meaningful (its
    /// pids.max hits, its OOM kills), in the order of `TaskCgroups::dirs`:
    /// kept open so that a verdict read under an fd squeeze still sees an
    /// OOM kill (opened then, the file would read as "none", and the kill
    /// pass for a crash: the chaos hour saw it).
    events: Vec<[Option<fs::File>; 2]>,
}

/// Which counter file of a hierarchy, and the key in it.
fn event_files(kind: Kind, limits: Limits) -> [Option<(&'static str, &'static str)>; 2] {
    match kind {
        Kind::V2 => [
            (limits.pids_max > 0).then_some(("pids.events", "max")),
            (limits.memory_max_bytes > 0).then_some(("memory.events", "oom_kill")),
        ],
        Kind::V1Pids => [Some(("pids.events", "max")), None],
        Kind::V1Memory => [None, Some(("memory.oom_control", "oom_kill"))],
        Kind::V1Freezer => [None, None],
    }
}

impl SlotFiles {
    pub(super) fn open(dirs: &[(Kind, PathBuf)], limits: Limits) -> SlotFiles {
        let v2 = dirs.iter().find(|(k, _)| *k == Kind::V2).map(|(_, d)| d);
        let v1_memory = dirs.iter().find(|(k, _)| *k == Kind::V1Memory).map(|(_, d)| d);
        let cpu_stat = v2.and_then(|d| fs::File::open(d.join("cpu.stat")).ok());
        // What a slot made by an earlier daemon of our pid counted is not
        // this daemon's: the first task's baseline is the slot as found.
        let seen = cpu_stat.as_ref().and_then(read_cpu).unwrap_or_default();
        let peak = v2
            .and_then(|d| resettable(&d.join("memory.peak")).map(|f| (f, MEMORY_CGROUP2)))
            .or_else(|| {
                v1_memory.and_then(|d| resettable(&d.join("memory.max_usage_in_bytes")).map(|f| (f, MEMORY_CGROUP1)))
            });
        SlotFiles {
            dir: v2.and_then(|d| fs::File::open(d).ok()),
            kill: v2.and_then(|d| fs::OpenOptions::new().write(true).open(d.join("cgroup.kill")).ok()),
            procs: dirs
                .iter()
                .map(|(_, d)| fs::File::open(d.join("cgroup.procs")).ok())
                .collect(),
            cpu_stat,
            cpu_seen: [AtomicU64::new(seen.user_usec), AtomicU64::new(seen.system_usec)],
            peak,
            events: dirs
                .iter()
                .map(|(kind, d)| {
                    event_files(*kind, limits).map(|f| f.and_then(|(name, _)| fs::File::open(d.join(name)).ok()))
                })
                .collect(),
        }
    }
}

/// A peak file opened for reading and writing, and reset once: kept only
/// if the kernel takes the reset (v2 `memory.peak` before 6.12 cannot be
/// opened for writing; its peak would span every task of the slot).
fn resettable(path: &Path) -> Option<fs::File> {
    let f = fs::OpenOptions::new().read(true).write(true).open(path).ok()?;
    reset_peak(&f).then_some(f)
}

/// v2 `memory.peak` takes any non-empty string, v1
/// `memory.max_usage_in_bytes` any value: the peak becomes the usage now.
fn reset_peak(f: &fs::File) -> bool {
    f.write_at(b"0", 0).is_ok()
}

/// `cpu.stat`'s user and system time, from one read of the kept fd.
fn read_cpu(f: &fs::File) -> Option<CpuTimes> {
    let mut buf = [0u8; 1024];
    let n = f.read_at(&mut buf, 0).ok()?;
    parse_cpu_stat(&buf[..n])
}

/// `user_usec N` and `system_usec N` of a `cpu.stat`.
fn parse_cpu_stat(text: &[u8]) -> Option<CpuTimes> {
    let (mut user, mut system) = (None, None);
    for line in text.split(|b| *b == b'\n') {
        let mut f = line.split(|b| *b == b' ');
        let (Some(key), Some(value)) = (f.next(), f.next()) else {
            continue;
        };
        let value = std::str::from_utf8(value).ok().and_then(|v| v.parse::<u64>().ok());
        match key {
            b"user_usec" => user = value,
            b"system_usec" => system = value,
            _ => {}
        }
    }
    Some(CpuTimes {
        user_usec: user?,
        system_usec: system?,
    })
}

/// A decimal number alone in a file (a peak in bytes).
fn parse_number(text: &[u8]) -> Option<u64> {
    std::str::from_utf8(text).ok()?.trim().parse().ok()
}

/// What a slot's cost counters say at the end of a task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time: `(before, now)`, the slot's reading at the end of its
    /// previous task (or when agentd opened it) and now; the task's share
    /// is the difference.
    pub cpu: Option<(CpuTimes, CpuTimes)>,
    /// The peak memory since the previous task, in bytes, and the file
    /// that said it ([`MEMORY_CGROUP2`] or [`MEMORY_CGROUP1`]).
    pub memory_peak: Option<(u64, &'static str)>,
}

/// A slot's directory in each hierarchy agentd uses.
pub(super) type SlotDirs = Arc<[(Kind, PathBuf)]>;

/// A task's cgroups: one slot, in every hierarchy agentd uses.
#[derive(Debug, Default)]
pub struct TaskCgroups {
    pub(super) slot: usize,
    pub(super) dirs: SlotDirs,
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
        for (kind, dir) in self.dirs.iter() {
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

    // Not memory.failcnt for v1: it counts every charge that met the limit,
    // also those reclaim then satisfied, and a reused slot still carries the
    // page cache of the task before, so a task of 1 MiB after a 64 MiB one
    // "hit" the limit (the chaos hour: 19 tasks wrongly failed `exhausted`).
    pub(super) fn counters(&self) -> Counters {
        let mut c = Counters::default();
        for (i, (kind, d)) in self.dirs.iter().enumerate() {
            for (which, wanted) in event_files(*kind, self.limits).into_iter().enumerate() {
                let Some((name, key)) = wanted else { continue };
                let kept = self.files.events.get(i).and_then(|f| f[which].as_ref());
                let n = match kept {
                    Some(f) => kept_counter(f, key),
                    None => counter(&d.join(name), key),
                };
                match which {
                    0 => c.pids_max_hits += n,
                    _ => c.oom_kills += n,
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
        now.oom_kills > self.baseline.oom_kills
    }

    /// The task's cost counters, once it is gone and the slot empty: one
    /// read of each kept file. This CPU reading becomes the next task's
    /// baseline and the peak is reset for it, so call it once per task.
    pub fn usage(&self) -> Usage {
        let f = &self.files;
        let cpu = f.cpu_stat.as_ref().and_then(read_cpu).map(|now| {
            let before = CpuTimes {
                user_usec: f.cpu_seen[0].swap(now.user_usec, Ordering::Relaxed),
                system_usec: f.cpu_seen[1].swap(now.system_usec, Ordering::Relaxed),
            };
            (before, now)
        });
        let memory_peak = f.peak.as_ref().and_then(|(file, source)| {
            let mut buf = [0u8; 32];
            let n = file.read_at(&mut buf, 0).ok()?;
            let peak = parse_number(&buf[..n]);
            // Read or not, the next task starts from a fresh peak.
            reset_peak(file);
            Some((peak?, *source))
        });
        Usage { cpu, memory_peak }
    }
}

/// The value of `key N` in a flat-keyed cgroup file.
/// `key`'s number in a flat-keyed counter file kept open: one pread.
fn kept_counter(f: &fs::File, key: &str) -> u64 {
    let mut buf = [0u8; 512];
    let n = f.read_at(&mut buf, 0).unwrap_or(0);
    keyed(&String::from_utf8_lossy(&buf[..n]), key)
}

/// `key`'s number in a flat-keyed counter file, opened for the read.
fn counter(file: &Path, key: &str) -> u64 {
    keyed(&fs::read_to_string(file).unwrap_or_default(), key)
}

fn keyed(text: &str, key: &str) -> u64 {
    text.lines()
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

    #[test]
    fn a_limit_met_and_reclaimed_is_not_out_of_memory_only_a_kill_is() {
        let dir = std::env::temp_dir().join(format!("agentd-cg-{}", crate::ids::new_id()));
        fs::create_dir_all(&dir).unwrap();
        let oom = |kills: u64| {
            let text = format!("oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n");
            fs::write(dir.join("memory.oom_control"), text).unwrap();
        };
        oom(2);
        fs::write(dir.join("memory.failcnt"), "10\n").unwrap();
        let mut task = TaskCgroups {
            dirs: Arc::from([(Kind::V1Memory, dir.clone())]),
            ..TaskCgroups::default()
        };
        task.baseline = task.counters();
        // The previous task's page cache met the limit and was reclaimed.
        fs::write(dir.join("memory.failcnt"), "57\n").unwrap();
        assert!(!task.out_of_memory(), "failcnt alone is not an OOM");
        oom(3);
        assert!(task.out_of_memory(), "an OOM kill in this task is");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_oom_kill_is_read_through_the_kept_file_when_no_file_can_be_opened() {
        let base = std::env::temp_dir().join(format!("agentd-cg-{}", crate::ids::new_id()));
        let dir = base.join("slot-1");
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
        )
        .unwrap();
        let dirs: SlotDirs = Arc::from([(Kind::V1Memory, dir.clone())]);
        let files = Arc::new(SlotFiles::open(&dirs, Limits::default()));
        let mut task = TaskCgroups {
            dirs,
            files,
            ..TaskCgroups::default()
        };
        task.baseline = task.counters();
        // The kernel counts the kill in the file agentd holds; the path can
        // no longer be opened (as under an fd squeeze: here it is gone).
        fs::write(
            dir.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        )
        .unwrap();
        let moved = base.join("elsewhere");
        fs::rename(&dir, &moved).unwrap();
        assert!(task.out_of_memory(), "the kept file still says what the kernel counted");
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn reads_cpu_stat_and_a_peak() {
        // v2 without the cpu controller, and with it (more keys, any order).
        let bare = b"usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnice_usec 0\n";
        let full = b"usage_usec 9\nnr_periods 0\nsystem_usec 4\nthrottled_usec 0\nuser_usec 5\n";
        let times = |u, s| CpuTimes {
            user_usec: u,
            system_usec: s,
        };
        assert_eq!(parse_cpu_stat(bare), Some(times(1000, 500)));
        assert_eq!(parse_cpu_stat(full), Some(times(5, 4)));
        assert_eq!(
            parse_cpu_stat(b"usage_usec 9\nuser_usec 5\n"),
            None,
            "half a reading is none"
        );
        assert_eq!(parse_cpu_stat(b""), None);
        assert_eq!(parse_number(b"67108864\n"), Some(67_108_864));
        assert_eq!(parse_number(b"max\n"), None);
    }
}
