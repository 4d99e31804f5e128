//! The fork server's answers, and the workers it made that it never named.
//! A worker named joins the driver (moved into the cgroups it was not born
//! in, and running at once if its task was handed to it before its birth).
//! A worker not had gives its task back, if no worker can have read it.
//! And a worker made by a fork server that was lost before it answered —
//! it died, was stopped, or was merely late — is alive, holds its task and
//! is agentd's own child: it is adopted when it says who it is (its hello,
//! which goes out with its first frame; a ping asks for one), and its task
//! runs to its own end.

use std::time::{Duration, Instant};

use super::super::channel::Channel;
use super::super::forks::{Answer, Asked};
use super::super::os::Os;
use super::super::start::StartEvent;
use super::{helpers, Orphan, Supervisor};
use crate::control::{FromWorker, ToWorker};
use crate::sys;

impl<O: Os> Supervisor<O> {
    /// Whether this turn has fork answers to take: the fork server's socket
    /// is `readable`, a lost one owes answers or has not been counted, or
    /// an answer is overdue.
    pub(in crate::procman) fn fork_answers_due(&self, readable: bool) -> bool {
        let forks = &self.pool.forks;
        readable || forks.owes() || forks.answer_due().is_some_and(|due| self.driver.os.now() >= due)
    }

    /// Takes the fork server's answers: each new worker joins the pool. A
    /// fork server that is gone or has not answered in time is given up on
    /// (after what it did answer is read), and replaced at the next ask.
    pub(in crate::procman) fn take_fork_answers(&mut self) {
        let now = self.driver.os.now();
        let answers = self.pool.forks.answers(&mut self.driver.os, now);
        for answer in answers {
            match answer {
                Answer::Forked {
                    asked,
                    pid,
                    placement_refused,
                } => self.adopt_worker(asked, pid, placement_refused),
                Answer::Failed { asked, error } => {
                    // A placed-only fork the kernel would not place: from
                    // now on workers are born outside and moved in (and get
                    // their task after that); this one was not a failure.
                    let refused = asked.task.is_some() && asked.into_cgroup && sys::placement_refused(&error);
                    if let Some(cg) = asked.cgroups {
                        self.driver.os.discard_slot(cg);
                    }
                    if let Some(task) = asked.task {
                        let taken_back = asked.chan.take_back();
                        self.start_event(StartEvent::NotBorn {
                            task: task.id,
                            taken_back,
                        });
                    }
                    if refused {
                        self.driver.os.placement_refused(&error);
                    } else {
                        self.no_worker(error);
                    }
                }
                Answer::Lost { asked, why } => self.unanswered(asked, &why),
            }
        }
        // Counted after its requests' tasks went back to the front of the
        // line: past the losses bound the first of them fails.
        for why in self.pool.forks.take_losses() {
            self.start_event(StartEvent::HelperLost(why));
        }
        if self.pool.settled() {
            // Exits of workers not known yet can only be of unnamed ones.
            self.pool.early_exits.clear();
        }
    }

    fn adopt_worker(&mut self, asked: Asked<O::Cgroup>, pid: i32, placement_refused: Option<std::io::Error>) {
        crate::metrics::worker_spawned();
        crate::metrics::worker_forked_after(asked.asked.elapsed());
        self.start_event(StartEvent::Forked);
        let os = &mut self.driver.os;
        os.make_group_leader(pid);
        let born_inside = asked.into_cgroup && placement_refused.is_none();
        if let Some(e) = &placement_refused {
            os.placement_refused(e);
        }
        // Into the cgroups it was not born in (v1 limits; v2 after a
        // refused clone3) before it hears `spawn`: everything the task
        // forks is inside from the start. (A worker handed its task before
        // birth was born inside all of them: nothing to enter.) A worker
        // that cannot be put where its task is to be contained never gets
        // one: it is killed, and counts as a worker not had.
        if let Some(cg) = &asked.cgroups {
            if let Err(e) = os.enter_slot(pid, cg, born_inside) {
                log::warn!("task.cgroup pid={pid} error={e}; the worker is killed, not run uncontained");
                os.signal_group(pid, libc::SIGKILL);
                os.kill_pid(pid, libc::SIGKILL);
                let Asked {
                    chan, cgroups, task, ..
                } = asked;
                if let Some(cg) = cgroups {
                    self.driver.os.discard_slot(cg);
                }
                if let Some(task) = task {
                    let taken_back = chan.take_back();
                    let id = task.id.clone();
                    if !taken_back {
                        // It read its task before it was killed: its pipe's
                        // end says so, and the start path ends the task.
                        self.orphan(chan, None, task);
                    }
                    self.start_event(StartEvent::NotBorn { task: id, taken_back });
                }
                self.no_worker(e);
                return;
            }
        }
        self.driver.add(pid, asked.chan, asked.cgroups);
        let early_exit = self.pool.early_exits.remove(&pid);
        let h = helpers(&self.pool);
        match asked.task {
            Some(task) => {
                crate::metrics::task_handed_at_birth();
                self.driver.assign_handed(h, pid, task.id, task.deadline);
            }
            // Asked for before the daemon began to stop, made after: it
            // gets no task, and goes the way of the idle workers the stop
            // found (else it would hold the stop up to its bound).
            None if !self.driver.start.is_open() => self.driver.retire(h, pid),
            None => {}
        }
        if let Some(status) = early_exit {
            self.driver.exited(helpers(&self.pool), pid, status);
        }
    }

