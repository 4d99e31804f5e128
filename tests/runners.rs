//! The exec runner's protocols under load, tested from outside: programs
//! that write a lot before they read, programs that leave a helper holding
//! their pipes, input full of numbers that grow when re-encoded, lines at
//! and just over the jsonl limit, and the exact words of an exit.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{alive, status_text, wait_for, Daemon};
use serde_json::{json, Value};

/// The documented jsonl line limit (4 MiB, without the newline).
const LINE_MAX: usize = 4 * 1024 * 1024;
/// jsonl: after a terminal line the program has one second to exit.
const EXIT_GRACE: Duration = Duration::from_secs(1);
/// For the tests of multi-megabyte messages: their subject is that the
/// message gets through, not liveness, and on a loaded machine a debug
/// worker decoding one has been seen to miss the default 15 s stall
/// timeout before its first pong (reported; see the issue-24 notes).
const NO_STALL: [&str; 2] = ["--set", "tasks.stall_timeout_ms=300000"];

fn tmp_script(tmp: &common::TempDir, body: &str) -> String {
    let p = common::script(&tmp.0, &format!("p{}.sh", common::new_id()), body);
    p.to_str().unwrap().to_string()
}

fn get(d: &Daemon, id: &str) -> Value {
    d.ok("GetTask", json!({"id": id}))
}

/// Sends `message` (raw JSON text) without waiting; returns the task id.
fn send_raw_async(d: &Daemon, message: &str) -> String {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{{"message":{message},"configuration":{{"returnImmediately":true}}}}}}"#
    );
    let resp = d.post(&body, &[("A2A-Version", "1.0")]);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let v = resp.json();
    v["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {v}"))
        .to_string()
}

fn text_message(text: &str) -> String {
    common::user_message(text).to_string()
}

/// A message whose one data part is `n` copies of `1e15`: 5 bytes each as
/// sent, 19 once serde_json writes them back.
fn numbers_message(n: usize) -> String {
    let numbers = vec!["1e15"; n].join(",");
    format!(
        r#"{{"messageId":"{}","role":"ROLE_USER","parts":[{{"data":[{numbers}]}}]}}"#,
        common::new_id()
    )
}

/// Polls GetTask until the task leaves SUBMITTED/WORKING (or the time is up).
fn wait_terminal(d: &Daemon, id: &str, timeout: Duration) -> Value {
    let mut task = Value::Null;
    let ended = wait_for(timeout, || {
        task = get(d, id);
        let s = task["status"]["state"].as_str().unwrap_or("");
        !matches!(s, "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING")
    });
    assert!(ended, "task {id} still running after {timeout:?}: {}", brief(&task));
    task
}

/// A task without its (possibly huge) artifacts and history, for messages.
fn brief(task: &Value) -> Value {
    json!({"status": task["status"], "artifacts": task["artifacts"].as_array().map(Vec::len)})
}

fn assert_state(task: &Value, state: &str) {
    assert_eq!(task["status"]["state"], state, "{}", brief(task));
}

/// Reads the pid the program wrote into `path`.
fn pid_in(path: &Path) -> i32 {
    common::read_when_ready(path, Duration::from_secs(10))
        .trim()
        .parse()
        .expect("a pid")
}

fn assert_gone(pid: i32, what: &str) {
    assert!(
        wait_for(Duration::from_secs(10), || !alive(pid)),
        "{what} {pid} outlived its task"
    );
}

// ---- jsonl -----------------------------------------------------------------

