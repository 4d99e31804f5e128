//! The scripted kernel the driver's and the pool's tests run against:
//! workers are real pipes (cheap, no process behind them), and everything
//! else — exits, process groups that linger, cgroup slots and their
//! counters, agentd's children, the fork server and its answers — is what
//! the test tells [`Kernel`] to say. It records what was asked of it.
//! The cgroup counters behave as the kernel's: CPU time cumulative over
//! every task of a slot, a peak reset after each read.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::RawFd;
use std::time::Instant;

use super::os::{Os, SlotFds};
use crate::cgroup::Usage;
use crate::control::{ContainmentFile, ForkReply, ForkRequest};
use crate::cost::{CpuTimes, MEMORY_CGROUP2};
use crate::sys::{ExitStatus, Reaped, Rusage};

/// A cgroup slot, by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot(pub u32);

/// A request a fork server got: what it asked, and the worker's ends of
/// its pipes (what the worker would read and write).
pub struct ForkAsk {
    pub server: u32,
    pub request: ForkRequest,
    /// The worker's end of the pipe from agentd.
    pub hears: File,
    /// The worker's end of the pipe to agentd.
    pub says: File,
}

/// What a fork server says next on its socket.
pub enum Said {
    Reply(ForkReply),
    /// Bytes that are no reply.
    Garbage(Vec<u8>),
    /// It is gone.
    Eof,
}

#[derive(Default)]
pub struct Kernel {
    pub now: Option<Instant>,
    /// What waitpid will report, in order.
    pub exits: VecDeque<(i32, ExitStatus)>,
    /// Groups with members left: how many SIGKILL rounds they outlast.
    pub lingering_groups: HashMap<i32, u32>,
    /// Slots with processes left: how many cgroup kills they outlast.
    pub lingering_slots: HashMap<Slot, u32>,
    pub refused: HashMap<Slot, u64>,
    pub oom: HashSet<Slot>,
    /// agentd's children, as /proc would list them.
    pub children: Vec<i32>,
    /// Signals to groups, in order.
    pub group_signals: Vec<(i32, libc::c_int)>,
    pub killed_pids: Vec<i32>,
    pub killed_slots: Vec<Slot>,
    pub released: Vec<Slot>,
    /// Slots given back after a worker that never reached the driver.
    pub discarded: Vec<Slot>,
    /// waitpid calls (each returns one exit or nothing).
    pub reap_calls: usize,
    /// What wait4 reports a pid used.
    pub rusage: HashMap<i32, Rusage>,
    /// Each slot's `cpu.stat`: cumulative over every task it served.
    pub slot_cpu: HashMap<Slot, CpuTimes>,
    /// Each slot's reading at the end of its last task.
    pub slot_cpu_seen: HashMap<Slot, CpuTimes>,
    /// Each slot's peak since its last read (which resets it).
    pub slot_peak: HashMap<Slot, u64>,
    /// Slots whose usage was read, in order.
    pub usage_reads: Vec<Slot>,

    /// Tasks get slots (else: process groups only).
    pub slots: bool,
    /// Workers are born inside their whole slot (a pure v2 host).
    pub whole: bool,
    /// Slots free for the next worker, and how many were made.
    pub free_slots: Vec<u32>,
    pub slots_made: u32,
    /// Slots cannot be had (acquire fails).
    pub slots_refused: bool,
    /// `enter_slot` fails.
    pub enter_refused: bool,
    pub entered: Vec<(i32, Slot)>,
    pub slots_removed: bool,

    /// Fork servers started (each a number; the pid is 9000 + it).
    pub fork_servers: u32,
    /// Starting a fork server fails with this errno.
    pub fork_server_start_fails: Option<i32>,
    /// The request socket is full: asks are refused with WouldBlock.
    pub requests_full: bool,
    /// Requests sent and not yet turned into workers, oldest first.
    pub asks: VecDeque<ForkAsk>,
    /// What each fork server says next on its socket.
    pub said: HashMap<u32, VecDeque<Said>>,
    /// Fork servers whose socket is broken (a send fails with EPIPE).
    pub broken: HashSet<u32>,
}

impl Kernel {
    pub fn at(now: Instant) -> Kernel {
        Kernel {
            now: Some(now),
            ..Kernel::default()
        }
    }

    /// The pid of fork server `n`.
    pub fn fork_server_pid(n: u32) -> i32 {
        9000 + n as i32
    }

    /// Fork server `n` answers its oldest request: the fork failed.
    pub fn fork_failed(&mut self, errno: i32) -> ForkAsk {
        let ask = self.asks.pop_front().expect("a request to answer");
        self.said
            .entry(ask.server)
            .or_default()
            .push_back(Said::Reply(ForkReply::Failed { errno }));
        ask
    }

    /// The running fork server dies: EOF on its socket after what it said.
    pub fn fork_server_dies(&mut self) {
        let n = self.fork_servers;
        self.said.entry(n).or_default().push_back(Said::Eof);
    }
}

/// One kill round survived: counts it down.
fn outlast<K: std::hash::Hash + Eq>(map: &mut HashMap<K, u32>, key: K) {
    if let Some(n) = map.get_mut(&key) {
        *n = n.saturating_sub(1);
    }
}

/// A descriptor of the pool's duplicated into a file the test holds.
fn dup_file(fd: RawFd) -> File {
    File::from(crate::sys::dup_cloexec(fd).expect("dup"))
}

