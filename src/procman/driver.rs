//! procman's driver: the table of workers, each with its [`Life`], fed
//! events and carrying out their actions. It reads frames, reaps, keeps the
//! timers and sweeps what a task leaves behind, all through the [`Os`] seam,
//! and tells the task table the verdicts the lifecycle makes, with what
//! each task cost (its cgroup's counters and its worker's rusage, read when
//! nothing of the task is left: a measurement, no verdict). Events go
//! through one queue, so an action that learns something (a sweep, a frame
//! that would not fit) feeds the machine after the actions before it, never
//! from inside them.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::channel::{Channel, Queued};
use super::lifecycle::{Action, Counters, Ending, Event, Life, Stop, Timing};
use super::os::Os;
use crate::cgroup::Usage;
use crate::control::{Cause, FromWorker, Progress, ToWorker};
use crate::cost::{Cost, Cpu, Memory, CPU_CGROUP2, CPU_RUSAGE, MEMORY_RUSAGE};
use crate::limits;
use crate::sys::{ExitStatus, Rusage};
use crate::tasks::{Notice, TaskTable};
use crate::wire::{Message, TaskState};

pub(super) struct Worker<C> {
    pub pid: i32,
    pub chan: Channel,
    pub life: Life,
    pub cgroups: Option<C>,
    /// When it joined the pool: surplus idle workers retire oldest first.
    pub born: Instant,
    /// Which worker in a row its task was given to (1: the first).
    attempt: u32,
    /// What wait4 counted for it (and the descendants it waited for).
    rusage: Option<Rusage>,
}

/// agentd's own helpers, as the pool sees them now: a sweep must not take
/// them for a task's escapees.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Helpers {
    pub fork_server: Option<i32>,
    /// Workers asked of the fork server and not yet named: any unknown
    /// child may be one of them.
    pub forks_pending: usize,
}

/// A task whose worker never read it, to start again on a fresh one.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct GivenBack {
    pub task: String,
    /// Workers it was given to so far.
    pub attempts: u32,
}

pub(super) struct Driver<O: Os> {
    pub os: O,
    pub tasks: Arc<TaskTable>,
    timing: Timing,
    workers: HashMap<i32, Worker<O::Cgroup>>,
    by_task: HashMap<String, i32>,
    events: VecDeque<(i32, Event)>,
    /// Set while `events` is being worked through.
    stepping: bool,
    /// Exits reaped that are no worker's (the fork server, workers not yet
    /// named, orphans): the pool's to route.
    pub unclaimed: Vec<(i32, ExitStatus)>,
    pub given_back: Vec<GivenBack>,
    pub helpers: Helpers,
    next_counters_at: Instant,
    /// When the next finished task is due to be dropped (tasks.retain_ms).
    retention_due: Option<Instant>,
    /// The one buffer every control pipe is read through.
    scratch: Vec<u8>,
}

impl<O: Os> Driver<O> {
    pub fn new(os: O, tasks: Arc<TaskTable>, timing: Timing) -> Driver<O> {
        Driver {
            next_counters_at: os.now(),
            os,
            tasks,
            timing,
            workers: HashMap::new(),
            by_task: HashMap::new(),
            events: VecDeque::new(),
            stepping: false,
            unclaimed: Vec::new(),
            given_back: Vec::new(),
            helpers: Helpers::default(),
            retention_due: None,
            scratch: vec![0; limits::PROCMAN_READ_BUFFER_BYTES],
        }
    }

    /// A new worker joins the pool, idle.
    pub fn add(&mut self, pid: i32, chan: Channel, cgroups: Option<O::Cgroup>) {
        let now = self.os.now();
        let life = Life::idle(pid, cgroups.is_some(), now, self.timing);
        let worker = Worker {
            pid,
            chan,
            life,
            cgroups,
            born: now,
            attempt: 0,
            rusage: None,
        };
        self.workers.insert(pid, worker);
    }

    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Tasks with a worker, stopping ones too: their processes still run.
    pub fn tasks_running(&self) -> usize {
        self.by_task.len()
    }

