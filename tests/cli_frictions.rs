//! The command line as a new user meets it, part three: each test is one
//! friction found by trying agentd cold (issue 39) — a message over the
//! body limit that must be a refusal naming the limit, output `subscribe`
//! must not drop, `help COMMAND` and a did-you-mean for every command, a
//! warning where shell syntax does nothing, the MCP configuration with the
//! caller's own socket, a silent socket that must not hang the client, no
//! empty artifact block, and an `events --from` line that says what comes.
//! Each checks the exit code and the text.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{wait_for, Daemon, TempDir, BIN};
use serde_json::json;

fn agentd(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .output()
        .expect("run agentd")
}

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

/// Every command `agentd` takes.
const COMMANDS: [&str; 12] = [
    "serve",
    "card",
    "send",
    "get",
    "list",
    "cancel",
    "subscribe",
    "events",
    "command",
    "mcp",
    "help",
    "version",
];

#[test]
fn help_command_works_for_every_command() {
    for cmd in COMMANDS {
        let o = agentd(&["help", cmd]);
        assert_eq!(o.status.code(), Some(0), "help {cmd}: {}", err(&o));
        assert_eq!(err(&o), "", "help {cmd}");
        assert!(out(&o).contains("Usage:"), "help {cmd}: {}", out(&o));
        // The same text as the command's own --help, where it has one.
        if !matches!(cmd, "help" | "version") {
            let own = agentd(&[cmd, "--help"]);
            assert_eq!(own.status.code(), Some(0), "{cmd} --help: {}", err(&own));
            assert_eq!(out(&o), out(&own), "help {cmd} and {cmd} --help differ");
        }
    }
    assert!(out(&agentd(&["help", "version"])).starts_with("Usage: agentd version"));
    assert_eq!(out(&agentd(&["help", "help"])), out(&agentd(&["help"])));
    // What is not a command is still refused, with the nearest named.
    let o = agentd(&["help", "sned"]);
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(
        err(&o).contains("no help on `sned` (did you mean `send`?)"),
        "{}",
        err(&o)
    );
}

#[test]
fn a_mistyped_command_names_the_nearest() {
    for (typo, near) in [
        ("sned", "send"),
        ("lsit", "list"),
        ("serv", "serve"),
        ("subscibe", "subscribe"),
    ] {
        let o = agentd(&[typo, "unix:///nowhere.sock"]);
        assert_eq!(o.status.code(), Some(2), "{typo}: {}", err(&o));
        assert!(
            err(&o).starts_with(&format!("agentd: unknown command `{typo}` (did you mean `{near}`?")),
            "{typo}: {}",
            err(&o)
        );
        assert_eq!(out(&o), "", "{typo}");
    }
    // Nothing near: the overview, as before.
    let o = agentd(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!err(&o).contains("did you mean"), "{}", err(&o));
    assert!(err(&o).contains("Usage:"), "{}", err(&o));
}

