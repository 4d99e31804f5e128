//! procman's side of the fork server (worker::forkserver): started when
//! first needed, asked for workers without waiting (the answers come back
//! through the poll loop, in order), and replaced after it dies, talks
//! nonsense or stops answering (a request unanswered for
//! `limits::FORK_ANSWER_MS`: it was stopped, or is wedged). It is agentd's
//! own helper: losing it loses no task. What it owed comes back as
//! [`Answer::Lost`], for the pool to take each request's task back (no
//! worker read it) or to wait for the worker to say who it is (one did).
//! Every call to the kernel goes through the [`Os`] seam.

use std::collections::VecDeque;
use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use super::channel::Channel;
use super::os::Os;
use crate::control::{ForkReply, ForkRequest};
use crate::ids::TaskId;
use crate::limits;

/// A worker asked for and not yet named: what procman keeps of it.
pub(super) struct Asked<C> {
    /// procman's end of the worker's control pipes, made with the request.
    pub chan: Channel,
    pub cgroups: Option<C>,
    /// Its cgroup v2 directory went with the request (CLONE_INTO_CGROUP).
    pub into_cgroup: bool,
    pub asked: Instant,
    /// The task already in its pipe, if it was asked for one.
    pub task: Option<Handed>,
}

/// A task handed to a worker before it is born: its `spawn` frame waits in
/// the pipe, so the worker runs it as it starts instead of starting, going
/// to sleep and being woken for it (one wake-up less per task).
#[derive(Debug, Clone)]
pub(super) struct Handed {
    pub id: TaskId,
    /// The task's wall-clock deadline, counted from when it was handed.
    pub deadline: Option<Instant>,
}

/// One answer, with the request it answers.
pub(super) enum Answer<C> {
    Forked {
        asked: Asked<C>,
        pid: i32,
        /// The kernel would not start it in its cgroup: move it in.
        placement_refused: Option<io::Error>,
    },
    /// The fork failed: nothing was started.
    Failed { asked: Asked<C>, error: io::Error },
    /// The fork server was lost before it answered: a worker may or may
    /// not have been made.
    Lost { asked: Asked<C>, why: String },
}

struct Running<C, L> {
    pid: i32,
    line: L,
    asked: VecDeque<Asked<C>>,
    /// Reaped already: its answers still in the socket are read first
    /// (answers() sees the EOF after them), and its pid is not ours to kill.
    reaped: bool,
}

pub(super) struct ForkServer<C, L> {
    running: Option<Running<C, L>>,
    /// Fork servers started and not reaped yet (the running one too): an
    /// exit of one is not a worker's, nor is one an escaped process.
    unreaped: Vec<i32>,
    /// Answers for what a lost fork server still owed, not taken yet.
    owed: Vec<Answer<C>>,
    /// Why each fork server lost since the pool last looked was lost.
    losses: Vec<String>,
}

impl<C, L> ForkServer<C, L> {
    pub fn new() -> ForkServer<C, L> {
        ForkServer {
            running: None,
            unreaped: Vec::new(),
            owed: Vec::new(),
            losses: Vec::new(),
        }
    }

    /// When the oldest unanswered request is overdue.
    pub fn answer_due(&self) -> Option<Instant> {
        let r = self.running.as_ref()?;
        let oldest = r.asked.front()?;
        Some(oldest.asked + Duration::from_millis(limits::FORK_ANSWER_MS))
    }

    pub fn is_up(&self) -> bool {
        self.running.is_some()
    }

    /// A fork server was lost and the pool has not heard of it yet: what
    /// it owed, or only that it was lost (a send that found it gone owes
    /// nothing, and its socket is closed, so poll will not say so).
    pub fn owes(&self) -> bool {
        !self.owed.is_empty() || !self.losses.is_empty()
    }

    /// Why each fork server lost since the last call was lost.
    pub fn take_losses(&mut self) -> Vec<String> {
        std::mem::take(&mut self.losses)
    }

    /// Fork servers started and not yet reaped.
    pub fn unreaped(&self) -> &[i32] {
        &self.unreaped
    }

    /// Requests not answered yet.
    pub fn pending(&self) -> usize {
        self.running.as_ref().map_or(0, |r| r.asked.len()) + self.owed.len()
    }

    /// Requests not answered yet that carry a task.
    pub fn handed(&self) -> usize {
        let asked = self.running.iter().flat_map(|r| r.asked.iter());
        let owed = self.owed.iter().map(|a| match a {
            Answer::Forked { asked, .. } | Answer::Failed { asked, .. } | Answer::Lost { asked, .. } => asked,
        });
        asked.chain(owed).filter(|a| a.task.is_some()).count()
    }

    /// An exit reaped: true if it was one of ours. What a fork server
    /// answered before it died is still in its socket:
    /// [`answers`](Self::answers) reads that, then the EOF, and only then
    /// gives it up.
    pub fn exited(&mut self, pid: i32) -> bool {
        let Some(at) = self.unreaped.iter().position(|p| *p == pid) else {
            return false;
        };
        self.unreaped.swap_remove(at);
        if let Some(r) = self.running.as_mut().filter(|r| r.pid == pid) {
            r.reaped = true;
        }
        true
    }

