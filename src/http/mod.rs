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
pub mod date;
mod headers;
mod response;
pub mod sse;

pub use headers::Headers;
pub use response::{reason_phrase, write_response, ChunkedBody, ChunkedWriter, Response};

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
    pub headers: Headers,
    pub body: Vec<u8>,
    /// HTTP/1.1: true unless `Connection: close`. HTTP/1.0: false unless
    /// `Connection: keep-alive`. `close` wins over `keep-alive`.
    pub keep_alive: bool,
    /// HTTP/1.1 (or a higher 1.x, served as 1.1); false for HTTP/1.0, whose
    /// streamed answers are close-delimited, never chunked.
    pub http11: bool,
}

impl Request {
    /// The first header named `name`, compared case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
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

/// A read timeout already set on the connection within this much of the
/// time left is left as it is: a keep-alive connection's next request
/// would otherwise cost a `setsockopt` to move its timeout by microseconds.
/// A phase's deadline then holds to within this much either way.
const READ_TIMEOUT_SLACK: Duration = Duration::from_millis(5);

/// Reads once into `buf`, with the read timeout set to the time left until
/// `deadline` (`armed`: what the connection's read timeout is now).
/// WouldBlock and TimedOut both mean the timeout fired.
fn read_by<C: Conn>(
    conn: &mut C,
    buf: &mut [u8],
    deadline: Instant,
    armed: &mut Option<Duration>,
) -> Result<ReadOutcome, ReadError> {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(ReadOutcome::Timeout);
        }
        let left = deadline - now;
        let close_enough = armed.is_some_and(|a| a.abs_diff(left) <= READ_TIMEOUT_SLACK);
        if !close_enough {
            conn.set_read_timeout(Some(left)).map_err(ReadError::Io)?;
            *armed = Some(left);
        }
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
    headers: Headers,
}

/// Reads requests from one connection; keeps bytes that arrived past the end
/// of one request (pipelining) for the next. Fixed-size head buffer (no growth).
pub struct Reader {
    limits: Limits,
    buf: Box<[u8]>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// The read timeout this reader last set on the connection.
    armed: Option<Duration>,
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
            armed: None,
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
            match read_by(conn, &mut self.buf, deadline, &mut self.armed)? {
                ReadOutcome::Data(n) => self.end = n,
                ReadOutcome::Eof => return Err(ReadError::Closed),
                ReadOutcome::Timeout => return Err(ReadError::Idle),
            }
        }

        let head = self.read_head(conn)?;
        self.start = head.len;
        let (path, query) = match origin_form(&head.target).split_once('?') {
            Some(("", q)) => ("/".to_string(), Some(q.to_string())),
            Some((p, q)) => (p.to_string(), Some(q.to_string())),
            None => (origin_form(&head.target).to_string(), None),
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
            http11: head.http11,
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
                Err(httparse::Error::Version) => match version_check(&self.buf[..self.end]) {
                    // HTTP/1.x, x > 1: served as HTTP/1.1 (RFC 9110 §2.5).
                    // httparse knows only 1.0 and 1.1, so the minor digit
                    // is rewritten in place and the same head parsed again,
                    // by the same strict parser.
                    Version::HigherMinor(at) => {
                        self.buf[at] = b'1';
                        continue;
                    }
                    Version::Reject(e) => return Err(e),
                    // The version may still turn out well-formed.
                    Version::Partial => {}
                },
                Err(e) => return Err(ReadError::reject(400, e.to_string())),
            }
            if self.end == self.buf.len() {
                return Err(ReadError::reject(431, "request head is too large"));
            }
            match read_by(conn, &mut self.buf[self.end..], deadline, &mut self.armed)? {
                ReadOutcome::Data(n) => self.end += n,
                ReadOutcome::Eof => return Err(ReadError::reject(400, "connection closed mid-request")),
                ReadOutcome::Timeout => return Err(ReadError::reject(408, "request head timed out")),
            }
        }
    }

    fn read_length_body<C: Conn>(&mut self, conn: &mut C, len: u64, deadline: Instant) -> Result<Vec<u8>, ReadError> {
        // `framing` capped `len` at body_max_bytes, a usize.
        let len = usize::try_from(len).map_err(|_| too_large(self.limits.body_max_bytes))?;
        let mut body = Vec::with_capacity(len.min(limits::HTTP_BODY_READ_CHUNK_BYTES));
        let take = len.min(self.end - self.start);
        body.extend_from_slice(&self.buf[self.start..self.start + take]);
        self.start += take;
        while body.len() < len {
            let have = body.len();
            let want = (len - have).min(limits::HTTP_BODY_READ_CHUNK_BYTES);
            body.resize(have + want, 0);
            let outcome = read_by(conn, &mut body[have..], deadline, &mut self.armed);
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
                return Err(too_large(cap));
            }
            if decoder.is_done() {
                return Ok(body);
            }
            // The decoder consumed everything buffered; refill from the start.
            self.start = 0;
            self.end = 0;
            match read_by(conn, &mut self.buf, deadline, &mut self.armed)? {
                ReadOutcome::Data(n) => self.end = n,
                ReadOutcome::Eof => return Err(ReadError::reject(400, "connection closed mid-body")),
                ReadOutcome::Timeout => return Err(ReadError::reject(408, "request body timed out")),
            }
        }
    }
}

