//! procman's seam to the kernel: everything its driver and its pool ask of
//! it — the time; signal, probe or reap processes; list agentd's children;
//! a task's cgroup slot (take one, put a worker in, kill what is in it,
//! read what it counted, give it back); and the fork server (start it, ask
//! it for a worker, hear its answers). [`RealOs`] is the kernel; the
//! driver's and the pool's tests script a fake, as the HTTP reader's tests
//! script a connection. What the seam reports enters a machine as an
//! event: neither the driver nor the pool decides an ending.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Instant;

use crate::cgroup::{Isolation, TaskCgroups, Usage};
use crate::control::{ContainmentFile, ForkRequest};
use crate::sys::{self, Reaped};
use crate::worker::{self, ChildrenSource};

/// The descriptors a worker is born with that come from its slot.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SlotFds {
    /// The slot's cgroup v2 directory, to be born in (CLONE_INTO_CGROUP);
    /// None when the worker must be moved in after its birth.
    pub dir: Option<RawFd>,
    /// The file its parent-death path kills the task through.
    pub containment: Option<(ContainmentFile, RawFd)>,
}

pub trait Os {
    /// A task's cgroup slot, as procman holds it.
    type Cgroup;
    /// procman's end of a fork server's request socket.
    type ForkLine;

    /// The clock every step and timer reads.
    fn now(&self) -> Instant;
    /// `killpg`; a group that is gone already is not an error.
    fn signal_group(&mut self, pgid: i32, sig: libc::c_int);
    /// Whether any process is left in the group.
    fn group_alive(&mut self, pgid: i32) -> bool;
    /// `setpgid(pid, pid)`: a new worker leads its own group (it does
    /// this itself too; whichever is first, the group exists before any
    /// signal is sent to it).
    fn make_group_leader(&mut self, pid: i32);
    /// One `wait4(-1, WNOHANG)`: an exit and the child's rusage, or None
    /// when nothing is left.
    fn reap(&mut self) -> io::Result<Option<Reaped>>;
    /// agentd's children (every thread's, since any thread's child is
    /// reaped by procman).
    fn children(&mut self) -> Vec<i32>;
    fn kill_pid(&mut self, pid: i32, sig: libc::c_int);

    /// Whether tasks get cgroup slots at all.
    fn has_slots(&self) -> bool;
    /// Whether a worker can be born inside every cgroup of its slot, so its
    /// task may go into its pipe before its birth (or there are no slots).
    fn born_whole(&self) -> bool;
    /// A free slot for the next worker.
    fn acquire_slot(&mut self) -> io::Result<Self::Cgroup>;
    /// The slot's descriptors a fork request carries.
    fn slot_fds(&self, cg: &Self::Cgroup) -> SlotFds;
    /// Moves `pid` into the slot's cgroups it was not born in.
    fn enter_slot(&mut self, pid: i32, cg: &Self::Cgroup, born_inside: bool) -> io::Result<()>;
    /// The kernel would not start a worker in its cgroup: from now on they
    /// are moved in.
    fn placement_refused(&mut self, e: &io::Error);
    /// SIGKILL everything in the cgroup.
    fn kill_cgroup(&mut self, cg: &Self::Cgroup);
    /// Whether any process is left in the cgroup.
    fn cgroup_populated(&mut self, cg: &Self::Cgroup) -> bool;
    /// Forks the cgroup refused at pids.max since the task began.
    fn pids_refused(&mut self, cg: &Self::Cgroup) -> u64;
    /// The pids.max those forks hit.
    fn pids_max(&self) -> u64;
    /// Whether the OOM killer (or the memory limit) struck in the cgroup.
    fn out_of_memory(&mut self, cg: &Self::Cgroup) -> bool;
    /// What the cgroup counted for the task that just ended in it (CPU
    /// time as the slot's reading before the task and now, the memory peak
    /// since the task before): once per task, when nothing is left in it.
    fn cgroup_usage(&mut self, cg: &Self::Cgroup) -> Usage;
    /// The slot is empty and free for the next task.
    fn release_cgroup(&mut self, cg: Self::Cgroup);
    /// A slot a worker never reached procman's driver from (a fork that
    /// failed half-way, a lost fork server's): killed, then given back if
    /// it is empty.
    fn discard_slot(&mut self, cg: Self::Cgroup);
    /// Every slot removed (the daemon exits, every task is over).
    fn remove_slots(&mut self);

    /// Starts a fork server with `env` as its whole environment: its pid
    /// and procman's end of its socket.
    fn start_fork_server(&mut self, env: &[CString]) -> io::Result<(i32, Self::ForkLine)>;
    /// The socket's descriptor, for the poll set (-1: none to poll).
    fn fork_line_fd(&self, line: &Self::ForkLine) -> RawFd;
    /// Sends one request with its descriptors, without waiting
    /// (WouldBlock: the fork server is behind).
    fn ask_fork_server(&mut self, line: &Self::ForkLine, request: &ForkRequest, fds: &[RawFd]) -> io::Result<()>;
    /// One answer, without waiting: its length in `buf` (0: EOF, the fork
    /// server is gone; WouldBlock: none yet).
    fn hear_fork_server(&mut self, line: &Self::ForkLine, buf: &mut [u8]) -> io::Result<usize>;
}

