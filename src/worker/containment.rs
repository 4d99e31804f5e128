//! How a worker takes its whole task down: when agentd is gone (its
//! parent-death signal), and — as a subreaper — what is left when a task
//! ends.
//!
//! ```text
//!  agentd dies ─▶ PDEATHSIG (SIGUSR2, caught) ─▶ kill_task():
//!    v2 cgroup       write "1" to the slot's cgroup.kill (all of it, us too)
//!    v1 freezer      SIGKILL each pid its cgroup.procs lists but us, until none
//!    then, always    SIGKILL our children, reap, again, until none is left
//!                    (as subreaper every orphan of the task is one of them)
//!    last            SIGKILL our own process group, the worker included
//! ```
//!
//! All of it runs in a signal handler, on whichever thread the signal
//! interrupted, wherever that thread was — inside malloc, holding a lock —
//! and in a worker that is dying: only async-signal-safe system calls
//! through `sys` (open, read, pread, getdents64, write, kill, waitpid,
//! nanosleep, close), on stack buffers, with nothing allocated and no lock
//! taken. What is parsed (`/proc/self/task` records, pid lists, a path) is
//! parsed by pure functions over byte slices, tested below without a kernel.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use crate::sys;

/// The signal a worker asks for when agentd dies: caught (not SIGKILL), so
/// the worker can take its whole task — grandchildren that left its
/// process group included — down with it before it goes.
pub const PARENT_DEATH_SIGNAL: libc::c_int = libc::SIGUSR2;

/// The task cgroup's `cgroup.kill` (v2), open for writing, or -1.
static CGROUP_KILL_FD: AtomicI32 = AtomicI32::new(-1);
/// The task cgroup's `cgroup.procs` (v1 freezer), open for reading, or -1.
static CGROUP_PROCS_FD: AtomicI32 = AtomicI32::new(-1);

/// Installs a worker's two signal handlers, in the fork server, once: the
/// parent-death handler (see [`arm`]) and SIGTERM caught (see
/// [`sys::outlast_sigterm`]). Every worker inherits them with the fork, so
/// none pays two sigaction(2)s for them. The fork server blocks every
/// signal for its whole life, so neither handler ever runs in it; a worker
/// unblocks only once it is armed.
pub fn install_worker_handlers() -> io::Result<()> {
    // The handler keeps catch_signal's promise: see kill_task.
    sys::catch_signal(PARENT_DEATH_SIGNAL, kill_task_handler)?;
    sys::outlast_sigterm()
}

/// Arms the parent-death path with the task cgroup's `cgroup.kill` (v2)
/// or freezer `cgroup.procs` (v1), already open (`kill_fd`, `procs_fd`);
/// makes the caller a child subreaper either way. Then PDEATHSIG, whose
/// handler the fork server installed ([`install_worker_handlers`]).
pub fn arm(kill_fd: Option<RawFd>, procs_fd: Option<RawFd>) -> io::Result<()> {
    // v2: one write kills the whole cgroup; v1 freezer: each pid it lists.
    // Usually already in place (see `preset`): nothing is written.
    let procs_fd = if kill_fd.is_some() { None } else { procs_fd };
    store_if_changed(&CGROUP_KILL_FD, kill_fd.unwrap_or(-1));
    store_if_changed(&CGROUP_PROCS_FD, procs_fd.unwrap_or(-1));
    // Always, cgroup or not: an orphan of the task comes to us, not to
    // agentd, so what is left is killed before we report (see
    // kill_children) and nothing of a task outlives its worker, even when
    // agentd dies before it sweeps the task's cgroup.
    sys::set_child_subreaper()?;
    sys::set_parent_death_signal(PARENT_DEATH_SIGNAL)?;
    Ok(())
}

/// What [`arm`] will store, stored by the fork server before it forks
/// the worker: `kind` is the containment file the request brought, which
/// the worker places at `sys::WORKER_CONTAINMENT_FD`. arm then finds the
/// values in place and writes nothing, so a worker does not dirty the page
/// these statics lie in (a copy-on-write fault per task). Only a change is
/// written, so in the steady state the fork server writes nothing either.
/// The fork server never reads them: its signals stay blocked for life.
pub fn preset(kind: Option<crate::control::ContainmentFile>) {
    use crate::control::ContainmentFile;
    let (kill, procs) = match kind {
        Some(ContainmentFile::Kill) => (sys::WORKER_CONTAINMENT_FD, -1),
        Some(ContainmentFile::Procs) => (-1, sys::WORKER_CONTAINMENT_FD),
        None => (-1, -1),
    };
    store_if_changed(&CGROUP_KILL_FD, kill);
    store_if_changed(&CGROUP_PROCS_FD, procs);
}

