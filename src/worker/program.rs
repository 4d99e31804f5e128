//! Starting a task's program for the `exec` runner: the command set up
//! (scrubbed environment, rlimits, PDEATHSIG), a thread that waits for its
//! exit, a thread that keeps stderr's tail, one channel of [`Note`]s the
//! runner loop (`exec`) selects on, and [`Stdin`], a writer thread, so that
//! writing to the program never waits on it reading (a program that prints
//! a lot before it reads would deadlock a loop that does both). Exit codes
//! use the shell's vocabulary: 127 not found, 126 not executable, 128+N
//! signal; [`ended`] puts them in the manual's words, and the verdicts
//! below put them in a task's.

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

use crossbeam_channel::{Receiver, Sender};

use super::Done;
use crate::control::{Cause, Outcome, Rlimits};
use crate::limits::{STDERR_TAIL_BYTES, STDIN_QUEUE_MAX_MESSAGES};
use crate::sys::{self, ExitStatus, Rlimit};

/// Variables a program inherits from agentd's environment; nothing else
/// leaks (agent.env adds more).
pub const ENV_ALLOW: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR"];
pub struct Program {
    pub argv: Vec<String>,
    pub workdir: Option<String>,
    pub env: Vec<(String, String)>,
    pub rlimits: Rlimits,
    pub output_max_bytes: u64,
}

/// What the runner loop hears about the program.
#[derive(Debug)]
pub enum Note {
    Exited(ExitStatus),
    StdoutEof,
    /// Output went over tasks.output_max_bytes.
    Exhausted,
    StderrTail(Vec<u8>),
    /// A piece of stdout as the protocol's reader cuts it: a text
    /// program's bytes as read, a jsonl program's line (without newline).
    Output(Vec<u8>),
    /// A piece over the reader's limit (a jsonl line too long).
    TooLong,
}

/// A started program: its pid, its pipes, and the channel of notes.
pub struct Running {
    pub pid: i32,
    pub stdin: Stdin,
    pub stdout: Option<ChildStdout>,
    pub tx: Sender<Note>,
    pub notes: Receiver<Note>,
}

/// Starts the program with piped stdio; the exit waiter and the stderr
/// tail keeper run in detached threads.
pub fn start(prog: &Program) -> Result<Running, Done> {
    let mut cmd = Command::new(&prog.argv[0]);
    cmd.args(&prog.argv[1..])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in ENV_ALLOW {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    cmd.envs(prog.env.iter().map(|(k, v)| (k, v)));
    if let Some(dir) = &prog.workdir {
        cmd.current_dir(dir);
    }
    let mut rlimits = vec![(Rlimit::CoreSize, 0)];
    for (which, v) in [
        (Rlimit::AddressSpace, prog.rlimits.as_bytes),
        (Rlimit::CpuSeconds, prog.rlimits.cpu_secs),
        (Rlimit::OpenFiles, prog.rlimits.nofile),
    ] {
        if v > 0 {
            rlimits.push((which, v));
        }
    }
    // The program stays in the worker's process group (the ladder reaches
    // it) and dies with the worker.
    sys::prepare_child(
        &mut cmd,
        sys::ChildSetup {
            parent_death: Some(libc::SIGKILL),
            rlimits,
            default_policy: super::forkserver::helpers_batched(),
        },
    );
    let mut child = cmd.spawn().map_err(|e| {
        let code = match e.kind() {
            std::io::ErrorKind::NotFound => 127,
            _ => 126,
        };
        failed(
            Cause::Failed,
            format!("cannot start `{}`: {e} (exit status {code})", prog.argv[0]),
        )
    })?;
    let pid = child.id() as i32;
    let (tx, notes) = crossbeam_channel::unbounded::<Note>();
    if let Some(stderr) = child.stderr.take() {
        let tx = tx.clone();
        std::thread::spawn(move || keep_tail(stderr, &tx));
    }
    let stdin = Stdin::spawn(child.stdin.take());
    let stdout = child.stdout.take();
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let status = match child.wait() {
                Ok(s) => match s.signal() {
                    Some(sig) => ExitStatus::Signal(sig),
                    None => ExitStatus::Code(s.code().unwrap_or(1)),
                },
                Err(_) => ExitStatus::Code(1),
            };
            let _ = tx.send(Note::Exited(status));
        });
    }
    Ok(Running {
        pid,
        stdin,
        stdout,
        tx,
        notes,
    })
}

/// The program's standard input, written by a thread of its own from a
/// bounded queue: the protocol loop never blocks on a program that is not
/// reading, and keeps reading the program's output meanwhile.
pub struct Stdin {
    queue: Option<Sender<Vec<u8>>>,
}

/// Why bytes could not be queued for the program's stdin.
#[derive(Debug, PartialEq, Eq)]
pub enum StdinError {
    /// STDIN_QUEUE_MAX_MESSAGES are already waiting: the program is not
    /// reading its standard input.
    Full,
}

impl std::fmt::Display for StdinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StdinError::Full => write!(
                f,
                "the program is not reading its standard input: {STDIN_QUEUE_MAX_MESSAGES} messages are \
                 already waiting for it"
            ),
        }
    }
}

impl Stdin {
    fn spawn(stdin: Option<ChildStdin>) -> Stdin {
        let Some(mut stdin) = stdin else {
            return Stdin { queue: None };
        };
        let (tx, rx) = crossbeam_channel::bounded::<Vec<u8>>(STDIN_QUEUE_MAX_MESSAGES);
        // Detached: it may stay blocked in write(2) on a pipe that a
        // grandchild holds open and never reads; the worker's exit ends it.
        let spawned = std::thread::Builder::new().name("stdin".into()).spawn(move || {
            for bytes in rx {
                // EPIPE: the program closed its stdin; it simply stops
                // hearing from us (not an error of the task).
                if stdin.write_all(&bytes).and_then(|()| stdin.flush()).is_err() {
                    return;
                }
            }
            // The queue closed: dropping `stdin` here is the program's EOF.
        });
        match spawned {
            Ok(_) => Stdin { queue: Some(tx) },
            Err(e) => {
                log::error!(
                    "worker.stdin pid={} error={e}; the program gets no input",
                    sys::getpid()
                );
                Stdin { queue: None }
            }
        }
    }