    /// Idle workers that can take a task: (pid, since when).
    pub fn idle(&self) -> impl Iterator<Item = (i32, Instant)> + '_ {
        self.workers
            .values()
            .filter(|w| w.life.is_idle() && w.chan.is_open())
            .map(|w| (w.pid, w.born))
    }

    /// Every open control pipe, for the poll set: (fd, pid, is the pipe to
    /// the worker, polled for room).
    pub fn pipes(&self) -> impl Iterator<Item = (std::os::fd::RawFd, i32, bool)> + '_ {
        self.workers.values().filter(|w| w.chan.is_open()).flat_map(|w| {
            let out = w.chan.wants_write().then(|| (w.chan.write_fd(), w.pid, true));
            std::iter::once((w.chan.read_fd(), w.pid, false)).chain(out)
        })
    }

    /// Gives an idle worker its task: `spawn` is the frame that starts it,
    /// `deadline` the task's wall-clock budget, `attempt` which worker in a
    /// row the task goes to.
    pub fn assign(&mut self, pid: i32, task_id: String, spawn: &ToWorker, deadline: Option<Instant>, attempt: u32) {
        let Some(w) = self.workers.get_mut(&pid) else { return };
        w.chan.mark();
        self.bind(pid, task_id, deadline, attempt);
        self.send(pid, spawn);
    }

    /// A new worker whose task's `spawn` frame went into its pipe before
    /// it was born (the channel was marked before it): it starts running.
    pub fn assign_handed(&mut self, pid: i32, task_id: String, deadline: Option<Instant>, attempt: u32) {
        self.bind(pid, task_id, deadline, attempt);
    }

    fn bind(&mut self, pid: i32, task_id: String, deadline: Option<Instant>, attempt: u32) {
        let Some(w) = self.workers.get_mut(&pid) else { return };
        w.attempt = attempt;
        self.by_task.insert(task_id.clone(), pid);
        self.event(
            pid,
            Event::Assigned {
                task: task_id.clone(),
                deadline,
            },
        );
        self.tasks
            .worker_notice(&Notice::WorkerSpawn { task_id: &task_id, pid });
        if attempt <= 1 {
            self.tasks.set_progress(&task_id, TaskState::Working, None);
        }
        // The trace is looked up only for a line that is written.
        if log::log_enabled!(log::Level::Info) {
            match self.tasks.trace(&task_id) {
                Some(t) => log::info!("task.start task={task_id} pid={pid} trace={}", t.trace_id()),
                None => log::info!("task.start task={task_id} pid={pid}"),
            }
        }
    }

    /// A follow-up message for the task's warm worker; false if it has none.
    pub fn input(&mut self, task_id: &str, message: Message) -> bool {
        let Some(pid) = self.by_task.get(task_id).copied() else {
            return false;
        };
        self.send(pid, &ToWorker::Input { message });
        self.event(pid, Event::Resumed);
        true
    }

    /// Runs the kill ladder on the task's worker; false if it has none.
    pub fn stop_task(&mut self, task_id: &str, cause: Cause) -> bool {
        let Some(pid) = self.by_task.get(task_id).copied() else {
            return false;
        };
        log::info!("task.stop task={task_id} pid={pid} cause={}", cause.as_str());
        self.event(pid, Event::Stop(Stop::new(cause)));
        true
    }

    /// Every worker: the ladder (`kill_now`: straight to SIGKILL).
    pub fn stop_all(&mut self, cause: Cause, kill_now: bool) {
        let pids: Vec<i32> = self.workers.keys().copied().collect();
        for pid in pids {
            let stop = Stop::new(cause);
            let event = if kill_now {
                Event::KillNow(stop)
            } else {
                Event::Stop(stop)
            };
            self.event(pid, event);
        }
    }

    /// SIGKILLs one worker's task group now (the daemon's second SIGTERM
    /// found it not yet named).
    pub fn kill_now(&mut self, pid: i32, cause: Cause) {
        self.event(pid, Event::KillNow(Stop::new(cause)));
    }

    /// An idle worker the pool no longer needs.
    pub fn retire(&mut self, pid: i32) {
        self.event(pid, Event::Stop(Stop::new(Cause::Shutdown)));
    }

    /// An exit reaped before the worker joined (the fork server had yet to
    /// name it).
    pub fn exited(&mut self, pid: i32, status: ExitStatus) {
        self.before_loss(pid);
        self.event(pid, Event::Exited(status));
    }

    /// `wait4(-1, WNOHANG)` until nothing is left: a worker's exit goes to
    /// its lifecycle (its rusage kept for its task's cost), anything else
    /// to `unclaimed`.
    pub fn reap(&mut self) {
        loop {
            match self.os.reap() {
                Ok(Some(r)) if self.workers.contains_key(&r.pid) => {
                    log::debug!("task.exit pid={} {}", r.pid, r.status);
                    if let Some(w) = self.workers.get_mut(&r.pid) {
                        w.rusage = Some(r.usage);
                    }
                    self.exited(r.pid, r.status);
                }
                Ok(Some(other)) => self.unclaimed.push((other.pid, other.status)),
                Ok(None) => return,
                Err(e) => {
                    log::error!("procman.waitpid error={e}");
                    return;
                }
            }
        }
    }

    /// Frames from a worker whose pipe is readable.
    pub fn read_from(&mut self, pid: i32) {
        let Some(w) = self.workers.get_mut(&pid) else { return };
        let turn = w.chan.read_turn(&mut self.scratch);
        for frame in turn.frames {
            self.on_frame(pid, frame);
        }
        if let Some(why) = &turn.broken {
            log::warn!("procman.control pid={pid} error={why}; killing the worker");
        }
        if turn.closed || turn.broken.is_some() {
            self.before_loss(pid);
            let broken = turn.broken.is_some();
            self.event(pid, Event::ChannelClosed { broken });
        }
    }

    /// Room in a worker's pipe (or it closed its end: flush sees EPIPE).
    pub fn flush(&mut self, pid: i32) {
        if let Some(w) = self.workers.get_mut(&pid) {
            w.chan.flush();
        }
    }

    /// Every timer that is due, the cgroup counters now and then, and the
    /// retention of finished tasks.
    pub fn tick(&mut self) {
        let now = self.os.now();
        let due: Vec<i32> = self
            .workers
            .values()
            .filter(|w| w.life.next_due().is_some_and(|d| d <= now))
            .map(|w| w.pid)
            .collect();
        for pid in due {
            self.event(pid, Event::Tick);
        }
        if now >= self.next_counters_at {
            self.next_counters_at = now + Duration::from_millis(limits::CGROUP_CHECK_MS);
            let running: Vec<i32> = self
                .workers
                .values()
                .filter(|w| w.life.is_running() && w.cgroups.is_some())
                .map(|w| w.pid)
                .collect();
            for pid in running {
                let Some(cg) = self.workers.get(&pid).and_then(|w| w.cgroups.as_ref()) else {
                    continue;
                };
                let pids_refused = self.os.pids_refused(cg);
                if pids_refused > 0 {
                    log::info!("task.exhausted pid={pid} forks_refused={pids_refused}");
                    let counters = Counters {
                        pids_refused,
                        pids_max: self.os.pids_max(),
                        out_of_memory: false,
                    };
                    self.event(pid, Event::Counters(counters));
                }
            }
        }
        // Finished tasks past tasks.retain_ms go even on an idle daemon.
        self.retention_due = self.tasks.expire().map(|left| now + left);
    }

    /// When [`tick`](Self::tick) next has something to do.
    pub fn next_due(&self) -> Option<Instant> {
        let counters = self
            .workers
            .values()
            .any(|w| w.cgroups.is_some() && w.life.is_running())
            .then_some(self.next_counters_at);
        self.workers
            .values()
            .filter_map(|w| w.life.next_due())
            .chain(counters)
            .chain(self.retention_due)
            .min()
    }

    /// Feeds one event to a worker's lifecycle and carries out its actions,
    /// and those of whatever they led to, in order.
    fn event(&mut self, pid: i32, event: Event) {
        self.events.push_back((pid, event));
        if self.stepping {
            return; // the loop below, further up the stack, takes it
        }
        self.stepping = true;
        while let Some((pid, event)) = self.events.pop_front() {
            let Some(w) = self.workers.get_mut(&pid) else { continue };
            let actions = w.life.step(event, self.os.now());
            for action in actions {
                self.act(pid, action);
            }
        }
        self.stepping = false;
    }

    fn act(&mut self, pid: i32, action: Action) {
        let Some(w) = self.workers.get(&pid) else { return };
        match action {
            Action::SendPing => self.send(pid, &ToWorker::Ping),
            Action::SendCancel => {
                crate::metrics::ladder_rung("cancel");
                self.send(pid, &ToWorker::Cancel)
            }
            Action::Terminate => {
                self.os.signal_group(pid, libc::SIGTERM);
                self.os.signal_group(pid, libc::SIGCONT);
            }
            Action::Kill => self.kill(pid),
            Action::Note(what) => {
                crate::metrics::ladder_rung(what);
                let task = w.life.task().map_or("-", |(id, _)| id);
                log::info!("task.ladder task={task} pid={pid} rung={what}");
            }
            Action::Sweep { adopted } => self.sweep(pid, adopted),
            Action::CheckTaken => {
                let event = if w.chan.take_back() {
                    Event::Untouched
                } else {
                    Event::Took
                };
                self.event(pid, event);
            }
            Action::Requeue(task) => {
                log::warn!(
                    "procman.untaken task={task} pid={pid}: the worker never read its task; \
                     starting it on a fresh worker"
                );
                self.by_task.remove(&task);
                let attempts = w.attempt;
                self.given_back.push(GivenBack { task, attempts });
            }
            Action::Finish { ending, exit } => self.finish(pid, ending, exit),
        }
    }

    /// SIGKILL to the whole task: its process group and its cgroup (which
    /// also holds anything that left the group with setsid).
    fn kill(&mut self, pid: i32) {
        self.os.signal_group(pid, libc::SIGKILL);
        if let Some(cg) = self.workers.get(&pid).and_then(|w| w.cgroups.as_ref()) {
            self.os.kill_cgroup(cg);
        }
    }

    /// Looks for what is left of a task and reports it to its lifecycle.
    fn sweep(&mut self, pid: i32, adopted: bool) {
        // Escapees of a SIGKILLed worker come to agentd. Nothing but
        // workers may be ours: the task is not over while any is left. A
        // worker asked for may be a child already, its pid not yet known:
        // then look again at the next sweep.
        let escapees = adopted && (self.helpers.forks_pending > 0 || self.kill_adopted() > 0);
        let mut left = escapees || self.group_or_cgroup_left(pid);
        if left && !escapees {
            // Leftovers of the group re-parent to us (a subreaper): their
            // zombies keep the group alive until they are reaped.
            self.reap();
            left = self.group_or_cgroup_left(pid);
        }
        let Some(w) = self.workers.get(&pid) else { return };
        let counters = match (&w.cgroups, left) {
            (Some(cg), false) => Some(Counters {
                pids_refused: self.os.pids_refused(cg),
                pids_max: self.os.pids_max(),
                out_of_memory: self.os.out_of_memory(cg),
            }),
            _ => None,
        };
        self.event(pid, Event::Swept { left, counters });
    }

    /// Whether anything of the task is still in its process group or its
    /// cgroup.
    fn group_or_cgroup_left(&mut self, pid: i32) -> bool {
        let Some(w) = self.workers.get(&pid) else { return false };
        w.cgroups.as_ref().is_some_and(|cg| self.os.cgroup_populated(cg)) || self.os.group_alive(pid)
    }

    /// SIGKILLs every child of agentd that is no worker (nor the fork
    /// server); returns how many there were.
    fn kill_adopted(&mut self) -> usize {
        let mut found = 0;
        for child in self.os.children() {
            if !self.workers.contains_key(&child) && self.helpers.fork_server != Some(child) {
                log::info!("procman.adopted pid={child} killed: it outlived its task's worker");
                self.os.kill_pid(child, libc::SIGKILL);
                found += 1;
            }
        }
        found
    }

    /// Before a worker's exit or EOF is told: a task it never read is not
    /// its to end.
    fn before_loss(&mut self, pid: i32) {
        let Some(w) = self.workers.get(&pid) else { return };
        if w.life.may_not_have_taken() && w.chan.take_back() {
            self.event(pid, Event::Untouched);
        }
    }

    /// Queues a frame; a worker that does not read is stopped for it.
    fn send(&mut self, pid: i32, frame: &ToWorker) {
        let Some(w) = self.workers.get_mut(&pid) else { return };
        let task = w.life.task().map_or("-", |(id, _)| id);
        match w.chan.send(frame) {
            Queued::Ok => {}
            Queued::Full => {
                log::warn!("procman.control task={task} pid={pid} outbox full: the worker stopped reading");
                self.event(pid, Event::Unwritable);
            }
            Queued::Refused(e) => {
                log::warn!("procman.control task={task} pid={pid} error={e}");
                let stop = Stop {
                    cause: Cause::Failed,
                    why: Some(format!("failed: {e}")),
                };
                self.event(pid, Event::Stop(stop));
            }
        }
    }

    fn on_frame(&mut self, pid: i32, frame: FromWorker) {
        self.event(pid, Event::Heard);
        let Some(w) = self.workers.get(&pid) else { return };
        let Some((id, _)) = w.life.task() else { return };
        let id = id.to_string();
        let running = w.life.speaks_for_its_task();
        // A status makes the task a task (not a direct reply); an artifact
        // does so itself, and a reply marks the task atomically with the
        // message (a stream waking in between would open as a task).
        if matches!(frame, FromWorker::Status { .. }) {
            self.tasks.mark_spoke(&id);
        }
        match frame {
            FromWorker::Pong => {}
            FromWorker::Status { state, text } => {
                let state = match state {
                    Progress::Working => TaskState::Working,
                    Progress::InputRequired => TaskState::InputRequired,
                    Progress::AuthRequired => TaskState::AuthRequired,
                };
                if running {
                    self.tasks.set_progress(&id, state, text);
                }
                let event = if state.is_interrupted() {
                    Event::Asked
                } else {
                    Event::Resumed
                };
                self.event(pid, event);
            }
            FromWorker::Artifact {
                artifact,
                append,
                last_chunk,
            } => self.tasks.add_artifact(&id, artifact, append, last_chunk),
            FromWorker::Reply { message } => self.tasks.set_direct_reply(&id, message),
            FromWorker::Done { outcome, cause, text } => {
                self.event(pid, Event::Reported(Ending::reported(outcome, cause, text)));
            }
        }
    }

    /// The worker is gone and so is everything of its task: the task gets
    /// the verdict its lifecycle made and what it cost, and the cgroup slot
    /// is free again.
    fn finish(&mut self, pid: i32, ending: Option<Ending>, exit: ExitStatus) {
        let Some(mut w) = self.workers.remove(&pid) else { return };
        // Read for a worker without a task too: the reading is the slot's
        // baseline for its next task.
        let usage = w.cgroups.as_ref().map(|cg| self.os.cgroup_usage(cg));
        if let Some(cg) = w.cgroups.take() {
            self.os.release_cgroup(cg);
        }
        let (Some((id, since)), Some(ending)) = (w.life.task(), ending) else {
            return; // a worker without a task: nobody to tell
        };
        let cost = task_cost(self.os.now().saturating_duration_since(since), usage, w.rusage);
        self.by_task.remove(id);
        self.tasks.worker_notice(&Notice::WorkerExit {
            task_id: id,
            pid,
            exit_code: exit.shell_code(),
            exit: &exit.to_string(),
            cause: ending.cause.as_str(),
        });
        if log::log_enabled!(log::Level::Info) {
            let trace = self.tasks.trace(id).map(|t| format!(" trace={}", t.trace_id()));
            log::info!(
                "task.end task={id} pid={pid} state={} cause={} ms={} cpu_us={} peak_bytes={}{}",
                ending.state.short_name(),
                ending.cause.as_str(),
                since.elapsed().as_millis(),
                cost.cpu.map_or(0, |c| c.user_usec + c.system_usec),
                cost.memory.map_or(0, |m| m.peak_bytes),
                trace.unwrap_or_default()
            );
        }
        end_task(&self.tasks, id, ending, Some(cost));
    }
}

