//! Bringing workers to tasks: the pool of idle workers sized to demand,
//! and asking the fork server for workers born in their cgroup slot, for
//! the tasks the start path ([`start`](super::start)) has waiting under
//! tasks.max_running. The pool decides nothing about a task: what it does
//! and what the kernel answered go to the start path as events, and the
//! driver carries out what that decides. Every kernel call goes through the
//! [`Os`] seam, so the pool's tests script the kernel (pool/tests.rs).
//!
//! A task that finds no idle worker is handed to the worker asked for it:
//! its `spawn` frame goes into that worker's pipe before the fork (see
//! [`Handed`]); what the fork server answers is taken in [`born`].

mod born;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::channel::{Channel, Queued};
use super::driver::{Driver, Helpers};
use super::forks::{Asked, ForkServer, Handed};
use super::lifecycle::Timing;
use super::os::Os;
use super::start::{StartEvent, StartLimits};
use std::sync::Arc;

use crate::config::{Config, Runner};
use crate::control::{ForkRequest, Rlimits, RunnerSpec, ToWorker};
use crate::ids::TaskId;
use crate::limits;
use crate::sys::{self, ExitStatus};
use crate::tasks::TaskTable;
use crate::wire::{Message, TaskState};
use crate::worker;

const DEMAND_WINDOW: Duration = Duration::from_millis(limits::PRESPAWN_DEMAND_WINDOW_MS);

/// What brings workers: the fork server, what was asked of it, and the
/// workers a lost fork server made that are yet to say who they are.
pub(super) struct Pool<C, L> {
    /// When recent tasks started: the demand the pool is sized to.
    starts: VecDeque<Instant>,
    pub forks: ForkServer<C, L>,
    /// Exits reaped before the worker was named.
    early_exits: HashMap<i32, ExitStatus>,
    /// Workers of a lost fork server that read their task, by a number of
    /// their own, until they say who they are (or are given up on).
    pub orphans: Vec<(u64, Orphan<C>)>,
    next_orphan: u64,
}

/// A worker a lost fork server made, that read its task: agentd's own
/// child, alive (or its pipe says otherwise), whose pid is not known yet.
pub(super) struct Orphan<C> {
    pub chan: Channel,
    pub cgroups: Option<C>,
    pub task: Handed,
    /// Given up on if it has said nothing by then.
    pub due: Instant,
}

impl<C, L> Pool<C, L> {
    pub fn new() -> Pool<C, L> {
        Pool {
            starts: VecDeque::new(),
            forks: ForkServer::new(),
            early_exits: HashMap::new(),
            orphans: Vec::new(),
            next_orphan: 0,
        }
    }

    /// Workers asked for without a task: they join the pool.
    fn unhanded_asks(&self) -> usize {
        self.forks.pending() - self.forks.handed()
    }

    /// Nothing is owed by a fork server and no orphan is waited for: every
    /// worker made is in the driver, or known not to exist.
    pub fn settled(&self) -> bool {
        self.forks.pending() == 0 && self.orphans.is_empty()
    }

    /// When the pool next has something to do: a fork server's answer
    /// overdue, an orphan given up on.
    pub fn next_due(&self) -> Option<Instant> {
        let orphans = self.orphans.iter().map(|(_, o)| o.due);
        self.forks.answer_due().into_iter().chain(orphans).min()
    }
}

/// The workers, the tasks on their way to one, and what brings workers:
/// everything procman's loop drives, over an [`Os`] seam (the kernel, or a
/// scripted one in tests).
pub(super) struct Supervisor<O: Os> {
    pub cfg: Arc<Config>,
    pub driver: Driver<O>,
    pub pool: Pool<O::Cgroup, O::ForkLine>,
    /// What every spawn frame says to run (the config does not change).
    runner: Arc<RunnerSpec>,
}

impl<O: Os> Supervisor<O> {
    pub fn new(cfg: Arc<Config>, os: O, tasks: Arc<TaskTable>) -> Supervisor<O> {
        let timing = Timing::of(&cfg);
        Supervisor {
            runner: Arc::new(runner_spec(&cfg)),
            cfg,
            driver: Driver::new(os, tasks, timing, StartLimits::default()),
            pool: Pool::new(),
        }
    }

    /// A task was created in SUBMITTED.
    pub fn submit(&mut self, id: TaskId) {
        self.start_event(StartEvent::Submitted(id));
    }

    /// A follow-up message for a task waiting on input.
    pub fn input(&mut self, id: &str, message: Message) {
        if !self.driver.input(helpers(&self.pool), id, message) {
            log::warn!("procman.input task={id} has no live worker; dropping the message");
        }
    }

