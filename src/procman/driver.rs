//! procman's driver: the table of workers, each with its [`WorkerLife`],
//! and the [`StartPath`] of the tasks on their way to one — the two
//! machines — fed events and carrying out their actions. It reads frames,
//! reaps, keeps the timers and sweeps what a task leaves behind, all
//! through the [`Os`] seam, and is **the one place that ends a task**: it
//! tells the task table the verdicts the two machines make, with what each
//! task cost (its cgroup's counters and its worker's rusage, read when
//! nothing of the task is left: a measurement, no verdict). Events go
//! through one queue, so an action that learns something (a sweep, a frame
//! that would not fit) feeds the machine after the actions before it, never
//! from inside them.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::channel::{Channel, Queued, Turn};
use super::lifecycle::{Counters, Ending, Stop, TaskRef, Timing, WorkerAction, WorkerEvent, WorkerLife};
use super::os::Os;
use super::start::{StartAction, StartEvent, StartLimits, StartPath, Way};
use crate::cgroup::Usage;
use crate::control::{Cause, FromWorker, Progress, ToWorker};
use crate::cost::{Cost, Cpu, Memory, CPU_CGROUP2, CPU_RUSAGE, MEMORY_RUSAGE};
use crate::ids::TaskId;
use crate::limits;
use crate::sys::{ExitStatus, Rusage};
use crate::tasks::{Notice, TaskTable};
use crate::wire::{Message, TaskState};

pub(super) struct Worker<C> {
    pub pid: i32,
    pub chan: Channel,
    pub life: WorkerLife,
    pub cgroups: Option<C>,
    /// When it joined the pool: surplus idle workers retire oldest first.
    pub born: Instant,
    /// What wait4 counted for it (and the descendants it waited for).
    rusage: Option<Rusage>,
}

/// agentd's own helpers as the pool sees them at the call that passes
/// this: a sweep must not take them for a task's escapees.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Helpers<'a> {
    /// Fork servers started and not reaped yet.
    pub fork_servers: &'a [i32],
    /// Workers asked for or being adopted, not yet named: any unknown
    /// child may be one of them.
    pub unnamed: usize,
}

pub(super) struct Driver<O: Os> {
    pub os: O,
    pub tasks: Arc<TaskTable>,
    /// Where each task on its way to a worker is, and which worker has it.
    pub start: StartPath,
    timing: Timing,
    workers: HashMap<i32, Worker<O::Cgroup>>,
    events: VecDeque<(i32, WorkerEvent)>,
    /// Set while `events` is being worked through.
    stepping: bool,
    /// Exits reaped that are no worker's (the fork server, workers not yet
    /// named, orphans): the pool's to route.
    pub unclaimed: Vec<(i32, ExitStatus)>,
    next_counters_at: Instant,
    /// When the next finished task is due to be dropped (tasks.retain_ms).
    retention_due: Option<Instant>,
    /// The one buffer every control pipe is read through.
    scratch: Vec<u8>,
}

impl<O: Os> Driver<O> {
    pub fn new(os: O, tasks: Arc<TaskTable>, timing: Timing, start: StartLimits) -> Driver<O> {
        Driver {
            next_counters_at: os.now(),
            os,
            tasks,
            start: StartPath::new(start),
            timing,
            workers: HashMap::new(),
            events: VecDeque::new(),
            stepping: false,
            unclaimed: Vec::new(),
            retention_due: None,
            scratch: vec![0; limits::PROCMAN_READ_BUFFER_BYTES],
        }
    }

    /// A new worker joins the pool, idle.
    pub fn add(&mut self, pid: i32, chan: Channel, cgroups: Option<O::Cgroup>) {
        let now = self.os.now();
        let life = WorkerLife::idle(pid, cgroups.is_some(), now, self.timing);
        let worker = Worker {
            pid,
            chan,
            life,
            cgroups,
            born: now,
            rusage: None,
        };
        self.workers.insert(pid, worker);
    }

    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    pub fn knows(&self, pid: i32) -> bool {
        self.workers.contains_key(&pid)
    }