    /// A request the lost fork server never answered. With no task, the
    /// worker it may have made is let go (EOF on its pipe ends it; its slot
    /// is killed). With a task no worker can have read, the task goes back.
    /// With a task some worker read, that worker is alive and agentd's own
    /// child: it is asked to speak, and adopted when it says who it is.
    fn unanswered(&mut self, asked: Asked<O::Cgroup>, why: &str) {
        let Asked {
            chan, cgroups, task, ..
        } = asked;
        let Some(task) = task else {
            if let Some(cg) = cgroups {
                self.driver.os.discard_slot(cg);
            }
            return;
        };
        if chan.take_back() {
            if let Some(cg) = cgroups {
                self.driver.os.discard_slot(cg);
            }
            self.start_event(StartEvent::NotBorn {
                task: task.id,
                taken_back: true,
            });
            return;
        }
        log::info!(
            "procman.reclaiming task={} ({why}): a worker the fork server made has read it; \
             it is asked to say who it is",
            task.id
        );
        let id = task.id.clone();
        self.orphan(chan, cgroups, task);
        self.start_event(StartEvent::NotBorn {
            task: id,
            taken_back: false,
        });
    }

    /// Keeps a worker whose pid is not known, pinging it: its pong comes
    /// after its hello.
    fn orphan(&mut self, mut chan: Channel, cgroups: Option<O::Cgroup>, task: super::Handed) {
        let _ = chan.send(&ToWorker::Ping);
        let due = self.driver.os.now() + Duration::from_millis(self.cfg.tasks.stall_timeout_ms);
        let n = self.pool.next_orphan;
        self.pool.next_orphan += 1;
        self.pool.orphans.push((
            n,
            Orphan {
                chan,
                cgroups,
                task,
                due,
            },
        ));
    }

    /// Every orphan's pipe from it, for the poll set: (fd, its number).
    pub(in crate::procman) fn orphan_pipes(&self) -> impl Iterator<Item = (std::os::fd::RawFd, u64)> + '_ {
        self.pool.orphans.iter().map(|(n, o)| (o.chan.read_fd(), *n))
    }

    /// Orphan `n`'s pipe is readable: its hello adopts it (the rest of what
    /// it said goes to its lifecycle); its pipe's end without a word means
    /// it is gone.
    pub(in crate::procman) fn hear_orphan(&mut self, n: u64) {
        let Some(at) = self.pool.orphans.iter().position(|(k, _)| *k == n) else {
            return;
        };
        let mut scratch = vec![0u8; crate::limits::PROCMAN_READ_BUFFER_BYTES];
        let turn = self.pool.orphans[at].1.chan.read_turn(&mut scratch);
        let hello = match turn.frames.first() {
            Some(FromWorker::Hello { pid }) => Some(*pid),
            _ => None,
        };
        if turn.frames.is_empty() && !turn.closed && turn.broken.is_none() {
            return; // nothing yet
        }
        let (_, orphan) = self.pool.orphans.remove(at);
        let Orphan {
            chan, cgroups, task, ..
        } = orphan;
        let Some(pid) = hello.filter(|pid| *pid > 0 && !self.driver.knows(*pid)) else {
            if let Some(cg) = cgroups {
                self.driver.os.discard_slot(cg);
            }
            let (gone, why) = if turn.frames.is_empty() {
                (
                    true,
                    "the worker this task went to ended without a word; its fork server was lost before it named it"
                        .to_string(),
                )
            } else {
                (
                    false,
                    "the worker this task went to spoke before it said who it is; it is not trusted".to_string(),
                )
            };
            self.start_event(StartEvent::Unnamed {
                task: task.id,
                gone,
                why,
            });
            return;
        };
        log::info!(
            "procman.reclaimed task={} pid={pid}: the worker its lost fork server made said who it is",
            task.id
        );
        crate::metrics::worker_spawned();
        self.driver.os.make_group_leader(pid);
        self.driver.add(pid, chan, cgroups);
        let h = helpers(&self.pool);
        self.driver.assign_handed(h, pid, task.id, task.deadline);
        self.driver.heard(helpers(&self.pool), pid, turn);
        if let Some(status) = self.pool.early_exits.remove(&pid) {
            self.driver.exited(helpers(&self.pool), pid, status);
        }
    }

    /// Orphans that stayed silent past their bound: given up on, their
    /// slots killed; the start path ends their tasks.
    pub(in crate::procman) fn give_up_silent_orphans(&mut self, now: Instant) {
        while let Some(at) = self.pool.orphans.iter().position(|(_, o)| now >= o.due) {
            let (_, orphan) = self.pool.orphans.remove(at);
            if let Some(cg) = orphan.cgroups {
                self.driver.os.discard_slot(cg);
            }
            let why = format!(
                "the worker this task went to said nothing for {} ms after it was asked who it is \
                 (its fork server was lost before it named it)",
                self.cfg.tasks.stall_timeout_ms
            );
            // Dropping its pipes makes it kill its own task when it next runs.
            drop(orphan.chan);
            self.start_event(StartEvent::Unnamed {
                task: orphan.task.id,
                gone: false,
                why,
            });
        }
    }
}
