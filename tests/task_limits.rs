//! What one task may hold and do, against the manual's own numbers (not
//! the code's constants): its output budget (`tasks.output_max_bytes`),
//! its last 1000 history messages and at most 16 MiB of them, its last
//! 4096 events while it runs, and the three rlimits its program runs under
//! (`tasks.rlimit_as_bytes`, `rlimit_cpu_secs`, `rlimit_nofile`), looked at
//! from inside the program.

mod common;

use std::time::{Duration, Instant};

use common::{status_text, terminal_cause, user_message, wait_for, Daemon, SseEvent, TempDir};
use serde_json::{json, Value};

/// TASKS AND PROCESSES, Retention: "A task keeps its last 1000 history
/// messages, at most 16 MiB of them (the newest always stays), and its
/// last 4096 events while it runs".
const MANUAL_HISTORY_MAX: usize = 1000;
const MANUAL_HISTORY_MAX_BYTES: usize = 16 * 1024 * 1024;
const MANUAL_EVENTS_MAX: u64 = 4096;

fn script(dir: &TempDir, body: &str) -> String {
    let p = common::script(&dir.0, &format!("p{}.sh", common::new_id()), body);
    p.to_str().unwrap().to_string()
}

fn send(d: &Daemon, text: &str) -> Value {
    d.ok("SendMessage", json!({"message": user_message(text)}))["task"].clone()
}

fn get(d: &Daemon, id: &str) -> Value {
    d.ok("GetTask", json!({"id": id}))
}

fn state(t: &Value) -> &str {
    t["status"]["state"].as_str().unwrap_or("")
}

