//! procman's end of one worker's control channel, non-blocking both ways:
//! a pipe from the worker and a pipe to it. (Pipes, not a socket pair: a
//! unix socket's release makes the kernel queue its SCM_RIGHTS garbage
//! collector whenever any descriptor is in flight, and procman always has
//! some in flight to the fork server; measured at ~4% of the core under
//! load. Pipes also cost the kernel less per frame.)
//!
//! Reads are bounded per turn of the poll loop ([`READ_TURN_BYTES`]), so a
//! worker that floods frames shares procman with every other worker instead
//! of owning it. Writes go to a bounded outbox that is flushed when the
//! pipe to the worker has room; a worker that stops reading fills it, and that is
//! that worker's problem ([`Queued::Full`] → its ladder), never procman's.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};

use crate::control::{self, FrameError, FromWorker, ToWorker};
use crate::limits::CONTROL_OUTBOX_SLACK_BYTES;

pub use crate::limits::CONTROL_READ_TURN_BYTES as READ_TURN_BYTES;
/// The first read of a turn, through the scratch buffer (see `read_turn`).
const FIRST_READ_BYTES: usize = 4096;
/// The rest of a frame under way from which it is read straight into the
/// inbox (or its text into a buffer of its own) rather than through the
/// scratch buffer.
const DIRECT_READ_MIN_BYTES: usize = 4096;

pub struct Channel {
    /// The pipe from the worker.
    rx: File,
    /// The pipe to the worker.
    tx: File,
    inbox: Vec<u8>,
    /// Bytes of `inbox` already decoded.
    read_at: usize,
    /// Where in `inbox` the frame under way starts, as far as reads have
    /// looked (see `frame_rest`).
    frame_at: usize,
    outbox: Vec<u8>,
    /// Bytes of `outbox` already written.
    written: usize,
    open: bool,
    /// The largest frame either way (`limits::control_frame_max_bytes`).
    frame_max: usize,
    /// Bytes written into the pipe since [`mark`](Self::mark): what the
    /// worker has not read of them is still in the pipe.
    into_pipe_since_mark: usize,
    /// The long text of the frame under way, when it comes raw: read into
    /// the buffer that becomes the text's `String`, not into the inbox (a
    /// program's large output is then copied once less). The frame's head
    /// is the whole inbox meanwhile.
    aside: Option<AsideText>,
}

/// A raw frame's text being read apart from its head.
struct AsideText {
    text: Vec<u8>,
    /// The text's length, as the frame's length says.
    len: usize,
}

/// What one turn of reading produced.
#[derive(Debug, Default)]
pub struct Turn {
    pub frames: Vec<FromWorker>,
    /// EOF: nothing more will come.
    pub closed: bool,
    /// The worker spoke nonsense (or the pipe failed): it is not trusted.
    pub broken: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Queued {
    Ok,
    /// The outbox is over its bound: the worker does not read.
    Full,
    /// The frame itself cannot be sent (over the frame limit).
    Refused(FrameError),
}

impl Channel {
    /// `rx` and `tx` are ends of pipes made by `sys::pipe`.
    pub fn new(rx: File, tx: File, frame_max: usize) -> io::Result<Channel> {
        crate::sys::set_pipe_nonblocking(rx.as_raw_fd())?;
        crate::sys::set_pipe_nonblocking(tx.as_raw_fd())?;
        Ok(Channel {
            rx,
            tx,
            inbox: Vec::new(),
            read_at: 0,
            frame_at: 0,
            outbox: Vec::new(),
            written: 0,
            open: true,
            frame_max,
            into_pipe_since_mark: 0,
            aside: None,
        })
    }

    /// Starts counting what goes to the worker from here (its task's
    /// `spawn` frame is next), for [`take_back`](Self::take_back).
    pub fn mark(&mut self) {
        self.into_pipe_since_mark = 0;
    }

    /// Takes back what was sent since the mark if the worker has read none
    /// of it, so that it never can: true when the worker cannot have all of
    /// it (the task was never started, and never will be by this worker).
    /// FIONREAD alone would race a worker that reads right after it looked;
    /// so what is still in the pipe is read out through a read end of our
    /// own (the pipe opened anew through /proc, non-blocking, for this one
    /// read): whoever reads first has the bytes, and if we got any, the
    /// worker lacks at least the frame's last. Without /proc, FIONREAD's
    /// word stands.
    pub fn take_back(&self) -> bool {
        let queued = self.outbox.len() - self.written;
        if self.into_pipe_since_mark == 0 {
            return queued > 0; // none of it reached the pipe
        }
        let untouched =
            crate::sys::pipe_unread(self.tx.as_raw_fd()).is_ok_and(|unread| unread == self.into_pipe_since_mark);
        if !untouched {
            return false;
        }
        match read_out(self.tx.as_raw_fd(), self.into_pipe_since_mark) {
            Ok(n) => n > 0,
            Err(_) => true,
        }
    }