fn store_if_changed(fd: &AtomicI32, value: RawFd) {
    if fd.load(Ordering::SeqCst) != value {
        fd.store(value, Ordering::SeqCst);
    }
}

extern "C" fn kill_task_handler(_sig: libc::c_int) {
    kill_task();
}

/// SIGKILL to the worker's whole task (its cgroup, or its children and
/// process group; see [`arm`]): used when the supervisor is gone.
pub fn kill_own_task() -> ! {
    kill_task();
    // Unreachable in practice: SIGKILL to our own group includes us.
    std::process::exit(137)
}

/// SIGKILL to the whole task, the caller (its worker) last: the cgroup
/// through `cgroup.kill` or its pid list, else every child until none is
/// left (we are their subreaper), then our own process group. Only
/// async-signal-safe system calls on stack buffers: it runs in a signal
/// handler.
fn kill_task() {
    let kill_fd = CGROUP_KILL_FD.load(Ordering::SeqCst);
    if kill_fd >= 0 {
        // One byte to an fd we opened: this SIGKILLs the whole cgroup, us
        // included.
        let _ = sys::write(kill_fd, b"1");
    }
    let procs_fd = CGROUP_PROCS_FD.load(Ordering::SeqCst);
    if procs_fd >= 0 {
        let me = sys::getpid();
        for _ in 0..1000 {
            let mut others = 0;
            read_pids(procs_fd, true, |pid| {
                if pid != me {
                    others += 1;
                    let _ = sys::kill_pid(pid, libc::SIGKILL);
                }
            });
            if others == 0 {
                break;
            }
        }
    }
    kill_children();
    // Our process group is the task's group: the worker is its leader.
    let _ = sys::signal_own_group(libc::SIGKILL);
}

/// SIGKILLs every child of ours, reaps them, and again, until none is left:
/// as a subreaper we inherit each killed child's children, so this takes
/// the whole tree. Async-signal-safe (raw system calls, stack buffers).
pub fn kill_children() {
    for _ in 0..1000 {
        // No child at all, not even a zombie: nothing of the tree is left
        // (as subreaper we inherit every orphan in it, so none can be
        // elsewhere). One system call where /proc would take a dozen.
        if matches!(sys::reap_one_quietly(), Err(e) if e.raw_os_error() == Some(libc::ECHILD)) {
            return;
        }
        let mut found = 0;
        for_each_child(|pid| {
            found += 1;
            let _ = sys::kill_pid(pid, libc::SIGKILL);
        });
        while matches!(sys::reap_one_quietly(), Ok(pid) if pid > 0) {}
        if found == 0 {
            return;
        }
        sys::nap(1_000_000);
    }
}

/// Where this process reads its children from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildrenSource {
    /// `/proc/self/task/TID/children`, one read per thread (the kernel has
    /// CONFIG_PROC_CHILDREN).
    ChildrenFile,
    /// Every `/proc/N/stat`, for its parent pid: slower, but it needs
    /// nothing of /proc beyond what every kernel has.
    ProcScan,
}

impl ChildrenSource {
    pub fn name(self) -> &'static str {
        match self {
            ChildrenSource::ChildrenFile => "children-file",
            ChildrenSource::ProcScan => "proc-scan",
        }
    }
}

/// The environment variable that tells the fork server (and so every
/// worker) to scan /proc: the daemon found no children file.
pub const CHILDREN_SCAN_ENV: &str = "AGENTD_CHILDREN_SCAN";

/// Set when this process scans /proc for its children (see
/// [`ChildrenSource`]); read in a signal handler, so an atomic.
static SCAN_PROC: AtomicBool = AtomicBool::new(false);

