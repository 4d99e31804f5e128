//! systemd's protocols from outside: readiness, status, stopping and the
//! watchdog on a datagram socket standing in for the service manager, and
//! socket activation through `systemd-socket-activate` (the real tool).
//! The watchdog is judged against a process manager stopped from outside
//! (its thread alone, by ptrace), so a timer that beats regardless fails.

mod common;

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{user_message, Daemon, TempDir, BIN};
use serde_json::json;

/// Reads notifications until `want` is among them (or the deadline).
fn wait_for_message(ear: &UnixDatagram, seen: &mut Vec<String>, want: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if seen.iter().any(|m| m.lines().any(|l| l == want || l.starts_with(want))) {
            return true;
        }
        if let Ok(n) = ear.recv(&mut buf) {
            seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    seen.iter().any(|m| m.lines().any(|l| l == want || l.starts_with(want)))
}

fn start_with_env(dir: TempDir, env: &[(&str, String)], args: &[&str]) -> Daemon {
    let socket = dir.0.join("a.sock");
    let log = dir.0.join("agentd.log");
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .arg("--listen")
        .arg(format!("unix://{}", socket.display()))
        .args(args)
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("start agentd");
    let d = Daemon {
        child: Some(child),
        killed: None,
        socket,
        dir,
        log,
    };
    assert!(
        common::wait_for(Duration::from_secs(10), || std::os::unix::net::UnixStream::connect(
            &d.socket
        )
        .is_ok()),
        "agentd did not listen; log:\n{}",
        d.log_text()
    );
    d
}

#[test]
fn ready_status_watchdog_and_stopping_reach_the_notify_socket() {
    let dir = TempDir::new("sd-notify");
    let ear_path = dir.0.join("notify");
    let ear = UnixDatagram::bind(&ear_path).unwrap();
    ear.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let env_dump = common::script(&dir.0, "env.sh", "env");
    let mut d = start_with_env(
        dir,
        &[
            ("NOTIFY_SOCKET", ear_path.display().to_string()),
            // 0.4 s: a beat every 0.2 s.
            ("WATCHDOG_USEC", "400000".into()),
        ],
        &["--exec", env_dump.to_str().unwrap()],
    );
    let mut seen = Vec::new();
    assert!(
        wait_for_message(&ear, &mut seen, "READY=1", Duration::from_secs(10)),
        "{seen:?}"
    );
    let ready = seen.iter().find(|m| m.contains("READY=1")).unwrap();
    assert!(
        ready.contains(&format!("STATUS=listening on unix://{}", d.socket.display())),
        "{ready}"
    );
    // Beats keep coming: count three.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    let mut beats = 0;
    while beats < 3 && Instant::now() < deadline {
        if let Ok(n) = ear.recv(&mut buf) {
            let m = String::from_utf8_lossy(&buf[..n]).into_owned();
            if m == "WATCHDOG=1" {
                beats += 1;
            }
            seen.push(m);
        }
    }
    assert_eq!(beats, 3, "{seen:?}");

    // A task's program sees none of systemd's variables.
    let task = d.ok("SendMessage", json!({"message": user_message("hi")}));
    let env = common::artifact_text(&task["task"]);
    assert!(env.contains("PATH="), "{env}");
    for var in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "LISTEN_FDS", "LISTEN_PID"] {
        assert!(!env.contains(var), "{var} leaked into a task: {env}");
    }

    assert_eq!(d.stop(), Some(0));
    assert!(
        wait_for_message(&ear, &mut seen, "STOPPING=1", Duration::from_secs(2)),
        "{seen:?}"
    );
}