/// The 413 names the limit, so that a client can tell its user what fits
/// (agentd's own client reads the number back).
fn too_large(body_max: usize) -> ReadError {
    ReadError::reject(413, format!("request body is too large: at most {body_max} bytes"))
}

fn chunk_reject(e: chunked::ChunkError) -> ReadError {
    let status = match e {
        chunked::ChunkError::SizeOverflow => 413,
        chunked::ChunkError::TrailerTooLong => 431,
        _ => 400,
    };
    ReadError::reject(status, e.to_string())
}

/// What a request line that httparse refused for its version holds.
enum Version {
    /// `HTTP/1.x` with x > 1, its minor digit at this offset.
    HigherMinor(usize),
    /// Not a version we serve (505) or not one at all (400).
    Reject(ReadError),
    /// An unfinished line that may still become a version: read more.
    Partial,
}

/// httparse says "invalid HTTP version" both for `HTTP/2.0` and for junk,
/// and already at `HTTP/2` before the line is complete. A well-formed
/// `HTTP/1.x` (x > 1) is served as 1.1, any other `HTTP/d.d` gets 505,
/// anything that cannot become one 400.
fn version_check(buf: &[u8]) -> Version {
    const PATTERN: &[u8] = b"HTTP/d.d";
    let is_eol = |b: &u8| *b == b'\r' || *b == b'\n';
    let line_start = buf.iter().position(|b| !is_eol(b)).unwrap_or(buf.len());
    let rest = &buf[line_start..];
    let (line, complete) = match rest.iter().position(is_eol) {
        Some(i) => (&rest[..i], true),
        None => (rest, false),
    };
    // METHOD SP TARGET SP VERSION: a line with more spaces (a space in the
    // path) is malformed, whatever its last word looks like.
    if complete && line.split(|&b| b == b' ').count() != 3 {
        return Version::Reject(ReadError::reject(400, "malformed request line"));
    }
    let version = line.rsplit(|&b| b == b' ').next().unwrap_or(&[]);
    let fits = version.len() <= PATTERN.len()
        && version
            .iter()
            .zip(PATTERN)
            .all(|(&b, &p)| if p == b'd' { b.is_ascii_digit() } else { b == p });
    if fits && version.len() == PATTERN.len() {
        match (version[5], complete) {
            (b'1', true) if version[7] > b'1' => Version::HigherMinor(line_start + line.len() - 1),
            // Rewritten once the line is whole (then its shape is known).
            (b'1', false) => Version::Partial,
            _ => Version::Reject(ReadError::reject(505, "HTTP version not supported")),
        }
    } else if fits && !complete {
        Version::Partial
    } else {
        Version::Reject(ReadError::reject(400, "invalid HTTP version"))
    }
}

/// The origin-form path of a request target: an absolute-form target
/// (`http://agentd/rpc?x`, RFC 9112 §3.2.2, as a proxy sends it) loses its
/// scheme and authority; an origin-form one is kept as is.
fn origin_form(target: &str) -> &str {
    let lower = |n: usize| target.get(..n).map(str::to_ascii_lowercase);
    let after_scheme = if lower(7).as_deref() == Some("http://") {
        7
    } else if lower(8).as_deref() == Some("https://") {
        8
    } else {
        return target;
    };
    let rest = &target[after_scheme..];
    match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => &rest[i..],
        // No path: the empty path, i.e. "/" (the query stays).
        Some(i) => &rest[i..],
        None => "/",
    }
}

fn head_from(req: &httparse::Request<'_, '_>, len: usize) -> Result<Head, ReadError> {
    // httparse fills all three on Complete; be defensive anyway.
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(ReadError::reject(400, "incomplete request line"));
    };
    let bytes = req.headers.iter().map(|h| h.name.len() + h.value.len()).sum();
    let mut headers = Headers::with_capacity(req.headers.len(), bytes);
    for h in req.headers.iter() {
        let value = std::str::from_utf8(h.value)
            .map_err(|_| ReadError::reject(400, format!("header {} is not UTF-8", h.name)))?;
        headers.push(h.name, value.trim_matches([' ', '\t']));
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
fn list_values<'a>(headers: &'a Headers, name: &'a str) -> impl Iterator<Item = &'a str> {
    headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .flat_map(|(_, v)| v.split(','))
        .map(|t| t.trim_matches([' ', '\t']))
        .filter(|t| !t.is_empty())
}

fn keep_alive(http11: bool, headers: &Headers) -> bool {
    let mut close = false;
    let mut keep = false;
    for token in list_values(headers, "connection") {
        close |= token.eq_ignore_ascii_case("close");
        keep |= token.eq_ignore_ascii_case("keep-alive");
    }
    !close && (http11 || keep)
}

fn framing(http11: bool, headers: &Headers, body_max: usize) -> Result<Framing, ReadError> {
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
        return Err(too_large(body_max));
    }
    Ok(if len == 0 { Framing::Empty } else { Framing::Length(len) })
}

#[cfg(test)]
mod tests;
