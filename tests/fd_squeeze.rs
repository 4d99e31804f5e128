//! agentd under a short RLIMIT_NOFILE squeeze (an operator's prlimit(1),
//! or a limit lowered under a running daemon): new connections and new
//! workers may fail for a moment, with a clear error, but what already
//! runs must go on — frames read, exits reaped, timers kept. A case the
//! chaos soak (tests/chaos.rs) found, reduced to one task: the bug is
//! fixed, and the test stays as its regression test.

mod common;

use std::time::{Duration, Instant};

use common::{processes_with_parent, wait_for, Daemon};

/// Found by the soak: with the soft RLIMIT_NOFILE below the number of fds
/// procman polls (its wake fds and two pipes per worker), poll(2) fails
/// with EINVAL ("nfds exceeds RLIMIT_NOFILE"). procman used to log
/// `procman.poll error=Invalid argument` every 10 ms and, until the limit
/// was back, read no frame and reap no exit — a worker that ended stayed a
/// zombie and its task did not end, though nothing of that needs a new fd.
/// Now a failed poll counts every fd as ready and the turn goes on.
#[test]
fn a_task_ends_and_is_reaped_while_rlimit_nofile_is_squeezed() {
    let d = Daemon::start(&[
        "--exec",
        "sh -c 'read x; sleep 0.5; echo \"$x\"'",
        "--set",
        "tasks.prespawn=0",
    ]);
    let pid = d.pid();
    let id = d.send_async("through the squeeze");
    assert!(
        wait_for(Duration::from_secs(10), || !common::task_workers(pid).is_empty()),
        "the task's worker never started"
    );
    let worker = common::task_workers(pid)[0];
    // Three: the daemon can open nothing (0–2 are taken), and procman's
    // poll set (wake fds, signals, the fork server, the worker's pipes) is
    // larger than that.
    let squeeze = common::NofileSqueeze::new(pid, 3);
    let squeezed = Instant::now();
    let exited = wait_for(Duration::from_secs(5), || {
        processes_with_parent(pid)
            .iter()
            .find(|p| p.pid == worker)
            .is_none_or(|p| p.state == "Z")
    });
    assert!(exited, "the worker did not finish its 0.5 s task");
    let reaped = wait_for(Duration::from_secs(2), || {
        processes_with_parent(pid).iter().all(|p| p.pid != worker)
    });
    // The worker's exit is reaped a moment before its task's end is
    // recorded, and a client cannot ask (the daemon may accept nothing
    // while squeezed), so the end is read from the log, then the squeeze
    // is lifted and the task's state asked for.
    let ended_line = format!("task.end task={id} ");
    let ended = wait_for(Duration::from_secs(5), || d.log_text().contains(&ended_line));
    let in_squeeze = squeezed.elapsed();
    drop(squeeze);
    let task = d.ok("GetTask", serde_json::json!({"id": id}));
    let poll_errors = d.log_text().matches("procman.poll error").count();
    assert!(
        reaped && ended && task["status"]["state"] == "TASK_STATE_COMPLETED",
        "{in_squeeze:?} into the squeeze: worker {worker} reaped: {reaped}, task ended: {ended}, task {}; {poll_errors} `procman.poll error` lines",
        task["status"]["state"]
    );
}
