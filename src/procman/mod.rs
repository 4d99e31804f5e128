//! procman: the one thread that spawns, reaps, times and kills workers.
//!
//! Why one thread: PR_SET_PDEATHSIG fires when the *thread* that forked a
//! child exits, so a child forked on a connection thread would die when its
//! client hung up. procman lives as long as the daemon.
//!
//! It is one `poll(2)` loop, as tini and s6-supervise wait on their
//! children: every worker's control pipes, an eventfd for requests from
//! the rest of agentd, and a signalfd for SIGCHLD (with a self-pipe behind
//! it for any thread that does not block it); its timers are the poll
//! timeout. There is no thread per worker, and nothing here blocks: reads
//! are bounded per turn ([`channel`]), writes go to a bounded outbox. Each
//! worker's lifecycle is a [`lifecycle::Life`]; this file only feeds it
//! events and carries out its actions.

mod channel;
mod forks;
pub mod lifecycle;
mod pool;

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use self::channel::{Channel, Queued};
use self::forks::ForkServer;
use self::lifecycle::{Action, Ending, Event, Life, Stop, Timing};
use crate::cgroup::{Isolation, TaskCgroups};
use crate::config::Config;
use crate::control::{Cause, FromWorker, Progress, ToWorker};
use crate::limits;
use crate::sys;
use crate::tasks::{Notice, TaskTable};
use crate::wire::{Message, TaskState};

/// How often a running task's cgroup counters are read (fork bombs).
const CGROUP_CHECK: Duration = Duration::from_millis(250);
/// How far back task starts count as demand for idle workers.
const DEMAND_WINDOW: Duration = Duration::from_millis(250);
/// Most idle workers spawned per turn of the loop, so refilling the pool
/// never holds up frames that are waiting.
const SPAWNS_PER_TURN: usize = 2;
/// Workers that could not be had in a row before the task first in line
/// fails with the reason.
const FORK_ATTEMPTS: u32 = 3;
/// How long to wait before asking again after a failed or refused ask.
const FORK_RETRY: Duration = Duration::from_millis(20);

/// What the rest of agentd asks of procman.
enum Msg {
    Start(String),
    Input(String, Message),
    Cancel(String),
    Shutdown(Sender<()>),
    KillAll,
    /// Something changed (the running cap): look at the queue again.
    Wake,
    /// Answer on this channel: proof the loop is turning (the watchdog).
    Ping(Sender<()>),
}

/// The handle the rest of agentd holds. Cheap to clone.
#[derive(Clone)]
pub struct Procman {
    tx: Sender<Msg>,
    waker: Arc<Waker>,
}

/// Wakes procman's poll for requests. Only the first request since
/// procman last took them writes the eventfd: under load, one wake-up
/// serves many requests.
struct Waker {
    fd: OwnedFd,
    /// Set by the request that wrote the eventfd; procman clears it before
    /// it takes the requests, so a request either finds it set (and is
    /// taken in that pass) or sets it and wakes procman again.
    pending: AtomicBool,
}

impl Waker {
    fn wake(&self) {
        if !self.pending.swap(true, Ordering::AcqRel) {
            sys::eventfd_signal(self.fd.as_raw_fd());
        }
    }
}

impl Procman {
    fn send(&self, msg: Msg) {
        if self.tx.send(msg).is_ok() {
            self.waker.wake();
        }
    }

    /// A task was created in SUBMITTED: run it when there is room.
    pub fn start(&self, task_id: &str) {
        self.send(Msg::Start(task_id.to_string()));
    }

    /// A follow-up message for a task waiting on input.
    pub fn input(&self, task_id: &str, message: Message) {
        self.send(Msg::Input(task_id.to_string(), message));
    }

    /// Runs the kill ladder on a task (or drops it from the queue).
    pub fn cancel(&self, task_id: &str) {
        self.send(Msg::Cancel(task_id.to_string()));
    }

    /// Ladders every task; `done` gets a message when no worker is left.
    pub fn shutdown(&self, done: Sender<()>) {
        self.send(Msg::Shutdown(done));
    }

    /// The second SIGTERM: SIGKILL every task group now.
    pub fn kill_all(&self) {
        self.send(Msg::KillAll);
    }

    /// The running cap changed: start what now fits.
    pub fn wake(&self) {
        self.send(Msg::Wake);
    }

