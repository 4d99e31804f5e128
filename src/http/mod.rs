//! Server-side HTTP/1.1: read requests from one connection, write responses.
//!
//! ```text
//!            ┌──────────── keep-alive: next request on the same connection ─────────┐
//!            ▼                                                                       │
//!   idle ──first byte──▶ head ──CRLF CRLF──▶ framing ──▶ body ──▶ Request ──▶ handler ──▶ response
//!   (idle_timeout:       (head_timeout,      decided once:          │                  write_response
//!    Idle / Closed)       16 KiB, 64 fields)  TE: chunked → Decoder  │                  or ChunkedWriter
//!                                             CL: n ≤ cap (else 413) │                  (SSE)
//!                                             neither → empty        (body_timeout)
//!
//!   Any ReadError::Reject: write it (write_response(.., false)), then close.
//!   Idle, Closed, Io: close without writing.
//! ```
//!
//! Each phase has one deadline, re-armed as the time *remaining* before
//! every blocking read, so a client dripping one byte a second still gets
//! its 408 on time. Bytes that arrive past the end of one request stay in
//! the [`Reader`] for the next (pipelining).
//!
//! One request through to exact response bytes:
//!
//! ```
//! use agentd::http::{write_response, Limits, MemConn, ReadError, Reader, Response};
//!
//! let mut conn = MemConn::new(b"POST /rpc HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
//! let mut reader = Reader::new(Limits::default());
//! let req = reader.read_request(&mut conn).unwrap();
//! assert_eq!((req.method.as_str(), req.path.as_str()), ("POST", "/rpc"));
//! assert_eq!(req.body, b"{}");
//! assert!(req.keep_alive);
//!
//! let resp = Response::new(200).body("application/json", b"{\"ok\":true}".to_vec());
//! let mut out = Vec::new();
//! write_response(&mut out, &resp, req.keep_alive).unwrap();
//! assert_eq!(
//!     out,
//!     b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"
//! );
//!
//! // The peer sends nothing more and closes: the keep-alive loop ends.
//! assert!(matches!(reader.read_request(&mut conn), Err(ReadError::Closed)));
//! ```

pub mod chunked;
pub mod client;
pub mod sse;

use std::fmt;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use crate::limits;

/// What connection code needs from a stream: bytes plus settable timeouts.
/// UnixStream implements it; tests use a scripted fake; vsock will too.
pub trait Conn: Read + Write {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()>;
}

impl Conn for std::os::unix::net::UnixStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_write_timeout(self, t)
    }
}

/// An in-memory [`Conn`] for doc-tests and examples: reads from `input`
/// (then EOF), collects writes in `output`, ignores timeouts.
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct MemConn {
    pub input: io::Cursor<Vec<u8>>,
    pub output: Vec<u8>,
}

impl MemConn {
    pub fn new(input: &[u8]) -> Self {
        MemConn {
            input: io::Cursor::new(input.to_vec()),
            output: Vec::new(),
        }
    }
}

impl Read for MemConn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for MemConn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Conn for MemConn {
    fn set_read_timeout(&self, _: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
    fn set_write_timeout(&self, _: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}

/// Bounds and deadlines for reading requests.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Size of the fixed head buffer; a longer head → 431.
    pub head_max_bytes: usize,
    /// Most header fields; more → 431.
    pub headers_max: usize,
    /// Largest body; larger → 413.
    pub body_max_bytes: usize,
    /// Whole head, from its first byte; over it → 408.
    pub head_timeout: Duration,
    /// Whole body, after the head; over it → 408.
    pub body_timeout: Duration,
    /// Waiting for the first byte of the next request; over it → `Idle`.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            head_max_bytes: limits::HTTP_HEAD_MAX_BYTES,
            headers_max: limits::HTTP_HEADERS_MAX,
            body_max_bytes: limits::HTTP_BODY_MAX_BYTES,
            head_timeout: Duration::from_millis(limits::HTTP_HEAD_TIMEOUT_MS),
            body_timeout: Duration::from_millis(limits::HTTP_BODY_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(limits::HTTP_IDLE_TIMEOUT_MS),
        }
    }
}

/// One complete request.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The request target without the query.
    pub path: String,
    /// Raw text after the first '?', if any.
    pub query: Option<String>,
    /// Names as sent; values trimmed of spaces and tabs.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// HTTP/1.1: true unless `Connection: close`. HTTP/1.0: false unless
    /// `Connection: keep-alive`. `close` wins over `keep-alive`.
    pub keep_alive: bool,
}

