//! The private control channel between agentd and a worker (not A2A): two
//! pipes, one each way.
//!
//! ```text
//!  supervisor (procman)                               worker (forked by agentd __forkserver)
//!        │                                                │  forked, waiting
//!        │ ◀─ hello {pid} ─────────────────────────────── │  with its first frame (held)
//!        │ ── spawn {task_id, context_id, message, runner, trace?} ▶ │
//!        │ ◀─ status {state, text?} / artifact {artifact, append, last_chunk} ─ │  progress
//!        │ ◀─ reply {message} ───────────────────────────  │  a direct Message instead of a task
//!        │ ── input {message} ────────────────────────────▶ │  follow-up turn
//!        │ ── ping ───────────────────────────────────────▶ │
//!        │ ◀─ pong ──────────────────────────────────────── │
//!        │ ── cancel ─────────────────────────────────────▶ │  first rung of the ladder
//!        │ ◀─ done {outcome, cause, text?} ──────────────── │  then the worker exits
//! ```
//!
//! A frame is a 4-byte big-endian length, then that many bytes of one JSON
//! value: the enum externally tagged (`{"spawn":{…}}`, `"ping"`). An
//! artifact frame whose one part is a long text (a program's output, in
//! chunks) carries that text raw after its JSON instead: a 0 byte, the
//! JSON's length (4 bytes, big-endian), the JSON with the text part empty,
//! then the text's bytes. The text is then neither escaped by the worker
//! nor parsed by procman, only checked to be UTF-8 (procman reads a long
//! one straight into the buffer that becomes its `String`); the client's
//! answer is the one place it is written as JSON. Not
//! internally tagged: serde buffers such an enum whole before it reads the
//! tag, and that second path through every field type was 45 KB of the
//! binary. Both ends refuse a frame over `max` bytes, the limit the daemon
//! derives from its configured input limits
//! ([`crate::limits::control_frame_max_bytes`]): sized by what frames carry,
//! so nothing that came in within a documented limit is refused here.

use std::io::{self, Read, Write};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::append::Appender;
use crate::wire::{Artifact, Message, Part, PartContent};

/// What the worker runs, as procman tells it in `spawn`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunnerSpec {
    Echo,
    Peer {
        address: String,
    },
    Exec {
        argv: Vec<String>,
        protocol: ExecProtocol,
        workdir: Option<String>,
        env: Vec<(String, String)>,
        rlimits: Rlimits,
        output_max_bytes: u64,
    },
}

/// How the `exec` runner talks to its program (`agent.exec_protocol`;
/// the manual's "Runners" says what each means).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecProtocol {
    Text,
    Jsonl,
}

/// Per-task rlimits for the program; 0 = inherit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rlimits {
    pub as_bytes: u64,
    pub cpu_secs: u64,
    pub nofile: u64,
}

/// Why a task ended, machine-readable (`agentd.dev/terminal` in the task's
/// status message metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cause {
    Completed,
    Refused,
    /// Spelled as A2A spells the state it gives (TASK_STATE_CANCELED).
    Canceled,
    Deadline,
    Stalled,
    Exhausted,
    Idle,
    Crashed,
    Failed,
    Shutdown,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Completed => "completed",
            Cause::Refused => "refused",
            Cause::Canceled => "canceled",
            Cause::Deadline => "deadline",
            Cause::Stalled => "stalled",
            Cause::Exhausted => "exhausted",
            Cause::Idle => "idle",
            Cause::Crashed => "crashed",
            Cause::Failed => "failed",
            Cause::Shutdown => "shutdown",
        }
    }
}

/// Supervisor → worker.
///
/// Messages and artifacts in frames are read through a `Value`
/// (`wire::object`), as the A2A params they came from are: one compiled
/// deserializer for them instead of two (16 KB of the static binary), for
/// ~0.7 µs a frame.
// A frame lives only between decode and dispatch, a few per task: the
// size of `Spawn` costs nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToWorker {
    /// The message is behind a pointer, here and in `Input`: a fresh
    /// worker reads this frame on its first stack pages, each a
    /// copy-on-write fault, and the frame's value is held by several frames
    /// on the way there.
    Spawn {
        task_id: String,
        context_id: String,
        /// Shared with the task table (and the runner with procman): a
        /// spawn frame is made for every task, and made from them without
        /// copying either.
        #[serde(deserialize_with = "crate::wire::object_arc")]
        message: Arc<Message>,
        runner: Arc<RunnerSpec>,
        /// The W3C trace context of the request that created the task.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<crate::trace::TraceContext>,
    },
    Input {
        #[serde(deserialize_with = "crate::wire::object_boxed")]
        message: Box<Message>,
    },
    Ping,
    Cancel,
}