    /// A round trip through the loop: the receiver gets `()` once procman
    /// has handled the request, so a wedged procman never answers. The
    /// systemd watchdog beats only on an answer.
    pub fn ping(&self) -> Receiver<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.send(Msg::Ping(tx));
        rx
    }
}

struct Worker {
    pid: i32,
    /// None while it waits in the pool.
    task: Option<String>,
    chan: Channel,
    life: Life,
    cgroups: Option<TaskCgroups>,
    assigned: Instant,
}

struct State {
    cfg: Arc<Config>,
    tasks: Arc<TaskTable>,
    isolation: Isolation,
    timing: Timing,
    rx: Receiver<Msg>,
    waker: Arc<Waker>,
    /// SIGCHLD, blocked in every thread agentd starts (None: the kernel
    /// refused a signalfd, and the self-pipe below is all there is).
    sigchld: Option<OwnedFd>,
    /// SIGCHLD as a byte from signal-hook's handler, should it ever run in
    /// a thread that does not block it.
    sigchld_pipe: UnixStream,
    workers: HashMap<i32, Worker>,
    by_task: HashMap<String, i32>,
    queue: VecDeque<String>,
    shutdown: Option<Sender<()>>,
    /// When recent tasks started: the demand the pool is sized to.
    starts: VecDeque<Instant>,
    next_cgroup_check: Instant,
    /// The one buffer every control pipe is read through.
    scratch: Vec<u8>,
    /// The poll set, and the worker each entry past the first four is for
    /// (true: its pipe to the worker, polled for room).
    poll_set: (Vec<libc::pollfd>, Vec<(i32, bool)>),
    forks: ForkServer,
    /// Exits reaped before the fork server's answer named the pid.
    early_exits: HashMap<i32, sys::ExitStatus>,
    /// Workers asked for in a row that did not come (see FORK_ATTEMPTS).
    fork_failures: u32,
    /// No ask before then (the last one failed or found the socket full).
    retry_forks_at: Option<Instant>,
}

/// Starts the procman thread.
pub fn spawn(
    cfg: Arc<Config>,
    tasks: Arc<TaskTable>,
    isolation: Isolation,
) -> std::io::Result<(Procman, std::thread::JoinHandle<()>)> {
    let (tx, rx) = crossbeam_channel::unbounded();
    let waker = Arc::new(Waker {
        fd: sys::eventfd()?,
        pending: AtomicBool::new(false),
    });
    let (sigchld_pipe, sigchld_writer) = UnixStream::pair()?;
    sigchld_pipe.set_nonblocking(true)?;
    sigchld_writer.set_nonblocking(true)?;
    signal_hook::low_level::pipe::register(libc::SIGCHLD, sigchld_writer)?;
    // The daemon calls this before it starts any other thread: from here
    // on SIGCHLD waits for procman's signalfd in every thread.
    let sigchld = match sys::sigchld_fd() {
        Ok(fd) => {
            sys::block_sigchld();
            Some(fd)
        }
        Err(e) => {
            log::warn!("procman.signalfd error={e}; SIGCHLD through its handler instead");
            None
        }
    };
    let t = &cfg.tasks;
    let timing = Timing {
        cancel_grace: Duration::from_millis(t.cancel_grace_ms),
        term_grace: Duration::from_millis(t.term_grace_ms),
        ping_every: Duration::from_millis(t.ping_interval_ms),
        stall_after: Duration::from_millis(t.stall_timeout_ms),
        input_idle: Duration::from_millis(t.input_idle_ms),
        exit_grace: Duration::from_millis(limits::WORKER_EXIT_GRACE_MS),
        drain: Duration::from_millis(limits::WORKER_CHANNEL_DRAIN_MS),
        group_poll: Duration::from_millis(limits::GROUP_POLL_MS),
    };
    let mut state = State {
        cfg,
        tasks,
        isolation,
        timing,
        rx,
        waker: waker.clone(),
        sigchld,
        sigchld_pipe,
        workers: HashMap::new(),
        by_task: HashMap::new(),
        queue: VecDeque::new(),
        shutdown: None,
        starts: VecDeque::new(),
        next_cgroup_check: Instant::now(),
        scratch: vec![0; 64 * 1024],
        poll_set: (Vec::new(), Vec::new()),
        forks: ForkServer::new(),
        early_exits: HashMap::new(),
        fork_failures: 0,
        retry_forks_at: None,
    };
    let handle = std::thread::Builder::new()
        .name("procman".into())
        .spawn(move || state.run())?;
    Ok((Procman { tx, waker }, handle))
}