impl Request {
    /// The first header named `name`, compared case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The first query parameter named exactly `name` (after %-decoding),
    /// %-decoded; `?a` gives `Some("")` for `a`. `+` is kept as `+` (RFC
    /// 3986 gives it no meaning); bad %-escapes are kept literally; invalid
    /// UTF-8 is replaced with U+FFFD.
    pub fn query_param(&self, name: &str) -> Option<String> {
        let query = self.query.as_deref()?;
        query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k) == name).then(|| percent_decode(v))
        })
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = |b: Option<&u8>| b.and_then(|&b| (b as char).to_digit(16));
            if let (Some(h), Some(l)) = (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
                // Two hex digits are below 256.
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Why reading a request stopped. After any of them, close the connection
/// (writing the response first for `Reject`); the `Reader` is not reusable.
#[derive(Debug)]
pub enum ReadError {
    /// The peer closed cleanly before sending any byte of a new request.
    Closed,
    /// No first byte within idle_timeout (not an error to answer; just close).
    Idle,
    /// A response the caller should write, then close the connection.
    /// EOF after the first byte of a request is a `Reject` (400, "connection
    /// closed mid-request" / "mid-body"): a half-closed peer may still read it.
    Reject { status: u16, reason: String },
    /// Socket error.
    Io(io::Error),
}

impl ReadError {
    fn reject(status: u16, reason: impl Into<String>) -> Self {
        ReadError::Reject {
            status,
            reason: reason.into(),
        }
    }

    /// The response to write for a `Reject`, `None` for the others.
    pub fn response(&self) -> Option<Response> {
        match self {
            ReadError::Reject { status, reason } => Some(Response::error(*status, reason)),
            _ => None,
        }
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Closed => f.write_str("peer closed the connection between requests"),
            ReadError::Idle => f.write_str("no request within the idle timeout"),
            ReadError::Reject { status, reason } => {
                write!(f, "request rejected with {status}: {reason}")
            }
            ReadError::Io(e) => write!(f, "socket error while reading a request: {e}"),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// How the body is delimited; decided once per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Empty,
    Length(u64),
    Chunked,
}

/// Outcome of one deadline-bound read.
enum ReadOutcome {
    Data(usize),
    Eof,
    Timeout,
}

/// Reads once into `buf`, with the read timeout set to the time left until
/// `deadline`. WouldBlock and TimedOut both mean the timeout fired.
fn read_by<C: Conn>(conn: &mut C, buf: &mut [u8], deadline: Instant) -> Result<ReadOutcome, ReadError> {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(ReadOutcome::Timeout);
        }
        conn.set_read_timeout(Some(deadline - now)).map_err(ReadError::Io)?;
        match conn.read(buf) {
            Ok(0) => return Ok(ReadOutcome::Eof),
            Ok(n) => return Ok(ReadOutcome::Data(n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Ok(ReadOutcome::Timeout)
            }
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
}

/// The head, parsed and copied out of the buffer.
struct Head {
    len: usize,
    method: String,
    target: String,
    http11: bool,
    headers: Vec<(String, String)>,
}

/// Reads requests from one connection; keeps bytes that arrived past the end
/// of one request (pipelining) for the next. Fixed-size head buffer (no growth).
pub struct Reader {
    limits: Limits,
    buf: Box<[u8]>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
}

impl fmt::Debug for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("limits", &self.limits)
            .field("buffered", &(self.end - self.start))
            .finish()
    }
}

impl Reader {
    pub fn new(limits: Limits) -> Self {
        let buf = vec![0u8; limits.head_max_bytes].into_boxed_slice();
        Reader {
            limits,
            buf,
            start: 0,
            end: 0,
        }
    }

    /// Reads one request. Writes "HTTP/1.1 100 Continue\r\n\r\n" to `conn` when the
    /// request is HTTP/1.1 with `Expect: 100-continue` and a body, before reading the body
    /// (and not at all when the body is refused by its Content-Length).
    pub fn read_request<C: Conn>(&mut self, conn: &mut C) -> Result<Request, ReadError> {
        // Move leftover (pipelined) bytes to the front of the buffer.
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;

        if self.end == 0 {
            let deadline = Instant::now() + self.limits.idle_timeout;
            match read_by(conn, &mut self.buf, deadline)? {
                ReadOutcome::Data(n) => self.end = n,
                ReadOutcome::Eof => return Err(ReadError::Closed),
                ReadOutcome::Timeout => return Err(ReadError::Idle),
            }
        }

        let head = self.read_head(conn)?;
        self.start = head.len;
        let (path, query) = match head.target.split_once('?') {
            Some((p, q)) => (p.to_string(), Some(q.to_string())),
            None => (head.target.clone(), None),
        };
        let keep_alive = keep_alive(head.http11, &head.headers);
        let framing = framing(head.http11, &head.headers, self.limits.body_max_bytes)?;

        let expects_continue = head.http11
            && head
                .headers
                .iter()
                .any(|(n, v)| n.eq_ignore_ascii_case("expect") && v.eq_ignore_ascii_case("100-continue"));
        if expects_continue && framing != Framing::Empty {
            conn.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .map_err(ReadError::Io)?;
            conn.flush().map_err(ReadError::Io)?;
        }

        let deadline = Instant::now() + self.limits.body_timeout;
        let body = match framing {
            Framing::Empty => Vec::new(),
            Framing::Length(n) => self.read_length_body(conn, n, deadline)?,
            Framing::Chunked => self.read_chunked_body(conn, deadline)?,
        };

        Ok(Request {
            method: head.method,
            path,
            query,
            headers: head.headers,
            body,
            keep_alive,
        })
    }

    /// Parses `buf[..end]`, reading more until the head is complete.
    fn read_head<C: Conn>(&mut self, conn: &mut C) -> Result<Head, ReadError> {
        let deadline = Instant::now() + self.limits.head_timeout;
        loop {
            // Allocated per parse: its borrow of `buf` must end before the next read.
            let mut fields = vec![httparse::EMPTY_HEADER; self.limits.headers_max];
            let mut req = httparse::Request::new(&mut fields);
            match req.parse(&self.buf[..self.end]) {
                Ok(httparse::Status::Complete(len)) => return head_from(&req, len),
                Ok(httparse::Status::Partial) => {}
                Err(httparse::Error::TooManyHeaders) => return Err(ReadError::reject(431, "too many header fields")),
                Err(httparse::Error::Version) => {
                    // `None`: the version may still turn out well-formed.
                    if let Some(e) = version_error(&self.buf[..self.end]) {
                        return Err(e);
                    }
                }
                Err(e) => return Err(ReadError::reject(400, e.to_string())),
            }
            if self.end == self.buf.len() {
                return Err(ReadError::reject(431, "request head is too large"));
            }
            match read_by(conn, &mut self.buf[self.end..], deadline)? {
                ReadOutcome::Data(n) => self.end += n,
                ReadOutcome::Eof => return Err(ReadError::reject(400, "connection closed mid-request")),
                ReadOutcome::Timeout => return Err(ReadError::reject(408, "request head timed out")),
            }
        }
    }

    fn read_length_body<C: Conn>(&mut self, conn: &mut C, len: u64, deadline: Instant) -> Result<Vec<u8>, ReadError> {
        // `framing` capped `len` at body_max_bytes, a usize.
        let len = usize::try_from(len).map_err(|_| ReadError::reject(413, "request body is too large"))?;
        let mut body = Vec::with_capacity(len.min(limits::HTTP_BODY_READ_CHUNK_BYTES));
        let take = len.min(self.end - self.start);
        body.extend_from_slice(&self.buf[self.start..self.start + take]);
        self.start += take;
        while body.len() < len {
            let have = body.len();
            let want = (len - have).min(limits::HTTP_BODY_READ_CHUNK_BYTES);
            body.resize(have + want, 0);
            let outcome = read_by(conn, &mut body[have..], deadline);
            match outcome? {
                ReadOutcome::Data(n) => body.truncate(have + n),
                ReadOutcome::Eof => return Err(ReadError::reject(400, "connection closed mid-body")),
                ReadOutcome::Timeout => return Err(ReadError::reject(408, "request body timed out")),
            }
        }
        Ok(body)
    }

    fn read_chunked_body<C: Conn>(&mut self, conn: &mut C, deadline: Instant) -> Result<Vec<u8>, ReadError> {
        let cap = self.limits.body_max_bytes;
        let mut decoder = chunked::Decoder::with_trailer_max(self.limits.head_max_bytes);
        let mut body = Vec::new();
        loop {
            let used = decoder
                .feed(&self.buf[self.start..self.end], &mut body)
                .map_err(chunk_reject)?;
            self.start += used;
            let declared = u64::try_from(body.len())
                .unwrap_or(u64::MAX)
                .saturating_add(decoder.chunk_remaining());
            if body.len() > cap || declared > u64::try_from(cap).unwrap_or(u64::MAX) {
                return Err(ReadError::reject(413, "request body is too large"));
            }
            if decoder.is_done() {
                return Ok(body);
            }
            // The decoder consumed everything buffered; refill from the start.
            self.start = 0;
            self.end = 0;
            match read_by(conn, &mut self.buf, deadline)? {
                ReadOutcome::Data(n) => self.end = n,
                ReadOutcome::Eof => return Err(ReadError::reject(400, "connection closed mid-body")),
                ReadOutcome::Timeout => return Err(ReadError::reject(408, "request body timed out")),
            }
        }
    }
}

fn chunk_reject(e: chunked::ChunkError) -> ReadError {
    let status = match e {
        chunked::ChunkError::SizeOverflow => 413,
        chunked::ChunkError::TrailerTooLong => 431,
        _ => 400,
    };
    ReadError::reject(status, e.to_string())
}

/// httparse says "invalid HTTP version" both for `HTTP/2.0` and for junk,
/// and already at `HTTP/2` before the line is complete. A well-formed
/// `HTTP/d.d` gets 505, anything that cannot become one 400, and a prefix
/// of one in an unfinished line `None` (read more).
fn version_error(buf: &[u8]) -> Option<ReadError> {
    const PATTERN: &[u8] = b"HTTP/d.d";
    let is_eol = |b: &u8| *b == b'\r' || *b == b'\n';
    let rest = &buf[buf.iter().position(|b| !is_eol(b)).unwrap_or(buf.len())..];
    let (line, complete) = match rest.iter().position(is_eol) {
        Some(i) => (&rest[..i], true),
        None => (rest, false),
    };
    let version = line.rsplit(|&b| b == b' ').next().unwrap_or(&[]);
    let fits = version.len() <= PATTERN.len()
        && version
            .iter()
            .zip(PATTERN)
            .all(|(&b, &p)| if p == b'd' { b.is_ascii_digit() } else { b == p });
    if fits && version.len() == PATTERN.len() {
        Some(ReadError::reject(505, "HTTP version not supported"))
    } else if fits && !complete {
        None
    } else {
        Some(ReadError::reject(400, "invalid HTTP version"))
    }
}

fn head_from(req: &httparse::Request<'_, '_>, len: usize) -> Result<Head, ReadError> {
    // httparse fills all three on Complete; be defensive anyway.
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(ReadError::reject(400, "incomplete request line"));
    };
    let mut headers = Vec::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let value = std::str::from_utf8(h.value)
            .map_err(|_| ReadError::reject(400, format!("header {} is not UTF-8", h.name)))?;
        headers.push((h.name.to_string(), value.trim_matches([' ', '\t']).to_string()));
    }
    Ok(Head {
        len,
        method: method.to_string(),
        target: target.to_string(),
        http11: version == 1,
        headers,
    })
}