/// The end of a worker's run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Completed,
    Failed,
    Rejected,
    Canceled,
}

/// A status the worker reports mid-run (not terminal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Progress {
    Working,
    InputRequired,
    AuthRequired,
}

/// Worker → supervisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FromWorker {
    /// Who it is: the first frame of every worker (held back to go out
    /// with its next one, so it costs no write of its own). A worker whose
    /// fork server was lost before it named the worker is adopted by it.
    Hello {
        pid: i32,
    },
    Status {
        state: Progress,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// The two large frames are boxed: a frame moves by value through
    /// procman's events and actions several times a task, and at ~180
    /// bytes each move was a call to `memcpy`.
    Artifact {
        #[serde(deserialize_with = "crate::wire::object_boxed")]
        artifact: Box<Artifact>,
        #[serde(default)]
        append: bool,
        #[serde(default)]
        last_chunk: bool,
    },
    /// The agent answers with this Message instead of a task.
    Reply {
        #[serde(deserialize_with = "crate::wire::object_boxed")]
        message: Box<Message>,
    },
    Pong,
    Done {
        outcome: Outcome,
        cause: Cause,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
}

impl FromWorker {
    /// The text it carries, in bytes (before escaping): what its encoding
    /// is sized for.
    pub fn text_bytes(&self) -> usize {
        match self {
            FromWorker::Artifact { artifact, .. } => {
                artifact.parts.iter().map(|p| p.as_text().map_or(0, str::len)).sum()
            }
            FromWorker::Reply { message } => message.parts.iter().map(|p| p.as_text().map_or(0, str::len)).sum(),
            FromWorker::Status { text, .. } | FromWorker::Done { text, .. } => text.as_ref().map_or(0, String::len),
            FromWorker::Hello { .. } | FromWorker::Pong => 0,
        }
    }
}

/// The first byte of a frame that carries its text raw after its JSON (a
/// JSON value starts with `{` or `"`, never with 0).
const RAW_TEXT_MARK: u8 = 0;
/// Where a raw text frame's JSON starts in its body: after the mark and the
/// JSON's length (4 bytes).
const RAW_JSON_AT: usize = 1 + 4;
/// The shortest text sent raw: below it, escaping costs less than the
/// frame's second header.
pub const RAW_TEXT_MIN_BYTES: usize = 1024;

/// A frame of the control channel: JSON, or for a frame that carries one
/// long text, JSON and the text raw after it.
pub trait Frame: Serialize + for<'de> Deserialize<'de> {
    /// This frame with its long text left empty, and the text: what to
    /// send raw. `None`: the frame goes as JSON alone.
    fn split_text(&self) -> Option<(Self, &str)>;
    /// Puts a text that came raw into the frame decoded from its JSON;
    /// `false` when the frame has no empty text to hold it.
    fn join_text(&mut self, text: String) -> bool;
}

impl Frame for ToWorker {
    fn split_text(&self) -> Option<(Self, &str)> {
        None
    }
    fn join_text(&mut self, _text: String) -> bool {
        false
    }
}

impl Frame for FromWorker {
    fn split_text(&self) -> Option<(Self, &str)> {
        let FromWorker::Artifact {
            artifact,
            append,
            last_chunk,
        } = self
        else {
            return None;
        };
        let [part] = artifact.parts.as_slice() else {
            return None;
        };
        let text = part.as_text().filter(|t| t.len() >= RAW_TEXT_MIN_BYTES)?;
        let empty = Part {
            content: PartContent::Text(String::new()),
            metadata: part.metadata.clone(),
            filename: part.filename.clone(),
            media_type: part.media_type.clone(),
        };
        let shell = FromWorker::Artifact {
            artifact: Box::new(Artifact {
                artifact_id: artifact.artifact_id.clone(),
                name: artifact.name.clone(),
                description: artifact.description.clone(),
                parts: vec![empty],
                metadata: artifact.metadata.clone(),
                extensions: artifact.extensions.clone(),
            }),
            append: *append,
            last_chunk: *last_chunk,
        };
        Some((shell, text))
    }

    fn join_text(&mut self, text: String) -> bool {
        let FromWorker::Artifact { artifact, .. } = self else {
            return false;
        };
        match artifact.parts.as_mut_slice() {
            [Part {
                content: PartContent::Text(empty),
                ..
            }] if empty.is_empty() => {
                *empty = text;
                true
            }
            _ => false,
        }
    }
}

/// Why a frame could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    TooLarge { len: usize, max: usize },
    BadJson(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge { len, max } => write!(
                f,
                "a control frame of {len} bytes is over the control channel's limit of {max} bytes \
                 (derived from http.body_max_bytes and the jsonl line limit)"
            ),
            FrameError::BadJson(e) => write!(f, "control frame is not a valid frame: {e}"),
        }
    }
}

