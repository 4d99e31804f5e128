//! Tasks as processes, tested from outside: the exec runner, the kill
//! ladder against a program that fights back, clients that vanish, a daemon
//! killed with SIGKILL, deadlines, the running cap and the queue, and a
//! worker whose agentd died before it armed its parent-death signal.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{alive, group_members, user_message, wait_for, Daemon};
use serde_json::json;

fn send_async(d: &Daemon, text: &str) -> String {
    let r = d.ok(
        "SendMessage",
        json!({"message": user_message(text), "configuration": {"returnImmediately": true}}),
    );
    let state = r["task"]["status"]["state"].as_str().unwrap();
    assert!(matches!(state, "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING"), "{r}");
    r["task"]["id"].as_str().unwrap().to_string()
}

fn state_of(d: &Daemon, id: &str) -> String {
    d.ok("GetTask", json!({"id": id}))["status"]["state"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The process group of `pid` (field 5 of /proc/PID/stat).
fn pgid_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(2)
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn exec_text_protocol_success_failure_and_missing_program() {
    let d = Daemon::start(&["--exec", "tr a-z A-Z"]);
    let t = &d.ok("SendMessage", json!({"message": user_message("shout this")}))["task"];
    assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED", "{t}");
    assert_eq!(t["artifacts"][0]["parts"][0]["text"], "SHOUT THIS");
    assert_eq!(
        t["artifacts"].as_array().unwrap().len(),
        1,
        "one artifact, chunks joined"
    );

    let tmp = common::TempDir::new("ex");
    let fail = common::script(&tmp.0, "fail.sh", "echo partial; echo 'something broke' >&2; exit 3");
    let d = Daemon::start(&["--exec", fail.to_str().unwrap()]);
    let t = &d.ok("SendMessage", json!({"message": user_message("x")}))["task"];
    assert_eq!(t["status"]["state"], "TASK_STATE_FAILED", "{t}");
    let text = t["status"]["message"]["parts"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("the program ended with exit status 3") && text.contains("something broke"),
        "{text}"
    );
    assert_eq!(common::terminal_cause(t), "failed");
    assert_eq!(
        t["artifacts"][0]["parts"][0]["text"], "partial\n",
        "output so far is kept"
    );

    // A program that vanished after start-up (start-up itself refuses a
    // missing one): the task fails with the shell's 127.
    let gone = common::TempDir::new("gone");
    let prog = common::script(&gone.0, "agent", "cat");
    let d = Daemon::start(&["--exec", &format!("{} --flag", prog.display())]);
    std::fs::remove_file(&prog).unwrap();
    let t = &d.ok("SendMessage", json!({"message": user_message("x")}))["task"];
    assert_eq!(t["status"]["state"], "TASK_STATE_FAILED");
    let text = t["status"]["message"]["parts"][0]["text"].as_str().unwrap();
    assert!(
        text.contains(&prog.display().to_string()) && text.contains("127"),
        "{text}"
    );
}

#[test]
fn program_sees_a_scrubbed_environment_and_no_stray_fds() {
    let tmp = common::TempDir::new("env");
    // sh -c, not a script file: dash keeps a script open on fd 10. The fds
    // are listed first, by a plain command: while a pipeline starts the
    // shell itself briefly holds its pipes, which `ls` could catch.
    let probe = r#"sh -c 'ls /proc/$$/fd; echo FDS-END; env | sort'"#;
    let socket = tmp.0.join("a.sock");
    // An fd the test leaks into agentd on purpose (no CLOEXEC): it must not
    // reach the program.
    let leak = std::fs::File::open("/dev/null").unwrap();
    let leak_fd = std::os::fd::AsRawFd::as_raw_fd(&leak);
    #[allow(unsafe_code)]
    // SAFETY: clearing FD_CLOEXEC on our own open fd.
    unsafe {
        libc::fcntl(leak_fd, libc::F_SETFD, 0);
    }
    let log = tmp.0.join("log");
    let child = std::process::Command::new(common::BIN)
        .args([
            "serve",
            "--listen",
            &format!("unix://{}", socket.display()),
            "--exec",
            probe,
        ])
        .args(["--set", "agent.env=EXTRA=given"])
        .env("AGENTD_TEST_SECRET", "leaked")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    assert!(wait_for(Duration::from_secs(10), || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    }));
    drop(leak);
    let d = Daemon {
        child: Some(child),
        killed: None,
        socket,
        dir: common::TempDir::new("unused"),
        log,
    };
    let t = &d.ok("SendMessage", json!({"message": user_message("x")}))["task"];
    let out = t["artifacts"][0]["parts"][0]["text"].as_str().unwrap();
    assert!(!out.contains("AGENTD_TEST_SECRET"), "{out}");
    assert!(!out.contains("AGENTD_SUPERVISOR_PID"), "{out}");
    assert!(out.contains("EXTRA=given"), "{out}");
    let fds = out
        .split("FDS-END")
        .next()
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(fds, "0 1 2", "only stdio reaches the program, got: {fds}");
}

#[test]
fn task_outlives_the_connection_that_created_it() {
    // The PDEATHSIG trap: were the worker forked on the connection's
    // thread, it would die when that thread ends.
    let tmp = common::TempDir::new("outlive");
    let slow = common::script(&tmp.0, "slow.sh", "sleep 1; echo finished");
    let d = Daemon::start(&["--exec", slow.to_str().unwrap()]);
    let id = {
        let mut conn = d.connect();
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": user_message("x"), "configuration": {"returnImmediately": true}}})
        .to_string();
        write!(
            conn,
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let resp = common::read_response(&mut std::io::BufReader::new(conn))
            .unwrap()
            .json();
        resp["result"]["task"]["id"].as_str().unwrap().to_string()
        // the connection (and its server thread) ends here
    };
    let mut last = String::new();
    assert!(
        wait_for(Duration::from_secs(10), || {
            last = state_of(&d, &id);
            last == "TASK_STATE_COMPLETED"
        }),
        "task ended as {last}"
    );
    let t = d.ok("GetTask", json!({"id": id}));
    assert_eq!(t["artifacts"][0]["parts"][0]["text"], "finished\n");
}

/// A program that ignores SIGTERM and leaves two grandchildren (one also
/// ignoring SIGTERM), recording every pid in `pids`.
fn stubborn_script(dir: &Path, pids: &Path) -> PathBuf {
    common::script(
        dir,
        "stubborn.sh",
        &format!(
            "trap '' TERM\n\
             sh -c \"trap '' TERM; sleep 1000\" &\n\
             a=$!\n\
             sleep 1000 &\n\
             b=$!\n\
             echo \"$$ $a $b\" > {p}.tmp && mv {p}.tmp {p}\n\
             echo started\n\
             while :; do sleep 1; done",
            p = pids.display()
        ),
    )
}

fn read_pids(path: &Path) -> Vec<i32> {
    assert!(
        wait_for(Duration::from_secs(10), || path.exists()),
        "pid file never appeared"
    );
    std::fs::read_to_string(path)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

#[test]
fn cancel_kills_a_stubborn_program_and_its_grandchildren() {
    let tmp = common::TempDir::new("cancel");
    let pids_file = tmp.0.join("pids");
    let prog = stubborn_script(&tmp.0, &pids_file);
    let d = Daemon::start(&[
        "--exec",
        prog.to_str().unwrap(),
        "--set",
        "tasks.cancel_grace_ms=200",
        "--set",
        "tasks.term_grace_ms=300",
    ]);
    let id = send_async(&d, "x");
    let pids = read_pids(&pids_file);
    let pgid = pgid_of(pids[0]);
    assert!(pids.iter().all(|p| alive(*p)));
    assert!(group_members(pgid).len() >= 4, "worker, program and two grandchildren");

    let started = Instant::now();
    let t = d.ok("CancelTask", json!({"id": id}));
    assert_eq!(t["status"]["state"], "TASK_STATE_CANCELED", "{t}");
    assert_eq!(common::terminal_cause(&t), "canceled");
    // CANCELED is reported only once the group is gone: check at once.
    assert_eq!(
        group_members(pgid),
        Vec::<i32>::new(),
        "group {pgid} still has processes"
    );
    for p in &pids {
        assert!(!alive(*p), "pid {p} survived the cancel");
    }
    // The program ignores SIGTERM: it dies at the SIGKILL rung, after both
    // graces (200 + 300 ms), and not much later.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(10),
        "the cancel took {took:?}"
    );
    assert!(d.log_text().contains("rung=SIGKILL"), "the ladder reached SIGKILL");
    // Cancelling again is refused: it is finished.
    assert_eq!(d.err("CancelTask", json!({"id": id}))["code"], -32002);
}

#[test]
fn sigkill_of_the_daemon_leaves_no_task_process() {
    let tmp = common::TempDir::new("kill9");
    let mut all = Vec::new();
    // Each task writes its pids to its own file. (The program exists before
    // the daemon starts: start-up refuses a missing one.)
    let run = common::script(
        &tmp.0,
        "run.sh",
        &format!(
            "f=$(mktemp {dir}/pids.XXXXXX)\n\
             sleep 1000 &\n\
             echo \"$$ $!\" > $f.tmp && mv $f.tmp $f.done\n\
             while :; do sleep 1; done",
            dir = tmp.0.display()
        ),
    );
    let mut d = Daemon::start(&["--exec", run.to_str().unwrap()]);
    for _ in 0..3 {
        send_async(&d, "x");
    }
    assert!(wait_for(Duration::from_secs(10), || {
        std::fs::read_dir(&tmp.0)
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "done"))
            .count()
            == 3
    }));
    for e in std::fs::read_dir(&tmp.0).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "done") {
            all.extend(
                std::fs::read_to_string(e.path())
                    .unwrap()
                    .split_whitespace()
                    .map(|p| p.parse::<i32>().unwrap()),
            );
        }
    }
    let workers: Vec<i32> = common::task_workers(d.pid());
    all.extend(common::idle_workers(d.pid()));
    assert_eq!(workers.len(), 3, "one worker per task");
    all.extend(&workers);
    d.kill9();
    assert!(
        wait_for(Duration::from_secs(5), || all.iter().all(|p| !alive(*p))),
        "survivors: {:?}",
        all.iter().filter(|p| alive(**p)).collect::<Vec<_>>()
    );
}

