//! procman: the one thread that spawns, reaps, times and kills workers.
//!
//! Why one thread: PR_SET_PDEATHSIG fires when the *thread* that forked a
//! child exits, so a child forked on a connection thread would die when its
//! client hung up. procman lives as long as the daemon; if it panics, the
//! daemon ends (see [`crate::vital`]).
//!
//! It is one `poll(2)` loop, as tini and s6-supervise wait on their
//! children: every worker's control pipes, an eventfd for requests from
//! the rest of agentd, and a signalfd for SIGCHLD (with a self-pipe behind
//! it for any thread that does not block it); its timers are the poll
//! timeout. There is no thread per worker. Reads are bounded per turn
//! ([`channel`]) and writes go to a bounded outbox; what may block does so
//! for a bounded time: killing a v1 freezer cgroup waits up to 1 s for it
//! to freeze, and removing the slots at exit up to 2 s.
//!
//! ```text
//!  mod.rs        the handle the rest of agentd holds, and the loop: the poll
//!                set, requests, wake-ups, the order of a turn, its mode
//!  start.rs      a task's way to a worker as a pure machine: every verdict
//!                of a task no worker ran
//!  lifecycle.rs  one worker's life as a pure machine: every verdict of a
//!                task a worker ran
//!  driver.rs     both machines' events in, actions out: the one place that
//!                ends a task
//!  pool.rs       bringing workers: idle workers, asking the fork server,
//!                adopting the workers of a lost one
//!  forks.rs      the fork server's client
//!  os.rs         the seam to the kernel (signals, reaping, /proc, cgroup
//!                slots, the fork server)
//!  channel.rs    one worker's control pipes
//! ```

mod channel;
mod driver;
#[cfg(test)]
mod fake;
mod forks;
mod lifecycle;
mod os;
mod pool;
mod start;

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use self::os::{Os, RealOs};
use self::pool::{helpers, Supervisor};
use crate::cgroup::Isolation;
use crate::config::Config;
use crate::ids::TaskId;
use crate::limits;
use crate::sys;
use crate::tasks::TaskTable;
use crate::wire::Message;

/// What the rest of agentd asks of procman.
enum Msg {
    Start(TaskId),
    Input(TaskId, Message),
    Cancel(TaskId),
    Shutdown(Sender<()>),
    KillAll,
    /// Something changed (the running cap): look at the queue again.
    Wake,
    /// Answer on this channel: proof the loop is turning (the watchdog).
    Ping(Sender<()>),
}

/// procman no longer takes requests: its thread is gone (the daemon is
/// exiting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcmanGone;

impl std::fmt::Display for ProcmanGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("agentd's process manager is gone (the daemon is exiting); nothing can run")
    }
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
    fn send(&self, msg: Msg) -> Result<(), ProcmanGone> {
        self.tx.send(msg).map_err(|_| ProcmanGone)?;
        self.waker.wake();
        Ok(())
    }

    /// A task was created in SUBMITTED: run it when there is room.
    pub fn start(&self, task_id: TaskId) -> Result<(), ProcmanGone> {
        self.send(Msg::Start(task_id))
    }

    /// A follow-up message for a task waiting on input.
    pub fn input(&self, task_id: TaskId, message: Message) -> Result<(), ProcmanGone> {
        self.send(Msg::Input(task_id, message))
    }

    /// Runs the kill ladder on a task (or drops it from the queue).
    pub fn cancel(&self, task_id: &str) -> Result<(), ProcmanGone> {
        self.send(Msg::Cancel(task_id.into()))
    }

    /// Ladders every task; `done` gets a message when no worker is left.
    pub fn shutdown(&self, done: Sender<()>) -> Result<(), ProcmanGone> {
        self.send(Msg::Shutdown(done))
    }

    /// The second SIGTERM: SIGKILL every task group now.
    pub fn kill_all(&self) -> Result<(), ProcmanGone> {
        self.send(Msg::KillAll)
    }

    /// The running cap changed: start what now fits.
    pub fn wake(&self) -> Result<(), ProcmanGone> {
        self.send(Msg::Wake)
    }

    /// A round trip through the loop: the receiver gets `()` once procman
    /// has handled the request, so a wedged procman never answers (and one
    /// that is gone drops the sender at once). The systemd watchdog beats
    /// only on an answer.
    pub fn ping(&self) -> Receiver<()> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let _ = self.send(Msg::Ping(tx));
        rx
    }
}