/// Which source this kernel offers: the children file where it exists
/// for the calling thread. A debug build treats it as absent when
/// `AGENTD_TEST_NO_CHILDREN_FILE` is set, so tests run the fallback on a
/// kernel that has the file.
pub fn detect_children_source() -> ChildrenSource {
    let forced_absent = cfg!(debug_assertions) && std::env::var_os("AGENTD_TEST_NO_CHILDREN_FILE").is_some();
    if !forced_absent && std::path::Path::new("/proc/thread-self/children").exists() {
        ChildrenSource::ChildrenFile
    } else {
        ChildrenSource::ProcScan
    }
}

pub fn set_children_source(source: ChildrenSource) {
    let scan = source == ChildrenSource::ProcScan;
    if SCAN_PROC.load(Ordering::Relaxed) != scan {
        SCAN_PROC.store(scan, Ordering::Relaxed);
    }
}

pub fn children_source() -> ChildrenSource {
    if SCAN_PROC.load(Ordering::Relaxed) {
        ChildrenSource::ProcScan
    } else {
        ChildrenSource::ChildrenFile
    }
}

/// Calls `f` with each child of this process (of any of its threads), from
/// the source set with [`set_children_source`]. Async-signal-safe.
pub fn for_each_child(mut f: impl FnMut(i32)) {
    if SCAN_PROC.load(Ordering::Relaxed) {
        scan_children(sys::getpid(), &mut f);
        return;
    }
    for_each_thread(|tid| {
        let mut path = [0u8; 64];
        let Some(path) = children_path(tid, &mut path) else {
            return;
        };
        let Ok(children) = sys::open_read_only(path, false) else {
            return;
        };
        read_pids(children.as_raw_fd(), false, &mut f);
    });
}

/// Every process whose parent is `parent`, by each `/proc/N/stat`.
fn scan_children(parent: i32, f: &mut impl FnMut(i32)) {
    let Ok(dir) = sys::open_read_only(c"/proc", true) else {
        return;
    };
    let mut buf = [0u8; 4096];
    loop {
        let n = match sys::getdents64(dir.as_raw_fd(), &mut buf) {
            Ok(n) if n > 0 => n,
            _ => break,
        };
        each_numbered_entry(&buf[..n], |pid| {
            if parent_of(pid) == Some(parent) {
                f(pid);
            }
        });
    }
}

/// The parent pid `/proc/PID/stat` gives, if it can be read.
fn parent_of(pid: i32) -> Option<i32> {
    let mut path = [0u8; 64];
    let path = proc_path(pid, b"/stat\0", &mut path)?;
    let file = sys::open_read_only(path, false).ok()?;
    let mut stat = [0u8; 512];
    let n = sys::read(file.as_raw_fd(), &mut stat).ok()?;
    stat_parent(&stat[..n])
}

/// The parent pid of a `/proc/PID/stat` line: the field after the state,
/// which follows the last `)` (a command name may hold spaces and `)`).
fn stat_parent(stat: &[u8]) -> Option<i32> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = stat.get(close + 1..)?;
    // " S 1234 …": skip the space, the state and the next space.
    let ppid = rest.get(3..)?;
    ppid.first().filter(|b| b.is_ascii_digit())?;
    Some(leading_decimal(ppid))
}

/// Calls `f` with each thread id of ours (getdents64 on /proc/self/task).
fn for_each_thread(mut f: impl FnMut(i32)) {
    let Ok(dir) = sys::open_read_only(c"/proc/self/task", true) else {
        return;
    };
    let mut buf = [0u8; 2048];
    loop {
        let n = match sys::getdents64(dir.as_raw_fd(), &mut buf) {
            Ok(n) if n > 0 => n,
            _ => break,
        };
        each_numbered_entry(&buf[..n], &mut f);
    }
}

/// `struct linux_dirent64`: u64 ino, i64 off, u16 reclen, u8 type, then
/// the NUL-terminated name, padded.
const DIRENT_NAME_AT: usize = 19;

