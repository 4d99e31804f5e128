//! procman's side of the fork server (worker::forkserver): started when
//! first needed, asked for workers without waiting (the answers come back
//! through the poll loop, in order), and started again after it dies or
//! stops answering (a request unanswered for `limits::FORK_ANSWER_MS`: it
//! was stopped, or is wedged). It is agentd's own helper: losing it loses
//! no task, only the workers it owed, which are asked of the next one.

use std::collections::VecDeque;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::channel::Channel;
use crate::cgroup::TaskCgroups;
use crate::control::{Cause, ForkReply, ForkRequest};
use crate::limits;
use crate::sys;

/// A worker asked for and not yet answered: what procman keeps of it.
pub(super) struct Pending {
    /// procman's end of the worker's control pipes, made with the request.
    pub chan: Channel,
    pub cgroups: Option<TaskCgroups>,
    /// Its cgroup v2 directory went with the request (CLONE_INTO_CGROUP).
    pub into_cgroup: bool,
    pub asked: Instant,
    /// The task already in its pipe, if it was asked for one.
    pub task: Option<Handed>,
}

/// A task handed to a worker before it is born: its `spawn` frame waits in
/// the pipe, so the worker runs it as it starts instead of starting, going
/// to sleep and being woken for it (one wake-up less per task).
pub(super) struct Handed {
    pub id: String,
    /// Which worker in a row the task goes to (1: the first).
    pub attempt: u32,
    /// The task's wall-clock deadline, counted from when it was handed.
    pub deadline: Option<Instant>,
    /// Stopped (cancelled, the daemon stopping) before its worker was
    /// named: the worker is stopped as soon as it is.
    pub stop: Option<Cause>,
}

/// One answer, with the request it answers.
pub(super) enum Answer {
    Forked {
        pending: Pending,
        pid: i32,
        /// The kernel would not start it in its cgroup: move it in.
        placement_refused: Option<io::Error>,
    },
    /// No worker: the fork failed, or (`lost`) the fork server went away
    /// or stopped answering first (then a worker may have been forked that
    /// nobody will hear from; its cgroup is the caller's to kill).
    Failed {
        pending: Pending,
        error: io::Error,
        lost: bool,
    },
}

struct Running {
    pid: i32,
    sock: OwnedFd,
    pending: VecDeque<Pending>,
    /// Reaped already: its answers still in the socket are read first
    /// (answers() sees the EOF after them), and its pid is not ours to kill.
    reaped: bool,
}

pub(super) struct ForkServer {
    running: Option<Running>,
    /// The pid of the last fork server, running or not: its exit is reaped
    /// like a worker's, and must not be taken for an escaped process.
    last_pid: Option<i32>,
    /// Failed answers for what a lost fork server still owed.
    owed: Vec<Answer>,
    /// Fork servers lost since one last forked a worker.
    losses_in_a_row: u32,
}

impl ForkServer {
    pub fn new() -> ForkServer {
        ForkServer {
            running: None,
            last_pid: None,
            owed: Vec::new(),
            losses_in_a_row: 0,
        }
    }

    /// Fork servers lost in a row, none of which forked a worker.
    pub fn losses_in_a_row(&self) -> u32 {
        self.losses_in_a_row
    }

    /// When the oldest unanswered request is overdue.
    pub fn answer_due(&self) -> Option<Instant> {
        let r = self.running.as_ref()?;
        let oldest = r.pending.front()?;
        Some(oldest.asked + Duration::from_millis(limits::FORK_ANSWER_MS))
    }

    /// A request has waited past its due: the fork server is stopped or
    /// wedged. It is killed and replaced; what it owed is answered Failed.
    pub fn give_up_if_overdue(&mut self, now: Instant) {
        if self.answer_due().is_some_and(|due| now >= due) {
            self.lost(&format!(
                "a request waited {} ms for an answer (is it stopped?)",
                limits::FORK_ANSWER_MS
            ));
        }
    }

    /// Its request socket, for the poll set, while it runs.
    pub fn fd(&self) -> Option<RawFd> {
        self.running.as_ref().map(|r| r.sock.as_raw_fd())
    }

    pub fn is_up(&self) -> bool {
        self.running.is_some()
    }

    /// Answers owed by a lost fork server, not yet taken.
    pub fn owes(&self) -> bool {
        !self.owed.is_empty()
    }

    /// The running fork server's pid.
    pub fn server_pid(&self) -> Option<i32> {
        self.running.as_ref().map(|r| r.pid).or(self.last_pid)
    }

    /// Whether `pid` is (or was) the fork server.
    pub fn is_server(&self, pid: i32) -> bool {
        self.last_pid == Some(pid)
    }

    /// Requests not answered yet.
    pub fn pending(&self) -> usize {
        self.running.as_ref().map_or(0, |r| r.pending.len()) + self.owed.len()
    }

    /// Every request not answered yet (owed ones too), to look at or mark.
    fn each_pending(&mut self) -> impl Iterator<Item = &mut Pending> {
        let asked = self.running.iter_mut().flat_map(|r| r.pending.iter_mut());
        let owed = self.owed.iter_mut().filter_map(|a| match a {
            Answer::Failed { pending, .. } => Some(pending),
            Answer::Forked { .. } => None,
        });
        asked.chain(owed)
    }

    /// Tasks handed to workers not yet named: they count as running.
    pub fn handed(&self) -> usize {
        let asked = self.running.iter().flat_map(|r| r.pending.iter());
        let owed = self.owed.iter().filter_map(|a| match a {
            Answer::Failed { pending, .. } => Some(pending),
            Answer::Forked { .. } => None,
        });
        asked.chain(owed).filter(|p| p.task.is_some()).count()
    }