    /// Stops a task wherever it is.
    pub fn cancel(&mut self, id: TaskId) {
        self.start_event(StartEvent::Cancel(id));
    }

    /// The daemon stops: what waits ends, every worker's ladder runs.
    pub fn drain(&mut self) {
        log::info!(
            "procman.shutdown workers={} queued={}",
            self.driver.tasks_running(),
            self.driver.start.queued()
        );
        self.start_event(StartEvent::Drain);
        self.driver.stop_all(helpers(&self.pool), false);
    }

    /// The second SIGTERM: every worker SIGKILLed now.
    pub fn kill_all(&mut self) {
        self.start_event(StartEvent::KillAll);
        self.driver.stop_all(helpers(&self.pool), true);
    }

    /// The end of a turn: timers, exits nobody claimed, orphans given up
    /// on, and whatever can start now.
    pub fn turn_end(&mut self) {
        self.driver.tick(helpers(&self.pool));
        self.route_unclaimed();
        let now = self.driver.os.now();
        self.give_up_silent_orphans(now);
        self.start_queued();
        self.fill_pool();
        self.driver.start.forget_passed_retry(now);
    }

    /// Reaps every exit (SIGCHLD came).
    pub fn reap(&mut self) {
        self.driver.reap(helpers(&self.pool));
        self.route_unclaimed();
    }

    /// Exits the driver reaped that are no worker's: a fork server's, a
    /// worker's not yet named, an adopted orphan's.
    pub fn route_unclaimed(&mut self) {
        for (pid, status) in std::mem::take(&mut self.driver.unclaimed) {
            self.route_exit(pid, status);
        }
    }

    /// Nothing is left to wait for: no worker, no answer owed. (A worker
    /// the fork server may already have made is waited for too: adopted,
    /// it is retired with the rest; unread, it would be left in a slot
    /// removed under it.)
    pub fn settled(&self) -> bool {
        self.driver.is_empty() && self.pool.settled()
    }

