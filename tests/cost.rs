//! What each task cost, from outside: a program that burns CPU and one
//! that allocates and touches 64 MiB, run by the real daemon with cgroups
//! (as this machine offers them: v2 for containment, a v1 memory slot when
//! a memory limit asks for one) and without, and the cost each task's
//! `agentd.dev/cost` metadata reports — bounded on both sides by what the
//! program measured of itself — with the source each measure names. Then
//! the same cost as `agentd get`/`send`, the MCP bridge and `/metrics` show
//! it.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{user_message, Daemon};
use serde_json::{json, Value};

const COST: &str = "agentd.dev/cost";
const MIB: u64 = 1 << 20;

/// Burns 0.6 s of CPU in user space ("burn") or allocates and touches
/// 64 MiB ("alloc"), then prints what it used itself (RUSAGE_SELF) and
/// which cgroups it ran in (its task's slots, when there are any).
const PROGRAM: &str = r#"
import json, resource, sys, time
mode = sys.stdin.read().strip()
if mode == "burn":
    end = time.process_time() + 0.6
    n = 0
    while True:
        n += 1
        if n % 20000 == 0 and time.process_time() >= end:
            break
elif mode == "alloc":
    b = bytearray(64 << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
r = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cpu_usec": int((r.ru_utime + r.ru_stime) * 1e6), "maxrss_bytes": r.ru_maxrss * 1024,
                  "cgroup": open("/proc/self/cgroup").read()}))
"#;

fn python3() -> Option<&'static str> {
    let found = Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success());
    common::needed(
        "python3",
        "cost",
        found.then_some("python3").ok_or("no python3 on PATH".into()),
    )
}

/// The `isolation=` of agentd's ready line.
fn isolation(d: &Daemon) -> String {
    assert!(common::wait_for(Duration::from_secs(5), || d
        .log_text()
        .contains("isolation=")));
    let log = d.log_text();
    let at = log.find("isolation=").unwrap() + "isolation=".len();
    log[at..].split_whitespace().next().unwrap_or("").to_string()
}

/// Whether a v2 slot gets a `memory.peak` it can reset per task: the
/// memory controller offered to our v2 cgroup, and a kernel ≥ 6.12.
fn v2_memory_peak() -> bool {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) else {
        return false;
    };
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let Some(mount) = mounts.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        post.starts_with("cgroup2 ")
            .then(|| pre.split_whitespace().nth(4).map(String::from))?
    }) else {
        return false;
    };
    let controllers = Path::new(&mount)
        .join(path.trim_start_matches('/'))
        .join("cgroup.controllers");
    let memory = std::fs::read_to_string(controllers).is_ok_and(|c| c.split_whitespace().any(|x| x == "memory"));
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    let version = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    memory && version >= (6, 12)
}

/// The sources the cost must name under this isolation.
fn expected_sources(iso: &str) -> (&'static str, &'static str) {
    let cpu = if iso.contains("cgroup2") {
        "cgroup2:cpu.stat"
    } else {
        "wait4:rusage"
    };
    let memory = if iso.contains("cgroup2") && v2_memory_peak() {
        "cgroup2:memory.peak"
    } else if iso.contains("cgroup1-memory") {
        "cgroup1:memory.max_usage_in_bytes"
    } else {
        "wait4:ru_maxrss"
    };
    (cpu, memory)
}

