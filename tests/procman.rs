//! procman under a worker that misbehaves on its control channel: one that
//! stops reading must not hold up anyone else's supervision, and is itself
//! stopped as `stalled`.

mod common;

use std::time::{Duration, Instant};

use common::{task_workers, user_message, wait_for, Daemon};
use serde_json::{json, Value};

const ASK_OR_WORK: &str = r#"read l
case "$l" in
  *ask-me*) echo '{"status":"input-required","text":"which?"}'; read more; echo '{"status":"completed"}' ;;
  *) echo '{"status":"working","text":"busy"}'; sleep 30 ;;
esac"#;

fn state(d: &Daemon, id: &str) -> Value {
    d.ok("GetTask", json!({"id": id}))
}

fn send_async(d: &Daemon, text: &str) -> Value {
    d.ok(
        "SendMessage",
        json!({"message": user_message(text), "configuration": {"returnImmediately": true}}),
    )["task"]
        .clone()
}

#[test]
fn a_worker_that_stops_reading_delays_no_other_task() {
    let tmp = common::TempDir::new("procman");
    let prog = common::script(&tmp.0, "ask.sh", ASK_OR_WORK);
    let d = Daemon::start(&[
        "--exec",
        prog.to_str().unwrap(),
        "--exec-protocol",
        "jsonl",
        "--set",
        "tasks.ping_interval_ms=200",
        "--set",
        // Long enough that A is still only stopped, not yet stalled, when
        // its follow-up is sent and B is cancelled, on a loaded machine
        // too (1.5 s was not: the follow-up found A already FAILED).
        "tasks.stall_timeout_ms=6000",
        "--set",
        "tasks.cancel_grace_ms=200",
        "--set",
        "tasks.term_grace_ms=200",
    ]);
    // A asks a question; then its worker stops (SIGSTOP: it reads nothing).
    let a = send_async(&d, "ask-me");
    let a_id = a["id"].as_str().unwrap().to_string();
    assert!(wait_for(Duration::from_secs(5), || state(&d, &a_id)["status"]["state"]
        == "TASK_STATE_INPUT_REQUIRED"));
    let workers = task_workers(d.pid());
    assert_eq!(workers.len(), 1, "A's worker: {workers:?}");
    // B runs beside it (started first, so A's stop is as short as can be).
    let b = send_async(&d, "work");
    let b_id = b["id"].as_str().unwrap().to_string();
    assert!(wait_for(Duration::from_secs(20), || state(&d, &b_id)["status"]
        ["state"]
        == "TASK_STATE_WORKING"));
    common::signal(workers[0], libc::SIGSTOP);
    // A 3 MB answer for A: far more than the socket buffer of a worker
    // that does not read. It must sit in A's outbox, not block procman.
    let follow = json!({"message": {
        "messageId": common::new_id(), "role": "ROLE_USER", "taskId": a_id,
        "contextId": a["contextId"], "parts": [{"text": "x".repeat(3_000_000)}],
    }, "configuration": {"returnImmediately": true}});
    let r = d.rpc("SendMessage", follow);
    assert!(r.get("result").is_some(), "the follow-up is accepted: {r}");
    // B is cancelled right after: its ladder must not wait behind A's
    // frame (a blocking write to A would hold procman for seconds).
    let asked = Instant::now();
    let t = d.ok("CancelTask", json!({"id": b_id}));
    let took = asked.elapsed();
    assert_eq!(t["status"]["state"], "TASK_STATE_CANCELED", "{t}");
    eprintln!("cancel of B beside a stopped worker took {took:?}");
    // A procman blocked on A's pipe would run no ladder at all (not even
    // A's stall): B's cancel would hang. Generous, for a loaded machine.
    assert!(
        took < Duration::from_secs(5),
        "B's cancel waited {took:?} behind A's worker"
    );
    // A itself: no pong, so stalled; the ladder's SIGCONT lets it die.
    let mut a_now = Value::Null;
    assert!(
        wait_for(Duration::from_secs(30), || {
            a_now = state(&d, &a_id);
            a_now["status"]["state"] == "TASK_STATE_FAILED"
        }),
        "A did not end: {a_now}"
    );
    assert_eq!(common::terminal_cause(&a_now), "stalled", "{a_now}");
    assert!(wait_for(Duration::from_secs(5), || task_workers(d.pid()).is_empty()));
}