/// Calls `f` with the number each `struct linux_dirent64` record in
/// `records` is named by (in /proc/self/task: a thread id). Names that do
/// not start with a digit (`.`, `..`) or read as 0 are skipped; a name cut
/// off by the end of `records` is read as far as it goes; a record shorter
/// than its own header (never from the kernel) ends the walk.
fn each_numbered_entry(records: &[u8], mut f: impl FnMut(i32)) {
    let mut at = 0usize;
    while at + DIRENT_NAME_AT < records.len() {
        let reclen = u16::from_ne_bytes([records[at + 16], records[at + 17]]) as usize;
        if reclen < DIRENT_NAME_AT {
            break;
        }
        let name = &records[at + DIRENT_NAME_AT..(at + reclen).min(records.len())];
        let id = leading_decimal(name);
        if id > 0 {
            f(id);
        }
        at += reclen;
    }
}

/// The decimal number `bytes` starts with (0 if none), saturating at
/// `i32::MAX`.
fn leading_decimal(bytes: &[u8]) -> i32 {
    bytes
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .fold(0i32, |acc, b| acc.saturating_mul(10).saturating_add((b - b'0') as i32))
}

/// Reads decimal pids separated by whitespace from `fd` (from offset 0 if
/// `rewind`) and calls `f` with each one > 1. Stack buffer, no allocation.
fn read_pids(fd: RawFd, rewind: bool, mut f: impl FnMut(i32)) {
    let mut buf = [0u8; 1024];
    let mut offset = 0u64;
    let mut pids = PidList::default();
    loop {
        let read = if rewind {
            sys::read_at(fd, &mut buf, offset)
        } else {
            sys::read(fd, &mut buf)
        };
        let n = match read {
            Ok(n) if n > 0 => n,
            _ => break,
        };
        offset += n as u64;
        pids.feed(&buf[..n], &mut f);
    }
    pids.end(&mut f);
}

/// A list of decimal pids (`cgroup.procs`, `/proc/…/children`), fed in
/// pieces as they are read: a pid may straddle two reads. Anything but a
/// digit ends a number; numbers > 1 are pids (0 and 1 never are ours to
/// kill), and saturate at `i32::MAX`.
#[derive(Debug, Default)]
struct PidList {
    num: i32,
    digits: bool,
}

impl PidList {
    fn feed(&mut self, bytes: &[u8], f: &mut impl FnMut(i32)) {
        for &b in bytes {
            if b.is_ascii_digit() {
                self.num = self.num.saturating_mul(10).saturating_add((b - b'0') as i32);
                self.digits = true;
            } else {
                if self.digits && self.num > 1 {
                    f(self.num);
                }
                self.num = 0;
                self.digits = false;
            }
        }
    }

    /// The end of the list: a last pid with nothing after it counts.
    fn end(self, f: &mut impl FnMut(i32)) {
        if self.digits && self.num > 1 {
            f(self.num);
        }
    }
}

/// `/proc/self/task/TID/children`, NUL-terminated, in `buf`.
fn children_path(tid: i32, buf: &mut [u8; 64]) -> Option<&CStr> {
    joined(
        &[b"/proc/self/task/", fmt_decimal(tid, &mut [0u8; 12]), b"/children\0"],
        buf,
    )
}

/// `/proc/PID` followed by `tail` (which ends in a NUL), in `buf`.
fn proc_path<'a>(pid: i32, tail: &[u8], buf: &'a mut [u8; 64]) -> Option<&'a CStr> {
    joined(&[b"/proc/", fmt_decimal(pid, &mut [0u8; 12]), tail], buf)
}

/// `parts` one after the other in `buf`, read as a C string.
fn joined<'a>(parts: &[&[u8]], buf: &'a mut [u8; 64]) -> Option<&'a CStr> {
    let mut n = 0;
    for part in parts {
        buf.get_mut(n..n + part.len())?.copy_from_slice(part);
        n += part.len();
    }
    CStr::from_bytes_with_nul(&buf[..n]).ok()
}