#[test]
fn shell_syntax_in_exec_is_warned_about_with_the_line_that_runs_a_shell() {
    let o = agentd(&["serve", "--check", "--exec", "tr a-z A-Z | rev"]);
    assert_eq!(o.status.code(), Some(0), "still valid: {}", err(&o));
    let text = out(&o);
    let warning = text
        .lines()
        .find(|l| l.starts_with("agentd: warning: "))
        .unwrap_or_else(|| panic!("no warning: {text}"));
    assert!(
        warning.contains("no shell runs agent.exec, so `tr` gets `|` as a plain argument"),
        "{warning}"
    );
    assert!(text.contains("configuration is valid"), "{text}");
    // The line it suggests runs the pipe, and draws no warning.
    let suggested = warning
        .split("write --exec '")
        .nth(1)
        .and_then(|rest| rest.strip_suffix('\''))
        .unwrap_or_else(|| panic!("no --exec to write: {warning}"));
    assert_eq!(suggested, r#"sh -c "tr a-z A-Z | rev""#);
    let o = agentd(&["serve", "--check", "--exec", suggested]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!out(&o).contains("warning"), "{}", out(&o));
    let d = Daemon::start(&["--exec", suggested]);
    let o = agentd(&["send", &endpoint(&d), "hello"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("OLLEH"), "{}", out(&o));
    assert!(!d.log_text().contains("config.shell_syntax"), "{}", d.log_text());
    // Serving the unshelled line says so in the log too.
    let d = Daemon::start(&["--exec", "tr a-z A-Z | rev"]);
    assert!(
        d.log_text().contains("config.shell_syntax no shell runs agent.exec"),
        "{}",
        d.log_text()
    );
}

/// An MCP client's configuration as `agentd mcp --help` prints it: the
/// `args` line's endpoint.
fn mcp_config_endpoint(help: &str) -> Option<String> {
    let line = help.lines().find(|l| l.contains("\"args\": [\"mcp\", "))?;
    let start = line.find("\"unix://")? + 1;
    let end = start + line[start..].find('"')?;
    Some(line[start..end].to_string())
}

#[test]
fn the_mcp_configuration_names_the_callers_default_socket() {
    let runtime = TempDir::new("mcpxdg");
    for args in [["mcp", "--help"], ["help", "mcp"]] {
        let o = Command::new(BIN)
            .args(args)
            .env("XDG_RUNTIME_DIR", &runtime.0)
            .output()
            .expect("run agentd");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", err(&o));
        assert_eq!(
            mcp_config_endpoint(&out(&o)),
            Some(format!("unix://{}/agentd/agentd.sock", runtime.0.display())),
            "{args:?}: {}",
            out(&o)
        );
    }
    // Without XDG_RUNTIME_DIR: root's or the user's own, never another uid's.
    let o = Command::new(BIN)
        .args(["mcp", "--help"])
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("run agentd");
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|id| id.parse().ok())
        .expect("the effective uid in /proc/self/status");
    let expected = if euid == 0 {
        "unix:///run/agentd/agentd.sock".to_string()
    } else {
        format!("unix:///tmp/agentd-{euid}/agentd.sock")
    };
    assert_eq!(mcp_config_endpoint(&out(&o)), Some(expected), "{}", out(&o));
    // And the front door and the manual state the rule, not one uid's path.
    for (doc, points_at_help) in [
        ("README.md", "`agentd mcp --help` prints the configuration"),
        ("man/agentd.8", "\"agentd mcp \\-\\-help\"\nprints the configuration"),
    ] {
        let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(doc)).unwrap();
        assert!(!text.contains("/run/user/1000/"), "{doc} hard-codes uid 1000's socket");
        assert!(text.contains(points_at_help), "{doc} does not say where yours is");
    }
}

#[test]
fn a_socket_that_never_answers_is_given_up_on_at_the_card() {
    let dir = TempDir::new("mute");
    let path = dir.0.join("mute.sock");
    let listener = UnixListener::bind(&path).unwrap();
    // Accepts every connection and holds it, saying nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().flatten() {
            held.push(c);
        }
    });
    let ep = format!("unix://{}", path.display());
    // Each client runs at most 20 s: one that waits for ever is killed then.
    let run = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut child = Command::new(BIN)
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let status = common::wait_child(&mut child, Duration::from_secs(20));
            let took = started.elapsed();
            let mut stderr = String::new();
            child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
            (status.map(|s| s.code()), stderr, took)
        })
    };
    // Side by side: the default bound, and --timeout in its place.
    let card = run(&["card", &ep]);
    let send = run(&["send", &ep, "hello"]);
    let longer = run(&["card", &ep, "--timeout", "6.5"]);
    for (what, client) in [("card", card), ("send", send)] {
        let (code, e, took) = client.join().unwrap();
        let code = code.unwrap_or_else(|| panic!("{what}: still waiting after {took:?}"));
        assert_eq!(code, Some(3), "{what}: {e}");
        assert!(
            took >= Duration::from_millis(4_500) && took < Duration::from_secs(15),
            "{what}: gave up after {took:?}"
        );
        assert!(
            e.contains(&format!(
                "{ep} accepted the connection but sent no agent card within 5 s"
            )),
            "{what}: {e}"
        );
        assert!(e.contains("give --timeout SECS to wait longer"), "{what}: {e}");
    }
    let (code, e, took) = longer.join().unwrap();
    assert_eq!(code, Some(Some(5)), "{e}");
    assert!(
        took >= Duration::from_millis(6_400),
        "--timeout 6.5 gave up after {took:?}"
    );
    assert!(e.contains("no answer within 6.5 s (--timeout)"), "{e}");
}