/// The loop's own state: serving, draining until nothing is left, and done
/// (the drain's last work has run, once).
enum Mode {
    Serving,
    Draining { done: Sender<()> },
    Drained,
}

/// procman's thread: the supervisor, its poll set, and what wakes it.
struct Loop {
    sup: Supervisor<RealOs>,
    rx: Receiver<Msg>,
    wake: Wake,
    mode: Mode,
    /// The poll set, and what each entry past the first four is for;
    /// rebuilt every turn in buffers kept from the last.
    poll_set: (Vec<libc::pollfd>, Vec<Polled>),
    poll_failures: PollFailures,
    spare_blocks: SpareBlocks,
}

/// When the allocator's spare large blocks (sys/alloc.rs) go back to libc:
/// once none has been taken for `limits::SPARE_BLOCKS_IDLE_MS`. While
/// large outputs keep coming, each fills the pages the last one left; when
/// they stop, an idle daemon does not sit on the memory.
#[derive(Default)]
struct SpareBlocks {
    /// When to look again, and how many had been reused when this was set.
    due: Option<(Instant, usize)>,
}

impl SpareBlocks {
    const IDLE: Duration = Duration::from_millis(limits::SPARE_BLOCKS_IDLE_MS);

    /// At the end of each turn of the loop: two relaxed loads while no
    /// block is kept, the clock only while some are.
    fn turn(&mut self) {
        match self.due {
            None if sys::large_bytes_kept() > 0 => {
                self.due = Some((Instant::now() + Self::IDLE, sys::large_blocks_reused()));
            }
            Some((at, seen)) => {
                let now = Instant::now();
                if now < at {
                    return;
                }
                let reused = sys::large_blocks_reused();
                if reused != seen {
                    self.due = Some((now + Self::IDLE, reused));
                    return;
                }
                let released = sys::release_large_blocks();
                log::debug!(
                    "procman.spare_blocks released_bytes={released} (none taken for {:?})",
                    Self::IDLE
                );
                self.due = None;
            }
            None => {}
        }
    }

    fn due(&self) -> Option<Instant> {
        self.due.map(|(at, _)| at)
    }
}

/// What a poll entry past the first four is.
#[derive(Debug, Clone, Copy)]
enum Polled {
    /// A worker's pipe from it (`write`: its pipe to it, polled for room).
    Worker { pid: i32, write: bool },
    /// An orphan's pipe from it (a lost fork server's worker, by number).
    Orphan(u64),
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
    // Without cgroups, what escapes a task's process group is found as a
    // child of its worker (a subreaper) or of agentd: say where children
    // are read from, since a kernel without the children file is slower.
    let children = crate::worker::detect_children_source();
    log::info!("procman.containment children={} isolation={isolation}", children.name());
    let mut state = Loop {
        sup: Supervisor::new(cfg, RealOs::new(isolation, children), tasks),
        rx,
        wake: Wake {
            waker: waker.clone(),
            sigchld,
            sigchld_pipe,
        },
        mode: Mode::Serving,
        poll_set: (Vec::new(), Vec::new()),
        poll_failures: PollFailures::default(),
        spare_blocks: SpareBlocks::default(),
    };
    let handle = crate::vital::spawn("procman", move || state.run())?;
    Ok((Procman { tx, waker }, handle))
}

