//! The harness every integration test uses: start the real `agentd` binary
//! on a socket in a fresh temp dir, talk to it like a client, and look at
//! processes from outside (/proc). Nothing here knows agentd's internals.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const BIN: &str = env!("CARGO_BIN_EXE_agentd");

/// A temp directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let mut r = [0u8; 6];
        std::fs::File::open("/dev/urandom").unwrap().read_exact(&mut r).unwrap();
        let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
        let p = std::env::temp_dir().join(format!("agentd-{tag}-{hex}"));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running daemon. Dropping it SIGKILLs it (tests that check shutdown
/// call `stop` themselves).
pub struct Daemon {
    pub child: Option<Child>,
    /// Its pid once SIGKILLed: what it left in cgroups goes at drop.
    pub killed: Option<u32>,
    pub socket: PathBuf,
    pub dir: TempDir,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts `agentd serve --listen unix://DIR/a.sock ARGS…` and waits
    /// until the socket answers.
    pub fn start(args: &[&str]) -> Daemon {
        let dir = TempDir::new("it");
        let socket = dir.0.join("a.sock");
        Daemon::start_at(dir, socket, args)
    }

    pub fn start_at(dir: TempDir, socket: PathBuf, args: &[&str]) -> Daemon {
        Daemon::start_env(dir, socket, args, &[("RUST_LOG", "debug")])
    }

    /// `start_at` with these environment variables (RUST_LOG among them).
    pub fn start_env(dir: TempDir, socket: PathBuf, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        Daemon::start_binary(Path::new(BIN), dir, socket, args, env)
    }

    /// `start` of another build of agentd (the static one).
    pub fn start_with_binary(bin: &Path, args: &[&str]) -> Daemon {
        let dir = TempDir::new("it");
        let socket = dir.0.join("a.sock");
        Daemon::start_binary(bin, dir, socket, args, &[("RUST_LOG", "debug")])
    }

    fn start_binary(bin: &Path, dir: TempDir, socket: PathBuf, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let log = dir.0.join("agentd.log");
        let child = Command::new(bin)
            .arg("serve")
            .arg("--listen")
            .arg(format!("unix://{}", socket.display()))
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start agentd");
        let mut d = Daemon {
            child: Some(child),
            killed: None,
            socket,
            dir,
            log,
        };
        d.wait_ready();
        d
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("agentd exited early ({status}); log:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("agentd did not listen within 10 s; log:\n{}", self.log_text());
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn connect(&self) -> UnixStream {
        let s = UnixStream::connect(&self.socket).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }

    /// Waits until the daemon serves no connection, so a test of the
    /// connection cap starts from zero. The readiness probe holds a slot
    /// until its thread sees the close, and that thread may not have
    /// started (nor named itself) yet: the daemon's own count is asked,
    /// open connections = 1 (the scrape itself), and then the scrape's
    /// thread is waited out, its slot with it.
    pub fn settle(&self) {
        let only_the_scrape = || {
            let resp = self.get("/metrics");
            resp.status == 200 && resp.text().lines().any(|l| l == "agentd_connections_open 1")
        };
        assert!(
            wait_for(Duration::from_secs(5), only_the_scrape),
            "connections still open: {}",
            self.get("/metrics").text()
        );
        assert!(
            wait_for(Duration::from_secs(5), || conn_threads(self.pid()) == 0),
            "{} connection threads left",
            conn_threads(self.pid())
        );
    }

    /// One JSON-RPC call on a fresh connection, with `A2A-Version: 1.0`.
    pub fn rpc(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let resp = self.post(&body.to_string(), &[("A2A-Version", "1.0")]);
        assert_eq!(resp.status, 200, "{method}: {}", resp.text());
        resp.json()
    }

    /// `rpc`, expecting a result.
    pub fn ok(&self, method: &str, params: Value) -> Value {
        let v = self.rpc(method, params);
        assert!(v.get("error").is_none(), "{method} failed: {v}");
        v["result"].clone()
    }

    /// SendMessage of `text` with `returnImmediately`; returns the task id.
    pub fn send_async(&self, text: &str) -> String {
        let r = self.ok(
            "SendMessage",
            json!({"message": user_message(text), "configuration": {"returnImmediately": true}}),
        );
        r["task"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no task id: {r}"))
            .to_string()
    }

    /// `rpc`, expecting an error; returns the error object.
    pub fn err(&self, method: &str, params: Value) -> Value {
        let v = self.rpc(method, params);
        assert!(v.get("result").is_none(), "{method} should fail: {v}");
        v["error"].clone()
    }

    /// POST / with a JSON content type and extra headers.
    pub fn post(&self, body: &str, headers: &[(&str, &str)]) -> HttpResponse {
        let mut req = format!(
            "POST / HTTP/1.1\r\nHost: agentd\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
            body.len()
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(body);
        self.raw(req.as_bytes())
    }

    /// Sends raw bytes on a fresh connection and reads one response. A
    /// failed write is not the end: a refused connection (503) is answered
    /// and closed before its request is read, and the answer says more.
    pub fn raw(&self, bytes: &[u8]) -> HttpResponse {
        let mut s = self.connect();
        let _ = s.write_all(bytes);
        read_response(&mut BufReader::new(s)).expect("a response")
    }

    pub fn get(&self, path: &str) -> HttpResponse {
        self.raw(format!("GET {path} HTTP/1.1\r\nHost: agentd\r\nConnection: close\r\n\r\n").as_bytes())
    }

    /// SIGTERM and wait for exit (bounded); returns the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        signal(child.id() as i32, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("agentd did not stop within 20 s of SIGTERM; log:\n{}", self.log_text());
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            self.killed = Some(child.id());
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- agentd log ---\n{}", self.log_text());
        }
        self.kill9();
        if let Some(pid) = self.killed {
            remove_cgroups_of_dead_daemon(pid);
        }
    }
}

pub fn signal(pid: i32, sig: i32) {
    // A test helper: the harness may signal the processes it started.
    #[allow(unsafe_code)]
    // SAFETY: kill(2) takes integers only.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// One HTTP response as read off the wire.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// Reads one response (Content-Length, chunked, or until close).
pub fn read_response(r: &mut impl BufRead) -> std::io::Result<HttpResponse> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let find = |n: &str| {
        headers
            .iter()
            .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if status == 304 || status == 204 {
    } else if find("Transfer-Encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| std::io::Error::other(format!("bad chunk line {line:?}")))?;
            if size == 0 {
                line.clear();
                r.read_line(&mut line)?;
                break;
            }
            let mut chunk = vec![0; size + 2];
            r.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(len) = find("Content-Length") {
        let len: usize = len.parse().unwrap();
        body.resize(len, 0);
        r.read_exact(&mut body)?;
    } else {
        r.read_to_end(&mut body)?;
    }
    Ok(HttpResponse { status, headers, body })
}

/// The text of every text part of a task's artifacts, in order: what its
/// program wrote, as a client reads it back.
pub fn artifact_text(task: &Value) -> String {
    let mut out = String::new();
    for a in task["artifacts"].as_array().into_iter().flatten() {
        for p in a["parts"].as_array().into_iter().flatten() {
            out.push_str(p["text"].as_str().unwrap_or(""));
        }
    }
    out
}

/// A user message with one text part.
pub fn user_message(text: &str) -> Value {
    json!({"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": text}]})
}

pub fn new_id() -> String {
    let mut r = [0u8; 8];
    std::fs::File::open("/dev/urandom").unwrap().read_exact(&mut r).unwrap();
    r.iter().map(|b| format!("{b:02x}")).collect()
}

/// Threads of `pid` named `conn-…` (one per connection being served).
pub fn conn_threads(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("conn-")))
                .count()
        })
        .unwrap_or(0)
}

