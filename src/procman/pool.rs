//! Starting tasks: the queue under tasks.max_running, the pool of idle
//! workers sized to demand, and asking the fork server for workers born in
//! their cgroup slot. Part of procman's one thread (see the module above).

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::channel::Channel;
use super::forks::{Answer, Pending};
use super::lifecycle::{self, Event, Life, Stop};
use super::{State, Worker, DEMAND_WINDOW, FORK_ATTEMPTS, FORK_RETRY, SPAWNS_PER_TURN};
use crate::config::Runner;
use crate::control::{Cause, ContainmentFile, ForkRequest, Rlimits, RunnerSpec, ToWorker};
use crate::limits;
use crate::sys;
use crate::tasks::Notice;
use crate::wire::{Message, TaskState};
use crate::worker;

impl State {
    /// Starts queued tasks on idle workers while there is room under
    /// tasks.max_running; with no idle worker, asks the fork server for as
    /// many as can start now (they start as they arrive).
    pub(super) fn start_queued(&mut self) {
        // Every worker with a task counts, stopping ones too: their processes
        // still run.
        while self.by_task.len() < self.tasks.max_running() && self.shutdown.is_none() {
            let Some(id) = self.queue.front() else { return };
            if self.tasks.state(id) != Some(TaskState::Submitted) {
                self.queue.pop_front(); // cancelled while queued, or pruned
                continue;
            }
            let idle = self
                .workers
                .values()
                .filter(|w| w.task.is_none() && w.life.phase == lifecycle::Phase::Idle && w.chan.is_open())
                .map(|w| w.pid)
                .min();
            let Some(pid) = idle else {
                let room = self.tasks.max_running() - self.by_task.len();
                let missing = room.min(self.queue.len()).saturating_sub(self.forks.pending());
                for _ in 0..missing.min(SPAWNS_PER_TURN) {
                    match self.ask_worker() {
                        Ok(()) => {}
                        Err(Ask::Later) => {
                            self.retry_forks_at.get_or_insert(Instant::now() + FORK_RETRY);
                            break;
                        }
                        Err(Ask::Failed(e)) => {
                            self.no_worker(e);
                            break;
                        }
                    }
                }
                return;
            };
            let Some(id) = self.queue.pop_front() else { return };
            let Some((context_id, message)) = self.tasks.start_info(&id) else {
                continue;
            };
            let now = Instant::now();
            self.starts.push_back(now);
            self.assign(pid, id, context_id, message, now);
        }
    }

    /// A worker could not be had: after FORK_ATTEMPTS in a row, the task
    /// first in line fails with the reason (nothing waits for ever on a
    /// fork that keeps failing); until then it waits for the next try.
    /// (A fork that fails with EAGAIN counts like any other failure.)
    pub(super) fn no_worker(&mut self, e: std::io::Error) {
        crate::metrics::worker_spawn_failed();
        self.fork_failures += 1;
        log::warn!("procman.fork failed ({} in a row) error={e}", self.fork_failures);
        self.retry_forks_at = Some(Instant::now() + FORK_RETRY);
        if self.fork_failures < FORK_ATTEMPTS {
            return;
        }
        self.fork_failures = 0;
        let Some(id) = self.queue.pop_front() else { return };
        log::error!("task.spawn_failed task={id} error={e}");
        self.end(
            &id,
            TaskState::Failed,
            Cause::Crashed,
            Some(format!("agentd could not start a worker: {e}")),
        );
    }

    fn assign(&mut self, pid: i32, id: String, context_id: String, message: Message, now: Instant) {
        let deadline_ms = self.cfg.tasks.deadline_ms;
        let runner = self.runner_spec();
        let Some(w) = self.workers.get_mut(&pid) else { return };
        w.task = Some(id.clone());
        w.assigned = now;
        w.life
            .set_deadline((deadline_ms > 0).then(|| now + Duration::from_millis(deadline_ms)));
        self.by_task.insert(id.clone(), pid);
        self.event(pid, Event::Assigned);
        self.tasks.worker_notice(&Notice::WorkerSpawn { task_id: &id, pid });
        self.tasks.set_progress(&id, TaskState::Working, None);
        let trace = self.tasks.trace(&id);
        match &trace {
            Some(t) => log::info!("task.start task={id} pid={pid} trace={}", t.trace_id()),
            None => log::info!("task.start task={id} pid={pid}"),
        }
        let spawn = ToWorker::Spawn {
            task_id: id,
            context_id,
            message,
            runner,
            trace,
        };
        self.send(pid, &spawn);
    }