fn history_texts(t: &Value) -> Vec<String> {
    t["history"]
        .as_array()
        .unwrap_or_else(|| panic!("no history: {}", t["status"]))
        .iter()
        .map(|m| {
            m["parts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| p["text"].as_str().unwrap_or(""))
                .collect()
        })
        .collect()
}

// ---- tasks.output_max_bytes -------------------------------------------------

/// A text program that writes exactly `n` bytes of `x` to stdout.
fn writes(dir: &TempDir, n: usize) -> String {
    script(dir, &format!("head -c {n} /dev/zero | tr '\\0' x"))
}

#[test]
fn output_at_the_budget_completes_and_one_byte_over_fails_exhausted() {
    let tmp = TempDir::new("out");
    for (n, want) in [(1000, "TASK_STATE_COMPLETED"), (1001, "TASK_STATE_FAILED")] {
        let d = Daemon::start(&["--exec", &writes(&tmp, n), "--set", "tasks.output_max_bytes=1000"]);
        let t = send(&d, "go");
        assert_eq!(state(&t), want, "{n} bytes against a budget of 1000: {}", t["status"]);
        if n == 1000 {
            assert_eq!(
                common::artifact_text(&get(&d, t["id"].as_str().unwrap())),
                "x".repeat(1000)
            );
        } else {
            assert_eq!(terminal_cause(&t), "exhausted", "{}", t["status"]);
            assert!(
                status_text(&t).contains("tasks.output_max_bytes"),
                "the text names the budget: {}",
                t["status"]
            );
        }
    }
}

#[test]
fn a_program_that_never_stops_writing_is_stopped_exhausted() {
    // `yes` would write forever: the budget is what ends the task, and
    // what reached the task is within it.
    let d = Daemon::start(&["--exec", "yes", "--set", "tasks.output_max_bytes=100000"]);
    let t = send(&d, "go");
    assert_eq!(state(&t), "TASK_STATE_FAILED", "{}", t["status"]);
    assert_eq!(terminal_cause(&t), "exhausted", "{}", t["status"]);
    let kept = common::artifact_text(&get(&d, t["id"].as_str().unwrap()));
    assert!(
        kept.len() <= 100_000,
        "{} bytes kept over a budget of 100000",
        kept.len()
    );
    assert!(
        wait_for(Duration::from_secs(10), || common::task_workers(d.pid()).is_empty()),
        "the worker outlived its exhausted task"
    );
}

#[test]
fn jsonl_lines_count_against_the_budget_too() {
    let tmp = TempDir::new("outj");
    let pad = "p".repeat(2000);
    let prog = script(
        &tmp,
        &format!(
            "read -r first\n\
             echo '{{\"status\":\"working\",\"text\":\"{pad}\"}}'\n\
             echo '{{\"status\":\"completed\",\"text\":\"not reached\"}}'"
        ),
    );
    let d = Daemon::start(&[
        "--exec",
        &prog,
        "--exec-protocol",
        "jsonl",
        "--set",
        "tasks.output_max_bytes=1000",
    ]);
    let t = send(&d, "go");
    assert_eq!(
        (state(&t), terminal_cause(&t).as_str()),
        ("TASK_STATE_FAILED", "exhausted"),
        "{}",
        t["status"]
    );
}

// ---- history ---------------------------------------------------------------

/// A jsonl program that says `working` with texts m1..mN and completes
/// with the text `done` at once: N + 2 history messages with the user's.
fn says(dir: &TempDir, n: usize) -> String {
    script(
        dir,
        &format!(
            "read -r first\n\
             i=1\n\
             while [ $i -le {n} ]; do echo \"{{\\\"status\\\":\\\"working\\\",\\\"text\\\":\\\"m$i\\\"}}\"; i=$((i+1)); done\n\
             echo '{{\"status\":\"completed\",\"text\":\"done\"}}'"
        ),
    )
}

/// Sends `text` and returns the finished task (a blocking send).
///
/// The program writes its last working lines and its verdict and exits at
/// once, so this also holds procman to reading a worker's frames before it
/// reaps it, and to relaying those it reads after the exit: it used to reap
/// first and drop the status frames it then read, losing a program's last
/// working lines (fixed in dcfe33f).
fn run(d: &Daemon, text: &str) -> Value {
    let t = send(d, text);
    assert_eq!(state(&t), "TASK_STATE_COMPLETED", "{}", t["status"]);
    get(d, t["id"].as_str().unwrap())
}

#[test]
fn history_keeps_the_last_1000_messages_at_and_over_the_cap() {
    // The user's message, N working texts, the final `done`.
    for working in [MANUAL_HISTORY_MAX - 2, MANUAL_HISTORY_MAX - 1, MANUAL_HISTORY_MAX + 100] {
        let tmp = TempDir::new("hist");
        let total = working + 2;
        let d = Daemon::start(&["--exec", &says(&tmp, working), "--exec-protocol", "jsonl"]);
        let t = run(&d, "the user's message");
        let history = history_texts(&t);
        let dropped = total.saturating_sub(MANUAL_HISTORY_MAX);
        assert_eq!(
            history.len(),
            total.min(MANUAL_HISTORY_MAX),
            "{total} messages: {} kept",
            history.len()
        );
        assert_eq!(history.last().map(String::as_str), Some("done"), "the newest stays");
        // The oldest go first: the user's message, then m1, m2, ...
        let first = if dropped == 0 {
            "the user's message".to_string()
        } else {
            format!("m{dropped}")
        };
        assert_eq!(history[0], first, "{total} messages, {dropped} dropped");
        let expected: Vec<String> = std::iter::once("the user's message".to_string())
            .chain((1..=working).map(|i| format!("m{i}")))
            .chain(std::iter::once("done".to_string()))
            .skip(dropped)
            .collect();
        assert!(
            history == expected,
            "{total} messages: not the newest {MANUAL_HISTORY_MAX} in order"
        );
    }
}

#[test]
fn history_keeps_at_most_16_mib_the_newest_first() {
    // Twenty 1 MiB texts: the history cannot hold them all; it keeps the
    // newest that fit in 16 MiB (estimated with a small overhead per
    // message), so 15 or 16 of them, then the final `done`.
    const MIB: usize = 1024 * 1024;
    let tmp = TempDir::new("histb");
    let big = tmp.0.join("big.json");
    std::fs::write(
        &big,
        format!("{{\"status\":\"working\",\"text\":\"{}\"}}\n", "h".repeat(MIB)),
    )
    .unwrap();
    let prog = script(
        &tmp,
        &format!(
            "read -r first\n\
             i=1\n\
             while [ $i -le 20 ]; do sed \"s/^{{\\\"status\\\":\\\"working\\\",\\\"text\\\":\\\"h/&$i-/\" {big}; i=$((i+1)); done\n\
             echo '{{\"status\":\"completed\",\"text\":\"done\"}}'",
            big = big.display()
        ),
    );
    let d = Daemon::start(&["--exec", &prog, "--exec-protocol", "jsonl"]);
    let t = run(&d, "x");
    let history = history_texts(&t);
    let bytes: usize = history.iter().map(String::len).sum();
    assert!(
        bytes <= MANUAL_HISTORY_MAX_BYTES,
        "{bytes} bytes of history text kept, over the manual's 16 MiB"
    );
    assert_eq!(history.last().map(String::as_str), Some("done"));
    let big_kept: Vec<usize> = history[..history.len() - 1]
        .iter()
        .map(|m| {
            m.strip_prefix('h')
                .and_then(|m| m.split_once('-'))
                .and_then(|(n, _)| n.parse().ok())
                .unwrap_or_else(|| panic!("not one of the 1 MiB texts: {:.40}", m))
        })
        .collect();
    assert!(
        (15..=16).contains(&big_kept.len()),
        "{} of the 1 MiB texts kept in 16 MiB: {big_kept:?}",
        big_kept.len()
    );
    eprintln!(
        "history of twenty 1 MiB texts: the newest {} kept ({bytes} bytes of text)",
        big_kept.len()
    );
    let newest: Vec<usize> = (21 - big_kept.len()..=20).collect();
    assert_eq!(big_kept, newest, "the newest are kept, in order");
}

// ---- events ----------------------------------------------------------------

#[test]
fn a_running_task_keeps_its_last_4096_events_for_a_resuming_stream() {
    // 5000 artifact chunks (one event each), then the program waits for
    // `go`: its events are the running task's, and a subscriber resuming
    // after sequence L gets L+1.. when the 4096 kept reach back that far,
    // a snapshot when they do not.
    const CHUNKS: usize = 5000;
    let tmp = TempDir::new("events");
    let go = tmp.0.join("go");
    let prog = script(
        &tmp,
        &format!(
            "read -r first\n\
             echo '{{\"artifact\":{{\"artifactId\":\"a\",\"parts\":[{{\"text\":\"x\"}}]}}}}'\n\
             i=2\n\
             while [ $i -le {CHUNKS} ]; do echo '{{\"artifact\":{{\"artifactId\":\"a\",\"parts\":[{{\"text\":\"x\"}}]}},\"append\":true}}'; i=$((i+1)); done\n\
             while [ ! -e {go} ]; do sleep 0.02; done\n\
             echo '{{\"status\":\"completed\"}}'",
            go = go.display()
        ),
    );
    // No keep-alive comments: a stream that has no more events to give
    // times out (and fails) instead of waiting forever.
    let d = Daemon::start(&[
        "--exec",
        &prog,
        "--exec-protocol",
        "jsonl",
        "--set",
        "http.sse_keepalive_ms=3600000",
    ]);
    let id = d.send_async("go");
    assert!(
        wait_for(Duration::from_secs(60), || common::artifact_text(&get(&d, &id)).len()
            == CHUNKS),
        "the {CHUNKS} chunks never all arrived: {} bytes",
        common::artifact_text(&get(&d, &id)).len()
    );
    let subscribe = |after: Option<u64>| {
        let last = after.map(|a| a.to_string());
        let headers: Vec<(&str, &str)> = last.iter().map(|l| ("Last-Event-ID", l.as_str())).collect();
        let mut s = d.stream("SubscribeToTask", json!({"id": id}), &headers);
        s.set_timeout(Duration::from_secs(20));
        s
    };
    // Without Last-Event-ID: a snapshot at the latest sequence.
    let mut now = subscribe(None);
    let snap = now.next_event().expect("a snapshot");
    assert_eq!(snap.kind(), "task", "{}", snap.raw);
    let last = snap.id.expect("the snapshot's sequence");
    drop(now);
    assert!(
        last >= CHUNKS as u64,
        "{CHUNKS} chunks, yet the last sequence is {last}"
    );
    eprintln!(
        "{CHUNKS} chunks: last sequence {last}; resuming after {} replays, after {} snapshots",
        last - MANUAL_EVENTS_MAX,
        last - MANUAL_EVENTS_MAX - 1
    );

    // At the edge: every one of the 4096 kept events, no snapshot.
    let mut edge = subscribe(Some(last - MANUAL_EVENTS_MAX));
    let first = edge.next_event().expect("a replayed event");
    assert_eq!(
        (first.kind(), first.id),
        ("artifactUpdate", Some(last - MANUAL_EVENTS_MAX + 1)),
        "resuming at the edge of the {MANUAL_EVENTS_MAX} kept events: {}",
        first.raw
    );
    let replayed: Vec<SseEvent> = std::iter::once(first)
        .chain((1..MANUAL_EVENTS_MAX).map(|_| edge.next_event().expect("a replayed event")))
        .collect();
    let ids: Vec<u64> = replayed.iter().map(|e| e.id.unwrap()).collect();
    let want: Vec<u64> = (last - MANUAL_EVENTS_MAX + 1..=last).collect();
    assert!(
        ids == want,
        "the replay is not events {}..={last}",
        last - MANUAL_EVENTS_MAX + 1
    );
    drop(edge);

    // One further back: that event is gone, so a snapshot instead.
    let mut behind = subscribe(Some(last - MANUAL_EVENTS_MAX - 1));
    let first = behind.next_event().expect("an event");
    assert_eq!(first.kind(), "task", "one past the kept events: {}", first.raw);
    assert_eq!(first.id, Some(last));
    drop(behind);

    std::fs::write(&go, "").unwrap();
    assert!(wait_for(Duration::from_secs(30), || state(&get(&d, &id))
        == "TASK_STATE_COMPLETED"));
}

// ---- rlimits -----------------------------------------------------------------

/// One line of /proc/PID/limits: (soft, hard) of the limit named `name`.
fn limit(limits: &str, name: &str) -> (String, String) {
    let line = limits
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name:?} in\n{limits}"));
    let mut f = line[name.len()..].split_whitespace();
    (f.next().unwrap().to_string(), f.next().unwrap().to_string())
}