/// Comma-separated tokens of every header named `name`, trimmed, empty
/// elements skipped.
fn list_values<'a>(headers: &'a [(String, String)], name: &'a str) -> impl Iterator<Item = &'a str> {
    headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .flat_map(|(_, v)| v.split(','))
        .map(|t| t.trim_matches([' ', '\t']))
        .filter(|t| !t.is_empty())
}

fn keep_alive(http11: bool, headers: &[(String, String)]) -> bool {
    let mut close = false;
    let mut keep = false;
    for token in list_values(headers, "connection") {
        close |= token.eq_ignore_ascii_case("close");
        keep |= token.eq_ignore_ascii_case("keep-alive");
    }
    !close && (http11 || keep)
}

fn framing(http11: bool, headers: &[(String, String)], body_max: usize) -> Result<Framing, ReadError> {
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let (te, cl) = (has("transfer-encoding"), has("content-length"));
    if te && cl {
        return Err(ReadError::reject(400, "both Transfer-Encoding and Content-Length"));
    }
    if te {
        // RFC 9112 §6.1: Transfer-Encoding in HTTP/1.0 means faulty framing.
        if !http11 {
            return Err(ReadError::reject(400, "Transfer-Encoding in an HTTP/1.0 request"));
        }
        let mut codings = list_values(headers, "transfer-encoding");
        return match (codings.next(), codings.next()) {
            (Some(c), None) if c.eq_ignore_ascii_case("chunked") => Ok(Framing::Chunked),
            _ => Err(ReadError::reject(501, "transfer-coding not supported")),
        };
    }
    if !cl {
        return Ok(Framing::Empty);
    }
    let mut len: Option<u64> = None;
    for value in headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .flat_map(|(_, v)| v.split(','))
    {
        let value = value.trim_matches([' ', '\t']);
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ReadError::reject(400, "Content-Length is not a number"));
        }
        // All digits: the only parse failure left is overflow, i.e. huge.
        let n = value.parse::<u64>().unwrap_or(u64::MAX);
        if len.is_some_and(|l| l != n) {
            return Err(ReadError::reject(400, "conflicting Content-Length values"));
        }
        len = Some(n);
    }
    let len = len.unwrap_or(0);
    if len > u64::try_from(body_max).unwrap_or(u64::MAX) {
        return Err(ReadError::reject(413, "request body is too large"));
    }
    Ok(if len == 0 { Framing::Empty } else { Framing::Length(len) })
}

