//! The command line as a new user meets it, part three: each test is one
//! friction found by trying agentd cold (issue 39) — a refused message
//! that must say why, output a command must not drop, help and
//! suggestions for every command, warnings where shell syntax does
//! nothing, a silent socket that must not hang the client, and messages
//! that must say what is true. Each checks the exit code and the text.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{wait_for, Daemon, TempDir, BIN};
use serde_json::json;

/// `agentd ARGS` with `input` on its standard input.
fn agentd_with_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run agentd");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    // Written from a thread: the client reads all of it before it dials.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let o = child.wait_with_output().expect("wait for agentd");
    writer.join().expect("the stdin writer");
    o
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

fn task_count(d: &Daemon) -> u64 {
    d.ok("ListTasks", json!({}))["totalSize"].as_u64().unwrap_or(u64::MAX)
}

#[test]
fn a_message_over_the_body_limit_is_a_refusal_that_names_the_limit() {
    let d = Daemon::start(&["--set", "http.body_max_bytes=1000"]);
    let ep = endpoint(&d);
    // 2 KB fits the socket's buffer: the whole request is written and the
    // 413 read. 1 MB does not: the daemon answers 413 and hangs up while
    // the client still writes, so the write fails before the answer is read.
    for size in [2_000, 1_000_000] {
        let message = "a".repeat(size);
        for args in [vec!["send", ep.as_str()], vec!["send", &ep, "--stream"]] {
            let o = agentd_with_stdin(&args, message.as_bytes());
            let e = err(&o);
            assert_eq!(o.status.code(), Some(1), "{size} bytes, {args:?}: {e}");
            let sent = e
                .split("the message is ")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or_else(|| panic!("{size} bytes, {args:?}: no size said: {e}"));
            assert!(
                sent > size,
                "{size} bytes, {args:?}: the request is the message and more: {e}"
            );
            assert!(
                e.contains(&format!(
                    "the message is {sent} bytes; this agent takes at most 1000 (http.body_max_bytes)"
                )),
                "{size} bytes, {args:?}: {e}"
            );
            assert!(!e.contains("Broken pipe"), "{size} bytes, {args:?}: {e}");
            assert_eq!(out(&o), "", "{size} bytes, {args:?}");
        }
    }
    assert_eq!(task_count(&d), 0, "a refused message made a task");
    // Within the limit the same client sends it.
    let o = agentd_with_stdin(&["send", &ep], "a".repeat(500).as_bytes());
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
}

#[test]
fn subscribe_shows_what_the_task_had_already_produced() {
    let gate = TempDir::new("gate");
    let go = gate.0.join("go");
    let program = format!(
        "sh -c 'echo first; while [ ! -e {} ]; do sleep 0.05; done; echo second'",
        go.display()
    );
    let d = Daemon::start(&["--exec", &program]);
    let ep = endpoint(&d);
    let id = d.send_async("hi");
    let produced = || {
        let task = d.ok("GetTask", json!({ "id": id }));
        task["artifacts"][0]["parts"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("first"))
    };
    assert!(wait_for(Duration::from_secs(10), produced), "the task printed nothing");
    let mut child = Command::new(BIN)
        .args(["subscribe", &ep, &id, "--timeout", "20"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run agentd subscribe");
    // The snapshot's line is out: the subscriber has what the task had.
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut first_line = String::new();
    stdout.read_line(&mut first_line).expect("the subscriber's first line");
    assert_eq!(first_line, format!("task {id} working\n"));
    std::fs::write(&go, "").unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("the subscriber's output");
    let status = common::wait_child(&mut child, Duration::from_secs(20)).expect("subscribe ends with the task");
    assert_eq!(status.code(), Some(0), "{first_line}{rest}");
    assert_eq!(rest.matches("first").count(), 1, "shown once: {rest}");
    let (first, second) = (rest.find("first\n"), rest.find("second\n"));
    assert!(
        first.is_some() && second.is_some() && first < second,
        "what the task had, then what came: {rest}"
    );
}
