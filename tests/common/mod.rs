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
        let log = dir.0.join("agentd.log");
        let child = Command::new(BIN)
            .arg("serve")
            .arg("--listen")
            .arg(format!("unix://{}", socket.display()))
            .args(args)
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start agentd");
        let mut d = Daemon {
            child: Some(child),
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

    /// Sends raw bytes on a fresh connection and reads one response.
    pub fn raw(&self, bytes: &[u8]) -> HttpResponse {
        let mut s = self.connect();
        s.write_all(bytes).unwrap();
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
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- agentd log ---\n{}", self.log_text());
        }
        self.kill9();
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

/// A user message with one text part.
pub fn user_message(text: &str) -> Value {
    json!({"messageId": new_id(), "role": "ROLE_USER", "parts": [{"text": text}]})
}

pub fn new_id() -> String {
    let mut r = [0u8; 8];
    std::fs::File::open("/dev/urandom").unwrap().read_exact(&mut r).unwrap();
    r.iter().map(|b| format!("{b:02x}")).collect()
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
fn stat_field(stat: &str, n: usize) -> Option<String> {
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
