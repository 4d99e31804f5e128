//! Starting tasks: the queue under tasks.max_running, the pool of idle
//! workers sized to demand, and asking the fork server for workers born in
//! their cgroup slot. Part of procman's one thread (see the module above).
//!
//! A task whose worker never read it (a stopped or lost idle worker, a
//! worker that died before it could) comes back here and starts first on a
//! fresh worker, up to `limits::WORKER_TAKE_ATTEMPTS` workers.
//!
//! A task that finds no idle worker is handed to the worker asked for it:
//! its `spawn` frame goes into that worker's pipe before the fork (see
//! [`Handed`]); what the fork server answers is taken in [`born`].

mod born;

use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use super::channel::{Channel, Queued};
use super::driver::{end_task, GivenBack, Helpers};
use super::forks::{ForkServer, Handed, Pending};
use super::lifecycle::Ending;
use super::Loop;
use crate::config::Runner;
use crate::control::{Cause, ContainmentFile, ForkRequest, Rlimits, RunnerSpec, ToWorker};
use crate::limits;
use crate::sys::{self, ExitStatus};
use crate::wire::TaskState;
use crate::worker;

const DEMAND_WINDOW: Duration = Duration::from_millis(limits::PRESPAWN_DEMAND_WINDOW_MS);
const FORK_RETRY: Duration = Duration::from_millis(limits::FORK_RETRY_MS);

/// What waits for a worker, and what brings workers.
pub(super) struct Pool {
    queue: VecDeque<String>,
    /// Tasks a worker never read: they start before the queue.
    again: VecDeque<GivenBack>,
    /// When recent tasks started: the demand the pool is sized to.
    starts: VecDeque<Instant>,
    forks: ForkServer,
    /// Exits reaped before the fork server's answer named the pid.
    early_exits: HashMap<i32, ExitStatus>,
    /// Workers asked for in a row that did not come (see FORK_ATTEMPTS).
    fork_failures: u32,
    /// No ask before then (the last one failed or found the socket full).
    retry_forks_at: Option<Instant>,
}

impl Pool {
    pub fn new() -> Pool {
        Pool {
            queue: VecDeque::new(),
            again: VecDeque::new(),
            starts: VecDeque::new(),
            forks: ForkServer::new(),
            early_exits: HashMap::new(),
            fork_failures: 0,
            retry_forks_at: None,
        }
    }

    pub fn queue(&mut self, task_id: String) {
        self.queue.push_back(task_id);
    }

    pub fn queued(&self) -> usize {
        self.queue.len() + self.again.len()
    }

    /// Every task waiting for a worker, taken out (the daemon stops).
    pub fn take_queued(&mut self) -> Vec<String> {
        let again = self.again.drain(..).map(|g| g.task);
        again.chain(self.queue.drain(..)).collect()
    }

    /// Takes a waiting task out; false if it was not waiting.
    pub fn unqueue(&mut self, task_id: &str) -> bool {
        if let Some(at) = self.again.iter().position(|g| g.task == task_id) {
            self.again.remove(at);
            return true;
        }
        match self.queue.iter().position(|id| id == task_id) {
            Some(at) => self.queue.remove(at).is_some(),
            None => false,
        }
    }

    /// The fork server's socket, for the poll set, while it runs.
    pub fn forks_fd(&self) -> Option<RawFd> {
        self.forks.fd()
    }

    /// Answers owed by a lost fork server, not yet taken.
    pub fn forks_owe(&self) -> bool {
        self.forks.owes()
    }

    /// No answer owed by the fork server: every worker asked for is in the
    /// driver, or known not to exist (a lost fork server's are killed).
    pub fn forks_settled(&self) -> bool {
        self.forks.pending() == 0
    }

    /// Workers asked for without a task: they join the pool.
    fn unhanded_forks(&self) -> usize {
        self.forks.pending() - self.forks.handed()
    }

    /// Marks a task handed to a worker not yet named to be stopped once it
    /// is; false if no such worker holds it.
    pub fn stop_handed(&mut self, task_id: &str, cause: Cause) -> bool {
        self.forks.stop_handed(task_id, cause)
    }

    /// Every handed task is stopped as its worker is named (the daemon
    /// stops), or ends if its worker is not had.
    pub fn stop_every_handed(&mut self, cause: Cause) {
        self.forks.stop_every_handed(cause);
    }

    pub fn forks_overdue(&self, now: Instant) -> bool {
        self.forks.answer_due().is_some_and(|due| now >= due)
    }

    pub fn helpers(&self) -> Helpers {
        Helpers {
            fork_server: self.forks.server_pid(),
            forks_pending: self.forks.pending(),
        }
    }