impl From<FrameError> for io::Error {
    fn from(e: FrameError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e.to_string())
    }
}

/// Encodes one frame of at most `max` bytes (without the length prefix).
pub fn encode<T: Frame>(frame: &T, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut out = Vec::new();
    encode_onto(&mut out, frame, max, 0)?;
    Ok(out)
}

/// Appends one frame to `out` (a buffer kept from frame to frame, perhaps
/// holding frames before it), room made for about `hint` bytes of text
/// first; on an error `out` is as it was.
pub fn encode_onto<T: Frame>(out: &mut Vec<u8>, frame: &T, max: usize, hint: usize) -> Result<(), FrameError> {
    let raw = encode_head_onto(out, frame, max, hint)?;
    out.extend_from_slice(raw.as_bytes());
    Ok(())
}

/// Appends all of one frame to `out` but the text it carries raw, and
/// returns that text: the frame is whole once the text is written right
/// after `out` (a writer that writes both at once copies it nowhere).
/// Empty for a frame that goes as JSON alone. On an error `out` is as it
/// was.
pub fn encode_head_onto<'f, T: Frame>(
    out: &mut Vec<u8>,
    frame: &'f T,
    max: usize,
    hint: usize,
) -> Result<&'f str, FrameError> {
    match frame.split_text() {
        Some((shell, text)) => encode_shell_onto(out, &shell, text.len(), max).map(|()| text),
        None => encode_json_onto(out, frame, max, hint).map(|()| ""),
    }
}

/// Appends the head of a frame whose text of `text_len` bytes goes raw
/// right after it: `shell` is the frame with that text left empty (as
/// [`Frame::split_text`] makes it; the reader puts the text there).
pub fn encode_shell_onto<T: Frame>(
    out: &mut Vec<u8>,
    shell: &T,
    text_len: usize,
    max: usize,
) -> Result<(), FrameError> {
    framed_onto(out, max, text_len, |out| {
        out.push(RAW_TEXT_MARK);
        out.extend_from_slice(&[0; 4]);
        let json_at = out.len();
        serde_json::to_writer(Appender(&mut *out), shell).map_err(|e| bad_frame(&e))?;
        let json_len = out.len() - json_at;
        let json_len = u32::try_from(json_len).map_err(|_| FrameError::TooLarge { len: json_len, max })?;
        out[json_at - 4..json_at].copy_from_slice(&json_len.to_be_bytes());
        Ok(())
    })
}

/// Appends a frame that goes as JSON alone, room made for about `hint`
/// bytes of text first.
fn encode_json_onto<T: Frame>(out: &mut Vec<u8>, frame: &T, max: usize, hint: usize) -> Result<(), FrameError> {
    out.reserve(
        crate::limits::CONTROL_FRAME_START_BYTES
            .saturating_add(hint)
            .min(max.saturating_add(4)),
    );
    framed_onto(out, max, 0, |out| {
        serde_json::to_writer(Appender(&mut *out), frame).map_err(|e| bad_frame(&e))
    })
}

