//! The edge, tried as an attacker and as odd-but-legal clients would:
//! JSON-RPC ids and nesting, HTTP/1.x request forms and versions, the card's
//! validators, abandoned blocking calls, the fd limit, and the socket's
//! directory.

mod common;

use std::io::{BufReader, Read, Write};
use std::time::{Duration, Instant};

use common::{read_response, user_message, Daemon};
use serde_json::{json, Value};

/// POSTs `body` raw (no re-serialization on our side) and returns the body text.
fn post_raw(d: &Daemon, body: &str) -> String {
    let resp = d.post(body, &[("A2A-Version", "1.0")]);
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.text()
}

#[test]
fn a_hundred_digit_id_comes_back_byte_for_byte() {
    let d = Daemon::start(&[]);
    let id = "1234567890".repeat(10);
    let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"GetTask","params":{{"id":"nope"}}}}"#);
    let text = post_raw(&d, &body);
    assert!(
        text.contains(&format!(r#""id":{id},"#)),
        "id not echoed exactly: {text}"
    );
    let thirty = "123456789012345678901234567890";
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{thirty},"method":"SendMessage","params":{{"message":{}}}}}"#,
        user_message("hi")
    );
    let text = post_raw(&d, &body);
    assert!(text.contains(&format!(r#""id":{thirty},"#)), "{text}");
    assert!(text.contains("TASK_STATE_COMPLETED"), "{text}");
    // An error found before the id is known still answers with null.
    let text = post_raw(&d, r#"{"jsonrpc":"2.0","id":1"#);
    assert!(text.contains(r#""id":null"#) && text.contains("-32700"), "{text}");
}

/// `{"a":{"a":…{}…}}`, `levels` objects deep.
fn nested(levels: usize) -> String {
    format!("{}{{}}{}", r#"{"a":"#.repeat(levels - 1), "}".repeat(levels - 1))
}

/// A SendMessage whose message.metadata makes the whole body `depth` deep.
fn send_at_depth(depth: usize) -> String {
    // envelope → params → message → metadata: metadata is the 4th level.
    let mut message = user_message("deep");
    message["metadata"] = json!({});
    let message = message
        .to_string()
        .replace(r#""metadata":{}"#, &format!(r#""metadata":{}"#, nested(depth - 3)));
    format!(r#"{{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":{{"message":{message}}}}}"#)
}

#[test]
fn the_deepest_accepted_nesting_is_served_and_one_more_is_a_clean_parse_error() {
    // The bound agentd documents (limits::JSON_DEPTH_MAX).
    const MAX: usize = 64;
    let d = Daemon::start(&[]);
    let text = post_raw(&d, &send_at_depth(MAX));
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{text}");
    let mut md = &v["result"]["task"]["history"][0]["metadata"];
    for _ in 0..MAX - 4 {
        md = &md["a"];
    }
    assert_eq!(md, &json!({}), "the metadata came back whole: {text}");

    let v: Value = serde_json::from_str(&post_raw(&d, &send_at_depth(MAX + 1))).unwrap();
    assert_eq!(v["error"]["code"], -32700, "{v}");
    assert_eq!(v["id"], Value::Null, "{v}");
    // What used to overflow a debug build's connection stack (~122 levels)
    // and serde_json's own limit: clean errors, and the daemon lives on.
    for depth in [122, 127, 128, 129, 5000] {
        let v: Value = serde_json::from_str(&post_raw(&d, &send_at_depth(depth))).unwrap();
        assert_eq!(v["error"]["code"], -32700, "{depth}: {v}");
    }
    let v = d.ok("SendMessage", json!({"message": user_message("still here")}));
    assert_eq!(v["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
}

/// Writes a POST of `body` on a fresh connection and leaves it open.
fn send_and_hold(d: &Daemon, method: &str, params: Value) -> std::os::unix::net::UnixStream {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let mut s = d.connect();
    let req = format!(
        "POST / HTTP/1.1\r\nHost: a\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    s
}

/// How many `sleep` programs run below `pid`.
fn sleepers(pid: i32) -> usize {
    common::descendants(pid)
        .into_iter()
        .filter(|p| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0")))
        .count()
}

/// Threads of `pid` named `conn-…` (one per connection).
fn conn_threads(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("conn-")))
                .count()
        })
        .unwrap_or(0)
}

/// The status a new connection gets for GET `path`; `None` when the
/// connection failed (a refused peer may see its write fail).
fn try_get(d: &Daemon, path: &str) -> Option<u16> {
    let mut s = std::os::unix::net::UnixStream::connect(&d.socket).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").as_bytes())
        .ok()?;
    read_response(&mut BufReader::new(s)).ok().map(|r| r.status)
}

/// Polls until a new connection is served; how long that took.
fn time_until_served(d: &Daemon, timeout: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    common::wait_for(timeout, || try_get(d, "/.well-known/agent-card.json") == Some(200)).then(|| t0.elapsed())
}

#[test]
fn clients_that_give_up_on_blocking_calls_free_their_slots_at_once_and_the_tasks_go_on() {
    let d = Daemon::start(&["--exec", "sleep 30", "--set", "a2a.max_connections=3"]);
    let held: Vec<_> = (0..3)
        .map(|_| send_and_hold(&d, "SendMessage", json!({"message": user_message("wait")})))
        .collect();
    // The cap is full: a fourth client is turned away.
    assert!(common::wait_for(Duration::from_secs(5), || try_get(
        &d,
        "/.well-known/agent-card.json"
    ) == Some(503)));
    // Every call is waiting on its task, not on its request.
    assert!(
        common::wait_for(Duration::from_secs(10), || sleepers(d.pid()) == 3),
        "three tasks running; log:\n{}",
        d.log_text()
    );
    drop(held);
    let took = time_until_served(&d, Duration::from_secs(5));
    let took = took.unwrap_or_else(|| panic!("abandoned blocking calls still hold the cap; log:\n{}", d.log_text()));
    eprintln!("slots free again {took:?} after the clients hung up");
    let tasks = d.ok("ListTasks", json!({}));
    let tasks = tasks["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 3, "{tasks:?}");
    for t in tasks {
        assert_eq!(t["status"]["state"], "TASK_STATE_WORKING", "the task goes on: {t}");
    }
    // The connections' threads are gone too.
    assert!(
        common::wait_for(Duration::from_secs(5), || conn_threads(d.pid()) == 0),
        "{} connection threads left",
        conn_threads(d.pid())
    );
}

#[test]
fn abandoned_streams_free_their_slots_too() {
    let d = Daemon::start(&[
        "--exec",
        "sleep 30",
        "--set",
        "a2a.max_connections=3",
        "--set",
        "http.sse_keepalive_ms=200",
    ]);
    let mut held: Vec<_> = (0..3)
        .map(|_| send_and_hold(&d, "SendStreamingMessage", json!({"message": user_message("wait")})))
        .collect();
    for s in &mut held {
        let mut first = [0u8; 12];
        s.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"HTTP/1.1 200");
    }
    assert_eq!(try_get(&d, "/.well-known/agent-card.json"), Some(503));
    drop(held);
    let took = time_until_served(&d, Duration::from_secs(5));
    assert!(
        took.is_some(),
        "abandoned streams still hold the cap; log:\n{}",
        d.log_text()
    );
}

#[test]
fn a_client_that_only_half_closes_still_gets_its_blocking_answer() {
    // Shutting down the writing side after the request is legal HTTP
    // (nc -N, socat): the client still reads. Only a full hangup abandons.
    let d = Daemon::start(&["--exec", "sh -c 'sleep 0.6; echo done'"]);
    let s = send_and_hold(&d, "SendMessage", json!({"message": user_message("x")}));
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let resp = read_response(&mut BufReader::new(s)).unwrap();
    let v = resp.json();
    assert_eq!(v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
}

/// Runs `agentd serve ARGS…` to its exit (it should refuse to start) as
/// `uid` (when given), without XDG_RUNTIME_DIR; returns (exit code, stderr).
fn serve_refused(uid: Option<u32>, args: &[&str]) -> (Option<i32>, String) {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(common::BIN);
    cmd.arg("serve")
        .args(args)
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(std::process::Stdio::null());
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let mut child = cmd.stderr(std::process::Stdio::piped()).spawn().unwrap();
    let exited = common::wait_for(Duration::from_secs(10), || child.try_wait().unwrap().is_some());
    if !exited {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        exited,
        "agentd served instead of refusing: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A directory made by "another user" (uid 65534), mode 0777, as a squatter
/// would leave it.
fn squat(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::chown(dir, Some(65534), Some(65534)).unwrap();
}

#[test]
fn a_squatted_socket_directory_is_refused_with_the_reason() {
    if unsafe_geteuid() != 0 {
        eprintln!("skipped: needs root to play two users");
        return;
    }
    // The default path of a non-root agentd without XDG_RUNTIME_DIR.
    let uid = 65533;
    let default_dir = std::path::PathBuf::from(format!("/tmp/agentd-{uid}"));
    let _ = std::fs::remove_dir_all(&default_dir);
    squat(&default_dir);
    let (code, stderr) = serve_refused(Some(uid), &[]);
    let listed: Vec<_> = std::fs::read_dir(&default_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    std::fs::remove_dir_all(&default_dir).unwrap();
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen in /tmp/agentd-{uid}: it is owned by uid 65534")),
        "{stderr}"
    );
    assert!(listed.is_empty(), "agentd left {listed:?} in the squatter's directory");

    // An explicit --listen into someone else's 0777 directory.
    let tmp = common::TempDir::new("squat");
    let squatted = tmp.0.join("squatted");
    squat(&squatted);
    let listen = format!("unix://{}/agentd.sock", squatted.display());
    let (code, stderr) = serve_refused(None, &["--listen", &listen]);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("owned by uid 65534") && stderr.contains("XDG_RUNTIME_DIR"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(&squatted).unwrap().count(), 0);

    // Ours, but world-writable: refused too.
    std::os::unix::fs::chown(&squatted, Some(0), Some(0)).unwrap();
    let (_, stderr) = serve_refused(None, &["--listen", &listen]);
    assert!(stderr.contains("writable by every user (mode 0777)"), "{stderr}");
}

fn unsafe_geteuid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(u32::MAX)
}

#[test]
fn a_socket_path_of_the_full_107_bytes_is_served() {
    let dir = common::TempDir::new("long");
    let fill = 107 - dir.0.as_os_str().len() - "/".len() - "/a.sock".len();
    let parent = dir.0.join("p".repeat(fill));
    std::fs::create_dir(&parent).unwrap();
    let socket = parent.join("a.sock");
    assert_eq!(socket.as_os_str().len(), 107);
    let d = Daemon::start_at(dir, socket, &[]);
    let v = d.ok("SendMessage", json!({"message": user_message("long")}));
    assert_eq!(v["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
}
