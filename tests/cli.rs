//! The command line as a careful user meets it, one test per surprise of
//! "the first hour, part two": `--exec` with `--peer`, `--help` on every
//! command, empty messages, what an interrupted or timed-out `send` says
//! (and that it says it on stderr only), connection hints, mistyped
//! endpoints and extra arguments, fractional timeouts, key suggestions,
//! what `serve --check` checks and says it did not, `--no-wait`'s next
//! steps, no status line that repeats the state, and the workers' command
//! line in `ps`. Each checks the exit code and the message.

mod common;

use std::io::Read;
use std::os::unix::net::UnixListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{wait_for, Daemon, TempDir, BIN};
use serde_json::{json, Value};

fn agentd(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .output()
        .expect("run agentd")
}

/// `agentd ARGS` with XDG_RUNTIME_DIR at `runtime`, so the default socket
/// is `runtime/agentd/agentd.sock`.
fn agentd_in(runtime: &std::path::Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("XDG_RUNTIME_DIR", runtime)
        .stdin(Stdio::null())
        .output()
        .expect("run agentd")
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

/// The id in a `task ID …` line, or in `task ID goes on running`.
fn task_id_in(text: &str) -> Option<String> {
    text.split("task ")
        .skip(1)
        .filter_map(|rest| rest.split([' ', '\n', ';']).next())
        .find(|id| id.len() == 36 && id.matches('-').count() == 4)
        .map(String::from)
}

#[test]
fn exec_and_peer_together_the_last_one_given_wins() {
    let peer = Daemon::start(&[]);
    let peer_ep = endpoint(&peer);
    let o = agentd(&["serve", "--check", "--exec", "cat", "--peer", &peer_ep]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = out(&o);
    assert!(text.contains("runner peer;"), "{text}");
    assert!(
        text.contains("note: agent.exec is set but unused: the runner is peer (the last of agent.exec and agent.peer set picks the runner)"),
        "{text}"
    );
    let o = agentd(&["serve", "--check", "--peer", &peer_ep, "--exec", "cat"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("runner exec;"), "{}", out(&o));
    assert!(out(&o).contains("note: agent.peer is set but unused"), "{}", out(&o));
    // A flag overrides the file's key, whichever runner the file picked.
    let dir = TempDir::new("runner");
    let conf = dir.0.join("agentd.conf");
    std::fs::write(&conf, "agent.exec: cat\n").unwrap();
    let o = agentd(&[
        "serve",
        "--check",
        "--config",
        conf.to_str().unwrap(),
        "--peer",
        &peer_ep,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("runner peer;"), "{}", out(&o));
    // agent.runner names one outright.
    let o = agentd(&[
        "serve",
        "--check",
        "--set",
        "agent.runner=exec",
        "--exec",
        "cat",
        "--peer",
        &peer_ep,
    ]);
    assert!(out(&o).contains("runner exec;"), "{}", out(&o));
    // Serving with both: the peer runs the task, and the log says what was left out.
    let front = Daemon::start(&["--exec", "tr a-z A-Z", "--peer", &peer_ep]);
    let o = agentd(&["send", &endpoint(&front), "hello"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("hello"), "the echo peer answered: {}", out(&o));
    assert!(
        front
            .log_text()
            .contains("config.unused_key agent.exec is set but unused"),
        "{}",
        front.log_text()
    );
}

#[test]
fn every_command_answers_help_without_dialling() {
    // No daemon anywhere: help must not need one.
    let runtime = TempDir::new("nohelp");
    for cmd in [
        "card",
        "send",
        "get",
        "list",
        "cancel",
        "subscribe",
        "events",
        "command",
    ] {
        for flag in ["--help", "-h"] {
            let o = agentd_in(&runtime.0, &[cmd, flag]);
            assert_eq!(o.status.code(), Some(0), "{cmd} {flag}: {}", err(&o));
            assert!(
                out(&o).starts_with(&format!("Usage: agentd {cmd} ")),
                "{cmd} {flag}: {}",
                out(&o)
            );
            assert!(out(&o).contains("--timeout SECS"), "{cmd} {flag}: {}", out(&o));
            assert_eq!(err(&o), "", "{cmd} {flag}");
        }
    }
    // After an endpoint and other options too.
    let o = agentd_in(&runtime.0, &["send", "unix:///nowhere.sock", "--stream", "--help"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("--no-wait"), "{}", out(&o));
    // The overview points at the manual where it is, installed or not.
    let o = agentd(&["help"]);
    assert!(out(&o).contains("man -l man/agentd.8"), "{}", out(&o));
    assert!(out(&o).contains("agentd COMMAND --help"), "{}", out(&o));
}

#[test]
fn an_empty_message_is_a_usage_error_and_sends_nothing() {
    let d = Daemon::start(&[]);
    let ep = endpoint(&d);
    for args in [
        vec!["send", ep.as_str()],
        vec!["send", &ep, ""],
        vec!["send", &ep, "  ", "\t"],
    ] {
        let o = agentd(&args); // stdin is /dev/null
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", err(&o));
        let e = err(&o);
        assert!(e.contains("the message is empty"), "{args:?}: {e}");
        assert!(e.contains("echo hello | agentd send ENDPOINT"), "{args:?}: {e}");
        assert_eq!(out(&o), "");
    }
    assert_eq!(task_count(&d), 0, "an empty message created a task");
}

/// Spawns `agentd ARGS` with stdin piped (and held open) and stdout and
/// stderr piped.
fn spawn_client(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Whether the client's Ctrl-C handler (its `sigint` thread) is in place.
fn handles_sigint(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "sigint"))
}

fn interrupt(mut child: Child) -> (Option<i32>, String, String) {
    common::signal(child.id() as i32, libc::SIGINT);
    let status = common::wait_child(&mut child, Duration::from_secs(10)).expect("the client exits on Ctrl-C");
    let (mut o, mut e) = (String::new(), String::new());
    child.stdout.take().unwrap().read_to_string(&mut o).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut e).unwrap();
    (status.code(), o, e)
}

#[test]
fn ctrl_c_before_anything_was_sent_says_so() {
    let d = Daemon::start(&["--exec", "sleep 30"]);
    // No TEXT: it waits for stdin, which stays open.
    let child = spawn_client(&["send", &endpoint(&d)]);
    let pid = child.id();
    assert!(wait_for(Duration::from_secs(10), || handles_sigint(pid)));
    let (code, o, e) = interrupt(child);
    assert_eq!(code, Some(130), "{e}");
    assert!(e.contains("agentd: interrupted; nothing was sent"), "{e}");
    assert!(!e.contains("goes on running"), "{e}");
    assert_eq!(o, "", "nothing on stdout");
    assert_eq!(task_count(&d), 0);
}

#[test]
fn an_interrupted_blocking_send_names_its_task_on_stderr_only() {
    let d = Daemon::start(&["--exec", "sleep 30"]);
    let ep = endpoint(&d);
    let child = spawn_client(&["send", &ep, "hi"]);
    // Its task is under way (the client had the stream's first event long before).
    let working = || d.ok("ListTasks", json!({}))["tasks"][0]["status"]["state"] == "TASK_STATE_WORKING";
    assert!(wait_for(Duration::from_secs(10), working), "no task started");
    let id = d.ok("ListTasks", json!({}))["tasks"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, o, e) = interrupt(child);
    assert_eq!(code, Some(130), "{e}");
    assert!(e.contains(&format!("interrupted; task {id} goes on running")), "{e}");
    assert!(e.contains(&format!("`agentd cancel {ep} {id}`")), "{e}");
    assert_eq!(o, "", "an interrupted client writes nothing on stdout");
    // It does go on.
    let state = d.ok("GetTask", json!({ "id": id }))["status"]["state"].clone();
    assert_eq!(state, "TASK_STATE_WORKING");
}

#[test]
fn a_timed_out_blocking_send_names_its_task_and_takes_a_fraction() {
    let d = Daemon::start(&["--exec", "sleep 30"]);
    let ep = endpoint(&d);
    let started = Instant::now();
    let o = agentd(&["send", &ep, "--timeout", "1.5", "hi"]);
    let took = started.elapsed();
    assert_eq!(o.status.code(), Some(5), "{}", err(&o));
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(15),
        "{took:?}"
    );
    let e = err(&o);
    assert!(e.contains("no answer within 1.5 s (--timeout)"), "{e}");
    let id = task_id_in(&e).unwrap_or_else(|| panic!("no task named: {e}"));
    assert!(e.contains(&format!("`agentd cancel {ep} {id}`")), "{e}");
    assert_eq!(out(&o), "");
    let state = d.ok("GetTask", json!({ "id": id }))["status"]["state"].clone();
    assert_eq!(state, "TASK_STATE_WORKING");
    // Not a number of seconds, or not more than none: usage errors.
    for bad in ["soon", "0", "-1"] {
        let o = agentd(&["list", &ep, "--timeout", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", err(&o));
        assert!(err(&o).contains("--timeout: "), "{bad}: {}", err(&o));
    }
}

#[test]
fn timeout_fractions_bound_a_silent_endpoint() {
    let dir = TempDir::new("silent");
    let path = dir.0.join("silent.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let _held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        for c in listener.incoming().flatten() {
            conns.push(c);
        }
    });
    let started = Instant::now();
    let o = agentd(&["get", &format!("unix://{}", path.display()), "t1", "--timeout", "0.5"]);
    let took = started.elapsed();
    assert_eq!(o.status.code(), Some(5), "{}", err(&o));
    assert!(err(&o).contains("no answer within 0.5 s (--timeout)"), "{}", err(&o));
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(10),
        "{took:?}"
    );
}

#[test]
fn connection_errors_ask_whether_serve_runs_there() {
    let dir = TempDir::new("unreach");
    let missing = dir.0.join("none.sock");
    let o = agentd(&["list", &format!("unix://{}", missing.display())]);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(
        err(&o).contains("no socket there; is `agentd serve` running, listening there?"),
        "{}",
        err(&o)
    );
    // A socket file nobody listens on any more.
    let stale = dir.0.join("stale.sock");
    drop(UnixListener::bind(&stale).unwrap());
    let o = agentd(&["card", &format!("unix://{}", stale.display())]);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(
        err(&o).contains("nothing listens on it (connection refused); is `agentd serve` running there?"),
        "{}",
        err(&o)
    );
    // No ENDPOINT: say it was the default socket, and which.
    let o = agentd_in(&dir.0, &["list"]);
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains(&format!("unix://{}/agentd/agentd.sock", dir.0.display())),
        "{e}"
    );
    assert!(e.contains("no ENDPOINT was given"), "{e}");
}

#[test]
fn a_mistyped_endpoint_or_extra_arguments_are_refused() {
    // A daemon on the default socket: nothing may reach it by mistake.
    let runtime = TempDir::new("xdg");
    let socket = runtime.0.join("agentd/agentd.sock");
    let d = Daemon::start_at(TempDir::new("it"), socket, &[]);
    for word in ["tmp/agentd.sock", "agentd.sock", "unix:/tmp/agentd.sock"] {
        let o = agentd_in(&runtime.0, &["send", word, "hello"]);
        assert_eq!(o.status.code(), Some(2), "{word}: {}", err(&o));
        assert!(
            err(&o).contains(&format!("`{word}` looks like a mistyped ENDPOINT")),
            "{word}: {}",
            err(&o)
        );
    }
    let o = agentd_in(&runtime.0, &["send", "tmp/agentd.sock", "hello"]);
    assert!(err(&o).contains("(here: unix:///"), "{}", err(&o));
    assert_eq!(task_count(&d), 0, "a mistyped endpoint was sent as text");
    // After `--` it is text, to the default socket.
    let o = agentd_in(&runtime.0, &["send", "--", "tmp/agentd.sock"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("tmp/agentd.sock"), "{}", out(&o));
    let ep = endpoint(&d);
    let cases: [(&[&str], &str); 5] = [
        (
            &["list", &ep, "extra", "junk"],
            "unexpected `extra junk`: `list` takes no arguments after the ENDPOINT",
        ),
        (&["card", &ep, "x"], "unexpected `x`: `card` takes no arguments"),
        (&["get", &ep, "a", "b"], "unexpected `b`: `get` takes one TASK_ID"),
        (
            &["list", &ep, "--stream"],
            "--stream is an option of `send`, not of `list`",
        ),
        (
            &["send", &ep, "--strem", "hi"],
            "unknown option `--strem` (did you mean `--stream`?)",
        ),
    ];
    for (args, says) in cases {
        let o = agentd(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", err(&o));
        assert!(err(&o).contains(says), "{args:?}: {}", err(&o));
    }
    assert_eq!(task_count(&d), 1, "only the `--` send made a task");
}

#[test]
fn unknown_keys_and_options_name_the_nearest() {
    let o = agentd(&["serve", "--check", "--set", "tasks.max_runing=4"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("--set: unknown key `tasks.max_runing` (did you mean `tasks.max_running`?)"),
        "{}",
        err(&o)
    );
    let o = agentd(&["serve", "--exce", "cat"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("unknown option `--exce` (did you mean `--exec`?"),
        "{}",
        err(&o)
    );
}

/// A unix server answering every request with `card` as the agent card.
fn fake_agent(path: &std::path::Path, card: Value) {
    let listener = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for mut c in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut c, &mut buf);
            let body = card.to_string();
            let _ = std::io::Write::write_all(
                &mut c,
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    });
}

#[test]
fn check_catches_a_missing_script_and_reads_the_peers_card() {
    // The README's example with a typo in the script's name.
    let o = agentd(&["serve", "--check", "--exec", "python3 examples/agents/trip_planer.py"]);
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    let e = err(&o);
    assert!(
        e.contains("agent.exec: the script `examples/agents/trip_planer.py` does not exist"),
        "{e}"
    );
    assert!(e.contains("did you mean `trip_planner.py`?"), "{e}");
    // Start-up refuses it too, before binding anything.
    let dir = TempDir::new("script");
    let sock = dir.0.join("a.sock");
    let o = agentd(&[
        "serve",
        "--listen",
        &format!("unix://{}", sock.display()),
        "--exec",
        "python3 examples/agents/trip_planer.py",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(!sock.exists());
    // Spelt right, it is found and named, and what was not checked is said.
    let o = agentd(&["serve", "--check", "--exec", "python3 examples/agents/trip_planner.py"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("examples/agents/trip_planner.py"), "{}", out(&o));
    assert!(
        out(&o).contains("not checked: whether the listen addresses can be bound"),
        "{}",
        out(&o)
    );
    assert!(
        out(&o).contains("what the program does with a task's message"),
        "{}",
        out(&o)
    );

    // A peer that is not there: not an error (it may start later), but said.
    let gone = format!("unix://{}", dir.0.join("gone.sock").display());
    let o = agentd(&["serve", "--check", "--peer", &gone]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        out(&o).contains(&format!("agent.peer {gone} was not reached (no socket there)")),
        "{}",
        out(&o)
    );
    assert!(
        out(&o).contains(&format!("the card of the peer at {gone}")),
        "{}",
        out(&o)
    );
    // A peer that answers with agentd's binding.
    let peer = Daemon::start(&[]);
    let o = agentd(&["serve", "--check", "--peer", &endpoint(&peer)]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("answers: `agentd`"), "{}", out(&o));
    assert!(!out(&o).contains("the card of the peer"), "{}", out(&o));
    // A peer whose card offers only HTTP: refused.
    let http_only = dir.0.join("http.sock");
    fake_agent(
        &http_only,
        json!({"name": "web", "version": "1", "supportedInterfaces": [
            {"url": "http://127.0.0.1:1/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}),
    );
    let o = agentd(&["serve", "--check", "--peer", &format!("unix://{}", http_only.display())]);
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(err(&o).contains("agent.peer: "), "{}", err(&o));
    assert!(err(&o).contains("offers no interface with binding"), "{}", err(&o));
}

#[test]
fn no_wait_says_how_to_follow_see_and_cancel() {
    let d = Daemon::start(&["--exec", "sleep 30"]);
    let ep = endpoint(&d);
    let o = agentd(&["send", &ep, "--no-wait", "hi"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = out(&o);
    let id = task_id_in(&text).unwrap_or_else(|| panic!("no task line: {text}"));
    for line in [
        format!("follow it: agentd subscribe {ep} {id}"),
        format!("see it:    agentd get {ep} {id}"),
        format!("cancel it: agentd cancel {ep} {id}"),
    ] {
        assert!(text.contains(&line), "{line}: {text}");
    }
    let o = agentd(&["send", &ep, "--no-wait", "--stream", "hi"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("--stream and --no-wait do not go together"),
        "{}",
        err(&o)
    );
}

#[test]
fn a_status_that_only_repeats_the_state_is_not_printed() {
    let d = Daemon::start(&[]);
    let o = agentd(&["send", &endpoint(&d), "hello"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = out(&o);
    assert!(text.lines().next().is_some_and(|l| l.ends_with(" completed")), "{text}");
    assert!(!text.contains("status:"), "{text}");
    assert!(text.contains("hello"), "{text}");
    // A status that says more is shown.
    let failing = Daemon::start(&["--exec", "sh -c 'echo oops >&2; exit 3'"]);
    let o = agentd(&["send", &endpoint(&failing), "hello"]);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    assert!(out(&o).contains("  status: "), "{}", out(&o));
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " ").trim_end().to_string())
        .unwrap_or_default()
}

#[test]
fn workers_show_a_command_line_of_their_own() {
    let d = Daemon::start(&["--exec", "sleep 30", "--set", "tasks.prespawn=1"]);
    let pid = d.pid();
    assert!(
        wait_for(Duration::from_secs(10), || !common::idle_workers(pid).is_empty()),
        "no idle worker"
    );
    let idle = common::idle_workers(pid)[0];
    assert!(
        wait_for(Duration::from_secs(10), || cmdline(idle) == "agentd-idle"),
        "an idle worker's command line: {:?}",
        cmdline(idle)
    );
    let fork_server = common::fork_servers(pid)[0];
    assert_eq!(cmdline(fork_server), "agentd __forkserver");
    d.send_async("hi");
    assert!(
        wait_for(Duration::from_secs(10), || common::task_workers(pid)
            .iter()
            .any(|w| cmdline(*w) == "agentd-task")),
        "a task worker's command line: {:?}",
        common::task_workers(pid)
            .iter()
            .map(|w| cmdline(*w))
            .collect::<Vec<_>>()
    );
}
