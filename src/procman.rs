//! procman: the one thread that forks, reaps, times and kills workers.
//!
//! Why one thread: PR_SET_PDEATHSIG fires when the *thread* that forked a
//! child exits, so a child forked on a connection thread would die when its
//! client hung up. procman lives as long as the daemon. It takes requests
//! and worker frames from one channel, SIGCHLD from signal-hook, and wakes
//! for its own timers; it never blocks on a client.
//!
//! The kill ladder (cancel, deadline, shutdown):
//! ```text
//!   cancel frame ──cancel_grace──▶ killpg(SIGTERM)+killpg(SIGCONT)
//!                ──term_grace────▶ killpg(SIGKILL) (repeated until reaped)
//!   worker reaped ──▶ killpg(SIGKILL) for leftovers ──▶ group empty
//!                 ──▶ task finished (CANCELED only now)
//! ```

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::cgroup::{Isolation, TaskCgroups};
use crate::config::{Config, Runner};
use crate::control::{self, Cause, FromWorker, Outcome, Progress, Rlimits, RunnerSpec, ToWorker};
use crate::limits;
use crate::sys::{self, ExitStatus};
use crate::tasks::{Notice, TaskTable};
use crate::wire::{Message, TaskState};
use crate::worker;

/// How often a dying group is re-checked (and re-killed) while it lingers.
const GROUP_POLL: Duration = Duration::from_millis(20);
/// Control writes to a worker that does not read: give up and kill it.
const CONTROL_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the rest of agentd asks of procman.
enum Msg {
    Start(String),
    Input(String, Message),
    Cancel(String),
    Shutdown(Sender<()>),
    KillAll,
    Frame(i32, FromWorker),
    /// The control channel ended; `true` if it broke (bad frame, I/O error).
    ChannelClosed(i32, bool),
    ChildExited,
    /// Something changed (the running cap): look at the queue again.
    Wake,
}

/// The handle the rest of agentd holds. Cheap to clone.
#[derive(Clone)]
pub struct Procman {
    tx: Sender<Msg>,
}

impl Procman {
    /// A task was created in SUBMITTED: run it when there is room.
    pub fn start(&self, task_id: &str) {
        let _ = self.tx.send(Msg::Start(task_id.to_string()));
    }

    /// A follow-up message for a task waiting on input.
    pub fn input(&self, task_id: &str, message: Message) {
        let _ = self.tx.send(Msg::Input(task_id.to_string(), message));
    }

    /// Runs the kill ladder on a task (or drops it from the queue).
    pub fn cancel(&self, task_id: &str) {
        let _ = self.tx.send(Msg::Cancel(task_id.to_string()));
    }

    /// Ladders every task; `done` gets a message when no worker is left.
    pub fn shutdown(&self, done: Sender<()>) {
        let _ = self.tx.send(Msg::Shutdown(done));
    }

    /// The second SIGTERM: SIGKILL every task group now.
    pub fn kill_all(&self) {
        let _ = self.tx.send(Msg::KillAll);
    }

    /// The running cap changed: start what now fits.
    pub fn wake(&self) {
        let _ = self.tx.send(Msg::Wake);
    }