/// A complete non-streaming response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn new(status: u16) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Adds a header (kept in order; duplicates allowed).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Sets the body and its `Content-Type` (replacing an earlier one).
    pub fn body(mut self, content_type: &str, body: Vec<u8>) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case("content-type"));
        self.headers
            .push(("Content-Type".to_string(), content_type.to_string()));
        self.body = body;
        self
    }

    /// Error response for 4xx/5xx with a one-line reason: text/plain body "reason\n".
    pub fn error(status: u16, reason: &str) -> Self {
        let line: String = reason.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        Response::new(status).body("text/plain; charset=utf-8", format!("{line}\n").into_bytes())
    }
}

/// Standard reason phrase; "" for codes agentd does not use.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// Status line + caller headers; refuses CR/LF in headers (response
/// splitting) and status codes outside 100..=999.
fn write_head(out: &mut Vec<u8>, status: u16, headers: &[(String, String)], skip: &[&str]) -> io::Result<()> {
    if !(100..=999).contains(&status) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad status code {status}"),
        ));
    }
    out.extend_from_slice(format!("HTTP/1.1 {status} {}\r\n", reason_phrase(status)).as_bytes());
    for (name, value) in headers {
        if skip.iter().any(|s| name.eq_ignore_ascii_case(s)) {
            continue;
        }
        let bad = |s: &str| s.bytes().any(|b| b == b'\r' || b == b'\n');
        if name.is_empty() || bad(name) || bad(value) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad response header {name:?}"),
            ));
        }
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    Ok(())
}

/// Writes status line, the headers, Content-Length (computed), `Connection:
/// close` when !keep_alive, then the body; one write_all of a pre-built
/// buffer, then flush. Caller headers named Content-Length,
/// Transfer-Encoding or Connection are dropped (this function owns framing).
/// 1xx, 204 and 304 get neither Content-Length nor body (RFC 9110 §8.6, §15).
pub fn write_response<W: Write>(w: &mut W, resp: &Response, keep_alive: bool) -> io::Result<()> {
    let mut out = Vec::with_capacity(256 + resp.body.len());
    write_head(
        &mut out,
        resp.status,
        &resp.headers,
        &["content-length", "transfer-encoding", "connection"],
    )?;
    let bodiless = resp.status < 200 || resp.status == 204 || resp.status == 304;
    if !bodiless {
        out.extend_from_slice(format!("Content-Length: {}\r\n", resp.body.len()).as_bytes());
    }
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !bodiless {
        out.extend_from_slice(&resp.body);
    }
    w.write_all(&out)?;
    w.flush()
}

/// A chunked streaming response body (for SSE). Dropping it without
/// [`finish`](Self::finish) leaves the body unterminated: close the connection.
#[derive(Debug)]
pub struct ChunkedWriter<W: Write> {
    w: W,
    scratch: Vec<u8>,
}

impl<W: Write> ChunkedWriter<W> {
    /// Writes the status line + headers (caller Content-Length and
    /// Transfer-Encoding dropped; `Transfer-Encoding: chunked` added) and flushes.
    pub fn start(mut w: W, status: u16, headers: &[(String, String)]) -> io::Result<Self> {
        let mut out = Vec::with_capacity(256);
        write_head(&mut out, status, headers, &["content-length", "transfer-encoding"])?;
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
        w.write_all(&out)?;
        w.flush()?;
        Ok(ChunkedWriter { w, scratch: Vec::new() })
    }

    /// Writes one chunk and flushes; empty data is a no-op (an empty chunk
    /// would end the body).
    pub fn chunk(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        self.scratch.clear();
        chunked::encode_chunk(data, &mut self.scratch);
        self.w.write_all(&self.scratch)?;
        self.w.flush()
    }

