//! The `exec` runner's `jsonl` protocol: one JSON object per line each way,
//! so a program in any language drives the whole A2A task model.
//!
//! agentd → program, for the first message and every follow-up:
//! ```text
//! {"message": <A2A Message>, "task": {"id": "…", "contextId": "…"}}
//! ```
//! program → agentd, one of:
//! ```text
//! {"status": "working" | "input-required" | "auth-required", "text"?: "…"}
//! {"status": "completed" | "failed" | "rejected", "text"?: "…"}       (ends the task)
//! {"artifact": {"artifactId"?, "name"?, "description"?, "parts": […], "metadata"?},
//!  "append"?: bool, "lastChunk"?: bool}
//! {"message": {"parts": […], "metadata"?}}       (first and only line: a direct reply)
//! ```
//! After `input-required` the program reads its next stdin line. A line that
//! is not one of these fails the task with the line number and the reason.
//! A program that exits without a terminal line: 0 → COMPLETED, else FAILED.
//! [`Jsonl`] is a `Protocol` of the runner loop in `exec`, which watches
//! the program (exit, pipes, grace) and decides how it ended.

use std::borrow::Cow;
use std::io::{BufRead, BufReader, Read};
use std::process::ChildStdout;

use crossbeam_channel::{Receiver, Sender};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::exec::{Heard, Protocol};
use super::program::{self, Note, Stdin};
use super::{Done, Link};
use crate::control::{Cause, FromWorker, Outcome, Progress, RAW_TEXT_MIN_BYTES};
use crate::limits::JSONL_LINE_MAX_BYTES;
use crate::wire::{Artifact, Message, Part, Role};

/// One parsed line from the program.
#[derive(Debug, PartialEq)]
pub enum Line {
    Progress(Progress, Option<String>),
    End(Outcome, Option<String>),
    Artifact {
        artifact_id: Option<String>,
        name: Option<String>,
        description: Option<String>,
        parts: Vec<Part>,
        metadata: Option<Map<String, Value>>,
        append: bool,
        last_chunk: bool,
    },
    Reply(Vec<Part>, Option<Map<String, Value>>),
}

/// Parses one line of the program's output; the error says what is wrong
/// in words a program's author can act on.
pub fn parse_line(bytes: &[u8]) -> Result<Line, String> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(mut obj) = value else {
        return Err("expected a JSON object".into());
    };
    let keys: Vec<&str> = ["status", "artifact", "message"]
        .into_iter()
        .filter(|k| obj.contains_key(*k))
        .collect();
    let key = match keys.as_slice() {
        [k] => *k,
        [] => return Err("expected one of `status`, `artifact`, `message`".into()),
        _ => {
            return Err(format!(
                "expected one of `status`, `artifact`, `message`, found {}",
                keys.join(" and ")
            ))
        }
    };
    let text = match obj.remove("text") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => Some(t),
        Some(_) => return Err("`text` must be a string".into()),
    };
    match key {
        "status" => {
            let Some(Value::String(state)) = obj.remove("status") else {
                return Err("`status` must be a string".into());
            };
            match state.as_str() {
                "working" => Ok(Line::Progress(Progress::Working, text)),
                "input-required" => Ok(Line::Progress(Progress::InputRequired, text)),
                "auth-required" => Ok(Line::Progress(Progress::AuthRequired, text)),
                "completed" => Ok(Line::End(Outcome::Completed, text)),
                "failed" => Ok(Line::End(Outcome::Failed, text)),
                "rejected" => Ok(Line::End(Outcome::Rejected, text)),
                other => Err(format!(
                    "unknown status `{other}` (expected working, input-required, auth-required, \
                     completed, failed or rejected)"
                )),
            }
        }
        "artifact" => {
            let flag = |obj: &mut Map<String, Value>, k: &str| match obj.remove(k) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(b),
                Some(_) => Err(format!("`{k}` must be true or false")),
            };
            let append = flag(&mut obj, "append")?;
            let last_chunk = flag(&mut obj, "lastChunk")?;
            let Some(Value::Object(mut a)) = obj.remove("artifact") else {
                return Err("`artifact` must be an object".into());
            };
            let string = |a: &mut Map<String, Value>, k: &str| match a.remove(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s)),
                Some(_) => Err(format!("`artifact.{k}` must be a string")),
            };
            Ok(Line::Artifact {
                artifact_id: string(&mut a, "artifactId")?,
                name: string(&mut a, "name")?,
                description: string(&mut a, "description")?,
                parts: parts(a.remove("parts"), "artifact.parts")?,
                metadata: metadata(a.remove("metadata"), "artifact.metadata")?,
                append,
                last_chunk,
            })
        }
        _ => {
            let Some(Value::Object(mut m)) = obj.remove("message") else {
                return Err("`message` must be an object".into());
            };
            Ok(Line::Reply(
                parts(m.remove("parts"), "message.parts")?,
                metadata(m.remove("metadata"), "message.metadata")?,
            ))
        }
    }
}