    /// SIGCHLD arrived (called from the signal thread).
    pub fn child_exited(&self) {
        let _ = self.tx.send(Msg::ChildExited);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rung {
    /// The `cancel` frame went out; SIGTERM follows after cancel_grace.
    Asked,
    /// SIGTERM (+SIGCONT) went to the group; SIGKILL follows after term_grace.
    Terminated,
    /// SIGKILL went out; repeated every GROUP_POLL until the worker is reaped.
    Killed,
}

struct Worker {
    task_id: String,
    pid: i32,
    ctrl: UnixStream,
    started: Instant,
    deadline: Option<Instant>,
    /// Why we are stopping it, and when the result came relative to that.
    stop: Option<Cause>,
    ladder: Option<(Rung, Instant)>,
    /// The worker's own verdict, and whether it came before any stop.
    done: Option<(Outcome, Cause, Option<String>, bool)>,
    exit: Option<(ExitStatus, Instant)>,
    channel_open: bool,
    /// Since when the task has been waiting for input (a warm session).
    waiting_since: Option<Instant>,
    /// The task's cgroups, when agentd has them.
    cgroups: Option<TaskCgroups>,
    /// Why the cgroup stopped the task (fork bomb, out of memory).
    exhausted: Option<String>,
    /// Heartbeat: when the unanswered ping went out, and when the next is due.
    ping_sent: Option<Instant>,
    next_ping: Instant,
}

struct State {
    cfg: Arc<Config>,
    tasks: Arc<TaskTable>,
    tx: Sender<Msg>,
    workers: HashMap<i32, Worker>,
    by_task: HashMap<String, i32>,
    queue: VecDeque<String>,
    shutdown: Option<Sender<()>>,
    isolation: Isolation,
    /// Prespawned workers waiting for a task (tasks.prespawn).
    idle: VecDeque<(i32, UnixStream)>,
}

/// Starts the procman thread.
pub fn spawn(
    cfg: Arc<Config>,
    tasks: Arc<TaskTable>,
    isolation: Isolation,
) -> std::io::Result<(Procman, std::thread::JoinHandle<()>)> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut state = State {
        isolation,
        idle: VecDeque::new(),
        cfg,
        tasks,
        tx: tx.clone(),
        workers: HashMap::new(),
        by_task: HashMap::new(),
        queue: VecDeque::new(),
        shutdown: None,
    };
    let handle = std::thread::Builder::new()
        .name("procman".into())
        .spawn(move || state.run(&rx))?;
    Ok((Procman { tx }, handle))
}

impl State {
    fn run(&mut self, rx: &Receiver<Msg>) {
        self.fill_pool();
        loop {
            let msg = match self.next_timer() {
                Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                    Ok(m) => Some(m),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                },
                None => match rx.recv() {
                    Ok(m) => Some(m),
                    Err(_) => return,
                },
            };
            if let Some(msg) = msg {
                self.handle(msg);
            }
            self.run_timers();
            self.finish_exited();
            self.start_queued();
            self.fill_pool();
            if self.workers.is_empty() {
                if let Some(done) = self.shutdown.as_ref() {
                    self.isolation.remove();
                    let _ = done.send(());
                }
            }
        }
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Start(id) => {
                if self.shutdown.is_some() {
                    self.tasks.finish(&id, TaskState::Canceled, Cause::Shutdown, None);
                } else {
                    self.queue.push_back(id);
                }
            }
            Msg::Input(id, message) => match self.by_task.get(&id).and_then(|pid| self.workers.get(pid)) {
                Some(w) => {
                    let pid = w.pid;
                    self.send(pid, &ToWorker::Input { message });
                }
                None => log::warn!("procman.input task={id} has no live worker; dropping the message"),
            },
            Msg::Cancel(id) => self.cancel(&id, Cause::Cancelled),
            Msg::Shutdown(done) => {
                log::info!(
                    "procman.shutdown workers={} queued={}",
                    self.workers.len(),
                    self.queue.len()
                );
                self.shutdown = Some(done);
                for id in std::mem::take(&mut self.queue) {
                    self.tasks.finish(&id, TaskState::Canceled, Cause::Shutdown, None);
                }
                let ids: Vec<String> = self.by_task.keys().cloned().collect();
                for id in ids {
                    self.cancel(&id, Cause::Shutdown);
                }
                for (pid, _) in self.idle.drain(..) {
                    let _ = sys::kill_group(pid, libc::SIGKILL);
                }
            }
            Msg::KillAll => {
                for w in self.workers.values_mut() {
                    w.stop.get_or_insert(Cause::Shutdown);
                    w.kill();
                    w.ladder = Some((Rung::Killed, Instant::now() + GROUP_POLL));
                }
            }
            Msg::Frame(pid, frame) => self.on_frame(pid, frame),
            Msg::ChannelClosed(pid, broken) => {
                // An idle worker that went away is just dropped from the pool.
                self.idle.retain(|(p, _)| *p != pid);
                if let Some(w) = self.workers.get_mut(&pid) {
                    w.channel_open = false;
                    if broken && w.exit.is_none() {
                        // A worker that speaks nonsense is not trusted to end well.
                        w.stop.get_or_insert(Cause::Crashed);
                        w.kill();
                        w.ladder = Some((Rung::Killed, Instant::now() + GROUP_POLL));
                    }
                }
            }
            Msg::ChildExited => self.reap(),
            Msg::Wake => {}
        }
    }

    fn on_frame(&mut self, pid: i32, frame: FromWorker) {
        let Some(w) = self.workers.get_mut(&pid) else { return };
        let id = w.task_id.clone();
        // A reply marks the task as spoken itself, atomically with the
        // message: a stream waking in between would open as a task.
        if !matches!(
            frame,
            FromWorker::Ready { .. } | FromWorker::Pong | FromWorker::Reply { .. }
        ) {
            self.tasks.mark_spoke(&id);
        }
        match frame {
            FromWorker::Ready { .. } => {}
            FromWorker::Pong => w.ping_sent = None,
            FromWorker::Status { state, text } => {
                let state = match state {
                    Progress::Working => TaskState::Working,
                    Progress::InputRequired => TaskState::InputRequired,
                    Progress::AuthRequired => TaskState::AuthRequired,
                };
                w.waiting_since = state.is_interrupted().then(Instant::now);
                if w.stop.is_none() {
                    self.tasks.set_progress(&id, state, text);
                }
            }
            FromWorker::Artifact {
                artifact,
                append,
                last_chunk,
            } => self.tasks.add_artifact(&id, artifact, append, last_chunk),
            FromWorker::Reply { message } => self.tasks.set_direct_reply(&id, message),
            FromWorker::Done { outcome, cause, text } => {
                let before_stop = w.stop.is_none();
                w.done = Some((outcome, cause, text, before_stop));
            }
        }
    }

    /// Starts queued tasks while there is room under tasks.max_running.
    fn start_queued(&mut self) {
        while self.workers.len() < self.tasks.max_running() && self.shutdown.is_none() {
            let Some(id) = self.queue.pop_front() else {
                return;
            };
            if self.tasks.state(&id) != Some(TaskState::Submitted) {
                continue; // cancelled while queued, or pruned
            }
            let Some((context_id, message)) = self.tasks.start_info(&id) else {
                continue;
            };
            match self.fork_worker(&id, context_id, message) {
                Ok(pid) => {
                    self.tasks.worker_notice(&Notice::WorkerSpawn { task_id: &id, pid });
                    self.tasks.set_progress(&id, TaskState::Working, None);
                    log::info!("task.start task={id} pid={pid}");
                }
                Err(e) => {
                    log::error!("task.spawn_failed task={id} error={e}");
                    self.tasks.finish(
                        &id,
                        TaskState::Failed,
                        Cause::Crashed,
                        Some(format!("agentd could not start a worker: {e}")),
                    );
                }
            }
        }
    }

    /// Starts a worker process: `agentd __worker`, its control socket's
    /// reader thread running. It waits for a `spawn` frame.
    fn spawn_process(&mut self, label: &str) -> std::io::Result<(i32, UnixStream)> {
        let (ours, theirs) = UnixStream::pair()?;
        let mut cmd = Command::new("/proc/self/exe");
        // No pre_exec hook: without one, std spawns with posix_spawn
        // (vfork-like), whose cost does not grow with agentd's memory the
        // way fork(2)'s does. The worker arms PDEATHSIG itself and then
        // checks getppid(), which closes the window (see worker::main).
        // The control socket rides in as the worker's stdin.
        cmd.arg("__worker")
            .arg(label)
            .env_clear()
            .env(worker::SUPERVISOR_PID_ENV, sys::getpid().to_string())
            .env(worker::LOG_LEVEL_ENV, &self.cfg.log_level)
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .process_group(0);
        for name in worker::INHERITED_ENV {
            if let Some(v) = std::env::var_os(name) {
                cmd.env(name, v);
            }
        }
        let child = cmd.spawn()?;
        let pid = child.id() as i32;
        // The child is reaped by reap() via waitpid(-1), never by Child::wait.
        drop(child);
        ours.set_write_timeout(Some(CONTROL_WRITE_TIMEOUT))?;
        let reader = ours.try_clone()?;
        let tx = self.tx.clone();
        std::thread::Builder::new()
            .name(format!("ctrl-{pid}"))
            .spawn(move || read_frames(pid, reader, &tx))?;
        Ok((pid, ours))
    }

    /// Keeps tasks.prespawn idle workers waiting, so a task's start does
    /// not wait for a process to be spawned and exec'd.
    fn fill_pool(&mut self) {
        while self.idle.len() < self.cfg.tasks.prespawn && self.shutdown.is_none() {
            match self.spawn_process("idle") {
                Ok(w) => self.idle.push_back(w),
                Err(e) => {
                    log::warn!("procman.prespawn error={e}");
                    return;
                }
            }
        }
    }

    fn fork_worker(&mut self, task_id: &str, context_id: String, message: Message) -> std::io::Result<i32> {
        let (pid, ours) = match self.idle.pop_front() {
            Some(w) => w,
            None => self.spawn_process(task_id)?,
        };
        // Into its cgroups before it hears `spawn`: everything the task
        // forks is inside from the start.
        let cgroups = if self.isolation.is_cgroup() {
            match self.isolation.enter(pid) {
                Ok(c) => Some(c),
                Err(e) => {
                    log::warn!("task.cgroup task={task_id} pid={pid} error={e}; process group only");
                    None
                }
            }
        } else {
            None
        };
        let spawn = ToWorker::Spawn {
            task_id: task_id.to_string(),
            context_id,
            message,
            runner: self.runner_spec(),
        };
        let now = Instant::now();
        let deadline =
            (self.cfg.tasks.deadline_ms > 0).then(|| now + Duration::from_millis(self.cfg.tasks.deadline_ms));
        self.workers.insert(
            pid,
            Worker {
                task_id: task_id.to_string(),
                pid,
                ctrl: ours,
                started: now,
                deadline,
                stop: None,
                ladder: None,
                done: None,
                exit: None,
                channel_open: true,
                waiting_since: None,
                cgroups,
                exhausted: None,
                ping_sent: None,
                next_ping: now + Duration::from_millis(self.cfg.tasks.ping_interval_ms),
            },
        );
        self.by_task.insert(task_id.to_string(), pid);
        if !self.send(pid, &spawn) {
            return Ok(pid); // the ladder already started; the task ends through it
        }
        Ok(pid)
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

    /// Writes a frame to a worker; a worker that cannot take it is killed.
    fn send(&mut self, pid: i32, frame: &ToWorker) -> bool {
        let Some(w) = self.workers.get_mut(&pid) else {
            return false;
        };
        if let Err(e) = control::write_frame(&mut w.ctrl, frame) {
            use std::io::ErrorKind::{BrokenPipe, ConnectionReset};
            if matches!(e.kind(), BrokenPipe | ConnectionReset) {
                // The worker closed its end: it is exiting, and whatever it
                // said last (its `done`, most likely) is still queued for
                // us. The exit decides the task, not this write.
                log::debug!("procman.control task={} pid={pid} closed before {frame:?}", w.task_id);
                return false;
            }
            log::warn!(
                "procman.control task={} pid={pid} error={e}; killing the worker",
                w.task_id
            );
            w.stop.get_or_insert(Cause::Stalled);
            w.kill();
            w.ladder = Some((Rung::Killed, Instant::now() + GROUP_POLL));
            return false;
        }
        true
    }

    fn cancel(&mut self, task_id: &str, cause: Cause) {
        if let Some(pos) = self.queue.iter().position(|id| id == task_id) {
            self.queue.remove(pos);
            self.tasks.finish(task_id, TaskState::Canceled, cause, None);
            return;
        }
        let Some(&pid) = self.by_task.get(task_id) else {
            // Not started yet and not queued here: the Start message is
            // still in flight, or it already ended. Either way, mark it.
            if self.tasks.state(task_id) == Some(TaskState::Submitted) {
                self.tasks.finish(task_id, TaskState::Canceled, cause, None);
            }
            return;
        };
        let grace = Duration::from_millis(self.cfg.tasks.cancel_grace_ms);
        let Some(w) = self.workers.get_mut(&pid) else {
            return;
        };
        if w.stop.is_some() {
            return; // a ladder is already running
        }
        w.stop = Some(cause);
        log::info!("task.stop task={task_id} pid={pid} cause={}", cause.as_str());
        w.ladder = Some((Rung::Asked, Instant::now() + grace));
        self.send(pid, &ToWorker::Cancel);
    }

    fn next_timer(&self) -> Option<Instant> {
        let t = &self.cfg.tasks;
        let input_idle = Duration::from_millis(t.input_idle_ms);
        let stall = Duration::from_millis(t.stall_timeout_ms);
        self.workers
            .values()
            .flat_map(|w| {
                let running = w.stop.is_none() && w.exit.is_none();
                let drain = w
                    .exit
                    .map(|(_, at)| at + Duration::from_millis(limits::WORKER_CHANNEL_DRAIN_MS));
                let linger = w.exit.map(|(_, at)| at + GROUP_POLL);
                [
                    w.deadline.filter(|_| running),
                    w.waiting_since.map(|at| at + input_idle).filter(|_| running),
                    Some(w.ping_sent.map_or(w.next_ping, |at| at + stall)).filter(|_| running),
                    w.ladder.map(|(_, at)| at),
                    drain,
                    linger,
                ]
            })
            .flatten()
            // Finished tasks expire on time even when nothing else happens.
            .chain(self.tasks.expire().map(|due| Instant::now() + due))
            .min()
    }

    fn run_timers(&mut self) {
        let now = Instant::now();
        let t = &self.cfg.tasks;
        let term_grace = Duration::from_millis(t.term_grace_ms);
        let input_idle = Duration::from_millis(t.input_idle_ms);
        let stall = Duration::from_millis(t.stall_timeout_ms);
        let ping_every = Duration::from_millis(t.ping_interval_ms);
        let mut stops = Vec::new();
        let mut pings = Vec::new();
        for w in self.workers.values_mut() {
            if w.stop.is_none() && w.exit.is_none() {
                if w.deadline.is_some_and(|d| d <= now) {
                    stops.push((w.task_id.clone(), Cause::Deadline));
                } else if w.waiting_since.is_some_and(|at| at + input_idle <= now) {
                    stops.push((w.task_id.clone(), Cause::Idle));
                } else if w.ping_sent.is_some_and(|at| at + stall <= now) {
                    stops.push((w.task_id.clone(), Cause::Stalled));
                } else if let Some(n) = w.cgroups.as_ref().map(TaskCgroups::pids_exhausted).filter(|n| *n > 0) {
                    w.exhausted = Some(format!(
                        "the task hit tasks.pids_max ({} processes) {n} time(s): a fork bomb?",
                        self.cfg.tasks.pids_max
                    ));
                    stops.push((w.task_id.clone(), Cause::Exhausted));
                } else if w.ping_sent.is_none() && w.next_ping <= now && w.done.is_none() && w.channel_open {
                    w.ping_sent = Some(now);
                    w.next_ping = now + ping_every;
                    pings.push(w.pid);
                }
            }
            match w.ladder {
                Some((Rung::Asked, at)) if at <= now => {
                    log::info!("task.ladder task={} pid={} rung=SIGTERM", w.task_id, w.pid);
                    let _ = sys::kill_group(w.pid, libc::SIGTERM);
                    let _ = sys::kill_group(w.pid, libc::SIGCONT);
                    w.ladder = Some((Rung::Terminated, now + term_grace));
                }
                Some((Rung::Terminated | Rung::Killed, at)) if at <= now => {
                    if w.ladder.map(|l| l.0) == Some(Rung::Terminated) {
                        log::info!("task.ladder task={} pid={} rung=SIGKILL", w.task_id, w.pid);
                    }
                    w.kill();
                    w.ladder = Some((Rung::Killed, now + GROUP_POLL));
                }
                _ => {}
            }
        }
        for pid in pings {
            self.send(pid, &ToWorker::Ping);
        }
        for (id, cause) in stops {
            log::info!("task.{} task={id}", cause.as_str());
            self.cancel(&id, cause);
        }
    }

    /// waitpid(-1, WNOHANG) until nothing is left: known pids go to their
    /// task, anything else (an adopted orphan) is just reaped and logged.
    fn reap(&mut self) {
        loop {
            match sys::reap_any() {
                Ok(Some((pid, status))) => match self.workers.get_mut(&pid) {
                    Some(w) => {
                        log::debug!("task.exit task={} pid={pid} {status}", w.task_id);
                        w.exit = Some((status, Instant::now()));
                    }
                    None => {
                        self.idle.retain(|(p, _)| *p != pid);
                        log::debug!("procman.reaped pid={pid} {status} (not a busy worker)");
                    }
                },
                Ok(None) => return,
                Err(e) => {
                    log::error!("procman.waitpid error={e}");
                    return;
                }
            }
        }
    }

    /// Finishes the tasks whose worker has exited, once its channel is
    /// drained (or given up on) and its process group is empty.
    fn finish_exited(&mut self) {
        let now = Instant::now();
        let drain = Duration::from_millis(limits::WORKER_CHANNEL_DRAIN_MS);
        let ready: Vec<i32> = self
            .workers
            .values()
            .filter(|w| matches!(w.exit, Some((_, at)) if !w.channel_open || at + drain <= now))
            .map(|w| w.pid)
            .collect();
        for pid in ready {
            // Nothing of a task outlives it: whatever the program left in
            // its group goes now. We are a subreaper, so they come back to
            // reap() and the group empties for real.
            let Some(w) = self.workers.get(&pid) else { continue };
            w.kill();
            let alive = |w: &Worker| sys::group_alive(pid) || w.cgroups.as_ref().is_some_and(TaskCgroups::populated);
            if alive(w) {
                self.reap();
                if self.workers.get(&pid).is_some_and(alive) {
                    continue; // check again at the next GROUP_POLL
                }
            }
            let Some(mut w) = self.workers.remove(&pid) else {
                continue;
            };
            self.by_task.remove(&w.task_id);
            if let Some(cg) = w.cgroups.take() {
                if cg.out_of_memory() {
                    w.exhausted = Some("out of memory: the task went over tasks.memory_max_bytes".into());
                }
                self.isolation.release(cg);
            }
            let (state, cause, text) = verdict(&w);
            let exit = w.exit.map(|(s, _)| s).unwrap_or(ExitStatus::Code(1));
            self.tasks.worker_notice(&Notice::WorkerExit {
                task_id: &w.task_id,
                pid,
                exit_code: exit.shell_code(),
                exit: &exit.to_string(),
                cause: cause.as_str(),
            });
            log::info!(
                "task.end task={} pid={pid} state={} cause={} ms={}",
                w.task_id,
                state.short_name(),
                cause.as_str(),
                w.started.elapsed().as_millis()
            );
            self.tasks.finish(&w.task_id, state, cause, text);
        }
    }
}