const LIMITS: [&str; 3] = ["Max address space", "Max cpu time", "Max open files"];

#[test]
fn the_three_rlimits_are_the_programs_and_zero_inherits_agentds() {
    // The program reads its own limits (cat's, inherited across exec).
    let d = Daemon::start(&[
        "--exec",
        "cat /proc/self/limits",
        "--set",
        "tasks.rlimit_as_bytes=1073741824",
        "--set",
        "tasks.rlimit_cpu_secs=77",
        "--set",
        "tasks.rlimit_nofile=123",
    ]);
    let t = send(&d, "x");
    assert_eq!(state(&t), "TASK_STATE_COMPLETED", "{}", t["status"]);
    let inside = common::artifact_text(&get(&d, t["id"].as_str().unwrap()));
    for (name, want) in LIMITS.iter().zip(["1073741824", "77", "123"]) {
        assert_eq!(
            limit(&inside, name),
            (want.to_string(), want.to_string()),
            "{name} inside the task:\n{inside}"
        );
    }

    // 0, the default: the program has agentd's own.
    let d = Daemon::start(&["--exec", "cat /proc/self/limits"]);
    let t = send(&d, "x");
    let inside = common::artifact_text(&get(&d, t["id"].as_str().unwrap()));
    let agentd = std::fs::read_to_string(format!("/proc/{}/limits", d.pid())).unwrap();
    for name in LIMITS {
        assert_eq!(
            limit(&inside, name),
            limit(&agentd, name),
            "{name}: the task's\n{inside}\nagentd's\n{agentd}"
        );
    }
}

