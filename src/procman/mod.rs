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
//! are bounded per turn ([`channel`]), writes go to a bounded outbox.
//!
//! ```text
//!  mod.rs        the handle the rest of agentd holds, and the loop: the poll
//!                set, requests, wake-ups, the order of a turn
//!  driver.rs     the workers: events in, actions out, through the Os seam
//!  lifecycle.rs  one worker's life as a pure machine: every verdict
//!  os.rs         the seam to the kernel (signals, reaping, /proc, cgroups)
//!  pool.rs       the queue under tasks.max_running, idle workers, asking
//!  forks.rs      the fork server's client
//!  channel.rs    one worker's control pipes
//! ```

mod channel;
mod driver;
mod forks;
pub mod lifecycle;
mod os;
mod pool;

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use self::driver::{end_task, Driver};
use self::lifecycle::{Ending, Timing};
use self::os::RealOs;
use self::pool::Pool;
use crate::cgroup::Isolation;
use crate::config::Config;
use crate::control::Cause;
use crate::limits;
use crate::sys;
use crate::tasks::TaskTable;
use crate::wire::{Message, TaskState};

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

/// procman's thread: the driver of the workers, the pool that starts them,
/// and what wakes the loop.
struct Loop {
    cfg: Arc<Config>,
    driver: Driver<RealOs>,
    pool: Pool,
    rx: Receiver<Msg>,
    wake: Wake,
    /// The poll set, and the worker each entry past the first four is for
    /// (true: its pipe to the worker, polled for room); rebuilt every turn
    /// in buffers kept from the last.
    poll_set: (Vec<libc::pollfd>, Vec<(i32, bool)>),
    shutdown: Option<Sender<()>>,
    /// The second SIGTERM came: a worker named from now on is killed too.
    killing_all: bool,
    poll_failures: PollFailures,
}

/// poll(2) failing, logged once per `limits::LOG_REPEAT_INTERVAL_MS` with
/// how many times it failed meanwhile.
#[derive(Default)]
struct PollFailures {
    since_log: u64,
    logged_at: Option<Instant>,
}

impl PollFailures {
    fn note(&mut self, e: &std::io::Error) {
        self.since_log += 1;
        let quiet = Duration::from_millis(limits::LOG_REPEAT_INTERVAL_MS);
        if self.logged_at.is_none_or(|at| at.elapsed() >= quiet) {
            log::error!(
                "procman.poll error={e} times={}; going on without it (every descriptor tried each turn)",
                self.since_log
            );
            self.since_log = 0;
            self.logged_at = Some(Instant::now());
        }
    }
}

/// What wakes procman besides its workers' pipes.
struct Wake {
    waker: Arc<Waker>,
    /// SIGCHLD, blocked in every thread agentd starts (None: the kernel
    /// refused a signalfd, and the self-pipe below is all there is).
    sigchld: Option<OwnedFd>,
    /// SIGCHLD as a byte from signal-hook's handler, should it ever run in
    /// a thread that does not block it.
    sigchld_pipe: UnixStream,
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
    let ms = Duration::from_millis;
    let timing = Timing {
        cancel_grace: ms(t.cancel_grace_ms),
        term_grace: ms(t.term_grace_ms),
        ping_every: ms(t.ping_interval_ms),
        stall_after: ms(t.stall_timeout_ms),
        input_idle: ms(t.input_idle_ms),
        exit_grace: ms(limits::WORKER_EXIT_GRACE_MS),
        drain: ms(limits::WORKER_CHANNEL_DRAIN_MS),
        group_poll: ms(limits::GROUP_POLL_MS),
        take_within: ms(limits::WORKER_TAKE_MS),
    };
    let mut state = Loop {
        cfg,
        driver: Driver::new(RealOs { isolation }, tasks, timing),
        pool: Pool::new(),
        rx,
        wake: Wake {
            waker: waker.clone(),
            sigchld,
            sigchld_pipe,
        },
        poll_set: (Vec::new(), Vec::new()),
        shutdown: None,
        killing_all: false,
        poll_failures: PollFailures::default(),
    };
    let handle = std::thread::Builder::new()
        .name("procman".into())
        .spawn(move || state.run())?;
    Ok((Procman { tx, waker }, handle))
}