    /// Keeps idle workers ready, so a task's start does not wait for a
    /// worker to be forked: tasks.prespawn of them, or with
    /// `auto` as many as tasks started within DEMAND_WINDOW (at least one,
    /// at most PRESPAWN_AUTO_MAX).
    pub(super) fn fill_pool(&mut self) {
        let now = Instant::now();
        while self
            .starts
            .front()
            .is_some_and(|t| now.duration_since(*t) > DEMAND_WINDOW)
        {
            self.starts.pop_front();
        }
        let want = match self.cfg.tasks.prespawn {
            Some(n) => n,
            None => self.starts.len().clamp(1, limits::PRESPAWN_AUTO_MAX),
        };
        if self.shutdown.is_some() || want == 0 {
            return;
        }
        let idle: Vec<(Instant, i32)> = self
            .workers
            .values()
            .filter(|w| w.task.is_none() && w.life.phase == lifecycle::Phase::Idle)
            .map(|w| (w.assigned, w.pid))
            .collect();
        if idle.len() > want {
            // Demand fell: retire the oldest surplus worker once it has
            // waited a whole window, one per turn (no churn under bursts).
            if let Some((since, pid)) = idle.iter().min().copied() {
                if now.duration_since(since) > DEMAND_WINDOW * 4 {
                    self.event(
                        pid,
                        Event::Stop(Stop {
                            cause: Cause::Shutdown,
                            why: None,
                        }),
                    );
                }
            }
            return;
        }
        let have = idle.len() + self.forks.pending();
        for _ in have..want.min(have + SPAWNS_PER_TURN) {
            match self.ask_worker() {
                Ok(()) => {}
                Err(Ask::Later) => return,
                Err(Ask::Failed(e)) => {
                    log::warn!("procman.prespawn error={e}");
                    self.retry_forks_at = Some(Instant::now() + FORK_RETRY);
                    return;
                }
            }
        }
    }

    /// Asks the fork server (started first if it is not running) for one
    /// worker, born in a free cgroup slot where agentd has them. The answer
    /// comes through the poll loop ([`State::take_fork_answers`]).
    fn ask_worker(&mut self) -> Result<(), Ask> {
        if self.retry_forks_at.is_some_and(|t| Instant::now() < t) {
            return Err(Ask::Later);
        }
        self.retry_forks_at = None;
        if !self.forks.is_up() {
            let env = self.worker_env().map_err(Ask::Failed)?;
            self.forks.start(&env).map_err(Ask::Failed)?;
        }
        let (from_worker, worker_writes) = sys::pipe().map_err(Ask::Failed)?;
        let (worker_reads, to_worker) = sys::pipe().map_err(Ask::Failed)?;
        let cgroups = if self.isolation.is_cgroup() {
            match self.isolation.acquire() {
                Ok(c) => Some(c),
                Err(e) => {
                    log::warn!("task.cgroup error={e}; process group only");
                    None
                }
            }
        } else {
            None
        };
        let slot_dir = cgroups.as_ref().and_then(|c| self.isolation.slot_dir(c));
        let containment = cgroups.as_ref().and_then(|c| {
            c.kill_file()
                .map(|f| (ContainmentFile::Kill, f))
                .or_else(|| c.freezer_procs_file().map(|f| (ContainmentFile::Procs, f)))
        });
        let request = ForkRequest {
            into_cgroup: slot_dir.is_some(),
            containment: containment.map(|(what, _)| what),
        };
        let mut fds = vec![worker_reads.as_raw_fd(), worker_writes.as_raw_fd()];
        fds.extend(slot_dir.map(|d| d.as_raw_fd()));
        fds.extend(containment.map(|(_, f)| f.as_raw_fd()));
        let pending = Pending {
            from_worker: from_worker.into(),
            to_worker: to_worker.into(),
            cgroups,
            into_cgroup: request.into_cgroup,
            asked: Instant::now(),
        };
        // The fork server holds its own copies of the descriptors once
        // sent: ours close at the end of this function.
        match self.forks.ask(&request, &fds, pending) {
            Ok(()) => Ok(()),
            Err((e, pending)) => {
                if let Some(cg) = pending.cgroups {
                    self.isolation.release(cg);
                }
                // Only a full request queue is worth waiting out.
                Err(match e.kind() {
                    std::io::ErrorKind::WouldBlock => Ask::Later,
                    _ => Ask::Failed(e),
                })
            }
        }
    }