#[test]
fn the_rlimits_take_effect_inside_the_task() {
    let perl = |code: &str| format!("perl -e '{code}'");
    // RLIMIT_NOFILE: the 200th open fails.
    let d = Daemon::start(&[
        "--exec",
        &perl(
            r#"my @f; for (1..200) { open(my $f, "<", "/dev/null") or do { print "open $_ failed: $!\n"; exit 7 }; push @f, $f } print "all open\n""#,
        ),
        "--set",
        "tasks.rlimit_nofile=64",
    ]);
    let t = send(&d, "x");
    let out = common::artifact_text(&get(&d, t["id"].as_str().unwrap()));
    assert_eq!(state(&t), "TASK_STATE_FAILED", "{out} {}", t["status"]);
    assert!(out.contains("Too many open files"), "{out}");

    // RLIMIT_AS: half a GiB cannot be had in 256 MiB of address space.
    let d = Daemon::start(&[
        "--exec",
        &perl(r#"my $x = "x" x (512 * 1024 * 1024); print "allocated\n""#),
        "--set",
        "tasks.rlimit_as_bytes=268435456",
    ]);
    let t = send(&d, "x");
    let out = common::artifact_text(&get(&d, t["id"].as_str().unwrap()));
    assert_eq!(state(&t), "TASK_STATE_FAILED", "{out} {}", t["status"]);
    assert!(!out.contains("allocated"), "{out}");

    // RLIMIT_CPU: a busy loop is killed once it has used its second of
    // CPU time (which takes at least a second of wall time). Soft and hard
    // limit are the same, so Linux sends SIGKILL at once rather than
    // SIGXCPU first; nothing else here kills (no deadline is set).
    let d = Daemon::start(&[
        "--exec",
        "sh -c 'while :; do :; done'",
        "--set",
        "tasks.rlimit_cpu_secs=1",
    ]);
    let started = Instant::now();
    let t = send(&d, "x");
    let took = started.elapsed();
    assert_eq!(state(&t), "TASK_STATE_FAILED", "{}", t["status"]);
    assert_eq!(terminal_cause(&t), "crashed", "{}", t["status"]);
    assert!(
        status_text(&t).contains("SIGXCPU") || status_text(&t).contains("SIGKILL"),
        "{}",
        t["status"]
    );
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(60),
        "1 s of CPU took {took:?}"
    );
}
