//! Server-Sent Events framing (WHATWG HTML §9.2), both directions, no I/O.
//!
//! ```text
//!   id: 7\n                 ← optional, becomes last_event_id
//!   data: {"a":1}\n         ← one `data:` line per line of data
//!   \n                      ← blank line dispatches the event
//!   : keep-alive\n\n        ← comment, ignored by clients
//! ```
//!
//! The encoder is used by the server's streaming responses; the [`Parser`]
//! is the client side (tests, and any agentd acting as an A2A client).

use std::fmt;

use crate::limits;

/// Splits text on CRLF, LF or CR — the three line ends an SSE client accepts.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let s = rest?;
        match s.find(['\r', '\n']) {
            Some(i) => {
                let skip = if s[i..].starts_with("\r\n") { 2 } else { 1 };
                rest = Some(&s[i + skip..]);
                Some(&s[..i])
            }
            None => {
                rest = None;
                Some(s)
            }
        }
    })
}

/// One event: `id: <id>\n` (if `Some`), then one `data: <line>\n` per line
/// of `data` (data should already be one line; any CR/LF in it is split on
/// so a client sees the same text back, joined with `\n`), then `\n`.
pub fn encode_event(id: Option<u64>, data: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 32);
    encode_event_into(&mut out, id, data);
    out
}

fn encode_event_into(out: &mut Vec<u8>, id: Option<u64>, data: &str) {
    event_id_into(out, id);
    for line in lines(data) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// An event whose data is one line that `write_line` appends to `out`
/// (cleared first, so a stream reuses one buffer for all its events): the
/// line is written in place, never searched or copied. The caller promises
/// it has no CR or LF, as compact JSON never has (its strings escape every
/// control character).
pub fn encode_line_event_into(out: &mut Vec<u8>, id: Option<u64>, write_line: impl FnOnce(&mut Vec<u8>)) {
    out.clear();
    event_id_into(out, id);
    out.extend_from_slice(b"data: ");
    let line_at = out.len();
    write_line(out);
    debug_assert!(
        !out[line_at..].iter().any(|&b| b == b'\n' || b == b'\r'),
        "an SSE data line with a line break"
    );
    out.extend_from_slice(b"\n\n");
}

fn event_id_into(out: &mut Vec<u8>, id: Option<u64>) {
    if let Some(id) = id {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(id.to_string().as_bytes());
        out.push(b'\n');
    }
}

/// A comment, used as keep-alive: `encode_comment("keep-alive")` is
/// `": keep-alive\n\n"`. Line breaks in `text` start new comment lines.
pub fn encode_comment(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 4);
    for line in lines(text) {
        out.extend_from_slice(b": ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
    out
}

/// One dispatched event. `id` is the last event ID in force when it was
/// dispatched (WHATWG: it carries over to later events that set none);
/// `event` is `None` for the default type `message`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// Why the SSE parser stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// A line longer than the parser's line bound.
    LineTooLong,
    /// One event's data longer than the parser's event bound.
    EventTooLarge,
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SseError::LineTooLong => "event stream line is too long",
            SseError::EventTooLarge => "event stream event is too large",
        })
    }
}

impl std::error::Error for SseError {}

/// Client-side event-stream parser, fed bytes in pieces of any size.
///
/// Lines end in CRLF, LF or CR (a CRLF split across two feeds counts once);
/// a leading UTF-8 BOM is dropped; lines are decoded as UTF-8 with
/// replacement; `data:` values are joined with `\n`; one space after the
/// colon is removed; comments (`:`…) and unknown fields (`retry` included)
/// are ignored; a blank line dispatches the event only if it had a `data`
/// field. An `id` containing NUL is ignored; an empty `id` clears the last
/// event ID. Bytes after the last blank line wait for more input (an
/// unterminated event at end of stream is discarded, as WHATWG says).
#[derive(Debug, Clone)]
pub struct Parser {
    line: Vec<u8>,
    /// The previous byte was CR: a following LF belongs to it.
    after_cr: bool,
    at_stream_start: bool,
    data: String,
    has_data: bool,
    event: Option<String>,
    last_id: Option<String>,
    line_max_bytes: usize,
    event_max_bytes: usize,
    failed: Option<SseError>,
}

impl Default for Parser {
    fn default() -> Self {
        Self::new()
    }
}

impl Parser {
    /// Bounded by `limits::SSE_LINE_MAX_BYTES` and `limits::SSE_EVENT_MAX_BYTES`.
    pub fn new() -> Self {
        Self::with_limits(limits::SSE_LINE_MAX_BYTES, limits::SSE_EVENT_MAX_BYTES)
    }

