//! The task table under load, from outside: one task flooding artifacts
//! does not starve the others, finished tasks stay within the retention
//! budget (oldest dropped first), and retain_ms holds on an idle daemon.

mod common;

use std::time::{Duration, Instant};

use common::{script, user_message, wait_for, Daemon, TempDir};
use serde_json::{json, Value};

const TASK_NOT_FOUND: i64 = -32001;

fn terminal(state: &str) -> bool {
    matches!(
        state,
        "TASK_STATE_COMPLETED" | "TASK_STATE_FAILED" | "TASK_STATE_CANCELED" | "TASK_STATE_REJECTED"
    )
}

/// Tasks not finished yet (queued or with a process), without artifacts.
fn unfinished(d: &Daemon) -> u64 {
    ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"]
        .iter()
        .map(|s| {
            d.ok("ListTasks", json!({"status": s, "pageSize": 1}))["totalSize"]
                .as_u64()
                .unwrap()
        })
        .sum()
}

fn vm_rss_bytes(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    kb * 1024
}

/// How long `f` takes.
fn timed<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let t = Instant::now();
    let out = f();
    (t.elapsed(), out)
}

#[test]
fn one_task_flooding_artifacts_does_not_starve_the_others() {
    const FLOOD: usize = 50_000;
    let tmp = TempDir::new("flood");
    // Floods only when the message says so; otherwise one line and done.
    let program = script(
        &tmp.0,
        "flood.sh",
        &format!(
            r#"read -r line
case "$line" in
*flood*) seq 0 {} | awk '{{printf "{{\"artifact\":{{\"artifactId\":\"a-%d\",\"parts\":[{{\"text\":\"x\"}}]}}}}\n", $1}}' ;;
*) echo '{{"artifact":{{"parts":[{{"text":"short"}}]}}}}' ;;
esac
echo '{{"status":"completed"}}'"#,
            FLOOD - 1
        ),
    );
    let d = Daemon::start(&["--exec", program.to_str().unwrap(), "--exec-protocol", "jsonl"]);
    let flood = d.send_async("flood");
    let flood_context = d.ok("GetTask", json!({"id": flood}))["contextId"]
        .as_str()
        .unwrap()
        .to_string();
    // The flooding task's state, without rendering its artifacts.
    let flood_state = |d: &Daemon| {
        let page = d.ok("ListTasks", json!({"contextId": flood_context, "historyLength": 0}));
        page["tasks"][0]["status"]["state"].as_str().unwrap_or("").to_string()
    };
    // Starved short tasks would wait for the flood to end: the first probe
    // would come back after it, and the loop end. Counted, not timed (a
    // 2 s bound flaked under a busy loop on both cores); the time bound
    // is only a backstop.
    let bound = Duration::from_secs(30);
    let done = std::sync::atomic::AtomicBool::new(false);
    /// Stops the reader however the probes end (a failed assert too).
    struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    std::thread::scope(|s| {
        let stop = Stop(&done);
        // Meanwhile, someone keeps reading the big task whole.
        let reader = s.spawn(|| {
            let mut slowest = Duration::ZERO;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let (took, _) = timed(|| d.ok("GetTask", json!({"id": flood, "historyLength": 0})));
                slowest = slowest.max(took);
            }
            slowest
        });
        let (mut probes, mut slowest_send, mut slowest_get) = (0, Duration::ZERO, Duration::ZERO);
        let mut probes_during = 0;
        let deadline = Instant::now() + Duration::from_secs(120);
        while !terminal(&flood_state(&d)) {
            assert!(Instant::now() < deadline, "the flood did not finish in 120 s");
            let (took, short) = timed(|| d.ok("SendMessage", json!({"message": user_message("short")})));
            assert_eq!(short["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{short}");
            slowest_send = slowest_send.max(took);
            let short_id = short["task"]["id"].as_str().unwrap();
            let (took, got) = timed(|| d.ok("GetTask", json!({"id": short_id})));
            assert_eq!(got["id"], short_id);
            slowest_get = slowest_get.max(took);
            probes += 1;
            if !terminal(&flood_state(&d)) {
                probes_during += 1;
            }
            assert!(
                slowest_send < bound && slowest_get < bound,
                "while a task floods: a short task took {slowest_send:?}, GetTask of it {slowest_get:?}"
            );
        }
        drop(stop);
        let slowest_big = reader.join().unwrap();
        eprintln!(
            "probes during the flood: {probes} ({probes_during} done before it ended); slowest short send {slowest_send:?}, slowest GetTask of it \
             {slowest_get:?}; slowest GetTask of the flooding task {slowest_big:?}"
        );
        assert!(
            probes_during >= 2,
            "{probes_during} of {probes} short tasks completed while the flood ran: they waited for it"
        );
    });
    let task = d.ok("GetTask", json!({"id": flood, "historyLength": 0}));
    assert_eq!(
        task["status"]["state"], "TASK_STATE_COMPLETED",
        "the flooding task must complete: {}",
        task["status"]
    );
    let artifacts = task["artifacts"].as_array().expect("artifacts");
    assert_eq!(artifacts.len(), FLOOD);
    assert_eq!(artifacts[FLOOD - 1]["artifactId"], format!("a-{}", FLOOD - 1));
}

