//! The soak's client: HTTP/1.1 on a unix socket that reports every failure
//! as a value (the daemon is killed under it on purpose), with an SSE
//! reader that checks framing as strictly as the common harness does.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

/// Why a call did not give an answer.
#[derive(Debug)]
pub enum CallError {
    /// No connection (the daemon is down, or its socket is being replaced).
    Connect(io::Error),
    /// The request was not written whole (the connection broke first, or
    /// it reached a daemon other than the one it was meant for).
    Unsent(io::Error),
    /// The connection broke or timed out mid-call.
    Io(io::Error),
    /// An HTTP status other than 200.
    Status(u16, String),
    /// A JSON-RPC error object.
    Rpc(Value),
    /// Something a well-behaved daemon never sends.
    Protocol(String),
}

impl CallError {
    /// The JSON-RPC error code, if that is what came back.
    pub fn code(&self) -> Option<i64> {
        match self {
            CallError::Rpc(e) => e["code"].as_i64(),
            _ => None,
        }
    }

    pub fn is_timeout(&self) -> bool {
        matches!(self, CallError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Connect(e) => write!(f, "connect: {e}"),
            CallError::Unsent(e) => write!(f, "not sent whole: {e}"),
            CallError::Io(e) => write!(f, "i/o: {e}"),
            CallError::Status(s, body) => write!(f, "HTTP {s}: {}", body.chars().take(200).collect::<String>()),
            CallError::Rpc(e) => write!(f, "JSON-RPC error {e}"),
            CallError::Protocol(why) => write!(f, "protocol: {why}"),
        }
    }
}

fn io_err(e: io::Error) -> CallError {
    CallError::Io(e)
}

fn proto(why: impl Into<String>) -> CallError {
    CallError::Protocol(why.into())
}

pub fn connect(socket: &Path, timeout: Duration) -> Result<UnixStream, CallError> {
    let s = UnixStream::connect(socket).map_err(CallError::Connect)?;
    s.set_read_timeout(Some(timeout)).map_err(CallError::Connect)?;
    s.set_write_timeout(Some(timeout)).map_err(CallError::Connect)?;
    Ok(s)
}