    /// Queues `bytes` for the program without waiting. A program that has
    /// closed its stdin (or had it closed) drops them silently.
    pub fn send(&mut self, bytes: Vec<u8>) -> Result<(), StdinError> {
        let Some(queue) = &self.queue else {
            return Ok(());
        };
        match queue.try_send(bytes) {
            Ok(()) => Ok(()),
            Err(crossbeam_channel::TrySendError::Full(_)) => Err(StdinError::Full),
            Err(crossbeam_channel::TrySendError::Disconnected(_)) => {
                self.queue = None;
                Ok(())
            }
        }
    }

    /// EOF for the program once what is queued has been written.
    pub fn close(&mut self) {
        self.queue = None;
    }
}

/// Counts `n` more bytes of the program's stdout against its budget;
/// false (and `Note::Exhausted` sent) once it is over.
pub fn charge_output(total: &mut u64, n: usize, max: u64, tx: &Sender<Note>) -> bool {
    *total += n as u64;
    if *total > max {
        let _ = tx.send(Note::Exhausted);
        return false;
    }
    true
}

pub fn failed(cause: Cause, text: String) -> Done {
    Done {
        outcome: Outcome::Failed,
        cause,
        text: Some(text),
    }
}

/// The verdict on a program that ended on its own without saying how.
pub fn judge_exit(status: ExitStatus, stderr_tail: &[u8]) -> Done {
    if status == ExitStatus::Code(0) {
        return Done {
            outcome: Outcome::Completed,
            cause: Cause::Completed,
            text: None,
        };
    }
    let tail = String::from_utf8_lossy(stderr_tail);
    let tail = tail.trim();
    let text = if tail.is_empty() {
        format!("the program {}", ended(status))
    } else {
        format!("the program {}: {tail}", ended(status))
    };
    let cause = if matches!(status, ExitStatus::Signal(_)) {
        Cause::Crashed
    } else {
        Cause::Failed
    };
    failed(cause, text)
}

/// How a program ended, as the manual words it after "the program ":
/// `ended with exit status 3`, `was killed by signal 11 (SIGSEGV, exit
/// status 139)`.
pub fn ended(status: ExitStatus) -> String {
    match status {
        ExitStatus::Code(_) => format!("ended with {status}"),
        ExitStatus::Signal(_) => format!("was {status}"),
    }
}

pub fn canceled(status: Option<ExitStatus>) -> Done {
    Done {
        outcome: Outcome::Canceled,
        cause: Cause::Canceled,
        text: Some(match status {
            Some(s) => format!("canceled; the program {}", ended(s)),
            None => "canceled".into(),
        }),
    }
}

pub fn exhausted() -> Done {
    failed(
        Cause::Exhausted,
        "the program's output went over tasks.output_max_bytes".into(),
    )
}

/// Reads stderr to the end, keeping only its last bytes.
fn keep_tail(mut stderr: impl Read, tx: &Sender<Note>) {
    let mut tail: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stderr.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > STDERR_TAIL_BYTES {
                    tail.drain(..tail.len() - STDERR_TAIL_BYTES);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = tx.send(Note::StderrTail(tail));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn exits_in_the_manuals_words() {
        assert_eq!(ended(ExitStatus::Code(3)), "ended with exit status 3");
        assert_eq!(
            ended(ExitStatus::Signal(libc::SIGSEGV)),
            "was killed by signal 11 (SIGSEGV, exit status 139)"
        );
        let done = judge_exit(ExitStatus::Code(3), b"  it broke\n");
        assert_eq!(
            done.text.as_deref(),
            Some("the program ended with exit status 3: it broke")
        );
        assert_eq!(done.cause, Cause::Failed);
        let done = judge_exit(ExitStatus::Signal(libc::SIGKILL), b"");
        assert_eq!(
            done.text.as_deref(),
            Some("the program was killed by signal 9 (SIGKILL, exit status 137)")
        );
        assert_eq!(done.cause, Cause::Crashed);
        assert_eq!(
            canceled(Some(ExitStatus::Signal(libc::SIGTERM))).text.as_deref(),
            Some("canceled; the program was killed by signal 15 (SIGTERM, exit status 143)")
        );
    }

    /// A program that never reads: sending never blocks, and the queue
    /// says so once it is full.
    #[test]
    fn stdin_never_blocks_and_refuses_past_its_queue() {
        let mut child = Command::new("sleep").arg("30").stdin(Stdio::piped()).spawn().unwrap();
        let mut stdin = Stdin::spawn(child.stdin.take());
        let big = vec![b'x'; 1024 * 1024]; // more than a pipe holds
        let started = std::time::Instant::now();
        let refused = (0..STDIN_QUEUE_MAX_MESSAGES + 2).find(|_| stdin.send(big.clone()).is_err());
        assert!(started.elapsed() < Duration::from_secs(5), "a send blocked");
        let n = refused.expect("the queue filled up");
        assert!(
            (STDIN_QUEUE_MAX_MESSAGES..=STDIN_QUEUE_MAX_MESSAGES + 1).contains(&n),
            "{n}"
        );
        assert_eq!(
            stdin.send(vec![1]).unwrap_err().to_string(),
            "the program is not reading its standard input: 8 messages are already waiting for it"
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}