/// Polls `cond` every 10 ms until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat_field(&stat, 3).is_some_and(|s| s != "Z" && s != "X"),
        Err(_) => false,
    }
}

/// Field N (1-based, as in proc(5)) of a /proc/PID/stat line.
pub fn stat_field(stat: &str, n: usize) -> Option<String> {
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(n - 3).map(String::from)
}

/// Every live pid whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            let state = stat_field(&stat, 3);
            let pg = stat_field(&stat, 5).and_then(|s| s.parse::<i32>().ok());
            if pg == Some(pgid) && state.as_deref() != Some("Z") {
                out.push(pid);
            }
        }
    }
    out
}

/// Direct children of `pid` (from /proc/PID/task/*/children).
pub fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(c.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
    }
    out
}

/// The daemon's children that work on a task (process name `agentd-task`,
/// which a worker takes when its task arrives): its children minus the
/// pool's idle workers (`agentd-idle`, or not yet named).
pub fn task_workers(pid: i32) -> Vec<i32> {
    children(pid).into_iter().filter(|c| is_task_worker(*c)).collect()
}

/// The idle workers of the pool (`tasks.prespawn`): named `agentd-idle`.
pub fn idle_workers(pid: i32) -> Vec<i32> {
    children(pid)
        .into_iter()
        .filter(|c| comm(*c).as_deref() == Some("agentd-idle"))
        .collect()
}

/// The fork server that forks the workers (`agentd-fork`, a child of
/// agentd like them).
pub fn fork_servers(pid: i32) -> Vec<i32> {
    children(pid)
        .into_iter()
        .filter(|c| comm(*c).as_deref() == Some("agentd-fork"))
        .collect()
}

fn is_task_worker(pid: i32) -> bool {
    comm(pid).as_deref() == Some("agentd-task")
}

fn comm(pid: i32) -> Option<String> {
    Some(
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .ok()?
            .trim_end()
            .to_string(),
    )
}

