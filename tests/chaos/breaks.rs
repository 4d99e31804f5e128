//! Breaking the soak on purpose, to show that each invariant can fire.
//! `AGENTD_CHAOS_BREAK=<invariant>[,<invariant>…]` (or `all`) makes the
//! run do, once, what the named invariant exists to catch, at the place
//! its judge reads — a daemon that answers otherwise, a process left
//! behind, a request dropped — and the run then passes only if each named
//! invariant fired. The judges' own tests (judge_tests.rs) show the same
//! in the normal suite without a daemon.

use std::collections::BTreeSet;
use std::io::Read;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::env::{Env, CALL_TIMEOUT};
use crate::ledger::{Kind, Progress, Via, View};

/// Every invariant, and what its break does.
pub const BREAKS: &[(&str, &str)] = &[
    (
        "unexpected_outcome",
        "the ledger notes a worker kill on an `ok` task that then ends COMPLETED",
    ),
    (
        "not_terminal",
        "after the settle, a 10 s task is sent to the last daemon and not waited for",
    ),
    (
        "two_terminal_states",
        "the events feed's first end is read twice, the second time as FAILED/crashed",
    ),
    (
        "view_differs_from_GetTask",
        "GetTask's view of one ended task gets other status text",
    ),
    ("stream_protocol", "one stream's first event is read twice"),
    ("client_error", "the probe calls a method that does not exist"),
    (
        "survived_restart",
        "an ended task of the last daemon is looked up as one lost with the daemon before",
    ),
    (
        "process_outlived_daemon",
        "a process of the soak's own is counted among a killed daemon's",
    ),
    (
        "process_left_after_restart",
        "after a restart, a process marked as a task of the dead daemon runs outside any daemon",
    ),
    (
        "cgroup_slot_left_after_restart",
        "after a restart, a cgroup named as the dead daemon's is made again",
    ),
    (
        "escaped_process",
        "a process marked as the run's agent runs outside the daemon for 3 s",
    ),
    (
        "zombie",
        "the monitor counts an unreaped child of the soak among the daemon's",
    ),
    (
        "resource_bound",
        "idle connections, more than the thread bound, are held open for 3 s",
    ),
    (
        "resource_growth",
        "once a daemon is warm, one more idle connection a second is held open (a leak)",
    ),
    ("probe_p99", "one probe in forty sends a 5 s task instead of `ok`"),
    ("probe_timeout", "a probe sends a 3 s task and waits 1 s for it"),
    (
        "metrics_undercount",
        "a client claims an end the daemon never gave, before a /metrics read",
    ),
    (
        "metrics_mismatch",
        "a client claims an end the last daemon never gave, before the final /metrics read",
    ),
    (
        "daemon_died",
        "the last daemon is stopped with SIGKILL instead of SIGTERM",
    ),
    ("unknown_task", "the probe sends a task it does not tell the ledger of"),
    (
        "helper_pool",
        "a process named agentd-fork, of the soak's own, is counted among the daemon's for 3 s",
    ),
    (
        "written_request_lost",
        "one request is written whole to a socket that reads it and hangs up",
    ),
];

/// The invariants a run was asked to break, and which breaks were done
/// (for those done once).
pub struct Breaks {
    asked: BTreeSet<&'static str>,
    done: Mutex<BTreeSet<&'static str>>,
}

impl Breaks {
    pub fn none() -> Breaks {
        Breaks {
            asked: BTreeSet::new(),
            done: Mutex::new(BTreeSet::new()),
        }
    }

    /// `a,b,c` or `all`; the names are the invariants' without `violation.`.
    pub fn parse(spec: &str) -> Result<Breaks, String> {
        let mut asked = BTreeSet::new();
        for name in spec.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == "all" {
                asked.extend(BREAKS.iter().map(|(n, _)| *n));
                continue;
            }
            let name = name.strip_prefix("violation.").unwrap_or(name);
            let (known, _) = BREAKS.iter().find(|(n, _)| *n == name).ok_or_else(|| {
                format!(
                    "AGENTD_CHAOS_BREAK: no invariant {name:?}; one of: all, {}",
                    BREAKS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                )
            })?;
            asked.insert(*known);
        }
        Ok(Breaks {
            asked,
            done: Mutex::new(BTreeSet::new()),
        })
    }

    pub fn list(&self) -> Vec<&'static str> {
        self.asked.iter().copied().collect()
    }

    pub fn asked(&self, invariant: &str) -> bool {
        self.asked.contains(invariant)
    }

    /// Whether to do the break for `invariant` now: asked, and not done
    /// yet. It is then done.
    pub fn take(&self, invariant: &str) -> bool {
        let Some(name) = self.asked.get(invariant) else {
            return false;
        };
        self.done.lock().unwrap().insert(name)
    }
}