#[test]
fn a_task_with_no_output_prints_no_artifact_block() {
    let d = Daemon::start(&["--exec", "sh -c 'echo oops >&2; exit 3'"]);
    let ep = endpoint(&d);
    let o = agentd(&["send", &ep, "hi"]);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    let text = out(&o);
    assert!(
        text.contains("status: the program ended with exit status 3: oops"),
        "{text}"
    );
    assert!(!text.contains("artifact"), "an empty block: {text}");
    // The artifact is there, empty: `get` leaves it out too, --json keeps it.
    let id = text.split_whitespace().nth(1).expect("the task line's id").to_string();
    let o = agentd(&["get", &ep, &id]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!out(&o).contains("artifact"), "{}", out(&o));
    let task: serde_json::Value = serde_json::from_str(&out(&agentd(&["get", &ep, &id, "--json"]))).unwrap();
    assert_eq!(task["artifacts"][0]["name"], "output", "{task}");
    // Output that is there is still shown under its heading.
    let d = Daemon::start(&["--exec", "sh -c 'echo partial; exit 3'"]);
    let o = agentd(&["send", &endpoint(&d), "hi"]);
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    assert!(out(&o).contains("artifact output:\npartial\n"), "{}", out(&o));
}

/// The lines `agentd events ARGS` prints, up to the first for which `last`
/// holds; then it is killed (or it ends at its own --timeout).
fn events_until(args: &[&str], last: impl Fn(&str) -> bool) -> Vec<String> {
    let mut child = Command::new(BIN)
        .arg("events")
        .args(args)
        .args(["--timeout", "20"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run agentd events");
    let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut got = Vec::new();
    for line in stdout.lines().map_while(Result::ok) {
        let done = last(&line);
        got.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    got
}

/// The number after `word` in `line`.
fn number_after(line: &str, word: &str) -> Option<u64> {
    line.split(word)
        .nth(1)?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[test]
fn events_from_zero_says_it_replays_then_follows() {
    let d = Daemon::start(&[]);
    let ep = endpoint(&d);
    let o = agentd(&["send", &ep, "hello"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // The task's records are all out once its terminal record is.
    let lines = events_until(&[&ep, "--from", "0"], |l| l.contains("task.terminal"));
    assert!(lines.last().is_some_and(|l| l.contains("task.terminal")), "{lines:?}");
    let hello = &lines[0];
    let newest = number_after(hello, "then following new events after seq ")
        .unwrap_or_else(|| panic!("what follows is not said: {hello}"));
    assert!(
        hello.starts_with("# replaying the kept records after seq 0 (the ring starts at 1), "),
        "{hello}"
    );
    assert!(newest >= 2, "{hello}");
    // What it says: record 1 first, and every record up to the newest.
    assert_eq!(lines[1].split_whitespace().next(), Some("1"), "{lines:?}");
    let newest_text = newest.to_string();
    let replayed = events_until(&[&ep, "--from", "0"], |l| {
        l.split_whitespace().next() == Some(newest_text.as_str())
    });
    let seqs: Vec<u64> = replayed[1..]
        .iter()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(seqs, (1..=newest).collect::<Vec<_>>(), "{replayed:?}");
    // Without --from, or from the newest on, nothing is replayed.
    for args in [vec![ep.as_str()], vec![&ep, "--from", "100000"]] {
        let hello = &events_until(&args, |_| true)[0];
        assert!(
            hello.starts_with("# following new events after seq "),
            "{args:?}: {hello}"
        );
        assert!(!hello.contains("replaying"), "{args:?}: {hello}");
        assert!(
            number_after(hello, "after seq ").is_some_and(|n| n >= newest),
            "{hello}"
        );
    }
}
