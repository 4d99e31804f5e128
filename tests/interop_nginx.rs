//! nginx in front of agentd: `examples/nginx.conf`, rendered with a free
//! loopback port and the test's socket, relays A2A's JSON-RPC binding from
//! TCP to the unix socket. Over plain TCP this test reads the card (the
//! socket's own interface first, the advertised JSONRPC one second), sends a
//! blocking message, watches a stream arrive event by event (not buffered to
//! the end), resumes a subscription with `Last-Event-ID`, and cancels a task.
//!
//! nginx is not installed by the test: `.ci/run` installs it. Without it the
//! test fails under CI (see `common::skip_or_fail`) and otherwise skips
//! loudly.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{read_head, read_response, user_message, Daemon, HttpResponse, TempDir};
use serde_json::{json, Value};

const UNIX_BINDING: &str = "https://agentd.dev/a2a/binding/jsonrpc-unix";
const ANNOTATIONS: &str = "https://agentd.dev/a2a/ext/task-annotations";

/// The agent behind nginx: `sleep…` prints `started` and sleeps 30 s (to be
/// cancelled); anything else prints a line, sleeps 1 s, prints another.
const AGENT: &str = "sh -c 'read -r line; case \"$line\" in sleep*) echo started; exec sleep 30;; esac; \
                     echo \"first $line\"; sleep 1; echo \"second $line\"'";

fn find_nginx() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"].map(PathBuf::from))
        .map(|d| d.join("nginx"))
        .find(|p| p.is_file())
}

fn euid_is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0")
}

/// A loopback port nobody listens on (bound, then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `examples/nginx.conf` with the test's port and socket. Each edit must
/// find its text, so the test notices when the example changes shape.
fn render(port: u16, socket: &Path) -> String {
    let example = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/nginx.conf")).unwrap();
    let mut conf = example.clone();
    for (from, to) in [
        ("listen 127.0.0.1:8080;", format!("listen 127.0.0.1:{port};")),
        (
            "proxy_pass http://unix:/run/agentd/agentd.sock:/;",
            format!("proxy_pass http://unix:{}:/;", socket.display()),
        ),
        // The workers dial the socket, so they must pass agentd's uid gate:
        // run them as this test's user (as root) or leave them as it is.
        (
            "\nuser agentd;",
            if euid_is_root() {
                "\nuser root;".into()
            } else {
                "\n".into()
            },
        ),
    ] {
        assert_eq!(
            conf.matches(from).count(),
            1,
            "examples/nginx.conf should contain `{from}` once"
        );
        conf = conf.replace(from, &to);
    }
    for line in conf.lines() {
        let l = line.trim_start();
        if l.starts_with('#') {
            continue;
        }
        assert!(
            !(l.starts_with("pid ") || l.starts_with("daemon ") || l.contains(" /var/") || l.contains(" /etc/")),
            "examples/nginx.conf should use prefix-relative paths and no pid/daemon: {line}"
        );
    }
    conf
}

/// A running nginx (master with `daemon off`). Dropping it stops the master
/// and its workers, also when the test panics.
struct Nginx {
    child: Option<Child>,
    dir: TempDir,
    port: u16,
}

