//! The `exec` runner's one loop: a program is started, watched to its end
//! by a pure machine, and its protocol (`text` or `jsonl`, a [`Protocol`])
//! only says what its output and the client's follow-ups mean.
//!
//! ```text
//!            exited: + PROGRAM_PIPES_DRAIN_MS
//!            verdict: + PROGRAM_EXIT_GRACE_MS              `until` passes
//!  Running ────────────────────────────────▶ WindingDown{until} ────────────▶ Done
//!     │                                              │                         ▲
//!     └──────────────────────────────────────────────┴─────────────────────────┘
//!          exited, stdout and stderr at EOF (or nothing more can be heard)
//! ```
//! The first deadline stands. Beside the phase the machine keeps how the
//! task ends: the first verdict (the program's, or a protocol error)
//! stands, and a stop (cancel, output budget) overrides it; with neither,
//! the exit status decides. The loop carries out the machine's one action
//! per event: a signal to the program, or EOF on its stdin.

use std::process::ChildStdout;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::program::{self, Note, Program, Stdin};
use super::{ControlEvent, Done};
use crate::control::Cause;
use crate::limits::{PROGRAM_EXIT_GRACE_MS, PROGRAM_PIPES_DRAIN_MS, PROGRAM_STDOUT_PIPE_BYTES};
use crate::sys::{self, ExitStatus};
use crate::wire::Message;

/// What a protocol says about the program.
pub trait Protocol {
    /// Cuts the program's stdout into [`Note::Output`] pieces (and counts
    /// the output budget), in a thread of its own; a piece's buffer, done
    /// with, comes back on the receiver to be read into again.
    const READ: fn(ChildStdout, u64, &Sender<Note>, &Receiver<Vec<u8>>);

    /// The program has started: what goes to its stdin first.
    fn begin(&mut self, stdin: &mut Stdin);

    /// One piece of output, as `READ` cut it; `over`: the task's ending is
    /// known already. What the protocol leaves of the buffer goes back to
    /// `READ`.
    fn output(&mut self, piece: &mut Vec<u8>, over: bool) -> Heard;

    /// `READ` found a piece over its limit (and stopped reading).
    fn too_long(&mut self) -> Heard;

    /// A follow-up message from the client.
    fn input(&mut self, message: Message, stdin: &mut Stdin) -> Heard;

    /// The run is over: send what is held back.
    fn finish(&mut self);
}

/// What a protocol made of something.
#[derive(Debug, PartialEq)]
pub enum Heard {
    /// Nothing that ends the task.
    Nothing,
    /// The program's verdict: its stdin is closed, and it may exit by itself.
    Verdict(Done),
    /// Output or input that cannot go on: the task fails, the program is killed.
    Broken(Done),
}