impl Os for Kernel {
    type Cgroup = Slot;
    type ForkLine = u32;

    fn now(&self) -> Instant {
        self.now.expect("a clock")
    }
    fn signal_group(&mut self, pgid: i32, sig: libc::c_int) {
        self.group_signals.push((pgid, sig));
        if sig == libc::SIGKILL {
            outlast(&mut self.lingering_groups, pgid);
        }
    }
    fn group_alive(&mut self, pgid: i32) -> bool {
        self.lingering_groups.get(&pgid).is_some_and(|n| *n > 0)
    }
    fn make_group_leader(&mut self, _pid: i32) {}
    fn reap(&mut self) -> io::Result<Option<Reaped>> {
        self.reap_calls += 1;
        Ok(self.exits.pop_front().map(|(pid, status)| Reaped {
            pid,
            status,
            usage: self.rusage.get(&pid).copied().unwrap_or_default(),
        }))
    }
    fn children(&mut self) -> Vec<i32> {
        self.children.clone()
    }
    fn kill_pid(&mut self, pid: i32, _sig: libc::c_int) {
        self.killed_pids.push(pid);
        self.children.retain(|c| *c != pid);
    }

    fn has_slots(&self) -> bool {
        self.slots
    }
    fn born_whole(&self) -> bool {
        !self.slots || self.whole
    }
    fn acquire_slot(&mut self) -> io::Result<Slot> {
        if self.slots_refused {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let n = match self.free_slots.pop() {
            Some(n) => n,
            None => {
                self.slots_made += 1;
                self.slots_made
            }
        };
        Ok(Slot(n))
    }
    fn slot_fds(&self, _cg: &Slot) -> SlotFds {
        // Numbers nobody opens: the fake fork server does not use them.
        SlotFds {
            dir: self.whole.then_some(-2),
            containment: Some((ContainmentFile::Kill, -3)),
        }
    }
    fn enter_slot(&mut self, pid: i32, cg: &Slot, _born_inside: bool) -> io::Result<()> {
        if self.enter_refused {
            return Err(io::Error::from_raw_os_error(libc::EACCES));
        }
        self.entered.push((pid, *cg));
        Ok(())
    }
    fn placement_refused(&mut self, _e: &io::Error) {
        self.whole = false;
    }
    fn kill_cgroup(&mut self, cg: &Slot) {
        self.killed_slots.push(*cg);
        outlast(&mut self.lingering_slots, *cg);
    }
    fn cgroup_populated(&mut self, cg: &Slot) -> bool {
        self.lingering_slots.get(cg).is_some_and(|n| *n > 0)
    }
    fn pids_refused(&mut self, cg: &Slot) -> u64 {
        self.refused.get(cg).copied().unwrap_or(0)
    }
    fn pids_max(&self) -> u64 {
        64
    }
    fn out_of_memory(&mut self, cg: &Slot) -> bool {
        self.oom.contains(cg)
    }
    fn cgroup_usage(&mut self, cg: &Slot) -> Usage {
        self.usage_reads.push(*cg);
        let now = self.slot_cpu.get(cg).copied().unwrap_or_default();
        let before = self.slot_cpu_seen.insert(*cg, now).unwrap_or_default();
        Usage {
            cpu: Some((before, now)),
            memory_peak: self.slot_peak.remove(cg).map(|p| (p, MEMORY_CGROUP2)),
        }
    }
    fn release_cgroup(&mut self, cg: Slot) {
        self.released.push(cg);
        self.free_slots.push(cg.0);
    }
    fn discard_slot(&mut self, cg: Slot) {
        self.killed_slots.push(cg);
        self.discarded.push(cg);
        self.free_slots.push(cg.0);
    }
    fn remove_slots(&mut self) {
        self.slots_removed = true;
    }

    fn start_fork_server(&mut self, _env: &[CString]) -> io::Result<(i32, u32)> {
        if let Some(errno) = self.fork_server_start_fails {
            return Err(io::Error::from_raw_os_error(errno));
        }
        self.fork_servers += 1;
        let n = self.fork_servers;
        self.children.push(Kernel::fork_server_pid(n));
        Ok((Kernel::fork_server_pid(n), n))
    }
    fn fork_line_fd(&self, _line: &u32) -> RawFd {
        -1
    }
    fn ask_fork_server(&mut self, line: &u32, request: &ForkRequest, fds: &[RawFd]) -> io::Result<()> {
        if self.broken.contains(line) {
            return Err(io::Error::from_raw_os_error(libc::EPIPE));
        }
        if self.requests_full {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.asks.push_back(ForkAsk {
            server: *line,
            request: *request,
            hears: dup_file(fds[0]),
            says: dup_file(fds[1]),
        });
        Ok(())
    }
    fn hear_fork_server(&mut self, line: &u32, buf: &mut [u8]) -> io::Result<usize> {
        match self.said.get_mut(line).and_then(|q| q.pop_front()) {
            Some(Said::Reply(r)) => {
                let bytes = r.encode();
                buf[..bytes.len()].copy_from_slice(&bytes);
                Ok(bytes.len())
            }
            Some(Said::Garbage(bytes)) => {
                buf[..bytes.len()].copy_from_slice(&bytes);
                Ok(bytes.len())
            }
            Some(Said::Eof) => Ok(0),
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}