/// All live descendants of `pid`.
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut stack = children(pid);
    while let Some(p) = stack.pop() {
        if alive(p) {
            out.push(p);
        }
        stack.extend(children(p));
    }
    out
}

/// Reads the text of a file the test wrote (e.g. a pid file), waiting for it.
pub fn read_when_ready(path: &Path, timeout: Duration) -> String {
    let mut text = String::new();
    assert!(
        wait_for(timeout, || {
            text = std::fs::read_to_string(path).unwrap_or_default();
            text.ends_with('\n')
        }),
        "{} never appeared",
        path.display()
    );
    text
}

// ---------------------------------------------------------------------------
// SSE client: strict chunk framing, read incrementally. Written from the
// RFCs (9112 §7.1 chunked coding, WHATWG SSE), not from agentd's parser.
// ---------------------------------------------------------------------------

/// One SSE event as read off the wire: its `id:` (agentd's per-task
/// sequence), its one `data:` line parsed as JSON, and the chunk's text.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub id: Option<u64>,
    pub data: Value,
    pub raw: String,
}

impl SseEvent {
    /// The JSON-RPC `result` (a StreamResponse).
    pub fn result(&self) -> &Value {
        &self.data["result"]
    }

    /// Which StreamResponse member the result holds: `task`, `message`,
    /// `statusUpdate` or `artifactUpdate` (`error` for an error response).
    pub fn kind(&self) -> &str {
        if self.data.get("error").is_some() {
            return "error";
        }
        let keys: Vec<&str> = self
            .result()
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(keys.len(), 1, "a StreamResponse has exactly one member: {}", self.raw);
        keys[0]
    }

    /// The result's one member (the task, the update, the message).
    pub fn body(&self) -> &Value {
        &self.result()[self.kind()]
    }

    /// The task state a `task` or `statusUpdate` event carries.
    pub fn state(&self) -> Option<&str> {
        match self.kind() {
            "task" | "statusUpdate" => self.body()["status"]["state"].as_str(),
            _ => None,
        }
    }

    pub fn is_terminal_status(&self) -> bool {
        self.kind() == "statusUpdate"
            && matches!(
                self.state(),
                Some("TASK_STATE_COMPLETED" | "TASK_STATE_FAILED" | "TASK_STATE_CANCELED" | "TASK_STATE_REJECTED")
            )
    }
}

/// An open `text/event-stream` response.
pub struct SseStream {
    reader: BufReader<UnixStream>,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    keepalives: usize,
    ended: bool,
}

/// What a streaming call answered with: a stream, or (for errors found
/// before the stream starts) a plain JSON-RPC body.
pub enum StreamStart {
    Sse(SseStream),
    Json(Value),
}

impl StreamStart {
    pub fn sse(self) -> SseStream {
        match self {
            StreamStart::Sse(s) => s,
            StreamStart::Json(v) => panic!("expected an event stream, got plain JSON: {v}"),
        }
    }

    pub fn json(self) -> Value {
        match self {
            StreamStart::Json(v) => v,
            StreamStart::Sse(s) => panic!("expected plain JSON, got an event stream ({:?})", s.headers),
        }
    }
}

impl Daemon {
    /// Opens a streaming call (JSON-RPC id 1) and checks it is an SSE
    /// stream: 200, `text/event-stream`, chunked.
    pub fn stream(&self, method: &str, params: Value, extra_headers: &[(&str, &str)]) -> SseStream {
        self.stream_with_id(json!(1), method, params, extra_headers)
    }

    /// `stream` with a chosen JSON-RPC id.
    pub fn stream_with_id(&self, id: Value, method: &str, params: Value, extra_headers: &[(&str, &str)]) -> SseStream {
        match self.stream_or_json_with_id(id, method, params, extra_headers) {
            StreamStart::Sse(s) => s,
            StreamStart::Json(v) => panic!("{method}: expected an event stream, got plain JSON: {v}"),
        }
    }

    /// A streaming call that may be answered with plain JSON (errors
    /// before the stream starts).
    pub fn stream_or_json(&self, method: &str, params: Value, extra_headers: &[(&str, &str)]) -> StreamStart {
        self.stream_or_json_with_id(json!(1), method, params, extra_headers)
    }