#[test]
fn the_idle_pool_follows_demand() {
    // tasks.prespawn: auto — one idle worker at rest, back to one after a
    // burst. Under the burst: where tasks are handed to their workers at
    // birth (no v1 cgroup to move a worker into), the pool is not refilled
    // while tasks run — a task finding none goes to a worker forked for it —
    // and grows to the demand once nothing runs; elsewhere it grows while
    // tasks start quickly.
    let d = Daemon::start(&[]);
    let pid = d.pid();
    let iso = common::isolation(&d);
    let handing = iso == "process-group+cgroup2" || iso == "process-group+subreaper";
    assert!(
        wait_for(Duration::from_secs(10), || common::idle_workers(pid).len() == 1),
        "one idle worker at rest: {:?}",
        common::idle_workers(pid)
    );
    let mut most = 0;
    let mut most_after = 0;
    std::thread::scope(|s| {
        let burst: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    for _ in 0..40 {
                        let t = d.ok("SendMessage", json!({"message": user_message("burst")}));
                        assert_eq!(t["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{t}");
                    }
                })
            })
            .collect();
        while burst.iter().any(|t| !t.is_finished()) {
            most = most.max(common::idle_workers(pid).len());
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    wait_for(Duration::from_secs(2), || {
        most_after = most_after.max(common::idle_workers(pid).len());
        most_after > 1
    });
    let handed = metric(&d, "agentd_worker_spawns_with_task_total");
    eprintln!(
        "isolation {iso}: idle workers 1 at rest, at most {most} under the burst, {most_after} after it; \
         {handed} of 320 tasks handed to their workers at birth"
    );
    if handing {
        assert!(handed >= 160, "{handed} of 320 tasks handed at birth ({iso})");
        assert!(
            most_after > 1,
            "the pool grew to the demand once the burst ended: {most_after} idle"
        );
    } else {
        assert!(most > 1, "the pool grew under the burst: at most {most} idle");
    }
    assert!(
        wait_for(Duration::from_secs(30), || common::idle_workers(pid).len() == 1),
        "the pool shrank back to one: {:?}",
        common::idle_workers(pid)
    );
}

/// A blocking SendMessage, answered within `within` or the test fails
/// (the client gives up: a hung daemon never hangs the test).
fn send_within(d: &Daemon, text: &str, within: Duration) -> (Value, Duration) {
    let t0 = Instant::now();
    let out = std::process::Command::new(common::BIN)
        .args(["send", "--json", "--timeout", &within.as_secs().to_string()])
        .arg(format!("unix://{}", d.socket.display()))
        .arg(text)
        .output()
        .unwrap();
    let took = t0.elapsed();
    assert!(
        out.status.success(),
        "no answer within {within:?} ({}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        d.log_text()
    );
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    (answer["task"].clone(), took)
}

#[test]
fn a_stopped_fork_server_is_replaced_and_the_task_waiting_for_it_is_served() {
    // No idle workers: every task waits for the fork server.
    let d = Daemon::start(&["--set", "tasks.prespawn=0"]);
    d.send_async("first"); // the fork server is up
    assert!(wait_for(Duration::from_secs(10), || common::fork_servers(d.pid())
        .len()
        == 1));
    let stopped = common::fork_servers(d.pid())[0];
    common::signal(stopped, libc::SIGSTOP);
    let (task, took) = send_within(&d, "after-the-stop", Duration::from_secs(20));
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "after-the-stop");
    // Not at once (the request had to be given up on), and not the client's
    // timeout: the fork server's answer deadline (1 s) plus a fork.
    assert!(took >= Duration::from_millis(900), "{took:?}");
    let log = d.log_text();
    assert!(
        log.contains(&format!("procman.forkserver pid={stopped} lost: a request waited")),
        "{log}"
    );
    assert!(!common::alive(stopped), "the stopped fork server was killed");
    let now = common::fork_servers(d.pid());
    assert!(now.len() == 1 && now[0] != stopped, "{now:?}");
}