/// The kernel, and the cgroup slots agentd keeps for tasks.
pub struct RealOs {
    pub isolation: Isolation,
}

impl RealOs {
    /// The kernel, with agentd's children read from `children` (said in
    /// the start-up log by the caller).
    pub fn new(isolation: Isolation, children: ChildrenSource) -> RealOs {
        worker::set_children_source(children);
        RealOs { isolation }
    }
}

impl Os for RealOs {
    type Cgroup = TaskCgroups;
    type ForkLine = OwnedFd;

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn signal_group(&mut self, pgid: i32, sig: libc::c_int) {
        // ESRCH (Ok(false)): that rung already won.
        let _ = sys::kill_group(pgid, sig);
    }

    fn group_alive(&mut self, pgid: i32) -> bool {
        sys::group_alive(pgid)
    }

    fn make_group_leader(&mut self, pid: i32) {
        let _ = sys::make_group_leader(pid);
    }

    fn reap(&mut self) -> io::Result<Option<Reaped>> {
        sys::reap_any()
    }

    fn children(&mut self) -> Vec<i32> {
        let mut out = Vec::new();
        worker::for_each_child(|pid| out.push(pid));
        out
    }

    fn kill_pid(&mut self, pid: i32, sig: libc::c_int) {
        let _ = sys::kill_pid(pid, sig);
    }

    fn has_slots(&self) -> bool {
        self.isolation.is_cgroup()
    }

    fn born_whole(&self) -> bool {
        !self.isolation.is_cgroup() || self.isolation.born_whole()
    }

    fn acquire_slot(&mut self) -> io::Result<TaskCgroups> {
        self.isolation.acquire()
    }

    fn slot_fds(&self, cg: &TaskCgroups) -> SlotFds {
        let containment = cg
            .kill_file()
            .map(|f| (ContainmentFile::Kill, f.as_raw_fd()))
            .or_else(|| cg.freezer_procs_file().map(|f| (ContainmentFile::Procs, f.as_raw_fd())));
        SlotFds {
            dir: self.isolation.slot_dir(cg).map(|d| d.as_raw_fd()),
            containment,
        }
    }

    fn enter_slot(&mut self, pid: i32, cg: &TaskCgroups, born_inside: bool) -> io::Result<()> {
        self.isolation.enter(pid, cg, born_inside)
    }

    fn placement_refused(&mut self, e: &io::Error) {
        self.isolation.placement_refused(e);
    }

    fn kill_cgroup(&mut self, cg: &TaskCgroups) {
        cg.kill();
    }

    fn cgroup_populated(&mut self, cg: &TaskCgroups) -> bool {
        cg.populated()
    }

    fn pids_refused(&mut self, cg: &TaskCgroups) -> u64 {
        cg.pids_exhausted()
    }

    fn pids_max(&self) -> u64 {
        self.isolation.pids_max()
    }

    fn out_of_memory(&mut self, cg: &TaskCgroups) -> bool {
        cg.out_of_memory()
    }

    fn cgroup_usage(&mut self, cg: &TaskCgroups) -> Usage {
        cg.usage()
    }

    fn release_cgroup(&mut self, cg: TaskCgroups) {
        self.isolation.release_empty(cg);
    }

    fn discard_slot(&mut self, cg: TaskCgroups) {
        cg.kill();
        self.isolation.release(cg);
    }

    fn remove_slots(&mut self) {
        self.isolation.remove();
    }

    fn start_fork_server(&mut self, env: &[CString]) -> io::Result<(i32, OwnedFd)> {
        let (ours, theirs) = sys::seqpacket_pair()?;
        let argv = [c"agentd".to_owned(), c"__forkserver".to_owned()];
        let pid = sys::spawn_self(&sys::SelfSpawn {
            argv: &argv,
            envp: env,
            stdin_fd: theirs.as_raw_fd(),
        })?;
        Ok((pid, ours))
    }

    fn fork_line_fd(&self, line: &OwnedFd) -> RawFd {
        line.as_raw_fd()
    }

    fn ask_fork_server(&mut self, line: &OwnedFd, request: &ForkRequest, fds: &[RawFd]) -> io::Result<()> {
        sys::send_with_fds(line.as_raw_fd(), &request.encode(), fds, true)
    }

    fn hear_fork_server(&mut self, line: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
        // Replies carry no descriptors; any that came would be closed here.
        let mut fds = sys::ReceivedFds::default();
        sys::recv_with_fds(line.as_raw_fd(), buf, &mut fds, true)
    }
}
