//! A helper's lateness never costs a task its worker (DESIGN.md §5,
//! issue 37). Eight clients keep short tasks running while the fork
//! server is SIGSTOPped for about agentd's own answer deadline (1 s) over
//! and over, or SIGKILLed at random moments: a worker the fork server made
//! before it stopped or died is alive, holds its task and is agentd's own
//! child, so it is adopted and its task runs to its end. Every task ends
//! COMPLETED; none is failed for its helper's sake.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{signal, status_text, terminal_cause, Daemon};
use serde_json::{json, Value};

const CLIENTS: usize = 8;

/// A small deterministic generator, seeded from the clock and printed,
/// so a failing run can be told apart from another.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        eprintln!("helpers_late seed={seed:#x}");
        Rng(seed)
    }

    /// A number in `lo..hi`.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        lo + self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % (hi - lo)
    }
}

/// What the clients saw: each task's id, state, cause and text.
type Ended = Vec<(String, String, String, String)>;

/// Runs `CLIENTS` clients sending short tasks until `stop` is set, each
/// waiting for its task's end (blocking SendMessage), and returns every
/// task they saw end.
fn clients(d: &Arc<Daemon>, stop: &Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<Ended>> {
    (0..CLIENTS)
        .map(|c| {
            let d = d.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let text = format!("client {c} task {n}");
                    let r = d.rpc(
                        "SendMessage",
                        json!({"message": {"messageId": common::new_id(), "role": "ROLE_USER",
                                           "parts": [{"text": text}]}}),
                    );
                    let task = &r["result"]["task"];
                    let state = task["status"]["state"].as_str().unwrap_or("").to_string();
                    let id = task["id"].as_str().unwrap_or("").to_string();
                    assert!(!id.is_empty(), "client {c}: no task in {r}");
                    seen.push((id, state, terminal_cause(task), status_text(task).to_string()));
                }
                seen
            })
        })
        .collect()
}

fn judge(d: &Daemon, ended: Ended, faults: usize, what: &str) {
    let log = d.log_text();
    eprintln!(
        "{} tasks, {faults} faults; {} workers adopted after their fork server was lost, {} tasks taken back",
        ended.len(),
        log.matches("procman.reclaimed task=").count(),
        log.matches("procman.forkserver pid=").count()
    );
    let failed: Vec<_> = ended
        .iter()
        .filter(|(_, s, _, _)| s != "TASK_STATE_COMPLETED")
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} tasks did not complete while the fork server was {what} {faults} times: {failed:?}; log tail:\n{}",
        failed.len(),
        ended.len(),
        tail(&d.log_text(), 60)
    );
    assert!(
        ended.len() >= 40,
        "only {} tasks ran: the load did not run",
        ended.len()
    );
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The daemon's fork server, once there is exactly one.
fn fork_server(d: &Daemon, within: Duration) -> Option<i32> {
    let mut found = Vec::new();
    common::wait_for(within, || {
        found = common::fork_servers(d.pid());
        found.len() == 1
    });
    (found.len() == 1).then(|| found[0])
}

/// A task program of about 0.3 s: long enough that workers the fork server
/// made are still running when it stops or dies.
fn daemon(tag: &str) -> Arc<Daemon> {
    // The script lives in the daemon's own directory, so it lives as long
    // as the daemon and goes with it.
    let dir = common::TempDir::new(tag);
    let prog = common::script(&dir.0, "short.sh", "sleep 0.3; cat");
    let socket = dir.0.join("a.sock");
    Arc::new(Daemon::start_at(dir, socket, &["--exec", prog.to_str().unwrap()]))
}

fn collect(handles: Vec<std::thread::JoinHandle<Ended>>) -> Ended {
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("a client panicked"))
        .collect()
}