    /// What to poll for frames (POLLIN).
    pub fn read_fd(&self) -> RawFd {
        self.rx.as_raw_fd()
    }

    /// What to poll when [`wants_write`](Self::wants_write) (POLLOUT).
    pub fn write_fd(&self) -> RawFd {
        self.tx.as_raw_fd()
    }

    pub fn is_open(&self) -> bool {
        self.open
    }

    pub fn wants_write(&self) -> bool {
        self.open && self.written < self.outbox.len()
    }

    /// Reads what is there (up to [`READ_TURN_BYTES`]) and decodes every
    /// whole frame in it. Small reads go through `scratch` (procman's one
    /// read buffer), so an inbox holds no more than the frames it was sent;
    /// the rest of a large frame under way is read straight into the inbox,
    /// room made for it: read once, into the place it is decoded from.
    pub fn read_turn(&mut self, scratch: &mut [u8]) -> Turn {
        let mut turn = Turn::default();
        if !self.open {
            return turn;
        }
        let mut budget = READ_TURN_BYTES;
        // A turn's first read is small: most turns bring a frame or two of a
        // few hundred bytes. A read that fills it is followed by larger ones.
        let mut want = FIRST_READ_BYTES;
        while budget > 0 {
            let mut rest = self.frame_rest();
            if self.aside.is_none() && rest >= DIRECT_READ_MIN_BYTES {
                self.set_text_aside(&mut turn);
                if turn.broken.is_some() {
                    break;
                }
                rest = self.frame_rest();
            }
            let read = if let Some(aside) = &mut self.aside {
                let want = aside.len - aside.text.len();
                crate::sys::read_appending(self.rx.as_raw_fd(), &mut aside.text, want.min(budget))
            } else if rest >= DIRECT_READ_MIN_BYTES {
                self.inbox.reserve(rest);
                crate::sys::read_appending(self.rx.as_raw_fd(), &mut self.inbox, rest.min(budget))
            } else {
                let len = want.min(budget).min(scratch.len());
                let buf = &mut scratch[..len];
                self.rx.read(buf).inspect(|n| self.inbox.extend_from_slice(&buf[..*n]))
            };
            want = scratch.len();
            match read {
                Ok(0) => {
                    turn.closed = true;
                    break;
                }
                Ok(n) => {
                    budget -= n;
                    self.take_text_aside(&mut turn);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    turn.broken = Some(format!("reading the control pipe: {e}"));
                    break;
                }
            }
        }
        self.decode_whole(&mut turn);
        self.frame_at = 0;
        if turn.closed && !self.inbox.is_empty() && turn.broken.is_none() {
            let aside = self.aside.as_ref().map_or(0, |a| a.text.len());
            turn.broken = Some(format!(
                "the channel ended inside a frame ({} bytes left)",
                self.inbox.len() + aside
            ));
        }
        if turn.closed || turn.broken.is_some() {
            self.open = false;
        }
        turn
    }

    /// Decodes every whole frame in the inbox, then drops them from it, so
    /// that it starts at a frame's edge (compacted once per call, not per
    /// frame).
    fn decode_whole(&mut self, turn: &mut Turn) {
        while turn.broken.is_none() {
            match control::decode::<FromWorker>(&self.inbox[self.read_at..], self.frame_max) {
                Ok(Some((frame, used))) => {
                    self.read_at += used;
                    turn.frames.push(frame);
                }
                Ok(None) => break,
                Err(e) => turn.broken = Some(e.to_string()),
            }
        }
        if self.read_at > 0 {
            self.inbox.drain(..self.read_at);
            self.frame_at = self.frame_at.saturating_sub(self.read_at);
            self.read_at = 0;
        }
    }

    /// If the frame under way is a raw text frame whose head is in, moves
    /// what came of its text into a buffer of the text's size, where the
    /// rest of it is read: the frames before it are decoded first, so the
    /// head is all the inbox holds.
    fn set_text_aside(&mut self, turn: &mut Turn) {
        self.decode_whole(turn);
        if turn.broken.is_some() || self.frame_at != 0 {
            return;
        }
        let Some(len_bytes) = self.inbox.first_chunk::<4>() else {
            return;
        };
        let len = u32::from_be_bytes(*len_bytes) as usize;
        let Some(head_len) = self.inbox.get(4..).and_then(control::raw_head_len) else {
            return;
        };
        let text_len = len.saturating_sub(head_len);
        if len > self.frame_max || text_len < DIRECT_READ_MIN_BYTES {
            return; // a frame over the limit is refused by decode as usual
        }
        let mut text = Vec::with_capacity(text_len);
        text.extend_from_slice(&self.inbox[4 + head_len..]);
        self.inbox.truncate(4 + head_len);
        self.aside = Some(AsideText { text, len: text_len });
        self.take_text_aside(turn);
    }

