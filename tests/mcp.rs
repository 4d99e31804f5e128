//! `agentd mcp` from outside, in raw JSON lines over its stdin/stdout (no
//! SDK): bad input and unknown names get clear errors and the bridge goes
//! on; a daemon that goes away is a tool error; MCP cancellation of an
//! in-flight `subagent_spawn` runs the kill ladder on the task's processes;
//! EOF on stdin exits 0 once every request read is answered (by
//! `--drain-timeout` at the latest).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use common::{group_members, wait_for, Daemon};
use serde_json::{json, Value};

/// A running `agentd mcp`, its stdout read by a thread into a channel.
struct Bridge {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Value>,
    /// Messages read while waiting for something else.
    seen: Vec<Value>,
}

impl Bridge {
    fn start(socket: &std::path::Path) -> Bridge {
        let mut child = Command::new(common::BIN)
            .args(["mcp", &format!("unix://{}", socket.display())])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start agentd mcp");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("the bridge wrote a line that is not JSON ({e}): {line}"));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Bridge {
            child,
            stdin,
            rx,
            seen: Vec::new(),
        }
    }

    fn line(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, v: Value) {
        self.line(&v.to_string());
    }

    /// The next message matching `want`, within `timeout`.
    fn wait(&mut self, timeout: Duration, want: impl Fn(&Value) -> bool) -> Option<Value> {
        if let Some(i) = self.seen.iter().position(&want) {
            return Some(self.seen.remove(i));
        }
        let deadline = Instant::now() + timeout;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.rx.recv_timeout(left) {
                Ok(v) if want(&v) => return Some(v),
                Ok(v) => self.seen.push(v),
                Err(_) => return None,
            }
        }
        None
    }

    fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.wait(Duration::from_secs(30), |v| v["id"] == id && v.get("method").is_none())
            .unwrap_or_else(|| panic!("no answer to {method} (id {id}); seen {:?}", self.seen))
    }

    fn initialize(&mut self) {
        let r = self.request(
            json!(0),
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw-test", "version": "1"}}),
        );
        assert_eq!(r["result"]["protocolVersion"], "2025-06-18", "{r}");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    fn tool(&mut self, id: i64, name: &str, args: Value) -> Value {
        let r = self.request(json!(id), "tools/call", json!({"name": name, "arguments": args}));
        r["result"].clone()
    }

    /// Closes stdin and waits for the exit status.
    fn finish(mut self) -> Option<i32> {
        drop(self.stdin.take());
        common::wait_child(&mut self.child, Duration::from_secs(10)).and_then(|s| s.code())
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or("").to_string()
}

#[test]
fn bad_input_and_unknown_names_get_errors_and_the_bridge_goes_on() {
    let d = Daemon::start(&[]);
    let mut b = Bridge::start(&d.socket);

    b.line("{this is not json");
    let e = b.wait(Duration::from_secs(10), |v| v.get("error").is_some()).unwrap();
    assert_eq!(e["error"]["code"], -32700, "{e}");
    assert_eq!(e["id"], Value::Null);

    b.line(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#);
    let e = b.wait(Duration::from_secs(10), |v| v.get("error").is_some()).unwrap();
    assert_eq!(e["error"]["code"], -32600, "{e}");

    b.initialize();
    assert_eq!(b.request(json!(2), "ping", json!({}))["result"], json!({}));
    assert_eq!(b.request(json!(3), "prompts/list", json!({}))["error"]["code"], -32601);
    let e = b.request(
        json!("four"),
        "tools/call",
        json!({"name": "subagent_fly", "arguments": {}}),
    );
    assert_eq!(e["error"]["code"], -32602);
    assert!(e["error"]["message"].as_str().unwrap().contains("subagent_fly"), "{e}");
    let r = b.tool(5, "subagent_spawn", json!({"objective": "x", "colour": "red"}));
    assert_eq!(r["isError"], true);
    assert!(text_of(&r).contains("unknown argument `colour`"), "{r}");
    let r = b.tool(6, "subagent_status", json!({"taskId": "no-such-task"}));
    assert_eq!(r["isError"], true);
    assert!(text_of(&r).starts_with("task not found"), "{r}");
    let r = b.request(json!(7), "resources/read", json!({"uri": "agentd://task/no-such-task"}));
    assert_eq!(r["error"]["code"], -32002, "{r}");

    // Still serving: a real task through the echo runner.
    let r = b.tool(8, "subagent_spawn", json!({"objective": "hello there"}));
    assert_eq!(r["isError"], false, "{r}");
    assert!(text_of(&r).contains("hello there"), "{r}");
    let sc = &r["structuredContent"];
    let read = b.request(
        json!(9),
        "resources/read",
        json!({"uri": format!("agentd://task/{}", sc["taskId"].as_str().unwrap_or(""))}),
    );
    let contents = &read["result"]["contents"][0];
    assert_eq!(contents["mimeType"], "application/json", "{read}");
    let task: Value = serde_json::from_str(contents["text"].as_str().unwrap()).unwrap();
    assert_eq!(task["id"], sc["taskId"]);
    assert_eq!(b.finish(), Some(0), "EOF on stdin exits 0");
}

#[test]
fn a_daemon_that_goes_away_is_a_tool_error() {
    let mut d = Daemon::start(&[]);
    let mut b = Bridge::start(&d.socket);
    b.initialize();
    let r = b.tool(1, "subagent_spawn", json!({"objective": "ping"}));
    assert_eq!(r["isError"], false, "{r}");
    let id = r["structuredContent"]["taskId"].as_str().unwrap().to_string();
    assert_eq!(d.stop(), Some(0));

    for (n, (tool, args)) in [
        ("subagent_status", json!({ "taskId": id })),
        ("subagent_cancel", json!({ "taskId": id })),
        ("subagent_list", json!({})),
        ("subagent_spawn", json!({"objective": "again"})),
    ]
    .into_iter()
    .enumerate()
    {
        let r = b.tool(10 + n as i64, tool, args);
        assert_eq!(r["isError"], true, "{tool}: {r}");
        let text = text_of(&r);
        assert!(
            text.contains("is unreachable") && text.contains(&d.socket.display().to_string()),
            "{tool}: {text}"
        );
    }
    let r = b.request(json!(20), "resources/list", json!({}));
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert_eq!(b.request(json!(21), "ping", json!({}))["result"], json!({}));
    assert_eq!(b.finish(), Some(0));
}

#[test]
fn mcp_cancellation_of_a_spawn_runs_the_kill_ladder() {
    let tmp = common::TempDir::new("mcp-cancel");
    let pids = tmp.0.join("pids");
    // Ignores SIGTERM and leaves two grandchildren (one ignoring it too).
    let prog = common::script(
        &tmp.0,
        "stubborn.sh",
        &format!(
            "trap '' TERM\n\
             sh -c \"trap '' TERM; sleep 1000\" &\n\
             sleep 1000 &\n\
             echo \"$$\" > {p}.tmp && mv {p}.tmp {p}\n\
             echo started\n\
             while :; do sleep 1; done",
            p = pids.display()
        ),
    );
    let d = Daemon::start(&[
        "--exec",
        prog.to_str().unwrap(),
        "--set",
        "tasks.cancel_grace_ms=200",
        "--set",
        "tasks.term_grace_ms=300",
    ]);
    let mut b = Bridge::start(&d.socket);
    b.initialize();
    b.send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "subagent_spawn", "arguments": {"objective": "run forever"},
        "_meta": {"progressToken": "p7"}}}));

    let pid: i32 = common::read_when_ready(&pids, Duration::from_secs(10))
        .trim()
        .parse()
        .unwrap();
    let pgid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(2)?.parse().ok())
        })
        .expect("the program's process group");
    assert!(
        wait_for(Duration::from_secs(10), || group_members(pgid).len() >= 4),
        "worker, program and two grandchildren: {:?}",
        group_members(pgid)
    );
    // Progress flowed while it ran.
    let p = b
        .wait(Duration::from_secs(10), |v| v["method"] == "notifications/progress")
        .expect("a progress notification");
    assert_eq!(p["params"]["progressToken"], "p7");
    assert!(p["params"]["message"].is_string(), "{p}");

    b.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": 7, "reason": "the user changed their mind"}}));
    assert!(
        wait_for(Duration::from_secs(10), || group_members(pgid).is_empty()),
        "group {pgid} still has processes: {:?}",
        group_members(pgid)
    );
    let tasks = d.ok("ListTasks", json!({}));
    let state = || d.ok("ListTasks", json!({}))["tasks"][0]["status"]["state"].clone();
    assert_eq!(tasks["tasks"].as_array().map(Vec::len), Some(1), "{tasks}");
    assert!(
        wait_for(Duration::from_secs(10), || state() == "TASK_STATE_CANCELED"),
        "{}",
        state()
    );
    // The cancelled request gets no response (MCP: receivers SHOULD NOT
    // answer a cancelled request); the bridge answers the next one.
    assert_eq!(b.request(json!(8), "ping", json!({}))["result"], json!({}));
    assert!(
        !b.seen.iter().any(|v| v["id"] == 7),
        "a response to the cancelled request: {:?}",
        b.seen
    );
    assert_eq!(b.finish(), Some(0));
}