impl State {
    fn run(&mut self) {
        self.fill_pool();
        loop {
            let timeout_ms = match self.next_due() {
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    // Round up: waking a hair early only spins.
                    left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
                }
                None => -1,
            };
            // The poll set is rebuilt every turn, in buffers kept from the last.
            let (mut fds, mut pids) = std::mem::take(&mut self.poll_set);
            fds.clear();
            pids.clear();
            // -1 = none: poll(2) skips negative fds.
            let forks = self.forks.fd().unwrap_or(-1);
            fds.extend([
                pollin(self.waker.fd.as_raw_fd()),
                pollin(self.sigchld.as_ref().map_or(-1, |fd| fd.as_raw_fd())),
                pollin(self.sigchld_pipe.as_raw_fd()),
                pollin(forks),
            ]);
            // Each worker's pipe from it, and its pipe to it while frames
            // wait for room.
            for w in self.workers.values().filter(|w| w.chan.is_open()) {
                fds.push(pollin(w.chan.read_fd()));
                pids.push((w.pid, false));
                if w.chan.wants_write() {
                    fds.push(libc::pollfd {
                        fd: w.chan.write_fd(),
                        events: libc::POLLOUT,
                        revents: 0,
                    });
                    pids.push((w.pid, true));
                }
            }
            if let Err(e) = sys::poll(&mut fds, timeout_ms) {
                log::error!("procman.poll error={e}");
                std::thread::sleep(Duration::from_millis(10));
            }
            if fds[0].revents != 0 {
                sys::eventfd_drain(self.waker.fd.as_raw_fd());
            }
            // Before taking them, and an acquire: a request that found the
            // flag set is visible to take_requests; any later one wakes us.
            self.waker.pending.swap(false, Ordering::AcqRel);
            if !self.take_requests() {
                return; // every handle is gone: the daemon is exiting
            }
            let mut reap = false;
            if fds[1].revents != 0 {
                sys::signalfd_drain(fds[1].fd);
                reap = true;
            }
            if fds[2].revents != 0 {
                drain(&mut self.sigchld_pipe);
                reap = true;
            }
            if reap {
                self.reap();
            }
            if fds[3].revents != 0 || self.forks.owes() {
                self.take_fork_answers();
            }
            for (p, &(pid, is_write)) in fds[4..].iter().zip(&pids) {
                if p.revents == 0 {
                    continue;
                }
                if is_write {
                    // Room, or the worker closed its end (flush sees EPIPE).
                    if let Some(w) = self.workers.get_mut(&pid) {
                        w.chan.flush();
                    }
                } else {
                    self.read_from(pid);
                }
            }
            self.poll_set = (fds, pids);
            self.tick();
            self.start_queued();
            self.fill_pool();
            if self.workers.is_empty() {
                if let Some(done) = self.shutdown.as_ref() {
                    self.forks.stop();
                    self.isolation.remove();
                    let _ = done.send(());
                }
            }
        }
    }

    fn next_due(&self) -> Option<Instant> {
        let cgroup_check = self
            .workers
            .values()
            .any(|w| w.cgroups.is_some() && w.life.is_running())
            .then_some(self.next_cgroup_check);
        // A pool grown by a burst is looked at again until it has shrunk.
        let idle = self.workers.values().filter(|w| w.task.is_none()).count();
        let pool_review = (self.cfg.tasks.prespawn.is_none() && idle > 1).then(|| Instant::now() + DEMAND_WINDOW);
        // Finished tasks past tasks.retain_ms go even on an idle daemon:
        // expire() drops what is due and says when the next one is.
        let retention = self.tasks.expire().map(|due| Instant::now() + due);
        self.workers
            .values()
            .filter_map(|w| w.life.next_due())
            .chain(cgroup_check)
            .chain(pool_review)
            .chain(retention)
            .chain(self.retry_forks_at.filter(|_| !self.queue.is_empty()))
            .min()
    }

    /// Handles every queued request; false once the handles are all gone.
    fn take_requests(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(msg) => self.handle(msg),
                Err(crossbeam_channel::TryRecvError::Empty) => return true,
                Err(crossbeam_channel::TryRecvError::Disconnected) => return self.shutdown.is_some(),
            }
        }
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Start(id) => {
                if self.shutdown.is_some() {
                    self.end(&id, TaskState::Canceled, Cause::Shutdown, None);
                } else {
                    self.queue.push_back(id);
                }
            }
            Msg::Input(id, message) => match self.by_task.get(&id).copied() {
                Some(pid) => {
                    self.send(pid, &ToWorker::Input { message });
                    self.event(pid, Event::Resumed);
                }
                None => log::warn!("procman.input task={id} has no live worker; dropping the message"),
            },
            Msg::Cancel(id) => self.stop_task(&id, Cause::Cancelled),
            Msg::Shutdown(done) => {
                log::info!(
                    "procman.shutdown workers={} queued={}",
                    self.workers.len(),
                    self.queue.len()
                );
                self.shutdown = Some(done);
                for id in std::mem::take(&mut self.queue) {
                    self.end(&id, TaskState::Canceled, Cause::Shutdown, None);
                }
                let pids: Vec<i32> = self.workers.keys().copied().collect();
                for pid in pids {
                    let stop = Stop {
                        cause: Cause::Shutdown,
                        why: None,
                    };
                    self.event(pid, Event::Stop(stop));
                }
            }
            Msg::KillAll => {
                let pids: Vec<i32> = self.workers.keys().copied().collect();
                for pid in pids {
                    let stop = Stop {
                        cause: Cause::Shutdown,
                        why: None,
                    };
                    self.event(pid, Event::KillNow(stop));
                }
            }
            Msg::Wake => {}
            Msg::Ping(answer) => {
                let _ = answer.try_send(());
            }
        }
    }

    /// Feeds one event to a worker's lifecycle and carries out its actions.
    fn event(&mut self, pid: i32, event: Event) {
        let Some(w) = self.workers.get_mut(&pid) else { return };
        let actions = w.life.step(event, Instant::now());
        for action in actions {
            self.act(pid, action);
        }
    }

    fn act(&mut self, pid: i32, action: Action) {
        let Some(w) = self.workers.get_mut(&pid) else { return };
        match action {
            Action::SendPing => self.send(pid, &ToWorker::Ping),
            Action::SendCancel => {
                crate::metrics::ladder_rung("cancel");
                self.send(pid, &ToWorker::Cancel)
            }
            Action::Terminate => {
                let _ = sys::kill_group(pid, libc::SIGTERM);
                let _ = sys::kill_group(pid, libc::SIGCONT);
            }
            Action::Kill => kill(w),
            Action::Note(what) => {
                crate::metrics::ladder_rung(what);
                log::info!(
                    "task.ladder task={} pid={pid} rung={what}",
                    w.task.as_deref().unwrap_or("-")
                )
            }
            Action::Sweep => {
                // Leftovers of the group re-parent to us (a subreaper):
                // reap them first, or their zombies keep the group alive.
                self.reap();
                let Some(w) = self.workers.get(&pid) else { return };
                // Without a cgroup the worker was the subreaper of what its
                // program started; SIGKILLed, it could not kill them, and
                // they come to us (some only as the group's last members
                // exit). Nothing but workers may be ours: the task is not
                // over while any is left.
                let adopted = w.cgroups.is_none()
                    && w.life.exit_status() == Some(sys::ExitStatus::Signal(libc::SIGKILL))
                    && (self.forks.pending() > 0 || self.kill_adopted() > 0);
                let Some(w) = self.workers.get(&pid) else { return };
                let alive = adopted || sys::group_alive(pid) || w.cgroups.as_ref().is_some_and(TaskCgroups::populated);
                if alive {
                    kill(w); // and look again at the next group_poll
                } else {
                    self.event(pid, Event::GroupEmpty);
                }
            }
            Action::Finish(ending) => self.finish(pid, ending),
        }
    }

    /// SIGKILLs every child of agentd that is not a worker (nor the fork
    /// server): escapees of a task whose worker was killed before it could
    /// kill them. Returns how many there were. Not while a worker is asked
    /// for: it may be a child already, its pid not yet known (the sweep
    /// looks again).
    fn kill_adopted(&self) -> usize {
        let mut found = 0;
        let Ok(threads) = std::fs::read_dir("/proc/self/task") else {
            return 0;
        };
        for thread in threads.flatten() {
            let Ok(list) = std::fs::read_to_string(thread.path().join("children")) else {
                continue;
            };
            for child in list.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                if !self.workers.contains_key(&child) && !self.forks.is_server(child) {
                    log::info!("procman.adopted pid={child} killed: it outlived its task's worker");
                    let _ = sys::kill_pid(child, libc::SIGKILL);
                    found += 1;
                }
            }
        }
        found
    }

    /// Queues a frame; a worker that does not read is stopped for it.
    fn send(&mut self, pid: i32, frame: &ToWorker) {
        let Some(w) = self.workers.get_mut(&pid) else { return };
        match w.chan.send(frame) {
            Queued::Ok => {}
            Queued::Full => {
                log::warn!(
                    "procman.control task={} pid={pid} outbox full: the worker stopped reading",
                    w.task.as_deref().unwrap_or("-")
                );
                self.event(pid, Event::Unwritable);
            }
            Queued::Refused(e) => {
                log::warn!(
                    "procman.control task={} pid={pid} error={e}",
                    w.task.as_deref().unwrap_or("-")
                );
                let stop = Stop {
                    cause: Cause::Failed,
                    why: Some(format!("failed: {e}")),
                };
                self.event(pid, Event::Stop(stop));
            }
        }
    }

    fn read_from(&mut self, pid: i32) {
        let Some(w) = self.workers.get_mut(&pid) else { return };
        let turn = w.chan.read_turn(&mut self.scratch);
        for frame in turn.frames {
            self.on_frame(pid, frame);
        }
        if let Some(why) = &turn.broken {
            log::warn!("procman.control pid={pid} error={why}; killing the worker");
        }
        if turn.closed || turn.broken.is_some() {
            self.event(
                pid,
                Event::ChannelClosed {
                    broken: turn.broken.is_some(),
                },
            );
        }
    }

    fn on_frame(&mut self, pid: i32, frame: FromWorker) {
        self.event(pid, Event::Heard);
        let Some(w) = self.workers.get(&pid) else { return };
        let Some(id) = w.task.clone() else { return };
        let running = w.life.is_running();
        // A reply marks the task as spoken itself, atomically with the
        // message: a stream waking in between would open as a task.
        if !matches!(frame, FromWorker::Pong | FromWorker::Reply { .. }) {
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

    /// Stops a task wherever it is: queued, about to start, or running.
    fn stop_task(&mut self, task_id: &str, cause: Cause) {
        if let Some(pos) = self.queue.iter().position(|id| id == task_id) {
            self.queue.remove(pos);
            self.end(task_id, TaskState::Canceled, cause, None);
            return;
        }
        match self.by_task.get(task_id).copied() {
            Some(pid) => {
                log::info!("task.stop task={task_id} pid={pid} cause={}", cause.as_str());
                self.event(pid, Event::Stop(Stop { cause, why: None }));
            }
            // The Start message is still in flight, or the task ended.
            None if self.tasks.state(task_id) == Some(TaskState::Submitted) => {
                self.end(task_id, TaskState::Canceled, cause, None)
            }
            None => {}
        }
    }

    /// Every timer that is due, and the cgroup counters now and then.
    fn tick(&mut self) {
        let now = Instant::now();
        let due: Vec<i32> = self
            .workers
            .values()
            .filter(|w| w.life.next_due().is_some_and(|d| d <= now))
            .map(|w| w.pid)
            .collect();
        for pid in due {
            self.event(pid, Event::Tick);
        }
        if now >= self.next_cgroup_check {
            self.next_cgroup_check = now + CGROUP_CHECK;
            let exhausted: Vec<(i32, u64)> = self
                .workers
                .values()
                .filter(|w| w.life.is_running())
                .filter_map(|w| Some((w.pid, w.cgroups.as_ref()?.pids_exhausted())))
                .filter(|(_, n)| *n > 0)
                .collect();
            for (pid, n) in exhausted {
                let why = fork_bomb_text(self.isolation.pids_max(), n);
                log::info!("task.exhausted pid={pid} {why}");
                self.event(
                    pid,
                    Event::Stop(Stop {
                        cause: Cause::Exhausted,
                        why: Some(why),
                    }),
                );
            }
        }
        let finished: Vec<i32> = self
            .workers
            .values()
            .filter(|w| w.life.is_finished())
            .map(|w| w.pid)
            .collect();
        for pid in finished {
            self.workers.remove(&pid);
        }
    }

    /// waitpid(-1, WNOHANG) until nothing is left: known pids go to their
    /// lifecycle, anything else (an adopted orphan) is reaped and logged.
    fn reap(&mut self) {
        loop {
            match sys::reap_any() {
                Ok(Some((pid, status))) => {
                    if self.workers.contains_key(&pid) {
                        log::debug!("task.exit pid={pid} {status}");
                        self.event(pid, Event::Exited(status));
                    } else if self.forks.is_server(pid) {
                        log::debug!("procman.forkserver pid={pid} {status}");
                        self.forks.exited(pid);
                    } else if self.forks.pending() > 0 {
                        // A worker whose pid the fork server has yet to tell.
                        self.early_exits.insert(pid, status);
                    } else {
                        log::debug!("procman.reaped pid={pid} {status} (not a worker)");
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    log::error!("procman.waitpid error={e}");
                    return;
                }
            }
        }
    }

    /// The task gets its verdict: nothing of it is left.
    fn finish(&mut self, pid: i32, ending: Option<Ending>) {
        let Some(w) = self.workers.get_mut(&pid) else { return };
        let Some(id) = w.task.take() else {
            if let Some(cg) = w.cgroups.take() {
                self.isolation.release_empty(cg);
            }
            return; // an idle worker: no task to tell
        };
        self.by_task.remove(&id);
        let mut ending = ending.unwrap_or(Ending {
            state: TaskState::Failed,
            cause: Cause::Crashed,
            text: None,
        });
        if let Some(cg) = w.cgroups.take() {
            let forks_refused = cg.pids_exhausted();
            if forks_refused > 0 && ending.state != TaskState::Canceled {
                ending = Ending {
                    state: TaskState::Failed,
                    cause: Cause::Exhausted,
                    text: Some(fork_bomb_text(self.isolation.pids_max(), forks_refused)),
                };
            }
            if cg.out_of_memory() {
                ending = Ending {
                    state: TaskState::Failed,
                    cause: Cause::Exhausted,
                    text: Some("out of memory: the task went over tasks.memory_max_bytes".into()),
                };
            }
            self.isolation.release_empty(cg);
        }
        let ms = w.assigned.elapsed().as_millis();
        let exit = w.life.exit_status().unwrap_or(sys::ExitStatus::Code(1));
        self.tasks.worker_notice(&Notice::WorkerExit {
            task_id: &id,
            pid,
            exit_code: exit.shell_code(),
            exit: &exit.to_string(),
            cause: ending.cause.as_str(),
        });
        let trace = self.tasks.trace(&id).map(|t| format!(" trace={}", t.trace_id()));
        log::info!(
            "task.end task={id} pid={pid} state={} cause={} ms={ms}{}",
            ending.state.short_name(),
            ending.cause.as_str(),
            trace.unwrap_or_default()
        );
        self.end(&id, ending.state, ending.cause, ending.text);
    }

    /// A task's verdict, counted for /metrics.
    fn end(&self, id: &str, state: TaskState, cause: Cause, text: Option<String>) {
        crate::metrics::task_ended(state, cause);
        self.tasks.finish(id, state, cause, text);
    }
}

fn fork_bomb_text(pids_max: u64, refused: u64) -> String {
    format!("the task hit tasks.pids_max ({pids_max} processes) {refused} time(s): a fork bomb?")
}

/// SIGKILL to the whole task: its process group and its cgroups (which
/// also hold anything that left the group with setsid).
fn kill(w: &Worker) {
    let _ = sys::kill_group(w.pid, libc::SIGKILL);
    if let Some(cg) = &w.cgroups {
        cg.kill();
    }
}

fn pollin(fd: std::os::fd::RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Empties a non-blocking wake socket.
fn drain(sock: &mut UnixStream) {
    let mut buf = [0u8; 256];
    while matches!(sock.read(&mut buf), Ok(n) if n > 0) {}
}