/// Runs one task to its end: its cost, and what the program said it used.
fn run(d: &Daemon, mode: &str) -> (Value, Value) {
    let r = d.ok("SendMessage", json!({"message": user_message(mode)}));
    let task = &r["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    let out = task["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    let own: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    let cost = task["metadata"][COST].clone();
    assert!(cost.is_object(), "no {COST} on a finished task: {r}");
    // GetTask says the same as the blocking send.
    let got = d.ok("GetTask", json!({"id": task["id"]}));
    assert_eq!(got["metadata"][COST], cost);
    (cost, own)
}

/// One allocator, then three CPU burners in a row (so slots are reused),
/// each within bounds of what it measured of itself.
fn burns_and_allocates(extra: &[&str], want_isolation: &str) {
    let Some(python) = python3() else { return };
    let tmp = common::TempDir::new("cost");
    let prog = common::script(&tmp.0, "cost.py", PROGRAM);
    let exec = format!("{python} {}", prog.display());
    // No idle workers: each task's worker is asked for when the task
    // comes, into the first free slot, so one task after another reuses
    // the slot the last one freed (idle workers would hold slots of their
    // own, and which one a task got would depend on the pool's timing).
    let mut args = vec!["--exec", exec.as_str(), "--set", "tasks.prespawn=0"];
    args.extend(extra);
    let d = Daemon::start(&args);
    let iso = isolation(&d);
    if !iso.contains(want_isolation) {
        common::skip_or_fail(
            &format!("cost ({want_isolation})"),
            &format!(
                "agentd chose isolation={iso} here, not {want_isolation}: {}",
                common::CGROUP_HOST
            ),
        );
        return;
    }
    let (cpu_source, memory_source) = expected_sources(&iso);
    eprintln!("isolation={iso}: cpu from {cpu_source}, memory from {memory_source}");
    let (cost, own) = run(&d, "alloc");
    let peak = cost["memory"]["peakBytes"].as_u64().unwrap();
    assert!(
        (64 * MIB..1024 * MIB).contains(&peak),
        "a task that touched 64 MiB peaked at {peak} bytes: {cost} (the program saw {own})"
    );
    assert_eq!(cost["memory"]["source"], memory_source, "{cost}");
    if memory_source == "wait4:ru_maxrss" {
        // The largest process is the program: the two say the same.
        let own_peak = own["maxrss_bytes"].as_u64().unwrap();
        assert!(peak >= own_peak, "{peak} < the program's own {own_peak}");
    }
    let with_slots = iso.contains("cgroup");
    // The slots each task ran in, in order: the allocator's first.
    let mut ran_in = vec![slots(&own, with_slots)];
    for round in 0..3 {
        let (cost, own) = run(&d, "burn");
        ran_in.push(slots(&own, with_slots));
        let burned = own["cpu_usec"].as_u64().unwrap();
        assert!(burned >= 600_000, "the program burned {burned} µs");
        let cpu = &cost["cpu"];
        let total = cpu["userUsec"].as_u64().unwrap() + cpu["systemUsec"].as_u64().unwrap();
        // At least what the program burned (less rounding), at most that
        // plus its interpreter's start and its worker: never the previous
        // task's 0.6 s again, as a slot's unsubtracted counter would be.
        assert!(
            total + 20_000 >= burned && total <= burned + 400_000,
            "round {round}: cost {total} µs for a program that burned {burned} µs: {cost}"
        );
        assert_eq!(cpu["source"], cpu_source, "{cost}");
        assert!(
            cpu["userUsec"].as_u64().unwrap() > cpu["systemUsec"].as_u64().unwrap(),
            "{cost}"
        );
        let wall_ms = cost["wallMs"].as_u64().unwrap();
        assert!(
            wall_ms * 1000 + 20_000 >= burned && wall_ms < 60_000,
            "a single thread burning {burned} µs in {wall_ms} ms: {cost}"
        );
        assert_eq!(cost["memory"]["source"], memory_source, "{cost}");
        // A reused slot's peak was reset: not the allocator's 64 MiB.
        let peak = cost["memory"]["peakBytes"].as_u64().unwrap();
        assert!(
            peak < 64 * MIB,
            "round {round}: a burner peaked at {peak} bytes: {cost}"
        );
    }
    if with_slots {
        // The resets above are only tested where a task reuses a slot: the
        // peak where a burner ran in the allocator's slot, the CPU time
        // where one ran in an earlier burner's. A daemon that took a fresh
        // slot per task would pass them without resetting anything.
        let burners = &ran_in[1..];
        assert!(
            burners.iter().any(|s| *s == ran_in[0]),
            "no burner ran in the allocator's slot, so no peak reset was tested: {ran_in:?}"
        );
        assert!(
            (1..burners.len()).any(|i| burners[..i].contains(&burners[i])),
            "no burner ran in an earlier burner's slot, so no CPU reset was tested: {ran_in:?}"
        );
    }
    eprintln!("slots in order (allocator, burners): {ran_in:?}");
    // Each task counted once in /metrics.
    let metrics = d.get("/metrics").text();
    let value = |prefix: &str| -> u64 {
        let line = metrics.lines().find(|l| l.starts_with(prefix));
        line.and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in\n{metrics}"))
    };
    assert_eq!(value("agentd_task_cpu_seconds_count "), 4, "{metrics}");
    assert_eq!(
        value("agentd_task_cpu_seconds_bucket{le=\"0.5\"} "),
        1,
        "only the allocator under 0.5 s"
    );
    let series = format!("agentd_task_memory_peak_bytes_bucket{{source=\"{memory_source}\",le=");
    assert_eq!(
        value(&format!("{series}\"67108864\"}} ")),
        3,
        "the burners under 64 MiB"
    );
    assert_eq!(value(&format!("{series}\"+Inf\"}} ")), 4);
}

#[test]
fn with_cgroups_the_cost_is_the_task_cgroups() {
    burns_and_allocates(&[], "cgroup2");
}

#[test]
fn with_a_memory_limit_on_a_hybrid_host_the_peak_is_the_v1_slots() {
    burns_and_allocates(&["--set", "tasks.memory_max_bytes=1073741824"], "cgroup1-memory");
}

#[test]
fn without_cgroups_the_cost_is_the_workers_rusage() {
    burns_and_allocates(&["--set", "tasks.cgroup=off"], "subreaper");
}

/// The cgroups of agentd's that a task ran in (one per hierarchy it
/// places tasks in), from the program's own /proc/self/cgroup; none
/// without cgroups.
fn slots(own: &Value, with_slots: bool) -> Vec<String> {
    let text = own["cgroup"].as_str().unwrap_or_else(|| panic!("no cgroup in {own}"));
    let slots: Vec<String> = text
        .lines()
        .filter(|l| l.contains("/agentd-"))
        .map(String::from)
        .collect();
    assert_eq!(
        !slots.is_empty(),
        with_slots,
        "a task's cgroups under an isolation {} slots: {text}",
        if with_slots { "with" } else { "without" }
    );
    assert!(slots.iter().all(|s| s.contains("/slot-")), "{slots:?}");
    slots
}

fn agentd(args: &[&str]) -> (i32, String) {
    let out = Command::new(common::BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn get_send_and_the_mcp_bridge_show_the_cost() {
    let d = Daemon::start(&[]);
    let ep = format!("unix://{}", d.socket.display());
    let (code, sent) = agentd(&["send", &ep, "hello"]);
    assert_eq!(code, 0, "{sent}");
    let cost_line = |out: &str| -> String {
        out.lines()
            .find(|l| l.starts_with("  cost: "))
            .unwrap_or_else(|| panic!("no cost line in:\n{out}"))
            .to_string()
    };
    let line = cost_line(&sent);
    assert!(
        line.starts_with("  cost: cpu ") && line.contains(" s (user ") && line.contains("wall "),
        "{line}"
    );
    assert!(line.contains("peak memory ") && line.contains(" MiB ("), "{line}");
    let id = sent.split_whitespace().nth(1).unwrap();
    let (code, got) = agentd(&["get", &ep, id]);
    assert_eq!(code, 0);
    assert_eq!(cost_line(&got), line, "get shows what send showed");
    // --json is the task as it is: the metadata under agentd's key.
    let (_, json_out) = agentd(&["get", "--json", &ep, id]);
    let task: Value = serde_json::from_str(&json_out).unwrap();
    assert!(task["metadata"][COST]["wallMs"].is_u64(), "{task}");
    // A stream ends with the final status, which carries the cost.
    let (code, streamed) = agentd(&["send", "--stream", &ep, "streamed"]);
    assert_eq!(code, 0);
    cost_line(&streamed);

    // The MCP bridge: the cost in the structured result and in its text.
    let mut mcp = Command::new(common::BIN)
        .args(["mcp", &ep])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = mcp.stdin.take().unwrap();
    for l in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "cost", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "subagent_spawn", "arguments": {"objective": "what did it cost"}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "subagent_status", "arguments": {"taskId": id}}}),
    ] {
        writeln!(stdin, "{l}").unwrap();
    }
    drop(stdin); // every request read is answered, then it exits
    let answers: Vec<Value> = BufReader::new(mcp.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect();
    assert_eq!(
        common::wait_child(&mut mcp, Duration::from_secs(20)).and_then(|s| s.code()),
        Some(0)
    );
    for id in [2, 3] {
        let r = &answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("{answers:?}"))["result"];
        let s = &r["structuredContent"];
        assert_eq!(s["state"], "completed", "{r}");
        assert!(s["cost"]["cpu"]["source"].is_string(), "{r}");
        assert_eq!(s["cost"], s["task"]["metadata"][COST], "{r}");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.lines().any(|l| l.starts_with("cost: cpu ")), "{text}");
    }
    let status = &answers.iter().find(|a| a["id"] == 3).unwrap()["result"]["structuredContent"];
    assert_eq!(
        status["cost"], task["metadata"][COST],
        "the bridge passes the daemon's cost on"
    );
}