    /// Marks task `id`, if it waits in an unborn worker's pipe, to be
    /// stopped for `cause` once the worker is named; false if none holds it.
    pub fn stop_handed(&mut self, id: &str, cause: Cause) -> bool {
        let task = self.each_pending().filter_map(|p| p.task.as_mut()).find(|t| t.id == id);
        match task {
            Some(t) => {
                t.stop.get_or_insert(cause);
                true
            }
            None => false,
        }
    }

    /// Marks every handed task to be stopped for `cause` (the daemon stops).
    pub fn stop_every_handed(&mut self, cause: Cause) {
        for t in self.each_pending().filter_map(|p| p.task.as_mut()) {
            t.stop.get_or_insert(cause);
        }
    }

    /// Spawns `agentd __forkserver` with `env` as its whole environment.
    pub fn start(&mut self, env: &[CString]) -> io::Result<()> {
        self.lost("replaced by a new one");
        let (ours, theirs) = sys::seqpacket_pair()?;
        let argv = [c"agentd".to_owned(), c"__forkserver".to_owned()];
        let pid = sys::spawn_self(&sys::SelfSpawn {
            argv: &argv,
            envp: env,
            stdin_fd: theirs.as_raw_fd(),
        })?;
        log::debug!("procman.forkserver pid={pid} started");
        self.last_pid = Some(pid);
        self.running = Some(Running {
            pid,
            sock: ours,
            pending: VecDeque::new(),
            reaped: false,
        });
        Ok(())
    }

    /// Asks for one worker. On an error nothing was asked and `pending`
    /// comes back: WouldBlock = the fork server is behind, ask again later;
    /// anything else = it is gone (it is started again on the next ask).
    pub fn ask(
        &mut self,
        request: &ForkRequest,
        fds: &[RawFd],
        pending: Pending,
    ) -> Result<(), (io::Error, Box<Pending>)> {
        let Some(r) = self.running.as_mut() else {
            return Err((io::ErrorKind::NotConnected.into(), Box::new(pending)));
        };
        debug_assert_eq!(fds.len(), request.fds());
        match sys::send_with_fds(r.sock.as_raw_fd(), &request.encode(), fds, true) {
            Ok(()) => {
                r.pending.push_back(pending);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err((e, Box::new(pending))),
            Err(e) => {
                self.lost(&format!("sending a request failed: {e}"));
                Err((e, Box::new(pending)))
            }
        }
    }

    /// Every answer that has arrived. If the fork server is gone (EOF, a
    /// broken socket, a reply that makes no sense), each request still
    /// pending is answered Failed and the next ask starts a new one.
    pub fn answers(&mut self) -> Vec<Answer> {
        let mut out = std::mem::take(&mut self.owed);
        let Some(r) = self.running.as_mut() else { return out };
        let mut buf = [0u8; 64];
        let mut fds = sys::ReceivedFds::default();
        let gone = loop {
            fds.clear();
            match sys::recv_with_fds(r.sock.as_raw_fd(), &mut buf, &mut fds, true) {
                Ok(0) => break Some("it exited".to_string()),
                Ok(n) => {
                    let reply = ForkReply::decode(&buf[..n]);
                    let Some(pending) = r.pending.pop_front() else {
                        break Some("it answered a request never made".into());
                    };
                    match reply {
                        Some(ForkReply::Forked { pid, placement_errno }) => {
                            self.losses_in_a_row = 0;
                            out.push(Answer::Forked {
                                pending,
                                pid,
                                placement_refused: (placement_errno != 0)
                                    .then(|| io::Error::from_raw_os_error(placement_errno)),
                            })
                        }
                        Some(ForkReply::Failed { errno }) => out.push(Answer::Failed {
                            pending,
                            error: io::Error::from_raw_os_error(errno),
                            lost: false,
                        }),
                        None => {
                            r.pending.push_front(pending);
                            break Some("it sent a reply that is not one".into());
                        }
                    }
                    if r.pending.is_empty() {
                        // Nothing more is owed: no read to hear EAGAIN. What
                        // comes unasked (EOF, a stray reply) wakes poll and
                        // is read then.
                        break None;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break None,
                Err(e) => break Some(e.to_string()),
            }
        };
        if let Some(why) = gone {
            self.lost(&why);
            out.append(&mut self.owed);
        }
        out
    }

    /// The fork server `pid` exited and was reaped. What it answered before
    /// it died is still in its socket: [`answers`](Self::answers) reads
    /// that, then the EOF, and only then gives it up.
    pub fn exited(&mut self, pid: i32) {
        if let Some(r) = self.running.as_mut().filter(|r| r.pid == pid) {
            r.reaped = true;
        }
    }

    /// The fork server is no use any more: killed (unless already reaped:
    /// its pid may be someone else's by now), and what it still owed
    /// answered Failed (by the next [`answers`](Self::answers)).
    fn lost(&mut self, why: &str) {
        let Some(r) = self.running.take() else { return };
        log::warn!(
            "procman.forkserver pid={} lost: {why}; {} request(s) unanswered; the next worker starts another",
            r.pid,
            r.pending.len()
        );
        if !r.reaped {
            let _ = sys::kill_pid(r.pid, libc::SIGKILL);
        }
        self.losses_in_a_row += 1;
        self.owed.extend(r.pending.into_iter().map(|pending| Answer::Failed {
            pending,
            error: io::Error::other(format!("the fork server was lost: {why}")),
            lost: true,
        }));
    }

    /// Lets it go (the daemon is done): EOF on its socket ends it.
    pub fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            log::debug!("procman.forkserver pid={} stopped", r.pid);
        }
    }
}