/// Runs `agentd mcp ARGS`, writes `lines` to its stdin, and hands the
/// child to `before_eof` before stdin is closed. Returns the exit code,
/// how long it took from EOF, and every message it wrote.
fn run_to_eof(args: &[&str], lines: &[Value], before_eof: impl FnOnce()) -> (Option<i32>, Duration, Vec<Value>) {
    let mut child = Command::new(common::BIN)
        .arg("mcp")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start agentd mcp");
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .map(|l| serde_json::from_str::<Value>(&l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect::<Vec<Value>>()
    });
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    stdin.flush().unwrap();
    before_eof();
    drop(stdin);
    let eof = Instant::now();
    let status = common::wait_child(&mut child, Duration::from_secs(60));
    let took = eof.elapsed();
    (status.and_then(|s| s.code()), took, reader.join().unwrap())
}

fn answer(messages: &[Value], id: i64) -> Value {
    messages
        .iter()
        .find(|m| m["id"] == id && m.get("method").is_none())
        .cloned()
        .unwrap_or_else(|| panic!("no answer to request {id}: {messages:?}"))
}

#[test]
fn stdin_closed_right_after_four_requests_gets_four_answers() {
    let d = Daemon::start(&[]);
    let ep = format!("unix://{}", d.socket.display());
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                          "clientInfo": {"name": "pipe", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        // RFC 0020's dotted spelling, as older configurations call it.
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "subagent.spawn", "arguments": {"objective": "hello from a pipe"}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "resources/list"}),
    ];
    let (code, took, out) = run_to_eof(&[&ep], &requests, || {});
    assert_eq!(code, Some(0), "{out:?}");
    assert!(took < Duration::from_secs(20), "took {took:?} after EOF");
    let answers: Vec<&Value> = out.iter().filter(|m| m.get("method").is_none()).collect();
    assert_eq!(answers.len(), 4, "{out:?}");
    assert_eq!(answer(&out, 1)["result"]["serverInfo"]["name"], "agentd");
    let names: Vec<String> = answer(&out, 2)["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "subagent_spawn",
            "subagent_send",
            "subagent_status",
            "subagent_cancel",
            "subagent_list"
        ]
    );
    let spawned = answer(&out, 3)["result"].clone();
    assert_eq!(spawned["isError"], false, "{spawned}");
    assert_eq!(spawned["structuredContent"]["state"], "completed", "{spawned}");
    assert!(text_of(&spawned).contains("hello from a pipe"), "{spawned}");
    assert!(answer(&out, 4).get("result").is_some(), "{out:?}");
}

