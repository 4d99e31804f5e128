//! The `exec` runner's `text` protocol: the message's text goes to stdin,
//! then EOF; stdout streams back as one artifact in chunks (`append`, then
//! an empty `lastChunk`); exit 0 is COMPLETED, anything else FAILED with
//! the tail of stderr.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use super::program::{self, Note, Program, PIPES_DRAIN};
use super::{Done, Event, Link};
use crate::control::{Cause, FromWorker};
use crate::sys::{self, ExitStatus};
use crate::wire::{Artifact, Message, Part};

const READ_CHUNK_BYTES: usize = 64 * 1024;

pub fn run(prog: &Program, message: &Message, link: &Arc<Link>, events: &Receiver<Event>) -> Done {
    let mut running = match program::start(prog) {
        Ok(r) => r,
        Err(done) => return done,
    };
    if let Some(mut stdin) = running.stdin.take() {
        let text = message.text();
        // A program that never reads stdin must not block us: write in a
        // thread, and ignore EPIPE.
        std::thread::spawn(move || {
            let _ = stdin.write_all(text.as_bytes());
        });
    }
    if let Some(stdout) = running.stdout.take() {
        let (tx, link) = (running.tx.clone(), link.clone());
        let output_max = prog.output_max_bytes;
        // Detached: a grandchild may hold stdout open after the program exits.
        std::thread::spawn(move || stream_stdout(stdout, &link, output_max, &tx));
    }
    let (pid, notes) = (running.pid, running.notes);
    drop(running.tx);
    let mut stop: Option<Cause> = None;
    let mut stderr_tail = Vec::new();
    let (mut stdout_done, mut stderr_done) = (false, false);
    let status = loop {
        crossbeam_channel::select! {
            recv(notes) -> note => match note {
                Ok(Note::Exited(s)) => break s,
                Ok(Note::Exhausted) => {
                    stop.get_or_insert(Cause::Exhausted);
                    let _ = sys::kill_pid(pid, libc::SIGKILL);
                }
                Ok(Note::StderrTail(t)) => {
                    stderr_tail = t;
                    stderr_done = true;
                }
                Ok(Note::StdoutEof) => stdout_done = true,
                Ok(_) => {}
                Err(_) => break ExitStatus::Code(1),
            },
            recv(events) -> ev => match ev {
                Ok(Event::Cancel) => {
                    stop.get_or_insert(Cause::Cancelled);
                    let _ = sys::kill_pid(pid, libc::SIGTERM);
                }
                Ok(Event::Input(_)) => {
                    log::warn!("worker.text ignoring a follow-up message: the text protocol has one turn");
                }
                Err(_) => {}
            },
        }
    };
    // Let the pipes drain so no output is lost, but not forever.
    let deadline = Instant::now() + PIPES_DRAIN;
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
            Ok(_) => {}
            Err(_) => break,
        }
    }
    match stop {
        Some(Cause::Cancelled) => program::canceled(Some(status)),
        Some(_) => program::exhausted(),
        None => program::judge_exit(status, &stderr_tail),
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
        if !program::charge_output(&mut total, n, output_max, tx) {
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