#[test]
fn deadline_fails_the_task_with_its_cause() {
    const DEADLINE: Duration = Duration::from_millis(1500);
    let d = Daemon::start(&[
        "--exec",
        "sleep 30",
        "--set",
        &format!("tasks.deadline_ms={}", DEADLINE.as_millis()),
        "--set",
        "tasks.cancel_grace_ms=100",
    ]);
    let started = Instant::now();
    let t = &d.ok("SendMessage", json!({"message": user_message("x")}))["task"];
    let took = started.elapsed();
    assert_eq!(t["status"]["state"], "TASK_STATE_FAILED", "{t}");
    assert_eq!(common::terminal_cause(t), "deadline");
    // Both sides: not before the deadline (it counts from the worker's
    // start, after the send), and long before `sleep 30` would end.
    assert!(
        took >= DEADLINE && took < Duration::from_secs(15),
        "the deadline of {DEADLINE:?} ended the task after {took:?}"
    );
}

#[test]
fn running_cap_queues_and_queue_cap_refuses() {
    let d = Daemon::start(&[
        "--exec",
        "sleep 0.5",
        "--set",
        "tasks.max_running=1",
        "--set",
        "tasks.max_queued=1",
    ]);
    let first = send_async(&d, "a");
    assert!(wait_for(Duration::from_secs(5), || state_of(&d, &first) == "TASK_STATE_WORKING"));
    let second = send_async(&d, "b");
    assert_eq!(state_of(&d, &second), "TASK_STATE_SUBMITTED");
    let err = d.err(
        "SendMessage",
        json!({"message": user_message("c"), "configuration": {"returnImmediately": true}}),
    );
    assert_eq!(err["code"], -32603, "{err}");
    assert_eq!(err["data"][0]["reason"], "QUEUE_FULL");
    assert_eq!(d.ok("ListTasks", json!({}))["totalSize"], 2, "nothing half-created");
    for id in [&first, &second] {
        assert!(wait_for(Duration::from_secs(10), || state_of(&d, id) == "TASK_STATE_COMPLETED"));
    }
    // A queued task can be cancelled without ever running.
    let a = send_async(&d, "a");
    let b = send_async(&d, "b");
    let t = d.ok("CancelTask", json!({"id": b}));
    assert_eq!(t["status"]["state"], "TASK_STATE_CANCELED");
    assert!(wait_for(Duration::from_secs(10), || state_of(&d, &a) == "TASK_STATE_COMPLETED"));
}

