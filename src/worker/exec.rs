//! The `exec` runner, `text` protocol: any program becomes an agent.
//! The message's text goes to stdin, then EOF; stdout streams back as one
//! artifact in chunks (`append`, then an empty `lastChunk`); exit 0 is
//! COMPLETED, anything else FAILED with the tail of stderr. Exit codes use
//! the shell's vocabulary: 127 not found, 126 not executable, 128+N signal.

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::{Done, Event, Link};
use crate::a2a::types::{Artifact, Message, Part};
use crate::control::{Cause, FromWorker, Outcome, Rlimits};
use crate::limits::STDERR_TAIL_BYTES;
use crate::sys::{self, ExitStatus, Rlimit};

/// Variables a program inherits from agentd's environment; nothing else
/// leaks (agent.env adds more).
pub const ENV_ALLOW: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR",
];
/// How long to wait for stdout/stderr EOF once the program exited (a
/// background grandchild may hold them open).
const PIPES_DRAIN: Duration = Duration::from_millis(500);
const READ_CHUNK_BYTES: usize = 64 * 1024;

pub struct Program {
    pub argv: Vec<String>,
    pub workdir: Option<String>,
    pub env: Vec<(String, String)>,
    pub rlimits: Rlimits,
    pub output_max_bytes: u64,
}

/// Everything the runner waits on, merged into one channel.
enum Note {
    Exited(ExitStatus),
    StdoutEof,
    Exhausted,
    StderrTail(Vec<u8>),
}

pub fn run_text(
    prog: &Program,
    message: &Message,
    link: &Arc<Link>,
    events: &Receiver<Event>,
) -> Done {
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
    sys::prepare_child(
        &mut cmd,
        sys::ChildSetup {
            parent_death: Some(libc::SIGKILL),
            rlimits,
            ..Default::default()
        },
    );
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => 127,
                std::io::ErrorKind::PermissionDenied => 126,
                _ => 126,
            };
            return failed(
                Cause::Crashed,
                format!("cannot start `{}`: {e} (exit status {code})", prog.argv[0]),
            );
        }
    };
    let pid = child.id() as i32;
    let (tx, rx) = crossbeam_channel::unbounded::<Note>();
    if let Some(mut stdin) = child.stdin.take() {
        let text = message.text();
        // A program that never reads stdin must not block us: write in a
        // thread, and ignore EPIPE.
        std::thread::spawn(move || {
            let _ = stdin.write_all(text.as_bytes());
        });
    }
    if let Some(stderr) = child.stderr.take() {
        let tx = tx.clone();
        std::thread::spawn(move || keep_tail(stderr, &tx));
    }
    let output_max = prog.output_max_bytes;
    if let Some(stdout) = child.stdout.take() {
        let (tx, link) = (tx.clone(), link.clone());
        // Detached: a grandchild may hold stdout open after the program exits.
        std::thread::spawn(move || stream_stdout(stdout, &link, output_max, &tx));
    }
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
    drop(tx);
    supervise(pid, &rx, events)
}