#[test]
fn a_fork_server_stopped_for_about_its_deadline_fails_no_task() {
    let d = daemon("late-stop");
    let stop = Arc::new(AtomicBool::new(false));
    let load = clients(&d, &stop);
    let mut rng = Rng::seeded();
    let until = Instant::now() + Duration::from_secs(20);
    let mut stops = 0;
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(rng.between(200, 500)));
        let Some(server) = fork_server(&d, Duration::from_secs(5)) else {
            continue;
        };
        // Just under, at and just over agentd's 1 s answer deadline.
        let hold = Duration::from_millis(rng.between(950, 1050));
        signal(server, libc::SIGSTOP);
        std::thread::sleep(hold);
        signal(server, libc::SIGCONT);
        stops += 1;
    }
    stop.store(true, Ordering::SeqCst);
    let ended = collect(load);
    assert!(stops >= 10, "only {stops} stops");
    judge(&d, ended, stops, "stopped for 0.95–1.05 s");
}

#[test]
fn a_fork_server_killed_at_random_moments_fails_no_task() {
    let d = daemon("late-kill");
    let stop = Arc::new(AtomicBool::new(false));
    let load = clients(&d, &stop);
    let mut rng = Rng::seeded();
    let until = Instant::now() + Duration::from_secs(15);
    let mut kills = 0;
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(rng.between(100, 700)));
        if let Some(server) = fork_server(&d, Duration::from_secs(5)) {
            signal(server, libc::SIGKILL);
            kills += 1;
        }
    }
    stop.store(true, Ordering::SeqCst);
    let ended = collect(load);
    assert!(kills >= 10, "only {kills} kills");
    judge(&d, ended, kills, "SIGKILLed");
    // The daemon still serves, with a fork server of its own.
    let last: Value = d.ok(
        "SendMessage",
        json!({"message": {"messageId": common::new_id(), "role": "ROLE_USER", "parts": [{"text": "after"}]}}),
    );
    assert_eq!(last["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{last}");
}

/// A fork server that answers every request 1.3 s late (a debug build's
/// hook: it forks at once, then waits before it says so), past agentd's
/// 1 s deadline: every worker it makes reads its task and runs while
/// agentd gives up on the fork server. Each is adopted when it says who it
/// is, and its task completes — none is failed, none runs twice.
#[test]
fn a_worker_whose_fork_server_answers_too_late_is_adopted_and_its_task_completes() {
    let tmp = common::TempDir::new("late-answer");
    let ran = tmp.0.join("ran.log");
    let prog = common::script(
        &tmp.0,
        "once.sh",
        &format!("read l; echo \"$l\" >> {}; echo \"ok $l\"", ran.display()),
    );
    let d = Daemon::start_env(
        common::TempDir::new("late-answer-d"),
        tmp.0.join("a.sock"),
        &["--exec", prog.to_str().unwrap(), "--set", "tasks.prespawn=0"],
        &[("RUST_LOG", "debug"), ("AGENTD_TEST_LATE_FORK_REPLY_MS", "1300")],
    );
    for i in 0..3 {
        let text = format!("late {i}");
        let r = d.ok(
            "SendMessage",
            json!({"message": {"messageId": common::new_id(), "role": "ROLE_USER", "parts": [{"text": text}]}}),
        );
        let task = &r["task"];
        assert_eq!(
            task["status"]["state"],
            "TASK_STATE_COMPLETED",
            "task {i}: {} ({}); log:\n{}",
            terminal_cause(task),
            status_text(task),
            tail(&d.log_text(), 40)
        );
    }
    let log = d.log_text();
    assert!(
        log.matches("procman.reclaimed task=").count() >= 3,
        "each worker was to be adopted (its fork server answers after agentd's deadline); log:\n{}",
        tail(&log, 60)
    );
    let runs = std::fs::read_to_string(&ran).unwrap_or_default();
    assert_eq!(
        runs.lines().collect::<Vec<_>>(),
        ["late 0", "late 1", "late 2"],
        "each task ran once"
    );
}