    pub fn stream_or_json_with_id(
        &self,
        id: Value,
        method: &str,
        params: Value,
        extra_headers: &[(&str, &str)],
    ) -> StreamStart {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        let mut req = format!(
            "POST / HTTP/1.1\r\nHost: agentd\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\nA2A-Version: 1.0\r\nAccept: text/event-stream\r\n",
            body.len()
        );
        for (k, v) in extra_headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(&body);
        let mut s = self.connect();
        s.write_all(req.as_bytes()).unwrap();
        let mut reader = BufReader::new(s);
        let (status, headers) = read_head(&mut reader).unwrap_or_else(|e| panic!("{method}: no response head: {e}"));
        let find = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| v.clone())
        };
        let ct = find("Content-Type").unwrap_or_default();
        if !ct.to_ascii_lowercase().starts_with("text/event-stream") {
            let len: usize = find("Content-Length")
                .unwrap_or_else(|| panic!("{method}: a plain JSON answer without Content-Length: {headers:?}"))
                .parse()
                .unwrap();
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            assert_eq!(status, 200, "{method}: {}", String::from_utf8_lossy(&body));
            let v: Value = serde_json::from_slice(&body)
                .unwrap_or_else(|e| panic!("{method}: body is not JSON ({e}): {}", String::from_utf8_lossy(&body)));
            return StreamStart::Json(v);
        }
        assert_eq!(status, 200, "{method}: an event stream with status {status}");
        assert!(
            find("Transfer-Encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")),
            "{method}: an event stream must be chunked: {headers:?}"
        );
        assert!(
            find("Content-Length").is_none(),
            "{method}: chunked and Content-Length: {headers:?}"
        );
        StreamStart::Sse(SseStream {
            reader,
            status,
            headers,
            keepalives: 0,
            ended: false,
        })
    }
}

/// Reads a status line and headers (up to the blank line), strictly CRLF.
pub fn read_head(r: &mut impl BufRead) -> std::io::Result<(u16, Vec<(String, String)>)> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    assert!(line.ends_with("\r\n"), "status line not CRLF-terminated: {line:?}");
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        assert!(line.ends_with("\r\n"), "header line not CRLF-terminated: {line:?}");
        let l = &line[..line.len() - 2];
        if l.is_empty() {
            return Ok((status, headers));
        }
        let (k, v) = l.split_once(':').unwrap_or_else(|| panic!("bad header line {l:?}"));
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
}

impl SseStream {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `: keep-alive` comments seen so far.
    pub fn keepalives(&self) -> usize {
        self.keepalives
    }

    /// Whether the zero chunk has been read.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// How long a read may block before the test fails.
    pub fn set_timeout(&mut self, t: Duration) {
        self.reader.get_ref().set_read_timeout(Some(t)).unwrap();
    }

    /// The next event; `None` once the zero chunk (and the empty trailer)
    /// has been read. Keep-alive comment chunks are counted and skipped.
    /// Panics on any framing error.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            if self.ended {
                return None;
            }
            let chunk = self.next_chunk()?;
            let text = String::from_utf8(chunk).unwrap_or_else(|e| panic!("SSE chunk is not UTF-8: {e}"));
            if let Some(ev) = self.parse_chunk(&text) {
                return Some(ev);
            }
        }
    }

    /// Every remaining event up to the zero chunk.
    pub fn collect(&mut self) -> Vec<SseEvent> {
        let mut out = Vec::new();
        while let Some(e) = self.next_event() {
            out.push(e);
        }
        out
    }

    /// One chunk's data, or `None` after the zero chunk.
    fn next_chunk(&mut self) -> Option<Vec<u8>> {
        let mut size_line = Vec::new();
        match self.reader.read_until(b'\n', &mut size_line) {
            Ok(0) => panic!("connection closed before the zero chunk"),
            Ok(_) => {}
            Err(e) => panic!("reading a chunk size line: {e} (no event within the read timeout?)"),
        }
        assert!(
            size_line.ends_with(b"\r\n"),
            "chunk size line does not end in CRLF: {:?}",
            String::from_utf8_lossy(&size_line)
        );
        let digits = &size_line[..size_line.len() - 2];
        assert!(
            !digits.is_empty() && digits.len() <= 16 && digits.iter().all(u8::is_ascii_hexdigit),
            "chunk size line is not hex: {:?}",
            String::from_utf8_lossy(&size_line)
        );
        let size = usize::from_str_radix(std::str::from_utf8(digits).unwrap(), 16).unwrap();
        if size == 0 {
            // No trailers from agentd: the last-chunk is followed by CRLF.
            let mut end = [0u8; 2];
            self.reader
                .read_exact(&mut end)
                .unwrap_or_else(|e| panic!("reading the CRLF after the zero chunk: {e}"));
            assert_eq!(&end, b"\r\n", "zero chunk not followed by CRLF");
            self.ended = true;
            return None;
        }
        let mut data = vec![0u8; size + 2];
        self.reader
            .read_exact(&mut data)
            .unwrap_or_else(|e| panic!("reading a {size}-byte chunk: {e}"));
        assert_eq!(
            &data[size..],
            b"\r\n",
            "chunk data ({size} bytes) is not followed by CRLF: {:?}",
            String::from_utf8_lossy(&data)
        );
        data.truncate(size);
        Some(data)
    }

    /// One chunk holds exactly one event or comment block, ending in a
    /// blank line. Returns the event, or `None` for a comment-only chunk.
    fn parse_chunk(&mut self, text: &str) -> Option<SseEvent> {
        assert!(
            text.ends_with("\n\n"),
            "chunk does not end an event (an event split across chunks?): {text:?}"
        );
        let body = &text[..text.len() - 2];
        assert!(
            !body.contains("\n\n") && !body.contains('\r'),
            "one chunk must hold exactly one event, LF-delimited: {text:?}"
        );
        let mut id = None;
        let mut data: Option<&str> = None;
        let mut comments = 0;
        for line in body.split('\n') {
            if let Some(c) = line.strip_prefix(':') {
                if c.trim() == "keep-alive" {
                    comments += 1;
                }
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line, ""),
            };
            match field {
                "id" => {
                    assert!(id.is_none(), "two id fields in one event: {text:?}");
                    id = Some(
                        value
                            .parse::<u64>()
                            .unwrap_or_else(|_| panic!("SSE id is not a sequence number: {text:?}")),
                    );
                }
                "data" => {
                    assert!(data.is_none(), "JSON split over several data lines: {text:?}");
                    data = Some(value);
                }
                "event" | "retry" => {}
                other => panic!("unknown SSE field `{other}`: {text:?}"),
            }
        }
        self.keepalives += comments;
        let Some(data) = data else {
            assert!(id.is_none(), "an id without data: {text:?}");
            assert!(comments > 0, "an empty chunk block: {text:?}");
            return None;
        };
        let data: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {text:?}"));
        assert_eq!(data["jsonrpc"], "2.0", "not a JSON-RPC response: {text:?}");
        Some(SseEvent {
            id,
            data,
            raw: text.to_string(),
        })
    }
}

