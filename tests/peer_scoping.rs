//! The one authorization boundary agentd has (man agentd, SECURITY, vsock):
//! a vsock peer that is not an operator "sees, lists, follows and cancels
//! only the tasks it created (another peer's task is answered as unknown,
//! -32001), sees only those tasks' records on the events feed, and a
//! command from it is refused with -31403"; an operator sees and cancels
//! every task.
//!
//! A second vsock CID cannot be had on a machine without vsock loopback, so
//! the daemon runs with a debug build's test hook,
//! `AGENTD_TEST_UNIX_PEERS_AS_VSOCK` (see `transport::UNIX_PEERS_AS_VSOCK`):
//! its unix gate judges a peer's uid by the vsock CID rule, allow-list and
//! operator list alike. Everything below the gate is the real code. Each
//! peer is a small python3 relay running as its own uid: the test talks to
//! the relay's socket with the harness's usual calls, and the daemon sees
//! the relay's uid as the peer's CID. These tests run as root (to start
//! the relays as other uids).

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::ops::Deref;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{user_message, wait_for, Daemon, SseStream, StreamStart, TempDir};
use serde_json::{json, Value};

const EVENTS: &str = "https://agentd.dev/a2a/ext/events";
const COMMAND: &str = "https://agentd.dev/a2a/ext/command";
const LABELS: &str = "https://agentd.dev/a2a/ext/task-annotations";
const HOOK: &str = "AGENTD_TEST_UNIX_PEERS_AS_VSOCK";

/// The peers, by the uid their relay runs as (= the CID the gate judges).
const OPERATOR: u32 = 61000;
const PEER_A: u32 = 61001;
const PEER_B: u32 = 61002;
/// Not on the allow-list: closed before any HTTP.
const STRANGER: u32 = 61003;

/// The agent every task runs (jsonl protocol): `ask…` asks for input and
/// says what it heard; `work…` works until cancelled; anything else
/// completes at once.
const AGENT_PY: &str = r#"
import json, sys, time

def say(obj):
    print(json.dumps(obj), flush=True)

def next_text():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    message = json.loads(line)["message"]
    return " ".join(p["text"] for p in message["parts"] if "text" in p)

first = next_text()
if first.startswith("ask"):
    say({"status": "input-required", "text": "what next?"})
    heard = next_text()
    say({"artifact": {"artifactId": "heard", "parts": [{"text": "heard: " + heard}]}, "lastChunk": True})
    say({"status": "completed", "text": "heard: " + heard})
elif first.startswith("work"):
    say({"status": "working", "text": "working until cancelled"})
    time.sleep(600)
else:
    say({"status": "completed", "text": "done: " + first})
"#;

/// A relay as the uid it runs as: every connection to `argv[1]` is carried
/// both ways to the daemon's socket `argv[2]`, on a connection of its own,
/// so the daemon's SO_PEERCRED says this uid. A side that ends its writing
/// is passed on as a half-close.
const RELAY_PY: &str = r#"
import os, socket, sys, threading

listen_path, target = sys.argv[1], sys.argv[2]

def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass

def carry(client):
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(target)
    except OSError as e:
        print("connect %s: %s" % (target, e), file=sys.stderr, flush=True)
        client.close()
        return
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()

server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(listen_path)
server.listen(64)
print("relay uid=%d listening on %s" % (os.getuid(), listen_path), file=sys.stderr, flush=True)
while True:
    client, _ = server.accept()
    threading.Thread(target=carry, args=(client,), daemon=True).start()
"#;

/// A python3 that another uid can execute (not a shim under /root).
fn python3() -> &'static str {
    ["/usr/bin/python3", "/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("python3")
}

/// One peer: the harness's client calls (`rpc`, `ok`, `err`, `stream`, …)
/// made through a relay running as `uid`. The `Daemon` it derefs to has no
/// process of its own: its socket is the relay's, its log the relay's.
struct Peer {
    uid: u32,
    via: Daemon,
    relay: Child,
}