fn parts(v: Option<Value>, field: &str) -> Result<Vec<Part>, String> {
    let Some(v @ Value::Array(_)) = v else {
        return Err(format!("`{field}` must be an array of parts"));
    };
    let parts: Vec<Part> = serde_json::from_value(v).map_err(|e| format!("`{field}`: {e}"))?;
    if parts.is_empty() {
        return Err(format!("`{field}` needs at least one part"));
    }
    Ok(parts)
}

fn metadata(v: Option<Value>, field: &str) -> Result<Option<Map<String, Value>>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(_) => Err(format!("`{field}` must be an object")),
    }
}

/// The line agentd writes for a message.
pub fn message_line(message: &Message, task_id: &str, context_id: &str) -> Vec<u8> {
    let mut line = serde_json::to_vec(&json!({
        "message": message,
        "task": {"id": task_id, "contextId": context_id},
    }))
    .unwrap_or_default();
    line.push(b'\n');
    line
}

/// The protocol: the task's first message and every follow-up in, one
/// line of the task model out per line.
pub struct Jsonl<'a> {
    task_id: &'a str,
    context_id: &'a str,
    message: &'a Message,
    link: &'a Link,
    /// The artifact of lines that name none.
    default_artifact: String,
    /// Lines read so far (blank ones aside), for error messages.
    line_no: usize,
}

impl<'a> Jsonl<'a> {
    pub fn new(task_id: &'a str, context_id: &'a str, message: &'a Message, link: &'a Link) -> Jsonl<'a> {
        Jsonl {
            task_id,
            context_id,
            message,
            link,
            default_artifact: crate::ids::new_id(),
            line_no: 0,
        }
    }

    /// Relays a frame; one that does not fit the channel fails the task.
    fn relay(&self, frame: &FromWorker, then: Heard) -> Heard {
        match self.link.send(frame) {
            Ok(()) => then,
            Err(e) => Heard::Broken(too_big(self.line_no, &e)),
        }
    }
}

impl Protocol for Jsonl<'_> {
    const READ: fn(ChildStdout, u64, &Sender<Note>, &Receiver<Vec<u8>>) = read_lines;

    fn begin(&mut self, stdin: &mut Stdin) {
        // An empty queue always has room for the first message.
        let _ = stdin.send(message_line(self.message, self.task_id, self.context_id));
    }

    fn output(&mut self, line: &mut Vec<u8>, over: bool) -> Heard {
        self.line_no += 1;
        if over {
            return Heard::Nothing; // the task is over; later lines change nothing
        }
        match step(self.line_no, line, self.context_id, &self.default_artifact) {
            Step::Send(frame) => self.relay(&frame, Heard::Nothing),
            Step::SendText(shell, text) => match self.link.send_with_text(&shell, &text) {
                Ok(()) => Heard::Nothing,
                Err(e) => Heard::Broken(too_big(self.line_no, &e)),
            },
            Step::Reply(frame) => self.relay(
                &frame,
                Heard::Verdict(Done {
                    outcome: Outcome::Completed,
                    cause: Cause::Completed,
                    text: None,
                }),
            ),
            Step::End(done) => Heard::Verdict(done),
            Step::Bad(done) => Heard::Broken(done),
        }
    }

    fn too_long(&mut self) -> Heard {
        Heard::Broken(bad_line(self.line_no + 1, &line_too_long()))
    }

    fn input(&mut self, message: Message, stdin: &mut Stdin) -> Heard {
        match stdin.send(message_line(&message, self.task_id, self.context_id)) {
            Ok(()) => Heard::Nothing,
            Err(e) => Heard::Broken(program::failed(Cause::Failed, e.to_string())),
        }
    }

    fn finish(&mut self) {}
}