/// Threads and open fds of a process (from /proc).
pub fn thread_and_fd_counts(pid: i32) -> (usize, usize) {
    let count = |dir: String| std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
    (count(format!("/proc/{pid}/task")), count(format!("/proc/{pid}/fd")))
}

// ---------------------------------------------------------------------------
// Process-table helpers for the reliability suite (from /proc, nothing else).
// ---------------------------------------------------------------------------

/// One process as /proc/PID/stat shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    pub comm: String,
    /// R, S, D, Z, …
    pub state: String,
    pub ppid: i32,
    pub pgid: i32,
}

/// /proc/PID/stat of one process, if it exists.
pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let comm = stat.split_once('(')?.1.rsplit_once(')')?.0.to_string();
    Some(ProcStat {
        pid,
        comm,
        state: stat_field(&stat, 3)?,
        ppid: stat_field(&stat, 4)?.parse().ok()?,
        pgid: stat_field(&stat, 5)?.parse().ok()?,
    })
}

/// Every process (zombies included) whose parent is `ppid`, by scanning
/// /proc/*/stat: also finds what /proc/PID/task/*/children may miss.
pub fn processes_with_parent(ppid: i32) -> Vec<ProcStat> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Some(st) = proc_stat(pid) {
            if st.ppid == ppid {
                out.push(st);
            }
        }
    }
    out
}

/// Zombies (state Z) whose parent is `ppid`: children nobody reaped.
pub fn zombies_of(ppid: i32) -> Vec<ProcStat> {
    processes_with_parent(ppid)
        .into_iter()
        .filter(|p| p.state == "Z")
        .collect()
}

/// Raises this process's RLIMIT_NOFILE soft limit to at least `want` (up
/// to the hard limit; raising the hard limit too when allowed). Children
/// started afterwards inherit it. Returns the soft limit now in force.
pub fn raise_nofile_limit(want: u64) -> u64 {
    #[allow(unsafe_code)]
    // SAFETY: getrlimit/setrlimit with a valid, owned struct.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur >= want {
            return lim.rlim_cur;
        }
        if lim.rlim_max < want {
            let raised = libc::rlimit {
                rlim_cur: want,
                rlim_max: want,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return want;
            }
        }
        lim.rlim_cur = want.min(lim.rlim_max);
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        lim.rlim_cur
    }
}

/// Writes an executable shell script (`#!/bin/sh` + `body`) into `dir`.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    script_for(dir, name, "/bin/sh", body)
}

/// Writes an executable script (`#!interpreter` + `body`) into `dir`.
///
/// A short-lived `sh` writes it, from a pipe: were the file open for
/// writing in this (multithreaded) test process, a child another test
/// forked meanwhile would hold that descriptor until its exec, and
/// running the script then fails with ETXTBSY (seen once, "Text file
/// busy" starting a daemon through a script).
pub fn script_for(dir: &Path, name: &str, interpreter: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    let mut writer = Command::new("/bin/sh")
        .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
        .arg(&p)
        .stdin(Stdio::piped())
        .spawn()
        .expect("start sh to write a script");
    let mut stdin = writer.stdin.take().expect("sh's stdin");
    stdin
        .write_all(format!("#!{interpreter}\n{body}\n").as_bytes())
        .expect("write the script to sh");
    drop(stdin);
    let status = writer.wait().expect("wait for sh");
    assert!(status.success(), "sh could not write {}: {status}", p.display());
    p
}

