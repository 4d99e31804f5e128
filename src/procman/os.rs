//! procman's seam to the kernel: the few things its driver asks of it —
//! the time, signal a process group, probe one, reap (with what the child
//! used), list agentd's children, and a task's cgroup (kill it, is anything
//! left in it, what it counted and what the task cost, give the slot back). [`RealOs`] is the kernel; the driver's tests script a
//! fake, as the HTTP reader's tests script a connection. What the seam
//! reports enters the lifecycle as an event: the driver decides no ending.

use std::io;
use std::time::Instant;

use crate::cgroup::{Isolation, TaskCgroups, Usage};
use crate::sys::{self, Reaped};

pub trait Os {
    /// A task's cgroup slot, as the driver holds it.
    type Cgroup;

    /// The clock every step and timer reads.
    fn now(&self) -> Instant;
    /// `killpg`; a group that is gone already is not an error.
    fn signal_group(&mut self, pgid: i32, sig: libc::c_int);
    /// Whether any process is left in the group.
    fn group_alive(&mut self, pgid: i32) -> bool;
    /// One `wait4(-1, WNOHANG)`: an exit and the child's rusage, or None
    /// when nothing is left.
    fn reap(&mut self) -> io::Result<Option<Reaped>>;
    /// agentd's children (every thread's, since any thread's child is
    /// reaped by procman).
    fn children(&mut self) -> Vec<i32>;
    fn kill_pid(&mut self, pid: i32, sig: libc::c_int);
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
}

/// The kernel, and the cgroup slots agentd keeps for tasks.
pub struct RealOs {
    pub isolation: Isolation,
}

impl Os for RealOs {
    type Cgroup = TaskCgroups;

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

    fn reap(&mut self) -> io::Result<Option<Reaped>> {
        sys::reap_any()
    }

    fn children(&mut self) -> Vec<i32> {
        let mut out = Vec::new();
        let Ok(threads) = std::fs::read_dir("/proc/self/task") else {
            return out;
        };
        for thread in threads.flatten() {
            if let Ok(list) = std::fs::read_to_string(thread.path().join("children")) {
                out.extend(list.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
        out
    }

    fn kill_pid(&mut self, pid: i32, sig: libc::c_int) {
        let _ = sys::kill_pid(pid, sig);
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
}