/// What one line of the program's output does to the task.
enum Step<'l> {
    /// Relay this frame; the task goes on.
    Send(FromWorker),
    /// Relay this frame with this long text in its one empty part (the
    /// text still in the line, if it had no escapes); the task goes on.
    SendText(FromWorker, Cow<'l, str>),
    /// Relay this direct reply; the task is then over.
    Reply(FromWorker),
    /// The program's verdict: the task is over, the program may exit.
    End(Done),
    /// Not a valid line: the task fails and the program is killed.
    Bad(Done),
}

fn step<'l>(line_no: usize, bytes: &'l [u8], context_id: &str, default_artifact: &str) -> Step<'l> {
    if bytes.len() >= LONG_LINE_BYTES {
        if let Ok(chunk) = serde_json::from_slice::<TextChunk<'l>>(bytes) {
            return chunk.step(default_artifact);
        }
    }
    step_parsed(line_no, bytes, context_id, default_artifact)
}

/// [`step`] for a line read by [`parse_line`].
fn step_parsed<'l>(line_no: usize, bytes: &[u8], context_id: &str, default_artifact: &str) -> Step<'l> {
    match parse_line(bytes) {
        Ok(Line::Reply(parts, metadata)) if line_no == 1 => Step::Reply(FromWorker::Reply {
            message: Box::new(Message {
                message_id: crate::ids::new_id(),
                context_id: Some(context_id.to_string()),
                task_id: None,
                role: Role::Agent,
                parts,
                metadata,
                extensions: Vec::new(),
                reference_task_ids: Vec::new(),
            }),
        }),
        Ok(Line::Reply(..)) => Step::Bad(bad_line(
            line_no,
            "a `message` reply must be the program's first and only line",
        )),
        Ok(Line::Progress(state, text)) => Step::Send(FromWorker::Status { state, text }),
        Ok(Line::End(outcome, text)) => {
            let cause = match outcome {
                Outcome::Completed => Cause::Completed,
                Outcome::Rejected => Cause::Refused,
                _ => Cause::Failed,
            };
            Step::End(Done { outcome, cause, text })
        }
        Ok(Line::Artifact {
            artifact_id,
            name,
            description,
            parts,
            metadata,
            append,
            last_chunk,
        }) => Step::Send(FromWorker::Artifact {
            artifact: Box::new(Artifact {
                artifact_id: artifact_id.unwrap_or_else(|| default_artifact.to_string()),
                name,
                description,
                parts,
                metadata,
                extensions: Vec::new(),
            }),
            append,
            last_chunk,
        }),
        Err(reason) => Step::Bad(bad_line(line_no, &reason)),
    }
}

/// How long a line is before [`TextChunk`] is tried on it: below this,
/// copying its text costs less than a second parse of a line of another
/// shape.
const LONG_LINE_BYTES: usize = 64 * 1024;

