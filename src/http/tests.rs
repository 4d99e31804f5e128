//! Tests of the request reader and response writer, driven through a
//! scripted connection (ready / timed-out / closed / slow drip).
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
            r.headers.iter().collect::<Vec<_>>(),
            [("X-Mixed", "a b"), ("x-mixed", "2")]
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
reject!(http0, *b"GET / HTTP/0.9\r\n\r\n", 505, "HTTP version not supported");
accept!(
    http_1_2_is_served_as_1_1,
    *b"POST / HTTP/1.2\r\nContent-Length: 2\r\n\r\n{}",
    |r| {
        assert!(r.http11 && r.keep_alive);
        assert_eq!((r.path.as_str(), r.body.as_slice()), ("/", b"{}".as_slice()));
    }
);
accept!(http_1_9_in_pieces, *b"GET /x HTTP/1.9\r\nHost: a\r\n\r\n", |r| assert!(
    r.http11 && r.path == "/x"
));
accept!(http_1_0_is_not_1_1, *b"GET / HTTP/1.0\r\n\r\n", |r| assert!(
    !r.http11 && !r.keep_alive
));
accept!(
    absolute_form,
    *b"POST http://agentd/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    |r| assert_eq!(r.path, "/")
);
accept!(
    absolute_form_with_path_and_query,
    *b"GET HTTPS://h:1/.well-known/agent-card.json?A2A-Version=1.0 HTTP/1.1\r\n\r\n",
    |r| {
        assert_eq!(r.path, "/.well-known/agent-card.json");
        assert_eq!(r.query.as_deref(), Some("A2A-Version=1.0"));
    }
);
accept!(
    absolute_form_without_path,
    *b"GET http://agentd?a=1 HTTP/1.1\r\n\r\n",
    |r| {
        assert_eq!((r.path.as_str(), r.query.as_deref()), ("/", Some("a=1")));
    }
);
accept!(
    absolute_form_bare_authority,
    *b"GET http://agentd HTTP/1.1\r\n\r\n",
    |r| assert_eq!(r.path, "/")
);
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
/// The manual's number, not the constant's: "431 for a head over 16 KiB".
#[test]
fn the_head_limit_is_the_manuals_16_kib() {
    assert_eq!(limits::HTTP_HEAD_MAX_BYTES, 16 * 1024);
    assert_eq!(Limits::default().head_max_bytes, 16 * 1024);
}
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
// A bound above the default parses into an array of its own size.
accept!(
    headers_at_a_raised_limit,
    small(limits::HTTP_HEAD_MAX_BYTES, limits::HTTP_HEADERS_MAX * 2, 0),
    with_headers(limits::HTTP_HEADERS_MAX * 2),
    |r| assert_eq!(r.headers.len(), limits::HTTP_HEADERS_MAX * 2)
);
reject!(
    headers_over_a_raised_limit,
    small(limits::HTTP_HEAD_MAX_BYTES, limits::HTTP_HEADERS_MAX * 2, 0),
    with_headers(limits::HTTP_HEADERS_MAX * 2 + 1),
    431,
    "too many header fields"
);
reject!(
    headers_over_a_lowered_limit,
    small(limits::HTTP_HEAD_MAX_BYTES, 8, 0),
    with_headers(9),
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
    format!(
        "request body is too large: at most {} bytes",
        limits::HTTP_BODY_MAX_BYTES
    )
    .as_str()
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
    "request body is too large: at most 10 bytes"
);
accept!(length_at_default_cap, post_len(limits::HTTP_BODY_MAX_BYTES), |r| {
    assert_eq!(r.body.len(), limits::HTTP_BODY_MAX_BYTES)
});
reject!(
    length_over_default_cap,
    post_len(limits::HTTP_BODY_MAX_BYTES + 1),
    413,
    format!(
        "request body is too large: at most {} bytes",
        limits::HTTP_BODY_MAX_BYTES
    )
    .as_str()
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
    "request body is too large: at most 10 bytes"
);
// Refused at the size line: the 1 GiB of data never has to arrive.
reject!(
    chunk_declared_over_cap,
    small(1024, 8, 10),
    post_chunked("40000000\r\n"),
    413,
    "request body is too large: at most 10 bytes"
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
    let started = Instant::now();
    let (r, conn) = read_with(limits, vec![Timeout]);
    let took = started.elapsed();
    assert!(matches!(r, Err(ReadError::Idle)), "{r:?}");
    // Armed with the idle timeout, less what the call itself took (no
    // fixed window: a loaded machine may preempt us anywhere in it).
    let armed = conn.timeouts.borrow()[0].unwrap();
    assert!(
        armed <= Duration::from_millis(500) && armed + took >= Duration::from_millis(500),
        "armed {armed:?}, the call took {took:?}"
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
/// 60 ms head timeout it must get 408 once the 60 ms are up, each read
/// armed with only the time remaining. Bounds that hold however slow the
/// machine is: at least 60 ms pass; each read that delivered took 15 ms or
/// more, so the next is armed that much shorter, and no more than 60/15 + 1
/// reads fit; and it ends long before the 2,000 drips (30 s) would.
#[test]
fn drip_client_gets_408_on_time() {
    const HEAD_TIMEOUT: Duration = Duration::from_millis(60);
    const DRIP: Duration = Duration::from_millis(15);
    let limits = Limits {
        head_timeout: HEAD_TIMEOUT,
        ..Limits::default()
    };
    let mut steps = vec![Data(b"G".to_vec())];
    steps.extend((0..2000).map(|_| Slow(b"x".to_vec(), DRIP)));
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
        elapsed >= HEAD_TIMEOUT && elapsed < Duration::from_secs(10),
        "{elapsed:?}"
    );
    let armed: Vec<Duration> = conn.timeouts.borrow().iter().skip(1).map(|t| t.unwrap()).collect();
    assert!(!armed.is_empty() && armed.len() <= 5, "{armed:?}");
    assert!(armed[0] <= HEAD_TIMEOUT, "{armed:?}");
    assert!(
        armed.windows(2).all(|w| w[1] + DRIP <= w[0]),
        "each read is armed with the time remaining, {DRIP:?} less at least: {armed:?}"
    );
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
fn keep_alive_requests_do_not_rearm_a_timeout_that_still_fits() {
    let mut conn = Script::new(vec![
        Data(b"GET /1 HTTP/1.1\r\n\r\n".to_vec()),
        Data(b"GET /2 HTTP/1.1\r\n\r\n".to_vec()),
        Data(b"GET /3 HTTP/1.1\r\n\r\n".to_vec()),
    ]);
    let mut reader = Reader::new(Limits::default());
    for path in ["/1", "/2", "/3"] {
        assert_eq!(reader.read_request(&mut conn).unwrap().path, path);
    }
    // One idle timeout armed for all three: each would have moved it by
    // microseconds only.
    let armed = conn.timeouts.borrow().clone();
    assert_eq!(armed.len(), 1, "{armed:?}");
    let idle = Limits::default().idle_timeout;
    assert!(armed[0].is_some_and(|a| idle - a < READ_TIMEOUT_SLACK), "{armed:?}");
    // A phase with another deadline re-arms.
    let mut conn = Script::new(vec![
        Data(b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n".to_vec()),
        Data(b"body".to_vec()),
    ]);
    let mut reader = Reader::new(Limits::default());
    assert_eq!(reader.read_request(&mut conn).unwrap().body, b"body");
    assert_eq!(conn.timeouts.borrow().len(), 2, "idle, then the body's deadline");
}

#[test]
fn query_param_decoding() {
    let req = |q: &str| Request {
        method: "GET".into(),
        path: "/".into(),
        query: Some(q.into()),
        headers: Headers::default(),
        body: vec![],
        keep_alive: true,
        http11: true,
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

/// A body at the inline limit goes out with its head in one write; one
/// past it in a second write; the bytes are the same either way.
#[test]
fn a_large_body_is_written_after_its_head_not_copied_behind_it() {
    /// Records each write it is given.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);
    impl io::Write for Writes {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let max = crate::limits::RESPONSE_INLINE_BODY_MAX_BYTES;
    for (len, writes) in [(max, 1), (max + 1, 2)] {
        let resp = Response::new(200).body("application/json", vec![b'x'; len]);
        let mut w = Writes::default();
        write_response(&mut w, &resp, true).unwrap();
        assert_eq!(w.0.len(), writes, "a body of {len} bytes");
        let all = w.0.concat();
        let head = format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n");
        assert!(all.starts_with(head.as_bytes()), "{len}");
        assert_eq!(all.len(), head.len() + len);
    }
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
    // One past the size written in one piece: written around, not copied.
    let large = "x".repeat(crate::limits::RESPONSE_INLINE_BODY_MAX_BYTES + 1);
    w.chunk(&sse::encode_event(Some(2), &large)).unwrap();
    let out = w.finish().unwrap();
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    let large_event = format!("id: 2\ndata: {large}\n\n");
    assert_eq!(
        String::from_utf8_lossy(&out),
        format!(
            "{head}10\r\nid: 1\ndata: {{}}\n\n\r\ne\r\n: keep-alive\n\n\r\n{:x}\r\n{large_event}\r\n0\r\n\r\n",
            large_event.len()
        )
    );
    let mut decoder = chunked::Decoder::new();
    let mut body = Vec::new();
    assert_eq!(decoder.feed(&out[head.len()..], &mut body), Ok(out.len() - head.len()));
    assert!(decoder.is_done());
    let mut events = Vec::new();
    sse::Parser::new().feed(&body, &mut events).unwrap();
    assert_eq!(
        events,
        [
            sse::Event {
                id: Some("1".into()),
                event: None,
                data: "{}".into()
            },
            sse::Event {
                id: Some("2".into()),
                event: None,
                data: large
            }
        ]
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

#[test]
fn a_close_delimited_stream_has_no_transfer_encoding() {
    let headers = vec![("Content-Type".to_string(), "text/event-stream".to_string())];
    let mut w = ChunkedWriter::start_close_delimited(Vec::new(), 200, &headers).unwrap();
    assert!(w.closes());
    w.chunk(b"data: 1\n\n").unwrap();
    w.chunk(b"").unwrap();
    let out = w.finish().unwrap();
    assert_eq!(
        out,
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\ndata: 1\n\n"
    );
}
