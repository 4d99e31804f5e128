//! Client-side HTTP/1.1, just enough for agentd's own client: write one
//! request, read the response head (bounded, httparse), then the body —
//! whole, or piece by piece as it arrives (for SSE).

use std::io::{self, Read, Write};

use super::chunked::Decoder;
use crate::limits;

/// A response's status line and headers.
#[derive(Debug, Clone)]
pub struct Head {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Writes one request with a Content-Length body (possibly empty).
pub fn write_request(
    w: &mut impl Write,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<()> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nHost: agentd\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    w.write_all(&bytes)?;
    w.flush()
}

enum Framing {
    Length(u64),
    Chunked(Decoder),
    UntilClose,
    Done,
}

/// Reads one response from a stream: `head()` first, then the body.
pub struct ResponseReader<R> {
    inner: R,
    buf: Vec<u8>,
    framing: Framing,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

impl<R: Read> ResponseReader<R> {
    /// Reads the head; what follows it stays buffered for the body.
    pub fn new(mut inner: R) -> io::Result<(Head, ResponseReader<R>)> {
        let mut buf = Vec::with_capacity(4096);
        let mut scratch = [0u8; 4096];
        let mut interim = 0;
        loop {
            let mut headers = [httparse::EMPTY_HEADER; limits::HTTP_HEADERS_MAX];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let head = Head {
                        status: resp.code.unwrap_or(0),
                        headers: resp
                            .headers
                            .iter()
                            .map(|h| (h.name.to_string(), String::from_utf8_lossy(h.value).trim().to_string()))
                            .collect(),
                    };
                    buf.drain(..n);
                    if head.status / 100 == 1 {
                        // 100 Continue and friends: the real response follows
                        // (a few of them; not an endless stream of them).
                        interim += 1;
                        if interim > 4 {
                            return Err(bad("more than 4 interim (1xx) responses"));
                        }
                        continue;
                    }
                    let framing = framing(&head)?;
                    return Ok((head, ResponseReader { inner, buf, framing }));
                }
                Ok(httparse::Status::Partial) if buf.len() >= limits::HTTP_HEAD_MAX_BYTES => {
                    return Err(bad("the response head is over 16 KiB"))
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => return Err(bad(format!("not an HTTP response: {e}"))),
            }
            let n = inner.read(&mut scratch)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the connection closed before a response",
                ));
            }
            buf.extend_from_slice(&scratch[..n]);
        }
    }

    /// The next piece of the body as it arrives; `None` at its end.
    pub fn next_piece(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            match &mut self.framing {
                Framing::Done => return Ok(None),
                Framing::Length(0) => {
                    self.framing = Framing::Done;
                    return Ok(None);
                }
                Framing::Length(left) => {
                    if !self.buf.is_empty() {
                        let take = (*left).min(self.buf.len() as u64) as usize;
                        *left -= take as u64;
                        return Ok(Some(self.buf.drain(..take).collect()));
                    }
                }
                Framing::UntilClose => {
                    if !self.buf.is_empty() {
                        return Ok(Some(std::mem::take(&mut self.buf)));
                    }
                }
                Framing::Chunked(dec) => {
                    let mut out = Vec::new();
                    let used = dec
                        .feed(&self.buf, &mut out)
                        .map_err(|e| bad(format!("bad chunked body: {e}")))?;
                    self.buf.drain(..used);
                    if dec.is_done() {
                        self.framing = Framing::Done;
                    }
                    if !out.is_empty() {
                        return Ok(Some(out));
                    }
                    if matches!(self.framing, Framing::Done) {
                        return Ok(None);
                    }
                }
            }
            let mut scratch = [0u8; 16 * 1024];
            let n = self.inner.read(&mut scratch)?;
            if n == 0 {
                return match self.framing {
                    Framing::UntilClose => {
                        self.framing = Framing::Done;
                        Ok(None)
                    }
                    _ => Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the connection closed in the middle of the response",
                    )),
                };
            }
            self.buf.extend_from_slice(&scratch[..n]);
        }
    }

    /// The whole body, at most `max` bytes.
    pub fn body(&mut self, max: usize) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        while let Some(piece) = self.next_piece()? {
            body.extend_from_slice(&piece);
            if body.len() > max {
                return Err(bad(format!("the response body is over {max} bytes")));
            }
        }
        Ok(body)
    }
}

fn framing(head: &Head) -> io::Result<Framing> {
    if head.status == 204 || head.status == 304 {
        return Ok(Framing::Done);
    }
    if let Some(te) = head.header("Transfer-Encoding") {
        // Only plain chunked: anything else (gzip, chunked…) we cannot frame.
        return if te.trim().eq_ignore_ascii_case("chunked") {
            Ok(Framing::Chunked(Decoder::new()))
        } else {
            Err(bad(format!("unsupported Transfer-Encoding `{te}`")))
        };
    }
    let lengths: Vec<&str> = head
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("Content-Length"))
        .map(|(_, v)| v.trim())
        .collect();
    if lengths.windows(2).any(|w| w[0] != w[1]) {
        return Err(bad("conflicting Content-Length headers"));
    }
    match head.header("Content-Length") {
        Some(v) => v
            .trim()
            .parse()
            .map(Framing::Length)
            .map_err(|_| bad(format!("bad Content-Length `{v}`"))),
        None => Ok(Framing::UntilClose),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: &[u8]) -> (Head, Vec<u8>) {
        let (head, mut r) = ResponseReader::new(bytes).unwrap();
        let body = r.body(1 << 20).unwrap();
        (head, body)
    }

    #[test]
    fn reads_length_chunked_and_close_delimited_bodies() {
        let (h, b) = read_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        assert_eq!((h.status, b.as_slice()), (200, &b"hello"[..]));
        let (h, b) = read_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n");
        assert_eq!((h.status, b.as_slice()), (200, &b"hello"[..]));
        let (_, b) = read_all(b"HTTP/1.1 503 Busy\r\nConnection: close\r\n\r\nbusy\n");
        assert_eq!(b, b"busy\n");
        let (h, b) = read_all(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n");
        assert_eq!((h.status, h.header("etag")), (304, Some("x")));
        assert!(b.is_empty());
    }

    #[test]
    fn truncated_bodies_are_errors() {
        let (_, mut r) = ResponseReader::new(&b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhel"[..]).unwrap();
        assert!(r.body(100).is_err());
        let (_, mut r) =
            ResponseReader::new(&b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhe"[..]).unwrap();
        assert!(r.body(100).is_err());
        assert!(ResponseReader::new(&b"garbage\r\n\r\n"[..]).is_err());
    }

    #[test]
    fn refuses_framing_it_cannot_trust() {
        let conflicting = &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc"[..];
        assert!(ResponseReader::new(conflicting).is_err());
        let gzip = &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"[..];
        assert!(ResponseReader::new(gzip).is_err());
        let many = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(5);
        assert!(ResponseReader::new(&many[..]).is_err());
    }

    #[test]
    fn writes_a_request() {
        let mut out = Vec::new();
        write_request(&mut out, "POST", "/", &[("A2A-Version", "1.0")], b"{}").unwrap();
        assert_eq!(
            out,
            b"POST / HTTP/1.1\r\nHost: agentd\r\nA2A-Version: 1.0\r\nContent-Length: 2\r\n\r\n{}".to_vec()
        );
    }
}
