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
//! value: the enum externally tagged (`{"spawn":{…}}`, `"ping"`). Not
//! internally tagged: serde buffers such an enum whole before it reads the
//! tag, and that second path through every field type was 45 KB of the
//! binary. Both ends refuse a frame over `max` bytes, the limit the daemon
//! derives from its configured input limits
//! ([`crate::limits::control_frame_max_bytes`]): sized by what frames carry,
//! so nothing that came in within a documented limit is refused here.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use crate::wire::{Artifact, Message};

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
    Spawn {
        task_id: String,
        context_id: String,
        #[serde(deserialize_with = "crate::wire::object")]
        message: Message,
        runner: RunnerSpec,
        /// The W3C trace context of the request that created the task.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<crate::trace::TraceContext>,
    },
    Input {
        #[serde(deserialize_with = "crate::wire::object")]
        message: Message,
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
    Artifact {
        #[serde(deserialize_with = "crate::wire::object")]
        artifact: Artifact,
        #[serde(default)]
        append: bool,
        #[serde(default)]
        last_chunk: bool,
    },
    /// The agent answers with this Message instead of a task.
    Reply {
        #[serde(deserialize_with = "crate::wire::object")]
        message: Message,
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
pub fn encode<T: Serialize>(frame: &T, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut out = Vec::new();
    encode_onto(&mut out, frame, max, 0)?;
    Ok(out)
}

/// Appends one frame to `out` (a buffer kept from frame to frame, perhaps
/// holding frames before it), room made for about `hint` bytes of text
/// first; on an error `out` is as it was.
pub fn encode_onto<T: Serialize>(out: &mut Vec<u8>, frame: &T, max: usize, hint: usize) -> Result<(), FrameError> {
    // The JSON goes straight after room for its length (filled in once
    // known): one buffer, no copy.
    let at = out.len();
    out.reserve(
        crate::limits::CONTROL_FRAME_START_BYTES
            .saturating_add(hint)
            .min(max.saturating_add(4)),
    );
    out.extend_from_slice(&[0; 4]);
    let written = serde_json::to_writer(&mut *out, frame).map_err(|e| FrameError::BadJson(e.to_string()));
    let len = out.len() - at - 4;
    let prefix = written.and_then(|()| {
        u32::try_from(len)
            .ok()
            .filter(|_| len <= max)
            .ok_or(FrameError::TooLarge { len, max })
    });
    match prefix {
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
pub fn decode<T: for<'de> Deserialize<'de>>(buf: &[u8], max: usize) -> Result<Option<(T, usize)>, FrameError> {
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
    let frame = serde_json::from_slice(body).map_err(|e| FrameError::BadJson(e.to_string()))?;
    Ok(Some((frame, 4 + len)))
}

/// Writes one frame of at most `max` bytes.
pub fn write_frame<T: Serialize>(w: &mut impl Write, frame: &T, max: usize) -> io::Result<()> {
    w.write_all(&encode(frame, max)?)
}

/// Reads one frame of at most `max` bytes; `Ok(None)` on a clean EOF
/// between frames.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read, max: usize) -> io::Result<Option<T>> {
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
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| FrameError::BadJson(e.to_string()).into())
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
mod tests {
    use super::*;
    use crate::limits::{control_frame_max_bytes, HTTP_BODY_MAX_BYTES, JSONL_LINE_MAX_BYTES};
    use crate::limits::{JSON_REENCODE_GROWTH_DEN as DEN, JSON_REENCODE_GROWTH_NUM as NUM};

    const MAX: usize = 1 << 20;

    #[test]
    fn round_trips_through_bytes() {
        let frames = vec![
            FromWorker::Status {
                state: Progress::InputRequired,
                text: Some("which?".into()),
            },
            FromWorker::Pong,
            FromWorker::Done {
                outcome: Outcome::Failed,
                cause: Cause::Exhausted,
                text: None,
            },
        ];
        let mut wire = Vec::new();
        for f in &frames {
            write_frame(&mut wire, f, MAX).unwrap();
        }
        let mut r = &wire[..];
        for f in &frames {
            assert_eq!(read_frame::<FromWorker>(&mut r, MAX).unwrap().as_ref(), Some(f));
        }
        assert_eq!(read_frame::<FromWorker>(&mut r, MAX).unwrap(), None);
    }

    /// Frames encoded onto one buffer follow each other; one too large is
    /// refused and leaves the buffer as it was.
    #[test]
    fn frames_encoded_onto_a_buffer_follow_each_other_and_a_refused_one_leaves_it_be() {
        let mut buf = Vec::new();
        encode_onto(&mut buf, &FromWorker::Pong, MAX, 0).unwrap();
        encode_onto(&mut buf, &FromWorker::Hello { pid: 7 }, MAX, 0).unwrap();
        let before = buf.clone();
        let big = FromWorker::Status {
            state: Progress::Working,
            text: Some("x".repeat(64)),
        };
        assert!(matches!(
            encode_onto(&mut buf, &big, 32, 64),
            Err(FrameError::TooLarge { max: 32, .. })
        ));
        assert_eq!(buf, before);
        let (first, used) = decode::<FromWorker>(&buf, MAX).unwrap().unwrap();
        assert_eq!(first, FromWorker::Pong);
        assert_eq!(
            decode::<FromWorker>(&buf[used..], MAX).unwrap(),
            Some((FromWorker::Hello { pid: 7 }, buf.len() - used))
        );
    }

    #[test]
    fn decode_needs_whole_frames_and_bounds_length() {
        let wire = encode(&ToWorker::Ping, MAX).unwrap();
        for cut in 0..wire.len() {
            assert_eq!(decode::<ToWorker>(&wire[..cut], MAX).unwrap(), None);
        }
        assert_eq!(
            decode::<ToWorker>(&wire, MAX).unwrap(),
            Some((ToWorker::Ping, wire.len()))
        );
        assert!(matches!(
            decode::<ToWorker>(b"\0\0\0\x02{}", MAX),
            Err(FrameError::BadJson(_))
        ));
    }

    #[test]
    fn eof_mid_frame_is_an_error() {
        let wire = encode(&ToWorker::Cancel, MAX).unwrap();
        let mut r = &wire[..wire.len() - 1];
        assert!(read_frame::<ToWorker>(&mut r, MAX).is_err());
    }

    /// A status frame whose JSON is exactly `len` bytes.
    fn status_of_len(len: usize) -> FromWorker {
        let empty = encode(
            &FromWorker::Status {
                state: Progress::Working,
                text: Some(String::new()),
            },
            MAX,
        )
        .unwrap();
        FromWorker::Status {
            state: Progress::Working,
            text: Some("x".repeat(len - (empty.len() - 4))),
        }
    }

    #[test]
    fn a_frame_at_the_limit_passes_one_byte_over_is_refused() {
        let max = 1000;
        let at = encode(&status_of_len(max), max).unwrap();
        assert_eq!(at.len(), 4 + max);
        assert_eq!(
            decode::<FromWorker>(&at, max).unwrap(),
            Some((status_of_len(max), 4 + max))
        );
        assert_eq!(
            read_frame::<FromWorker>(&mut &at[..], max).unwrap(),
            Some(status_of_len(max))
        );

        let over = FrameError::TooLarge { len: max + 1, max };
        assert_eq!(encode(&status_of_len(max + 1), max), Err(over.clone()));
        assert_eq!(
            over.to_string(),
            "a control frame of 1001 bytes is over the control channel's limit of 1000 bytes \
             (derived from http.body_max_bytes and the jsonl line limit)"
        );
        // The reader refuses it from the length prefix alone.
        let wire = encode(&status_of_len(max + 1), max + 1).unwrap();
        assert_eq!(decode::<FromWorker>(&wire[..4], max), Err(over.clone()));
        let e = read_frame::<FromWorker>(&mut &wire[..], max).unwrap_err();
        assert_eq!(e.to_string(), over.to_string());
    }

    #[test]
    fn the_limit_follows_the_configured_body_limit() {
        let default = control_frame_max_bytes(HTTP_BODY_MAX_BYTES);
        assert_eq!(default, (4 * 1024 * 1024 / 2 + 1) * 9 + 64 * 1024);
        assert_eq!(control_frame_max_bytes(1), default, "the jsonl line limit is the floor");
        assert!(control_frame_max_bytes(64 << 20) > (64 << 20) / 2 * 9);
        assert_eq!(control_frame_max_bytes(usize::MAX), u32::MAX as usize);
    }

    /// The growth bound behind the limit: every JSON number of up to five
    /// bytes (the longest growth is there: `1e15`), and the longest forms
    /// serde_json writes at all (24 bytes, so longer inputs grow < 4.5×).
    #[test]
    fn numbers_grow_at_most_by_the_bound_when_re_encoded() {
        let alphabet = b"0123456789.eE+-";
        let mut worst = (0usize, 1usize, String::new());
        for len in 1..=5usize {
            let mut digits = vec![0usize; len];
            'all: loop {
                let text: Vec<u8> = digits.iter().map(|&i| alphabet[i]).collect();
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&text) {
                    let out = serde_json::to_vec(&v).unwrap();
                    assert!(out.len() * DEN <= text.len() * NUM, "{v} from {text:?}");
                    if out.len() * worst.1 > worst.0 * len {
                        worst = (out.len(), len, String::from_utf8(text).unwrap());
                    }
                }
                for d in digits.iter_mut() {
                    *d += 1;
                    if *d < alphabet.len() {
                        continue 'all;
                    }
                    *d = 0;
                }
                break;
            }
        }
        assert_eq!(
            worst,
            (18, 4, "1e15".to_string()),
            "the worst case is the documented one"
        );
        for long in [
            "-1.2345678901234567e-308",
            "-2.2250738585072014e-308",
            "5e-324",
            "-1.7976931348623157e308",
        ] {
            let v: serde_json::Value = serde_json::from_str(long).unwrap();
            assert!(serde_json::to_vec(&v).unwrap().len() <= 24, "{long}");
        }
        // float_roundtrip: the value survives, so its shortest form is short.
        let v: serde_json::Value = serde_json::from_str("3e30").unwrap();
        assert_eq!(v.as_f64(), Some(3e30));
        assert!(v.to_string().len() <= 5, "{v}"); // 3e30 or 3e+30, by serde_json's version
    }

    /// A message at the body limit, all `1e15`s, fits a spawn frame; a
    /// line at the jsonl limit fits an artifact frame.
    #[test]
    fn the_worst_input_within_the_limits_fits_a_frame() {
        let max = control_frame_max_bytes(HTTP_BODY_MAX_BYTES);
        let n = (HTTP_BODY_MAX_BYTES - 100) / 5;
        let body = format!(
            r#"{{"messageId":"m","role":"ROLE_USER","parts":[{{"data":[{}]}}]}}"#,
            vec!["1e15"; n].join(",")
        );
        assert!(body.len() <= HTTP_BODY_MAX_BYTES);
        let message: Message = serde_json::from_str(&body).unwrap();
        let spawn = ToWorker::Spawn {
            task_id: "t".repeat(36),
            context_id: "c".repeat(36),
            message,
            runner: RunnerSpec::Echo,
            trace: None,
        };
        let frame = encode(&spawn, max).unwrap();
        assert!(frame.len() > 3 * body.len(), "the numbers did grow: {}", frame.len());

        let n = (JSONL_LINE_MAX_BYTES - 100) / 5;
        let parts = format!(r#"[{{"data":[{}]}}]"#, vec!["1e15"; n].join(","));
        let artifact = FromWorker::Artifact {
            artifact: Artifact {
                artifact_id: "a".repeat(36),
                name: None,
                description: None,
                parts: serde_json::from_str(&parts).unwrap(),
                metadata: None,
                extensions: Vec::new(),
            },
            append: true,
            last_chunk: true,
        };
        assert!(encode(&artifact, max).is_ok());
    }

    #[test]
    fn fork_requests_round_trip_and_refuse_anything_else() {
        let mut all = Vec::new();
        // placed_only means something only with into_cgroup.
        for (into_cgroup, placed_only) in [(false, false), (true, false), (true, true)] {
            for containment in [None, Some(ContainmentFile::Kill), Some(ContainmentFile::Procs)] {
                all.push(ForkRequest {
                    into_cgroup,
                    placed_only,
                    containment,
                });
            }
        }
        for req in &all {
            assert_eq!(ForkRequest::decode(&req.encode()), Some(*req));
        }
        let full = ForkRequest {
            into_cgroup: true,
            placed_only: true,
            containment: Some(ContainmentFile::Kill),
        };
        assert_eq!(full.fds(), 4);
        assert_eq!(ForkRequest::default().fds(), 2);
        let bytes = full.encode();
        assert_eq!(
            ForkRequest::decode(&[bytes.as_slice(), b"k"].concat()),
            None,
            "a second containment file"
        );
        assert_eq!(ForkRequest::decode(b"fork\0kc"), None, "out of order");
        assert_eq!(ForkRequest::decode(b"fork\0cC"), None, "two cgroup letters");
        assert_eq!(ForkRequest::decode(b"fork\0x"), None, "an unknown letter");
        assert_eq!(ForkRequest::decode(b"spawn\0"), None, "not a fork request");
        assert_eq!(ForkRequest::decode(b""), None);
    }

    #[test]
    fn fork_replies_round_trip_and_refuse_anything_else() {
        for reply in [
            ForkReply::Forked {
                pid: 4242,
                placement_errno: 0,
            },
            ForkReply::Forked {
                pid: 7,
                placement_errno: libc::EBUSY,
            },
            ForkReply::Failed { errno: libc::EAGAIN },
        ] {
            assert_eq!(ForkReply::decode(&reply.encode()), Some(reply));
        }
        let mut bad = ForkReply::Forked {
            pid: 1,
            placement_errno: 0,
        }
        .encode();
        bad[1..5].copy_from_slice(&0i32.to_le_bytes());
        assert_eq!(ForkReply::decode(&bad), None, "pid 0 is no worker");
        assert_eq!(ForkReply::decode(b"F\0\0"), None, "short");
        assert_eq!(ForkReply::decode(b"X12345678"), None, "unknown tag");
    }
}