    pub fn next_due(&self) -> Option<Instant> {
        [
            self.driver.next_due(),
            self.driver.start.next_due(),
            self.pool.next_due(),
            self.pool_review_due(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// agentd's own helpers, derived from the pool at the call that needs them.
pub(super) fn helpers<C, L>(pool: &Pool<C, L>) -> Helpers<'_> {
    Helpers {
        fork_servers: pool.forks.unreaped(),
        unnamed: pool.forks.pending() + pool.orphans.len(),
    }
}

/// Why no worker was asked for.
pub(super) enum Ask {
    /// The fork server's request queue is full, it was lost before it
    /// heard the request, or the start path holds asks back: ask again
    /// later.
    Later,
    /// It could not be asked (it cannot be started, pipes cannot be made).
    Failed(std::io::Error),
}

impl<O: Os> Supervisor<O> {
    /// Feeds the start path an event and carries out what it decides.
    pub(super) fn start_event(&mut self, event: StartEvent) {
        self.driver.start_event(helpers(&self.pool), event);
    }

    /// Starts waiting tasks on idle workers while there is room under
    /// tasks.max_running; with no idle worker, each is handed to a worker
    /// asked for it (its frame in the pipe before the worker is born), or,
    /// where that cannot be (the worker must be moved into a cgroup after
    /// its birth), workers are asked for as many as can start now (they
    /// start as they arrive).
    pub(super) fn start_queued(&mut self) {
        let now = self.driver.os.now();
        while self.driver.start.is_open() && self.driver.start.started() < self.driver.tasks.max_running() {
            let Some((id, attempt)) = self.driver.start.front().map(|(id, a)| (id.clone(), a)) else {
                return;
            };
            // Given back: it was started (WORKING). Queued: it waits.
            let state = self.driver.tasks.state(&id);
            let waiting = if attempt > 1 {
                state.is_some_and(|s| !s.is_terminal())
            } else {
                state == Some(TaskState::Submitted)
            };
            if !waiting {
                self.start_event(StartEvent::Dropped(id)); // cancelled meanwhile, or pruned
                continue;
            }
            // With no idle worker: handed to a worker of its own, unless
            // that cannot be, or workers already asked for (without a task)
            // are enough for every task waiting — then it waits for one.
            let idle = self.driver.idle().map(|(pid, _)| pid).min();
            if idle.is_none()
                && (!self.driver.os.born_whole() || self.pool.unhanded_asks() >= self.driver.start.queued())
            {
                self.ask_for_workers();
                return;
            }
            let Some((context_id, message)) = self.driver.tasks.start_info(&id) else {
                self.start_event(StartEvent::Dropped(id));
                continue;
            };
            let spawn = ToWorker::Spawn {
                task_id: id.to_string(),
                context_id,
                message,
                runner: self.runner.clone(),
                trace: self.driver.tasks.trace(&id),
            };
            let deadline_ms = self.cfg.tasks.deadline_ms;
            let deadline = (deadline_ms > 0).then(|| now + Duration::from_millis(deadline_ms));
            match idle {
                Some(pid) => self.driver.assign(helpers(&self.pool), pid, id, &spawn, deadline),
                None => {
                    let handed = Handed {
                        id: id.clone(),
                        deadline,
                    };
                    match self.ask_worker(Some((handed, &spawn))) {
                        Ok(true) => self.start_event(StartEvent::Asked(id)),
                        // Not handed after all: it waits for this worker.
                        Ok(false) => return,
                        Err(Ask::Later) => {
                            self.start_event(StartEvent::Busy);
                            return;
                        }
                        Err(Ask::Failed(e)) => {
                            self.no_worker(e);
                            return;
                        }
                    }
                }
            }
            self.pool.starts.push_back(now);
        }
    }

    /// No idle worker for the task first in line: ask for as many as can
    /// start now.
    fn ask_for_workers(&mut self) {
        let start = &self.driver.start;
        let room = self.driver.tasks.max_running().saturating_sub(start.started());
        let missing = room.min(start.queued()).saturating_sub(self.pool.unhanded_asks());
        for _ in 0..missing.min(limits::PRESPAWN_PER_TURN) {
            match self.ask_worker(None) {
                Ok(_) => {}
                Err(Ask::Later) => {
                    self.start_event(StartEvent::Busy);
                    return;
                }
                Err(Ask::Failed(e)) => {
                    self.no_worker(e);
                    return;
                }
            }
        }
    }

    /// A worker could not be had: the start path counts it, and fails the
    /// task first in line when it keeps happening.
    pub(super) fn no_worker(&mut self, e: std::io::Error) {
        crate::metrics::worker_spawn_failed();
        self.start_event(StartEvent::NoWorker(e.to_string()));
    }

    /// Keeps idle workers ready, so a task's start does not wait for a
    /// worker to be forked: tasks.prespawn of them, or with
    /// `auto` as many as tasks started within DEMAND_WINDOW (at least one,
    /// at most PRESPAWN_AUTO_MAX).
    pub(super) fn fill_pool(&mut self) {
        let now = self.driver.os.now();
        let starts = &mut self.pool.starts;
        while starts.front().is_some_and(|t| now.duration_since(*t) > DEMAND_WINDOW) {
            starts.pop_front();
        }
        let want = match self.cfg.tasks.prespawn {
            Some(n) => n,
            None => starts.len().clamp(1, limits::PRESPAWN_AUTO_MAX),
        };
        if !self.driver.start.is_open() || want == 0 {
            return;
        }
        let idle: Vec<(Instant, i32)> = self.driver.idle().map(|(pid, born)| (born, pid)).collect();
        if idle.len() > want {
            // Demand fell: retire the oldest surplus worker once it has
            // waited a whole window, one per turn (no churn under bursts).
            if let Some((since, pid)) = idle.iter().min().copied() {
                if now.duration_since(since) > DEMAND_WINDOW * 4 {
                    self.driver.retire(helpers(&self.pool), pid);
                }
            }
            return;
        }
        let have = idle.len() + self.pool.unhanded_asks();
        let started = self.driver.start.started();
        // Where tasks can be handed to their workers at birth, `auto` does
        // not refill while tasks run: a task that finds no idle worker then
        // costs the fork it costs anyway and a wake-up less than an idle
        // worker's (measured on an AMD EPYC: 6.5% more tasks per second at
        // 16 clients, the same at 1). It refills, to the demand, when
        // nothing runs, so a lone task still finds a worker waiting.
        if self.cfg.tasks.prespawn.is_none() && started > 0 && self.driver.os.born_whole() {
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
                    // The pool's own worker, for no task yet: a back-off,
                    // not a failure any task pays for.
                    log::warn!("procman.prespawn error={e}");
                    self.start_event(StartEvent::Busy);
                    return;
                }
            }
        }
    }

    /// A pool grown by a burst is looked at again until it has shrunk.
    pub(super) fn pool_review_due(&self) -> Option<Instant> {
        let auto = self.cfg.tasks.prespawn.is_none();
        (auto && self.driver.idle().count() > 1).then(|| self.driver.os.now() + DEMAND_WINDOW)
    }

    /// Asks the fork server (started first if it is not running) for one
    /// worker, born in a free cgroup slot where agentd has them; with a
    /// task, that task's `spawn` frame goes into the worker's pipe first.
    /// The answer comes through the poll loop
    /// ([`Supervisor::take_fork_answers`]). True if the task went with it.
    pub(super) fn ask_worker(&mut self, task: Option<(Handed, &ToWorker)>) -> Result<bool, Ask> {
        let now = self.driver.os.now();
        if !self.driver.start.may_ask(now) {
            return Err(Ask::Later);
        }
        if !self.pool.forks.is_up() {
            let env = self.worker_env().map_err(Ask::Failed)?;
            self.pool.forks.start(&mut self.driver.os, &env).map_err(Ask::Failed)?;
        }
        let (from_worker, worker_writes) = sys::pipe().map_err(Ask::Failed)?;
        let (worker_reads, to_worker) = sys::pipe().map_err(Ask::Failed)?;
        let mut chan = Channel::new(from_worker.into(), to_worker.into(), self.frame_max()).map_err(Ask::Failed)?;
        let os = &mut self.driver.os;
        let cgroups = if os.has_slots() {
            match os.acquire_slot() {
                Ok(c) => Some(c),
                Err(e) => {
                    log::warn!("task.cgroup error={e}; process group only");
                    None
                }
            }
        } else {
            None
        };
        let slot = cgroups.as_ref().map(|c| os.slot_fds(c)).unwrap_or_default();
        // A task goes into the pipe only if the worker is born where it is
        // to be contained (process group only if no slot could be had).
        let born_contained = cgroups.is_none() || slot.dir.is_some();
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
            into_cgroup: slot.dir.is_some(),
            placed_only: task.is_some(),
            containment: slot.containment.map(|(what, _)| what),
        };
        let mut fds = vec![worker_reads.as_raw_fd(), worker_writes.as_raw_fd()];
        fds.extend(slot.dir);
        fds.extend(slot.containment.map(|(_, f)| f));
        let handed = task.is_some();
        let asked = Asked {
            chan,
            cgroups,
            into_cgroup: request.into_cgroup,
            asked: now,
            task,
        };
        // The fork server holds its own copies of the descriptors once
        // sent: ours close at the end of this function.
        match self.pool.forks.ask(&mut self.driver.os, &request, &fds, asked) {
            Ok(()) => Ok(handed),
            Err((e, asked)) => {
                if let Some(cg) = asked.cgroups {
                    self.driver.os.discard_slot(cg);
                }
                // A full request queue is waited out. Any other error is a
                // fork server gone before it heard the request: that is a
                // lost helper, which the start path counts as one (it costs
                // a task nothing until five in a row), not a worker not had
                // as well; the next ask starts another.
                if e.kind() != std::io::ErrorKind::WouldBlock {
                    log::debug!("procman.ask error={e}; asking the next fork server");
                }
                Err(Ask::Later)
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
        if worker::children_source() == worker::ChildrenSource::ProcScan {
            env.push((worker::CHILDREN_SCAN_ENV, "1".into()));
        }
        // A debug build passes its test hooks on (see worker::TEST_HOOKS_ENV).
        let hooks = if cfg!(debug_assertions) {
            worker::TEST_HOOKS_ENV
        } else {
            &[]
        };
        for name in worker::INHERITED_ENV.iter().chain(hooks) {
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

    /// An exit that was no worker's: a fork server's, or a worker's not
    /// yet named, or an orphan's.
    pub(super) fn route_exit(&mut self, pid: i32, status: ExitStatus) {
        if self.pool.forks.exited(pid) {
            log::debug!("procman.forkserver pid={pid} {status}");
        } else if !self.pool.settled() {
            self.pool.early_exits.insert(pid, status);
        } else {
            log::debug!("procman.reaped pid={pid} {status} (not a worker)");
        }
    }
}

/// What every task's worker is told to run, from the config.
fn runner_spec(cfg: &Config) -> RunnerSpec {
    match &cfg.runner {
        Runner::Echo => RunnerSpec::Echo,
        Runner::Peer { address } => RunnerSpec::Peer {
            address: address.to_string(),
        },
        Runner::Exec { argv } => RunnerSpec::Exec {
            argv: argv.clone(),
            protocol: cfg.exec_protocol.clone(),
            workdir: cfg.workdir.as_ref().map(|p| p.display().to_string()),
            env: cfg.env.clone(),
            rlimits: Rlimits {
                as_bytes: cfg.tasks.rlimit_as_bytes,
                cpu_secs: cfg.tasks.rlimit_cpu_secs,
                nofile: cfg.tasks.rlimit_nofile,
            },
            output_max_bytes: cfg.tasks.output_max_bytes,
        },
    }
}

fn cstring(bytes: &[u8]) -> std::io::Result<CString> {
    CString::new(bytes).map_err(|_| std::io::ErrorKind::InvalidInput.into())
}
