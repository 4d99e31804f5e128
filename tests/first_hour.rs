//! The client and `serve --check` as a new user meets them: `--timeout` on
//! every command, the default endpoint, a missing program caught before any
//! task, clean `--stream` lines, how to answer input-required, what Ctrl-C
//! and a timeout leave running, and a refused uid told who may connect.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Daemon, TempDir, BIN};

fn agentd(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
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

/// `--timeout 1` gives up after the second, not before it (a timeout that
/// fired at once would pass an upper bound alone), and long before the
/// `sleep 30` or the silent endpoint would answer.
fn assert_took_about_the_timeout(took: Duration) {
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(10),
        "--timeout 1 gave up after {took:?}"
    );
}

#[test]
fn timeout_applies_to_a_blocking_send_and_says_the_task_goes_on() {
    let d = Daemon::start(&["--exec", "sleep 30"]);
    let ep = endpoint(&d);
    let started = Instant::now();
    let o = agentd(&["send", &ep, "--timeout", "1", "hi"]);
    assert_took_about_the_timeout(started.elapsed());
    assert_eq!(o.status.code(), Some(5), "{}", err(&o));
    let e = err(&o);
    assert!(e.contains("no answer within 1 s (--timeout)"), "{e}");
    // The task was known before the timeout: named, with its cancel line.
    assert!(e.contains(" goes on running; cancel it with `agentd cancel "), "{e}");
    assert!(!e.contains(&format!("agentd list {ep}")), "{e}");
}

#[test]
fn timeout_applies_to_a_stream_and_names_the_task_to_cancel() {
    let d = Daemon::start(&["--exec", "sleep 30"]);
    let ep = endpoint(&d);
    let started = Instant::now();
    let o = agentd(&["send", &ep, "--stream", "--timeout", "1", "hi"]);
    assert_took_about_the_timeout(started.elapsed());
    assert_eq!(o.status.code(), Some(5), "{}", err(&o));
    let id = out(&o)
        .lines()
        .find_map(|l| l.strip_prefix("task ").and_then(|r| r.split(' ').next()))
        .map(String::from)
        .unwrap_or_else(|| panic!("no task line: {}", out(&o)));
    assert!(err(&o).contains(&format!("agentd cancel {ep} {id}")), "{}", err(&o));
    // It is still running: the client going away cancels nothing.
    let g = agentd(&["get", &ep, &id]);
    assert!(out(&g).contains("working"), "{}", out(&g));
}

#[test]
fn timeout_applies_to_get_against_a_silent_endpoint() {
    let dir = TempDir::new("silent");
    let path = dir.0.join("silent.sock");
    // Accepts and never answers.
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let _held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        for c in listener.incoming().flatten() {
            conns.push(c);
        }
    });
    let started = Instant::now();
    let o = agentd(&[
        "get",
        &format!("unix://{}", path.display()),
        "some-task",
        "--timeout",
        "1",
    ]);
    assert_took_about_the_timeout(started.elapsed());
    assert_eq!(o.status.code(), Some(5), "{}", err(&o));
    assert!(
        agentd(&["list", "--timeout", "0"]).status.code() == Some(2),
        "0 is a usage error"
    );
}