#[test]
fn an_abstract_notify_socket_hears_ready() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("agentd-it-{}", common::new_id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let ear = UnixDatagram::bind_addr(&addr).unwrap();
    ear.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let d = start_with_env(
        TempDir::new("sd-abstract"),
        &[("NOTIFY_SOCKET", format!("@{name}"))],
        &[],
    );
    let mut seen = Vec::new();
    assert!(
        wait_for_message(&ear, &mut seen, "READY=1", Duration::from_secs(10)),
        "{seen:?}; log:\n{}",
        d.log_text()
    );
    assert!(
        !seen.iter().any(|m| m.contains("WATCHDOG=1")),
        "no WATCHDOG_USEC, no beats"
    );
}

#[test]
fn socket_activation_serves_the_passed_socket() {
    if Command::new("systemd-socket-activate").arg("--help").output().is_err() {
        return common::skip_or_fail(
            "socket_activation_serves_the_passed_socket",
            "systemd-socket-activate is not installed (Debian: apt-get install systemd; .ci/run installs it)",
        );
    }
    let dir = TempDir::new("sd-activate");
    let socket = dir.0.join("activated.sock");
    let log = dir.0.join("agentd.log");
    let env_dump = common::script(&dir.0, "env.sh", "env");
    // systemd-socket-activate binds, waits for a first connection, then
    // execs agentd with LISTEN_FDS=1 (it becomes agentd: same pid).
    let child = Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(&socket)
        .arg("--fdname=a2a")
        .arg("-E")
        .arg("RUST_LOG=debug")
        .arg(BIN)
        .args(["serve", "--exec", env_dump.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("systemd-socket-activate");
    let mut d = Daemon {
        child: Some(child),
        killed: None,
        socket: socket.clone(),
        dir,
        log,
    };
    // The socket file exists from bind(2); connections are refused until
    // listen(2) a moment later. The first that gets through wakes the
    // activator, and agentd accepts it (and reads its EOF).
    assert!(common::wait_for(Duration::from_secs(10), || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    }));
    let card = d.get("/.well-known/agent-card.json");
    assert_eq!(card.status, 200, "{}", card.text());
    assert_eq!(
        card.json()["supportedInterfaces"][0]["url"],
        format!("unix://{}", socket.display())
    );
    let task = d.ok("SendMessage", json!({"message": user_message("hi")}));
    assert_eq!(task["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    let env = common::artifact_text(&task["task"]);
    assert!(
        !env.contains("LISTEN_"),
        "activation variables leaked into a task: {env}"
    );
    let log_text = d.log_text();
    assert!(log_text.contains("a2a.listen address=unix://"), "{log_text}");
    assert_eq!(d.stop(), Some(0));
    // The socket is the manager's: agentd leaves it in place.
    assert!(socket.exists(), "a passed socket is not agentd's to remove");
}

/// The thread of `pid` named `name` (its comm), if any.
fn thread_named(pid: i32, name: &str) -> Option<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .find(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name))
        .and_then(|t| t.file_name().to_string_lossy().parse().ok())
}

/// One thread of another process held stopped, and only it, until
/// dropped: ptrace(2) seizes the thread and interrupts it (no group stop:
/// the process's other threads run on), and detaching lets it go on. Held
/// and dropped on the thread that made it (a tracer is a thread).
struct ThreadStop {
    tid: i32,
}

impl ThreadStop {
    fn new(tid: i32) -> Result<ThreadStop, String> {
        let err = |what: &str| format!("{what} {tid}: {}", std::io::Error::last_os_error());
        #[allow(unsafe_code)]
        // SAFETY: ptrace(2) and waitpid(2) on a thread of a process this
        // test started, with integer arguments and an owned status word.
        unsafe {
            if libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) != 0 {
                return Err(err("PTRACE_SEIZE"));
            }
            let held = ThreadStop { tid };
            if libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) != 0 {
                return Err(err("PTRACE_INTERRUPT"));
            }
            let mut status = 0;
            if libc::waitpid(tid, &mut status, libc::__WALL) != tid || !libc::WIFSTOPPED(status) {
                return Err(err("waiting for the stop of"));
            }
            Ok(held)
        }
    }
}