impl Peer {
    fn start(uid: u32, daemon_socket: &Path) -> Peer {
        let dir = TempDir::new(&format!("relay-{uid}"));
        std::os::unix::fs::chown(&dir.0, Some(uid), Some(uid)).unwrap();
        let socket = dir.0.join("relay.sock");
        let log = dir.0.join("relay.log");
        let relay = Command::new(python3())
            .arg("-I")
            .arg("-c")
            .arg(RELAY_PY)
            .arg(&socket)
            .arg(daemon_socket)
            .current_dir("/")
            .uid(uid)
            .gid(uid)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start a relay");
        let mut peer = Peer {
            uid,
            via: Daemon {
                child: None,
                killed: None,
                socket: socket.clone(),
                dir,
                log,
            },
            relay,
        };
        let listening = wait_for(Duration::from_secs(10), || {
            UnixStream::connect(&socket).is_ok() || peer.relay.try_wait().is_ok_and(|s| s.is_some())
        });
        assert!(
            listening && peer.relay.try_wait().is_ok_and(|s| s.is_none()),
            "the relay as uid {uid} did not listen: {}",
            peer.via.log_text()
        );
        peer
    }

    /// The name agentd records on this peer's tasks.
    fn principal(&self) -> String {
        format!("vsock:cid={}", self.uid)
    }

    /// SendMessage, blocking until the turn is over; returns the task.
    fn send(&self, message: Value) -> Value {
        let r = self.ok("SendMessage", json!({"message": message}));
        assert!(r["task"]["id"].is_string(), "uid {}: not a task: {r}", self.uid);
        r["task"].clone()
    }

    /// A task working until cancelled, once it is WORKING; returns its id.
    fn working_task(&self) -> String {
        let id = self.send_async("work");
        let working = wait_for(Duration::from_secs(20), || {
            self.ok("GetTask", json!({"id": id}))["status"]["state"] == "TASK_STATE_WORKING"
        });
        assert!(working, "uid {}: task {id} never worked", self.uid);
        id
    }

    /// Every task this peer lists with `params`, walking the pages one
    /// task at a time; checks that each page gives the same total.
    fn list_all(&self, params: Value) -> BTreeSet<String> {
        let mut ids = BTreeSet::new();
        let mut token = String::new();
        let mut total = None;
        for _ in 0..100 {
            let mut p = params.clone();
            p["pageSize"] = json!(1);
            p["pageToken"] = json!(token);
            let page = self.ok("ListTasks", p);
            let size = page["totalSize"]
                .as_u64()
                .unwrap_or_else(|| panic!("no totalSize: {page}"));
            assert_eq!(
                *total.get_or_insert(size),
                size,
                "uid {}: totalSize moved: {page}",
                self.uid
            );
            for t in page["tasks"].as_array().unwrap() {
                let id = t["id"].as_str().unwrap().to_string();
                assert!(ids.insert(id), "uid {}: a task listed twice: {page}", self.uid);
            }
            token = page["nextPageToken"].as_str().unwrap_or("").to_string();
            if token.is_empty() {
                assert_eq!(
                    ids.len() as u64,
                    size,
                    "uid {}: totalSize is not what was listed",
                    self.uid
                );
                return ids;
            }
        }
        panic!("uid {}: ListTasks never ended", self.uid);
    }

    /// One call with extensions activated; returns (HTTP status, body).
    fn call_ext(&self, ext: &str, method: &str, params: Value, accept_stream: bool) -> (u16, Value) {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let mut headers = vec![("A2A-Version", "1.0"), ("A2A-Extensions", ext)];
        if accept_stream {
            headers.push(("Accept", "text/event-stream"));
        }
        let resp = self.post(&body, &headers);
        (resp.status, resp.json())
    }

    /// The events feed from `from` (None: only new records).
    fn feed(&self, from: Option<u64>) -> SseStream {
        let params = match from {
            Some(n) => json!({"fromSeq": n}),
            None => json!({}),
        };
        let mut feed = self.stream("agentd.events/SubscribeToEvents", params, &[("A2A-Extensions", EVENTS)]);
        feed.set_timeout(Duration::from_secs(30));
        let hello = feed.next_event().expect("the feed's hello");
        assert!(hello.result()["hello"].is_object(), "uid {}: {}", self.uid, hello.raw);
        feed
    }
}

impl Deref for Peer {
    type Target = Daemon;

    fn deref(&self) -> &Daemon {
        &self.via
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.relay.kill();
        let _ = self.relay.wait();
    }
}

/// A daemon whose unix gate judges uids as CIDs, and its peers: the
/// operator and two peers that are not.
struct Scene {
    daemon: Daemon,
    op: Peer,
    a: Peer,
    b: Peer,
}