impl Worker {
    /// SIGKILL to the whole task: its process group and its cgroups (which
    /// also hold anything that left the group with setsid).
    fn kill(&self) {
        let _ = sys::kill_group(self.pid, libc::SIGKILL);
        if let Some(cg) = &self.cgroups {
            cg.kill();
        }
    }
}

/// What a finished worker means for its task.
fn verdict(w: &Worker) -> (TaskState, Cause, Option<String>) {
    let exit = w.exit.map(|(s, _)| s).unwrap_or(ExitStatus::Code(1));
    if let Some(why) = &w.exhausted {
        return (TaskState::Failed, Cause::Exhausted, Some(why.clone()));
    }
    match (&w.done, w.stop) {
        // The worker finished on its own before we asked it to stop.
        (Some((outcome, cause, text, true)), _) => (outcome_state(*outcome), *cause, text.clone()),
        (_, Some(Cause::Cancelled)) => (TaskState::Canceled, Cause::Cancelled, None),
        (_, Some(Cause::Shutdown)) => (TaskState::Canceled, Cause::Shutdown, None),
        (_, Some(cause)) => (TaskState::Failed, cause, None),
        (Some((outcome, cause, text, _)), None) => (outcome_state(*outcome), *cause, text.clone()),
        (None, None) => (
            TaskState::Failed,
            Cause::Crashed,
            Some(format!("the worker ended without a result: it {exit}")),
        ),
    }
}

fn outcome_state(o: Outcome) -> TaskState {
    match o {
        Outcome::Completed => TaskState::Completed,
        Outcome::Failed => TaskState::Failed,
        Outcome::Rejected => TaskState::Rejected,
        Outcome::Canceled => TaskState::Canceled,
    }
}

/// One thread per worker: frames in, forwarded to procman in order; then
/// the close, so procman knows nothing more is coming.
fn read_frames(pid: i32, mut reader: impl Read, tx: &Sender<Msg>) {
    let mut broken = false;
    loop {
        match control::read_frame::<FromWorker>(&mut reader) {
            Ok(Some(frame)) => {
                if tx.send(Msg::Frame(pid, frame)).is_err() {
                    return;
                }
            }
            Ok(None) => break,
            Err(e) => {
                log::warn!("procman.control pid={pid} error={e}; killing the worker");
                broken = true;
                break;
            }
        }
    }
    let _ = tx.send(Msg::ChannelClosed(pid, broken));
}
