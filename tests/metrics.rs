//! `GET /metrics` read by a real Prometheus parser: the official Python
//! client's text parser (`prometheus_client.parser`, PyPI
//! `prometheus-client`), installed once into a venv under
//! `target/metrics-venv`. If it cannot be installed the test fails under CI
//! (see `common::skip_or_fail`) and otherwise skips loudly. The counters
//! must move after a task completes and another is cancelled.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{user_message, Daemon};
use serde_json::{json, Value};

const REQUIREMENT: &str = "prometheus-client>=0.17,<1";

/// Reads the exposition on stdin; prints one JSON object per sample, or
/// fails (non-zero exit) if the parser rejects it.
const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        print(json.dumps({"family": fam.name, "type": fam.type, "name": s.name,
                          "labels": s.labels, "value": s.value}))
"#;

/// The venv's python with prometheus-client's parser, installing it once.
fn python() -> Result<PathBuf, String> {
    common::venv_python("metrics-venv", REQUIREMENT, "import prometheus_client.parser")
}

/// Scrapes /metrics and parses it with the real parser.
fn scrape(d: &Daemon, python: &Path) -> Vec<Value> {
    let resp = d.get("/metrics");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        resp.header("Content-Type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let mut child = Command::new(python)
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&resp.body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser rejected /metrics: {}\n--- exposition ---\n{}",
        String::from_utf8_lossy(&out.stderr),
        resp.text()
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The value of the sample `name` whose labels include `labels`.
fn value(samples: &[Value], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|s| s["name"] == name && labels.iter().all(|(k, v)| s["labels"][*k] == *v))
        .and_then(|s| s["value"].as_f64())
        .unwrap_or_else(|| panic!("no sample {name} {labels:?} in {samples:?}"))
}

#[test]
fn metrics_parse_and_move_after_tasks() {
    let Some(python) = common::needed("prometheus-client", "metrics", python()) else {
        return;
    };
    let dir = common::TempDir::new("metrics-prog");
    // `hi` completes; `sleep` waits to be cancelled.
    let prog = common::script(
        &dir.0,
        "agent.sh",
        r#"read line; case "$line" in sleep*) exec sleep 30;; *) echo "got $line";; esac"#,
    );
    let d = Daemon::start(&["--exec", prog.to_str().unwrap()]);
    let before = scrape(&d, &python);
    let family_type = |name: &str| {
        before
            .iter()
            .find(|s| s["family"] == name)
            .map(|s| s["type"].as_str().unwrap_or("").to_string())
    };
    assert_eq!(family_type("agentd_tasks_ended").as_deref(), Some("counter"));
    assert_eq!(family_type("agentd_worker_spawn_seconds").as_deref(), Some("histogram"));
    assert_eq!(family_type("agentd_tasks_running").as_deref(), Some("gauge"));

    let done = d.ok("SendMessage", json!({"message": user_message("hi")}));
    assert_eq!(done["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    let sent = d.ok(
        "SendMessage",
        json!({"message": user_message("sleep"), "configuration": {"returnImmediately": true}}),
    );
    let id = sent["task"]["id"].as_str().unwrap().to_string();
    assert!(common::wait_for(Duration::from_secs(10), || {
        value(&scrape(&d, &python), "agentd_tasks_running", &[]) == 1.0
    }));
    d.ok("CancelTask", json!({"id": id}));
    assert!(common::wait_for(Duration::from_secs(15), || {
        d.ok("GetTask", json!({"id": id}))["status"]["state"] == "TASK_STATE_CANCELED"
    }));

    // The table's counters follow a task's state right after its lock is
    // released: a scrape may land in between, so wait for them to settle.
    let mut after = Vec::new();
    assert!(common::wait_for(Duration::from_secs(10), || {
        after = scrape(&d, &python);
        value(&after, "agentd_tasks_running", &[]) == 0.0 && value(&after, "agentd_tasks_retained_finished", &[]) == 2.0
    }));
    let moved = |name: &str, labels: &[(&str, &str)]| value(&after, name, labels) - value(&before, name, labels);
    assert_eq!(
        moved(
            "agentd_tasks_ended_total",
            &[("state", "completed"), ("cause", "completed")]
        ),
        1.0
    );
    assert_eq!(
        moved(
            "agentd_tasks_ended_total",
            &[("state", "canceled"), ("cause", "canceled")]
        ),
        1.0
    );
    // Two tasks, two fresh workers, each born before its task ran: the
    // second after the first scrape. Whether the first (an idle worker made
    // at start-up) and a refill after the cancel were counted by either
    // scrape is timing: on a slow-forking CPU the refill's answer often
    // comes after the last scrape.
    assert!(value(&after, "agentd_worker_spawns_total", &[]) >= 2.0);
    assert!(moved("agentd_worker_spawns_total", &[]) >= 1.0);
    assert!(moved("agentd_worker_spawn_seconds_count", &[]) >= 1.0);
    assert!(value(&after, "agentd_worker_spawn_seconds_sum", &[]) > 0.0);
    assert_eq!(moved("agentd_kill_ladder_rungs_total", &[("rung", "cancel")]), 1.0);
    assert!(moved("agentd_connections_accepted_total", &[]) >= 4.0);
    assert_eq!(value(&after, "agentd_tasks_running", &[]), 0.0);
    assert_eq!(value(&after, "agentd_tasks_retained_finished", &[]), 2.0);
    assert!(value(&after, "agentd_tasks_retained_bytes", &[]) > value(&before, "agentd_tasks_retained_bytes", &[]));
    assert!(value(&after, "agentd_connections_open", &[]) >= 1.0, "the scrape's own");
}

#[test]
fn metrics_is_read_with_get_only() {
    let d = Daemon::start(&[]);
    let resp = d.raw(b"POST /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(resp.status, 405);
    assert_eq!(resp.header("Allow"), Some("GET"));
}