/// Idle connections to `socket`: a thread and an fd each in the daemon
/// for as long as they are held.
pub fn hold_connections(socket: &Path, n: usize) -> Vec<UnixStream> {
    (0..n).filter_map(|_| UnixStream::connect(socket).ok()).collect()
}

/// Starts `program` under another name (its comm), so the soak's monitor,
/// which knows its agent's processes by name, does not take it for one.
pub fn start_named(dir: &Path, name: &str, program: &str, args: &[&str], env: &[(&str, &str)]) -> Option<Child> {
    let copy = dir.join(name);
    if !copy.exists() {
        std::fs::copy(program, &copy).ok()?;
    }
    Command::new(&copy)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// Kills and reaps a process the soak started.
pub fn end(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A client claims to have seen a task end that the daemon never gave:
/// a record, ended `state/cause`, under a contextId no request carried.
/// Returns its contextId (to forget it once the judge has seen it).
pub fn phantom_end(env: &Env, epoch: u32, state: &str, cause: &str) -> String {
    let ctx = env.new_ctx("phantom");
    env.ledger.register(&ctx, Kind::Ok, Via::Probe, epoch, 0);
    env.ledger.terminal(
        &ctx,
        View {
            state: state.into(),
            cause: cause.into(),
            text: String::new(),
            artifacts: Vec::new(),
        },
    );
    ctx
}

/// One blocking request written whole to a socket that reads it and hangs
/// up, as a daemon that dropped it would; the client then looks for its
/// task on the daemon as it does for any call that broke.
pub fn lose_a_request(env: Arc<Env>, dir: PathBuf) {
    let Some((epoch, _)) = env.daemon.wait_up(Duration::from_secs(10)) else {
        return;
    };
    let path = dir.join("black-hole.sock");
    let Ok(listener) = UnixListener::bind(&path) else {
        return;
    };
    let hole = std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 4096];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        }
    });
    let ctx = env.new_ctx("dropped");
    env.ledger.register(&ctx, Kind::Ok, Via::Blocking, epoch, 0);
    let body = crate::http::request_body(
        "SendMessage",
        &serde_json::json!({"message": crate::load::user_message("ok", &ctx, None),
                            "configuration": {"historyLength": 0}}),
    );
    let bytes = crate::http::post_bytes(&body, &[]);
    if let Ok(s) = crate::http::connect(&path, Duration::from_secs(5)) {
        let (progress, _) = crate::http::exchange_on(s, &bytes);
        env.ledger.request(&ctx, progress.min(Progress::Written));
    }
    let _ = hole.join();
    let _ = std::fs::remove_file(&path);
    env.follow(&ctx, epoch, CALL_TIMEOUT);
}

/// The run's verdict on its breaks: each asked one fired, or could not be
/// judged in a run this short (`unjudgeable`, with why). Prints a line each.
pub fn verdict(
    asked: &[&'static str],
    fired: impl Fn(&str) -> u64,
    unjudgeable: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut failures = Vec::new();
    for name in asked {
        let n = fired(name);
        let how = BREAKS.iter().find(|(b, _)| b == name).map_or("", |(_, h)| *h);
        if n > 0 {
            eprintln!("chaos: break {name}: fired {n} time(s) ({how})");
        } else if let Some(why) = unjudgeable(name) {
            eprintln!("chaos: break {name}: not judged in this run ({why})");
        } else {
            eprintln!("chaos: break {name}: DID NOT FIRE ({how})");
            failures.push(name.to_string());
        }
    }
    failures
}