#[test]
fn a_call_still_waiting_at_eof_is_answered_at_the_drain_timeout() {
    let d = Daemon::start(&["--exec", "sleep 30"]);
    let ep = format!("unix://{}", d.socket.display());
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                          "clientInfo": {"name": "pipe", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "subagent_spawn", "arguments": {"objective": "take your time"}}}),
    ];
    let task = std::cell::RefCell::new(String::new());
    let (code, took, out) = run_to_eof(&[&ep, "--drain-timeout", "1.5"], &requests, || {
        // EOF once the spawn is under way (its task exists).
        assert!(
            wait_for(Duration::from_secs(20), || {
                let listed = d.ok("ListTasks", json!({}));
                *task.borrow_mut() = listed["tasks"][0]["id"].as_str().unwrap_or("").to_string();
                !task.borrow().is_empty()
            }),
            "the spawn made no task"
        );
    });
    assert_eq!(code, Some(0), "{out:?}");
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(20),
        "answered {took:?} after EOF"
    );
    let r = answer(&out, 2)["result"].clone();
    assert_eq!(r["isError"], true, "{r}");
    let text = text_of(&r);
    let task = task.into_inner();
    assert!(
        text.contains("not done within 1.5 s (--drain-timeout)") && text.contains(&format!("task {task} goes on")),
        "{text}"
    );
    // It does go on: a bridge going away cancels nothing.
    let state = d.ok("GetTask", json!({ "id": task }))["status"]["state"].clone();
    assert_eq!(state, "TASK_STATE_WORKING");
}
