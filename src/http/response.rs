//! Writing responses: whole ones with a computed Content-Length, and
//! chunked ones for SSE streams. These functions own the framing headers.

use std::io::{self, Write};

use super::chunked;
use crate::append::Appender;

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
    // Straight into the buffer, not through a String per line: a head is
    // written for every response.
    let mut out = Appender(out);
    write!(out, "HTTP/1.1 {status} {}\r\n", reason_phrase(status))?;
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
        write!(out, "{name}: {value}\r\n")?;
    }
    Ok(())
}

/// Writes status line, the headers, Content-Length (computed), `Connection:
/// close` when !keep_alive, then the body; one write_all of a pre-built
/// buffer, then flush. Caller headers named Content-Length,
/// Transfer-Encoding or Connection are dropped (this function owns framing).
/// 1xx, 204 and 304 get neither Content-Length nor body (RFC 9110 §8.6, §15).
pub fn write_response<W: Write>(w: &mut W, resp: &Response, keep_alive: bool) -> io::Result<()> {
    // A small body goes out with the head in one write; a large one after
    // it, in a write of its own, rather than copied behind the head.
    let inline_body = resp.body.len() <= crate::limits::RESPONSE_INLINE_BODY_MAX_BYTES;
    let mut out = Vec::with_capacity(256 + if inline_body { resp.body.len() } else { 0 });
    write_head(
        &mut out,
        resp.status,
        &resp.headers,
        &["content-length", "transfer-encoding", "connection"],
    )?;
    let bodiless = resp.status < 200 || resp.status == 204 || resp.status == 304;
    if !bodiless {
        write!(Appender(&mut out), "Content-Length: {}\r\n", resp.body.len())?;
    }
    if !keep_alive {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !bodiless && inline_body {
        out.extend_from_slice(&resp.body);
    }
    w.write_all(&out)?;
    if !bodiless && !inline_body {
        w.write_all(&resp.body)?;
    }
    w.flush()
}

/// A streaming response body (for SSE): chunked, or — for an HTTP/1.0
/// client, which knows no Transfer-Encoding (RFC 9112 §6.1) — delimited by
/// closing the connection. Dropping a chunked one without
/// [`finish`](Self::finish) leaves the body unterminated: close the
/// connection. A close-delimited one always ends with the connection.
#[derive(Debug)]
pub struct ChunkedWriter<W: Write> {
    w: W,
    scratch: Vec<u8>,
    chunked: bool,
}

impl<W: Write> ChunkedWriter<W> {
    /// Writes the status line + headers (caller Content-Length and
    /// Transfer-Encoding dropped; `Transfer-Encoding: chunked` added) and flushes.
    pub fn start(w: W, status: u16, headers: &[(String, String)]) -> io::Result<Self> {
        Self::begin(w, status, headers, true)
    }

    /// The same for an HTTP/1.0 client: no Transfer-Encoding, `Connection:
    /// close`; the body is the bytes written, ended by closing.
    pub fn start_close_delimited(w: W, status: u16, headers: &[(String, String)]) -> io::Result<Self> {
        Self::begin(w, status, headers, false)
    }

    fn begin(mut w: W, status: u16, headers: &[(String, String)], chunked: bool) -> io::Result<Self> {
        let mut out = Vec::with_capacity(256);
        write_head(
            &mut out,
            status,
            headers,
            &["content-length", "transfer-encoding", "connection"],
        )?;
        out.extend_from_slice(if chunked {
            b"Transfer-Encoding: chunked\r\n\r\n".as_slice()
        } else {
            b"Connection: close\r\n\r\n".as_slice()
        });
        w.write_all(&out)?;
        w.flush()?;
        Ok(ChunkedWriter {
            w,
            scratch: Vec::new(),
            chunked,
        })
    }

    /// Writes one chunk and flushes; empty data is a no-op (an empty chunk
    /// would end the body).
    pub fn chunk(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        if !self.chunked {
            self.w.write_all(data)?;
            return self.w.flush();
        }
        // A small chunk goes out framed in one write; a large one between
        // its size line and its end, rather than copied between them.
        if data.len() > crate::limits::RESPONSE_INLINE_BODY_MAX_BYTES {
            self.w.write_all(chunked::chunk_head(data.len()).as_bytes())?;
            self.w.write_all(data)?;
            self.w.write_all(chunked::CHUNK_END)?;
            return self.w.flush();
        }
        self.scratch.clear();
        chunked::encode_chunk(data, &mut self.scratch);
        self.w.write_all(&self.scratch)?;
        self.w.flush()
    }

    /// Writes the last chunk "0\r\n\r\n" (chunked only), flushes, and
    /// gives the stream back.
    pub fn finish(mut self) -> io::Result<W> {
        if self.chunked {
            self.w.write_all(b"0\r\n\r\n")?;
        }
        self.w.flush()?;
        Ok(self.w)
    }

    /// Whether the connection must close after this body.
    pub fn closes(&self) -> bool {
        !self.chunked
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.w
    }

    /// A writer of this body as it is produced (`flush` it at the end).
    pub fn body(&mut self) -> ChunkedBody<'_, W> {
        ChunkedBody {
            out: self,
            pending: Vec::new(),
        }
    }
}

/// A body written as it is produced: small pieces are gathered into chunks
/// of about [`RESPONSE_CHUNK_BYTES`](crate::limits::RESPONSE_CHUNK_BYTES),
/// and a larger piece is a chunk of its own, written without a copy.
/// What is still gathered goes out on `flush`.
pub struct ChunkedBody<'a, W: Write> {
    out: &'a mut ChunkedWriter<W>,
    pending: Vec<u8>,
}

impl<W: Write> Write for ChunkedBody<'_, W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let chunk_bytes = crate::limits::RESPONSE_CHUNK_BYTES;
        if data.len() >= chunk_bytes {
            self.flush()?;
            self.out.chunk(data)?;
        } else {
            if self.pending.capacity() == 0 {
                self.pending.reserve(chunk_bytes);
            }
            self.pending.extend_from_slice(data);
            if self.pending.len() >= chunk_bytes {
                self.flush()?;
            }
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.chunk(&self.pending)?;
        self.pending.clear();
        Ok(())
    }
}