/// Where cargo builds (CARGO_TARGET_DIR, else ./target): for tests that
/// install what they need (an SDK, a venv) once, beside the build.
pub fn target_dir() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    match std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from) {
        Some(d) if d.is_absolute() => d,
        Some(d) => manifest.join(d),
        None => manifest.join("target"),
    }
}

/// Runs a command to completion; `Err` carries its output.
pub fn run_to_completion(cmd: &mut Command) -> Result<(), String> {
    let what = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what}: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Runs a Python driver script (`python script args…`) with its output in
/// `out_path`, for at most `timeout`; prints the output (it is the test's
/// story) and returns how it ended (None: still running at the deadline,
/// killed) and what it printed.
pub fn run_python_driver(
    python: &std::path::Path,
    script: &std::path::Path,
    args: &[&std::ffi::OsStr],
    out_path: &std::path::Path,
    timeout: Duration,
) -> (Option<std::process::ExitStatus>, String) {
    let out = std::fs::File::create(out_path).unwrap();
    let mut child = Command::new(python)
        .arg(script)
        .args(args)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("start the python driver");
    let started = Instant::now();
    let status = wait_child(&mut child, timeout);
    let output = std::fs::read_to_string(out_path).unwrap_or_default();
    eprintln!(
        "--- {} ({:.1} s) ---\n{output}",
        script.display(),
        started.elapsed().as_secs_f64()
    );
    (status, output)
}

/// The text of a task's status message ("" without one).
pub fn status_text(task: &Value) -> &str {
    task["status"]["message"]["parts"][0]["text"].as_str().unwrap_or("")
}

/// Waits for `child` up to `timeout`; kills it past that. `None` = killed.
pub fn wait_child(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The machine-readable reason a task ended (`agentd.dev/terminal`).
pub fn terminal_cause(task: &Value) -> String {
    task["status"]["message"]["metadata"]["agentd.dev/terminal"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// A venv under `target/` with `requirement` installed once and reused,
/// usable when `python -c check` succeeds; returns its python.
pub fn venv_python(name: &str, requirement: &str, check: &str) -> Result<PathBuf, String> {
    let venv = target_dir().join(name);
    let python = venv.join("bin").join("python");
    let usable = |p: &Path| run_to_completion(Command::new(p).args(["-c", check])).is_ok();
    if python.exists() && usable(&python) {
        return Ok(python);
    }
    eprintln!("{name}: installing `{requirement}` into {} (once)", venv.display());
    run_to_completion(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&venv))?;
    run_to_completion(Command::new(&python).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        requirement,
    ]))?;
    if !usable(&python) {
        return Err(format!("{requirement} installed but `{check}` fails"));
    }
    Ok(python)
}

/// Whether this is a CI run: `CI` set to anything but empty, `0` or
/// `false` (any case). `CI=false` is how a shell says "not CI".
pub fn under_ci() -> bool {
    ci_value_means_ci(std::env::var_os("CI").as_deref())
}

/// What a value of `CI` means (None: unset).
pub fn ci_value_means_ci(value: Option<&std::ffi::OsStr>) -> bool {
    match value.map(|v| v.to_str()) {
        None => false,
        // Set, but not UTF-8: set.
        Some(None) => true,
        Some(Some(v)) => {
            let v = v.trim();
            !(v.is_empty() || v == "0" || v.eq_ignore_ascii_case("false"))
        }
    }
}

/// The one way a test skips for want of something from its environment
/// (root, cgroups, a tool, an SDK): under CI that is a failure, because CI
/// is where everything must run; elsewhere the test goes on to return
/// early, and says so loudly. `test` names the test, `why` what is missing
/// and which host has it.
///
/// The notice goes to a duplicate of file descriptor 2, past the test
/// harness's capture of `eprintln!` (which shows a passing test's output
/// never), so a skip is seen even when the test "passes".
pub fn skip_or_fail(test: &str, why: &str) {
    if under_ci() {
        panic!("{test} cannot run under CI: {why}");
    }
    let bar = "!".repeat(76);
    write_to_real_stderr(&format!(
        "\n{bar}\n!! SKIPPED {test}:\n!! {why}\n!! (Under CI, with CI=1, this is a failure.)\n{bar}\n"
    ));
}

/// Writes `text` to what file descriptor 2 is (a dup of it), bypassing
/// any capture the test harness puts on `std::io::stderr`.
pub fn write_to_real_stderr(text: &str) {
    use std::os::fd::FromRawFd;
    #[allow(unsafe_code)]
    // SAFETY: dup(2) takes an integer; a result >= 0 is a new descriptor
    // that nothing else owns, so the File below may own and close it.
    let fd = unsafe { libc::dup(2) };
    if fd < 0 {
        eprint!("{text}");
        return;
    }
    #[allow(unsafe_code)]
    // SAFETY: `fd` is a fresh descriptor owned by nothing else (above).
    let mut real = unsafe { std::fs::File::from_raw_fd(fd) };
    let _ = real.write_all(text.as_bytes());
}