impl Nginx {
    /// Starts nginx on a free port relaying to `socket`; retries with another
    /// port if the one picked was taken in between.
    fn start(bin: &Path, socket: &Path) -> Nginx {
        let mut last_error = String::new();
        for _ in 0..3 {
            let port = free_port();
            let dir = TempDir::new("nginx");
            let conf = dir.0.join("nginx.conf");
            std::fs::write(&conf, render(port, socket)).unwrap();
            let out = std::fs::File::create(dir.0.join("nginx.out")).unwrap();
            let child = Command::new(bin)
                .arg("-p")
                .arg(&dir.0)
                .arg("-c")
                .arg(&conf)
                .arg("-e")
                .arg(dir.0.join("error.log"))
                .arg("-g")
                .arg(format!("daemon off; pid {};", dir.0.join("nginx.pid").display()))
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .expect("start nginx");
            let mut n = Nginx {
                child: Some(child),
                dir,
                port,
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return n;
                }
                if let Some(status) = n.child.as_mut().unwrap().try_wait().unwrap() {
                    n.child = None;
                    last_error = format!("nginx exited ({status}):\n{}", n.logs());
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if n.child.is_some() {
                panic!("nginx did not listen on 127.0.0.1:{port} within 10 s:\n{}", n.logs());
            }
        }
        panic!("nginx would not start: {last_error}");
    }

    fn logs(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.0.join(f)).unwrap_or_default();
        format!(
            "--- nginx stderr ---\n{}--- error.log ---\n{}--- access.log ---\n{}",
            read("nginx.out"),
            read("error.log"),
            read("access.log")
        )
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        let Some(mut child) = self.child.take() else { return };
        let master = child.id() as i32;
        let workers = common::descendants(master);
        // SIGTERM is nginx's fast shutdown: the master stops its workers.
        common::signal(master, libc::SIGTERM);
        let stopped = common::wait_for(Duration::from_secs(5), || child.try_wait().ok().flatten().is_some());
        if !stopped {
            let _ = child.kill();
            let _ = child.wait();
        }
        for w in workers {
            if common::alive(w) {
                common::signal(w, libc::SIGKILL);
            }
        }
    }
}

/// One request on a fresh TCP connection to nginx.
fn request(port: u16, head: &str, body: &str) -> HttpResponse {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(format!("{head}Host: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n{body}").as_bytes())
        .unwrap();
    read_response(&mut BufReader::new(s)).expect("a response through nginx")
}

fn post_head(body: &str, headers: &[(&str, &str)]) -> String {
    let mut head = format!(
        "POST / HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nA2A-Version: 1.0\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head
}

/// A JSON-RPC call through nginx; returns the response and its `result`.
fn rpc(port: u16, method: &str, params: Value, headers: &[(&str, &str)]) -> (HttpResponse, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let resp = request(port, &post_head(&body, headers), &body);
    assert_eq!(resp.status, 200, "{method} through nginx: {}", resp.text());
    let v = resp.json();
    assert!(v.get("error").is_none(), "{method} through nginx failed: {v}");
    let result = v["result"].clone();
    (resp, result)
}

/// An SSE response read off TCP. nginx re-chunks what it relays, so events
/// are parsed from the de-chunked byte stream, whatever the chunk borders.
struct Sse {
    reader: BufReader<TcpStream>,
    headers: Vec<(String, String)>,
    pending: Vec<u8>,
    ended: bool,
}

/// One event: its `id:`, its JSON data, and when it arrived.
struct Event {
    id: Option<u64>,
    data: Value,
    at: Instant,
}

impl Event {
    fn kind(&self) -> &str {
        if self.data.get("error").is_some() {
            return "error";
        }
        let result = self.data["result"].as_object().expect("a result object");
        assert_eq!(result.len(), 1, "one StreamResponse member: {}", self.data);
        result.keys().next().unwrap()
    }

    fn body(&self) -> &Value {
        &self.data["result"][self.kind()]
    }

    fn state(&self) -> Option<&str> {
        self.body()["status"]["state"].as_str()
    }

    fn artifact_text(&self) -> String {
        self.body()["artifact"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["text"].as_str())
            .collect()
    }
}

fn stream(port: u16, method: &str, params: Value, headers: &[(&str, &str)]) -> Sse {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string();
    let mut head = post_head(&body, headers);
    head.push_str(&format!(
        "Accept: text/event-stream\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    ));
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let mut reader = BufReader::new(s);
    let (status, headers) = read_head(&mut reader).expect("a response head through nginx");
    let sse = Sse {
        reader,
        headers,
        pending: Vec::new(),
        ended: false,
    };
    assert_eq!(status, 200, "{method}: {:?}", sse.headers);
    let ct = sse.header("Content-Type").unwrap_or_default();
    assert!(
        ct.starts_with("text/event-stream"),
        "{method}: not an event stream: {:?}",
        sse.headers
    );
    assert_eq!(sse.header("Transfer-Encoding"), Some("chunked"), "{:?}", sse.headers);
    sse
}

impl Sse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The next event, or `None` once the zero chunk has been read.
    fn next_event(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.pending.drain(..end + 2).collect();
                let text = String::from_utf8(block).expect("UTF-8 event");
                let mut id = None;
                let mut data = Vec::new();
                for line in text.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().parse().expect("a numeric SSE id"));
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
                    }
                }
                if data.is_empty() {
                    continue; // a comment (keep-alive)
                }
                let data: Value = serde_json::from_str(&data.join("\n")).expect("JSON event data");
                assert_eq!(data["id"], 7, "the request's id on every event: {data}");
                return Some(Event {
                    id,
                    data,
                    at: Instant::now(),
                });
            }
            if self.ended {
                assert!(
                    self.pending.is_empty(),
                    "bytes after the last event: {:?}",
                    self.pending
                );
                return None;
            }
            let mut line = String::new();
            self.reader.read_line(&mut line).expect("a chunk size line");
            let size = usize::from_str_radix(line.trim_end().split(';').next().unwrap(), 16)
                .unwrap_or_else(|_| panic!("bad chunk size line {line:?}"));
            let mut data = vec![0; size + 2];
            self.reader.read_exact(&mut data).expect("chunk data");
            assert_eq!(&data[size..], b"\r\n", "chunk not followed by CRLF");
            data.truncate(size);
            self.pending.extend_from_slice(&data);
            if size == 0 {
                self.ended = true;
            }
        }
    }

    fn collect(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.next_event()).collect()
    }
}