/// The line most programs with large output write: an artifact chunk of
/// one text part and nothing else,
/// `{"artifact":{"artifactId"?,"name"?,"description"?,"parts":[{"text":…}]},"append"?,"lastChunk"?}`,
/// read with its text left in the line (unless it has escapes), where
/// [`parse_line`] would copy megabytes into a tree and out again. Any line
/// this does not take — another shape, a key twice, a null flag — is
/// parse_line's, which reads every line this takes the same way and says
/// what is wrong with the rest.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TextChunk<'a> {
    #[serde(borrow)]
    artifact: TextArtifact<'a>,
    #[serde(default)]
    append: bool,
    #[serde(default)]
    last_chunk: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TextArtifact<'a> {
    artifact_id: Option<String>,
    name: Option<String>,
    description: Option<String>,
    #[serde(borrow)]
    parts: [TextPart<'a>; 1],
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextPart<'a> {
    #[serde(borrow)]
    text: Cow<'a, str>,
}

impl<'a> TextChunk<'a> {
    /// The chunk as the frame parse_line's reading of it makes: with its
    /// text apart when that is long enough to go raw.
    fn step(self, default_artifact: &str) -> Step<'a> {
        let TextChunk {
            artifact,
            append,
            last_chunk,
        } = self;
        let [TextPart { text }] = artifact.parts;
        let long = text.len() >= RAW_TEXT_MIN_BYTES;
        let frame = FromWorker::Artifact {
            artifact: Box::new(Artifact {
                artifact_id: artifact.artifact_id.unwrap_or_else(|| default_artifact.to_string()),
                name: artifact.name,
                description: artifact.description,
                parts: vec![Part::text(if long { String::new() } else { text.to_string() })],
                metadata: None,
                extensions: Vec::new(),
            }),
            append,
            last_chunk,
        };
        if long {
            Step::SendText(frame, text)
        } else {
            Step::Send(frame)
        }
    }
}

/// The frame the in-place reading makes of `bytes` (its text put back in
/// its part), if [`TextChunk`] takes the line at any length, and the frame
/// [`parse_line`]'s reading makes, if that takes it: for the fuzz target
/// that holds them alike.
#[doc(hidden)]
pub fn chunk_readings(bytes: &[u8]) -> Option<(FromWorker, Option<FromWorker>)> {
    use crate::control::Frame;
    const DEFAULT_ARTIFACT: &str = "default";
    let chunk = serde_json::from_slice::<TextChunk>(bytes).ok()?;
    let in_place = match chunk.step(DEFAULT_ARTIFACT) {
        Step::Send(frame) => frame,
        Step::SendText(mut shell, text) => {
            let joined = shell.join_text(text.into_owned());
            assert!(joined, "a chunk's shell has the empty part its text goes into");
            shell
        }
        _ => return None,
    };
    let parsed = match step_parsed(1, bytes, "c", DEFAULT_ARTIFACT) {
        Step::Send(frame) => Some(frame),
        _ => None,
    };
    Some((in_place, parsed))
}

/// A line within the limit always fits a frame (limits.rs says why); this
/// is for a daemon whose limits were changed under a running worker.
fn too_big(n: usize, e: &crate::control::FrameError) -> Done {
    program::failed(
        Cause::Failed,
        format!("the program's output line {n} does not fit the control channel: {e}"),
    )
}

fn bad_line(n: usize, reason: &str) -> Done {
    program::failed(
        Cause::Failed,
        format!("the program's output line {n} is not valid jsonl: {reason}"),
    )
}

/// Why a line over the limit fails the task, naming the limit.
fn line_too_long() -> String {
    format!(
        "it is longer than the jsonl line limit of {JSONL_LINE_MAX_BYTES} bytes ({} MiB)",
        JSONL_LINE_MAX_BYTES / (1024 * 1024)
    )
}