    /// An exit that was no worker's: the fork server's, or a worker's the
    /// fork server has yet to name, or an orphan's.
    pub fn route_exit(&mut self, pid: i32, status: ExitStatus) {
        if self.forks.is_server(pid) {
            log::debug!("procman.forkserver pid={pid} {status}");
            self.forks.exited(pid);
        } else if self.forks.pending() > 0 {
            self.early_exits.insert(pid, status);
        } else {
            log::debug!("procman.reaped pid={pid} {status} (not a worker)");
        }
    }

    pub fn stop_forks(&mut self) {
        self.forks.stop();
    }

    /// When the pool next has something to do: asking the fork server
    /// again (for a task or for the pool), its answer overdue.
    pub fn next_due(&self) -> Option<Instant> {
        [self.retry_forks_at, self.forks.answer_due()]
            .into_iter()
            .flatten()
            .min()
    }

    /// A retry time that has passed and that this turn did not need (the
    /// queue and the pool had what they wanted) is dropped, so the loop
    /// does not wake for it again.
    pub fn forget_passed_retry(&mut self, now: Instant) {
        if self.retry_forks_at.is_some_and(|t| t <= now) {
            self.retry_forks_at = None;
        }
    }
}

impl Loop {
    /// Tasks given back by workers that never read them: each starts again
    /// first, unless it has been round too often.
    pub(super) fn take_given_back(&mut self) {
        for back in std::mem::take(&mut self.driver.given_back) {
            if back.attempts >= limits::WORKER_TAKE_ATTEMPTS {
                log::error!(
                    "task.spawn_failed task={} workers={} none read it",
                    back.task,
                    back.attempts
                );
                let text = format!(
                    "agentd could not start a worker: {} in a row never read the task",
                    back.attempts
                );
                end_task(&self.driver.tasks, &back.task, failed(text), None);
            } else {
                self.pool.again.push_back(back);
            }
        }
    }

    /// Starts waiting tasks on idle workers while there is room under
    /// tasks.max_running; with no idle worker, each is handed to a worker
    /// asked for it (its frame in the pipe before the worker is born), or,
    /// where that cannot be (see [`Loop::can_hand`]), workers are asked
    /// for as many as can start now (they start as they arrive).
    pub(super) fn start_queued(&mut self) {
        while self.tasks_started() < self.driver.tasks.max_running() && self.shutdown.is_none() {
            let (id, attempt) = match (self.pool.again.front(), self.pool.queue.front()) {
                (Some(back), _) => (back.task.clone(), back.attempts + 1),
                (None, Some(id)) => (id.clone(), 1),
                (None, None) => return,
            };
            // Given back: it was started (WORKING). Queued: it waits.
            let state = self.driver.tasks.state(&id);
            let waiting = if attempt > 1 {
                state.is_some_and(|s| !s.is_terminal())
            } else {
                state == Some(TaskState::Submitted)
            };
            if !waiting {
                self.pop_waiting(attempt); // cancelled while queued, or pruned
                continue;
            }
            // With no idle worker: handed to a worker of its own, unless
            // that cannot be, or workers already asked for (without a task)
            // are enough for every task waiting — then it waits for one.
            let idle = self.driver.idle().map(|(pid, _)| pid).min();
            if idle.is_none() && (!self.can_hand() || self.pool.unhanded_forks() >= self.pool.queued()) {
                self.ask_for_workers();
                return;
            }
            let Some((context_id, message)) = self.driver.tasks.start_info(&id) else {
                self.pop_waiting(attempt);
                continue;
            };
            let now = Instant::now();
            let spawn = ToWorker::Spawn {
                task_id: id.clone(),
                context_id,
                message,
                runner: self.runner_spec(),
                trace: self.driver.tasks.trace(&id),
            };
            let deadline_ms = self.cfg.tasks.deadline_ms;
            let deadline = (deadline_ms > 0).then(|| now + Duration::from_millis(deadline_ms));
            match idle {
                Some(pid) => self.driver.assign(pid, id, &spawn, deadline, attempt),
                None => {
                    let handed = Handed {
                        id,
                        attempt,
                        deadline,
                        stop: None,
                    };
                    match self.ask_worker(Some((handed, &spawn))) {
                        Ok(true) => {}
                        // Not handed after all: it waits for this worker.
                        Ok(false) => return,
                        Err(Ask::Later) => {
                            self.pool.retry_forks_at.get_or_insert(Instant::now() + FORK_RETRY);
                            return;
                        }
                        Err(Ask::Failed(e)) => {
                            self.no_worker(e);
                            return;
                        }
                    }
                }
            }
            self.pop_waiting(attempt);
            self.pool.starts.push_back(now);
        }
    }