#[test]
fn client_commands_default_to_the_serve_socket() {
    let runtime = TempDir::new("xdg");
    let log = runtime.0.join("agentd.log");
    let mut child = Command::new(BIN)
        .arg("serve")
        .env("XDG_RUNTIME_DIR", &runtime.0)
        .stderr(std::fs::File::create(&log).unwrap())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let socket = runtime.0.join("agentd/agentd.sock");
    let up = common::wait_for(Duration::from_secs(10), || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    let client = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("XDG_RUNTIME_DIR", &runtime.0)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let card = up.then(|| client(&["card"]));
    let sent = up.then(|| client(&["send", "hello", "there"]));
    common::signal(child.id() as i32, libc::SIGTERM);
    let _ = common::wait_child(&mut child, Duration::from_secs(20));
    assert!(up, "serve did not listen at {}", socket.display());
    let card = card.unwrap();
    assert_eq!(card.status.code(), Some(0), "{}", err(&card));
    assert!(
        out(&card).contains(&format!("unix://{}", socket.display())),
        "{}",
        out(&card)
    );
    let sent = sent.unwrap();
    assert_eq!(sent.status.code(), Some(0), "{}", err(&sent));
    assert!(out(&sent).contains("hello there"), "{}", out(&sent));
}

#[test]
fn check_refuses_a_missing_or_unexecutable_program() {
    let o = agentd(&["serve", "--check", "--exec", "/nonexistent/agent --flag"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("agent.exec: `/nonexistent/agent` does not exist"),
        "{}",
        err(&o)
    );
    let o = agentd(&["serve", "--check", "--exec", "no-such-program-anywhere"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("is not an executable on PATH"), "{}", err(&o));
    let dir = TempDir::new("noexec");
    let plain = dir.0.join("agent.txt");
    std::fs::write(&plain, "echo hi").unwrap();
    let o = agentd(&["serve", "--check", "--exec", plain.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("is not an executable file (mode 644)"), "{}", err(&o));
    // Start-up refuses it too, before binding anything.
    let sock = dir.0.join("a.sock");
    let o = agentd(&[
        "serve",
        "--listen",
        &format!("unix://{}", sock.display()),
        "--exec",
        "/nonexistent/agent",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!sock.exists());
    let o = agentd(&["serve", "--check", "--exec", "tr a-z A-Z"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(out(&o).contains("agent.exec runs /"), "{}", out(&o));
    // The shipped example names a placeholder, and --check says so; on a
    // machine that has a program of that name, the example is valid (both
    // cases are judged: neither is passed over).
    let conf = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/agentd.conf");
    let o = agentd(&["serve", "--check", "--config", conf]);
    let placeholder = std::path::Path::new("/usr/local/bin/summarize");
    let runnable = placeholder.metadata().is_ok_and(|m| {
        use std::os::unix::fs::PermissionsExt;
        m.is_file() && m.permissions().mode() & 0o111 != 0
    });
    if runnable {
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    } else if placeholder.exists() {
        assert_eq!(o.status.code(), Some(2), "{}", err(&o));
        assert!(err(&o).contains("/usr/local/bin/summarize"), "{}", err(&o));
    } else {
        assert_eq!(o.status.code(), Some(2), "{}", err(&o));
        assert!(
            err(&o).contains("`/usr/local/bin/summarize` does not exist"),
            "{}",
            err(&o)
        );
    }
}

#[test]
fn stream_output_is_one_clean_line_per_event() {
    let dir = TempDir::new("stream");
    let prog = common::script(&dir.0, "agent.sh", "cat >/dev/null; printf hello");
    let d = Daemon::start(&["--exec", prog.to_str().unwrap()]);
    let o = agentd(&["send", &endpoint(&d), "--stream", "hi"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = out(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("task "), "{text}");
    assert!(lines.contains(&"hello"), "the artifact on its own line: {text}");
    // The final status, then what the task cost.
    assert_eq!(lines[lines.len() - 2], "[completed]", "{text}");
    assert!(lines.last().unwrap().starts_with("  cost: cpu "), "{text}");
    assert!(!text.contains("hello["), "{text}");
    assert!(
        !lines.iter().any(|l| l.trim() == "[working]" || l.ends_with("] ")),
        "no empty status lines: {text}"
    );
}

#[test]
fn input_required_says_how_to_answer() {
    let dir = TempDir::new("ask");
    let prog = common::script(
        &dir.0,
        "agent.sh",
        r#"read first; echo '{"status":"input-required","text":"which city?"}'; read second; echo '{"status":"completed","text":"ok"}'"#,
    );
    let d = Daemon::start(&["--exec", prog.to_str().unwrap(), "--exec-protocol", "jsonl"]);
    let ep = endpoint(&d);
    let o = agentd(&["send", &ep, "plan a trip"]);
    let text = out(&o);
    let id = text
        .lines()
        .find_map(|l| l.strip_prefix("task ").and_then(|r| r.split(' ').next()))
        .unwrap()
        .to_string();
    assert!(text.contains("input-required"), "{text}");
    assert!(text.contains(&format!("agentd send {ep} --task {id} TEXT")), "{text}");
    let o = agentd(&["send", &ep, "--stream", "--task", &id, "Lisbon"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
}

#[test]
fn ctrl_c_on_a_stream_says_the_task_goes_on() {
    let d = Daemon::start(&["--exec", "sleep 30"]);
    let ep = endpoint(&d);
    let mut child = Command::new(BIN)
        .args(["send", &ep, "--stream", "hi"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let id = first
        .strip_prefix("task ")
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    common::signal(child.id() as i32, libc::SIGINT);
    let status = common::wait_child(&mut child, Duration::from_secs(10)).expect("the client exits on Ctrl-C");
    assert_eq!(status.code(), Some(130));
    let mut e = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut e).unwrap();
    assert!(e.contains(&format!("interrupted; task {id} goes on running")), "{e}");
    assert!(e.contains(&format!("agentd cancel {ep} {id}")), "{e}");
}

#[test]
fn a_refused_uid_is_told_who_may_connect() {
    const NOBODY: u32 = 65534;
    if !common::root_or_skip(
        "a_refused_uid_is_told_who_may_connect",
        &format!("run a client as uid {NOBODY}"),
    ) {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let d = Daemon::start(&[]);
    std::fs::set_permissions(&d.dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_nobody = || {
        Command::new(BIN)
            .args(["card", &endpoint(&d)])
            .uid(NOBODY)
            .gid(NOBODY)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // The 0600 socket: EACCES from connect(2).
    let o = as_nobody();
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(
        err(&o).contains("only uid 0, the user agentd runs as, and root"),
        "{}",
        err(&o)
    );
    // An opened-up socket: the peer gate closes the connection unanswered.
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let o = as_nobody();
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(
        err(&o).contains(&format!("refused this client (uid {NOBODY})")),
        "{}",
        err(&o)
    );
    let metrics = d.get("/metrics").text();
    assert!(
        metrics.contains(&format!(
            "agentd_peers_denied_total{{transport=\"unix\",uid=\"{NOBODY}\"}} 1"
        )),
        "{metrics}"
    );
}

#[test]
fn the_fork_server_run_by_hand_says_it_is_internal() {
    // Started without the daemon's environment, it neither waits on stdin
    // nor forks anything: it says what it is and exits 2.
    let o = agentd(&["__forkserver"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("internal") && err(&o).contains("agentd serve"),
        "{}",
        err(&o)
    );
}