/// Splits stdout into lines (bounded) and counts the output budget; each
/// line is read into a buffer given back from an earlier one if there is
/// one.
pub fn read_lines(stdout: impl Read, output_max: u64, tx: &Sender<Note>, spares: &Receiver<Vec<u8>>) {
    // Read as much as the pipe holds at once, not 8 KiB at a time.
    let mut reader = BufReader::with_capacity(crate::limits::PROGRAM_STDOUT_PIPE_BYTES, stdout);
    let mut total: u64 = 0;
    let mut line = Vec::new();
    loop {
        if line.capacity() == 0 {
            line = spares.try_recv().unwrap_or_default();
        }
        line.clear();
        let n = match (&mut reader)
            .take(JSONL_LINE_MAX_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if !program::charge_output(&mut total, n, output_max, tx) {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        } else if n > JSONL_LINE_MAX_BYTES {
            let _ = tx.send(Note::TooLong);
            break;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue; // blank lines are allowed and ignored
        }
        if tx.send(Note::Output(std::mem::take(&mut line))).is_err() {
            return;
        }
    }
    let _ = tx.send(Note::StdoutEof);
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! bad {
        ($($name:ident: $line:expr => $needle:expr;)*) => {$(
            #[test]
            fn $name() {
                let err = parse_line($line.as_bytes()).unwrap_err();
                assert!(err.contains($needle), "{err}");
            }
        )*};
    }

    bad! {
        not_json: "hello" => "not JSON";
        not_object: "[1]" => "JSON object";
        no_known_key: r#"{"foo":1}"# => "expected one of";
        two_keys: r#"{"status":"working","message":{}}"# => "status and message";
        unknown_status: r#"{"status":"done"}"# => "unknown status `done`";
        text_not_string: r#"{"status":"working","text":3}"# => "`text` must be a string";
        artifact_no_parts: r#"{"artifact":{}}"# => "artifact.parts";
        artifact_empty_parts: r#"{"artifact":{"parts":[]}}"# => "at least one part";
        bad_part: r#"{"artifact":{"parts":[{"text":"a","url":"b"}]}}"# => "exactly one";
        append_not_bool: r#"{"artifact":{"parts":[{"text":"a"}]},"append":"yes"}"# => "`append` must be true or false";
        message_no_parts: r#"{"message":{}}"# => "message.parts";
    }

    #[test]
    fn good_lines() {
        assert_eq!(
            parse_line(br#"{"status":"input-required","text":"which city?"}"#).unwrap(),
            Line::Progress(Progress::InputRequired, Some("which city?".into()))
        );
        assert_eq!(
            parse_line(br#"{"status":"rejected"}"#).unwrap(),
            Line::End(Outcome::Rejected, None)
        );
        let Line::Artifact {
            parts,
            append,
            last_chunk,
            artifact_id,
            ..
        } = parse_line(br#"{"artifact":{"parts":[{"data":{"a":1}}]},"append":true,"lastChunk":true}"#).unwrap()
        else {
            panic!("not an artifact")
        };
        assert!(append && last_chunk && artifact_id.is_none());
        assert_eq!(parts.len(), 1);
        assert!(matches!(
            parse_line(br#"{"message":{"parts":[{"text":"hi"}]}}"#).unwrap(),
            Line::Reply(..)
        ));
    }

    /// What read_lines makes of `input`.
    fn lines_of(input: &[u8]) -> Vec<Note> {
        let (tx, rx) = crossbeam_channel::unbounded();
        read_lines(input, u64::MAX, &tx, &crossbeam_channel::never());
        drop(tx);
        rx.iter().collect()
    }

    #[test]
    fn a_line_is_read_into_the_buffer_given_back() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let (spares_tx, spares_rx) = crossbeam_channel::bounded(1);
        let spare = Vec::with_capacity(1 << 16);
        let at = spare.as_ptr();
        spares_tx.send(spare).unwrap();
        read_lines(&b"{\"status\":\"working\"}\n{}\n"[..], u64::MAX, &tx, &spares_rx);
        drop(tx);
        let notes: Vec<Note> = rx.iter().collect();
        let [Note::Output(first), Note::Output(second), Note::StdoutEof] = notes.as_slice() else {
            panic!("two lines and the end: {notes:?}")
        };
        assert_eq!(
            (first.as_slice(), second.as_slice()),
            (&b"{\"status\":\"working\"}"[..], &b"{}"[..])
        );
        assert_eq!(first.as_ptr(), at, "the first line went into the spare");
        assert_ne!(second.as_ptr(), at, "the second, with none given back, into a new one");
    }

    #[test]
    fn a_line_at_the_limit_passes_one_byte_over_fails() {
        let mut at = vec![b' '; JSONL_LINE_MAX_BYTES];
        at[..2].copy_from_slice(b"{}");
        at.push(b'\n');
        let notes = lines_of(&at);
        assert!(
            matches!(notes.as_slice(), [Note::Output(l), Note::StdoutEof] if l.len() == JSONL_LINE_MAX_BYTES),
            "a line of exactly the limit is one line"
        );
        let mut over = at.clone();
        over.insert(0, b' ');
        let notes = lines_of(&over);
        assert!(matches!(notes.as_slice(), [Note::TooLong, Note::StdoutEof]));
        assert_eq!(
            bad_line(1, &line_too_long()).text.as_deref(),
            Some(
                "the program's output line 1 is not valid jsonl: it is longer than the jsonl line \
                 limit of 4194304 bytes (4 MiB)"
            )
        );
    }

    /// A protocol over a pipe, and the pipe's far end to read its frames.
    fn relaying(context_id: &str, f: impl FnOnce(&mut Jsonl<'_>)) -> Vec<FromWorker> {
        let (far, near) = crate::sys::pipe().unwrap();
        let link = Link::new(std::fs::File::from(near), 1 << 20);
        let message = Message::agent_text("hi", "t", context_id);
        // Read as they come: a frame larger than the pipe holds waits for it.
        let mut far = std::fs::File::from(far);
        let reader = std::thread::spawn(move || {
            std::iter::from_fn(|| crate::control::read_frame(&mut far, 1 << 20).unwrap()).collect()
        });
        f(&mut Jsonl::new("t", context_id, &message, &link));
        drop(link);
        reader.join().unwrap()
    }

    /// Long lines of every shape near the one TextChunk takes: each must
    /// reach agentd as the frame parse_line's reading of it makes.
    #[test]
    fn a_long_text_chunk_is_relayed_as_parse_line_reads_it() {
        let text = "a".repeat(LONG_LINE_BYTES);
        let escaped = format!("{}\\n\\\"\\u00e9{}", "b".repeat(LONG_LINE_BYTES), "€");
        let lines: Vec<(String, bool)> = vec![
            (format!(r#"{{"artifact":{{"parts":[{{"text":"{text}"}}]}}}}"#), true),
            (
                format!(
                    r#"{{"artifact":{{"artifactId":"x","name":"n","description":"d","parts":[{{"text":"{text}"}}]}},"append":true,"lastChunk":false}}"#
                ),
                true,
            ),
            (
                format!(r#"{{"lastChunk":true,"artifact":{{"parts":[{{"text":"{escaped}"}}],"name":null}}}}"#),
                true,
            ),
            (
                format!(r#"{{"artifact":{{"parts":[{{"text":"{text}"}}]}},"append":null}}"#),
                false,
            ),
            (
                format!(r#"{{"artifact":{{"parts":[{{"text":"{text}"}}]}},"text":"ignored"}}"#),
                false,
            ),
            (
                format!(r#"{{"artifact":{{"parts":[{{"text":"{text}"}}],"metadata":{{"k":1}}}}}}"#),
                false,
            ),
            (
                format!(r#"{{"artifact":{{"parts":[{{"text":"{text}","mediaType":"text/plain"}}]}}}}"#),
                false,
            ),
            (
                format!(r#"{{"artifact":{{"parts":[{{"text":"{text}"}},{{"text":"b"}}]}}}}"#),
                false,
            ),
            (
                format!(r#"{{"artifact":{{"artifactId":"1","artifactId":"2","parts":[{{"text":"{text}"}}]}}}}"#),
                false,
            ),
            (
                format!(r#"{{"artifact":{{"parts":[{{"text":"{text}"}}]}},"other":[1,2]}}"#),
                false,
            ),
            (
                format!(r#"{{"artifact":{{"name":"{text}","parts":[{{"text":"short"}}]}}}}"#),
                true,
            ),
            (
                format!(r#"{{"art\u0069fact":{{"parts":[{{"t\u0065xt":"{text}"}}]}}, "append" : true }}"#),
                true,
            ),
            (
                format!(r#"{{"artifact":{{"parts":[{{"text":"{text}"}}]}},"lastchunk":true}}"#),
                false,
            ),
        ];
        for (line, plain) in lines {
            let mut default = String::new();
            let frames = relaying("c", |p| {
                default = p.default_artifact.clone();
                assert_eq!(
                    p.output(&mut line.clone().into_bytes(), false),
                    Heard::Nothing,
                    "{line:.120}"
                );
            });
            let Step::Send(expected) = step_parsed(1, line.as_bytes(), "c", &default) else {
                panic!("parse_line takes the line: {line:.120}")
            };
            assert_eq!(frames, vec![expected], "{line:.120}");
            let took = serde_json::from_slice::<TextChunk>(line.as_bytes()).is_ok();
            assert_eq!(took, plain, "TextChunk takes only the plain shape: {line:.120}");
        }
    }

    #[test]
    fn a_first_line_reply_is_the_verdict_and_is_relayed() {
        let frames = relaying("c", |p| {
            assert_eq!(
                p.output(&mut br#"{"message":{"parts":[{"text":"hello"}]}}"#.to_vec(), false),
                Heard::Verdict(Done {
                    outcome: Outcome::Completed,
                    cause: Cause::Completed,
                    text: None
                })
            );
        });
        let [FromWorker::Reply { message }] = frames.as_slice() else {
            panic!("one reply frame: {frames:?}")
        };
        assert_eq!((message.context_id.as_deref(), message.role), (Some("c"), Role::Agent));
        assert_eq!(message.text(), "hello");
    }

    #[test]
    fn lines_relay_until_the_ending_is_known() {
        let frames = relaying("c", |p| {
            let mut working = br#"{"status":"working","text":"on it"}"#.to_vec();
            assert_eq!(p.output(&mut working, false), Heard::Nothing);
            let mut chunk = br#"{"artifact":{"parts":[{"text":"a"}]},"lastChunk":true}"#.to_vec();
            assert_eq!(p.output(&mut chunk, false), Heard::Nothing);
            let Heard::Broken(done) = p.output(&mut br#"{"message":{"parts":[{"text":"late"}]}}"#.to_vec(), false)
            else {
                panic!("a reply on line 3 is refused")
            };
            assert_eq!(
                done.text.as_deref(),
                Some("the program's output line 3 is not valid jsonl: a `message` reply must be the program's first and only line")
            );
            assert_eq!(
                p.output(&mut b"junk".to_vec(), true),
                Heard::Nothing,
                "over: read, not judged"
            );
            let Heard::Broken(done) = p.too_long() else {
                panic!("too long is broken")
            };
            assert!(
                done.text.unwrap().starts_with("the program's output line 5 "),
                "lines are counted when over too"
            );
        });
        let [FromWorker::Status {
            state: Progress::Working,
            text,
        }, FromWorker::Artifact {
            artifact,
            last_chunk: true,
            ..
        }] = frames.as_slice()
        else {
            panic!("a status and an artifact: {frames:?}")
        };
        assert_eq!(text.as_deref(), Some("on it"));
        assert!(
            !artifact.artifact_id.is_empty(),
            "a line naming no artifact gets the default one"
        );
    }

    #[test]
    fn message_lines_name_the_task() {
        let m = Message {
            message_id: "m".into(),
            context_id: Some("c".into()),
            task_id: Some("t".into()),
            role: Role::User,
            parts: vec![Part::text("hi")],
            metadata: None,
            extensions: vec![],
            reference_task_ids: vec![],
        };
        let line = message_line(&m, "t", "c");
        assert_eq!(line.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["task"], json!({"id": "t", "contextId": "c"}));
        assert_eq!(v["message"]["parts"][0]["text"], "hi");
    }
}