/// What a task cost: CPU time from its cgroup's `cpu.stat` (the slot's
/// reading now less its reading before the task), the memory peak from
/// the cgroup where the slot could reset it, and the worker's rusage for
/// whatever the cgroup cannot say (or without a cgroup).
fn task_cost(wall: Duration, cgroup: Option<Usage>, rusage: Option<Rusage>) -> Cost {
    let cg = cgroup.unwrap_or_default();
    let cpu = match (cg.cpu, rusage) {
        (Some((before, now)), _) => {
            let t = now.since(before);
            Some(Cpu {
                user_usec: t.user_usec,
                system_usec: t.system_usec,
                source: CPU_CGROUP2,
            })
        }
        (None, Some(r)) => Some(Cpu {
            user_usec: r.user_usec,
            system_usec: r.system_usec,
            source: CPU_RUSAGE,
        }),
        (None, None) => None,
    };
    let memory = match (cg.memory_peak, rusage) {
        (Some((peak_bytes, source)), _) => Some(Memory { peak_bytes, source }),
        (None, Some(r)) => Some(Memory {
            peak_bytes: r.maxrss_bytes,
            source: MEMORY_RUSAGE,
        }),
        (None, None) => None,
    };
    Cost {
        wall_ms: wall.as_millis().min(u64::MAX as u128) as u64,
        cpu,
        memory,
    }
}

/// A task's verdict (and what it cost, if it ran), counted for /metrics.
pub(super) fn end_task(tasks: &TaskTable, id: &str, ending: Ending, cost: Option<Cost>) {
    crate::metrics::task_ended(ending.state, ending.cause);
    if let Some(c) = &cost {
        crate::metrics::task_cost(c);
    }
    tasks.finish_with_cost(id, ending.state, ending.cause, ending.text, cost);
}

#[cfg(test)]
mod tests;
