//! The private control channel between agentd and a worker (not A2A).
//!
//! ```text
//!  supervisor (procman)                          worker (agentd __worker)
//!        │ ◀──────────── ready {pid} ─────────────── │  started, waiting
//!        │ ───────────── spawn {task, message, runner} ▶ │
//!        │ ◀──────────── status / artifact ────────── │  progress
//!        │ ───────────── input {message} ───────────▶ │  follow-up turn
//!        │ ───────────── ping ──────────────────────▶ │
//!        │ ◀──────────── pong ─────────────────────── │
//!        │ ───────────── cancel ────────────────────▶ │  first rung of the ladder
//!        │ ◀──────────── done {state, text, cause} ── │  then the worker exits
//! ```
//!
//! A frame is a 4-byte big-endian length, then that many bytes of one JSON
//! object. Frames over [`CONTROL_FRAME_MAX_BYTES`] are refused both ways.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use crate::limits::CONTROL_FRAME_MAX_BYTES;
use crate::wire::{Artifact, Message};

/// What the worker runs, as procman tells it in `spawn`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum RunnerSpec {
    Echo,
    Peer {
        address: String,
    },
    Exec {
        argv: Vec<String>,
        protocol: String,
        workdir: Option<String>,
        env: Vec<(String, String)>,
        rlimits: Rlimits,
        output_max_bytes: u64,
    },
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
    Cancelled,
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
            Cause::Cancelled => "cancelled",
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
// A frame lives only between decode and dispatch, a few per task: the
// size of `Spawn` costs nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ToWorker {
    Spawn {
        task_id: String,
        context_id: String,
        message: Message,
        runner: RunnerSpec,
        /// The W3C trace context of the request that created the task.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<crate::trace::TraceContext>,
    },
    Input {
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
#[serde(tag = "type", rename_all = "lowercase")]
pub enum FromWorker {
    Ready {
        pid: i32,
    },
    Status {
        state: Progress,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    Artifact {
        artifact: Artifact,
        #[serde(default)]
        append: bool,
        #[serde(default)]
        last_chunk: bool,
    },
    /// The agent answers with this Message instead of a task.
    Reply {
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

/// Why a frame could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    TooLarge(usize),
    BadJson(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge(n) => write!(
                f,
                "control frame of {n} bytes is over the {CONTROL_FRAME_MAX_BYTES}-byte limit"
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

/// Encodes one frame.
pub fn encode<T: Serialize>(frame: &T) -> Result<Vec<u8>, FrameError> {
    let json = serde_json::to_vec(frame).map_err(|e| FrameError::BadJson(e.to_string()))?;
    if json.len() > CONTROL_FRAME_MAX_BYTES {
        return Err(FrameError::TooLarge(json.len()));
    }
    let mut out = Vec::with_capacity(4 + json.len());
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(&json);
    Ok(out)
}

/// Decodes the first frame in `buf`, if a whole one is there: `Ok(None)` =
/// need more bytes; `Ok(Some((frame, consumed)))`. No I/O, for fuzzing.
pub fn decode<T: for<'de> Deserialize<'de>>(buf: &[u8]) -> Result<Option<(T, usize)>, FrameError> {
    let Some(len_bytes) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]) as usize;
    if len > CONTROL_FRAME_MAX_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    let Some(body) = buf.get(4..4 + len) else {
        return Ok(None);
    };
    let frame = serde_json::from_slice(body).map_err(|e| FrameError::BadJson(e.to_string()))?;
    Ok(Some((frame, 4 + len)))
}

/// Writes one frame.
pub fn write_frame<T: Serialize>(w: &mut impl Write, frame: &T) -> io::Result<()> {
    w.write_all(&encode(frame)?)
}

/// Reads one frame; `Ok(None)` on a clean EOF between frames.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> io::Result<Option<T>> {
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
    if len > CONTROL_FRAME_MAX_BYTES {
        return Err(FrameError::TooLarge(len).into());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_bytes() {
        let frames = vec![
            FromWorker::Ready { pid: 42 },
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
            write_frame(&mut wire, f).unwrap();
        }
        let mut r = &wire[..];
        for f in &frames {
            assert_eq!(read_frame::<FromWorker>(&mut r).unwrap().as_ref(), Some(f));
        }
        assert_eq!(read_frame::<FromWorker>(&mut r).unwrap(), None);
    }

    #[test]
    fn decode_needs_whole_frames_and_bounds_length() {
        let wire = encode(&ToWorker::Ping).unwrap();
        for cut in 0..wire.len() {
            assert_eq!(decode::<ToWorker>(&wire[..cut]).unwrap(), None);
        }
        assert_eq!(decode::<ToWorker>(&wire).unwrap(), Some((ToWorker::Ping, wire.len())));
        let huge = (CONTROL_FRAME_MAX_BYTES as u32 + 1).to_be_bytes();
        assert!(matches!(decode::<ToWorker>(&huge), Err(FrameError::TooLarge(_))));
        assert!(matches!(
            decode::<ToWorker>(b"\0\0\0\x02{}"),
            Err(FrameError::BadJson(_))
        ));
    }

    #[test]
    fn eof_mid_frame_is_an_error() {
        let wire = encode(&ToWorker::Cancel).unwrap();
        let mut r = &wire[..wire.len() - 1];
        assert!(read_frame::<ToWorker>(&mut r).is_err());
    }
}