    /// Idle workers that can take a task: (pid, since when).
    pub fn idle(&self) -> impl Iterator<Item = (i32, Instant)> + '_ {
        self.workers
            .values()
            .filter(|w| w.life.is_idle() && w.chan.is_open())
            .map(|w| (w.pid, w.born))
    }

    /// Tasks whose workers still run (stopping ones too).
    pub fn tasks_running(&self) -> usize {
        self.workers.values().filter(|w| w.life.task().is_some()).count()
    }

    /// Every open control pipe, for the poll set: (fd, pid, is the pipe to
    /// the worker, polled for room).
    pub fn pipes(&self) -> impl Iterator<Item = (std::os::fd::RawFd, i32, bool)> + '_ {
        self.workers.values().filter(|w| w.chan.is_open()).flat_map(|w| {
            let out = w.chan.wants_write().then(|| (w.chan.write_fd(), w.pid, true));
            std::iter::once((w.chan.read_fd(), w.pid, false)).chain(out)
        })
    }

    /// Feeds the start path and carries out what it decides.
    pub fn start_event(&mut self, h: Helpers, event: StartEvent) {
        let now = self.os.now();
        for action in self.start.step(event, now) {
            match action {
                StartAction::End { task, ending } => {
                    if end_task(&self.tasks, &task, ending.clone(), None) {
                        log::info!(
                            "task.end task={task} state={} cause={} (no worker ran it)",
                            ending.state.short_name(),
                            ending.cause.as_str()
                        );
                    }
                }
                StartAction::StopWorker { pid, stop } => {
                    log::info!("task.stop pid={pid} cause={}", stop.cause.as_str());
                    self.event(h, pid, WorkerEvent::Stop(stop));
                }
                StartAction::KillWorker { pid } => self.event(h, pid, WorkerEvent::KillNow(Stop::new(Cause::Shutdown))),
            }
        }
    }

    /// Gives an idle worker its task: `spawn` is the frame that starts it,
    /// `deadline` the task's wall-clock budget.
    pub fn assign(&mut self, h: Helpers, pid: i32, task_id: TaskId, spawn: &ToWorker, deadline: Option<Instant>) {
        let Some(w) = self.workers.get_mut(&pid) else { return };
        w.chan.mark();
        self.bind(h, pid, task_id, deadline);
        self.send(h, pid, spawn);
    }

    /// A new worker whose task's `spawn` frame went into its pipe before
    /// it was born (the channel was marked before it): it starts running.
    pub fn assign_handed(&mut self, h: Helpers, pid: i32, task_id: TaskId, deadline: Option<Instant>) {
        self.bind(h, pid, task_id, deadline);
    }

    fn bind(&mut self, h: Helpers, pid: i32, task_id: TaskId, deadline: Option<Instant>) {
        if !self.workers.contains_key(&pid) {
            return;
        }
        let task = task_id.clone();
        self.event(h, pid, WorkerEvent::Assigned { task, deadline });
        // A stop that waited for the worker to be named comes now.
        self.start_event(
            h,
            StartEvent::Bound {
                task: task_id.clone(),
                pid,
            },
        );
        self.tasks
            .worker_notice(&Notice::WorkerSpawn { task_id: &task_id, pid });
        if let Some(Way::Bound { attempt: 1, .. }) = self.start.way(&task_id) {
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

    /// A follow-up message for the task's warm worker; false if it has
    /// none (the worker's lifecycle decides whether it goes out).
    pub fn input(&mut self, h: Helpers, task_id: &str, message: Message) -> bool {
        let Some(pid) = self.start.worker_of(task_id) else {
            return false;
        };
        self.event(h, pid, WorkerEvent::Input(Box::new(message)));
        true
    }

    /// Every worker: the ladder (`kill_now`: straight to SIGKILL).
    pub fn stop_all(&mut self, h: Helpers, kill_now: bool) {
        let pids: Vec<i32> = self.workers.keys().copied().collect();
        for pid in pids {
            let stop = Stop::new(Cause::Shutdown);
            let event = if kill_now {
                WorkerEvent::KillNow(stop)
            } else {
                WorkerEvent::Stop(stop)
            };
            self.event(h, pid, event);
        }
    }

    /// A worker agentd no longer needs: killed, no verdict.
    pub fn retire(&mut self, h: Helpers, pid: i32) {
        self.event(h, pid, WorkerEvent::Retire);
    }

    /// An exit reaped before the worker joined (the fork server had yet to
    /// name it).
    pub fn exited(&mut self, h: Helpers, pid: i32, status: ExitStatus) {
        // What it wrote before it exited is in its pipe: heard first, as it
        // spoke. Most workers exit between procman's poll and its reap,
        // their last frames unread; without this read each of those made
        // procman ask whether the worker had taken its task (an ioctl and
        // a turn) before it heard the frames that say so.
        if self.workers.get(&pid).is_some_and(|w| w.chan.is_open()) {
            self.read_from(h, pid);
        }
        let Some(w) = self.workers.get(&pid) else { return };
        let channel_open = w.chan.is_open();
        let event = WorkerEvent::Exited {
            exit: status,
            channel_open,
        };
        self.event(h, pid, event);
    }

    /// `wait4(-1, WNOHANG)` until nothing is left: a worker's exit goes to
    /// its lifecycle (its rusage kept for its task's cost), anything else
    /// to `unclaimed`.
    pub fn reap(&mut self, h: Helpers) {
        loop {
            match self.os.reap() {
                Ok(Some(r)) if self.workers.contains_key(&r.pid) => {
                    log::debug!("task.exit pid={} {}", r.pid, r.status);
                    if let Some(w) = self.workers.get_mut(&r.pid) {
                        w.rusage = Some(r.usage);
                    }
                    self.exited(h, r.pid, r.status);
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
    pub fn read_from(&mut self, h: Helpers, pid: i32) {
        let Some(w) = self.workers.get_mut(&pid) else { return };
        let turn = w.chan.read_turn(&mut self.scratch);
        self.heard(h, pid, turn);
    }

    /// A turn of frames read from worker `pid`'s pipe (by the driver, or
    /// by the pool before it knew whose pipe it was).
    pub fn heard(&mut self, h: Helpers, pid: i32, turn: Turn) {
        for frame in turn.frames {
            self.event(h, pid, WorkerEvent::Said(frame));
        }
        if let Some(why) = &turn.broken {
            log::warn!("procman.control pid={pid} error={why}; killing the worker");
        }
        if turn.closed || turn.broken.is_some() {
            let broken = turn.broken.is_some();
            self.event(h, pid, WorkerEvent::ChannelClosed { broken });
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
    pub fn tick(&mut self, h: Helpers) {
        let now = self.os.now();
        let due: Vec<i32> = self
            .workers
            .values()
            .filter(|w| w.life.next_due().is_some_and(|d| d <= now))
            .map(|w| w.pid)
            .collect();
        for pid in due {
            self.event(h, pid, WorkerEvent::Tick);
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
                let counters = Counters {
                    pids_refused: self.os.pids_refused(cg),
                    pids_max: self.os.pids_max(),
                    out_of_memory: false,
                };
                if counters.pids_refused > 0 {
                    log::info!("task.exhausted pid={pid} forks_refused={}", counters.pids_refused);
                }
                self.event(h, pid, WorkerEvent::Counters(counters));
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
    fn event(&mut self, h: Helpers, pid: i32, event: WorkerEvent) {
        self.events.push_back((pid, event));
        if self.stepping {
            return; // the loop below, further up the stack, takes it
        }
        self.stepping = true;
        while let Some((pid, event)) = self.events.pop_front() {
            let Some(w) = self.workers.get_mut(&pid) else { continue };
            let actions = w.life.step(event, self.os.now());
            for action in actions {
                self.act(h, pid, action);
            }
        }
        self.stepping = false;
    }

    fn act(&mut self, h: Helpers, pid: i32, action: WorkerAction) {
        let Some(w) = self.workers.get(&pid) else { return };
        match action {
            WorkerAction::SendPing => self.send(h, pid, &ToWorker::Ping),
            WorkerAction::SendCancel => {
                if w.chan.is_open() {
                    crate::metrics::ladder_rung("cancel");
                }
                self.send(h, pid, &ToWorker::Cancel)
            }
            WorkerAction::SendInput(message) => self.send(h, pid, &ToWorker::Input { message }),
            WorkerAction::Relay(frame) => {
                // A worker relays only while it has a task.
                if let Some(id) = w.life.task().map(|t| t.id.clone()) {
                    self.relay(&id, frame);
                }
            }
            WorkerAction::Terminate => {
                self.os.signal_group(pid, libc::SIGTERM);
                self.os.signal_group(pid, libc::SIGCONT);
            }
            WorkerAction::Kill => self.kill(pid),
            WorkerAction::Note(what) => {
                crate::metrics::ladder_rung(what);
                log::info!("task.ladder task={} pid={pid} rung={what}", w.life.task_id());
            }
            WorkerAction::Sweep { adopted } => self.sweep(h, pid, adopted),
            WorkerAction::CheckTaken => {
                let event = if w.chan.take_back() {
                    WorkerEvent::Untouched
                } else {
                    WorkerEvent::Took
                };
                self.event(h, pid, event);
            }
            WorkerAction::Again(event) => self.event(h, pid, *event),
            WorkerAction::GiveBack(task) => {
                log::warn!(
                    "procman.untaken task={task} pid={pid}: the worker never read its task; \
                     starting it on a fresh worker"
                );
                self.start_event(h, StartEvent::GivenBack(task));
            }
            WorkerAction::Finish { ended, exit } => self.finish(h, pid, ended, exit),
        }
    }

    /// A frame of the worker's that counts for its task, to the table.
    fn relay(&self, id: &str, frame: FromWorker) {
        match frame {
            // A status makes the task a task (not a direct reply); an
            // artifact does so itself, and a reply marks the task
            // atomically with the message (a stream waking in between
            // would open as a task).
            FromWorker::Status { state, text } => {
                self.tasks.mark_spoke(id);
                let state = match state {
                    Progress::Working => TaskState::Working,
                    Progress::InputRequired => TaskState::InputRequired,
                    Progress::AuthRequired => TaskState::AuthRequired,
                };
                self.tasks.set_progress(id, state, text);
            }
            FromWorker::Artifact {
                artifact,
                append,
                last_chunk,
            } => self.tasks.add_artifact(id, *artifact, append, last_chunk),
            FromWorker::Reply { message } => self.tasks.set_direct_reply(id, *message),
            FromWorker::Hello { .. } | FromWorker::Pong | FromWorker::Done { .. } => {}
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
    fn sweep(&mut self, h: Helpers, pid: i32, adopted: bool) {
        // Escapees of a SIGKILLed worker come to agentd. Nothing but
        // workers may be ours: the task is not over while any is left. A
        // worker asked for may be a child already, its pid not yet known:
        // then look again at the next sweep.
        let escapees = adopted && (h.unnamed > 0 || self.kill_adopted(h) > 0);
        let mut left = escapees || self.group_or_cgroup_left(pid);
        if left && !escapees {
            // Leftovers of the group re-parent to us (a subreaper): their
            // zombies keep the group alive until they are reaped.
            self.reap(h);
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
        self.event(h, pid, WorkerEvent::Swept { left, counters });
    }

    /// Whether anything of the task is still in its process group or its
    /// cgroup.
    fn group_or_cgroup_left(&mut self, pid: i32) -> bool {
        let Some(w) = self.workers.get(&pid) else { return false };
        w.cgroups.as_ref().is_some_and(|cg| self.os.cgroup_populated(cg)) || self.os.group_alive(pid)
    }

    /// SIGKILLs every child of agentd that is no worker (nor a fork
    /// server); returns how many there were.
    fn kill_adopted(&mut self, h: Helpers) -> usize {
        let mut found = 0;
        for child in self.os.children() {
            if !self.workers.contains_key(&child) && !h.fork_servers.contains(&child) {
                log::info!("procman.adopted pid={child} killed: it outlived its task's worker");
                self.os.kill_pid(child, libc::SIGKILL);
                found += 1;
            }
        }
        found
    }

    /// Queues a frame; what the channel cannot take goes to the lifecycle.
    fn send(&mut self, h: Helpers, pid: i32, frame: &ToWorker) {
        let Some(w) = self.workers.get_mut(&pid) else { return };
        match w.chan.send(frame) {
            Queued::Ok => {}
            Queued::Full => {
                log::warn!(
                    "procman.control task={} pid={pid} outbox full: the worker stopped reading",
                    w.life.task_id()
                );
                self.event(h, pid, WorkerEvent::Unwritable);
            }
            Queued::Refused(e) => {
                log::warn!("procman.control task={} pid={pid} error={e}", w.life.task_id());
                self.event(h, pid, WorkerEvent::Unsendable(e.to_string()));
            }
        }
    }

    /// The worker is gone and so is everything of its task: the task gets
    /// the verdict its lifecycle made and what it cost, and the cgroup slot
    /// is free again.
    fn finish(&mut self, h: Helpers, pid: i32, ended: Option<(TaskRef, Ending)>, exit: ExitStatus) {
        let Some(mut w) = self.workers.remove(&pid) else { return };
        // Read for a worker without a task too: the reading is the slot's
        // baseline for its next task.
        let usage = w.cgroups.as_ref().map(|cg| self.os.cgroup_usage(cg));
        if let Some(cg) = w.cgroups.take() {
            self.os.release_cgroup(cg);
        }
        let Some((task, ending)) = ended else {
            return; // a worker without a task: nobody to tell
        };
        let id = &*task.id;
        self.start_event(h, StartEvent::Released(task.id.clone()));
        let cost = task_cost(self.os.now().saturating_duration_since(task.since), usage, w.rusage);
        self.tasks.worker_notice(&Notice::WorkerExit {
            task_id: id,
            pid,
            exit_code: exit.shell_code(),
            exit: &exit.to_string(),
            cause: ending.cause,
        });
        if log::log_enabled!(log::Level::Info) {
            let trace = self.tasks.trace(id).map(|t| format!(" trace={}", t.trace_id()));
            log::info!(
                "task.end task={id} pid={pid} state={} cause={} ms={} cpu_us={} peak_bytes={}{}",
                ending.state.short_name(),
                ending.cause.as_str(),
                task.since.elapsed().as_millis(),
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

/// A task's verdict (and what it cost, if it ran), counted for /metrics
/// when it ended the task (a task that had ended already keeps its first).
fn end_task(tasks: &TaskTable, id: &str, ending: Ending, cost: Option<Cost>) -> bool {
    let (state, cause) = (ending.state, ending.cause);
    let ended = tasks.finish_with_cost(id, state, cause, ending.text, cost);
    if ended {
        crate::metrics::task_ended(state, cause);
        if let Some(c) = &cost {
            crate::metrics::task_cost(c);
        }
    }
    ended
}

#[cfg(test)]
mod tests;
