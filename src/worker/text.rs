//! The `exec` runner's `text` protocol: the message's text goes to stdin,
//! then EOF; stdout streams back as one artifact in chunks (`append`, then
//! an empty `lastChunk`); exit 0 is COMPLETED, anything else FAILED with
//! the tail of stderr. A [`Protocol`] of the runner loop in `exec`, which
//! watches the program and decides how it ended.

use std::process::ChildStdout;

use crossbeam_channel::{Receiver, Sender};

use super::exec::{Heard, Protocol};
use super::program::{self, Note, Stdin};
use super::Link;
use crate::control::FromWorker;
use crate::limits::TEXT_CHUNK_MAX_BYTES;
use crate::wire::{Artifact, Message, Part};

/// The protocol: one turn in, stdout out as it comes.
pub struct Text<'a> {
    message: &'a Message,
    out: Output<'a>,
}

impl<'a> Text<'a> {
    pub fn new(message: &'a Message, link: &'a Link) -> Text<'a> {
        Text {
            message,
            out: Output::new(link),
        }
    }
}

impl Protocol for Text<'_> {
    const READ: fn(ChildStdout, u64, &Sender<Note>, &Receiver<Vec<u8>>) = read_stdout;

    fn begin(&mut self, stdin: &mut Stdin) {
        // The stdin thread writes it while the loop reads: a program that
        // never reads, or prints a lot first, blocks neither. Then EOF.
        let _ = stdin.send(self.message.text().into_bytes());
        stdin.close();
    }

    /// Output is relayed until the end, even after a cancel or the budget:
    /// what the program printed before it stopped is part of its result.
    fn output(&mut self, bytes: &mut Vec<u8>, _over: bool) -> Heard {
        // Taken whole: the bytes become the chunk's text as they are.
        self.out.push(std::mem::take(bytes));
        Heard::Nothing
    }

    fn too_long(&mut self) -> Heard {
        Heard::Nothing // stdout is read in chunks: nothing is too long
    }

    fn input(&mut self, _message: Message, _stdin: &mut Stdin) -> Heard {
        log::warn!(
            "worker.text ignoring a follow-up message pid={}: the text protocol has one turn",
            crate::sys::getpid()
        );
        Heard::Nothing
    }

    fn finish(&mut self) {
        self.out.finish();
    }
}

/// Reads stdout as it comes and counts the output budget; the protocol
/// loop turns the bytes into chunks, so nothing reaches the supervisor
/// after the task's `done`, even from a helper that keeps writing.
fn read_stdout(stdout: ChildStdout, output_max: u64, tx: &Sender<Note>, _spares: &Receiver<Vec<u8>>) {
    use std::os::fd::AsRawFd;
    let mut total: u64 = 0;
    loop {
        // Each piece is read into the buffer it is sent in, and becomes
        // the chunk's text as it is: the bytes are not copied on the way.
        let mut piece = Vec::with_capacity(TEXT_CHUNK_MAX_BYTES);
        let n = match crate::sys::read_appending(stdout.as_raw_fd(), &mut piece, TEXT_CHUNK_MAX_BYTES) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if !program::charge_output(&mut total, n, output_max, tx) {
            break;
        }
        if tx.send(Note::Output(piece)).is_err() {
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

    /// Sends what `bytes` completes, keeping an incomplete last character
    /// for the next piece. Valid UTF-8 (the common case) becomes the text
    /// as it is, without a copy.
    fn push(&mut self, bytes: Vec<u8>) {
        let mut whole = if self.pending.is_empty() {
            bytes
        } else {
            let mut joined = std::mem::take(&mut self.pending);
            joined.extend_from_slice(&bytes);
            joined
        };
        let cut = whole.len() - incomplete_utf8_tail(&whole);
        self.pending = whole.split_off(cut);
        if !whole.is_empty() {
            let text = String::from_utf8(whole).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
            self.send(text, false);
        }
    }

    fn finish(&mut self) {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        self.send(rest, true);
    }

    fn send(&mut self, text: String, last: bool) {
        // A chunk is at most TEXT_CHUNK_MAX_BYTES of text, escaped at most 6×:
        // far under any frame limit.
        let _ = self.link.send(&FromWorker::Artifact {
            artifact: Box::new(Artifact {
                artifact_id: self.artifact_id.clone(),
                name: Some("output".into()),
                description: None,
                parts: vec![Part::text(text)],
                metadata: None,
                extensions: Vec::new(),
            }),
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
