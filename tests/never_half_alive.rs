//! Never half-alive (DESIGN.md §5): a panic on a thread the daemon cannot
//! serve without ends the daemon at once, logged, with a non-zero exit —
//! never a daemon that keeps accepting while its process manager is gone
//! and new tasks stay SUBMITTED for ever. Its tasks die with it (as with
//! SIGKILL). A debug build's procman panics on a cancel when
//! AGENTD_TEST_PANIC=procman is set: the one way in from outside.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{alive, wait_for, Daemon};

#[test]
fn a_panic_on_procman_ends_the_daemon_at_once_and_its_tasks_with_it() {
    let tmp = common::TempDir::new("panic");
    let pids = tmp.0.join("pids");
    // The program and an escapee that left its group: both must go.
    let prog = common::script(
        &tmp.0,
        "long.sh",
        &format!(
            "setsid sh -c 'echo $$ >> {p}; exec sleep 300' &\necho $$ >> {p}\nwhile :; do sleep 1; done",
            p = pids.display()
        ),
    );
    let mut d = Daemon::start_env(
        common::TempDir::new("panic-d"),
        tmp.0.join("a.sock"),
        &["--exec", prog.to_str().unwrap()],
        &[("RUST_LOG", "info"), ("AGENTD_TEST_PANIC", "procman")],
    );
    let id = d.send_async("work");
    let mut task = Vec::new();
    assert!(
        wait_for(Duration::from_secs(10), || {
            task = std::fs::read_to_string(&pids)
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
                .collect();
            task.len() == 2
        }),
        "the task never started: {task:?}"
    );
    let workers = common::task_workers(d.pid());
    assert!(!workers.is_empty(), "a worker runs the task");
    // The cancel reaches procman, which panics; nobody answers it.
    let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"CancelTask","params":{{"id":"{id}"}}}}"#);
    let mut s = d.connect();
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: agentd\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let sent = Instant::now();
    let mut child = d.child.take().unwrap();
    let status = common::wait_child(&mut child, Duration::from_secs(5));
    let took = sent.elapsed();
    let log = d.log_text();
    let status = status.unwrap_or_else(|| panic!("agentd still ran 5 s after procman panicked; log:\n{log}"));
    assert!(
        took < Duration::from_secs(1),
        "it took {took:?} to exit after procman panicked; log:\n{log}"
    );
    assert_eq!(status.code(), Some(70), "EX_SOFTWARE; log:\n{log}");
    assert!(log.contains("panicked"), "the panic itself is in the log:\n{log}");
    assert!(
        log.contains("agentd.panic thread=procman"),
        "and why the daemon ended:\n{log}"
    );
    let left = || -> Vec<i32> { task.iter().chain(&workers).copied().filter(|p| alive(*p)).collect() };
    assert!(
        wait_for(Duration::from_secs(5), || left().is_empty()),
        "task processes outlived the daemon: {:?}",
        left()
    );
}

/// A connection thread is not vital: its panic ends its connection only,
/// frees its slot under a2a.max_connections, and the daemon serves on.
#[test]
fn a_panic_on_a_connection_thread_ends_only_that_connection() {
    let tmp = common::TempDir::new("conn-panic");
    let d = Daemon::start_env(
        common::TempDir::new("conn-panic-d"),
        tmp.0.join("a.sock"),
        &["--set", "a2a.max_connections=2"],
        &[("RUST_LOG", "info"), ("AGENTD_TEST_PANIC", "conn")],
    );
    for _ in 0..3 {
        // More panics than the cap has slots: each one's slot came back.
        let mut s = d.connect();
        s.write_all(b"GET /__test_panic HTTP/1.1\r\nHost: agentd\r\n\r\n")
            .unwrap();
        let mut rest = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut rest);
        assert!(rest.is_empty(), "no answer from a thread that panicked: {rest:?}");
    }
    let r = d.ok(
        "SendMessage",
        serde_json::json!({"message": common::user_message("still here")}),
    );
    assert_eq!(r["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    assert!(common::alive(d.pid()));
    assert!(d.log_text().contains("panicked"), "{}", d.log_text());
}