/// The bytes of one POST / with a JSON body.
pub fn post_bytes(body: &[u8], extra: &[(&str, &str)]) -> Vec<u8> {
    let mut head = format!(
        "POST / HTTP/1.1\r\nHost: agentd\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\nA2A-Version: 1.0\r\n",
        body.len()
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

pub fn request_body(method: &str, params: &Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        .to_string()
        .into_bytes()
}

/// One response as read off the wire.
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A status line and headers, strictly CRLF.
fn read_head(r: &mut impl BufRead) -> Result<(u16, Vec<(String, String)>), CallError> {
    let mut line = String::new();
    if r.read_line(&mut line).map_err(io_err)? == 0 {
        return Err(CallError::Io(io::ErrorKind::UnexpectedEof.into()));
    }
    let status = line
        .strip_suffix("\r\n")
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| proto(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line).map_err(io_err)? == 0 {
            return Err(CallError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        let l = line
            .strip_suffix("\r\n")
            .ok_or_else(|| proto(format!("header line without CRLF: {line:?}")))?;
        if l.is_empty() {
            return Ok((status, headers));
        }
        let (k, v) = l
            .split_once(':')
            .ok_or_else(|| proto(format!("bad header line {l:?}")))?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
}

fn find<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A whole response: Content-Length or until close (agentd never sends a
/// chunked answer that is not a stream).
fn read_response(r: &mut impl BufRead) -> Result<Response, CallError> {
    let (status, headers) = read_head(r)?;
    let mut body = Vec::new();
    if let Some(len) = find(&headers, "Content-Length") {
        let len: usize = len.parse().map_err(|_| proto(format!("bad Content-Length {len:?}")))?;
        body.resize(len, 0);
        r.read_exact(&mut body).map_err(io_err)?;
    } else if find(&headers, "Transfer-Encoding").is_some() {
        return Err(proto("a chunked answer where a plain one was expected"));
    } else {
        r.read_to_end(&mut body).map_err(io_err)?;
    }
    Ok(Response { status, body })
}

/// Calls made (exchanges and streams opened), for the report: every one
/// is judged by `client_error` when it fails.
static CALLS: AtomicU64 = AtomicU64::new(0);

pub fn calls() -> u64 {
    CALLS.load(Ordering::Relaxed)
}

/// How far a request got before its call ended, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Progress {
    /// Not written whole: the daemon cannot have it.
    Unsent,
    /// Written whole, and no answer read.
    Written,
    /// An answer was read (a result, a refusal or an error).
    Answered,
}

/// Writes `bytes` on `s` and reads one response; says how far it got.
pub fn exchange_on(mut s: UnixStream, bytes: &[u8]) -> (Progress, Result<Response, CallError>) {
    CALLS.fetch_add(1, Ordering::Relaxed);
    // A refused connection (503, 413) is answered before its request is
    // read whole: a failed write is not the end, the answer says more.
    let wrote = s.write_all(bytes);
    match read_response(&mut BufReader::new(s)) {
        Ok(r) => (Progress::Answered, Ok(r)),
        Err(e) => match wrote {
            Err(w) => (Progress::Unsent, Err(CallError::Unsent(w))),
            Ok(()) => (Progress::Written, Err(e)),
        },
    }
}

/// Writes `bytes` on a fresh connection and reads one response.
pub fn exchange(socket: &Path, bytes: &[u8], timeout: Duration) -> Result<Response, CallError> {
    exchange_on(connect(socket, timeout)?, bytes).1
}

pub fn get(socket: &Path, path: &str, timeout: Duration) -> Result<Response, CallError> {
    exchange(
        socket,
        format!("GET {path} HTTP/1.1\r\nHost: agentd\r\nConnection: close\r\n\r\n").as_bytes(),
        timeout,
    )
}

/// A JSON-RPC body's result, or its error.
pub fn result_of(resp: &Response) -> Result<Value, CallError> {
    if resp.status != 200 {
        return Err(CallError::Status(resp.status, resp.text()));
    }
    let v: Value = serde_json::from_slice(&resp.body).map_err(|e| proto(format!("not JSON ({e}): {}", resp.text())))?;
    if let Some(err) = v.get("error") {
        return Err(CallError::Rpc(err.clone()));
    }
    v.get("result")
        .cloned()
        .ok_or_else(|| proto(format!("neither result nor error: {v}")))
}

/// One JSON-RPC call on a fresh connection.
pub fn rpc(socket: &Path, method: &str, params: Value, timeout: Duration) -> Result<Value, CallError> {
    let resp = exchange(socket, &post_bytes(&request_body(method, &params), &[]), timeout)?;
    result_of(&resp)
}

/// One event of a stream.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: Option<u64>,
    pub data: Value,
}

impl Event {
    /// `task`, `message`, `statusUpdate`, `artifactUpdate` or `error`.
    pub fn kind(&self) -> &str {
        if self.data.get("error").is_some() {
            return "error";
        }
        match self.data["result"].as_object() {
            Some(o) if o.len() == 1 => o.keys().next().map(String::as_str).unwrap_or(""),
            _ => "",
        }
    }

    pub fn body(&self) -> &Value {
        &self.data["result"][self.kind()]
    }
}

/// An open event stream.
pub struct Sse {
    reader: BufReader<UnixStream>,
    ended: bool,
}

/// What a streaming call answered with.
pub enum Opened {
    Stream(Sse),
    /// A plain JSON-RPC answer (an error found before the stream started).
    Json(Value),
}

impl Sse {
    /// Opens a streaming call on `s`; says how far the request got.
    /// `rcvbuf` shrinks the socket's receive buffer (a slow reader's).
    pub fn open_on(
        mut s: UnixStream,
        method: &str,
        params: Value,
        extra: &[(&str, &str)],
        rcvbuf: Option<usize>,
    ) -> (Progress, Result<Opened, CallError>) {
        CALLS.fetch_add(1, Ordering::Relaxed);
        if let Some(n) = rcvbuf {
            set_rcvbuf(&s, n);
        }
        let mut headers = vec![("Accept", "text/event-stream")];
        headers.extend_from_slice(extra);
        if let Err(e) = s.write_all(&post_bytes(&request_body(method, &params), &headers)) {
            return (Progress::Unsent, Err(CallError::Unsent(e)));
        }
        let mut reader = BufReader::new(s);
        match Sse::start(&mut reader, method) {
            Ok(None) => (Progress::Answered, Ok(Opened::Stream(Sse { reader, ended: false }))),
            Ok(Some(opened)) => (Progress::Answered, Ok(opened)),
            Err((progress, e)) => (progress, Err(e)),
        }
    }

    /// Opens a streaming call on a fresh connection.
    pub fn open(
        socket: &Path,
        method: &str,
        params: Value,
        extra: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<Opened, CallError> {
        Sse::open_on(connect(socket, timeout)?, method, params, extra, None).1
    }

    /// Reads the answer's head: None when a stream follows, or the plain
    /// answer that came instead. A head read is an answer, however bad.
    fn start(reader: &mut BufReader<UnixStream>, method: &str) -> Result<Option<Opened>, (Progress, CallError)> {
        let (status, headers) = read_head(reader).map_err(|e| (Progress::Written, e))?;
        let answered = |e| (Progress::Answered, e);
        let ct = find(&headers, "Content-Type").unwrap_or("").to_ascii_lowercase();
        if !ct.starts_with("text/event-stream") {
            let len: usize = find(&headers, "Content-Length")
                .and_then(|l| l.parse().ok())
                .ok_or_else(|| {
                    answered(proto(format!(
                        "{method}: a plain answer without Content-Length: {headers:?}"
                    )))
                })?;
            let mut body = vec![0; len];
            reader.read_exact(&mut body).map_err(|e| answered(io_err(e)))?;
            let resp = Response { status, body };
            return match result_of(&resp) {
                Ok(v) => Err(answered(proto(format!(
                    "{method}: a plain result instead of a stream: {v}"
                )))),
                Err(CallError::Rpc(e)) => Ok(Some(Opened::Json(e))),
                Err(e) => Err(answered(e)),
            };
        }
        if status != 200 || !find(&headers, "Transfer-Encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            return Err(answered(proto(format!(
                "{method}: stream with status {status}, headers {headers:?}"
            ))));
        }
        Ok(None)
    }

    /// The next event; `None` after the zero chunk.
    pub fn next(&mut self) -> Result<Option<Event>, CallError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            let mut size = Vec::new();
            if self.reader.read_until(b'\n', &mut size).map_err(io_err)? == 0 {
                return Err(CallError::Io(io::ErrorKind::UnexpectedEof.into()));
            }
            let digits = size.strip_suffix(b"\r\n").ok_or_else(|| {
                proto(format!(
                    "chunk size line without CRLF: {:?}",
                    String::from_utf8_lossy(&size)
                ))
            })?;
            let n = std::str::from_utf8(digits)
                .ok()
                .and_then(|d| usize::from_str_radix(d, 16).ok())
                .ok_or_else(|| proto(format!("bad chunk size {:?}", String::from_utf8_lossy(&size))))?;
            let mut data = vec![0; n + 2];
            self.reader.read_exact(&mut data).map_err(io_err)?;
            if &data[n..] != b"\r\n" {
                return Err(proto("chunk data not followed by CRLF"));
            }
            if n == 0 {
                self.ended = true;
                return Ok(None);
            }
            data.truncate(n);
            if let Some(ev) = parse_event(&data)? {
                return Ok(Some(ev));
            }
        }
    }
}

