//! The `exec` runner's `text` protocol: the message's text goes to stdin,
//! then EOF; stdout streams back as one artifact in chunks (`append`, then
//! an empty `lastChunk`); exit 0 is COMPLETED, anything else FAILED with
//! the tail of stderr.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    // The stdin thread writes while this loop reads: a program that never
    // reads, or prints a lot first, blocks neither. Then EOF.
    let _ = running.stdin.send(message.text().into_bytes());
    running.stdin.close();
    if let Some(stdout) = running.stdout.take() {
        let tx = running.tx.clone();
        let output_max = prog.output_max_bytes;
        // Detached: a grandchild may hold stdout open after the program exits.
        std::thread::spawn(move || read_stdout(stdout, output_max, &tx));
    }
    let (pid, notes) = (running.pid, running.notes);
    drop(running.tx);
    let mut out = Output::new(link);
    let mut stop: Option<Cause> = None;
    let mut status: Option<ExitStatus> = None;
    let mut stderr_tail = Vec::new();
    let (mut stdout_done, mut stderr_done) = (false, false);
    // Once the program has exited, its pipes get PIPES_DRAIN to reach EOF:
    // a helper it left behind may hold them open for good.
    let mut drain_until: Option<Instant> = None;
    while !(status.is_some() && stdout_done && stderr_done) {
        let timeout = match drain_until {
            Some(d) if d <= Instant::now() => break,
            Some(d) => d - Instant::now(),
            None => Duration::from_secs(3600),
        };
        crossbeam_channel::select! {
            recv(notes) -> note => match note {
                Ok(Note::Output(bytes)) => out.push(&bytes),
                Ok(Note::Exited(s)) => {
                    status = Some(s);
                    drain_until = Some(Instant::now() + PIPES_DRAIN);
                }
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
                Err(_) => break,
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
            default(timeout) => {}
        }
    }
    out.finish();
    let status = status.unwrap_or(ExitStatus::Code(1));
    match stop {
        Some(Cause::Cancelled) => program::canceled(Some(status)),
        Some(_) => program::exhausted(),
        None => program::judge_exit(status, &stderr_tail),
    }
}

/// Reads stdout as it comes and counts the output budget; the protocol
/// loop turns the bytes into chunks, so nothing reaches the supervisor
/// after the task's `done`, even from a helper that keeps writing.
fn read_stdout(mut stdout: impl Read, output_max: u64, tx: &Sender<Note>) {
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let mut total: u64 = 0;
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
        if tx.send(Note::Output(buf[..n].to_vec())).is_err() {
            return;
        }
    }
    let _ = tx.send(Note::StdoutEof);
}

/// stdout as one artifact in chunks, whole UTF-8 characters only; it ends
/// with a `lastChunk` (possibly empty) so clients know the artifact is done.
struct Output<'a> {
    link: &'a Link,
    artifact_id: String,
    pending: Vec<u8>,
    first: bool,
}

impl<'a> Output<'a> {
    fn new(link: &'a Link) -> Output<'a> {
        Output {
            link,
            artifact_id: crate::ids::new_id(),
            pending: Vec::new(),
            first: true,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        let cut = self.pending.len() - incomplete_utf8_tail(&self.pending);
        if cut > 0 {
            let text = String::from_utf8_lossy(&self.pending[..cut]).into_owned();
            self.pending.drain(..cut);
            self.send(text, false);
        }
    }

    fn finish(mut self) {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.send(rest, true);
    }

    fn send(&mut self, text: String, last: bool) {
        // A chunk is at most READ_CHUNK_BYTES of text, escaped at most 6×:
        // far under any frame limit.
        let _ = self.link.send(&FromWorker::Artifact {
            artifact: Artifact {
                artifact_id: self.artifact_id.clone(),
                name: Some("output".into()),
                description: None,
                parts: vec![Part::text(text)],
                metadata: None,
                extensions: Vec::new(),
            },
            append: !self.first,
            last_chunk: last,
        });
        self.first = false;
    }
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