#[test]
fn sigterm_drains_running_tasks_and_answers_blocked_clients() {
    let tmp = common::TempDir::new("drain");
    let pids_file = tmp.0.join("pids");
    let prog = stubborn_script(&tmp.0, &pids_file);
    let mut d = Daemon::start(&[
        "--exec",
        prog.to_str().unwrap(),
        "--set",
        "tasks.cancel_grace_ms=100",
        "--set",
        "tasks.term_grace_ms=200",
    ]);
    let socket = d.socket.clone();
    let blocked = {
        let body =
            json!({"jsonrpc": "2.0", "id": 9, "method": "SendMessage", "params": {"message": user_message("x")}})
                .to_string();
        let mut conn = d.connect();
        std::thread::spawn(move || {
            write!(
                conn,
                "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            common::read_response(&mut std::io::BufReader::new(conn)).map(|r| r.json())
        })
    };
    let pids = read_pids(&pids_file);
    assert_eq!(d.stop(), Some(0), "clean exit");
    let answer = blocked.join().unwrap().expect("the blocked client got an answer");
    assert_eq!(
        answer["result"]["task"]["status"]["state"], "TASK_STATE_CANCELED",
        "{answer}"
    );
    assert_eq!(common::terminal_cause(&answer["result"]["task"]), "shutdown");
    for p in pids {
        assert!(!alive(p), "pid {p} survived shutdown");
    }
    assert!(!socket.exists(), "socket removed on exit");
}

#[test]
fn prespawned_workers_run_tasks_and_die_with_the_daemon() {
    let mut d = Daemon::start(&["--set", "tasks.prespawn=2"]);
    assert!(
        wait_for(Duration::from_secs(10), || common::idle_workers(d.pid()).len() == 2),
        "two idle workers wait"
    );
    let idle = common::idle_workers(d.pid());
    let t = d.ok("SendMessage", json!({"message": user_message("from the pool")}));
    assert_eq!(t["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(t["task"]["artifacts"][0]["parts"][0]["text"], "from the pool");
    assert!(
        wait_for(Duration::from_secs(10), || idle.iter().any(|p| !alive(*p))
            && common::idle_workers(d.pid()).len() == 2),
        "an idle worker ran the task and the pool was refilled"
    );
    // The pool and the fork server that forked it.
    let pool = common::children(d.pid());
    assert_eq!(pool.len(), 3, "two idle workers and the fork server: {pool:?}");
    assert_eq!(common::fork_servers(d.pid()).len(), 1);
    d.kill9();
    assert!(
        wait_for(Duration::from_secs(5), || pool.iter().all(|p| !alive(*p))),
        "idle workers and the fork server die with the daemon"
    );
}

#[test]
fn a_killed_fork_server_is_replaced_and_no_task_is_lost() {
    let d = Daemon::start(&["--set", "tasks.prespawn=2"]);
    assert!(
        wait_for(Duration::from_secs(10), || common::fork_servers(d.pid()).len() == 1
            && common::idle_workers(d.pid()).len() == 2),
        "a fork server and two idle workers"
    );
    let first = common::fork_servers(d.pid())[0];
    // Workers are children of agentd itself (CLONE_PARENT), each leading
    // its own process group.
    for w in common::idle_workers(d.pid()) {
        let stat = common::processes_with_parent(d.pid()).into_iter().find(|p| p.pid == w);
        let stat = stat.expect("an idle worker is agentd's child");
        assert_eq!(stat.pgid, w, "worker {w} leads its own process group");
    }
    // SAFETY: kill(2) on a pid we just read; a stale pid is ESRCH.
    assert_eq!(unsafe { libc::kill(first, libc::SIGKILL) }, 0);
    for i in 0..8 {
        let text = format!("after the fork server died {i}");
        let t = d.ok("SendMessage", json!({"message": user_message(&text)}));
        assert_eq!(t["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{t}");
        assert_eq!(t["task"]["artifacts"][0]["parts"][0]["text"], text.as_str());
    }
    assert!(
        wait_for(Duration::from_secs(10), || {
            let servers = common::fork_servers(d.pid());
            servers.len() == 1 && servers[0] != first
        }),
        "a new fork server took over: {:?}",
        common::fork_servers(d.pid())
    );
    assert!(!alive(first), "the killed fork server was reaped");
    assert!(
        d.log_text().contains("procman.forkserver"),
        "the loss is logged: {}",
        d.log_text()
    );
}

/// A pids cgroup (cgroup v1's pids hierarchy, or a v2 directory whose
/// parent delegates pids) for the test to put a process in; removed on drop,
/// once the process is gone.
struct PidsCgroup(PathBuf);

impl PidsCgroup {
    fn make(name: &str) -> Result<PidsCgroup, String> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
        let mut roots = Vec::new();
        for line in mountinfo.lines() {
            let Some((pre, post)) = line.split_once(" - ") else {
                continue;
            };
            let Some(mount) = pre.split_whitespace().nth(4) else {
                continue;
            };
            let mut post = post.split_whitespace();
            match (post.next(), post.nth(1)) {
                (Some("cgroup"), Some(opts)) if opts.split(',').any(|o| o == "pids") => {
                    roots.push(PathBuf::from(mount))
                }
                (Some("cgroup2"), _) => roots.push(PathBuf::from(mount)),
                _ => {}
            }
        }
        for root in roots {
            let dir = root.join(format!("{name}-{}", std::process::id()));
            if std::fs::create_dir(&dir).is_ok() {
                if dir.join("pids.max").exists() {
                    return Ok(PidsCgroup(dir));
                }
                let _ = std::fs::remove_dir(&dir);
            }
        }
        Err("no pids cgroup can be made here (needs root and a pids controller)".into())
    }

    fn set_max(&self, max: &str) {
        std::fs::write(self.0.join("pids.max"), max).unwrap();
    }

    fn enter(&self, pid: i32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        let _ = wait_for(Duration::from_secs(5), || std::fs::remove_dir(&self.0).is_ok());
    }
}

#[test]
fn a_worker_that_cannot_be_forked_fails_its_task_with_the_reason_and_nothing_hangs() {
    let test = "a_worker_that_cannot_be_forked_fails_its_task_with_the_reason_and_nothing_hangs";
    let Some(cgroup) = common::needed("a pids cgroup", test, PidsCgroup::make("agentd-test-forks")) else {
        return;
    };
    let d = Daemon::start(&["--set", "tasks.prespawn=0", "--set", "tasks.cgroup=off"]);
    let hi = |text: &str| d.ok("SendMessage", json!({"message": user_message(text)}));
    assert_eq!(hi("first")["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    // The fork server alone goes into a full pids cgroup: every fork it
    // tries fails (EAGAIN); agentd itself is untouched.
    let server = common::fork_servers(d.pid());
    assert_eq!(server.len(), 1, "one fork server after a task");
    cgroup.enter(server[0]);
    cgroup.set_max("1");
    let t = hi("no room");
    assert_eq!(t["task"]["status"]["state"], "TASK_STATE_FAILED", "{t}");
    let why = t["task"]["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("could not start a worker"), "{t}");
    assert_eq!(common::terminal_cause(&t["task"]), "crashed");
    assert!(d.log_text().contains("procman.fork failed"), "{}", d.log_text());
    // Room again: the next task runs, on the same fork server.
    cgroup.set_max("max");
    assert_eq!(hi("room again")["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(common::fork_servers(d.pid()), server);
}

/// A process traced with ptrace(2) by this thread, with the options that
/// stop it at each fork or clone and trace the child from its first
/// instruction. Detached (or found gone) on drop.
struct Traced(i32);

impl Traced {
    fn seize(pid: i32, options: libc::c_int) -> Traced {
        #[allow(unsafe_code)]
        // SAFETY: ptrace(2) with integer arguments on a process this test's
        // daemon started.
        let r = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0, options) };
        assert_eq!(r, 0, "PTRACE_SEIZE {pid}: {}", std::io::Error::last_os_error());
        Traced(pid)
    }

    /// Waits (bounded) for the next stop or end this thread is told of for
    /// the traced process `pid` (this one, or a child traced with it).
    fn wait(pid: i32, within: Duration) -> libc::c_int {
        let deadline = Instant::now() + within;
        loop {
            let mut status = 0;
            #[allow(unsafe_code)]
            // SAFETY: waitpid(2) on a tracee of this thread, with an owned
            // status word.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL | libc::WNOHANG) };
            assert!(r >= 0, "waitpid {pid}: {}", std::io::Error::last_os_error());
            if r == pid {
                return status;
            }
            assert!(Instant::now() < deadline, "{pid} did not stop or end within {within:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The pid of the child a fork or clone event stop is about.
    fn event_child(&self) -> i32 {
        let mut msg: libc::c_ulong = 0;
        #[allow(unsafe_code)]
        // SAFETY: PTRACE_GETEVENTMSG writes one c_ulong into `msg`.
        let r = unsafe { libc::ptrace(libc::PTRACE_GETEVENTMSG, self.0, 0, &mut msg as *mut libc::c_ulong) };
        assert_eq!(r, 0, "PTRACE_GETEVENTMSG: {}", std::io::Error::last_os_error());
        msg as i32
    }

    /// Lets it run on, still traced.
    fn resume(&self) {
        #[allow(unsafe_code)]
        // SAFETY: ptrace(2) with integer arguments on our tracee.
        let r = unsafe { libc::ptrace(libc::PTRACE_CONT, self.0, 0, 0) };
        assert_eq!(r, 0, "PTRACE_CONT {}: {}", self.0, std::io::Error::last_os_error());
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        #[allow(unsafe_code)]
        // SAFETY: ptrace(2) on our tracee; ESRCH (gone, or not stopped) is
        // harmless.
        unsafe {
            libc::ptrace(libc::PTRACE_DETACH, self.0, 0, 0);
        }
    }
}

/// "checks that its parent is still the agentd that started it (otherwise
/// agentd died before the signal was armed, and it exits 111 at once)":
/// the fork server is traced so that the worker it forks for a task is
/// held at its first instruction (before it arms its parent-death signal);
/// agentd is SIGKILLed then, and the worker, let go, finds another parent
/// and exits 111 at once, without running its task.
#[test]
fn a_worker_whose_agentd_died_before_it_armed_its_signal_exits_111_at_once() {
    let tmp = common::TempDir::new("orphaned");
    let ran = tmp.0.join("ran.log");
    let prog = common::script(
        &tmp.0,
        "ran.sh",
        &format!("read l; echo \"$l\" >> {}; echo ok", ran.display()),
    );
    // No cgroup slot: an agentd another test starts meanwhile would find
    // this one's slot left by a dead daemon and SIGKILL the held worker in it.
    let mut d = Daemon::start(&[
        "--exec",
        prog.to_str().unwrap(),
        "--set",
        "tasks.prespawn=0",
        "--set",
        "tasks.cgroup=off",
    ]);
    let warm = d.ok("SendMessage", json!({"message": user_message("warm")}));
    assert_eq!(warm["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{warm}");
    let servers = common::fork_servers(d.pid());
    assert_eq!(servers.len(), 1, "one fork server after a task");
    let agentd = d.pid();
    let server = Traced::seize(
        servers[0],
        libc::PTRACE_O_TRACECLONE | libc::PTRACE_O_TRACEFORK | libc::PTRACE_O_TRACEVFORK,
    );
    // The task's worker is asked of the fork server (no idle worker), with
    // the task in its pipe.
    send_async(&d, "orphaned");
    let status = Traced::wait(server.0, Duration::from_secs(10));
    let event = status >> 16;
    assert!(
        libc::WIFSTOPPED(status)
            && [
                libc::PTRACE_EVENT_CLONE,
                libc::PTRACE_EVENT_FORK,
                libc::PTRACE_EVENT_VFORK
            ]
            .contains(&event),
        "the fork server did not stop at its fork: status {status:#x}"
    );
    let worker = Traced(server.event_child());
    let status = Traced::wait(worker.0, Duration::from_secs(10));
    assert!(libc::WIFSTOPPED(status), "the worker's first stop: {status:#x}");
    assert_eq!(
        common::proc_stat(worker.0).map(|s| s.ppid),
        Some(agentd),
        "the worker is agentd's child (CLONE_PARENT)"
    );
    // agentd dies while its worker has armed nothing yet.
    d.kill9();
    assert!(
        wait_for(Duration::from_secs(5), || common::proc_stat(worker.0)
            .is_some_and(|s| s.ppid != agentd)),
        "the worker was not re-parented"
    );
    // The fork server, held at its fork, dies with agentd (its own
    // parent-death signal); its end is told to us, its tracer.
    let status = Traced::wait(server.0, Duration::from_secs(5));
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
        "the fork server did not die with agentd: status {status:#x}"
    );
    let let_go = Instant::now();
    worker.resume();
    let status = loop {
        let status = Traced::wait(worker.0, Duration::from_secs(5));
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            break status;
        }
        // A signal stop on the way (none is expected): pass it on.
        worker.resume();
    };
    let took = let_go.elapsed();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 111,
        "the orphaned worker ended with status {status:#x}, not exit 111"
    );
    assert!(took < Duration::from_secs(1), "it took {took:?} to exit");
    let runs = std::fs::read_to_string(&ran).unwrap_or_default();
    assert_eq!(runs, "warm\n", "the orphaned worker ran its task");
    eprintln!("an orphaned worker: exit 111 {took:?} after it was let go");
}