/// Runs `prog` under `protocol` to its end and returns the verdict.
pub fn run<P: Protocol>(prog: &Program, protocol: &mut P, events: &Receiver<ControlEvent>) -> Done {
    let mut started = match program::start(prog) {
        Ok(r) => r,
        Err(done) => return done,
    };
    // One buffer goes back to the reader at a time: a program that writes
    // lines of megabytes has them read into memory faulted in once, not
    // into fresh pages for every line.
    let (spares_tx, spares_rx) = crossbeam_channel::bounded::<Vec<u8>>(1);
    if let Some(stdout) = started.stdout.take() {
        // A roomier pipe: a program that writes fast is stopped for room,
        // and its output read and relayed, a few times less often.
        let fd = std::os::fd::AsRawFd::as_raw_fd(&stdout);
        if let Err(e) = sys::set_pipe_capacity(fd, PROGRAM_STDOUT_PIPE_BYTES) {
            log::debug!("worker.stdout pipe stays at its size: {e}");
        }
        let (tx, read, output_max) = (started.tx.clone(), P::READ, prog.output_max_bytes);
        let spares = spares_rx.clone();
        // Detached: a grandchild may hold stdout open after the program exits.
        std::thread::spawn(move || read(stdout, output_max, &tx, &spares));
    }
    let program::Running {
        pid,
        mut stdin,
        notes,
        tx,
        ..
    } = started;
    drop(tx);
    // The stdin thread writes while this loop reads: a program that prints
    // a lot before it reads its input cannot deadlock us.
    protocol.begin(&mut stdin);
    let mut events = events.clone();
    let mut watch = Watch::default();
    loop {
        let now = Instant::now();
        watch.step(Seen::Tick, now);
        if watch.is_done() {
            break;
        }
        let seen = crossbeam_channel::select! {
            recv(notes) -> note => match note {
                Ok(Note::Output(mut piece)) => {
                    let heard = protocol.output(&mut piece, !watch.is_open());
                    if piece.capacity() > 0 {
                        piece.clear();
                        let _ = spares_tx.try_send(piece);
                    }
                    Seen::Heard(heard)
                }
                Ok(Note::TooLong) => Seen::Heard(protocol.too_long()),
                Ok(Note::Exited(status)) => Seen::Exited(status),
                Ok(Note::StdoutEof) => Seen::StdoutEof,
                Ok(Note::StderrTail(tail)) => Seen::StderrTail(tail),
                Ok(Note::Exhausted) => Seen::Exhausted,
                Err(_) => Seen::NotesClosed,
            },
            recv(events) -> event => match event {
                Ok(ControlEvent::Cancel) => Seen::Cancel,
                Ok(ControlEvent::Input(message)) => Seen::Heard(protocol.input(message, &mut stdin)),
                Err(_) => {
                    // Nothing more can come from agentd (its EOF kills the task).
                    events = crossbeam_channel::never();
                    continue;
                }
            },
            default(watch.time_left(now)) => continue,
        };
        match watch.step(seen, Instant::now()) {
            Act::Nothing => {}
            Act::Kill(signal) => {
                let _ = sys::kill_pid(pid, signal);
            }
            Act::CloseStdin => stdin.close(),
        }
    }
    protocol.finish();
    watch.verdict()
}

/// What the machine hears.
#[derive(Debug, PartialEq)]
pub enum Seen {
    Exited(ExitStatus),
    StdoutEof,
    /// stderr reached EOF; its last bytes, to explain a failure.
    StderrTail(Vec<u8>),
    /// The output went over tasks.output_max_bytes.
    Exhausted,
    /// agentd cancels the task.
    Cancel,
    /// What the protocol made of output or input.
    Heard(Heard),
    /// Time passed.
    Tick,
    /// Nothing more can be heard of the program.
    NotesClosed,
}

/// What the loop does for the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Nothing,
    /// This signal to the program.
    Kill(i32),
    /// EOF on the program's stdin once what is queued is written.
    CloseStdin,
}

/// Where a program's run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunPhase {
    Running,
    /// It exited or gave its verdict: what is still open has until then.
    WindingDown {
        until: Instant,
    },
    Done,
}