    /// Lets it go (the daemon is done): EOF on its socket ends it.
    pub fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            log::debug!("procman.forkserver pid={} stopped", r.pid);
        }
    }
}

impl<C, L> ForkServer<C, L> {
    /// Its request socket, for the poll set, while it runs.
    pub fn fd<O: Os<Cgroup = C, ForkLine = L>>(&self, os: &O) -> Option<RawFd> {
        self.running.as_ref().map(|r| os.fork_line_fd(&r.line))
    }

    /// Starts `agentd __forkserver` with `env` as its whole environment
    /// (a running one is replaced).
    pub fn start<O: Os<Cgroup = C, ForkLine = L>>(&mut self, os: &mut O, env: &[CString]) -> io::Result<()> {
        self.lost(os, "replaced by a new one");
        let (pid, line) = os.start_fork_server(env)?;
        log::debug!("procman.forkserver pid={pid} started");
        self.unreaped.push(pid);
        self.running = Some(Running {
            pid,
            line,
            asked: VecDeque::new(),
            reaped: false,
        });
        Ok(())
    }

    /// Asks for one worker. On an error nothing was asked and `asked`
    /// comes back: WouldBlock = the fork server is behind, ask again later;
    /// anything else = it is gone (it is started again on the next ask).
    #[allow(clippy::result_large_err)]
    pub fn ask<O: Os<Cgroup = C, ForkLine = L>>(
        &mut self,
        os: &mut O,
        request: &ForkRequest,
        fds: &[RawFd],
        asked: Asked<C>,
    ) -> Result<(), (io::Error, Asked<C>)> {
        let Some(r) = self.running.as_mut() else {
            return Err((io::ErrorKind::NotConnected.into(), asked));
        };
        debug_assert_eq!(fds.len(), request.fds());
        match os.ask_fork_server(&r.line, request, fds) {
            Ok(()) => {
                r.asked.push_back(asked);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err((e, asked)),
            Err(e) => {
                self.lost(os, &format!("sending a request failed: {e}"));
                Err((e, asked))
            }
        }
    }

    /// Every answer that has arrived, and — if the fork server is gone
    /// (EOF, a broken socket, a reply that makes no sense) or has left a
    /// request unanswered past its due at `now` — what it still owed, as
    /// [`Answer::Lost`]. Answers already in the socket are read before a
    /// late fork server is given up on.
    pub fn answers<O: Os<Cgroup = C, ForkLine = L>>(&mut self, os: &mut O, now: Instant) -> Vec<Answer<C>> {
        let mut out = std::mem::take(&mut self.owed);
        let Some(r) = self.running.as_mut() else { return out };
        let mut buf = [0u8; 64];
        let gone = loop {
            match os.hear_fork_server(&r.line, &mut buf) {
                Ok(0) => break Some("it exited".to_string()),
                Ok(n) => {
                    let reply = ForkReply::decode(&buf[..n]);
                    let Some(asked) = r.asked.pop_front() else {
                        break Some("it answered a request never made".into());
                    };
                    match reply {
                        Some(ForkReply::Forked { pid, placement_errno }) => out.push(Answer::Forked {
                            asked,
                            pid,
                            placement_refused: (placement_errno != 0)
                                .then(|| io::Error::from_raw_os_error(placement_errno)),
                        }),
                        Some(ForkReply::Failed { errno }) => out.push(Answer::Failed {
                            asked,
                            error: io::Error::from_raw_os_error(errno),
                        }),
                        None => {
                            r.asked.push_front(asked);
                            break Some("it sent a reply that is not one".into());
                        }
                    }
                    if r.asked.is_empty() {
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
        let late = self.answer_due().is_some_and(|due| now >= due);
        let why = gone.or_else(|| {
            late.then(|| {
                format!(
                    "a request waited {} ms for an answer (is it stopped?)",
                    limits::FORK_ANSWER_MS
                )
            })
        });
        if let Some(why) = why {
            self.lost(os, &why);
            out.append(&mut self.owed);
        }
        out
    }

    /// The fork server is no use any more: killed (unless already reaped:
    /// its pid may be someone else's by now), and what it still owed
    /// answered Lost (by the next [`answers`](Self::answers)).
    fn lost<O: Os<Cgroup = C, ForkLine = L>>(&mut self, os: &mut O, why: &str) {
        let Some(r) = self.running.take() else { return };
        log::warn!(
            "procman.forkserver pid={} lost: {why}; {} request(s) unanswered; the next worker starts another",
            r.pid,
            r.asked.len()
        );
        if !r.reaped {
            os.kill_pid(r.pid, libc::SIGKILL);
        }
        self.losses.push(why.to_string());
        let why = format!("the fork server was lost: {why}");
        self.owed.extend(r.asked.into_iter().map(|asked| Answer::Lost {
            asked,
            why: why.clone(),
        }));
    }
}