/// Waits for the program to end, reacting to cancel and to the output cap.
fn supervise(pid: i32, notes: &Receiver<Note>, events: &Receiver<Event>) -> Done {
    let mut stop: Option<Cause> = None;
    let mut stderr_tail = Vec::new();
    let status = loop {
        crossbeam_channel::select! {
            recv(notes) -> note => match note {
                Ok(Note::Exited(s)) => break s,
                Ok(Note::Exhausted) => {
                    stop.get_or_insert(Cause::Exhausted);
                    let _ = sys::kill_pid(pid, libc::SIGKILL);
                }
                Ok(Note::StderrTail(t)) => stderr_tail = t,
                Ok(Note::StdoutEof) => {}
                Err(_) => break ExitStatus::Code(1),
            },
            recv(events) -> ev => match ev {
                Ok(Event::Cancel) => {
                    stop.get_or_insert(Cause::Cancelled);
                    let _ = sys::kill_pid(pid, libc::SIGTERM);
                }
                Ok(Event::Input(_)) => {
                    log::warn!("worker.exec ignoring a follow-up message: the text protocol has one turn");
                }
                Err(_) => {}
            },
        }
    };
    // Let the pipes drain so no output is lost, but not forever.
    let deadline = std::time::Instant::now() + PIPES_DRAIN;
    let (mut stdout_done, mut stderr_done) = (false, false);
    while !(stdout_done && stderr_done) {
        match notes.recv_deadline(deadline) {
            Ok(Note::StdoutEof) => stdout_done = true,
            Ok(Note::StderrTail(t)) => {
                stderr_tail = t;
                stderr_done = true;
            }
            Ok(Note::Exhausted) => {
                stop.get_or_insert(Cause::Exhausted);
            }
            Ok(Note::Exited(_)) => {}
            Err(_) => break,
        }
    }
    match stop {
        Some(Cause::Cancelled) => Done {
            outcome: Outcome::Canceled,
            cause: Cause::Cancelled,
            text: Some(format!("canceled; the program ended with {status}")),
        },
        Some(Cause::Exhausted) => failed(
            Cause::Exhausted,
            "the program's output went over tasks.output_max_bytes".into(),
        ),
        _ => match status {
            ExitStatus::Code(0) => Done {
                outcome: Outcome::Completed,
                cause: Cause::Completed,
                text: None,
            },
            other => {
                let tail = String::from_utf8_lossy(&stderr_tail);
                let tail = tail.trim();
                let text = if tail.is_empty() {
                    format!("the program ended with {other}")
                } else {
                    format!("the program ended with {other}: {tail}")
                };
                let cause = if matches!(other, ExitStatus::Signal(_)) {
                    Cause::Crashed
                } else {
                    Cause::Failed
                };
                failed(cause, text)
            }
        },
    }
}

fn failed(cause: Cause, text: String) -> Done {
    Done {
        outcome: Outcome::Failed,
        cause,
        text: Some(text),
    }
}

/// Forwards stdout as artifact chunks as it arrives, whole UTF-8 characters
/// only; ends with an empty `lastChunk` so clients know the artifact is done.
fn stream_stdout(mut stdout: impl Read, link: &Link, output_max: u64, tx: &Sender<Note>) {
    let artifact_id = crate::ids::new_id();
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let mut pending: Vec<u8> = Vec::new();
    let mut total: u64 = 0;
    let mut first = true;
    let send = |text: String, last: bool, first: &mut bool| {
        link.send(&FromWorker::Artifact {
            artifact: Artifact {
                artifact_id: artifact_id.clone(),
                name: Some("output".into()),
                description: None,
                parts: vec![Part::text(text)],
                metadata: None,
                extensions: Vec::new(),
            },
            append: !*first,
            last_chunk: last,
        });
        *first = false;
    };
    loop {
        let n = match stdout.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        total += n as u64;
        if total > output_max {
            let _ = tx.send(Note::Exhausted);
            break;
        }
        pending.extend_from_slice(&buf[..n]);
        let keep = incomplete_utf8_tail(&pending);
        let cut = pending.len() - keep;
        if cut > 0 {
            let text = String::from_utf8_lossy(&pending[..cut]).into_owned();
            pending.drain(..cut);
            send(text, false, &mut first);
        }
    }
    let rest = String::from_utf8_lossy(&pending).into_owned();
    send(rest, true, &mut first);
    let _ = tx.send(Note::StdoutEof);
}

/// Bytes at the end of `b` that start a UTF-8 character not yet complete.
fn incomplete_utf8_tail(b: &[u8]) -> usize {
    for back in 1..=b.len().min(3) {
        let byte = b[b.len() - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte: look further back
        }
        let need = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if need > back { back } else { 0 };
    }
    0
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
    use super::incomplete_utf8_tail;

    #[test]
    fn keeps_only_incomplete_characters() {
        let euro = "€".as_bytes(); // 3 bytes
        assert_eq!(incomplete_utf8_tail(b"abc"), 0);
        assert_eq!(incomplete_utf8_tail(euro), 0);
        assert_eq!(incomplete_utf8_tail(&euro[..1]), 1);
        assert_eq!(incomplete_utf8_tail(&euro[..2]), 2);
        let mut s = b"ab".to_vec();
        s.extend_from_slice(&"😀".as_bytes()[..3]);
        assert_eq!(incomplete_utf8_tail(&s), 3);
        assert_eq!(incomplete_utf8_tail(&[0xff]), 0);
    }
}
