//! Every process a task starts dies with the task and with agentd, even
//! one that left its process group (DESIGN.md §5). Cases the chaos soak
//! (tests/chaos.rs) found where one did not, each reduced to one task: the
//! bugs are fixed, and each test stays as its regression test.

mod common;

use std::time::Duration;

use common::{alive, processes_with_parent, signal, wait_for, Daemon, TempDir};

/// SIGKILLs a process on drop (the orphan, should the test fail).
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        signal(self.0, libc::SIGKILL);
        wait_for(Duration::from_secs(5), || !alive(self.0));
    }
}

/// Found by the soak: a task's orphan — here a `sleep` its program
/// double-forked — used to be re-parented to agentd (the nearest
/// subreaper) and live on after agentd was SIGKILLed when the task's worker
/// had already exited and procman had not yet swept the task's cgroup: the
/// one process whose parent-death signal kills the task (the worker) was
/// gone. Now every worker is its task's subreaper and kills what is left
/// before it reports: nothing of the task outlives its worker.
/// SIGSTOPping agentd holds the window open.
#[test]
fn an_orphan_waiting_for_its_sweep_dies_with_agentd() {
    let test = "an_orphan_waiting_for_its_sweep_dies_with_agentd";
    let Some(base) = common::needed(
        "a cgroup v2 directory of our own",
        test,
        common::PrivateCgroup::new("agentd-gap"),
    ) else {
        return;
    };
    let tmp = TempDir::new("gap");
    let pidfile = tmp.0.join("orphan.pid");
    // The program ends only when told, after agentd is stopped: ended
    // before, its worker could be reaped and its cgroup swept already.
    let release = tmp.0.join("release");
    let prog = common::script(
        &tmp.0,
        "orphan.sh",
        &format!(
            "(sh -c 'echo $$ > {p}.new; mv {p}.new {p}; exec sleep 37' </dev/null >/dev/null 2>&1 &)\n\
             while [ ! -s {p} ]; do sleep 0.01; done\n\
             while [ ! -e {r} ]; do sleep 0.01; done\necho done",
            p = pidfile.display(),
            r = release.display()
        ),
    );
    let mut d = Daemon::start(&[
        "--exec",
        prog.to_str().unwrap(),
        "--set",
        &format!("tasks.cgroup={}", base.0.display()),
        "--set",
        "tasks.prespawn=0",
    ]);
    let pid = d.pid();
    d.send_async("go");
    let orphan: i32 = common::read_when_ready(&pidfile, Duration::from_secs(10))
        .trim()
        .parse()
        .unwrap();
    let _cleanup = KillOnDrop(orphan);
    // procman held still: the worker reports, exits and stays a zombie,
    // and nothing sweeps the task's cgroup.
    signal(pid, libc::SIGSTOP);
    std::fs::write(&release, b"").unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || processes_with_parent(pid)
            .iter()
            .any(|p| p.comm == "agentd-task" && p.state == "Z")),
        "the worker did not exit: {:?}",
        processes_with_parent(pid)
    );
    d.kill9();
    assert!(
        wait_for(Duration::from_secs(5), || !alive(orphan)),
        "5 s after kill -9 of agentd its task's orphan {orphan} lives: {:?}, in {}",
        common::proc_stat(orphan),
        std::fs::read_to_string(format!("/proc/{orphan}/cgroup"))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("0::"))
            .unwrap_or("")
    );
}