/// How the task ends, as far as is known yet.
#[derive(Debug, PartialEq)]
enum RunEnding {
    /// Not known: the exit status will decide.
    Open,
    /// The first verdict, the program's or a protocol error.
    Said(Done),
    /// Stopped from outside: this overrides any verdict.
    Stopped(RunStop),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunStop {
    Canceled,
    Exhausted,
}

/// The pure program-watch machine (see the module doc).
#[derive(Debug)]
pub struct Watch {
    phase: RunPhase,
    ending: RunEnding,
    exit: Option<ExitStatus>,
    stdout_eof: bool,
    /// stderr's last bytes, once it reached EOF.
    stderr_tail: Option<Vec<u8>>,
}

impl Default for Watch {
    fn default() -> Watch {
        Watch {
            phase: RunPhase::Running,
            ending: RunEnding::Open,
            exit: None,
            stdout_eof: false,
            stderr_tail: None,
        }
    }
}

impl Watch {
    /// One event at `now`: the new state, and the one thing to do.
    pub fn step(&mut self, seen: Seen, now: Instant) -> Act {
        let act = match (self.phase, seen) {
            (RunPhase::Done, Seen::Tick) => Act::Nothing,
            (RunPhase::WindingDown { until }, Seen::Tick) if now >= until => {
                self.phase = RunPhase::Done;
                Act::Nothing
            }
            (_, Seen::Tick) => Act::Nothing,
            (RunPhase::Done, seen) => {
                log::debug!("worker.exec ignoring {seen:?} in done pid={}", sys::getpid());
                Act::Nothing
            }
            (_, Seen::NotesClosed) => {
                self.phase = RunPhase::Done;
                Act::Nothing
            }
            (_, Seen::Exited(status)) => {
                self.exit = Some(status);
                self.wind_down(now + Duration::from_millis(PROGRAM_PIPES_DRAIN_MS));
                Act::Nothing
            }
            (_, Seen::StdoutEof) => {
                self.stdout_eof = true;
                Act::Nothing
            }
            (_, Seen::StderrTail(tail)) => {
                self.stderr_tail = Some(tail);
                Act::Nothing
            }
            (_, Seen::Exhausted) => {
                self.stop(RunStop::Exhausted);
                Act::Kill(libc::SIGKILL)
            }
            (_, Seen::Cancel) => {
                self.stop(RunStop::Canceled);
                Act::Kill(libc::SIGTERM)
            }
            (_, Seen::Heard(Heard::Nothing)) => Act::Nothing,
            (_, Seen::Heard(Heard::Verdict(done))) if self.is_open() => {
                self.ending = RunEnding::Said(done);
                self.wind_down(now + Duration::from_millis(PROGRAM_EXIT_GRACE_MS));
                Act::CloseStdin
            }
            (_, Seen::Heard(Heard::Broken(done))) => {
                if self.is_open() {
                    self.ending = RunEnding::Said(done);
                }
                Act::Kill(libc::SIGKILL)
            }
            (phase, seen) => {
                log::debug!("worker.exec ignoring {seen:?} in {phase:?} pid={}", sys::getpid());
                Act::Nothing
            }
        };
        if self.exit.is_some() && self.stdout_eof && self.stderr_tail.is_some() {
            self.phase = RunPhase::Done;
        }
        act
    }

    /// The first deadline stands: a program that exits during its grace
    /// does not get a shorter drain, nor one that gives its verdict late a
    /// longer one.
    fn wind_down(&mut self, until: Instant) {
        if self.phase == RunPhase::Running {
            self.phase = RunPhase::WindingDown { until };
        }
    }

    fn stop(&mut self, stop: RunStop) {
        if !matches!(self.ending, RunEnding::Stopped(_)) {
            self.ending = RunEnding::Stopped(stop);
        }
    }

    pub fn is_done(&self) -> bool {
        self.phase == RunPhase::Done
    }

    /// Whether the task's ending is still open (output still matters).
    pub fn is_open(&self) -> bool {
        self.ending == RunEnding::Open
    }

    /// How long the loop may wait for the next event.
    pub fn time_left(&self, now: Instant) -> Duration {
        match self.phase {
            RunPhase::Running => Duration::MAX,
            RunPhase::WindingDown { until } => until.saturating_duration_since(now),
            RunPhase::Done => Duration::ZERO,
        }
    }