impl Scene {
    fn start(test: &str) -> Option<Scene> {
        if !common::root_or_skip(test, "run relays as other uids, the peers of this test") {
            return None;
        }
        let dir = TempDir::new("scoping");
        let agent = dir.0.join("agent.py");
        std::fs::write(&agent, AGENT_PY).unwrap();
        let socket = dir.0.join("a.sock");
        let exec = format!("{} {}", python3(), agent.display());
        let daemon = Daemon::start_env(
            dir,
            socket,
            &[
                "--exec",
                &exec,
                "--exec-protocol",
                "jsonl",
                "--set",
                &format!("a2a.vsock_allow_cids={OPERATOR},{PEER_A},{PEER_B}"),
                "--set",
                &format!("a2a.vsock_operator_cids={OPERATOR}"),
                "--set",
                "tasks.cancel_grace_ms=200",
            ],
            &[("RUST_LOG", "debug"), (HOOK, "1")],
        );
        // The relays' uids must reach the socket: only the gate decides.
        std::fs::set_permissions(&daemon.dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&daemon.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
        let peer = |uid| Peer::start(uid, &daemon.socket);
        let (op, a, b) = (peer(OPERATOR), peer(PEER_A), peer(PEER_B));
        Some(Scene { daemon, op, a, b })
    }
}

/// Asserts `err` is TASK_NOT_FOUND for `id`, exactly as `peer` is answered
/// about a task that never existed (so nothing tells that it does exist).
fn assert_unknown(peer: &Peer, err: &Value, id: &str, what: &str) {
    assert_eq!(err["code"], -32001, "{what}: {err}");
    assert_eq!(err["data"][0]["reason"], "TASK_NOT_FOUND", "{what}: {err}");
    assert_eq!(err["data"][0]["metadata"]["taskId"], id, "{what}: {err}");
    let missing = "0000000000000000-never-created";
    let as_missing = peer.err("GetTask", json!({"id": missing}));
    // The answer's time is the one thing that may differ.
    let timeless = |e: &Value| {
        let mut e = e.clone();
        if let Some(md) = e["data"][0]["metadata"].as_object_mut() {
            md.remove("timestamp");
        }
        e.to_string()
    };
    assert_eq!(
        timeless(err).replace(id, missing),
        timeless(&as_missing),
        "{what}: another peer's task must read as one that never existed"
    );
}

/// A follow-up to task `task` (its id and context) with `text`.
fn follow_up(task: &Value, text: &str) -> Value {
    let mut m = user_message(text);
    m["taskId"] = task["id"].clone();
    m["contextId"] = task["contextId"].clone();
    m
}

fn id_of(task: &Value) -> String {
    task["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task id: {task}"))
        .to_string()
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

#[test]
fn each_peer_gets_and_lists_only_its_own_tasks_and_the_operator_every_task() {
    let Some(s) = Scene::start("each_peer_gets_and_lists_only_its_own_tasks_and_the_operator_every_task") else {
        return;
    };
    let (op, a, b) = (&s.op, &s.a, &s.b);
    let a_done = a.send(user_message("hello from a"));
    assert_eq!(a_done["status"]["state"], "TASK_STATE_COMPLETED", "{a_done}");
    let a_done = id_of(&a_done);
    let a_work = a.working_task();
    let b_done_task = b.send(user_message("hello from b"));
    let b_done = id_of(&b_done_task);
    let b_work = b.working_task();
    let op_done = id_of(&op.send(user_message("hello from the operator")));
    let every = set(&[&a_done, &a_work, &b_done, &b_work, &op_done]);

    // GetTask: one's own, never another's; the operator's is another's too.
    for (peer, own, others) in [
        (a, [&a_done, &a_work], [&b_done, &b_work, &op_done]),
        (b, [&b_done, &b_work], [&a_done, &a_work, &op_done]),
    ] {
        for id in own {
            assert_eq!(peer.ok("GetTask", json!({"id": id}))["id"], **id, "uid {}", peer.uid);
        }
        for id in others {
            let what = format!("GetTask of another's task by {}", peer.principal());
            assert_unknown(peer, &peer.err("GetTask", json!({"id": id})), id, &what);
        }
    }
    for id in &every {
        assert_eq!(
            op.ok("GetTask", json!({"id": id}))["id"],
            **id,
            "the operator gets every task"
        );
    }

    // ListTasks, page by page: each peer its own; the operator every task.
    assert_eq!(a.list_all(json!({})), set(&[&a_done, &a_work]), "what peer A lists");
    assert_eq!(b.list_all(json!({})), set(&[&b_done, &b_work]), "what peer B lists");
    assert_eq!(op.list_all(json!({})), every, "what the operator lists");
    // Filters narrow what one may see; they never reach past it.
    let working = json!({"status": "TASK_STATE_WORKING"});
    assert_eq!(a.list_all(working.clone()), set(&[&a_work]));
    assert_eq!(b.list_all(working.clone()), set(&[&b_work]));
    assert_eq!(op.list_all(working), set(&[&a_work, &b_work]));
    let in_b_context = json!({"contextId": b_done_task["contextId"]});
    assert_eq!(a.list_all(in_b_context.clone()), set(&[]), "B's context, listed by A");
    assert_eq!(b.list_all(in_b_context.clone()), set(&[&b_done]));
    assert_eq!(op.list_all(in_b_context), set(&[&b_done]));
}

#[test]
fn another_peers_task_cannot_be_cancelled_followed_or_continued() {
    let Some(s) = Scene::start("another_peers_task_cannot_be_cancelled_followed_or_continued") else {
        return;
    };
    let (op, a, b) = (&s.op, &s.a, &s.b);
    let a_work = a.working_task();
    let a_done = id_of(&a.send(user_message("hello from a")));
    // A task waiting for input, carrying as many labels as a task may.
    let mut ask = user_message("ask a");
    let labels: serde_json::Map<String, Value> = (0..16).map(|i| (format!("k{i}"), json!("a"))).collect();
    ask["metadata"] = json!({ LABELS: labels });
    let (status, r) = a.call_ext(LABELS, "SendMessage", json!({"message": ask}), false);
    assert_eq!(status, 200, "{r}");
    let a_ask = r["result"]["task"].clone();
    assert_eq!(a_ask["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{r}");
    let a_ask_id = id_of(&a_ask);
    let history_before = a.ok("GetTask", json!({"id": a_ask_id}))["history"].clone();

    // CancelTask: another's task is unknown, running, waiting or finished
    // (not "not cancelable"). That no cancel went on behind the answer is
    // shown below: the waiting task's next turn completes, where a cancel
    // that reached its worker before that input would have ended it.
    for id in [&a_work, &a_ask_id, &a_done] {
        assert_unknown(b, &b.err("CancelTask", json!({"id": id})), id, "B cancels A's task");
    }
    assert_eq!(
        a.ok("GetTask", json!({"id": a_work}))["status"]["state"],
        "TASK_STATE_WORKING",
        "A's task after B's cancel"
    );

    // SubscribeToTask: answered before any stream starts.
    for id in [&a_work, &a_done, &a_ask_id] {
        match b.stream_or_json("SubscribeToTask", json!({"id": id}), &[]) {
            StreamStart::Json(v) => assert_unknown(b, &v["error"], id, "B follows A's task"),
            StreamStart::Sse(mut st) => panic!("B follows A's task {id}: a stream: {:?}", st.next_event()),
        }
    }

    // SendMessage with A's taskId: unknown, whatever the way it comes.
    let intrusion = follow_up(&a_ask, "intruder");
    assert_unknown(
        b,
        &b.err("SendMessage", json!({"message": intrusion})),
        &a_ask_id,
        "B continues A's task",
    );
    match b.stream_or_json("SendStreamingMessage", json!({"message": intrusion}), &[]) {
        StreamStart::Json(v) => assert_unknown(b, &v["error"], &a_ask_id, "B continues A's task, streaming"),
        StreamStart::Sse(mut st) => panic!("B continues A's task: a stream: {:?}", st.next_event()),
    }
    let mut labelled = follow_up(&a_ask, "intruder");
    labelled["metadata"] = json!({ LABELS: {"intruder": "b"} });
    let (status, r) = b.call_ext(LABELS, "SendMessage", json!({"message": labelled}), false);
    assert_eq!(status, 200, "{r}");
    assert_unknown(
        b,
        &r["error"],
        &a_ask_id,
        "B continues A's fully labelled task with a label",
    );
    let finished = follow_up(&json!({"id": a_done}), "intruder");
    assert_unknown(
        b,
        &b.err("SendMessage", json!({"message": finished})),
        &a_done,
        "B continues A's finished task",
    );
    assert_eq!(b.list_all(json!({})), set(&[]), "B's refused sends created nothing");

    // Nothing reached A's task: still waiting, the same history and labels,
    // the program's next input is A's own, and no cancel ended its turn.
    // The -32001 answers alone do not show it: a send that delivered the
    // message and then could not wait on the task would answer the same.
    let now = a.ok("GetTask", json!({"id": a_ask_id}));
    assert_eq!(now["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{now}");
    assert_eq!(now["history"], history_before, "A's history after B's attempts");
    let (_, r) = a.call_ext(LABELS, "GetTask", json!({"id": a_ask_id}), false);
    assert_eq!(
        r["result"]["metadata"][LABELS],
        json!(labels),
        "A's labels after B's attempts"
    );
    let done = a.send(follow_up(&a_ask, "the owner's answer"));
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(
        done["artifacts"][0]["parts"][0]["text"], "heard: the owner's answer",
        "the program's first input after the question: {done}"
    );
    assert!(
        !done.to_string().contains("intruder"),
        "B's text reached A's task: {done}"
    );

    // The owner follows and cancels its own task.
    let mut follow = a.stream("SubscribeToTask", json!({"id": a_work}), &[]);
    follow.set_timeout(Duration::from_secs(30));
    let first = follow.next_event().expect("the task");
    assert_eq!(first.state(), Some("TASK_STATE_WORKING"), "{}", first.raw);
    let cancelled = a.ok("CancelTask", json!({"id": a_work}));
    assert_eq!(cancelled["status"]["state"], "TASK_STATE_CANCELED", "{cancelled}");
    let rest = follow.collect();
    assert!(
        rest.last().is_some_and(|e| e.state() == Some("TASK_STATE_CANCELED")),
        "A's stream of its task ends CANCELED: {rest:?}"
    );

    // The operator follows and cancels B's task.
    let b_work = b.working_task();
    let mut follow = op.stream("SubscribeToTask", json!({"id": b_work}), &[]);
    follow.set_timeout(Duration::from_secs(30));
    assert_eq!(
        follow.next_event().expect("the task").state(),
        Some("TASK_STATE_WORKING")
    );
    let cancelled = op.ok("CancelTask", json!({"id": b_work}));
    assert_eq!(cancelled["status"]["state"], "TASK_STATE_CANCELED", "{cancelled}");
    let rest = follow.collect();
    assert!(
        rest.last().is_some_and(|e| e.state() == Some("TASK_STATE_CANCELED")),
        "the operator's stream of B's task ends CANCELED: {rest:?}"
    );
    assert_eq!(
        b.ok("GetTask", json!({"id": b_work}))["status"]["state"],
        "TASK_STATE_CANCELED"
    );
}

/// Reads feed records until `last`'s task.terminal; returns them all.
fn records_until_terminal_of(feed: &mut SseStream, last: &str, who: &str) -> Vec<Value> {
    let mut records = Vec::new();
    loop {
        let e = feed
            .next_event()
            .unwrap_or_else(|| panic!("{who}: the feed ended before {last} did"));
        let record = e.result()["event"].clone();
        assert!(record.is_object(), "{who}: not a record: {}", e.raw);
        let end = record["kind"] == "task.terminal" && record["taskId"] == last;
        records.push(record);
        if end {
            return records;
        }
    }
}

/// Asserts the records are of the `visible` tasks only, and that each of
/// those was seen created, given a worker and ended.
fn assert_feed_of(records: &[Value], visible: &BTreeSet<String>, who: &str) {
    for r in records {
        let task = r["taskId"].as_str().unwrap_or_default();
        assert!(
            visible.contains(task),
            "{who} sees a record of a task it may not see: {r}"
        );
    }
    for id in visible {
        for kind in ["task.created", "worker.spawn", "task.terminal"] {
            assert!(
                records.iter().any(|r| r["taskId"] == **id && r["kind"] == kind),
                "{who} never saw {kind} of task {id}, which it may see: {records:#?}"
            );
        }
    }
}

#[test]
fn the_events_feed_carries_a_peers_own_records_only() {
    let Some(s) = Scene::start("the_events_feed_carries_a_peers_own_records_only") else {
        return;
    };
    let (op, a, b) = (&s.op, &s.a, &s.b);
    let mut live = [a.feed(None), b.feed(None), op.feed(None)];

    let a1 = id_of(&a.send(user_message("hello from a")));
    let a_work = a.working_task();
    let b1 = id_of(&b.send(user_message("hello from b")));
    let b_work = b.working_task();
    let op1 = id_of(&op.send(user_message("hello from the operator")));
    assert_eq!(
        a.ok("CancelTask", json!({"id": a_work}))["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    // The operator ends B's task: still B's records.
    assert_eq!(
        op.ok("CancelTask", json!({"id": b_work}))["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    // Each peer's last task: once its end is read, everything before it
    // that the peer may see has been read too.
    let a_last = id_of(&a.send(user_message("a's last")));
    let b_last = id_of(&b.send(user_message("b's last")));
    let op_last = id_of(&op.send(user_message("the operator's last")));

    let a_own = set(&[&a1, &a_work, &a_last]);
    let b_own = set(&[&b1, &b_work, &b_last]);
    let [a_live, b_live, op_live] = &mut live;
    assert_feed_of(
        &records_until_terminal_of(a_live, &a_last, "A, live"),
        &a_own,
        "A, live",
    );
    assert_feed_of(
        &records_until_terminal_of(b_live, &b_last, "B, live"),
        &b_own,
        "B, live",
    );
    let every: BTreeSet<String> = a_own.union(&b_own).cloned().chain([op1, op_last.clone()]).collect();
    assert_feed_of(
        &records_until_terminal_of(op_live, &op_last, "the operator, live"),
        &every,
        "the operator, live",
    );
    // From the ring, the same.
    let replayed = records_until_terminal_of(&mut a.feed(Some(0)), &a_last, "A, replayed");
    assert_feed_of(&replayed, &a_own, "A, replayed");
    let replayed = records_until_terminal_of(&mut b.feed(Some(0)), &b_last, "B, replayed");
    assert_feed_of(&replayed, &b_own, "B, replayed");
    let replayed = records_until_terminal_of(&mut op.feed(Some(0)), &op_last, "the operator, replayed");
    assert_feed_of(&replayed, &every, "the operator, replayed");
}

/// Connects to `socket`, sends a request and reads to the end: the bytes
/// of answer it got (0: closed before any HTTP).
fn answer_bytes(socket: &Path) -> usize {
    let mut s = UnixStream::connect(socket).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: agentd\r\nConnection: close\r\n\r\n");
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => got.len(),
        // A unix peer that closed with our request unread resets.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => got.len(),
        Err(e) => panic!("reading the answer: {e}"),
    }
}

#[test]
fn a_command_from_a_non_operator_is_refused_and_a_stranger_is_closed() {
    let Some(s) = Scene::start("a_command_from_a_non_operator_is_refused_and_a_stranger_is_closed") else {
        return;
    };
    let (op, a, b) = (&s.op, &s.a, &s.b);
    let command = |op_name: &str| {
        json!({"message": {"messageId": common::new_id(), "role": "ROLE_USER", "extensions": [COMMAND],
            "parts": [{"data": {"op": op_name}}]}})
    };
    for peer in [a, b] {
        for (method, stream) in [("SendMessage", false), ("SendStreamingMessage", true)] {
            for op_name in ["status", "drain"] {
                let (status, r) = peer.call_ext(COMMAND, method, command(op_name), stream);
                let what = format!("{op_name} by {} with {method}: {r}", peer.principal());
                assert_eq!(status, 403, "{what}");
                assert_eq!(r["error"]["code"], -31403, "{what}");
                let info = &r["error"]["data"][0];
                assert_eq!(info["reason"], "PERMISSION_DENIED", "{what}");
                assert_eq!(info["domain"], "agentd.dev", "{what}");
                assert_eq!(info["metadata"]["principal"], peer.principal(), "{what}");
            }
        }
    }
    // No refused drain took effect: the operator's status says so, and a
    // peer still creates tasks.
    let (status, r) = op.call_ext(COMMAND, "SendMessage", command("status"), false);
    assert_eq!(status, 200, "the operator's status: {r}");
    let data = &r["result"]["message"]["parts"][0]["data"];
    assert_eq!(data["draining"], false, "after refused drains: {r}");
    let task = a.send(user_message("still served"));
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");

    // The CID rule's allow-list, at the same gate: a uid that is not on it,
    // and root (which the hook judges as CID 0), get no byte of HTTP.
    let stranger = Peer::start(STRANGER, &s.daemon.socket);
    assert_eq!(answer_bytes(&stranger.socket), 0, "a stranger got an answer");
    let line = format!("a2a.vsock.denied cid={STRANGER} ");
    assert!(
        wait_for(Duration::from_secs(5), || s.daemon.log_text().contains(&line)),
        "no `{line}` in the log"
    );
    assert_eq!(answer_bytes(&s.daemon.socket), 0, "root got an answer");
    assert!(common::alive(s.daemon.pid()));
}