/// Appends a frame's length and what `body` writes after it, the length
/// counting `raw_len` bytes more that the caller writes after that. The
/// body goes straight after room for its length (filled in once known):
/// one buffer, no copy. On an error `out` is as it was.
fn framed_onto(
    out: &mut Vec<u8>,
    max: usize,
    raw_len: usize,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), FrameError>,
) -> Result<(), FrameError> {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    let written = body(out).and_then(|()| {
        let len = (out.len() - at - 4).saturating_add(raw_len);
        u32::try_from(len)
            .ok()
            .filter(|_| len <= max)
            .ok_or(FrameError::TooLarge { len, max })
    });
    match written {
        Ok(prefix) => {
            out[at..at + 4].copy_from_slice(&prefix.to_be_bytes());
            Ok(())
        }
        Err(e) => {
            out.truncate(at);
            Err(e)
        }
    }
}

/// Decodes the first frame in `buf`, if a whole one is there: `Ok(None)` =
/// need more bytes; `Ok(Some((frame, consumed)))`. No I/O, for fuzzing.
pub fn decode<T: Frame>(buf: &[u8], max: usize) -> Result<Option<(T, usize)>, FrameError> {
    let Some(len_bytes) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let Some(body) = buf.get(4..4 + len) else {
        return Ok(None);
    };
    Ok(Some((decode_body(body)?, 4 + len)))
}

/// One frame's bytes (after its length) as the frame: its JSON, or its
/// JSON and the text that came raw after it.
fn decode_body<T: Frame>(body: &[u8]) -> Result<T, FrameError> {
    if body.first() != Some(&RAW_TEXT_MARK) {
        return serde_json::from_slice(body).map_err(|e| bad_frame(&e));
    }
    let head_len = raw_head_len(body)
        .ok_or_else(|| bad_frame(&"a raw text frame's JSON is past its end (or its header is cut short)"))?;
    let (head, text) = body.split_at(head_len);
    let text = std::str::from_utf8(text).map_err(|e| bad_frame(&format_args!("a raw text frame's text: {e}")))?;
    join_raw_text(head, text.to_owned())
}

/// How many bytes at the start of a raw text frame's body (after its
/// length) come before its text: the mark, the JSON's length and the JSON.
/// None when `body` is not a raw text frame's start, or its JSON is not all
/// there.
pub fn raw_head_len(body: &[u8]) -> Option<usize> {
    let rest = body.strip_prefix(&[RAW_TEXT_MARK])?;
    let (json_len, json) = rest.split_first_chunk::<4>()?;
    let json_len = u32::from_be_bytes(*json_len) as usize;
    (json_len <= json.len()).then_some(RAW_JSON_AT + json_len)
}

/// A raw text frame whose text was read apart from its head (procman reads
/// a long one into the buffer that becomes the text): `head` is the body's
/// first [`raw_head_len`] bytes. The text is checked, not copied.
pub fn decode_raw_text<T: Frame>(head: &[u8], text: Vec<u8>) -> Result<T, FrameError> {
    let text =
        String::from_utf8(text).map_err(|e| bad_frame(&format_args!("a raw text frame's text: {}", e.utf8_error())))?;
    join_raw_text(head, text)
}

/// The frame a raw text frame's head (mark, JSON length, JSON) holds, with
/// `text` in its empty text part.
fn join_raw_text<T: Frame>(head: &[u8], text: String) -> Result<T, FrameError> {
    let json = head.get(RAW_JSON_AT..).unwrap_or_default();
    let mut frame: T = serde_json::from_slice(json).map_err(|e| bad_frame(&e))?;
    if frame.join_text(text) {
        Ok(frame)
    } else {
        Err(bad_frame(
            &"a raw text frame whose JSON has no empty text part for its text",
        ))
    }
}

fn bad_frame(e: &dyn std::fmt::Display) -> FrameError {
    FrameError::BadJson(e.to_string())
}

/// Writes one frame of at most `max` bytes.
pub fn write_frame<T: Frame>(w: &mut impl Write, frame: &T, max: usize) -> io::Result<()> {
    w.write_all(&encode(frame, max)?)
}

