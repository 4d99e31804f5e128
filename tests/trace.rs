//! W3C Trace Context from outside: a request's `traceparent`/`tracestate`
//! reach the task's program as TRACEPARENT/TRACESTATE, travel on to a peer
//! when the task is delegated, and mark the task's log lines; an invalid
//! traceparent is ignored.

mod common;

use common::{user_message, Daemon};
use serde_json::{json, Value};

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// A blocking SendMessage with extra headers; the task it returns.
fn send(d: &Daemon, headers: &[(&str, &str)]) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                      "params": {"message": user_message("hi")}});
    let mut all = vec![("A2A-Version", "1.0")];
    all.extend_from_slice(headers);
    let resp = d.post(&body.to_string(), &all);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let v = resp.json();
    assert_eq!(v["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
    v["result"]["task"].clone()
}

fn env_program(d: &common::TempDir) -> String {
    common::script(
        &d.0,
        "env.sh",
        r#"cat >/dev/null; echo "tp=${TRACEPARENT-unset} ts=${TRACESTATE-unset}""#,
    )
    .display()
    .to_string()
}

#[test]
fn the_program_sees_the_trace_context_and_the_log_names_the_trace() {
    let dir = common::TempDir::new("trace-prog");
    let prog = env_program(&dir);
    let d = Daemon::start(&["--exec", &prog]);
    let task = send(&d, &[("traceparent", TRACEPARENT), ("tracestate", "congo=t61rcWkgMzE")]);
    assert_eq!(
        common::artifact_text(&task).trim(),
        format!("tp={TRACEPARENT} ts=congo=t61rcWkgMzE")
    );
    let id = task["id"].as_str().unwrap();
    let log = d.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(id)).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("task.start") && l.contains(&format!("trace={TRACE_ID}"))),
        "{log}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("task.end") && l.contains(&format!("trace={TRACE_ID}"))),
        "{log}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("[worker") && l.ends_with(&format!("trace={TRACE_ID}"))),
        "the worker's own lines carry the trace: {log}"
    );
}

#[test]
fn an_invalid_traceparent_is_ignored() {
    let dir = common::TempDir::new("trace-bad");
    let prog = env_program(&dir);
    let d = Daemon::start(&["--exec", &prog]);
    let upper = TRACEPARENT.to_uppercase();
    for bad in [
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        upper.as_str(),
        "garbage",
    ] {
        let task = send(&d, &[("traceparent", bad), ("tracestate", "a=b")]);
        assert_eq!(common::artifact_text(&task).trim(), "tp=unset ts=unset", "{bad}");
    }
    let task = send(&d, &[]);
    assert_eq!(common::artifact_text(&task).trim(), "tp=unset ts=unset");
}

#[test]
fn a_delegated_task_carries_the_trace_to_the_peer() {
    let dir = common::TempDir::new("trace-peer");
    let prog = env_program(&dir);
    let b = Daemon::start(&["--exec", &prog]);
    let a = Daemon::start(&["--peer", &format!("unix://{}", b.socket.display())]);
    let task = send(
        &a,
        &[("traceparent", TRACEPARENT), ("tracestate", "rojo=00f067aa0ba902b7")],
    );
    assert_eq!(
        common::artifact_text(&task).trim(),
        format!("tp={TRACEPARENT} ts=rojo=00f067aa0ba902b7"),
        "B's program saw what A was sent"
    );
    assert!(
        b.log_text().contains(&format!("trace={TRACE_ID}")),
        "B logs the trace too"
    );
}