/// Finished tasks of 8 MiB each, many times the budget: the daemon stays
/// near the budget, and the oldest are the ones dropped. `AGENTD_SOAK=1`
/// runs the issue's 1,000 tasks.
#[test]
fn finished_tasks_stay_within_the_retention_budget() {
    let soak = std::env::var_os("AGENTD_SOAK").is_some_and(|v| v == "1");
    let count = if soak { 1000 } else { 48 };
    let budget: u64 = 64 * 1024 * 1024;
    let task_bytes: u64 = 8 * 1024 * 1024;
    let d = Daemon::start(&[
        "--exec",
        &format!("sh -c 'head -c {task_bytes} /dev/zero | tr \"\\0\" x'"),
        "--set",
        &format!("tasks.retain_bytes={budget}"),
        "--set",
        "tasks.max_running=4",
    ]);
    let started = Instant::now();
    let ids: Vec<String> = (0..count).map(|n| d.send_async(&format!("task {n}"))).collect();
    let mut peak = 0;
    assert!(
        wait_for(Duration::from_secs(if soak { 1200 } else { 120 }), || {
            peak = peak.max(vm_rss_bytes(d.pid()));
            unfinished(&d) == 0
        }),
        "{count} tasks did not finish; {} still going",
        unfinished(&d)
    );
    peak = peak.max(vm_rss_bytes(d.pid()));
    // The budget, what the running tasks hold (4 × 8 MiB), and room for the
    // allocator and the daemon itself. Without a byte budget this would be
    // count × 8 MiB (twice that before the event log shared its bytes).
    let margin: u64 = 96 * 1024 * 1024;
    eprintln!(
        "{count} tasks of {task_bytes} bytes in {:?}; peak VmRSS {} MiB (budget {} MiB)",
        started.elapsed(),
        peak >> 20,
        budget >> 20
    );
    assert!(
        peak < budget + margin,
        "peak VmRSS {} MiB over the {} MiB budget + {} MiB margin",
        peak >> 20,
        budget >> 20,
        margin >> 20
    );
    let newest = d.ok("GetTask", json!({"id": ids[count - 1], "historyLength": 0}));
    assert_eq!(
        newest["status"]["state"], "TASK_STATE_COMPLETED",
        "{}",
        newest["status"]
    );
    let text: usize = newest["artifacts"][0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["text"].as_str().map_or(0, str::len))
        .sum();
    assert_eq!(text as u64, task_bytes, "the newest task is whole");
    let err = d.err("GetTask", json!({"id": ids[0]}));
    assert_eq!(err["code"], TASK_NOT_FOUND, "the oldest is dropped: {err}");
    // At most budget / 8 MiB fit; the kept ones are the newest, in order.
    let kept: Vec<bool> = ids
        .iter()
        .map(|id| {
            d.rpc("GetTask", json!({"id": id, "historyLength": 0}))
                .get("result")
                .is_some()
        })
        .collect();
    let first_kept = kept.iter().position(|k| *k).unwrap();
    let fit = (budget / task_bytes) as usize;
    assert!(kept.iter().filter(|k| **k).count() <= fit, "{kept:?}");
    assert!(count - first_kept >= 2, "more than one task is retained: {kept:?}");
    // Tasks finish out of order with 4 running at once: allow that much.
    let late_gaps = kept[first_kept..].iter().filter(|k| !**k).count();
    assert!(late_gaps <= 4, "the oldest are dropped first: {kept:?}");
}

#[test]
fn retain_ms_expires_tasks_on_an_idle_daemon() {
    const RETAIN: Duration = Duration::from_millis(1000);
    // How much later than retain_ms the task may be seen to go: procman's
    // timer wakes late on a loaded 2-core machine, and this test polls
    // every 10 ms; well under 100 ms there, a second is room enough.
    const LATE: Duration = Duration::from_secs(1);
    let d = Daemon::start(&["--set", &format!("tasks.retain_ms={}", RETAIN.as_millis())]);
    // The task finishes after this instant and before its answer: it must
    // be kept at least RETAIN after the first, and gone within LATE of
    // RETAIN after the second.
    let sent = Instant::now();
    let task = d.ok("SendMessage", json!({"message": user_message("soon gone")}));
    let answered = Instant::now();
    let id = task["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(task["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    // Nothing else happens: no task is created or finishes from now on.
    let gone = wait_for(RETAIN + LATE, || {
        let r: Value = d.rpc("GetTask", json!({"id": id}));
        if r["error"]["code"] == TASK_NOT_FOUND {
            return true;
        }
        assert_eq!(r["result"]["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
        false
    });
    let (since_sent, since_answered) = (sent.elapsed(), answered.elapsed());
    assert!(
        gone,
        "the finished task outlived tasks.retain_ms ({RETAIN:?}) by {LATE:?} on an idle daemon"
    );
    assert!(
        since_sent >= RETAIN,
        "the finished task was dropped {since_answered:?} after it finished, before tasks.retain_ms ({RETAIN:?})"
    );
    eprintln!("retain_ms: a task kept {RETAIN:?} was gone {since_answered:?} after its answer");
}
