//! agentd's three extensions over the real socket: declaration, activation
//! and echo, invisibility when not activated, and what each one does.

mod common;

use std::time::Duration;

use common::{user_message, wait_for, Daemon};
use serde_json::{json, Value};

const EVENTS: &str = "https://agentd.dev/a2a/ext/events";
const COMMAND: &str = "https://agentd.dev/a2a/ext/command";
const LABELS: &str = "https://agentd.dev/a2a/ext/task-annotations";

/// One call with an `A2A-Extensions` header; returns (echoed header, body).
fn call_ext(d: &Daemon, ext: &str, method: &str, params: Value) -> (Option<String>, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let mut headers = vec![("A2A-Version", "1.0")];
    if !ext.is_empty() {
        headers.push(("A2A-Extensions", ext));
    }
    let resp = d.post(&body, &headers);
    assert_eq!(resp.status, 200, "{}", resp.text());
    (resp.header("A2A-Extensions").map(String::from), resp.json())
}

fn command(d: &Daemon, data: Value) -> Value {
    let params = json!({"message": {"messageId": "c", "role": "ROLE_USER", "extensions": [COMMAND],
        "parts": [{"data": data}]}});
    call_ext(d, COMMAND, "SendMessage", params).1
}

fn labelled(text: &str, labels: Value) -> Value {
    let mut m = user_message(text);
    m["metadata"] = json!({ LABELS: labels });
    m
}