impl Loop {
    fn run(&mut self) {
        // Every task's last message gets an id here.
        crate::ids::batch_on_this_thread();
        self.sup.fill_pool();
        loop {
            let due = self.sup.next_due().into_iter().chain(self.spare_blocks.due()).min();
            let timeout_ms = match due {
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    // Round up: waking a hair early only spins.
                    left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
                }
                None => -1,
            };
            let (mut fds, mut polled) = std::mem::take(&mut self.poll_set);
            fds.clear();
            polled.clear();
            // -1 = none: poll(2) skips negative fds.
            fds.extend([
                pollfd(self.wake.waker.fd.as_raw_fd(), libc::POLLIN),
                pollfd(self.wake.sigchld.as_ref().map_or(-1, |fd| fd.as_raw_fd()), libc::POLLIN),
                pollfd(self.wake.sigchld_pipe.as_raw_fd(), libc::POLLIN),
                pollfd(self.sup.pool.forks.fd(&self.sup.driver.os).unwrap_or(-1), libc::POLLIN),
            ]);
            // Each worker's pipe from it, and its pipe to it while frames
            // wait for room; each orphan's pipe from it.
            for (fd, pid, write) in self.sup.driver.pipes() {
                fds.push(pollfd(fd, if write { libc::POLLOUT } else { libc::POLLIN }));
                polled.push(Polled::Worker { pid, write });
            }
            for (fd, n) in self.sup.orphan_pipes() {
                fds.push(pollfd(fd, libc::POLLIN));
                polled.push(Polled::Orphan(n));
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
            if !self.take_requests() {
                return; // every handle is gone: the daemon is exiting
            }
            if self.sup.fork_answers_due(fds[3].revents != 0) {
                self.sup.take_fork_answers();
            }
            // Frames before exits: a worker that said `done` and exited in
            // the same turn is heard before it is reaped, as it spoke.
            for (p, what) in fds[4..].iter().zip(&polled) {
                if p.revents == 0 {
                    continue;
                }
                let h = helpers(&self.sup.pool);
                match *what {
                    Polled::Worker { pid, write: true } => self.sup.driver.flush(pid),
                    Polled::Worker { pid, write: false } => self.sup.driver.read_from(h, pid),
                    Polled::Orphan(n) => self.sup.hear_orphan(n),
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
                self.sup.reap();
            }
            self.poll_set = (fds, polled);
            self.sup.turn_end();
            self.spare_blocks.turn();
            if let Mode::Draining { .. } = self.mode {
                if self.sup.settled() {
                    self.drained();
                    return;
                }
            }
        }
    }

    /// The drain's last work, once: the fork server let go, the slots
    /// removed, the drain told.
    fn drained(&mut self) {
        self.sup.pool.forks.stop();
        self.sup.driver.os.remove_slots();
        if let Mode::Draining { done } = std::mem::replace(&mut self.mode, Mode::Drained) {
            let _ = done.send(());
        }
        log::debug!("procman.drained");
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Start(id) => self.sup.submit(id),
            Msg::Input(id, message) => self.sup.input(&id, message),
            Msg::Cancel(id) => {
                #[cfg(debug_assertions)]
                if std::env::var_os("AGENTD_TEST_PANIC").is_some_and(|v| v == "procman") {
                    panic!("AGENTD_TEST_PANIC=procman: procman panics on a cancel (a test of the panic policy)");
                }
                self.sup.cancel(id);
            }
            Msg::Shutdown(done) => {
                if let Mode::Serving = self.mode {
                    self.mode = Mode::Draining { done };
                }
                self.sup.drain();
            }
            Msg::KillAll => self.sup.kill_all(),
            Msg::Wake => {}
            Msg::Ping(answer) => {
                let _ = answer.try_send(());
            }
        }
    }

    /// Handles every queued request; false once the handles are all gone.
    fn take_requests(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(msg) => self.handle(msg),
                Err(crossbeam_channel::TryRecvError::Empty) => return true,
                Err(crossbeam_channel::TryRecvError::Disconnected) => {
                    return !matches!(self.mode, Mode::Serving);
                }
            }
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

#[cfg(test)]
mod handle_tests {
    use super::*;

    #[test]
    fn a_request_procman_can_no_longer_take_is_an_error_to_its_caller() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let waker = Arc::new(Waker {
            fd: sys::eventfd().unwrap(),
            pending: AtomicBool::new(false),
        });
        let procman = Procman { tx, waker };
        assert_eq!(procman.start("t".into()), Ok(()));
        drop(rx); // procman's thread is gone
        assert_eq!(procman.start("t".into()), Err(ProcmanGone));
        assert_eq!(procman.cancel("t"), Err(ProcmanGone));
        assert_eq!(procman.kill_all(), Err(ProcmanGone));
        assert!(
            procman.ping().recv_timeout(Duration::from_secs(1)).is_err(),
            "no beat from a procman that is gone"
        );
        assert!(ProcmanGone.to_string().contains("process manager is gone"));
    }
}