    /// The frame whose text was read aside, once the text is all in.
    fn take_text_aside(&mut self, turn: &mut Turn) {
        let Some(aside) = self.aside.take_if(|a| a.text.len() == a.len) else {
            return;
        };
        match control::decode_raw_text::<FromWorker>(&self.inbox[4..], aside.text) {
            Ok(frame) => turn.frames.push(frame),
            Err(e) => turn.broken = Some(e.to_string()),
        }
        self.inbox.clear();
        self.frame_at = 0;
    }

    /// Bytes still to come of the frame the inbox ends inside (0 at a
    /// frame's edge, or while its length is not in yet), as far as the
    /// frame limit allows: what decoding reports a longer one as. Frames
    /// already walked over are not walked again.
    fn frame_rest(&mut self) -> usize {
        while let Some(prefix) = self.inbox.get(self.frame_at..self.frame_at + 4) {
            let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
            let end = self.frame_at + 4 + len.min(self.frame_max);
            if end > self.inbox.len() {
                return end - self.inbox.len();
            }
            self.frame_at = end;
        }
        0
    }

    /// Queues a frame and writes what the pipe takes now.
    pub fn send(&mut self, frame: &ToWorker) -> Queued {
        if !self.open {
            return Queued::Ok; // it is gone; its exit decides the task
        }
        let bytes = match control::encode(frame, self.frame_max) {
            Ok(b) => b,
            Err(e) => return Queued::Refused(e),
        };
        let pending = self.outbox.len() - self.written;
        if pending > 0 && pending + bytes.len() > self.frame_max + CONTROL_OUTBOX_SLACK_BYTES {
            return Queued::Full;
        }
        self.outbox.extend_from_slice(&bytes);
        self.flush();
        Queued::Ok
    }