    /// Writes the last chunk "0\r\n\r\n", flushes, and gives the stream back.
    pub fn finish(mut self) -> io::Result<W> {
        self.w.write_all(b"0\r\n\r\n")?;
        self.w.flush()?;
        Ok(self.w)
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.w
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::thread::sleep;

    /// One scripted event on the fake connection.
    #[derive(Debug)]
    enum Step {
        /// Bytes ready now (a read takes as many as fit; the rest stays queued).
        Data(Vec<u8>),
        /// The read timeout fires (WouldBlock).
        Timeout,
        /// The peer closed its side.
        Eof,
        /// Bytes arriving after a real delay; if the armed timeout is shorter,
        /// the read sleeps that long and fails with TimedOut instead.
        Slow(Vec<u8>, Duration),
        /// A read error of this kind.
        Fail(io::ErrorKind),
    }
    use Step::*;

    /// A scripted `Conn`: records every armed read timeout, every write, and
    /// the order of reads and writes. An empty script reads as EOF.
    #[derive(Debug, Default)]
    struct Script {
        steps: VecDeque<Step>,
        timeouts: RefCell<Vec<Option<Duration>>>,
        written: Vec<u8>,
        log: Vec<String>,
    }

    impl Script {
        fn new(steps: Vec<Step>) -> Self {
            Script {
                steps: steps.into(),
                ..Script::default()
            }
        }
        fn armed(&self) -> Option<Duration> {
            self.timeouts.borrow().last().copied().flatten()
        }
        fn deliver(&mut self, bytes: Vec<u8>, buf: &mut [u8]) -> usize {
            let n = bytes.len().min(buf.len());
            buf[..n].copy_from_slice(&bytes[..n]);
            if n < bytes.len() {
                self.steps.push_front(Data(bytes[n..].to_vec()));
            }
            self.log.push(format!("read {n}"));
            n
        }
    }

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.steps.pop_front() {
                None | Some(Eof) => {
                    self.log.push("eof".into());
                    Ok(0)
                }
                Some(Data(bytes)) => Ok(self.deliver(bytes, buf)),
                Some(Timeout) => Err(io::ErrorKind::WouldBlock.into()),
                Some(Slow(bytes, delay)) => match self.armed() {
                    Some(t) if t < delay => {
                        sleep(t);
                        self.steps.push_front(Slow(bytes, delay - t));
                        Err(io::ErrorKind::TimedOut.into())
                    }
                    _ => {
                        sleep(delay);
                        Ok(self.deliver(bytes, buf))
                    }
                },
                Some(Fail(kind)) => Err(kind.into()),
            }
        }
    }

    impl Write for Script {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.written.extend_from_slice(buf);
            self.log.push(format!("write {:?}", String::from_utf8_lossy(buf)));
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Conn for Script {
        fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
            self.timeouts.borrow_mut().push(t);
            Ok(())
        }
        fn set_write_timeout(&self, _: Option<Duration>) -> io::Result<()> {
            Ok(())
        }
    }

    fn read_with(limits: Limits, steps: Vec<Step>) -> (Result<Request, ReadError>, Script) {
        let mut conn = Script::new(steps);
        let r = Reader::new(limits).read_request(&mut conn);
        (r, conn)
    }

    /// Reads one request from `input` delivered whole and in small pieces
    /// (one byte each for short inputs); both must give the same outcome.
    fn read_both(limits: Limits, input: &[u8]) -> Result<Request, ReadError> {
        let (whole, _) = read_with(limits.clone(), vec![Data(input.to_vec())]);
        let piece = (input.len() / 256).max(1);
        let pieces = input.chunks(piece).map(|c| Data(c.to_vec())).collect();
        let (drip, _) = read_with(limits, pieces);
        assert_eq!(format!("{whole:?}"), format!("{drip:?}"), "whole vs piecewise");
        whole
    }

    fn small(head: usize, headers: usize, body: usize) -> Limits {
        Limits {
            head_max_bytes: head,
            headers_max: headers,
            body_max_bytes: body,
            ..Limits::default()
        }
    }

    /// `accept!(name, [limits,] input, |req| { assertions })`
    macro_rules! accept {
        ($name:ident, $input:expr, |$req:ident| $body:expr) => {
            accept!($name, Limits::default(), $input, |$req| $body);
        };
        ($name:ident, $limits:expr, $input:expr, |$req:ident| $body:expr) => {
            #[test]
            fn $name() {
                let input: &[u8] = &$input;
                match read_both($limits, input) {
                    Ok($req) => $body,
                    Err(e) => panic!("expected a request, got {e:?}"),
                }
            }
        };
    }

    /// `reject!(name, [limits,] input, status, reason)`
    macro_rules! reject {
        ($name:ident, $input:expr, $status:expr, $reason:expr) => {
            reject!($name, Limits::default(), $input, $status, $reason);
        };
        ($name:ident, $limits:expr, $input:expr, $status:expr, $reason:expr) => {
            #[test]
            fn $name() {
                let input: &[u8] = &$input;
                match read_both($limits, input) {
                    Err(ReadError::Reject { status, reason }) => {
                        assert_eq!((status, reason.as_str()), ($status, $reason))
                    }
                    other => panic!("expected a reject, got {other:?}"),
                }
            }
        };
    }

    /// A GET whose head is exactly `len` bytes (padded in one header).
    fn head_of_len(len: usize) -> Vec<u8> {
        let fixed = b"GET / HTTP/1.1\r\nX-Pad: \r\n\r\n".len();
        let mut v = b"GET / HTTP/1.1\r\nX-Pad: ".to_vec();
        v.resize(len - 4, b'p');
        v.extend_from_slice(b"\r\n\r\n");
        assert!(len >= fixed);
        v
    }

    fn with_headers(n: usize) -> Vec<u8> {
        let mut v = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..n {
            v.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        v.extend_from_slice(b"\r\n");
        v
    }

    fn post_chunked(chunks: &str) -> Vec<u8> {
        format!("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{chunks}").into_bytes()
    }

    fn post_len(len: usize) -> Vec<u8> {
        let mut v = format!("POST / HTTP/1.1\r\nContent-Length: {len}\r\n\r\n").into_bytes();
        v.resize(v.len() + len, b'b');
        v
    }

    // ---- heads ----
    accept!(simple_get, *b"GET /a/b?x=1&y HTTP/1.1\r\nHost: h\r\n\r\n", |r| {
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/a/b"));
        assert_eq!(r.query.as_deref(), Some("x=1&y"));
        assert!(r.keep_alive && r.body.is_empty());
    });
    accept!(leading_blank_line, *b"\r\nGET / HTTP/1.1\r\n\r\n", |r| assert_eq!(
        r.path,
        "/"
    ));
    accept!(
        headers_as_sent,
        *b"GET / HTTP/1.1\r\nX-Mixed:   a b \t\r\nx-mixed: 2\r\n\r\n",
        |r| {
            assert_eq!(
                r.headers,
                [("X-Mixed".into(), "a b".into()), ("x-mixed".into(), "2".into())]
            );
            assert_eq!(r.header("X-MIXED"), Some("a b"));
            assert_eq!(r.header("nope"), None);
        }
    );
    reject!(garbage, *b"\x00\x01\x02 junk\r\n\r\n", 400, "invalid token");
    reject!(
        bad_header_name,
        *b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
        400,
        "invalid header name"
    );
    reject!(
        bare_lf_in_header,
        *b"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n",
        400,
        "invalid header value"
    );
    reject!(http2, *b"GET / HTTP/2.0\r\n\r\n", 505, "HTTP version not supported");
    reject!(junk_version, *b"GET / FTP/1.1\r\n\r\n", 400, "invalid HTTP version");
    reject!(
        non_utf8_value,
        *b"GET / HTTP/1.1\r\nX-A: \xff\xfe\r\n\r\n",
        400,
        "header X-A is not UTF-8"
    );
    reject!(
        eof_mid_head,
        *b"GET / HTTP/1.1\r\nHost:",
        400,
        "connection closed mid-request"
    );
    accept!(head_at_limit, head_of_len(limits::HTTP_HEAD_MAX_BYTES), |r| {
        assert_eq!(r.header("x-pad").map(str::len), Some(limits::HTTP_HEAD_MAX_BYTES - 27));
    });
    reject!(
        head_over_limit,
        head_of_len(limits::HTTP_HEAD_MAX_BYTES + 1),
        431,
        "request head is too large"
    );
    accept!(small_head_at_limit, small(64, 8, 0), head_of_len(64), |r| assert_eq!(
        r.path,
        "/"
    ));
    reject!(
        small_head_over_limit,
        small(64, 8, 0),
        head_of_len(65),
        431,
        "request head is too large"
    );
    accept!(headers_at_limit, with_headers(limits::HTTP_HEADERS_MAX), |r| {
        assert_eq!(r.headers.len(), limits::HTTP_HEADERS_MAX)
    });
    reject!(
        headers_over_limit,
        with_headers(limits::HTTP_HEADERS_MAX + 1),
        431,
        "too many header fields"
    );

    // ---- keep-alive ----
    accept!(http11_default_keep, *b"GET / HTTP/1.1\r\n\r\n", |r| assert!(
        r.keep_alive
    ));
    accept!(
        http11_close,
        *b"GET / HTTP/1.1\r\nConnection: Close\r\n\r\n",
        |r| assert!(!r.keep_alive)
    );
    accept!(
        http11_close_in_list,
        *b"GET / HTTP/1.1\r\nConnection: upgrade, close\r\n\r\n",
        |r| { assert!(!r.keep_alive) }
    );
    accept!(http10_default_close, *b"GET / HTTP/1.0\r\n\r\n", |r| assert!(
        !r.keep_alive
    ));
    accept!(
        http10_keep_alive,
        *b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
        |r| assert!(r.keep_alive)
    );
    accept!(
        close_beats_keep_alive,
        *b"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
        |r| { assert!(!r.keep_alive) }
    );

    // ---- Content-Length ----
    accept!(
        length_body,
        *b"POST /rpc HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
        |r| assert_eq!(r.body, b"hello")
    );
    accept!(
        length_zero,
        *b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        |r| assert!(r.body.is_empty())
    );
    accept!(
        length_repeated_same,
        *b"POST / HTTP/1.1\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\n\r\nab",
        |r| { assert_eq!(r.body, b"ab") }
    );
    reject!(
        length_conflict,
        *b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
        400,
        "conflicting Content-Length values"
    );
    reject!(
        length_plus,
        *b"POST / HTTP/1.1\r\nContent-Length: +2\r\n\r\nab",
        400,
        "Content-Length is not a number"
    );
    reject!(
        length_negative,
        *b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        400,
        "Content-Length is not a number"
    );
    reject!(
        length_empty,
        *b"POST / HTTP/1.1\r\nContent-Length:\r\n\r\n",
        400,
        "Content-Length is not a number"
    );
    reject!(
        length_hex,
        *b"POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n",
        400,
        "Content-Length is not a number"
    );
    reject!(
        length_huge,
        *b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        413,
        "request body is too large"
    );
    accept!(length_at_cap, small(1024, 8, 10), post_len(10), |r| assert_eq!(
        r.body.len(),
        10
    ));
    reject!(
        length_over_cap,
        small(1024, 8, 10),
        post_len(11),
        413,
        "request body is too large"
    );
    accept!(length_at_default_cap, post_len(limits::HTTP_BODY_MAX_BYTES), |r| {
        assert_eq!(r.body.len(), limits::HTTP_BODY_MAX_BYTES)
    });
    reject!(
        length_over_default_cap,
        post_len(limits::HTTP_BODY_MAX_BYTES + 1),
        413,
        "request body is too large"
    );
    reject!(
        eof_mid_length_body,
        *b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel",
        400,
        "connection closed mid-body"
    );

    // ---- Transfer-Encoding ----
    accept!(
        chunked_body,
        post_chunked("5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"),
        |r| { assert_eq!(r.body, b"hello world") }
    );
    accept!(
        chunked_case_insensitive,
        *b"POST / HTTP/1.1\r\nTransfer-Encoding: ChUnKeD\r\n\r\n0\r\n\r\n",
        |r| { assert!(r.body.is_empty()) }
    );
    reject!(
        te_and_cl,
        *b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
        "both Transfer-Encoding and Content-Length"
    );
    reject!(
        te_gzip,
        *b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        501,
        "transfer-coding not supported"
    );
    reject!(
        te_gzip_chunked,
        *b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        501,
        "transfer-coding not supported"
    );
    reject!(
        te_twice,
        *b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        501,
        "transfer-coding not supported"
    );
    reject!(
        te_http10,
        *b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
        "Transfer-Encoding in an HTTP/1.0 request"
    );
    reject!(
        bad_chunk_line,
        post_chunked("zz\r\n"),
        400,
        "chunk size line is not hex"
    );
    reject!(
        chunk_bare_lf,
        post_chunked("5\nhello\r\n"),
        400,
        "chunk line does not end in CRLF"
    );
    reject!(
        chunk_overflow,
        post_chunked("fffffffffffffffff\r\n"),
        413,
        "chunk size is too large"
    );
    reject!(
        eof_mid_chunked_body,
        post_chunked("5\r\nhel"),
        400,
        "connection closed mid-body"
    );
    accept!(
        chunk_line_at_limit,
        post_chunked(&format!(
            "3;{}\r\nabc\r\n0\r\n\r\n",
            "e".repeat(limits::HTTP_CHUNK_LINE_MAX_BYTES - 2)
        )),
        |r| { assert_eq!(r.body, b"abc") }
    );
    reject!(
        chunk_line_over_limit,
        post_chunked(&format!(
            "3;{}\r\nabc\r\n0\r\n\r\n",
            "e".repeat(limits::HTTP_CHUNK_LINE_MAX_BYTES - 1)
        )),
        400,
        "chunk size line is too long"
    );
    accept!(
        chunked_at_cap,
        small(1024, 8, 10),
        post_chunked("5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n"),
        |r| { assert_eq!(r.body, b"helloworld") }
    );
    reject!(
        chunked_over_cap,
        small(1024, 8, 10),
        post_chunked("5\r\nhello\r\n6\r\nworld!\r\n0\r\n\r\n"),
        413,
        "request body is too large"
    );
    // Refused at the size line: the 1 GiB of data never has to arrive.
    reject!(
        chunk_declared_over_cap,
        small(1024, 8, 10),
        post_chunked("40000000\r\n"),
        413,
        "request body is too large"
    );
    accept!(
        trailer_at_limit,
        small(128, 8, 10),
        post_chunked(&format!("0\r\nX: {}\r\n\r\n", "t".repeat(128 - 7))),
        |r| { assert!(r.body.is_empty()) }
    );
    reject!(
        trailer_over_limit,
        small(128, 8, 10),
        post_chunked(&format!("0\r\nX: {}\r\n\r\n", "t".repeat(128 - 6))),
        431,
        "chunk trailer section is too long"
    );

    // ---- connection behaviour, with the scripted Conn ----
    #[test]
    fn pipelined_in_one_read() {
        let mut wire = b"GET /1 HTTP/1.1\r\n\r\n".to_vec();
        wire.extend(post_chunked("3\r\nabc\r\n0\r\n\r\n"));
        wire.extend_from_slice(b"POST /3 HTTP/1.1\r\nContent-Length: 2\r\n\r\nxyGET /4 HTTP/1.0\r\n\r\n");
        let len = wire.len();
        let mut conn = Script::new(vec![Data(wire)]);
        let mut reader = Reader::new(Limits::default());
        let paths: Vec<(String, Vec<u8>)> = (0..4)
            .map(|_| reader.read_request(&mut conn).map(|r| (r.path, r.body)).unwrap())
            .collect();
        assert_eq!(paths[0], ("/1".into(), vec![]));
        assert_eq!(paths[1], ("/".into(), b"abc".to_vec()));
        assert_eq!(paths[2], ("/3".into(), b"xy".to_vec()));
        assert_eq!(paths[3], ("/4".into(), vec![]));
        assert_eq!(conn.log, [format!("read {len}")], "one read served all four");
        assert!(matches!(reader.read_request(&mut conn), Err(ReadError::Closed)));
    }

    #[test]
    fn split_across_many_reads() {
        let wire = b"POST /x?A2A-Version=1.0 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /y HTTP/1.1\r\n\r\n";
        let mut conn = Script::new(wire.iter().map(|&b| Data(vec![b])).collect());
        let mut reader = Reader::new(Limits::default());
        let first = reader.read_request(&mut conn).unwrap();
        assert_eq!((first.path.as_str(), first.body.as_slice()), ("/x", &b"abc"[..]));
        assert_eq!(first.query_param("A2A-Version").as_deref(), Some("1.0"));
        assert_eq!(reader.read_request(&mut conn).unwrap().path, "/y");
        assert!(matches!(reader.read_request(&mut conn), Err(ReadError::Closed)));
    }

    #[test]
    fn continue_written_before_body_is_read() {
        let head = b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n".to_vec();
        let len = head.len();
        let (r, conn) = read_with(Limits::default(), vec![Data(head), Data(b"body".to_vec())]);
        assert_eq!(r.unwrap().body, b"body");
        assert_eq!(conn.written, b"HTTP/1.1 100 Continue\r\n\r\n");
        assert_eq!(
            conn.log,
            [
                format!("read {len}"),
                "write \"HTTP/1.1 100 Continue\\r\\n\\r\\n\"".into(),
                "read 4".into()
            ]
        );
    }

    #[test]
    fn no_continue_without_body_or_on_http10() {
        for head in [
            &b"GET / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n"[..],
            b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx",
        ] {
            let (r, conn) = read_with(Limits::default(), vec![Data(head.to_vec())]);
            assert!(r.is_ok());
            assert!(conn.written.is_empty());
        }
    }

    #[test]
    fn oversized_length_refused_without_reading_body() {
        let head = b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1000000000\r\n\r\n".to_vec();
        let (r, conn) = read_with(Limits::default(), vec![Data(head), Data(b"never read".to_vec())]);
        assert!(matches!(r, Err(ReadError::Reject { status: 413, .. })), "{r:?}");
        assert!(conn.written.is_empty(), "no 100 Continue for a refused body");
        assert_eq!(conn.steps.len(), 1, "body left unread");
    }

    #[test]
    fn idle_timeout_is_idle() {
        let limits = Limits {
            idle_timeout: Duration::from_millis(500),
            ..Limits::default()
        };
        let (r, conn) = read_with(limits, vec![Timeout]);
        assert!(matches!(r, Err(ReadError::Idle)), "{r:?}");
        let armed = conn.timeouts.borrow()[0].unwrap();
        assert!(
            armed <= Duration::from_millis(500) && armed > Duration::from_millis(400),
            "{armed:?}"
        );
    }

    #[test]
    fn eof_before_any_byte_is_closed() {
        assert!(matches!(
            read_with(Limits::default(), vec![Eof]).0,
            Err(ReadError::Closed)
        ));
        assert!(matches!(read_with(Limits::default(), vec![]).0, Err(ReadError::Closed)));
    }

    #[test]
    fn timeout_mid_head_is_408() {
        let (r, _) = read_with(Limits::default(), vec![Data(b"GET / HT".to_vec()), Timeout]);
        match r {
            Err(ReadError::Reject { status, reason }) => {
                assert_eq!((status, reason.as_str()), (408, "request head timed out"))
            }
            other => panic!("{other:?}"),
        }
    }

    /// A client dripping a byte every 15 ms never finishes its head; with a
    /// 60 ms head timeout it must get 408 after ~60 ms, each read armed
    /// with only the time remaining.
    #[test]
    fn drip_client_gets_408_on_time() {
        let limits = Limits {
            head_timeout: Duration::from_millis(60),
            ..Limits::default()
        };
        let mut steps = vec![Data(b"G".to_vec())];
        steps.extend((0..200).map(|_| Slow(b"x".to_vec(), Duration::from_millis(15))));
        let started = Instant::now();
        let (r, conn) = read_with(limits, steps);
        let elapsed = started.elapsed();
        match r {
            Err(ReadError::Reject { status, reason }) => {
                assert_eq!((status, reason.as_str()), (408, "request head timed out"))
            }
            other => panic!("{other:?}"),
        }
        assert!(
            elapsed >= Duration::from_millis(60) && elapsed < Duration::from_millis(500),
            "{elapsed:?}"
        );
        let armed: Vec<Duration> = conn.timeouts.borrow().iter().skip(1).map(|t| t.unwrap()).collect();
        assert!(armed.len() >= 2 && armed.len() <= 6, "{armed:?}");
        assert!(
            armed.windows(2).all(|w| w[1] < w[0]),
            "remaining time shrinks: {armed:?}"
        );
        assert!(armed[0] <= Duration::from_millis(60));
    }

    #[test]
    fn drip_body_gets_408() {
        let limits = Limits {
            body_timeout: Duration::from_millis(40),
            ..Limits::default()
        };
        let mut steps = vec![Data(b"POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n".to_vec())];
        steps.extend((0..100).map(|_| Slow(b"x".to_vec(), Duration::from_millis(15))));
        let (r, _) = read_with(limits, steps);
        match r {
            Err(ReadError::Reject { status, reason }) => {
                assert_eq!((status, reason.as_str()), (408, "request body timed out"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn interrupted_is_retried_and_errors_surface() {
        let (r, _) = read_with(
            Limits::default(),
            vec![
                Fail(io::ErrorKind::Interrupted),
                Data(b"GET / HTTP/1.1\r\n\r\n".to_vec()),
            ],
        );
        assert_eq!(r.unwrap().path, "/");
        let (r, _) = read_with(Limits::default(), vec![Fail(io::ErrorKind::ConnectionReset)]);
        assert!(
            matches!(r, Err(ReadError::Io(ref e)) if e.kind() == io::ErrorKind::ConnectionReset),
            "{r:?}"
        );
    }

    #[test]
    fn keep_alive_waits_idle_between_requests() {
        let mut conn = Script::new(vec![
            Data(b"GET /1 HTTP/1.1\r\n\r\n".to_vec()),
            Data(b"GET /2 HTTP/1.1\r\n\r\n".to_vec()),
            Timeout,
        ]);
        let mut reader = Reader::new(Limits::default());
        assert_eq!(reader.read_request(&mut conn).unwrap().path, "/1");
        assert_eq!(reader.read_request(&mut conn).unwrap().path, "/2");
        assert!(matches!(reader.read_request(&mut conn), Err(ReadError::Idle)));
    }

    #[test]
    fn query_param_decoding() {
        let req = |q: &str| Request {
            method: "GET".into(),
            path: "/".into(),
            query: Some(q.into()),
            headers: vec![],
            body: vec![],
            keep_alive: true,
        };
        assert_eq!(
            req("A2A-Version=1.0").query_param("A2A-Version").as_deref(),
            Some("1.0")
        );
        assert_eq!(req("A2A-Version=1.0").query_param("a2a-version"), None);
        assert_eq!(
            req("%41%32A-Version=1%2e0").query_param("A2A-Version").as_deref(),
            Some("1.0")
        );
        assert_eq!(req("a=1&a=2").query_param("a").as_deref(), Some("1"));
        assert_eq!(req("x&a").query_param("a").as_deref(), Some(""));
        assert_eq!(req("a=%zz%4").query_param("a").as_deref(), Some("%zz%4"));
        assert_eq!(req("a=b+c%20d").query_param("a").as_deref(), Some("b+c d"));
        assert_eq!(req("a=%ff").query_param("a").as_deref(), Some("\u{FFFD}"));
        assert_eq!(req("a=%C3%A9").query_param("a").as_deref(), Some("é"));
        let mut none = req("");
        none.query = None;
        assert_eq!(none.query_param("a"), None);
    }

    // ---- responses ----
    fn written(resp: &Response, keep_alive: bool) -> String {
        let mut out = Vec::new();
        write_response(&mut out, resp, keep_alive).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn response_bytes() {
        let resp = Response::new(404)
            .header("X-A", "1")
            .header("Content-Length", "999")
            .header("Connection", "keep-alive");
        assert_eq!(
            written(&resp, true),
            "HTTP/1.1 404 Not Found\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n"
        );
        assert_eq!(
            written(&Response::error(413, "request body is too large"), false),
            "HTTP/1.1 413 Content Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 26\r\nConnection: close\r\n\r\nrequest body is too large\n"
        );
        assert_eq!(
            written(&Response::new(204).header("ETag", "\"1\""), true),
            "HTTP/1.1 204 No Content\r\nETag: \"1\"\r\n\r\n"
        );
        assert_eq!(
            written(&Response::new(299), true),
            "HTTP/1.1 299 \r\nContent-Length: 0\r\n\r\n"
        );
    }

    #[test]
    fn reject_response_is_one_line() {
        let e = ReadError::Reject {
            status: 400,
            reason: "bad\r\nInjected: yes".into(),
        };
        let resp = e.response().unwrap();
        assert_eq!(resp.body, b"bad  Injected: yes\n");
        assert!(ReadError::Idle.response().is_none());
    }

    #[test]
    fn response_splitting_refused() {
        for resp in [
            Response::new(200).header("X", "a\r\nSet-Cookie: x"),
            Response::new(200).header("X\n", "a"),
            Response::new(42),
        ] {
            let err = write_response(&mut Vec::new(), &resp, true).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        }
    }

    #[test]
    fn chunked_writer_bytes_decode_back() {
        let headers = vec![
            ("Content-Type".to_string(), "text/event-stream".to_string()),
            ("Content-Length".to_string(), "5".to_string()),
        ];
        let mut w = ChunkedWriter::start(Vec::new(), 200, &headers).unwrap();
        w.chunk(&sse::encode_event(Some(1), "{}")).unwrap();
        w.chunk(b"").unwrap();
        w.chunk(&sse::encode_comment("keep-alive")).unwrap();
        let out = w.finish().unwrap();
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(
            String::from_utf8_lossy(&out),
            format!("{head}10\r\nid: 1\ndata: {{}}\n\n\r\ne\r\n: keep-alive\n\n\r\n0\r\n\r\n")
        );
        let mut decoder = chunked::Decoder::new();
        let mut body = Vec::new();
        assert_eq!(decoder.feed(&out[head.len()..], &mut body), Ok(out.len() - head.len()));
        assert!(decoder.is_done());
        let mut events = Vec::new();
        sse::Parser::new().feed(&body, &mut events).unwrap();
        assert_eq!(
            events,
            [sse::Event {
                id: Some("1".into()),
                event: None,
                data: "{}".into()
            }]
        );
    }

    #[test]
    fn display_texts() {
        assert_eq!(
            ReadError::Closed.to_string(),
            "peer closed the connection between requests"
        );
        assert_eq!(ReadError::Idle.to_string(), "no request within the idle timeout");
        assert_eq!(
            ReadError::reject(431, "too many header fields").to_string(),
            "request rejected with 431: too many header fields"
        );
    }
}