impl Drop for ThreadStop {
    fn drop(&mut self) {
        #[allow(unsafe_code)]
        // SAFETY: ptrace(2) on the thread this value seized; it is stopped.
        unsafe {
            libc::ptrace(libc::PTRACE_DETACH, self.tid, 0, 0);
        }
    }
}

/// Every notification that arrives within `window`, counted from now.
fn heard_within(ear: &UnixDatagram, window: Duration) -> Vec<String> {
    let until = Instant::now() + window;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < until {
        if let Ok(n) = ear.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    got
}

fn beats(msgs: &[String]) -> usize {
    msgs.iter().filter(|m| *m == "WATCHDOG=1").count()
}

/// WATCHDOG=1 proves the process manager alive, not a timer: with
/// procman's thread stopped (from outside, by ptrace; the rest of the
/// daemon runs on) the beats stop and each missed one is logged as
/// agentd.watchdog; let go, procman answers again and the beats resume.
#[test]
fn a_wedged_process_manager_misses_its_beats_and_they_resume_when_it_answers() {
    // 0.4 s: a beat due every 0.2 s.
    const HALF: Duration = Duration::from_millis(200);
    let dir = TempDir::new("sd-wedge");
    let ear_path = dir.0.join("notify");
    let ear = UnixDatagram::bind(&ear_path).unwrap();
    ear.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut d = start_with_env(
        dir,
        &[
            ("NOTIFY_SOCKET", ear_path.display().to_string()),
            ("WATCHDOG_USEC", "400000".into()),
            // Not debug: procman logs its start-up workers at debug, and
            // stopped in the middle of a line it would hold stderr's lock,
            // which the watchdog's warnings then wait for (seen once
            // under a loaded full run: 0 warnings in 2 s).
            ("RUST_LOG", "info".into()),
        ],
        &[],
    );
    let mut seen = Vec::new();
    assert!(
        wait_for_message(&ear, &mut seen, "READY=1", Duration::from_secs(10)),
        "{seen:?}"
    );
    assert!(
        wait_for_message(&ear, &mut seen, "WATCHDOG=1", Duration::from_secs(5)),
        "no beat from a healthy daemon: {seen:?}"
    );
    let procman = thread_named(d.pid(), "procman").expect("agentd has a thread named procman");
    let missed = || d.log_text().matches("agentd.watchdog").count();
    assert_eq!(missed(), 0, "{}", d.log_text());

    let wedged = ThreadStop::new(procman).unwrap_or_else(|e| panic!("cannot stop procman's thread: {e}"));
    let since = Instant::now();
    // Ten half periods with procman stopped: the ping asked just before
    // the stop may still have been answered (one beat), no more.
    let during = heard_within(&ear, HALF * 10);
    let missed_during = missed();
    let log = d.log_text();
    drop(wedged);
    eprintln!(
        "procman stopped {:?}: {} beats, {missed_during} agentd.watchdog lines",
        since.elapsed(),
        beats(&during)
    );
    assert!(beats(&during) <= 1, "beats went on without procman: {during:?}");
    // A miss is known a half period after its ping, logged at once: of
    // ten half periods, at least five (a loaded machine delays the
    // logging thread, not what it finds).
    assert!(
        missed_during >= 5,
        "{missed_during} agentd.watchdog lines in {:?} of a wedged procman:\n{log}",
        since.elapsed()
    );
    assert!(
        log.contains("agentd.watchdog procman did not answer within 200 ms; not beating"),
        "{log}"
    );

    // Let go: procman answers again, and so do the beats.
    let mut after = Vec::new();
    let resumed = common::wait_for(Duration::from_secs(5), || {
        after.extend(heard_within(&ear, HALF));
        beats(&after) >= 3
    });
    assert!(resumed, "the beats did not resume: {after:?}\n{}", d.log_text());
    let task = d.ok("SendMessage", json!({"message": user_message("still here")}));
    assert_eq!(task["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(d.stop(), Some(0));
}