    /// Tasks with a worker, and those handed to one not yet named.
    fn tasks_started(&self) -> usize {
        self.driver.tasks_running() + self.pool.forks.handed()
    }

    /// Whether a task can be handed to a worker before it is born: only if
    /// nothing has to be done to the worker between its birth and its task,
    /// i.e. it is born inside all of its cgroups (v2, CLONE_INTO_CGROUP,
    /// no v1 hierarchy to move it into) or there are none.
    fn can_hand(&self) -> bool {
        let isolation = &self.driver.os.isolation;
        !isolation.is_cgroup() || isolation.born_whole()
    }

    fn pop_waiting(&mut self, attempt: u32) {
        if attempt > 1 {
            self.pool.again.pop_front();
        } else {
            self.pool.queue.pop_front();
        }
    }

    /// No idle worker for the task first in line: ask for as many as can
    /// start now.
    fn ask_for_workers(&mut self) {
        let room = self.driver.tasks.max_running() - self.driver.tasks_running();
        let missing = room.min(self.pool.queued()).saturating_sub(self.pool.unhanded_forks());
        for _ in 0..missing.min(limits::PRESPAWN_PER_TURN) {
            match self.ask_worker(None) {
                Ok(_) => {}
                Err(Ask::Later) => {
                    self.pool.retry_forks_at.get_or_insert(Instant::now() + FORK_RETRY);
                    return;
                }
                Err(Ask::Failed(e)) => {
                    self.no_worker(e);
                    return;
                }
            }
        }
    }

    /// A worker could not be had: after FORK_ATTEMPTS in a row, the task
    /// first in line fails with the reason (nothing waits for ever on a
    /// fork that keeps failing); until then it waits for the next try.
    /// (A fork that fails with EAGAIN counts like any other failure.)
    fn no_worker(&mut self, e: std::io::Error) {
        crate::metrics::worker_spawn_failed();
        let pool = &mut self.pool;
        pool.fork_failures += 1;
        log::warn!("procman.fork failed ({} in a row) error={e}", pool.fork_failures);
        pool.retry_forks_at = Some(Instant::now() + FORK_RETRY);
        if pool.fork_failures < limits::FORK_ATTEMPTS {
            return;
        }
        pool.fork_failures = 0;
        let first = match pool.again.pop_front() {
            Some(back) => Some(back.task),
            None => pool.queue.pop_front(),
        };
        let Some(id) = first else { return };
        log::error!("task.spawn_failed task={id} error={e}");
        let text = format!("agentd could not start a worker: {e}");
        end_task(&self.driver.tasks, &id, failed(text), None);
    }

    /// Keeps idle workers ready, so a task's start does not wait for a
    /// worker to be forked: tasks.prespawn of them, or with
    /// `auto` as many as tasks started within DEMAND_WINDOW (at least one,
    /// at most PRESPAWN_AUTO_MAX).
    pub(super) fn fill_pool(&mut self) {
        let now = Instant::now();
        let starts = &mut self.pool.starts;
        while starts.front().is_some_and(|t| now.duration_since(*t) > DEMAND_WINDOW) {
            starts.pop_front();
        }
        let want = match self.cfg.tasks.prespawn {
            Some(n) => n,
            None => starts.len().clamp(1, limits::PRESPAWN_AUTO_MAX),
        };
        if self.shutdown.is_some() || want == 0 {
            return;
        }
        let idle: Vec<(Instant, i32)> = self.driver.idle().map(|(pid, born)| (born, pid)).collect();
        if idle.len() > want {
            // Demand fell: retire the oldest surplus worker once it has
            // waited a whole window, one per turn (no churn under bursts).
            if let Some((since, pid)) = idle.iter().min().copied() {
                if now.duration_since(since) > DEMAND_WINDOW * 4 {
                    self.driver.retire(pid);
                }
            }
            return;
        }
        let have = idle.len() + self.pool.unhanded_forks();
        // Where tasks can be handed to their workers at birth, `auto` does
        // not refill while tasks run: a task that finds no idle worker then
        // costs the fork it costs anyway and a wake-up less than an idle
        // worker's (measured on an AMD EPYC: 6.5% more tasks per second at
        // 16 clients, the same at 1). It refills, to the demand, when
        // nothing runs, so a lone task still finds a worker waiting.
        if self.cfg.tasks.prespawn.is_none() && self.tasks_started() > 0 && self.can_hand() {
            return;
        }
        // While tasks run, a fork competes with them for the core: a pool
        // still half full waits until they are done (one task at a time,
        // the fork then happens while its client reads the answer).
        if self.driver.tasks_running() > 0 && have > 0 && have * 2 >= want {
            return;
        }
        for _ in have..want.min(have + limits::PRESPAWN_PER_TURN) {
            match self.ask_worker(None) {
                Ok(_) => {}
                Err(Ask::Later) => return,
                Err(Ask::Failed(e)) => {
                    log::warn!("procman.prespawn error={e}");
                    self.pool.retry_forks_at = Some(Instant::now() + FORK_RETRY);
                    return;
                }
            }
        }
    }

