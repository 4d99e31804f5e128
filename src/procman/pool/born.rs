//! The fork server's answers: each worker it made is adopted into the
//! driver (moved into the cgroups it was not born in, and running at once
//! if its task was handed to it before its birth); a task handed to a
//! worker that was not had goes back to the front of the line, unless a
//! worker may have read it.

use std::time::Instant;

use super::super::channel::Channel;
use super::super::driver::{end_task, GivenBack};
use super::super::forks::{Answer, Handed, Pending};
use super::super::Loop;
use super::{failed, FORK_RETRY};
use crate::control::Cause;
use crate::limits;
use crate::sys;

impl Loop {
    /// Takes the fork server's answers: each new worker joins the pool. A
    /// fork server that has not answered in time is given up first.
    pub(in crate::procman) fn take_fork_answers(&mut self) {
        self.pool.forks.give_up_if_overdue(Instant::now());
        for answer in self.pool.forks.answers() {
            match answer {
                Answer::Forked {
                    pending,
                    pid,
                    placement_refused,
                } => self.adopt_worker(pending, pid, placement_refused),
                Answer::Failed { pending, error, lost } => {
                    if let Some(cg) = pending.cgroups {
                        // A lost fork server may have forked it before it
                        // could say so: nothing of it may stay in the slot.
                        cg.kill();
                        self.driver.os.isolation.release(cg);
                    }
                    // A placed-only fork the kernel would not place: from
                    // now on workers are born outside and moved in (and get
                    // their task after that); this one was not a failure.
                    let refused =
                        pending.task.is_some() && pending.into_cgroup && !lost && sys::placement_refused(&error);
                    if let Some(task) = pending.task {
                        self.hand_back(task, &pending.chan, &error);
                    }
                    if refused {
                        self.driver.os.isolation.placement_refused(&error);
                    } else if lost && self.pool.forks.losses_in_a_row() <= limits::FORK_SERVER_LOSSES_MAX {
                        // agentd's own helper failed, not the fork: ask the
                        // next one, unless they keep being lost.
                        self.pool.retry_forks_at.get_or_insert(Instant::now() + FORK_RETRY);
                    } else {
                        self.no_worker(error);
                    }
                }
            }
        }
        if self.pool.forks.pending() == 0 {
            // Exits of workers not known yet can only be of pending ones.
            self.pool.early_exits.clear();
        }
        self.driver.helpers = self.pool.helpers();
    }

    fn adopt_worker(&mut self, pending: Pending, pid: i32, placement_refused: Option<std::io::Error>) {
        crate::metrics::worker_spawned();
        crate::metrics::worker_forked_after(pending.asked.elapsed());
        self.pool.fork_failures = 0;
        // The worker does this itself too; whichever is first, the group
        // exists before any signal is sent to it.
        let _ = sys::make_group_leader(pid);
        let born_inside = pending.into_cgroup && placement_refused.is_none();
        let isolation = &mut self.driver.os.isolation;
        if let Some(e) = &placement_refused {
            isolation.placement_refused(e);
        }
        // Into the cgroups it was not born in (v1 limits; v2 after a
        // refused clone3) before it hears `spawn`: everything the task
        // forks is inside from the start. (A worker handed its task before
        // birth was born inside all of them: nothing to enter.)
        // A worker that cannot be put where its task is to be contained
        // never gets one: it is killed, and counts as a worker not had.
        let mut cgroups = None;
        if let Some(cg) = pending.cgroups {
            if let Err(e) = isolation.enter(pid, &cg, born_inside) {
                log::warn!("task.cgroup pid={pid} error={e}; the worker is killed, not run uncontained");
                let _ = sys::kill_group(pid, libc::SIGKILL);
                let _ = sys::kill_pid(pid, libc::SIGKILL);
                cg.kill();
                isolation.release(cg);
                if let Some(task) = pending.task {
                    self.hand_back(task, &pending.chan, &e);
                }
                self.no_worker(e);
                return;
            }
            cgroups = Some(cg);
        }
        self.driver.add(pid, pending.chan, cgroups);
        let early_exit = self.pool.early_exits.remove(&pid);
        match pending.task {
            Some(task) => {
                crate::metrics::task_handed_at_birth();
                let Handed {
                    id,
                    attempt,
                    deadline,
                    stop,
                } = task;
                self.driver.assign_handed(pid, id.clone(), deadline, attempt);
                let stop = stop.or(self.shutdown.is_some().then_some(Cause::Shutdown));
                if let Some(status) = early_exit {
                    self.driver.exited(pid, status);
                } else if self.killing_all {
                    self.driver.kill_now(pid, Cause::Shutdown);
                } else if let Some(cause) = stop {
                    self.driver.stop_task(&id, cause);
                }
            }
            None => {
                if let Some(status) = early_exit {
                    self.driver.exited(pid, status);
                } else if self.killing_all {
                    self.driver.kill_now(pid, Cause::Shutdown);
                } else if self.shutdown.is_some() {
                    // Asked for before the daemon began to stop, made after:
                    // it gets no task, and goes the way of the idle workers
                    // the stop found (else it would hold the stop up to its
                    // bound).
                    self.driver.retire(pid);
                }
            }
        }
    }

    /// A task handed to a worker that was not had (the fork failed, the
    /// fork server was lost, the worker could not be contained) goes back
    /// to the front of the line if no worker can have read it; if one did
    /// (a lost fork server's, killed with its slot), the task fails rather
    /// than run twice. One stopped meanwhile ends as it was asked.
    fn hand_back(&mut self, task: Handed, chan: &Channel, error: &std::io::Error) {
        if let Some(cause) = task.stop {
            self.end_unstarted(&task.id, cause);
        } else if chan.take_back() {
            if task.attempt > 1 {
                self.pool.again.push_front(GivenBack {
                    task: task.id,
                    attempts: task.attempt - 1,
                });
            } else {
                self.pool.queue.push_front(task.id);
            }
        } else {
            log::error!(
                "task.lost task={} error={error}; a worker the fork server made took it and was lost with it",
                task.id
            );
            let text = format!("agentd lost this task's worker with its fork server: {error}");
            end_task(&self.driver.tasks, &task.id, failed(text), None);
        }
    }
}
