//! What each fuzz target checks, one function per target, so that
//! `fuzz_targets/<name>.rs` is one line and `tests/fuzz_regressions.rs`
//! (which includes this file by path) runs the committed seeds and any
//! crash inputs through exactly the same checks under `cargo test`.
//!
//! Every function takes arbitrary bytes, does no I/O beyond [`MemConn`] and
//! byte slices, and must never panic: a panic is either a parser bug or a
//! broken invariant asserted here.

use std::io::{BufReader, Read};

use agentd::config::{self, Config};
use agentd::control::{self, ForkReply, ForkRequest, FromWorker, ToWorker};
use agentd::http::chunked::{ChunkError, Decoder};
use agentd::http::client::ResponseReader;
use agentd::http::sse::{Event, Parser, SseError};
use agentd::http::{write_response, Limits, MemConn, ReadError, Reader};
use agentd::mcp;
use agentd::systemd::{self, NotifyTarget};
use agentd::wire::{
    CancelTaskRequest, GetTaskRequest, JoinedText, ListTasksRequest, LongText, Message, Part, SendMessageRequest,
    SubscribeToTaskRequest,
};
use agentd::worker::jsonl::{self, Line};
use agentd::worker::Note;
use agentd::{limits, rpc};

/// Requests read from one connection until it closes or is rejected.
pub fn http_request(data: &[u8]) {
    const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
    let mut conn = MemConn::new(data);
    let mut reader = Reader::new(Limits::default());
    // Each request consumes at least one byte, so this ends anyway; the bound is belt and braces.
    for _ in 0..=data.len() {
        match reader.read_request(&mut conn) {
            Ok(req) => {
                assert!(req.body.len() <= limits::HTTP_BODY_MAX_BYTES);
                assert!(!req.path.contains('?'), "path keeps its query: {:?}", req.path);
                let _ = (req.header("content-type"), req.query_param("A2A-Version"));
            }
            Err(ReadError::Closed) => break,
            Err(e @ ReadError::Reject { .. }) => {
                let resp = e.response().expect("a Reject has a response");
                write_response(&mut Vec::new(), &resp, false).expect("a Reject writes");
                break;
            }
            // A MemConn neither times out nor fails.
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    // All the reader ever writes is 100 Continue.
    assert!(
        conn.output.chunks(CONTINUE.len()).all(|c| c == CONTINUE),
        "{:?}",
        conn.output
    );
}

/// The first byte picks a split point; the rest is a chunked body. Fed whole,
/// in two pieces and byte by byte, the decoder must say the same thing.
pub fn chunked(data: &[u8]) {
    let Some((&cut, input)) = data.split_first() else {
        return;
    };
    let cut = usize::from(cut) % (input.len() + 1);
    let whole = decode_chunked(input, &[input.len()]);
    assert_eq!(
        whole,
        decode_chunked(input, &[cut, input.len() - cut]),
        "split at {cut}"
    );
    assert_eq!(whole, decode_chunked(input, &vec![1; input.len()]), "byte by byte");
}

/// (result with the total consumed, decoded bytes, done) after feeding
/// `input` in pieces of the given sizes, stopping at the body's end or an error.
fn decode_chunked(input: &[u8], pieces: &[usize]) -> (Result<usize, ChunkError>, Vec<u8>, bool) {
    // A small trailer bound, so fuzz-sized inputs reach TrailerTooLong.
    let mut dec = Decoder::with_trailer_max(256);
    let mut out = Vec::new();
    let (mut at, mut used) = (0, 0);
    for &n in pieces {
        let piece = &input[at..at + n];
        at += n;
        match dec.feed(piece, &mut out) {
            Ok(k) => {
                assert!(k <= piece.len(), "consumed {k} of {}", piece.len());
                assert!(k == piece.len() || dec.is_done(), "stopped early without being done");
                used += k;
                if dec.is_done() {
                    assert_eq!(dec.feed(b"more", &mut Vec::new()), Ok(0), "done consumes nothing");
                    break;
                }
            }
            Err(e) => {
                assert_eq!(dec.feed(b"0\r\n\r\n", &mut Vec::new()), Err(e.clone()), "errors stick");
                return (Err(e), out, false);
            }
        }
    }
    assert!(out.len() <= used, "{} data bytes from {used} consumed", out.len());
    (Ok(used), out, dec.is_done())
}

/// The first byte picks a split point; the rest is an event stream, parsed
/// with small and with default bounds, whole and in two pieces.
pub fn sse(data: &[u8]) {
    let Some((&cut, input)) = data.split_first() else {
        return;
    };
    let cut = usize::from(cut) % (input.len() + 1);
    for (line_max, event_max) in [(64, 256), (limits::SSE_LINE_MAX_BYTES, limits::SSE_EVENT_MAX_BYTES)] {
        let whole = parse_sse(line_max, event_max, &[input]);
        let split = parse_sse(line_max, event_max, &[&input[..cut], &input[cut..]]);
        assert_eq!(whole, split, "split at {cut}");
        for ev in &whole.0 {
            assert!(ev.data.len() <= event_max);
            assert!(!ev.id.as_deref().unwrap_or("").contains('\0'));
        }
    }
}

fn parse_sse(
    line_max: usize,
    event_max: usize,
    pieces: &[&[u8]],
) -> (Vec<Event>, Result<(), SseError>, Option<String>) {
    let mut p = Parser::with_limits(line_max, event_max);
    let mut events = Vec::new();
    let mut result = Ok(());
    for piece in pieces {
        result = p.feed(piece, &mut events);
        if let Err(e) = &result {
            assert_eq!(p.feed(b"data: x\n\n", &mut Vec::new()).as_ref(), Err(e), "errors stick");
            break;
        }
    }
    (events, result, p.last_event_id().map(str::to_string))
}

/// A whole response read by agentd's client, body capped at 1 MiB.
pub fn http_response(data: &[u8]) {
    let Ok((head, mut reader)) = ResponseReader::new(data) else {
        return;
    };
    assert!(head.status / 100 != 1, "1xx heads are skipped");
    let _ = head.header("content-type");
    if let Ok(body) = reader.body(1 << 20) {
        assert!(
            body.len() <= data.len(),
            "body of {} from {} bytes",
            body.len(),
            data.len()
        );
    }
}

/// A JSON-RPC request body, then its params as every A2A request type.
pub fn jsonrpc(data: &[u8]) {
    let req = match rpc::decode(data) {
        Ok(req) => req,
        Err((id, err)) => {
            assert!(id.is_null() || id.is_string() || id.is_number());
            let _ = (rpc::failure(&id, &err), err.http_status());
            return;
        }
    };
    assert!(
        !req.method.is_empty() && req.params.get().starts_with('{'),
        "params is an object"
    );
    let params: serde_json::Value = match serde_json::from_str(req.params.get()) {
        Ok(params) => params,
        Err(e) => {
            // JSON that a Value cannot hold, as RFC 8259 lets a parser
            // refuse: a number past f64's range, a lone UTF-16 surrogate
            // escape (no Rust string holds one). serde_json names the
            // surrogate cases three ways: a trailing one first ("lone
            // leading surrogate"), a leading one with no escape after it
            // ("unexpected end of hex escape"), a leading one with a
            // non-trailing escape after it ("invalid unicode code point").
            // decode keeps params as text, and the handlers read it
            // straight into their types, which refuse it where it matters
            // and skip it where it does not. Anything else is a decode
            // that let bad JSON through.
            let why = e.to_string();
            assert!(
                why.starts_with("number out of range")
                    || why.starts_with("lone leading surrogate")
                    || why.starts_with("unexpected end of hex escape")
                    || why.starts_with("invalid unicode code point"),
                "params is JSON: {e}"
            );
            let _ = serde_json::from_str::<SendMessageRequest>(req.params.get());
            let _ = serde_json::from_str::<ListTasksRequest>(req.params.get());
            return;
        }
    };
    assert!(params.is_object());
    // As the handlers read them: straight from the text into the request
    // type (a member given twice is an error there, as it is in a struct).
    let typed = serde_json::from_str::<SendMessageRequest>(req.params.get());
    let req_params = params;
    if let Ok(send) = typed {
        let again: Message = serde_json::from_value(serde_json::to_value(&send.message).unwrap()).unwrap();
        assert_eq!(again, send.message, "Message round trip");
    }
    let _ = serde_json::from_str::<GetTaskRequest>(req.params.get());
    let _ = serde_json::from_str::<ListTasksRequest>(req.params.get());
    let _ = serde_json::from_str::<CancelTaskRequest>(req.params.get());
    let _ = serde_json::from_str::<SubscribeToTaskRequest>(req.params.get());
    let _ = serde_json::from_value::<Vec<Part>>(req_params.get("parts").cloned().unwrap_or_default());
    let _ = rpc::success(&req.id, &req_params);
}

/// Control frames, both directions, decoded one after another; each one
/// decoded re-encodes to a frame that decodes to the same value, and
/// `read_frame` on a pipe that gives a few bytes at a time reads the same
/// frames (and fails where `decode` does). Then the fork server's request
/// and reply, which are not JSON: what decodes encodes back.
pub fn control_frame(data: &[u8]) {
    frames::<ToWorker>(data);
    frames::<FromWorker>(data);
    if let Some(req) = ForkRequest::decode(data) {
        assert_eq!(req.encode(), data, "a fork request decodes only from its own encoding");
        assert!((2..=4).contains(&req.fds()));
    }
    if let Some(reply) = ForkReply::decode(data) {
        assert_eq!(data.len(), ForkReply::LEN);
        assert_eq!(ForkReply::decode(&reply.encode()), Some(reply), "fork reply round trip");
    }
}

fn frames<T>(data: &[u8])
where
    T: control::Frame + PartialEq + std::fmt::Debug,
{
    let max = agentd::limits::control_frame_max_bytes(agentd::limits::HTTP_BODY_MAX_BYTES);
    let mut pipe = Trickle::new(data, 1 + data.len() % 7);
    let mut rest = data;
    loop {
        let decoded = control::decode::<T>(rest, max);
        let read = control::read_frame::<T>(&mut pipe, max);
        match (decoded, read) {
            (Ok(Some((frame, used))), Ok(Some(again))) => {
                assert!(used >= 4 && used <= rest.len(), "consumed {used} of {}", rest.len());
                assert_eq!(frame, again, "decode and read_frame disagree");
                // Re-encoding may grow a frame (numbers): no limit on the way back.
                let wire = control::encode(&frame, u32::MAX as usize).expect("a decoded frame encodes");
                let round = control::decode::<T>(&wire, u32::MAX as usize).expect("re-encoded frame decodes");
                assert_eq!(round, Some((frame, wire.len())));
                rest = &rest[used..];
            }
            // The end, between frames.
            (Ok(None), Ok(None)) => {
                assert!(rest.is_empty(), "read_frame saw EOF with {} bytes left", rest.len());
                return;
            }
            // A torn frame at the end: more bytes would be needed.
            (Ok(None), Err(e)) => {
                assert!(!rest.is_empty() && e.kind() == std::io::ErrorKind::UnexpectedEof, "{e}");
                return;
            }
            (Err(_), Err(_)) => return,
            (d, r) => panic!("decode says {d:?}, read_frame {r:?}"),
        }
    }
}

/// A reader that hands out at most `step` bytes a call, as a pipe does.
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
}

impl<'a> Trickle<'a> {
    fn new(data: &'a [u8], step: usize) -> Trickle<'a> {
        Trickle { data, step }
    }
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.step).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// One line of a jsonl program's output. A line the in-place reading of
/// long chunks takes must reach agentd as the general reading's frame.
pub fn jsonl_line(data: &[u8]) {
    match jsonl::parse_line(data) {
        Ok(Line::Artifact { parts, .. }) | Ok(Line::Reply(parts, _)) => assert!(!parts.is_empty()),
        Ok(_) => {}
        Err(why) => assert!(!why.is_empty()),
    }
    if let Some((in_place, parsed)) = jsonl::chunk_readings(data) {
        assert_eq!(Some(in_place), parsed, "the two readings differ");
    }
}

/// A jsonl program's stdout as the worker splits it (`jsonl::read_lines`):
/// byte 0 sets how much one read of the pipe gives, byte 1 the output
/// budget (255: none). The lines must be the input split at LF, with one
/// CR before the LF dropped and blank lines skipped, up to the budget; then
/// `Exhausted` if it ran out, and `StdoutEof` last.
pub fn jsonl_lines(data: &[u8]) {
    let Some(([step, budget], input)) = data.split_first_chunk::<2>() else {
        return;
    };
    let budget = if *budget == 255 {
        u64::MAX
    } else {
        u64::from(*budget) * 16
    };
    let (tx, rx) = crossbeam_channel::unbounded();
    // A buffer given back still holding bytes of its own: none of them may
    // reach a line.
    let (spares_tx, spares) = crossbeam_channel::bounded(1);
    let _ = spares_tx.send(b"stale\nbytes".to_vec());
    jsonl::read_lines(Trickle::new(input, usize::from(step % 16) + 1), budget, &tx, &spares);
    drop(tx);
    let mut lines = Vec::new();
    let mut ends = Vec::new();
    for note in rx.try_iter() {
        match note {
            Note::Output(l) => {
                assert!(ends.is_empty(), "a line after the end");
                lines.push(l);
            }
            Note::Exhausted => ends.push("exhausted"),
            Note::StdoutEof => ends.push("eof"),
            Note::TooLong => ends.push("too long"),
            _ => panic!("read_lines sends only lines, exhausted, too long and EOF"),
        }
    }
    let mut want = Vec::new();
    let mut used = 0u64;
    let mut want_ends = vec!["eof"];
    for piece in input.split_inclusive(|b| *b == b'\n') {
        used += piece.len() as u64;
        if used > budget {
            want_ends.insert(0, "exhausted");
            break;
        }
        let line = match piece.strip_suffix(b"\n") {
            Some(l) => l.strip_suffix(b"\r").unwrap_or(l),
            None => piece,
        };
        if !line.iter().all(u8::is_ascii_whitespace) {
            want.push(line.to_vec());
        }
    }
    assert_eq!(lines, want, "lines");
    assert_eq!(ends, want_ends, "how it ended");
}

/// The MCP bridge's stdin: byte 0 sets the reader's buffer size (1–16) and,
/// with its top bit, a small line bound (32) instead of the real one; the
/// rest is cut into lines by `mcp::read_line`, which must match a plain
/// split at LF (a line over the bound is dropped whole), and each line is
/// parsed by `mcp::parse_message`.
pub fn mcp_line(data: &[u8]) {
    let Some((&knob, input)) = data.split_first() else {
        return;
    };
    let max = if knob & 0x80 != 0 {
        32
    } else {
        limits::MCP_LINE_MAX_BYTES
    };
    let mut r = BufReader::with_capacity(usize::from(knob & 0x0f) + 1, input);
    let mut buf = Vec::new();
    let mut lines: Vec<Option<Vec<u8>>> = Vec::new();
    for _ in 0..=input.len() {
        buf.clear();
        match mcp::read_line(&mut r, &mut buf, max).expect("a slice cannot fail") {
            mcp::Line::Eof => break,
            mcp::Line::TooLong => lines.push(None),
            mcp::Line::Complete => {
                assert!(buf.len() <= max && !buf.contains(&b'\n'));
                lines.push(Some(buf.clone()));
            }
        }
    }
    let mut want: Vec<Option<Vec<u8>>> = input
        .split(|b| *b == b'\n')
        .map(|l| (l.len() <= max).then(|| l.to_vec()))
        .collect();
    if input.is_empty() || input.ends_with(b"\n") {
        want.pop();
    }
    assert_eq!(lines, want, "read_line and a split at LF disagree");
    for line in lines.into_iter().flatten() {
        mcp_message(&line);
    }
}

fn mcp_message(line: &[u8]) {
    let answerable = |id: &serde_json::Value| id.is_string() || id.is_i64() || id.is_u64();
    match mcp::parse_message(line) {
        Ok(mcp::Message::Request { id, params, .. }) => {
            assert!(answerable(&id), "request id {id}");
            assert!(params.is_object());
        }
        Ok(mcp::Message::Notification { params, .. }) => assert!(params.is_object()),
        Ok(mcp::Message::Response) => {}
        Err((id, e)) => {
            assert!(id.is_null() || answerable(&id), "error id {id}");
            assert!(
                [rpc::PARSE_ERROR, rpc::INVALID_REQUEST, rpc::INVALID_PARAMS].contains(&e.code),
                "{e}"
            );
            assert!(!e.message.is_empty());
        }
    }
}

/// A config file (lossy UTF-8): loading never panics, an error names a line
/// that is there, and each line means the same alone as in the file (no
/// key's error depends on the keys before it). Then the command-line
/// splitter of `agent.exec`: words it splits, quoted back, split the same.
pub fn config_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut whole = Config::default();
    let result = whole.load_str(&text, "fuzz");
    let mut first_bad = None;
    for (n, line) in text.lines().enumerate() {
        if let Err(e) = Config::default().load_str(line, "fuzz") {
            first_bad = Some((format!("fuzz:{}", n + 1), e.message));
            break;
        }
    }
    match (&result, first_bad) {
        (Ok(()), None) => {
            let _ = whole.validate();
            let _ = whole.listeners();
        }
        (Err(e), Some((place, message))) => {
            assert_eq!((&e.place, &e.message), (&place, &message));
            assert!(!e.message.is_empty());
        }
        (r, alone) => panic!("the file gives {r:?}, its lines one by one {alone:?}"),
    }
    if let Ok(words) = config::split_command(&text) {
        let quoted: Vec<String> = words
            .iter()
            .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
            .collect();
        assert_eq!(config::split_command(&quoted.join(" ")), Ok(words), "quoted back");
    }
}

/// systemd's variables, NUL-separated: NOTIFY_SOCKET, then LISTEN_PID,
/// LISTEN_FDS and LISTEN_FDNAMES (a missing field is unset). A parsed
/// NOTIFY_SOCKET says what the text said; the passed fds are 3, 4, … for
/// our pid only (4242 here), at most 1024, named from LISTEN_FDNAMES or
/// `unknown`.
pub fn systemd_env(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut fields = text.split('\0');
    let notify = fields.next().unwrap_or("");
    match NotifyTarget::parse(notify) {
        Ok(NotifyTarget::Path(p)) => assert!(notify.starts_with('/') && p.as_os_str() == notify),
        Ok(NotifyTarget::Abstract(name)) => {
            assert!(!name.is_empty());
            assert_eq!(notify.as_bytes(), [b"@", &name[..]].concat());
        }
        Ok(t @ NotifyTarget::Vsock { cid, port }) => {
            assert_eq!(NotifyTarget::parse(&format!("vsock:{cid}:{port}")), Ok(t));
        }
        Err(e) => assert!(e.contains("NOTIFY_SOCKET"), "{e}"),
    }
    const OURS: u32 = 4242;
    let (pid, fds, names) = (fields.next(), fields.next(), fields.next());
    let for_us = pid.map(str::trim) == Some("4242") && fds.is_some();
    match systemd::passed_fds(pid, fds, names, OURS) {
        Ok(passed) => {
            assert!(for_us || passed.is_empty(), "fds for another process: {passed:?}");
            assert!(passed.len() <= 1024);
            let names: Vec<&str> = names.map(|n| n.split(':').collect()).unwrap_or_default();
            for (i, (fd, name)) in passed.iter().enumerate() {
                assert_eq!(*fd, 3 + i as i32);
                assert_eq!(name, names.get(i).copied().unwrap_or("unknown"));
            }
        }
        Err(e) => assert!(for_us && e.contains("LISTEN_FDS"), "{e}"),
    }
}

/// Byte 0 = where the text is cut in two; the rest, as UTF-8 (invalid
/// sequences replaced), is a text part's text. Long text is escaped by
/// agentd's own word-at-a-time escaper: through serde_json's writer and its
/// `Value` serializer, alone and as two pieces joined, it must be exactly
/// what serde_json writes for the whole string.
pub fn json_text(data: &[u8]) {
    let Some((&cut, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    // Repeated past the 1 KiB from which agentd escapes it itself.
    let times = 1 + agentd::wire::LONG_TEXT_MIN_BYTES / text.len().max(1);
    let text = text.repeat(times);
    let want = serde_json::to_string(&text).expect("a string serializes");
    assert_eq!(serde_json::to_string(&LongText(&text)).expect("serializes"), want);
    let mut at = usize::from(cut) * text.len() / 255;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let pieces = [&text[..at], &text[at..]];
    assert_eq!(serde_json::to_string(&JoinedText(&pieces)).expect("serializes"), want);
    assert_eq!(
        serde_json::to_value(JoinedText(&pieces)).expect("serializes"),
        serde_json::Value::String(text.clone())
    );
}