/// One chunk holds one event (or a keep-alive comment).
fn parse_event(chunk: &[u8]) -> Result<Option<Event>, CallError> {
    let text = std::str::from_utf8(chunk).map_err(|e| proto(format!("chunk not UTF-8: {e}")))?;
    let body = text
        .strip_suffix("\n\n")
        .ok_or_else(|| proto(format!("chunk does not end an event: {text:?}")))?;
    let mut id = None;
    let mut data = None;
    for line in body.split('\n') {
        if line.starts_with(':') {
            continue;
        }
        match line.split_once(": ") {
            Some(("id", v)) => id = Some(v.parse::<u64>().map_err(|_| proto(format!("bad id in {text:?}")))?),
            Some(("data", v)) => {
                if data.is_some() {
                    return Err(proto(format!("two data lines: {text:?}")));
                }
                data = Some(serde_json::from_str::<Value>(v).map_err(|e| proto(format!("data not JSON ({e})")))?);
            }
            _ => return Err(proto(format!("unknown SSE line {line:?}"))),
        }
    }
    match data {
        Some(data) => Ok(Some(Event { id, data })),
        None if id.is_none() => Ok(None),
        None => Err(proto(format!("an id without data: {text:?}"))),
    }
}

fn set_rcvbuf(s: &UnixStream, bytes: usize) {
    use std::os::fd::AsRawFd;
    let v = bytes as libc::c_int;
    #[allow(unsafe_code)]
    // SAFETY: setsockopt on an fd we own, with a pointer to a live c_int
    // and its size.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// `agentd_tasks_ended_total` from a /metrics text, by `state/cause`.
pub fn ended_totals(metrics: &str) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("agentd_tasks_ended_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix("=\"")?.strip_suffix('"'))
                .unwrap_or("")
                .to_string()
        };
        let state = label("state").to_ascii_uppercase();
        if let Ok(n) = value.trim().parse::<u64>() {
            out.insert(format!("{state}/{}", label("cause")), n);
        }
    }
    out
}