#[test]
fn a_task_given_to_a_stopped_idle_worker_moves_to_a_fresh_one() {
    let d = Daemon::start(&["--set", "tasks.prespawn=1"]);
    assert!(wait_for(Duration::from_secs(10), || common::idle_workers(d.pid())
        .len()
        == 1));
    let stopped = common::idle_workers(d.pid())[0];
    common::signal(stopped, libc::SIGSTOP);
    let (task, took) = send_within(&d, "moved", Duration::from_secs(20));
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "moved");
    assert!(took >= Duration::from_millis(900), "given up on after 1 s: {took:?}");
    let id = task["id"].as_str().unwrap();
    let log = d.log_text();
    assert!(
        log.contains(&format!("procman.untaken task={id} pid={stopped}")),
        "{log}"
    );
    assert!(
        wait_for(Duration::from_secs(5), || !common::alive(stopped)),
        "the stopped worker is killed"
    );
}

/// A counter's value in GET /metrics.
fn metric(d: &Daemon, name: &str) -> u64 {
    let text = d.get("/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}

/// With no idle worker (tasks.prespawn=0), a task's `spawn` frame goes into
/// the pipe of the worker asked for it before that worker is born, so it
/// runs the task as it starts instead of sleeping until procman hears of it
/// (one wake-up less per task). Containment is whole all the same: each task
/// in a fresh process, born in its own cgroup slot where agentd has them.
/// Where a worker has to be moved into a cgroup after its birth (a v1
/// hierarchy), nothing is handed early: the tasks still run, the old way.
#[test]
fn a_task_with_no_idle_worker_is_in_its_workers_pipe_at_birth_and_contained() {
    for cgroup in ["auto", "off"] {
        let tmp = common::TempDir::new("handed");
        let prog = common::script(
            &tmp.0,
            "where.sh",
            "echo \"pid=$$ $(tr '\\n' ' ' < /proc/self/cgroup)\"",
        );
        let set = format!("tasks.cgroup={cgroup}");
        let d = Daemon::start(&[
            "--exec",
            prog.to_str().unwrap(),
            "--set",
            "tasks.prespawn=0",
            "--set",
            &set,
        ]);
        let iso = common::isolation(&d);
        let handed_early = iso == "process-group+subreaper" || iso == "process-group+cgroup2";
        let mut pids = std::collections::HashSet::new();
        for i in 0..4 {
            let task = d.ok("SendMessage", json!({"message": user_message(&format!("t{i}"))}))["task"].clone();
            assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{cgroup}: {task}");
            let text = common::artifact_text(&task);
            let pid = text
                .strip_prefix("pid=")
                .and_then(|r| r.split_whitespace().next())
                .unwrap_or_else(|| panic!("{cgroup}: {text}"));
            assert!(
                pids.insert(pid.to_string()),
                "{cgroup}: task {i} ran in pid {pid} again"
            );
            let in_slot = text.contains(&format!("/agentd-{}/slot-", d.pid()));
            assert_eq!(
                in_slot,
                iso.contains("cgroup"),
                "{cgroup} ({iso}): the program's cgroups: {text}"
            );
        }
        let spawns = metric(&d, "agentd_worker_spawns_total");
        let handed = metric(&d, "agentd_worker_spawns_with_task_total");
        assert_eq!(spawns, 4, "{cgroup}: one worker per task, none idle");
        assert_eq!(
            handed,
            if handed_early { 4 } else { 0 },
            "{cgroup} ({iso}): workers born with their task"
        );
    }
}

/// The scheduling policy of a process or thread (proc(5) stat field 41):
/// 0 SCHED_OTHER, 3 SCHED_BATCH.
fn policy(stat_path: &str) -> Option<u32> {
    let stat = std::fs::read_to_string(stat_path).ok()?;
    common::stat_field(&stat, 41)?.parse().ok()
}

#[test]
fn helpers_wait_their_turn_and_a_tasks_program_runs_under_the_default_policy() {
    // Connection threads, the fork server and its workers run under
    // SCHED_BATCH, so a wake-up of theirs does not cut procman's turn short;
    // procman itself and every program a task runs keep SCHED_OTHER.
    let tmp = common::TempDir::new("sched");
    let daemon = Daemon::start(&["--exec", policy_script(&tmp).to_str().unwrap()]);
    check_policies(
        &daemon,
        Policies {
            procman: 0,
            helpers: 3,
            program: 0,
        },
    );
}

#[test]
fn a_policy_the_operator_chose_is_left_alone() {
    // Started under SCHED_IDLE (chrt -i 0), every thread and process keeps it.
    if !std::path::Path::new("/usr/bin/chrt").exists() {
        common::skip_or_fail("a_policy_the_operator_chose_is_left_alone", "no /usr/bin/chrt");
        return;
    }
    let tmp = common::TempDir::new("sched-idle");
    let under_idle = common::script(
        &tmp.0,
        "agentd-idle-policy.sh",
        &format!("exec /usr/bin/chrt -i 0 {} \"$@\"", env!("CARGO_BIN_EXE_agentd")),
    );
    let daemon = Daemon::start_with_binary(&under_idle, &["--exec", policy_script(&tmp).to_str().unwrap()]);
    check_policies(
        &daemon,
        Policies {
            procman: 5,
            helpers: 5,
            program: 5,
        },
    );
}

/// An exec program that answers with its own scheduling policy.
fn policy_script(tmp: &common::TempDir) -> std::path::PathBuf {
    common::script(
        &tmp.0,
        "policy.sh",
        "read -r line\necho \"policy=$(cut -d')' -f2 /proc/$$/stat | awk '{print $39}')\"",
    )
}

/// Policies by proc(5) number: 0 SCHED_OTHER, 3 SCHED_BATCH, 5 SCHED_IDLE.
struct Policies {
    procman: u32,
    /// Connection threads, the fork server, idle workers.
    helpers: u32,
    /// What a task's program runs under.
    program: u32,
}

fn check_policies(d: &Daemon, want: Policies) {
    let pid = d.pid();
    let task = d.ok("SendMessage", json!({"message": user_message("which policy?")}))["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(
        common::artifact_text(&task).trim(),
        format!("policy={}", want.program),
        "a task's program: {task}"
    );

    // A connection held open: its thread is there to look at.
    let mut conn = d.connect();
    std::io::Write::write_all(
        &mut conn,
        b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .unwrap();
    let head = common::read_response(&mut std::io::BufReader::new(&conn)).expect("the card");
    assert_eq!(head.status, 200);
    // A thread that ends between the listing and the read (the last
    // request's connection, closing) has no policy left to judge: skipped.
    let threads: Vec<(String, Option<u32>)> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            let policy = policy(&t.path().join("stat").to_string_lossy())?;
            Some((comm.trim_end().to_string(), Some(policy)))
        })
        .collect();
    let of = |name: &str| -> Vec<Option<u32>> {
        threads
            .iter()
            .filter(|(c, _)| c.starts_with(name))
            .map(|(_, p)| *p)
            .collect()
    };
    assert!(!of("conn-").is_empty(), "a connection thread: {threads:?}");
    assert!(
        of("conn-").iter().all(|p| *p == Some(want.helpers)),
        "connection threads: {threads:?}"
    );
    assert_eq!(of("procman"), [Some(want.procman)], "procman: {threads:?}");
    drop(conn);

    assert!(
        wait_for(Duration::from_secs(10), || !common::fork_servers(pid).is_empty()
            && !common::idle_workers(pid).is_empty()),
        "a fork server and an idle worker"
    );
    for fs in common::fork_servers(pid) {
        assert_eq!(
            policy(&format!("/proc/{fs}/stat")),
            Some(want.helpers),
            "the fork server {fs}"
        );
    }
    for w in common::idle_workers(pid) {
        assert_eq!(
            policy(&format!("/proc/{w}/stat")),
            Some(want.helpers),
            "the idle worker {w}"
        );
    }
}