/// Found by the soak: when agentd cannot move a new worker into its task's
/// cgroups (here the v1 memory cgroup of a hybrid host, which
/// tasks.memory_max_bytes needs, refused for want of an fd: the daemon at
/// its RLIMIT_NOFILE), it used to log "task.cgroup … process group only"
/// and run the task anyway — but its kill of the slot (which needs an fd
/// too) did not take, the worker was left in a slot agentd gave up, and a
/// process the task setsid()s away outlived the task. Now the worker is
/// killed ("not run uncontained") and the task starts on the next one,
/// which does enter its cgroup: the escapee dies with its task.
#[test]
fn a_task_that_could_not_enter_its_cgroup_leaves_no_escapee() {
    let test = "a_task_that_could_not_enter_its_cgroup_leaves_no_escapee";
    let tmp = TempDir::new("gap-enter");
    let pidfile = tmp.0.join("escapee.pid");
    let prog = common::script(
        &tmp.0,
        "escape.sh",
        &format!(
            // The program waits until its escapee has left the process
            // group (setsid, then the pid file), so only a cgroup holds it.
            "read x\nif [ \"$x\" = escape ]; then\n  setsid sh -c 'echo $$ > {p}.new; mv {p}.new {p}; exec sleep 300' </dev/null >/dev/null 2>&1 &\n  while [ ! -s {p} ]; do sleep 0.01; done\nfi\necho \"$x\"",
            p = pidfile.display()
        ),
    );
    let d = Daemon::start(&[
        "--exec",
        prog.to_str().unwrap(),
        "--set",
        "tasks.prespawn=0",
        "--set",
        "tasks.memory_max_bytes=67108864",
    ]);
    let pid = d.pid();
    wait_for(Duration::from_secs(5), || d.log_text().contains("isolation="));
    let hybrid = d.log_text().contains("cgroup1-memory");
    let Some(()) = common::needed(
        "a hybrid cgroup host (tasks.memory_max_bytes through a v1 memory cgroup)",
        test,
        if hybrid {
            Ok(())
        } else {
            Err(format!("isolation here: {}", d.log_text()))
        },
    ) else {
        return;
    };
    let warm = d.ok(
        "SendMessage",
        serde_json::json!({"message": common::user_message("warm")}),
    );
    assert_eq!(warm["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{warm}");
    let server = common::fork_servers(pid);
    assert_eq!(server.len(), 1, "{server:?}");
    // The fork request goes out (its pipes made) while there is room; the
    // answer, and the move into the cgroup, come when there is none.
    signal(server[0], libc::SIGSTOP);
    assert!(wait_for(Duration::from_secs(5), || common::proc_stat(server[0])
        .is_some_and(|p| p.state == "T")));
    let id = d.send_async("escape");
    let queued = wait_for(Duration::from_secs(5), || common::unread_requests_bytes(pid) > 0);
    // The request's connection (answered at once) closes on its own time:
    // closed after the squeeze is set, it would free a descriptor below
    // the limit for the very open the squeeze is to refuse.
    assert!(
        wait_for(Duration::from_secs(5), || common::conn_threads(pid) == 0),
        "the request's connection did not close"
    );
    let squeeze = common::NofileSqueeze::new(pid, common::lowest_free_fd(pid));
    signal(server[0], libc::SIGCONT);
    assert!(queued, "the fork request never reached the fork server");
    let refused = wait_for(Duration::from_secs(5), || d.log_text().contains("not run uncontained"));
    drop(squeeze);
    assert!(
        refused,
        "the move into the cgroup did not fail under the squeeze:\n{}",
        d.log_text()
    );
    let mut task = serde_json::Value::Null;
    wait_for(Duration::from_secs(20), || {
        task = d.ok("GetTask", serde_json::json!({"id": id}));
        task["status"]["state"] != "TASK_STATE_SUBMITTED" && task["status"]["state"] != "TASK_STATE_WORKING"
    });
    assert!(
        wait_for(Duration::from_secs(5), || pidfile.exists()),
        "the task ended {} ({}) without starting its program; log:\n{}",
        task["status"]["state"],
        common::status_text(&task),
        d.log_text()
    );
    let escapee: i32 = common::read_when_ready(&pidfile, Duration::from_secs(5))
        .trim()
        .parse()
        .unwrap();
    let _cleanup = KillOnDrop(escapee);
    assert!(
        wait_for(Duration::from_secs(3), || !alive(escapee)),
        "task ended {} ({}), and its setsid()'d process {escapee} lives on: {:?}; log:\n{}",
        task["status"]["state"],
        common::status_text(&task),
        common::proc_stat(escapee),
        d.log_text()
    );
}