    /// Takes the fork server's answers: each new worker joins the pool.
    pub(super) fn take_fork_answers(&mut self) {
        for answer in self.forks.answers() {
            match answer {
                Answer::Forked {
                    pending,
                    pid,
                    placement_refused,
                } => self.adopt_worker(pending, pid, placement_refused),
                Answer::Failed { pending, error } => {
                    if let Some(cg) = pending.cgroups {
                        // A lost fork server may have forked it before it
                        // could say so: nothing of it may stay in the slot.
                        cg.kill();
                        self.isolation.release(cg);
                    }
                    self.no_worker(error);
                }
            }
        }
        if self.forks.pending() == 0 {
            // Exits of workers not known yet can only be of pending ones.
            self.early_exits.clear();
        }
    }

    fn adopt_worker(&mut self, pending: Pending, pid: i32, placement_refused: Option<std::io::Error>) {
        crate::metrics::worker_spawned();
        crate::metrics::worker_forked_after(pending.asked.elapsed());
        self.fork_failures = 0;
        // The worker does this itself too; whichever is first, the group
        // exists before any signal is sent to it.
        let _ = sys::make_group_leader(pid);
        let born_inside = pending.into_cgroup && placement_refused.is_none();
        if let Some(e) = &placement_refused {
            self.isolation.placement_refused(e);
        }
        // Into the cgroups it was not born in (v1 limits; v2 after a
        // refused clone3) before it hears `spawn`: everything the task
        // forks is inside from the start.
        let cgroups = pending
            .cgroups
            .and_then(|cg| match self.isolation.enter(pid, &cg, born_inside) {
                Ok(()) => Some(cg),
                Err(e) => {
                    log::warn!("task.cgroup pid={pid} error={e}; process group only");
                    cg.kill();
                    self.isolation.release(cg);
                    None
                }
            });
        let now = Instant::now();
        let chan = match Channel::new(pending.from_worker, pending.to_worker, self.frame_max()) {
            Ok(c) => c,
            Err(e) => {
                log::warn!("procman.control pid={pid} error={e}; killing the worker");
                let _ = sys::kill_group(pid, libc::SIGKILL);
                return;
            }
        };
        self.workers.insert(
            pid,
            Worker {
                pid,
                task: None,
                chan,
                life: Life::idle(now, self.timing),
                cgroups,
                assigned: now,
            },
        );
        if let Some(status) = self.early_exits.remove(&pid) {
            self.event(pid, Event::Exited(status));
        }
    }

    /// The fork server's whole environment, which every worker inherits:
    /// an allow-list of ours and the supervisor's pid.
    fn worker_env(&self) -> std::io::Result<Vec<CString>> {
        use std::os::unix::ffi::OsStrExt;
        let mut env: Vec<(&str, std::ffi::OsString)> = vec![
            (worker::SUPERVISOR_PID_ENV, sys::getpid().to_string().into()),
            (worker::LOG_LEVEL_ENV, self.cfg.log_level.clone().into()),
            (worker::FRAME_MAX_ENV, self.frame_max().to_string().into()),
        ];
        for name in worker::INHERITED_ENV {
            if let Some(v) = std::env::var_os(name) {
                env.push((name, v));
            }
        }
        env.into_iter()
            .map(|(k, v)| cstring(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
            .collect()
    }

    /// The control channel's frame limit, from the configured input limits.
    fn frame_max(&self) -> usize {
        limits::control_frame_max_bytes(self.cfg.body_max_bytes)
    }

    fn runner_spec(&self) -> RunnerSpec {
        match &self.cfg.runner {
            Runner::Echo => RunnerSpec::Echo,
            Runner::Peer { address } => RunnerSpec::Peer {
                address: address.to_string(),
            },
            Runner::Exec { argv } => RunnerSpec::Exec {
                argv: argv.clone(),
                protocol: self.cfg.exec_protocol.clone(),
                workdir: self.cfg.workdir.as_ref().map(|p| p.display().to_string()),
                env: self.cfg.env.clone(),
                rlimits: Rlimits {
                    as_bytes: self.cfg.tasks.rlimit_as_bytes,
                    cpu_secs: self.cfg.tasks.rlimit_cpu_secs,
                    nofile: self.cfg.tasks.rlimit_nofile,
                },
                output_max_bytes: self.cfg.tasks.output_max_bytes,
            },
        }
    }
}

/// Why no worker was asked for.
enum Ask {
    /// The fork server's request queue is full, or a failed ask was just
    /// made: ask again after FORK_RETRY.
    Later,
    /// It could not be asked (it cannot be started, pipes cannot be made).
    Failed(std::io::Error),
}

fn cstring(bytes: &[u8]) -> std::io::Result<CString> {
    CString::new(bytes).map_err(|_| std::io::ErrorKind::InvalidInput.into())
}
