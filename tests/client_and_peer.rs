//! The `agentd` client subcommands against a real daemon, and two daemons
//! on one host: A's `peer` runner delegates to B over a unix socket.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{alive, group_members, task_workers, wait_for, Daemon};
use serde_json::Value;

fn agentd(args: &[&str]) -> Output {
    Command::new(common::BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run agentd client")
}

fn agentd_stdin(args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(common::BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn endpoint(d: &Daemon) -> String {
    format!("unix://{}", d.socket.display())
}

fn trip_planner() -> String {
    format!("python3 {}/examples/agents/trip_planner.py", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_subcommand_human_and_json() {
    let d = Daemon::start(&[]);
    let ep = endpoint(&d);

    let o = agentd(&["card", &ep]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        out(&o).contains("jsonrpc-unix") && out(&o).contains("streaming=true"),
        "{}",
        out(&o)
    );
    let o = agentd(&["card", &ep, "--json"]);
    let card: Value = serde_json::from_str(out(&o).trim()).unwrap();
    assert_eq!(card["name"], "agentd");

    let o = agentd(&["send", &ep, "hello", "world"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        out(&o).contains("completed") && out(&o).contains("hello world"),
        "{}",
        out(&o)
    );
    let o = agentd_stdin(&["send", &ep, "--json"], "from stdin");
    let r: Value = serde_json::from_str(out(&o).trim()).unwrap();
    assert_eq!(r["task"]["artifacts"][0]["parts"][0]["text"], "from stdin");
    let id = r["task"]["id"].as_str().unwrap().to_string();

    let o = agentd(&["send", &ep, "--stream", "streamed"]);
    assert!(o.status.success());
    assert!(
        out(&o).contains("[completed]") && out(&o).contains("streamed"),
        "{}",
        out(&o)
    );
    let o = agentd(&["send", &ep, "--stream", "--json", "x"]);
    let lines: Vec<Value> = out(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines[0].get("task").is_some());
    assert_eq!(
        lines.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    let o = agentd(&["get", &ep, &id]);
    assert!(out(&o).contains(&id) && out(&o).contains("from stdin"), "{}", out(&o));
    let o = agentd(&["get", &ep, &id, "--json", "--history", "0"]);
    let t: Value = serde_json::from_str(out(&o).trim()).unwrap();
    assert!(t.get("history").is_none());

    let o = agentd(&["list", &ep]);
    assert!(out(&o).contains("4 of 4 task(s)"), "{}", out(&o));
    let o = agentd(&["list", &ep, "--json", "--page-size", "2", "--state", "completed"]);
    let page: Value = serde_json::from_str(out(&o).trim()).unwrap();
    assert_eq!(page["tasks"].as_array().unwrap().len(), 2);
    assert_ne!(page["nextPageToken"], "");

    // Errors: the JSON-RPC error is printed, exit 1.
    let o = agentd(&["get", &ep, "no-such-task"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("-32001"), "{}", err(&o));
    let o = agentd(&["cancel", &ep, &id]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("-32002"));
    let o = agentd(&["get", &ep, "no-such-task", "--json"]);
    let e: Value = serde_json::from_str(out(&o).trim()).unwrap();
    assert_eq!(e["error"]["code"], -32001);
    // Unreachable: exit 3. Usage: exit 2.
    let o = agentd(&["card", "unix:///nonexistent/agentd.sock"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(err(&o).contains("cannot reach"));
    assert_eq!(agentd(&["get", &ep]).status.code(), Some(2));
    assert_eq!(agentd(&["send", "tcp://x:1", "hi"]).status.code(), Some(2));
    assert_eq!(agentd(&["list", &ep, "--bogus"]).status.code(), Some(2));
}

#[test]
fn a_failed_task_exits_4_and_cancel_prints_the_state() {
    let d = Daemon::start(&["--exec", "sh -c 'echo no >&2; exit 9'"]);
    let o = agentd(&["send", &endpoint(&d), "x"]);
    assert_eq!(o.status.code(), Some(4), "{}", out(&o));
    assert!(
        out(&o).contains("failed") && out(&o).contains("ended with exit status 9"),
        "{}",
        out(&o)
    );

    let d = Daemon::start(&["--exec", "sleep 30", "--set", "tasks.cancel_grace_ms=100"]);
    let o = agentd(&["send", &endpoint(&d), "--no-wait", "--json", "x"]);
    let r: Value = serde_json::from_str(out(&o).trim()).unwrap();
    let id = r["task"]["id"].as_str().unwrap();
    let o = agentd(&["cancel", &endpoint(&d), id]);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(out(&o).trim(), format!("task {id} canceled"));
}

#[test]
fn client_refuses_an_agent_without_our_binding() {
    // A fake agent whose card only offers JSONRPC over a TCP URL: the
    // client must not use it (and must never dial the URL it names).
    let dir = common::TempDir::new("fake");
    let path = dir.0.join("fake.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let card = r#"{"name":"x","supportedInterfaces":[{"url":"http://127.0.0.1:9/","protocolBinding":"JSONRPC","protocolVersion":"1.0"}]}"#;
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{card}",
                card.len()
            );
        }
    });
    let o = agentd(&["send", &format!("unix://{}", path.display()), "hi"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        err(&o).contains("offers no interface with binding https://agentd.dev/a2a/binding/jsonrpc-unix"),
        "{}",
        err(&o)
    );
}

#[test]
fn peer_runner_relays_a_streamed_task_and_its_follow_up() {
    let b = Daemon::start(&["--exec", &trip_planner(), "--exec-protocol", "jsonl"]);
    let a = Daemon::start(&["--peer", &endpoint(&b)]);
    let o = agentd(&["send", &endpoint(&a), "--stream", "--json", "Porto"]);
    assert!(o.status.success(), "{}", err(&o));
    let events: Vec<Value> = out(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let a_task = events[0]["task"]["id"].as_str().unwrap().to_string();
    let texts: String = events
        .iter()
        .filter_map(|e| e["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect();
    assert!(
        texts.contains("checking hotels"),
        "B's artifacts came through A: {texts}"
    );
    let last = events.last().unwrap();
    assert_eq!(last["statusUpdate"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert!(last["statusUpdate"]["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .contains("Which day"));
    // Every event is about A's task, not B's.
    for e in &events[1..] {
        let r = e.get("statusUpdate").or(e.get("artifactUpdate")).unwrap();
        assert_eq!(r["taskId"], a_task.as_str());
    }
    let o = agentd(&["send", &endpoint(&a), "--task", &a_task, "Monday"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).contains("leaving Monday"), "{}", out(&o));
    // B saw one task of its own, completed.
    let o = agentd(&["list", &endpoint(&b), "--json"]);
    let page: Value = serde_json::from_str(out(&o).trim()).unwrap();
    assert_eq!(page["totalSize"], 1);
    assert_eq!(page["tasks"][0]["status"]["state"], "TASK_STATE_COMPLETED");
}

#[test]
fn cancel_on_a_kills_the_work_on_b() {
    let b = Daemon::start(&[
        "--exec",
        "sh -c 'echo started; sleep 600'",
        "--set",
        "tasks.cancel_grace_ms=100",
        "--set",
        "tasks.term_grace_ms=200",
    ]);
    let a = Daemon::start(&["--peer", &endpoint(&b)]);
    let o = agentd(&["send", &endpoint(&a), "--no-wait", "--json", "x"]);
    let r: Value = serde_json::from_str(out(&o).trim()).unwrap();
    let id = r["task"]["id"].as_str().unwrap().to_string();
    assert!(
        wait_for(Duration::from_secs(10), || task_workers(b.pid()).len() == 1),
        "B runs the work"
    );
    let b_worker = task_workers(b.pid())[0];
    let o = agentd(&["cancel", &endpoint(&a), &id, "--json"]);
    assert!(o.status.success(), "{}", err(&o));
    let t: Value = serde_json::from_str(out(&o).trim()).unwrap();
    assert_eq!(t["status"]["state"], "TASK_STATE_CANCELED");
    assert!(
        wait_for(Duration::from_secs(5), || !alive(b_worker)
            && group_members(b_worker).is_empty()),
        "B's worker group survived the cancel on A"
    );
    let o = agentd(&["list", &endpoint(&b), "--json"]);
    let page: Value = serde_json::from_str(out(&o).trim()).unwrap();
    assert_eq!(page["tasks"][0]["status"]["state"], "TASK_STATE_CANCELED");
    assert!(task_workers(a.pid()).is_empty(), "A's worker is gone too");
}