/// Reads one frame of at most `max` bytes; `Ok(None)` on a clean EOF
/// between frames.
pub fn read_frame<T: Frame>(r: &mut impl Read, max: usize) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max }.into());
    }
    // Grown as bytes arrive, never allocated from the declared length.
    let mut body = Vec::with_capacity(len.min(64 * 1024));
    r.take(len as u64).read_to_end(&mut body)?;
    if body.len() != len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(Some(decode_body(&body)?))
}

/// What procman asks the fork server (`agentd __forkserver`) for: one
/// worker. Descriptors travel with the request, in this order: its control
/// pipes (the read end of agentd's frames to it, the write end of its
/// frames to agentd), then the open cgroup v2 directory it is to be born in
/// (`into_cgroup`), then the file its parent-death path kills the task
/// through (`containment`). procman keeps these open per cgroup slot: the
/// worker opens nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForkRequest {
    pub into_cgroup: bool,
    /// Born in the cgroup or not at all: with `into_cgroup`, a kernel that
    /// refuses the placement fails the request instead of a plain fork.
    /// For a worker whose task is already in its pipe (it would run it
    /// before procman could move it in).
    pub placed_only: bool,
    pub containment: Option<ContainmentFile>,
}

/// Which cgroup file a worker is handed for its parent-death path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainmentFile {
    /// The slot's v2 `cgroup.kill`: writing "1" kills all of it.
    Kill,
    /// The slot's v1 freezer `cgroup.procs` (no v2): each pid is killed.
    Procs,
}

/// A fork request's first bytes, so nothing else is mistaken for one.
const FORK_MAGIC: &[u8] = b"fork\0";

impl ForkRequest {
    /// How many descriptors travel with the request.
    pub fn fds(&self) -> usize {
        2 + usize::from(self.into_cgroup) + usize::from(self.containment.is_some())
    }

    /// `fork\0`, then a letter per descriptor past the pipes: `c` for the
    /// cgroup directory (`C`: placed only), `k` or `p` for the containment
    /// file.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = FORK_MAGIC.to_vec();
        match (self.into_cgroup, self.placed_only) {
            (true, true) => out.push(b'C'),
            (true, false) => out.push(b'c'),
            (false, _) => {}
        }
        match self.containment {
            Some(ContainmentFile::Kill) => out.push(b'k'),
            Some(ContainmentFile::Procs) => out.push(b'p'),
            None => {}
        }
        out
    }

    /// None for anything [`encode`](Self::encode) did not make.
    pub fn decode(bytes: &[u8]) -> Option<ForkRequest> {
        let mut rest = bytes.strip_prefix(FORK_MAGIC)?;
        let mut req = ForkRequest::default();
        if let Some(r) = rest.strip_prefix(b"c") {
            req.into_cgroup = true;
            rest = r;
        } else if let Some(r) = rest.strip_prefix(b"C") {
            (req.into_cgroup, req.placed_only) = (true, true);
            rest = r;
        }
        req.containment = match rest {
            b"" => None,
            b"k" => Some(ContainmentFile::Kill),
            b"p" => Some(ContainmentFile::Procs),
            _ => return None,
        };
        Some(req)
    }
}

/// The fork server's answer to one [`ForkRequest`], in request order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForkReply {
    /// The worker's pid; `placement_errno` non-zero when the kernel would
    /// not start it in the cgroup (it was forked outside: move it in).
    Forked { pid: i32, placement_errno: i32 },
    /// Nothing was started (the errno of the fork or of the request).
    Failed { errno: i32 },
}

impl ForkReply {
    pub const LEN: usize = 9;

    pub fn encode(self) -> [u8; Self::LEN] {
        let (tag, a, b) = match self {
            ForkReply::Forked { pid, placement_errno } => (b'F', pid, placement_errno),
            ForkReply::Failed { errno } => (b'E', errno, 0),
        };
        let mut out = [0; Self::LEN];
        out[0] = tag;
        out[1..5].copy_from_slice(&a.to_le_bytes());
        out[5..9].copy_from_slice(&b.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Option<ForkReply> {
        let bytes: &[u8; Self::LEN] = bytes.try_into().ok()?;
        let a = i32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
        let b = i32::from_le_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
        match bytes[0] {
            b'F' if a > 0 => Some(ForkReply::Forked {
                pid: a,
                placement_errno: b,
            }),
            b'E' => Some(ForkReply::Failed { errno: a }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