/// The program prints ~200 KB (more than a pipe holds) before it reads its
/// 200 KB message: agentd must read while it writes.
#[test]
fn jsonl_program_that_writes_before_reading_completes() {
    let tmp = common::TempDir::new("rn");
    let prog = tmp_script(
        &tmp,
        r#"line='{"artifact":{"artifactId":"noise","parts":[{"text":"'$(head -c 1000 /dev/zero | tr '\0' x)'"}]},"append":true}'
i=0
while [ $i -lt 200 ]; do echo "$line"; i=$((i+1)); done
read -r msg
echo '{"status":"completed","text":"read '${#msg}' bytes"}'"#,
    );
    let d = Daemon::start(&["--exec", &prog, "--exec-protocol", "jsonl"]);
    let id = send_raw_async(&d, &text_message(&"y".repeat(200 * 1024)));
    let t = wait_terminal(&d, &id, Duration::from_secs(30));
    assert_state(&t, "TASK_STATE_COMPLETED");
    let read: usize = status_text(&t)
        .strip_prefix("read ")
        .and_then(|s| s.strip_suffix(" bytes"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{}", brief(&t)));
    assert!(read > 200 * 1024, "the whole message reached the program: {read}");
    let noise: usize = t["artifacts"][0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["text"].as_str().map_or(0, str::len))
        .sum();
    assert_eq!(noise, 200 * 1000, "every line before the read arrived");
}

/// The program says `completed` and exits, leaving a helper that holds its
/// stdin, stdout and stderr: the task ends within the grace anyway, and the
/// helper goes with the task's process group.
#[test]
fn jsonl_completed_while_a_helper_holds_the_pipes() {
    let tmp = common::TempDir::new("rn");
    let pidfile = tmp.0.join("helper.pid");
    let prog = tmp_script(
        &tmp,
        &format!(
            // A background job's stdin is /dev/null unless given: hand it ours.
            r#"read -r msg
exec 3<&0
sleep 30 <&3 3<&- &
echo $! > {}
echo '{{"status":"completed","text":"done"}}'
exit 0"#,
            pidfile.display()
        ),
    );
    let d = Daemon::start(&["--exec", &prog, "--exec-protocol", "jsonl"]);
    let id = send_raw_async(&d, &text_message("go"));
    let helper = pid_in(&pidfile);
    // The bound is the wait's: a task that waited for the helper's pipes
    // to close would take its 30 s.
    let t = wait_terminal(&d, &id, EXIT_GRACE + Duration::from_secs(5));
    assert_state(&t, "TASK_STATE_COMPLETED");
    assert_eq!(status_text(&t), "done");
    assert_gone(helper, "helper");
}

/// The program never reads its 200 KB message (more than a pipe holds):
/// says `completed` and exits, and its helper holds stdin without reading.
#[test]
fn jsonl_completed_without_reading_a_big_message() {
    let tmp = common::TempDir::new("rn");
    let pidfile = tmp.0.join("helper.pid");
    let prog = tmp_script(
        &tmp,
        &format!(
            r#"exec 3<&0
sleep 30 <&3 3<&- &
echo $! > {}
echo '{{"status":"completed"}}'
exit 0"#,
            pidfile.display()
        ),
    );
    let d = Daemon::start(&["--exec", &prog, "--exec-protocol", "jsonl"]);
    let id = send_raw_async(&d, &text_message(&"y".repeat(200 * 1024)));
    let helper = pid_in(&pidfile);
    let t = wait_terminal(&d, &id, EXIT_GRACE + Duration::from_secs(5));
    assert_state(&t, "TASK_STATE_COMPLETED");
    assert_gone(helper, "helper");
}

/// The program exits without a verdict while a helper holds its pipes.
#[test]
fn jsonl_exit_while_a_helper_holds_the_pipes() {
    let tmp = common::TempDir::new("rn");
    let pidfile = tmp.0.join("helper.pid");
    let prog = tmp_script(
        &tmp,
        &format!(
            r#"read -r msg
exec 3<&0
sleep 30 <&3 3<&- &
echo $! > {}
echo '{{"status":"working"}}'
exit 0"#,
            pidfile.display()
        ),
    );
    let d = Daemon::start(&["--exec", &prog, "--exec-protocol", "jsonl"]);
    let id = send_raw_async(&d, &text_message("go"));
    let helper = pid_in(&pidfile);
    let t = wait_terminal(&d, &id, EXIT_GRACE + Duration::from_secs(5));
    assert_state(&t, "TASK_STATE_COMPLETED");
    assert_gone(helper, "helper");
}

/// A valid 3 MB message full of numbers that grow 3.8× when re-encoded
/// reaches the program and the task completes.
#[test]
fn jsonl_big_message_of_growing_numbers_completes() {
    let tmp = common::TempDir::new("rn");
    let prog = tmp_script(
        &tmp,
        r#"read -r msg
echo '{"status":"completed","text":"read '${#msg}' bytes"}'"#,
    );
    let d = Daemon::start(&["--exec", &prog, "--exec-protocol", "jsonl", NO_STALL[0], NO_STALL[1]]);
    let message = numbers_message(600_000);
    assert!(message.len() > 3_000_000, "{}", message.len());
    let id = send_raw_async(&d, &message);
    let t = wait_terminal(&d, &id, Duration::from_secs(60));
    assert_state(&t, "TASK_STATE_COMPLETED");
    assert!(status_text(&t).starts_with("read "), "{}", brief(&t));
}

/// Writes one jsonl artifact line of `1e15`s padded with spaces to exactly
/// `len` bytes (without the newline), then `completed`.
/// Returns the program and how many numbers the line holds.
fn line_of_numbers_program(tmp: &common::TempDir, len: usize) -> (String, usize) {
    let head = r#"{"artifact":{"artifactId":"big","parts":[{"data":["#;
    let tail = "]}]}}";
    let n = (len - head.len() - tail.len()) / 5;
    let mut line = format!("{head}{}{tail}", vec!["1e15"; n].join(","));
    line.push_str(&" ".repeat(len - line.len()));
    assert_eq!(line.len(), len);
    let file = tmp.0.join(format!("line{}", common::new_id()));
    std::fs::write(&file, format!("{line}\n")).unwrap();
    let prog = tmp_script(
        tmp,
        &format!(
            "read -r msg\ncat {}\necho '{{\"status\":\"completed\"}}'",
            file.display()
        ),
    );
    (prog, n)
}

#[test]
fn jsonl_line_at_the_limit_of_growing_numbers_is_accepted() {
    let tmp = common::TempDir::new("rn");
    let (prog, n) = line_of_numbers_program(&tmp, LINE_MAX);
    let d = Daemon::start(&["--exec", &prog, "--exec-protocol", "jsonl", NO_STALL[0], NO_STALL[1]]);
    let id = send_raw_async(&d, &text_message("go"));
    let t = wait_terminal(&d, &id, Duration::from_secs(60));
    assert_state(&t, "TASK_STATE_COMPLETED");
    let data = t["artifacts"][0]["parts"][0]["data"].as_array().map_or(0, Vec::len);
    assert_eq!(data, n, "every number arrived");
}

#[test]
fn jsonl_line_over_the_limit_fails_naming_the_limit() {
    let tmp = common::TempDir::new("rn");
    let (prog, _) = line_of_numbers_program(&tmp, LINE_MAX + 1);
    let d = Daemon::start(&["--exec", &prog, "--exec-protocol", "jsonl"]);
    let id = send_raw_async(&d, &text_message("go"));
    let t = wait_terminal(&d, &id, Duration::from_secs(60));
    assert_state(&t, "TASK_STATE_FAILED");
    assert_eq!(common::terminal_cause(&t), "failed", "{}", brief(&t));
    assert_eq!(
        status_text(&t),
        "the program's output line 1 is not valid jsonl: it is longer than the jsonl line \
         limit of 4194304 bytes (4 MiB)"
    );
}

// ---- echo ------------------------------------------------------------------

#[test]
fn echo_big_message_of_growing_numbers_completes() {
    let d = Daemon::start(&NO_STALL);
    let id = send_raw_async(&d, &numbers_message(600_000));
    let t = wait_terminal(&d, &id, Duration::from_secs(60));
    assert_state(&t, "TASK_STATE_COMPLETED");
    let data = t["artifacts"][0]["parts"][0]["data"].as_array().map_or(0, Vec::len);
    assert_eq!(data, 600_000);
    assert_eq!(t["artifacts"][0]["parts"][0]["data"][0], json!(1e15));
}

/// The channel follows http.body_max_bytes: a 6 MB message (23 MB once
/// re-encoded, over the default-sized channel) within a raised body limit
/// completes, so the worker learnt the daemon's limit.
#[test]
fn echo_message_within_a_raised_body_limit_completes() {
    let d = Daemon::start(&["--set", "http.body_max_bytes=8388608", NO_STALL[0], NO_STALL[1]]);
    let message = numbers_message(1_200_000);
    assert!(message.len() > 6_000_000);
    let id = send_raw_async(&d, &message);
    let t = wait_terminal(&d, &id, Duration::from_secs(120));
    assert_state(&t, "TASK_STATE_COMPLETED");
    let data = t["artifacts"][0]["parts"][0]["data"].as_array().map_or(0, Vec::len);
    assert_eq!(data, 1_200_000);
}

// ---- text ------------------------------------------------------------------

/// The program prints ~200 KB before it reads its 200 KB of stdin.
#[test]
fn text_program_that_writes_before_reading_completes() {
    let tmp = common::TempDir::new("rn");
    let prog = tmp_script(&tmp, "head -c 204800 /dev/zero | tr '\\0' x\necho\nwc -c");
    let d = Daemon::start(&["--exec", &prog]);
    let id = send_raw_async(&d, &text_message(&"y".repeat(200 * 1024)));
    let t = wait_terminal(&d, &id, Duration::from_secs(30));
    assert_state(&t, "TASK_STATE_COMPLETED");
    let out: String = t["artifacts"][0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(out.len(), 204800 + 1 + "204800\n".len(), "all output arrived");
    assert!(out.ends_with("\n204800\n"), "the program read all its input");
}

/// The program exits while a helper holds its stdout (and stdin, stderr):
/// the task ends after the pipe drain, with the output so far.
#[test]
fn text_exit_while_a_helper_holds_the_pipes() {
    let tmp = common::TempDir::new("rn");
    let pidfile = tmp.0.join("helper.pid");
    let prog = tmp_script(
        &tmp,
        &format!(
            r#"exec 3<&0
sleep 30 <&3 3<&- &
echo $! > {}
echo before"#,
            pidfile.display()
        ),
    );
    let d = Daemon::start(&["--exec", &prog]);
    let id = send_raw_async(&d, &text_message("go"));
    let helper = pid_in(&pidfile);
    // The bound is the wait's: a task that waited for the helper's pipes
    // to close would take its 30 s, not the 500 ms drain.
    let t = wait_terminal(&d, &id, Duration::from_secs(5));
    assert_state(&t, "TASK_STATE_COMPLETED");
    assert_eq!(t["artifacts"][0]["parts"][0]["text"], "before\n", "{}", brief(&t));
    assert_gone(helper, "helper");
}

// ---- exit texts --------------------------------------------------------------

#[test]
fn exit_texts_are_the_manuals() {
    let tmp = common::TempDir::new("rn");
    let d = Daemon::start(&["--exec", &tmp_script(&tmp, "exit 3")]);
    let t = wait_terminal(&d, &send_raw_async(&d, &text_message("x")), Duration::from_secs(10));
    assert_state(&t, "TASK_STATE_FAILED");
    assert_eq!(status_text(&t), "the program ended with exit status 3");
    assert_eq!(common::terminal_cause(&t), "failed");

    let d = Daemon::start(&["--exec", &tmp_script(&tmp, "echo 'about to crash' >&2; kill -SEGV $$")]);
    let t = wait_terminal(&d, &send_raw_async(&d, &text_message("x")), Duration::from_secs(10));
    assert_state(&t, "TASK_STATE_FAILED");
    assert_eq!(
        status_text(&t),
        "the program was killed by signal 11 (SIGSEGV, exit status 139): about to crash"
    );
    assert_eq!(common::terminal_cause(&t), "crashed");

    let d = Daemon::start(&[
        "--exec",
        &tmp_script(&tmp, "read l; exit 4"),
        "--exec-protocol",
        "jsonl",
    ]);
    let t = wait_terminal(&d, &send_raw_async(&d, &text_message("x")), Duration::from_secs(10));
    assert_eq!(status_text(&t), "the program ended with exit status 4");
}