/// `n` (≥ 0) in decimal, in `buf`.
fn fmt_decimal(mut n: i32, buf: &mut [u8; 12]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pid `PidList` reports for `input` fed in the given pieces.
    fn pids_of(pieces: &[&[u8]]) -> Vec<i32> {
        let mut out = Vec::new();
        let mut f = |pid| out.push(pid);
        let mut list = PidList::default();
        for piece in pieces {
            list.feed(piece, &mut f);
        }
        list.end(&mut f);
        out
    }

    #[test]
    fn pid_lists_read_as_the_kernel_writes_them() {
        /// (what the case is, the pieces read, the pids they hold)
        type Case = (&'static str, &'static [&'static [u8]], &'static [i32]);
        let cases: &[Case] = &[
            ("cgroup.procs", &[b"12\n345\n6789\n"], &[12, 345, 6789]),
            ("children", &[b"12 345 "], &[12, 345]),
            ("no newline at the end", &[b"12\n34"], &[12, 34]),
            ("empty", &[b""], &[]),
            ("nothing at all", &[], &[]),
            ("0 and 1 are never pids to kill", &[b"0\n1\n2\n"], &[2]),
            ("leading zeros", &[b"007\n"], &[7]),
            ("a pid across two reads", &[b"12\n3", b"45\n"], &[12, 345]),
            ("a read ending on a separator", &[b"12\n", b"345"], &[12, 345]),
            ("a read per byte", &[b"4", b"2", b" ", b"9"], &[42, 9]),
            ("runs of separators", &[b"\n\n 42 \t\n\n"], &[42]),
            ("anything but a digit separates", &[b"a7b"], &[7]),
            ("saturates", &[b"99999999999\n5\n"], &[i32::MAX, 5]),
        ];
        for (name, pieces, want) in cases {
            assert_eq!(pids_of(pieces), *want, "{name}");
        }
    }

    /// One `struct linux_dirent64` as the kernel lays it out: the header,
    /// the name, a NUL, padded to 8 bytes.
    fn dirent(name: &[u8]) -> Vec<u8> {
        let reclen = (DIRENT_NAME_AT + name.len() + 1).div_ceil(8) * 8;
        let mut r = Vec::new();
        r.extend_from_slice(&7u64.to_ne_bytes());
        r.extend_from_slice(&1i64.to_ne_bytes());
        r.extend_from_slice(&(reclen as u16).to_ne_bytes());
        r.push(libc::DT_DIR);
        r.extend_from_slice(name);
        r.resize(reclen, 0);
        r
    }

    fn entries(records: &[u8]) -> Vec<i32> {
        let mut out = Vec::new();
        each_numbered_entry(records, |id| out.push(id));
        out
    }

    #[test]
    fn getdents_records_give_their_numbered_names() {
        let all: Vec<u8> = [&b"."[..], b"..", b"4242", b"17", b"1234567"]
            .iter()
            .flat_map(|n| dirent(n))
            .collect();
        assert_eq!(entries(&all), vec![4242, 17, 1234567], "`.` and `..` are skipped");
        assert_eq!(entries(&[]), Vec::<i32>::new());
        assert_eq!(entries(&dirent(b"0")), Vec::<i32>::new(), "0 is no thread");
        assert_eq!(entries(&dirent(b"12ab")), vec![12], "the digits a name starts with");
        assert_eq!(entries(&dirent(b"99999999999")), vec![i32::MAX], "saturates");
        let mut cut = dirent(b"31");
        cut.extend(dirent(b"4567"));
        assert_eq!(
            entries(&cut[..cut.len() - 1]),
            vec![31, 4567],
            "no NUL after the last name"
        );
        let header_only = dirent(b"31").len() + DIRENT_NAME_AT;
        assert_eq!(entries(&cut[..header_only]), vec![31], "no byte of the name: no entry");
        assert_eq!(
            entries(&cut[..header_only + 2]),
            vec![31, 45],
            "as much of the name as is there"
        );
    }

    #[test]
    fn malformed_records_end_the_walk_without_a_panic() {
        for reclen in [0u16, 1, 18] {
            let mut r = dirent(b"42");
            r[16..18].copy_from_slice(&reclen.to_ne_bytes());
            r.extend(dirent(b"43"));
            assert_eq!(entries(&r), Vec::<i32>::new(), "reclen {reclen}");
        }
        let mut long = dirent(b"42");
        long[16..18].copy_from_slice(&u16::MAX.to_ne_bytes());
        assert_eq!(entries(&long), vec![42], "a length past the end stops there");
    }

    #[test]
    fn decimals_and_the_children_path() {
        for (n, want) in [(0, "0"), (7, "7"), (10, "10"), (4242, "4242"), (i32::MAX, "2147483647")] {
            assert_eq!(fmt_decimal(n, &mut [0u8; 12]), want.as_bytes());
        }
        let mut buf = [0u8; 64];
        assert_eq!(children_path(4242, &mut buf), Some(c"/proc/self/task/4242/children"));
        let mut buf = [0xffu8; 64];
        assert_eq!(
            children_path(i32::MAX, &mut buf),
            Some(c"/proc/self/task/2147483647/children"),
            "the longest fits"
        );
    }

    #[test]
    fn pids_are_read_whole_across_reads_from_a_pipe_and_again_from_a_file() {
        // Over 1024 bytes, so the list spans more than one read of read_pids.
        let list: String = (1000..1400).map(|p| format!("{p}\n")).collect();
        let want: Vec<i32> = (1000..1400).collect();
        assert!(list.len() > 1024);

        let (r, w) = sys::pipe().unwrap();
        let writer = std::thread::spawn({
            let list = list.clone();
            move || {
                let mut w = std::fs::File::from(w);
                std::io::Write::write_all(&mut w, list.as_bytes()).unwrap();
            }
        });
        let mut got = Vec::new();
        read_pids(r.as_raw_fd(), false, |p| got.push(p));
        writer.join().unwrap();
        assert_eq!(got, want, "read(2) to the end of the pipe");

        let path = std::env::temp_dir().join(format!("agentd-pids-{}", crate::ids::new_id()));
        std::fs::write(&path, &list).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        for round in 0..2 {
            let mut got = Vec::new();
            read_pids(file.as_raw_fd(), true, |p| got.push(p));
            assert_eq!(got, want, "pread(2) from the start, round {round}");
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn the_parent_is_read_after_the_last_parenthesis() {
        assert_eq!(stat_parent(b"42 (sh) S 17 42 42 0 -1"), Some(17));
        assert_eq!(stat_parent(b"42 (a) b) S 9 1"), Some(9), "a `)` in the name");
        assert_eq!(stat_parent(b"42 (x y) R 1234567 1"), Some(1234567));
        assert_eq!(stat_parent(b"42 (sh) S"), None, "cut short");
        assert_eq!(stat_parent(b"42 (sh"), None, "no end of the name");
        assert_eq!(stat_parent(b""), None);
    }

    #[test]
    fn a_scan_of_proc_finds_our_children_as_the_children_file_does() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let mut scanned = Vec::new();
        scan_children(sys::getpid(), &mut |p| scanned.push(p));
        let mut listed = Vec::new();
        for_each_thread(|tid| {
            let mut path = [0u8; 64];
            if let Some(path) = children_path(tid, &mut path) {
                if let Ok(f) = sys::open_read_only(path, false) {
                    read_pids(f.as_raw_fd(), false, |p| listed.push(p));
                }
            }
        });
        let _ = child.kill();
        let _ = child.wait();
        assert!(scanned.contains(&pid), "{pid} in {scanned:?}");
        if std::path::Path::new("/proc/thread-self/children").exists() {
            assert!(listed.contains(&pid), "{pid} in {listed:?}");
        }
        let mut none = Vec::new();
        scan_children(i32::MAX, &mut |p| none.push(p));
        assert!(
            none.is_empty(),
            "no process has pid {} for a parent: {none:?}",
            i32::MAX
        );
    }

    #[test]
    fn our_threads_are_listed() {
        let (stop, parked) = crossbeam_channel::bounded::<()>(0);
        let (tid_tx, tid_rx) = crossbeam_channel::bounded(1);
        let helper = std::thread::spawn(move || {
            // /proc/thread-self names the calling thread's own entry.
            let me = std::fs::read_link("/proc/thread-self").unwrap();
            let tid: i32 = me.file_name().unwrap().to_str().unwrap().parse().unwrap();
            tid_tx.send(tid).unwrap();
            let _ = parked.recv();
        });
        let helper_tid = tid_rx.recv().unwrap();
        let mut tids = Vec::new();
        for_each_thread(|tid| tids.push(tid));
        drop(stop);
        helper.join().unwrap();
        assert!(tids.contains(&sys::getpid()), "the main thread: {tids:?}");
        assert!(tids.contains(&helper_tid), "a thread just started: {tids:?}");
    }
}