    /// A pool grown by a burst is looked at again until it has shrunk.
    pub(super) fn pool_review_due(&self) -> Option<Instant> {
        let auto = self.cfg.tasks.prespawn.is_none();
        (auto && self.driver.idle().count() > 1).then(|| Instant::now() + DEMAND_WINDOW)
    }

    /// Asks the fork server (started first if it is not running) for one
    /// worker, born in a free cgroup slot where agentd has them; with a
    /// task, that task's `spawn` frame goes into the worker's pipe first.
    /// The answer comes through the poll loop ([`Loop::take_fork_answers`]).
    /// True if the task went with it.
    fn ask_worker(&mut self, task: Option<(Handed, &ToWorker)>) -> Result<bool, Ask> {
        if self.pool.retry_forks_at.is_some_and(|t| Instant::now() < t) {
            return Err(Ask::Later);
        }
        self.pool.retry_forks_at = None;
        if !self.pool.forks.is_up() {
            let env = self.worker_env().map_err(Ask::Failed)?;
            self.pool.forks.start(&env).map_err(Ask::Failed)?;
        }
        let (from_worker, worker_writes) = sys::pipe().map_err(Ask::Failed)?;
        let (worker_reads, to_worker) = sys::pipe().map_err(Ask::Failed)?;
        let mut chan = Channel::new(from_worker.into(), to_worker.into(), self.frame_max()).map_err(Ask::Failed)?;
        let isolation = &mut self.driver.os.isolation;
        let cgroups = if isolation.is_cgroup() {
            match isolation.acquire() {
                Ok(c) => Some(c),
                Err(e) => {
                    log::warn!("task.cgroup error={e}; process group only");
                    None
                }
            }
        } else {
            None
        };
        let slot_dir = cgroups.as_ref().and_then(|c| isolation.slot_dir(c));
        let containment = cgroups.as_ref().and_then(|c| {
            c.kill_file()
                .map(|f| (ContainmentFile::Kill, f))
                .or_else(|| c.freezer_procs_file().map(|f| (ContainmentFile::Procs, f)))
        });
        // A task goes into the pipe only if the worker is born where it is
        // to be contained (process group only if no slot could be had).
        let born_contained = cgroups.is_none() || slot_dir.is_some();
        let task = match task {
            Some((handed, spawn)) if born_contained => {
                chan.mark();
                match chan.send(spawn) {
                    Queued::Ok => Some(handed),
                    // Over the frame limit: the task is not handed; it waits
                    // for this worker like any, and its own send says why.
                    _ => None,
                }
            }
            _ => None,
        };
        let request = ForkRequest {
            into_cgroup: slot_dir.is_some(),
            placed_only: task.is_some(),
            containment: containment.map(|(what, _)| what),
        };
        let mut fds = vec![worker_reads.as_raw_fd(), worker_writes.as_raw_fd()];
        fds.extend(slot_dir.map(|d| d.as_raw_fd()));
        fds.extend(containment.map(|(_, f)| f.as_raw_fd()));
        let handed = task.is_some();
        let pending = Pending {
            chan,
            cgroups,
            into_cgroup: request.into_cgroup,
            asked: Instant::now(),
            task,
        };
        // The fork server holds its own copies of the descriptors once
        // sent: ours close at the end of this function.
        match self.pool.forks.ask(&request, &fds, pending) {
            Ok(()) => Ok(handed),
            Err((e, pending)) => {
                if let Some(cg) = pending.cgroups {
                    self.driver.os.isolation.release(cg);
                }
                // Only a full request queue is worth waiting out.
                Err(match e.kind() {
                    std::io::ErrorKind::WouldBlock => Ask::Later,
                    _ => Ask::Failed(e),
                })
            }
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

fn failed(text: String) -> Ending {
    Ending {
        state: TaskState::Failed,
        cause: Cause::Crashed,
        text: Some(text),
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