    /// Writes as much of the outbox as the pipe takes without blocking.
    pub fn flush(&mut self) {
        while self.open && self.written < self.outbox.len() {
            match self.tx.write(&self.outbox[self.written..]) {
                Ok(0) => break,
                Ok(n) => {
                    self.written += n;
                    self.into_pipe_since_mark += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The worker closed its end: it is exiting, and whatever it
                // said last is still queued for us. Its exit decides.
                Err(_) => {
                    self.outbox.clear();
                    self.written = 0;
                    return;
                }
            }
        }
        if self.written == self.outbox.len() {
            self.outbox.clear();
            self.written = 0;
        }
    }
}

/// Reads up to `max` bytes out of the pipe whose write end is `write_end`,
/// through a read end opened for it alone (opening a pipe through /proc
/// makes a new open file, so O_NONBLOCK here leaves the worker's end
/// blocking). Returns how many it got; 0 when the pipe was already empty.
fn read_out(write_end: RawFd, max: usize) -> io::Result<usize> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut end = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{write_end}"))?;
    let mut buf = vec![0u8; max.min(1 << 16)];
    let mut got = 0;
    while got < max {
        let want = buf.len().min(max - got);
        match end.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if got == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{Cause, Outcome};

    /// A channel and the worker's ends: where it writes, where it reads.
    fn pair() -> (Channel, File, File) {
        let (from_worker, worker_writes) = crate::sys::pipe().unwrap();
        let (worker_reads, to_worker) = crate::sys::pipe().unwrap();
        let ch = Channel::new(from_worker.into(), to_worker.into(), 1 << 20).unwrap();
        (ch, worker_writes.into(), worker_reads.into())
    }

    fn chunk_of(text: &str) -> FromWorker {
        FromWorker::Artifact {
            artifact: Box::new(crate::wire::Artifact {
                artifact_id: "a".into(),
                name: None,
                description: None,
                parts: vec![crate::wire::Part::text(text.to_owned())],
                metadata: None,
                extensions: Vec::new(),
            }),
            append: false,
            last_chunk: true,
        }
    }

    /// Reads turns until `want` frames came (or 10 s passed); none broken.
    fn read_frames(ch: &mut Channel, want: usize) -> Vec<FromWorker> {
        let mut frames = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while frames.len() < want && std::time::Instant::now() < deadline {
            let turn = ch.read_turn(&mut [0; 4096]);
            assert!(turn.broken.is_none(), "{:?}", turn.broken);
            frames.extend(turn.frames);
        }
        frames
    }

    #[test]
    fn a_long_raw_text_larger_than_the_pipe_is_read_into_its_own_buffer_in_order() {
        let (mut ch, mut worker, _reads) = pair();
        let text = "ab€".repeat(100_000); // 500 KB: several pipefuls
        let chunk = chunk_of(&text);
        let pong = control::encode(&FromWorker::Pong, 1 << 20).unwrap();
        let pong_len = pong.len();
        let wire = [pong.clone(), control::encode(&chunk, 1 << 20).unwrap(), pong].concat();
        assert_eq!(wire[pong_len + 4], 0, "the text goes raw");
        let writer = std::thread::spawn(move || worker.write_all(&wire));
        let frames = read_frames(&mut ch, 3);
        writer.join().unwrap().unwrap();
        assert_eq!(frames, vec![FromWorker::Pong, chunk, FromWorker::Pong]);
        assert!(
            ch.inbox.capacity() <= 16 * 1024,
            "the text never went through the inbox: {} bytes of room",
            ch.inbox.capacity()
        );
    }

    #[test]
    fn a_long_json_frame_larger_than_the_pipe_is_read_in_turns_into_room_made_for_it() {
        let (mut ch, mut worker, _reads) = pair();
        // Two text parts: the frame goes as JSON alone, read into the inbox.
        let mut chunk = chunk_of(&"ab€\n".repeat(40_000));
        if let FromWorker::Artifact { artifact, .. } = &mut chunk {
            artifact.parts.push(crate::wire::Part::text("x".repeat(2000)));
        }
        let wire = [
            control::encode(&chunk, 1 << 20).unwrap(),
            control::encode(&FromWorker::Pong, 1 << 20).unwrap(),
        ]
        .concat();
        assert_eq!(wire[4], b'{', "the frame is JSON");
        let wire_len = wire.len();
        let writer = std::thread::spawn(move || worker.write_all(&wire));
        let frames = read_frames(&mut ch, 2);
        writer.join().unwrap().unwrap();
        assert_eq!(frames, vec![chunk, FromWorker::Pong]);
        assert!(
            ch.inbox.capacity() <= 2 * wire_len,
            "room made for the frame, not grown on past it: {} for {wire_len} bytes",
            ch.inbox.capacity()
        );
    }

    #[test]
    fn a_raw_text_read_aside_that_is_not_utf8_or_ends_early_breaks_the_channel() {
        let wire = control::encode(&chunk_of(&"x".repeat(50_000)), 1 << 20).unwrap();
        let mut bad = wire.clone();
        let at = bad.len() - 10_000;
        bad[at] = 0xff;
        let (mut ch, mut worker, _reads) = pair();
        worker.write_all(&bad).unwrap();
        let turn = ch.read_turn(&mut [0; 4096]);
        assert!(turn.frames.is_empty());
        assert!(turn.broken.is_some_and(|b| b.contains("text")), "not UTF-8");
        assert!(!ch.is_open());

        let (mut ch, mut worker, _reads) = pair();
        worker.write_all(&wire[..wire.len() - 100]).unwrap();
        drop(worker);
        let turn = ch.read_turn(&mut [0; 4096]);
        assert!(turn.frames.is_empty());
        let broken = turn.broken.unwrap();
        assert!(broken.contains("inside a frame"), "{broken}");
        assert!(broken.contains(&format!("{} bytes left", wire.len() - 100)), "{broken}");
    }

    #[test]
    fn a_scratch_buffer_smaller_than_a_first_read_is_enough() {
        let (mut ch, mut worker, _reads) = pair();
        let pongs: Vec<u8> = (0..200)
            .flat_map(|_| control::encode(&FromWorker::Pong, 1 << 20).unwrap())
            .collect();
        worker.write_all(&pongs).unwrap();
        let mut frames = Vec::new();
        while frames.len() < 200 {
            let turn = ch.read_turn(&mut [0; 16]);
            assert!(turn.broken.is_none() && !turn.frames.is_empty(), "{turn:?}");
            frames.extend(turn.frames);
        }
        assert_eq!(frames, vec![FromWorker::Pong; 200]);
    }

    #[test]
    fn frames_split_across_reads_come_out_whole() {
        let (mut ch, mut worker, _reads) = pair();
        let done = FromWorker::Done {
            outcome: Outcome::Completed,
            cause: Cause::Completed,
            text: None,
        };
        let pong = control::encode(&FromWorker::Pong, 1 << 20).unwrap();
        let wire = [pong.clone(), control::encode(&done, 1 << 20).unwrap()].concat();
        let cut = pong.len() + 7;
        worker.write_all(&wire[..cut]).unwrap();
        let first = ch.read_turn(&mut [0; 4096]);
        assert_eq!(first.frames, vec![FromWorker::Pong]);
        worker.write_all(&wire[cut..]).unwrap();
        assert_eq!(ch.read_turn(&mut [0; 4096]).frames, vec![done]);
        drop(worker);
        let last = ch.read_turn(&mut [0; 4096]);
        assert!(last.closed && last.broken.is_none());
        assert!(!ch.is_open());
    }

    #[test]
    fn a_flood_is_read_in_bounded_turns() {
        let (mut ch, worker, _reads) = pair();
        let frame = control::encode(&FromWorker::Pong, 1 << 20).unwrap();
        let frame_len = frame.len();
        let writer = std::thread::spawn(move || {
            let mut worker = worker;
            for _ in 0..100_000 {
                if worker.write_all(&frame).is_err() {
                    return;
                }
            }
        });
        let mut total = 0;
        let mut turns = 0;
        while total < 100_000 {
            let turn = ch.read_turn(&mut [0; 4096]);
            // The bytes a turn took, counted in whole frames (a frame is
            // 10 bytes since frames are externally tagged: `"pong"`).
            assert!(turn.frames.len() * frame_len <= READ_TURN_BYTES + 64 * 1024);
            total += turn.frames.len();
            turns += 1;
            if turn.frames.is_empty() {
                std::thread::yield_now();
            }
        }
        writer.join().unwrap();
        assert!(turns > 1);
    }

    #[test]
    fn nonsense_and_torn_frames_break_the_channel() {
        let (mut ch, mut worker, _reads) = pair();
        worker.write_all(b"\0\0\0\x02{}").unwrap();
        assert!(ch.read_turn(&mut [0; 4096]).broken.is_some());
        let (mut ch, mut worker, _reads) = pair();
        worker
            .write_all(&control::encode(&FromWorker::Pong, 1 << 20).unwrap()[..5])
            .unwrap();
        drop(worker);
        let turn = ch.read_turn(&mut [0; 4096]);
        assert!(turn.closed && turn.broken.unwrap().contains("inside a frame"));
    }

    #[test]
    fn taken_back_until_the_worker_reads_a_byte_of_what_followed_the_mark() {
        let (mut ch, _worker, mut reads) = pair();
        assert!(!ch.take_back(), "nothing sent: nothing to take back");
        assert_eq!(ch.send(&ToWorker::Ping), Queued::Ok);
        let mut ping = vec![0u8; control::encode(&ToWorker::Ping, 1 << 20).unwrap().len()];
        reads.read_exact(&mut ping).unwrap();
        ch.mark();
        assert_eq!(ch.send(&ToWorker::Cancel), Queued::Ok);
        reads.read_exact(&mut [0u8; 1]).unwrap();
        assert!(!ch.take_back(), "one byte of it was read: it is the worker's");
        assert!(
            crate::sys::pipe_unread(reads.as_raw_fd()).unwrap() > 0,
            "and the rest is left to it"
        );
    }

    #[test]
    fn a_frame_taken_back_is_gone_from_the_workers_pipe() {
        let (mut ch, _worker, reads) = pair();
        ch.mark();
        assert_eq!(ch.send(&ToWorker::Cancel), Queued::Ok);
        assert!(crate::sys::pipe_unread(reads.as_raw_fd()).unwrap() > 0);
        assert!(ch.take_back(), "the frame after the mark was all in the pipe");
        assert_eq!(
            crate::sys::pipe_unread(reads.as_raw_fd()).unwrap(),
            0,
            "the worker can read none of it now"
        );
        // The worker's end is still blocking: the read end we opened had a
        // file of its own.
        let flags = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", reads.as_raw_fd())).unwrap();
        let flags = flags.lines().find(|l| l.starts_with("flags:")).unwrap();
        let bits = u32::from_str_radix(flags.split_whitespace().nth(1).unwrap(), 8).unwrap();
        assert_eq!(bits & libc::O_NONBLOCK as u32, 0, "{flags}");
    }

    #[test]
    fn a_worker_that_does_not_read_fills_only_its_outbox() {
        let (mut ch, _worker, _reads) = pair();
        let mut queued = 0;
        let verdict = loop {
            match ch.send(&ToWorker::Ping) {
                Queued::Ok => queued += 1,
                other => break other,
            }
            assert!(queued < 10_000_000, "the outbox must be bounded");
        };
        assert_eq!(verdict, Queued::Full);
        assert!(ch.wants_write());
    }
}