impl Loop {
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
            let (mut fds, mut pids) = std::mem::take(&mut self.poll_set);
            fds.clear();
            pids.clear();
            // -1 = none: poll(2) skips negative fds.
            fds.extend([
                pollfd(self.wake.waker.fd.as_raw_fd(), libc::POLLIN),
                pollfd(self.wake.sigchld.as_ref().map_or(-1, |fd| fd.as_raw_fd()), libc::POLLIN),
                pollfd(self.wake.sigchld_pipe.as_raw_fd(), libc::POLLIN),
                pollfd(self.pool.forks_fd().unwrap_or(-1), libc::POLLIN),
            ]);
            // Each worker's pipe from it, and its pipe to it while frames
            // wait for room.
            for (fd, pid, is_write) in self.driver.pipes() {
                fds.push(pollfd(fd, if is_write { libc::POLLOUT } else { libc::POLLIN }));
                pids.push((pid, is_write));
            }
            if let Err(e) = sys::poll(&mut fds, timeout_ms) {
                // EINVAL: more fds than RLIMIT_NOFILE allows (someone lowered
                // it under us). Every read and write here is non-blocking, so
                // the turn goes on as if each fd were ready, a little later:
                // procman keeps reaping, reading and timing without poll.
                self.poll_failures.note(&e);
                std::thread::sleep(Duration::from_millis(limits::PROCMAN_POLL_RETRY_MS));
                for p in fds.iter_mut().filter(|p| p.fd >= 0) {
                    p.revents = p.events;
                }
            }
            if fds[0].revents != 0 {
                sys::eventfd_drain(self.wake.waker.fd.as_raw_fd());
            }
            // Before taking them, and an acquire: a request that found the
            // flag set is visible to take_requests; any later one wakes us.
            self.wake.waker.pending.swap(false, Ordering::AcqRel);
            self.driver.helpers = self.pool.helpers();
            if !self.take_requests() {
                return; // every handle is gone: the daemon is exiting
            }
            if fds[3].revents != 0 || self.pool.forks_owe() || self.pool.forks_overdue(Instant::now()) {
                self.take_fork_answers();
            }
            // Frames before exits: a worker that said `done` and exited in
            // the same turn is heard before it is reaped, as it spoke.
            for (p, &(pid, is_write)) in fds[4..].iter().zip(&pids) {
                if p.revents == 0 {
                    continue;
                }
                if is_write {
                    self.driver.flush(pid);
                } else {
                    self.driver.read_from(pid);
                }
            }
            let mut reap = false;
            if fds[1].revents != 0 {
                sys::signalfd_drain(fds[1].fd);
                reap = true;
            }
            if fds[2].revents != 0 {
                drain(&mut self.wake.sigchld_pipe);
                reap = true;
            }
            if reap {
                self.driver.reap();
                self.route_unclaimed();
            }
            self.poll_set = (fds, pids);
            self.driver.tick();
            self.route_unclaimed();
            self.take_given_back();
            self.start_queued();
            self.fill_pool();
            self.pool.forget_passed_retry(Instant::now());
            // A worker the fork server may already have made (its answer
            // not yet read) is waited for too: adopted, it is retired with
            // the rest; unread, it would be left in a slot removed under it.
            if self.driver.is_empty() && self.pool.forks_settled() {
                if let Some(done) = self.shutdown.as_ref() {
                    self.pool.stop_forks();
                    self.driver.os.isolation.remove();
                    let _ = done.send(());
                }
            }
        }
    }

    fn next_due(&self) -> Option<Instant> {
        [self.driver.next_due(), self.pool.next_due(), self.pool_review_due()]
            .into_iter()
            .flatten()
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
                    self.end_unstarted(&id, Cause::Shutdown);
                } else {
                    self.pool.queue(id);
                }
            }
            Msg::Input(id, message) => {
                if !self.driver.input(&id, message) {
                    log::warn!("procman.input task={id} has no live worker; dropping the message");
                }
            }
            Msg::Cancel(id) => self.stop_task(&id, Cause::Cancelled),
            Msg::Shutdown(done) => {
                log::info!(
                    "procman.shutdown workers={} queued={}",
                    self.driver.tasks_running(),
                    self.pool.queued()
                );
                self.shutdown = Some(done);
                for id in self.pool.take_queued() {
                    self.end_unstarted(&id, Cause::Shutdown);
                }
                self.pool.stop_every_handed(Cause::Shutdown);
                self.driver.stop_all(Cause::Shutdown, false);
            }
            Msg::KillAll => {
                self.killing_all = true;
                self.driver.stop_all(Cause::Shutdown, true);
            }
            Msg::Wake => {}
            Msg::Ping(answer) => {
                let _ = answer.try_send(());
            }
        }
    }

    /// Stops a task wherever it is: queued, about to start, or running.
    fn stop_task(&mut self, task_id: &str, cause: Cause) {
        if self.pool.unqueue(task_id) {
            self.end_unstarted(task_id, cause);
            return;
        }
        if self.driver.stop_task(task_id, cause) {
            return;
        }
        // In the pipe of a worker not yet born: stopped once it is named.
        if self.pool.stop_handed(task_id, cause) {
            return;
        }
        // The Start message is still in flight, or the task ended.
        if self.driver.tasks.state(task_id) == Some(TaskState::Submitted) {
            self.end_unstarted(task_id, cause);
        }
    }

    /// A task that never reached a worker ends CANCELED.
    fn end_unstarted(&self, id: &str, cause: Cause) {
        let ending = Ending {
            state: TaskState::Canceled,
            cause,
            text: None,
        };
        end_task(&self.driver.tasks, id, ending, None);
    }

    /// Exits the driver reaped that are no worker's: the fork server's, a
    /// worker's not yet named, an adopted orphan's.
    fn route_unclaimed(&mut self) {
        for (pid, status) in std::mem::take(&mut self.driver.unclaimed) {
            self.pool.route_exit(pid, status);
        }
    }
}

fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd { fd, events, revents: 0 }
}

/// Empties a non-blocking wake socket.
fn drain(sock: &mut UnixStream) {
    let mut buf = [0u8; 256];
    while matches!(sock.read(&mut buf), Ok(n) if n > 0) {}
}