/// True when this test runs as root; otherwise `skip_or_fail` (a failure
/// under CI) with what root is needed for, and false.
pub fn root_or_skip(test: &str, needs: &str) -> bool {
    #[allow(unsafe_code)]
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 {
        return true;
    }
    skip_or_fail(
        test,
        &format!("needs root (euid 0; this is euid {euid}) to {needs}: run it as root, as CI does"),
    );
    false
}

/// What a test does when what it needs from outside cannot be had:
/// `skip_or_fail`. Returns the value, or None to skip.
pub fn needed<T>(what: &str, test: &str, got: Result<T, String>) -> Option<T> {
    match got {
        Ok(v) => Some(v),
        Err(e) => {
            skip_or_fail(test, &format!("{what} could not be had: {e}"));
            None
        }
    }
}

/// The `isolation=` of agentd's ready line (`agentd.ready`), waited for.
pub fn isolation(d: &Daemon) -> String {
    let mut found = None;
    assert!(
        wait_for(Duration::from_secs(10), || {
            found = d
                .log_text()
                .lines()
                .filter(|l| l.contains("agentd.ready"))
                .find_map(|l| {
                    l.split_whitespace()
                        .find_map(|w| w.strip_prefix("isolation="))
                        .map(String::from)
                });
            found.is_some()
        }),
        "agentd logged no agentd.ready line with isolation= within 10 s:\n{}",
        d.log_text()
    );
    found.unwrap_or_default()
}

/// What a host needs for agentd to make task cgroups, for skip notices.
pub const CGROUP_HOST: &str = "a host where agentd may create cgroups: root with a writable cgroup v2 \
     hierarchy (pure v2 or hybrid), or a delegated cgroup v2 subtree";

/// Where the VM test keeps its tools and builds (`$AGENTD_VM_DIR`, or
/// `target/vm` in the repo).
pub fn vm_dir() -> PathBuf {
    std::env::var_os("AGENTD_VM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/vm"))
}

/// Whether rustup has the x86_64-unknown-linux-musl target.
pub fn musl_target_installed() -> bool {
    Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("x86_64-unknown-linux-musl"))
}

/// The static agentd (release, musl), built in a target dir of its own
/// (no lock fight with the `cargo test` that runs us) and shared by every
/// test that needs it, so it is built once.
pub fn static_agentd() -> PathBuf {
    let target = vm_dir().join("build");
    let out = Command::new(env!("CARGO"))
        .args(["build", "--release", "-j2", "--target", "x86_64-unknown-linux-musl"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo build runs");
    assert!(
        out.status.success(),
        "static build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = target.join("x86_64-unknown-linux-musl/release/agentd");
    let file = Command::new("file").arg(&bin).output().expect("file(1) runs");
    let kind = String::from_utf8_lossy(&file.stdout);
    assert!(kind.contains("static"), "not a static binary: {kind}");
    bin
}

/// Bytes the daemon has sent on its SOCK_SEQPACKET sockets (the fork
/// server's request socket) that the other end has not read: each socket
/// of the daemon is copied with pidfd_getfd(2), its type checked, its
/// SIOCOUTQ read, and the copy closed at once.
pub fn unread_requests_bytes(daemon: i32) -> usize {
    let mut total = 0;
    #[allow(unsafe_code)]
    // SAFETY: pidfd_open, pidfd_getfd, getsockopt and ioctl with fds we
    // own (wrapped to close) and live buffers of the sizes passed.
    unsafe {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let pidfd = libc::syscall(libc::SYS_pidfd_open, daemon, 0) as i32;
        if pidfd < 0 {
            return 0;
        }
        let pidfd = OwnedFd::from_raw_fd(pidfd);
        for entry in std::fs::read_dir(format!("/proc/{daemon}/fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let is_socket = std::fs::read_link(entry.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"));
            let Ok(n) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if !is_socket {
                continue;
            }
            let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), n, 0) as i32;
            if fd < 0 {
                continue;
            }
            let fd = OwnedFd::from_raw_fd(fd);
            let mut kind: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            let r = libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TYPE,
                (&mut kind as *mut libc::c_int).cast(),
                &mut len,
            );
            if r != 0 || kind != libc::SOCK_SEQPACKET {
                continue;
            }
            let mut out: libc::c_int = 0;
            if libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ, &mut out) == 0 {
                total += out.max(0) as usize;
            }
        }
    }
    total
}

/// The lowest fd number `pid` has free: as its soft RLIMIT_NOFILE it can
/// open nothing more (the limit bounds fd numbers, not how many are open).
pub fn lowest_free_fd(pid: i32) -> u64 {
    let used: std::collections::HashSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect();
    (0..).find(|n| !used.contains(n)).unwrap_or(0)
}

/// A process's soft RLIMIT_NOFILE squeezed to `soft` (its hard limit kept)
/// until dropped, so a failing test leaves the daemon whole.
pub struct NofileSqueeze {
    pid: i32,
    old: libc::rlimit,
}