#[test]
fn card_declares_all_three_and_activation_is_echoed() {
    let d = Daemon::start(&[]);
    let card = d.get("/.well-known/agent-card.json").json();
    let uris: Vec<&str> = card["capabilities"]["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, vec![EVENTS, COMMAND, LABELS]);
    assert!(card["capabilities"]["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["required"] == false));

    let (echo, _) = call_ext(
        &d,
        &format!("{LABELS}, https://example.com/unknown/v1"),
        "ListTasks",
        json!({}),
    );
    assert_eq!(
        echo.as_deref(),
        Some(LABELS),
        "only declared ones are activated and echoed"
    );
    let (echo, _) = call_ext(&d, "https://example.com/unknown/v1", "ListTasks", json!({}));
    assert_eq!(echo, None);
}

#[test]
fn required_extension_missing_is_32008() {
    let d = Daemon::start(&["--set", &format!("ext.required={COMMAND}")]);
    let card = d.get("/.well-known/agent-card.json").json();
    assert_eq!(card["capabilities"]["extensions"][1]["required"], true);
    let (_, v) = call_ext(&d, "", "ListTasks", json!({}));
    assert_eq!(v["error"]["code"], -32008, "{v}");
    assert_eq!(v["error"]["data"][0]["reason"], "EXTENSION_SUPPORT_REQUIRED");
    let (_, v) = call_ext(&d, COMMAND, "ListTasks", json!({}));
    assert!(v.get("result").is_some(), "{v}");
}

#[test]
fn events_method_needs_activation() {
    let d = Daemon::start(&[]);
    let (_, v) = call_ext(&d, "", "agentd.events/SubscribeToEvents", json!({}));
    assert_eq!(v["error"]["code"], -32601);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("A2A-Extensions"),
        "{v}"
    );
}

#[test]
fn events_show_another_clients_task_in_order_and_resume_without_gaps() {
    let d = Daemon::start(&["--exec", "sh -c 'echo out; exit 0'"]);
    let mut feed = d.stream(
        "agentd.events/SubscribeToEvents",
        json!({}),
        &[("A2A-Extensions", EVENTS)],
    );
    let hello = feed.next_event().expect("hello");
    assert!(hello.data["result"]["hello"]["seq"].is_u64(), "{}", hello.raw);
    // Another client runs a task.
    let task = d.ok("SendMessage", json!({"message": user_message("x")}))["task"].clone();
    let id = task["id"].as_str().unwrap();
    let mut kinds = Vec::new();
    let mut seqs = Vec::new();
    while let Some(ev) = feed.next_event() {
        let e = &ev.data["result"]["event"];
        assert_eq!(e["seq"].as_u64(), ev.id, "SSE id is the sequence");
        assert_eq!(e["taskId"], id);
        seqs.push(e["seq"].as_u64().unwrap());
        kinds.push(e["kind"].as_str().unwrap().to_string());
        if e["kind"] == "task.terminal" {
            assert_eq!(e["state"], "TASK_STATE_COMPLETED");
            assert_eq!(e["cause"], "completed");
            break;
        }
    }
    let pos = |k: &str| {
        kinds
            .iter()
            .position(|x| x == k)
            .unwrap_or_else(|| panic!("no {k} in {kinds:?}"))
    };
    assert!(pos("task.created") < pos("worker.spawn"));
    assert!(pos("worker.spawn") < pos("task.artifact"));
    assert!(pos("task.artifact") < pos("worker.exit"));
    assert!(pos("worker.exit") < pos("task.terminal"));
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "no gaps: {seqs:?}");
    drop(feed);

    // Resume from the middle: exactly the records after it, no duplicates.
    let mid = seqs[2];
    let mut resumed = d.stream(
        "agentd.events/SubscribeToEvents",
        json!({"fromSeq": mid}),
        &[("A2A-Extensions", EVENTS)],
    );
    resumed.next_event().expect("hello");
    let mut again = Vec::new();
    while again.len() < seqs.len() - 3 {
        let ev = resumed.next_event().expect("a replayed record");
        again.push(ev.id.unwrap());
    }
    assert_eq!(again, seqs[3..].to_vec());
    // Last-Event-ID works the same way.
    let mut by_header = d.stream(
        "agentd.events/SubscribeToEvents",
        json!({}),
        &[("A2A-Extensions", EVENTS), ("Last-Event-ID", &mid.to_string())],
    );
    by_header.next_event().expect("hello");
    assert_eq!(by_header.next_event().unwrap().id, Some(mid + 1));
}

#[test]
fn falling_off_the_ring_yields_a_resync_frame_and_shutdown_a_goodbye() {
    let mut d = Daemon::start(&["--set", "ext.events_ring=4"]);
    for _ in 0..3 {
        d.ok("SendMessage", json!({"message": user_message("x")}));
    }
    let mut feed = d.stream(
        "agentd.events/SubscribeToEvents",
        json!({"fromSeq": 0}),
        &[("A2A-Extensions", EVENTS)],
    );
    let hello = feed.next_event().unwrap();
    let ring_start = hello.data["result"]["hello"]["ringStart"].as_u64().unwrap();
    assert!(ring_start > 1);
    let resync = feed.next_event().unwrap();
    assert_eq!(resync.data["result"]["resync"]["from"], 0, "{}", resync.raw);
    assert_eq!(resync.data["result"]["resync"]["ringStart"], ring_start);
    let first = feed.next_event().unwrap();
    assert_eq!(first.id, Some(ring_start));
    for _ in 0..3 {
        feed.next_event().unwrap();
    }
    // SIGTERM: the feed ends with a goodbye frame and the zero chunk.
    let stopper = std::thread::spawn(move || d.stop());
    let bye = feed.next_event().expect("goodbye");
    assert!(bye.data["result"]["goodbye"].is_object(), "{}", bye.raw);
    assert!(feed.next_event().is_none(), "the stream ends after goodbye");
    assert_eq!(stopper.join().unwrap(), Some(0));
}

#[test]
fn drain_refuses_new_tasks_while_a_running_one_completes_and_resume_restores() {
    let d = Daemon::start(&["--exec", "sh -c 'sleep 0.5; echo done'"]);
    let running = d.ok(
        "SendMessage",
        json!({"message": user_message("x"), "configuration": {"returnImmediately": true}}),
    )["task"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = command(&d, json!({"op": "drain"}));
    assert_eq!(r["result"]["message"]["parts"][0]["data"]["draining"], true, "{r}");
    let err = d.err("SendMessage", json!({"message": user_message("y")}));
    assert_eq!(err["data"][0]["reason"], "DRAINING", "{err}");
    assert!(err["message"].as_str().unwrap().contains("draining"));
    assert!(wait_for(Duration::from_secs(10), || {
        d.ok("GetTask", json!({"id": running}))["status"]["state"] == "TASK_STATE_COMPLETED"
    }));
    let status = command(&d, json!({"op": "status"}));
    let data = &status["result"]["message"]["parts"][0]["data"];
    assert_eq!(data["draining"], true);
    assert_eq!(data["tasks"]["retained"], 1);
    assert!(
        data["isolation"].as_str().unwrap().starts_with("process-group"),
        "{data}"
    );
    command(&d, json!({"op": "resume"}));
    let t = d.ok("SendMessage", json!({"message": user_message("z")}));
    assert_eq!(t["task"]["status"]["state"], "TASK_STATE_COMPLETED");
}

#[test]
fn limits_change_the_running_cap_at_run_time() {
    let d = Daemon::start(&["--exec", "sleep 0.3", "--set", "tasks.max_running=1"]);
    let r = command(&d, json!({"op": "limits"}));
    assert_eq!(r["result"]["message"]["parts"][0]["data"]["limits"]["maxRunning"], 1);
    let ids: Vec<String> = (0..3)
        .map(|_| {
            d.ok(
                "SendMessage",
                json!({"message": user_message("x"), "configuration": {"returnImmediately": true}}),
            )["task"]["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let working = |d: &Daemon| {
        d.ok("ListTasks", json!({"status": "TASK_STATE_WORKING"}))["totalSize"]
            .as_u64()
            .unwrap()
    };
    assert!(working(&d) <= 1);
    let r = command(&d, json!({"op": "limits", "maxRunning": 3}));
    assert_eq!(r["result"]["message"]["parts"][0]["data"]["limits"]["maxRunning"], 3);
    assert!(
        wait_for(Duration::from_secs(5), || working(&d) + done(&d, &ids) >= 3),
        "the queued tasks started once the cap rose"
    );
    // Bad operations: -32602 with a field violation.
    for (data, field) in [
        (json!({"op": "reboot"}), "message.parts[0].data.op"),
        (
            json!({"op": "limits", "maxRunning": 0}),
            "message.parts[0].data.maxRunning",
        ),
        (
            json!({"op": "status", "verbose": true}),
            "message.parts[0].data.verbose",
        ),
    ] {
        let v = command(&d, data);
        assert_eq!(v["error"]["code"], -32602, "{v}");
        assert_eq!(v["error"]["data"][1]["fieldViolations"][0]["field"], field);
    }
}

fn done(d: &Daemon, ids: &[String]) -> u64 {
    ids.iter()
        .filter(|id| d.ok("GetTask", json!({"id": id}))["status"]["state"] == "TASK_STATE_COMPLETED")
        .count() as u64
}

#[test]
fn a_command_without_activation_is_just_a_message() {
    let d = Daemon::start(&[]);
    let params = json!({"message": {"messageId": "c", "role": "ROLE_USER", "extensions": [COMMAND],
        "parts": [{"data": {"op": "drain"}}]}});
    let (_, v) = call_ext(&d, "", "SendMessage", params);
    assert_eq!(
        v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "the echo agent got it: {v}"
    );
    let status = command(&d, json!({"op": "status"}));
    assert_eq!(status["result"]["message"]["parts"][0]["data"]["draining"], false);
}

#[test]
fn annotations_filter_list_survive_multi_turn_and_are_invisible_otherwise() {
    let d = Daemon::start(&[
        "--exec",
        &format!("python3 {}/examples/agents/trip_planner.py", env!("CARGO_MANIFEST_DIR")),
        "--exec-protocol",
        "jsonl",
    ]);
    let (echo, a) = call_ext(
        &d,
        LABELS,
        "SendMessage",
        json!({"message": labelled("Rome", json!({"team": "blue", "run": "1"}))}),
    );
    assert_eq!(echo.as_deref(), Some(LABELS));
    let a = &a["result"]["task"];
    assert_eq!(a["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(a["metadata"][LABELS], json!({"team": "blue", "run": "1"}));
    call_ext(
        &d,
        LABELS,
        "SendMessage",
        json!({"message": labelled("Oslo", json!({"team": "red"}))}),
    );
    // Multi-turn: the follow-up adds a label; the old ones stay.
    let mut follow = labelled("Friday", json!({"turn": "2"}));
    follow["taskId"] = a["id"].clone();
    let (_, done) = call_ext(&d, LABELS, "SendMessage", json!({"message": follow}));
    let done = &done["result"]["task"];
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        done["metadata"][LABELS],
        json!({"team": "blue", "run": "1", "turn": "2"})
    );

    let filter = |labels: Value| {
        call_ext(&d, LABELS, "ListTasks", json!({"metadata": { LABELS: labels }})).1["result"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        filter(json!({"team": "blue"})),
        vec![a["id"].as_str().unwrap().to_string()]
    );
    assert_eq!(filter(json!({"team": "blue", "turn": "2"})).len(), 1);
    assert_eq!(filter(json!({"team": "red"})).len(), 1);
    assert_eq!(filter(json!({"team": "green"})).len(), 0);

    // Not activated: no labels in results (agentd's own key, the cost of
    // the finished task, stays), and the filter is ignored.
    let (echo, plain) = call_ext(&d, "", "GetTask", json!({"id": a["id"]}));
    assert_eq!(echo, None);
    let md = plain["result"]["metadata"]
        .as_object()
        .unwrap_or_else(|| panic!("{plain}"));
    assert_eq!(md.keys().collect::<Vec<_>>(), ["agentd.dev/cost"], "{plain}");
    let (_, all) = call_ext(&d, "", "ListTasks", json!({"metadata": { LABELS: {"team": "green"} }}));
    assert_eq!(all["result"]["totalSize"], 2);
    // Bounds: bad labels are -32602.
    let (_, bad) = call_ext(
        &d,
        LABELS,
        "SendMessage",
        json!({"message": labelled("x", json!({"team": 7}))}),
    );
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}

#[test]
fn client_events_and_command_subcommands() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let d = Daemon::start(&[]);
    let ep = format!("unix://{}", d.socket.display());
    let out = Command::new(common::BIN)
        .args(["command", &ep, "status", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["op"], "status");
    assert_eq!(status["listeners"][0], ep);
    let out = Command::new(common::BIN)
        .args(["command", &ep, "limits", "maxRunning=nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "a bad op is the agent's -32602");

    let mut events = Command::new(common::BIN)
        .args(["events", &ep, "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(events.stdout.take().unwrap()).lines();
    let hello: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(hello.get("hello").is_some());
    d.ok("SendMessage", json!({"message": user_message("x")}));
    let mut kinds = Vec::new();
    for line in lines.by_ref() {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        kinds.push(v["event"]["kind"].as_str().unwrap_or("").to_string());
        if kinds.last().map(String::as_str) == Some("task.terminal") {
            break;
        }
    }
    let _ = events.kill();
    let _ = events.wait();
    assert_eq!(kinds.first().map(String::as_str), Some("task.created"), "{kinds:?}");
}
