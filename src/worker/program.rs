//! Starting and watching a task's program, shared by the `exec` runner's
//! protocols: the command set up (scrubbed environment, rlimits, PDEATHSIG),
//! a thread that waits for its exit, a thread that keeps stderr's tail, and
//! one channel of [`Note`]s the protocol loop selects on. Exit codes use the
//! shell's vocabulary: 127 not found, 126 not executable, 128+N signal.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::Done;
use crate::control::{Cause, Outcome, Rlimits};
use crate::limits::STDERR_TAIL_BYTES;
use crate::sys::{self, ExitStatus, Rlimit};

/// Variables a program inherits from agentd's environment; nothing else
/// leaks (agent.env adds more).
pub const ENV_ALLOW: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR"];
/// How long to wait for stdout/stderr EOF once the program exited (a
/// background grandchild may hold them open).
pub const PIPES_DRAIN: Duration = Duration::from_millis(500);

pub struct Program {
    pub argv: Vec<String>,
    pub workdir: Option<String>,
    pub env: Vec<(String, String)>,
    pub rlimits: Rlimits,
    pub output_max_bytes: u64,
}

/// What the protocol loop hears about the program.
pub enum Note {
    Exited(ExitStatus),
    StdoutEof,
    /// Output went over tasks.output_max_bytes.
    Exhausted,
    StderrTail(Vec<u8>),
    /// One line of a jsonl program's stdout (without the newline).
    Line(Vec<u8>),
    LineTooLong,
}

/// A started program: its pid, its pipes, and the channel of notes.
pub struct Running {
    pub pid: i32,
    pub stdin: Option<ChildStdin>,
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
            ..Default::default()
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
    let stdin = child.stdin.take();
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
        format!("the program {status}")
    } else {
        format!("the program {status}: {tail}")
    };
    let cause = if matches!(status, ExitStatus::Signal(_)) {
        Cause::Crashed
    } else {
        Cause::Failed
    };
    failed(cause, text)
}

pub fn canceled(status: Option<ExitStatus>) -> Done {
    Done {
        outcome: Outcome::Canceled,
        cause: Cause::Cancelled,
        text: Some(match status {
            Some(s) => format!("canceled; the program {s}"),
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