impl NofileSqueeze {
    pub fn new(pid: i32, soft: u64) -> NofileSqueeze {
        let mut old = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        #[allow(unsafe_code)]
        // SAFETY: prlimit(2) on a process we started, with owned structs.
        let r = unsafe {
            libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old);
            let new = libc::rlimit {
                rlim_cur: soft,
                rlim_max: old.rlim_max,
            };
            libc::prlimit(pid, libc::RLIMIT_NOFILE, &new, std::ptr::null_mut())
        };
        assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
        NofileSqueeze { pid, old }
    }
}

impl Drop for NofileSqueeze {
    fn drop(&mut self) {
        #[allow(unsafe_code)]
        // SAFETY: prlimit(2) setting a limit from an owned struct.
        unsafe {
            libc::prlimit(self.pid, libc::RLIMIT_NOFILE, &self.old, std::ptr::null_mut());
        }
    }
}

/// Our own cgroup in each hierarchy named (`""` for v2, else a v1
/// controller), joined to its mount: where agentd, our child, makes its own.
pub fn own_cgroup(controller: &str) -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, c, p) = (f.next()?, f.next()?, f.next()?);
        (c == controller).then(|| p.trim_start_matches('/').to_string())
    })?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut post = post.split_whitespace();
        let fstype = post.next()?;
        let options = post.nth(1).unwrap_or("");
        let ours = if controller.is_empty() {
            fstype == "cgroup2"
        } else {
            fstype == "cgroup" && options.split(',').any(|o| o == controller)
        };
        ours.then(|| PathBuf::from(pre.split_whitespace().nth(4).unwrap()))
    })?;
    Some(mount.join(path))
}

/// A cgroup v2 directory of this test's own (`tasks.cgroup=PATH`), beside
/// the test's cgroup: no other agentd on the machine cleans up in it, so
/// what is left there after a kill -9 stays until the test looks. Removed
/// on drop.
pub struct PrivateCgroup(pub PathBuf);

impl PrivateCgroup {
    pub fn new(prefix: &str) -> Result<PrivateCgroup, String> {
        let dir = own_cgroup("")
            .ok_or("no cgroup v2 here")?
            .join(format!("{prefix}-{}", new_id()));
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(PrivateCgroup(dir))
    }
}

impl Drop for PrivateCgroup {
    fn drop(&mut self) {
        empty_and_remove_cgroup_tree(&self.0);
    }
}

/// Kills what is left in the cgroup tree at `dir` (a test that failed
/// half-way), then removes it. A cgroup whose last process is still
/// exiting refuses rmdir (EBUSY) for a moment: retried until a deadline, so
/// one slow exit does not leave the directory on the machine.
fn empty_and_remove_cgroup_tree(dir: &Path) {
    fn rmdir_tree(dir: &Path) -> bool {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten().filter(|e| e.path().is_dir()) {
                rmdir_tree(&e.path());
            }
        }
        std::fs::remove_dir(dir).is_ok() || !dir.exists()
    }
    // cgroup.kill is v2's; a v1 tree is only removed (what was in it was
    // the dead daemon's workers' to kill, and they do).
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !rmdir_tree(dir) {
        if Instant::now() >= deadline {
            eprintln!("left behind: {} (rmdir kept failing)", dir.display());
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A SIGKILLed daemon leaves its `agentd-PID` cgroups (the next daemon to
/// start removes them, but after the last test there is none): the one
/// beside each of this test's own cgroups is emptied and removed when its
/// handle drops. Tests that check a restart's clean-up restart while the
/// dead daemon's handle is still held, so this finds nothing of theirs.
fn remove_cgroups_of_dead_daemon(pid: u32) {
    for controller in ["", "pids", "memory", "freezer"] {
        let Some(own) = own_cgroup(controller) else { continue };
        let parent = own.join(format!("agentd-{pid}"));
        if parent.is_dir() {
            empty_and_remove_cgroup_tree(&parent);
        }
    }
}

/// Cgroup mount points (v1 and v2) from /proc/self/mountinfo.
pub fn cgroup_mounts() -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mountinfo
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fstype = post.split_whitespace().next()?;
            let mount_point = pre.split_whitespace().nth(4)?;
            matches!(fstype, "cgroup" | "cgroup2").then(|| PathBuf::from(mount_point))
        })
        .collect()
}

/// The `agentd-PID` directories of one daemon, found up to four levels
/// below each cgroup mount.
pub fn daemon_cgroups(daemon: i32) -> Vec<PathBuf> {
    fn walk(dir: &Path, name: &str, depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name().to_string_lossy() == name {
                out.push(e.path());
            } else if depth > 0 {
                walk(&e.path(), name, depth - 1, out);
            }
        }
    }
    let name = format!("agentd-{daemon}");
    let mut out = Vec::new();
    for m in cgroup_mounts() {
        walk(&m, &name, 4, &mut out);
    }
    out
}