    /// A parser with its own bounds: longest line (terminator excluded) and
    /// largest event data (lines joined, without the final `\n`).
    pub fn with_limits(line_max_bytes: usize, event_max_bytes: usize) -> Self {
        Parser {
            line: Vec::new(),
            after_cr: false,
            at_stream_start: true,
            data: String::new(),
            has_data: false,
            event: None,
            last_id: None,
            line_max_bytes,
            event_max_bytes,
            failed: None,
        }
    }

    /// Feeds bytes; appends each dispatched event to `out`. After an error
    /// every later call returns the same error.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<Event>) -> Result<(), SseError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.feed_inner(input, out);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    /// The last `id` seen, for a reconnect's `Last-Event-ID`.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    fn feed_inner(&mut self, mut input: &[u8], out: &mut Vec<Event>) -> Result<(), SseError> {
        while !input.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if input[0] == b'\n' {
                    input = &input[1..];
                    continue;
                }
            }
            match input.iter().position(|&b| b == b'\r' || b == b'\n') {
                Some(i) => {
                    self.push_line_bytes(&input[..i])?;
                    self.after_cr = input[i] == b'\r';
                    input = &input[i + 1..];
                    self.end_line(out)?;
                }
                None => {
                    self.push_line_bytes(input)?;
                    input = &[];
                }
            }
        }
        Ok(())
    }

    fn push_line_bytes(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > self.line_max_bytes {
            return Err(SseError::LineTooLong);
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<Event>) -> Result<(), SseError> {
        let raw = std::mem::take(&mut self.line);
        let mut bytes = &raw[..];
        if self.at_stream_start {
            self.at_stream_start = false;
            if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
                bytes = rest;
            }
        }
        if bytes.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if bytes[0] == b':' {
            return Ok(());
        }
        let text = String::from_utf8_lossy(bytes);
        let (field, value) = match text.find(':') {
            Some(i) => {
                let v = &text[i + 1..];
                (&text[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (&text[..], ""),
        };
        match field {
            "data" => {
                let joined = self.data.len() + usize::from(self.has_data) + value.len();
                if joined > self.event_max_bytes {
                    return Err(SseError::EventTooLarge);
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = (!value.is_empty()).then(|| value.to_string()),
            "id" if !value.contains('\0') => {
                self.last_id = (!value.is_empty()).then(|| value.to_string());
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<Event>) {
        let event = self.event.take();
        if !self.has_data {
            self.data.clear();
            return;
        }
        self.has_data = false;
        out.push(Event {
            id: self.last_id.clone(),
            event,
            data: std::mem::take(&mut self.data),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `input` whole, byte by byte, and split at every position;
    /// all must agree. Returns the events, or the error.
    fn parse_all(make: impl Fn() -> Parser, input: &[u8]) -> Result<Vec<Event>, SseError> {
        let run = |pieces: &[&[u8]]| {
            let mut p = make();
            let mut out = Vec::new();
            for piece in pieces {
                p.feed(piece, &mut out)?;
            }
            Ok::<_, SseError>(out)
        };
        let whole = run(&[input]);
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(whole, run(&bytes), "whole vs byte-by-byte");
        for cut in 0..=input.len() {
            let (a, b) = input.split_at(cut);
            assert_eq!(whole, run(&[a, b]), "split at {cut}");
        }
        whole
    }

    fn ev(id: Option<&str>, event: Option<&str>, data: &str) -> Event {
        Event {
            id: id.map(str::to_string),
            event: event.map(str::to_string),
            data: data.to_string(),
        }
    }

    /// `sse!(name, input, Ok(vec![events]))` or `sse!(name, input, Err(e))`.
    macro_rules! sse {
        ($name:ident, $input:expr, $expected:expr) => {
            sse!($name, Parser::new, $input, $expected);
        };
        ($name:ident, $make:expr, $input:expr, $expected:expr) => {
            #[test]
            fn $name() {
                let input: &[u8] = &$input;
                let expected: Result<Vec<Event>, SseError> = $expected;
                assert_eq!(parse_all($make, input), expected);
            }
        };
    }

    fn long_data_line(len: usize) -> Vec<u8> {
        let mut v = b"data:".to_vec();
        v.resize(len, b'a');
        v.extend_from_slice(b"\n\n");
        v
    }

    sse!(one_event, *b"data: hello\n\n", Ok(vec![ev(None, None, "hello")]));
    sse!(
        crlf_lines,
        *b"id: 1\r\ndata: a\r\n\r\n",
        Ok(vec![ev(Some("1"), None, "a")])
    );
    sse!(cr_lines, *b"id: 1\rdata: a\r\r", Ok(vec![ev(Some("1"), None, "a")]));
    sse!(
        mixed_ends,
        *b"data: a\r\ndata: b\rdata: c\n\r\n",
        Ok(vec![ev(None, None, "a\nb\nc")])
    );
    sse!(no_space, *b"data:x\n\n", Ok(vec![ev(None, None, "x")]));
    sse!(
        only_one_space_removed,
        *b"data:  x \n\n",
        Ok(vec![ev(None, None, " x ")])
    );
    sse!(empty_data_dispatches, *b"data\n\n", Ok(vec![ev(None, None, "")]));
    sse!(empty_data_lines, *b"data:\ndata:\n\n", Ok(vec![ev(None, None, "\n")]));
    sse!(
        no_data_no_event,
        *b"id: 5\nevent: x\n\ndata: y\n\n",
        Ok(vec![ev(Some("5"), None, "y")])
    );
    sse!(
        comments_ignored,
        *b": keep-alive\n\n:x\ndata: 1\n\n",
        Ok(vec![ev(None, None, "1")])
    );
    sse!(
        unknown_fields,
        *b"retry: 10\nfoo: bar\nDATA: no\ndata: 1\n\n",
        Ok(vec![ev(None, None, "1")])
    );
    sse!(
        event_type,
        *b"event: update\ndata: 1\n\ndata: 2\n\n",
        Ok(vec![ev(None, Some("update"), "1"), ev(None, None, "2")])
    );
    sse!(
        id_carries_over,
        *b"id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n",
        Ok(vec![
            ev(Some("7"), None, "a"),
            ev(Some("7"), None, "b"),
            ev(None, None, "c")
        ])
    );
    sse!(
        id_with_nul_ignored,
        *b"id: 1\nid: a\0b\ndata: x\n\n",
        Ok(vec![ev(Some("1"), None, "x")])
    );
    sse!(bom_dropped, *b"\xEF\xBB\xBFdata: x\n\n", Ok(vec![ev(None, None, "x")]));
    sse!(unterminated_waits, *b"data: x\n", Ok(vec![]));
    sse!(
        invalid_utf8_replaced,
        *b"data: \xFF\n\n",
        Ok(vec![ev(None, None, "\u{FFFD}")])
    );
    sse!(
        line_at_limit,
        || Parser::with_limits(16, 100),
        long_data_line(16),
        Ok(vec![ev(None, None, "aaaaaaaaaaa")])
    );
    sse!(
        line_over_limit,
        || Parser::with_limits(16, 100),
        long_data_line(17),
        Err(SseError::LineTooLong)
    );
    sse!(
        event_at_limit,
        || Parser::with_limits(100, 5),
        *b"data: ab\ndata: cd\n\n",
        Ok(vec![ev(None, None, "ab\ncd")])
    );
    sse!(
        event_over_limit,
        || Parser::with_limits(100, 5),
        *b"data: ab\ndata: cde\n\n",
        Err(SseError::EventTooLarge)
    );

    #[test]
    fn default_line_limit() {
        let max = limits::SSE_LINE_MAX_BYTES;
        let mut p = Parser::new();
        let mut out = Vec::new();
        assert_eq!(p.feed(&long_data_line(max), &mut out), Ok(()));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].data.len(), max - 5);
        let mut p = Parser::new();
        assert_eq!(p.feed(&long_data_line(max + 1), &mut out), Err(SseError::LineTooLong));
        assert_eq!(p.feed(b"\n", &mut out), Err(SseError::LineTooLong), "sticky");
    }

    #[test]
    fn last_event_id() {
        let mut p = Parser::new();
        let mut out = Vec::new();
        assert_eq!(p.last_event_id(), None);
        p.feed(b"id: 42\n", &mut out).unwrap();
        assert_eq!(p.last_event_id(), Some("42"));
    }

    #[test]
    fn encode_exact_bytes() {
        assert_eq!(encode_event(Some(3), "{\"a\":1}"), b"id: 3\ndata: {\"a\":1}\n\n");
        assert_eq!(encode_event(None, "x"), b"data: x\n\n");
        assert_eq!(
            encode_event(None, "a\nb\r\nc\rd"),
            b"data: a\ndata: b\ndata: c\ndata: d\n\n"
        );
        assert_eq!(encode_comment("keep-alive"), b": keep-alive\n\n");
        assert_eq!(encode_comment("a\nb"), b": a\n: b\n\n");
    }

    #[test]
    fn encode_parse_round_trip() {
        let mut wire = encode_comment("keep-alive");
        for (i, data) in ["{}", "", "two\nlines", " lead", "crlf\r\nend"].iter().enumerate() {
            wire.extend(encode_event(Some(i as u64), data));
        }
        let events = parse_all(Parser::new, &wire).unwrap();
        let datas: Vec<&str> = events.iter().map(|e| e.data.as_str()).collect();
        assert_eq!(datas, ["{}", "", "two\nlines", " lead", "crlf\nend"]);
        assert_eq!(events[4].id.as_deref(), Some("4"));
    }

    #[test]
    fn display_texts() {
        assert_eq!(SseError::LineTooLong.to_string(), "event stream line is too long");
    }
}