    /// How the task ended.
    pub fn verdict(self) -> Done {
        match (self.ending, self.exit) {
            (RunEnding::Stopped(RunStop::Canceled), status) => program::canceled(status),
            (RunEnding::Stopped(RunStop::Exhausted), _) => program::exhausted(),
            (RunEnding::Said(done), _) => done,
            (RunEnding::Open, Some(status)) => program::judge_exit(status, self.stderr_tail.as_deref().unwrap_or(&[])),
            (RunEnding::Open, None) => {
                program::failed(Cause::Crashed, "the program's output ended but it did not exit".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Outcome;

    fn said(outcome: Outcome, cause: Cause, text: &str) -> Done {
        Done {
            outcome,
            cause,
            text: Some(text.into()),
        }
    }

    fn completed() -> Done {
        Done {
            outcome: Outcome::Completed,
            cause: Cause::Completed,
            text: None,
        }
    }

    fn broken(text: &str) -> Seen {
        Seen::Heard(Heard::Broken(said(Outcome::Failed, Cause::Failed, text)))
    }

    fn exited(code: i32) -> Seen {
        Seen::Exited(ExitStatus::Code(code))
    }

    /// Plays `(ms, event)` from one start; the actions and the machine.
    fn play(events: Vec<(u64, Seen)>) -> (Instant, Vec<Act>, Watch) {
        let t0 = Instant::now();
        let mut w = Watch::default();
        let acts = events
            .into_iter()
            .map(|(ms, seen)| w.step(seen, t0 + Duration::from_millis(ms)))
            .collect();
        (t0, acts, w)
    }

    /// All three of the program's ends closed, at `ms`.
    fn ends(ms: u64, code: i32, stderr: &[u8]) -> Vec<(u64, Seen)> {
        vec![
            (ms, exited(code)),
            (ms, Seen::StdoutEof),
            (ms, Seen::StderrTail(stderr.to_vec())),
        ]
    }

    /// The phase a row expects, its deadline in ms from the start.
    enum Want {
        Running,
        Until(u64),
        Done,
    }
    use Want::{Done as DONE, Running as RUNNING, Until};

    /// `[(ms, event)…] => actions, phase, verdict`, one run per row.
    macro_rules! runs {
        ($($name:ident: $events:expr => $acts:expr, $phase:expr, $verdict:expr;)*) => {$(
            #[test]
            fn $name() {
                let (t0, acts, w) = play($events);
                let phase = match $phase {
                    Want::Running => RunPhase::Running,
                    Want::Until(ms) => RunPhase::WindingDown { until: t0 + Duration::from_millis(ms) },
                    Want::Done => RunPhase::Done,
                };
                assert_eq!(acts, $acts, "actions");
                assert_eq!(w.phase, phase, "phase");
                assert_eq!(w.verdict(), $verdict, "verdict");
            }
        )*};
    }

    use Act::{CloseStdin, Kill, Nothing};

    runs! {
        exit_0_with_every_pipe_closed_completes:
            ends(10, 0, b"") => vec![Nothing; 3], DONE, completed();
        a_failure_says_the_status_and_stderr:
            ends(10, 3, b"  it broke\n") => vec![Nothing; 3], DONE,
            said(Outcome::Failed, Cause::Failed, "the program ended with exit status 3: it broke");
        a_signal_is_a_crash:
            vec![(5, Seen::Exited(ExitStatus::Signal(libc::SIGSEGV))), (5, Seen::StdoutEof), (5, Seen::StderrTail(vec![]))]
            => vec![Nothing; 3], DONE,
            said(Outcome::Failed, Cause::Crashed, "the program was killed by signal 11 (SIGSEGV, exit status 139)");
        pipes_get_their_drain_after_the_exit:
            vec![(100, exited(0)), (100 + PROGRAM_PIPES_DRAIN_MS - 1, Seen::Tick)]
            => vec![Nothing; 2], Until(100 + PROGRAM_PIPES_DRAIN_MS), completed();
        a_helper_holding_the_pipes_does_not_hold_the_task:
            vec![(100, exited(0)), (100 + PROGRAM_PIPES_DRAIN_MS, Seen::Tick)]
            => vec![Nothing; 2], DONE, completed();
        a_tick_while_running_changes_nothing:
            vec![(1_000_000, Seen::Tick), (1_000_000, Seen::StdoutEof)] => vec![Nothing; 2], RUNNING, said(
                Outcome::Failed, Cause::Crashed, "the program's output ended but it did not exit");
        a_verdict_closes_stdin_and_grants_the_exit_grace:
            vec![(10, Seen::Heard(Heard::Verdict(completed())))]
            => vec![CloseStdin], Until(10 + PROGRAM_EXIT_GRACE_MS), completed();
        the_first_deadline_stands:
            vec![(10, Seen::Heard(Heard::Verdict(completed()))), (20, exited(0))]
            => vec![CloseStdin, Nothing], Until(10 + PROGRAM_EXIT_GRACE_MS), completed();
        the_verdict_beats_the_exit_status:
            vec![(10, Seen::Heard(Heard::Verdict(said(Outcome::Rejected, Cause::Refused, "no")))), (20, exited(1)),
                 (20, Seen::StdoutEof), (20, Seen::StderrTail(vec![]))]
            => vec![CloseStdin, Nothing, Nothing, Nothing], DONE, said(Outcome::Rejected, Cause::Refused, "no");
        a_program_past_its_grace_is_left_to_procman:
            vec![(10, Seen::Heard(Heard::Verdict(completed()))), (10 + PROGRAM_EXIT_GRACE_MS, Seen::Tick)]
            => vec![CloseStdin, Nothing], DONE, completed();
        the_first_verdict_stands:
            vec![(10, Seen::Heard(Heard::Verdict(completed()))), (11, Seen::Heard(Heard::Verdict(said(
                Outcome::Failed, Cause::Failed, "late"))))]
            => vec![CloseStdin, Nothing], Until(10 + PROGRAM_EXIT_GRACE_MS), completed();
        cancel_sends_sigterm_and_names_the_exit:
            vec![(10, Seen::Cancel), (20, Seen::Exited(ExitStatus::Signal(libc::SIGTERM)))]
            => vec![Kill(libc::SIGTERM), Nothing], Until(20 + PROGRAM_PIPES_DRAIN_MS),
            said(Outcome::Canceled, Cause::Canceled,
                 "canceled; the program was killed by signal 15 (SIGTERM, exit status 143)");
        cancel_overrides_a_verdict:
            vec![(10, Seen::Heard(Heard::Verdict(completed()))), (20, Seen::Cancel), (10 + PROGRAM_EXIT_GRACE_MS, Seen::Tick)]
            => vec![CloseStdin, Kill(libc::SIGTERM), Nothing], DONE,
            said(Outcome::Canceled, Cause::Canceled, "canceled");
        the_budget_kills_and_outranks_later_words:
            vec![(10, Seen::Exhausted), (11, broken("bad line")), (12, Seen::Cancel)]
            => vec![Kill(libc::SIGKILL), Kill(libc::SIGKILL), Kill(libc::SIGTERM)], RUNNING,
            said(Outcome::Failed, Cause::Exhausted, "the program's output went over tasks.output_max_bytes");
        broken_output_kills_and_fails:
            vec![(10, broken("the program's output line 2 is not valid jsonl: not JSON"))]
            => vec![Kill(libc::SIGKILL)], RUNNING,
            said(Outcome::Failed, Cause::Failed, "the program's output line 2 is not valid jsonl: not JSON");
        broken_after_a_verdict_still_kills_but_the_verdict_stands:
            vec![(10, Seen::Heard(Heard::Verdict(completed()))), (11, broken("stdin full"))]
            => vec![CloseStdin, Kill(libc::SIGKILL)], Until(10 + PROGRAM_EXIT_GRACE_MS),
            completed();
        notes_closing_ends_the_watch:
            vec![(10, Seen::NotesClosed), (11, Seen::Cancel)] => vec![Nothing, Nothing], DONE, said(
                Outcome::Failed, Cause::Crashed, "the program's output ended but it did not exit");
        nothing_changes_once_done:
            {
                let mut e = ends(10, 0, b"");
                e.push((11, Seen::Exhausted));
                e.push((12, Seen::Heard(Heard::Verdict(said(Outcome::Failed, Cause::Failed, "late")))));
                e
            } => vec![Nothing; 5], DONE, completed();
    }

    #[test]
    fn the_wait_is_bounded_only_while_winding_down() {
        let t0 = Instant::now();
        let mut w = Watch::default();
        assert_eq!(w.time_left(t0), Duration::MAX, "a running program may take all day");
        assert!(w.is_open());
        w.step(Seen::Heard(Heard::Verdict(completed())), t0);
        assert!(!w.is_open(), "later output changes nothing");
        assert_eq!(w.time_left(t0), Duration::from_millis(PROGRAM_EXIT_GRACE_MS));
        assert_eq!(w.time_left(t0 + Duration::from_secs(60)), Duration::ZERO);
        w.step(Seen::NotesClosed, t0);
        assert!(w.is_done());
    }
}