fn kinds(events: &[Event]) -> String {
    events
        .iter()
        .map(|e| match e.state() {
            Some(s) => format!("{}({s})", e.kind()),
            None => e.kind().to_string(),
        })
        .collect::<Vec<_>>()
        .join(" → ")
}

#[test]
fn nginx_fronts_the_socket() {
    let Some(bin) = find_nginx() else {
        return common::skip_or_fail(
            "nginx_fronts_the_socket",
            "nginx is not installed (apt-get install nginx; .ci/run installs it)",
        );
    };
    let started = Instant::now();
    let dir = TempDir::new("it");
    let socket = dir.0.join("a.sock");
    let nginx = Nginx::start(&bin, &socket);
    let port = nginx.port;
    let advertised = format!("http://127.0.0.1:{port}/");
    let d = Daemon::start_at(
        dir,
        socket.clone(),
        &["--exec", AGENT, "--set", &format!("a2a.advertise=JSONRPC {advertised}")],
    );

    // 1. The card, through nginx.
    let resp = request(port, "GET /.well-known/agent-card.json HTTP/1.1\r\n", "");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(
        resp.header("Server").is_some_and(|s| s.starts_with("nginx")),
        "{:?}",
        resp.headers
    );
    assert!(
        resp.header("ETag").is_some(),
        "the card's caching headers pass: {:?}",
        resp.headers
    );
    let card = resp.json();
    let ifaces = card["supportedInterfaces"].as_array().expect("supportedInterfaces");
    assert_eq!(ifaces.len(), 2, "{card}");
    assert_eq!(ifaces[0]["protocolBinding"], UNIX_BINDING, "{card}");
    assert_eq!(ifaces[0]["url"], format!("unix://{}", socket.display()), "{card}");
    assert_eq!(ifaces[1]["protocolBinding"], "JSONRPC", "{card}");
    assert_eq!(ifaces[1]["url"], advertised, "{card}");
    assert_eq!(ifaces[1]["protocolVersion"], "1.0", "{card}");

    // 2. A blocking SendMessage, with an extension activated by header and
    //    echoed back through nginx.
    let (resp, r) = rpc(
        port,
        "SendMessage",
        json!({"message": user_message("hello")}),
        &[("A2A-Extensions", ANNOTATIONS)],
    );
    assert_eq!(resp.header("A2A-Extensions"), Some(ANNOTATIONS), "{:?}", resp.headers);
    let task = &r["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    let text: String = task["artifacts"][0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(text, "first hello\nsecond hello\n", "{r}");

    // 3. SendStreamingMessage: the first artifact event comes through while
    //    the program still sleeps, not with the rest at the end.
    let t0 = Instant::now();
    let mut s = stream(
        port,
        "SendStreamingMessage",
        json!({"message": user_message("stream")}),
        &[],
    );
    let events = s.collect();
    assert_eq!(events[0].kind(), "task", "{}", kinds(&events));
    let ids: Vec<Option<u64>> = events.iter().map(|e| e.id).collect();
    assert!(
        ids.windows(2).all(|w| w[0].is_some() && w[0] < w[1]),
        "SSE ids increase: {ids:?}"
    );
    let first = events
        .iter()
        .find(|e| e.kind() == "artifactUpdate")
        .unwrap_or_else(|| panic!("no artifact event: {}", kinds(&events)));
    let last = events.last().unwrap();
    assert_eq!(last.kind(), "statusUpdate", "{}", kinds(&events));
    assert_eq!(last.state(), Some("TASK_STATE_COMPLETED"), "{}", kinds(&events));
    let streamed: String = events.iter().map(Event::artifact_text).collect();
    assert_eq!(streamed, "first stream\nsecond stream\n", "{}", kinds(&events));
    let gap = last.at - first.at;
    assert!(
        gap >= Duration::from_millis(500),
        "the first artifact event arrived only {gap:?} before the end: nginx buffered the stream ({})",
        kinds(&events)
    );
    eprintln!(
        "stream through nginx: {} — first artifact after {:?}, end after {:?}",
        kinds(&events),
        first.at - t0,
        last.at - t0
    );

    // 4. A task to cancel; a subscription resumed with Last-Event-ID: 0
    //    replays from event 1 instead of opening with a snapshot, which shows
    //    the header reached agentd.
    let (_, r) = rpc(
        port,
        "SendMessage",
        json!({"message": user_message("sleep"), "configuration": {"returnImmediately": true}}),
        &[],
    );
    let id = r["task"]["id"].as_str().expect("a task id").to_string();
    let mut sub = stream(port, "SubscribeToTask", json!({"id": id}), &[("Last-Event-ID", "0")]);
    let replayed = sub.next_event().expect("a replayed event");
    assert_eq!(
        replayed.id,
        Some(1),
        "replay starts after Last-Event-ID: {}",
        replayed.data
    );
    assert_ne!(replayed.kind(), "task", "a replay has no snapshot: {}", replayed.data);

    // 5. CancelTask through nginx → CANCELED, and the subscription ends so.
    let (_, r) = rpc(port, "CancelTask", json!({"id": id}), &[]);
    let mut state = r["status"]["state"].as_str().unwrap_or_default().to_string();
    let settled = common::wait_for(Duration::from_secs(20), || {
        if state != "TASK_STATE_CANCELED" {
            state = rpc(port, "GetTask", json!({"id": id}), &[]).1["status"]["state"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        }
        state == "TASK_STATE_CANCELED"
    });
    assert!(settled, "after CancelTask the task is {state}");
    let mut rest = vec![replayed];
    rest.extend(sub.collect());
    let end = rest.last().unwrap();
    assert_eq!(end.kind(), "statusUpdate", "{}", kinds(&rest));
    assert_eq!(end.state(), Some("TASK_STATE_CANCELED"), "{}", kinds(&rest));

    let errors: Vec<String> = std::fs::read_to_string(nginx.dir.0.join("error.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("[error]") || l.contains("[crit]") || l.contains("[alert]") || l.contains("[emerg]"))
        .map(String::from)
        .collect();
    assert!(errors.is_empty(), "nginx logged errors:\n{}", errors.join("\n"));
    eprintln!("interop_nginx: all checks passed in {:?}", started.elapsed());
    drop(d);
    drop(nginx);
}
