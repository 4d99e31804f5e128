//! What each fuzz target checks, one function per target, so that
//! `fuzz_targets/<name>.rs` is one line and `tests/fuzz_regressions.rs`
//! (which includes this file by path) runs the committed seeds and any
//! crash inputs through exactly the same checks under `cargo test`.
//!
//! Every function takes arbitrary bytes, does no I/O beyond [`MemConn`] and
//! byte slices, and must never panic: a panic is either a parser bug or a
//! broken invariant asserted here.

use agentd::control::{self, FromWorker, ToWorker};
use agentd::http::chunked::{ChunkError, Decoder};
use agentd::http::client::ResponseReader;
use agentd::http::sse::{Event, Parser, SseError};
use agentd::http::{write_response, Limits, MemConn, ReadError, Reader};
use agentd::wire::{
    CancelTaskRequest, GetTaskRequest, ListTasksRequest, Message, Part, SendMessageRequest, SubscribeToTaskRequest,
};
use agentd::worker::jsonl::{self, Line};
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
    let params: serde_json::Value = serde_json::from_str(req.params.get()).expect("params is JSON");
    assert!(!req.method.is_empty() && params.is_object());
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
/// decoded re-encodes to a frame that decodes to the same value.
pub fn control_frame(data: &[u8]) {
    frames::<ToWorker>(data);
    frames::<FromWorker>(data);
}

fn frames<T>(mut rest: &[u8])
where
    T: serde::Serialize + for<'de> serde::Deserialize<'de> + PartialEq + std::fmt::Debug,
{
    let max = agentd::limits::control_frame_max_bytes(agentd::limits::HTTP_BODY_MAX_BYTES);
    while let Ok(Some((frame, used))) = control::decode::<T>(rest, max) {
        assert!(used >= 4 && used <= rest.len(), "consumed {used} of {}", rest.len());
        // Re-encoding may grow a frame (numbers): no limit on the way back.
        let wire = control::encode(&frame, u32::MAX as usize).expect("a decoded frame encodes");
        let again = control::decode::<T>(&wire, u32::MAX as usize).expect("re-encoded frame decodes");
        assert_eq!(again, Some((frame, wire.len())));
        rest = &rest[used..];
    }
}

/// One line of a jsonl program's output.
pub fn jsonl_line(data: &[u8]) {
    match jsonl::parse_line(data) {
        Ok(Line::Artifact { parts, .. }) | Ok(Line::Reply(parts, _)) => assert!(!parts.is_empty()),
        Ok(_) => {}
        Err(why) => assert!(!why.is_empty()),
    }
}
