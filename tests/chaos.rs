//! The chaos soak: one daemon under a mixed load from many clients at once
//! while a fault injector, from a seeded schedule printed at the start,
//! breaks everything it can reach — task workers, task programs and their
//! children (SIGKILL, SIGSTOP/SIGCONT), the fork server and idle workers,
//! the daemon's RLIMIT_NOFILE and a task's memory limit, and the daemon
//! itself (kill -9, then a restart on the same socket that the clients find
//! again). Invariants are checked all the time and at the end, each a named
//! counter in the report that must stay 0:
//!
//! | counter | what it means |
//! |---|---|
//! | `unexpected_outcome` | a task ended in a state or cause other than what was done to it gives (see `ledger::allowed`) |
//! | `not_terminal` | an accepted task of the last daemon never ended |
//! | `two_terminal_states` | a task was seen ending twice, differently |
//! | `view_differs_from_GetTask` | the client's last view (assembled from events, or the answer) is not GetTask's |
//! | `stream_protocol` | event ids that do not rise, events after the end, a stream that ends early |
//! | `client_error` | a call failed with nothing (no kill, no squeeze) to explain it |
//! | `survived_restart` | a task of a killed daemon is known to the next one |
//! | `process_outlived_daemon` | a process of a killed daemon lives 5 s on, before any restart |
//! | `process_left_after_restart` | and still 5 s after the restart (which clears the dead daemon's slots) |
//! | `cgroup_slot_left_after_restart` | the killed daemon's cgroups outlive the restart by 10 s |
//! | `escaped_process` | a task's process outside the daemon, or alive 1.5 s after its task ended |
//! | `zombie` | a child of the daemon unreaped for over a second |
//! | `resource_bound` / `resource_growth` | threads, fds or RSS over the stated bound, or higher late in a daemon's life than early |
//! | `probe_p99` / `probe_timeout` | the probe client's p99 over the stated bound; a probe call unanswered |
//! | `metrics_undercount` / `metrics_mismatch` | `/metrics` counted fewer ended tasks than clients saw; at the end, not exactly as many |
//! | `daemon_died` | the daemon exited when nobody killed it, or not with 0 at SIGTERM |
//! | `unknown_task` | a task no client sent, or two for one message |
//! | `helper_pool` | two fork servers, or no idle worker for 10 s |
//!
//! Tasks in flight when the daemon is killed are counted lost by restart
//! (not a failure), and checked to leave nothing behind.
//!
//! ```text
//! cargo test -j2 --test chaos -- --nocapture                     # the default short run (25 s, debug build)
//! AGENTD_CHAOS_SECS=3600 cargo test --release --test chaos -- --nocapture   # the reference hour
//! ```
//!
//! `AGENTD_CHAOS_SECS` (default 25), `AGENTD_CHAOS_SEED` (decimal or 0x…;
//! default: drawn and printed), `AGENTD_CHAOS_CLIENTS` (load threads;
//! default 6 for the short run, 16 otherwise), `AGENTD_CHAOS_BIN` (the
//! agentd to run; default the one cargo built for this test, so
//! `cargo test --release` runs the release build), `AGENTD_CHAOS_LOG`
//! (the daemon's RUST_LOG; default info, and no coarser: the judge reads
//! its `task.start` lines to know which workers a task had),
//! `AGENTD_CHAOS_MEMORY_LIMIT` (`on`, the default: tasks get
//! `tasks.memory_max_bytes` of 64 MiB; `off`: no limit. Where the memory
//! controller is v1 only, as on a hybrid host, the limit is what puts each
//! worker into v1 cgroups after its birth; `off` soaks there the path a
//! pure-v2 host takes — workers born whole in their slot, tasks handed to
//! them before they are born — and leaves out the loads and faults that
//! need a limit). The daemon's
//! logs are kept when the run fails or `AGENTD_CHAOS_KEEP` is set (the
//! report names the directory).
//!
//! The default run leaves out the faults that trip a daemon bug still open
//! (`KNOWN_BUGS`) and does not fail on the invariants such a bug breaks
//! now and then (`KNOWN_BUG_INVARIANTS`: reported, each with its own failing
//! test); any run with `AGENTD_CHAOS_SECS` set keeps every fault and fails
//! on every invariant.

mod common;

#[path = "chaos/daemon.rs"]
mod daemon;
#[path = "chaos/faults.rs"]
mod faults;
#[path = "chaos/http.rs"]
mod http;
#[path = "chaos/ledger.rs"]
mod ledger;
#[path = "chaos/load.rs"]
mod load;
#[path = "chaos/mcp.rs"]
mod mcp;
#[path = "chaos/procs.rs"]
mod procs;
#[path = "chaos/rng.rs"]
mod rng;
#[path = "chaos/watch.rs"]
mod watch;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use daemon::Daemon;
use faults::Fault;
use ledger::{allowed, Ledger, Rec};
use load::Env;
use watch::Sample;

/// Faults the default run leaves out: each trips a daemon bug that is still
/// open and has a failing test of its own. Longer runs keep them.
// Every one it held was fixed on main and keeps its own test: a stopped
// fork server (FORK_ANSWER_MS) and a dying one failing the tasks it owed
// (tests/procman.rs, tests/helpers_fail.rs), a stopped idle worker
// stalling its task (WORKER_TAKE_MS), and under the NOFILE squeeze a
// worker run outside its v1 cgroup (containment_gaps) and poll(2) failing
// EINVAL (fd_squeeze).
const KNOWN_BUGS: &[(Fault, &str)] = &[];

/// Invariants the default run reports but does not fail on: each broken by
/// a daemon bug that is still open, rare in a short run, with a failing
/// test of its own. Longer runs fail on them.
// The one it held (an orphan adopted by agentd outliving its kill -9) was
// fixed: every worker is its task's subreaper (containment_gaps).
const KNOWN_BUG_INVARIANTS: &[(&str, &str)] = &[];

const PING_MS: u64 = 500;
const STALL_MS: u64 = 1500;
const BODY_MAX: usize = 131_072;
const MAX_RUNNING: usize = 64;
/// A probe call unanswered this long is a hang (`probe_timeout`).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The probe's p99 bound: a blocking `ok` task from send to answer. It is
/// generous on purpose (a loaded 2-core machine, a debug build, fd
/// squeezes and stopped helpers in the mix) and still far below a hang.
fn probe_p99_bound() -> Duration {
    Duration::from_millis(if cfg!(debug_assertions) { 4000 } else { 2500 })
}

/// The agent every task runs (jsonl): the message's first word says what
/// to do. It writes "pid starttime" under its contextId (so the injector
/// can find it) and exports CHAOS_CTX to what it starts (so the monitor
/// can tell whose a process is); agent.env gives it CHAOS_RUN.
const AGENT: &str = r#"#!/bin/sh
IFS= read -r line || exit 3
t=${line#*\"text\":\"}; t=${t%%\"*}
ctx=${line#*\"contextId\":\"}; ctx=${ctx%%\"*}
export CHAOS_CTX="$ctx"
read -r st < /proc/$$/stat
set -- $st
echo "$$ ${22}" > "$CHAOS_PIDS/$ctx"
cmd=${t%% *}; arg=${t#"$cmd"}; arg=${arg# }
say() { printf '%s\n' "$1"; }
finish() { say "{\"status\":\"completed\",\"text\":\"$1\"}"; exit 0; }
ticks() {
  set -- $arg; i=0
  while [ $i -lt $2 ]; do
    say "{\"status\":\"working\",\"text\":\"tick $i\"}"
    sleep "$1"; rc=$?
    [ $rc -eq 0 ] || { say "{\"status\":\"failed\",\"text\":\"child ended $rc\"}"; exit 0; }
    i=$((i+1))
  done
}
grow() {
  s=zzzzzzzzzzzzzzzz; i=0
  while [ $i -lt 16 ]; do s="$s$s"; i=$((i+1)); done
  i=0
  while [ $i -lt $1 ]; do [ "$2" = slow ] && sleep 0.6; s="$s$s"; i=$((i+1)); done
}
case "$cmd" in
ok) say '{"artifact":{"artifactId":"out","parts":[{"text":"ok"}]},"lastChunk":true}'; finish ok ;;
fail) say '{"status":"failed","text":"failing on purpose"}' ;;
reject) say '{"status":"rejected","text":"not mine"}' ;;
sleep) ticks; finish slept ;;
child) setsid sleep 300 </dev/null >/dev/null 2>&1 & ticks; finish "slept beside a child" ;;
flood) i=0; app=false
  while [ $i -lt "$arg" ]; do
    say "{\"artifact\":{\"artifactId\":\"flood\",\"parts\":[{\"text\":\"line $i of $arg\\n\"}]},\"append\":$app}"
    app=true; i=$((i+1))
  done
  say '{"artifact":{"artifactId":"flood","parts":[{"text":"end"}]},"append":true,"lastChunk":true}'
  finish "flooded $arg" ;;
ask) k=1; answers=
  while [ $k -le "$arg" ]; do
    say "{\"status\":\"input-required\",\"text\":\"question $k\"}"
    IFS= read -r next || exit 4
    a=${next#*\"text\":\"}; a=${a%%\"*}; answers="$answers $a"; k=$((k+1))
  done
  finish "answers:$answers" ;;
askidle) say '{"status":"input-required","text":"anyone there?"}'; IFS= read -r next; finish late ;;
hang) say '{"status":"working","text":"hanging"}'; sleep 1000 ;;
big) finish "big ${#arg}" ;;
grow) grow 4 slow; finish grew ;;
hog) grow 8 fast; finish "grew past any limit" ;;
*) say "{\"status\":\"failed\",\"text\":\"unknown command $cmd\"}" ;;
esac
"#;

struct Settings {
    secs: u64,
    seed: u64,
    clients: usize,
    default_run: bool,
    bin: PathBuf,
    log: String,
    /// Tasks get a memory limit (tasks.memory_max_bytes).
    memory_limit: bool,
}

fn settings() -> Settings {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let secs_var = var("AGENTD_CHAOS_SECS");
    let default_run = secs_var.is_none();
    let secs = secs_var.map_or(25, |v| v.parse().expect("AGENTD_CHAOS_SECS: a number of seconds"));
    assert!(secs >= 15, "AGENTD_CHAOS_SECS: at least 15 (every fault needs a turn)");
    let seed = var("AGENTD_CHAOS_SEED").map_or_else(rng::fresh_seed, |v| {
        let parsed = match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => v.parse(),
        };
        parsed.expect("AGENTD_CHAOS_SEED: a number (decimal or 0x…)")
    });
    let clients = var("AGENTD_CHAOS_CLIENTS").map_or(if default_run { 6 } else { 16 }, |v| {
        v.parse().expect("AGENTD_CHAOS_CLIENTS: a number")
    });
    Settings {
        secs,
        seed,
        clients,
        default_run,
        bin: var("AGENTD_CHAOS_BIN").map_or_else(|| PathBuf::from(common::BIN), PathBuf::from),
        log: var("AGENTD_CHAOS_LOG").unwrap_or_else(|| "info".into()),
        memory_limit: var("AGENTD_CHAOS_MEMORY_LIMIT").is_none_or(|v| match v.as_str() {
            "on" => true,
            "off" => false,
            _ => panic!("AGENTD_CHAOS_MEMORY_LIMIT: on or off, not {v:?}"),
        }),
    }
}

#[test]
fn chaos_soak() {
    let s = settings();
    let run_started = Instant::now();
    let dir = common::TempDir::new("chaos");
    let pids = dir.0.join("pids");
    std::fs::create_dir_all(&pids).unwrap();
    let agent = common::script(&dir.0, "agent.sh", AGENT.trim_start_matches("#!/bin/sh\n"));
    let run_id = format!("{:016x}", s.seed ^ u64::from(std::process::id()));
    common::raise_nofile_limit(8192);
    let set = |kv: String| ["--set".to_string(), kv];
    let mut args = vec!["--exec".to_string(), agent.display().to_string()];
    for kv in [
        "agent.exec_protocol=jsonl".to_string(),
        format!("agent.env=CHAOS_RUN={run_id}"),
        format!("agent.env=CHAOS_PIDS={}", pids.display()),
        format!("tasks.max_running={MAX_RUNNING}"),
        "tasks.deadline_ms=10000".into(),
        "tasks.input_idle_ms=2000".into(),
        format!("tasks.ping_interval_ms={PING_MS}"),
        format!("tasks.stall_timeout_ms={STALL_MS}"),
        "tasks.cancel_grace_ms=300".into(),
        "tasks.term_grace_ms=700".into(),
        format!("http.body_max_bytes={BODY_MAX}"),
        "http.sse_keepalive_ms=1000".into(),
    ] {
        args.extend(set(kv));
    }
    if s.memory_limit {
        args.extend(set("tasks.memory_max_bytes=67108864".into()));
    }
    let d = Arc::new(Daemon::new(
        s.bin.clone(),
        dir.0.clone(),
        args,
        vec![("RUST_LOG".into(), s.log.clone())],
    ));
    d.start().expect("the first daemon starts");
    let isolation = d.isolation();
    let memory = isolation.contains("memory") || {
        let (_, pid) = d.current().unwrap();
        procs::daemon_cgroups(pid)
            .iter()
            .any(|c| std::fs::read_to_string(c.join("cgroup.subtree_control")).is_ok_and(|t| t.contains("memory")))
    };
    let mut skip: Vec<Fault> = Vec::new();
    if s.default_run {
        skip.extend(KNOWN_BUGS.iter().map(|(f, _)| *f));
    }
    if !memory {
        skip.push(Fault::SqueezeMemory);
    }
    let plan = faults::schedule(s.seed, s.secs, &skip, PING_MS, STALL_MS);
    let planned = plan.len() as u64;
    // The injector signals through pidfds (Linux 5.3): without them it could
    // do nothing, and the soak would pass having broken nothing.
    assert!(
        procs::stat(std::process::id() as i32).is_some_and(|me| procs::Held::open(&me).is_some()),
        "pidfd_open(2) does not work here: the fault injector cannot run"
    );
    eprintln!(
        "chaos: seed={:#x} (AGENTD_CHAOS_SEED) secs={} clients={} binary={} ({} build) isolation={isolation}\n\
         chaos: left out: {}\nchaos: schedule, {} faults:\n{}",
        s.seed,
        s.secs,
        s.clients,
        s.bin.display(),
        if cfg!(debug_assertions) { "debug" } else { "release" },
        if skip.is_empty() {
            "nothing".to_string()
        } else {
            skip.iter()
                .map(|f| {
                    let why = KNOWN_BUGS
                        .iter()
                        .find(|(k, _)| k == f)
                        .map_or("no memory cgroup here", |(_, w)| w);
                    format!("{} ({why})", f.name())
                })
                .collect::<Vec<_>>()
                .join(", ")
        },
        plan.len(),
        faults::describe(&plan)
    );

    // The idle baseline, before any load.
    let (_, pid0) = d.current().unwrap();
    assert!(common::wait_for(Duration::from_secs(10), || !common::idle_workers(
        pid0
    )
    .is_empty()));
    let (base_threads, base_fds, base_rss) = procs::threads_fds_rss(pid0).unwrap();
    let base_cgroup_fds = procs::cgroup_fds(pid0);

    let ledger = Arc::new(Ledger::new());
    let env = Arc::new(Env::new(d.clone(), ledger.clone(), pids.clone(), BODY_MAX, memory));
    let watch_stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (env, stop, run_id) = (env.clone(), watch_stop.clone(), run_id.clone());
        std::thread::spawn(move || watch::Watch::new(env, run_id).run(stop))
    };
    let injector = {
        let env = env.clone();
        let verbose = s.secs <= 120;
        let seed = s.seed;
        std::thread::spawn(move || faults::Injector::new(env, seed, verbose).run(plan))
    };
    let mut clients = Vec::new();
    for i in 0..s.clients {
        let env = env.clone();
        let r = rng::Rng::stream(s.seed, 100 + i as u64);
        clients.push(std::thread::spawn(move || load::client(env, format!("c{i:02}"), r)));
    }
    {
        let env = env.clone();
        clients.push(std::thread::spawn(move || {
            load::probe(env, Duration::from_millis(200), PROBE_TIMEOUT)
        }));
    }
    {
        let (env, bin) = (env.clone(), s.bin.clone());
        let r = rng::Rng::stream(s.seed, 99);
        clients.push(std::thread::spawn(move || mcp::client(env, bin, r)));
    }

    while ledger.start.elapsed() < Duration::from_secs(s.secs) {
        std::thread::sleep(Duration::from_millis(100));
    }
    env.stop.store(true, Ordering::SeqCst);
    let fault_log = injector.join().expect("the injector panicked");
    let load_ended = Instant::now();
    for c in clients {
        c.join().expect("a client panicked");
    }
    let clients_done_in = load_ended.elapsed();

    // Settle: every task of the last daemon followed to its end.
    let final_epoch = d.epoch();
    let open = ledger.open_in_epoch(final_epoch);
    let settle = Instant::now();
    for (ctx, _) in &open {
        let left = Duration::from_secs(60).saturating_sub(settle.elapsed());
        env.follow(ctx, final_epoch, left.max(Duration::from_secs(1)));
    }
    let (_, pid) = d.current().expect("the daemon is up at the end");

    // Quiet again: no worker, threads back to the idle baseline, and fds
    // too but for what agentd keeps on purpose: the files of each cgroup
    // slot it keeps for reuse (a few each: directory, cgroup.kill, the
    // procs files, counters) and two control pipes per idle worker.
    let slots = || {
        procs::daemon_cgroups(pid)
            .iter()
            .map(|c| {
                std::fs::read_dir(c)
                    .map(|r| r.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).count())
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0)
    };
    let rest_bound = || {
        (
            base_fds - base_cgroup_fds + 2 * common::idle_workers(pid).len() + 4,
            8 * slots(),
        )
    };
    let quiet = common::wait_for(Duration::from_secs(20), || {
        let Some((t, f, _)) = procs::threads_fds_rss(pid) else {
            return false;
        };
        let cg = procs::cgroup_fds(pid);
        let (other_max, cgroup_max) = rest_bound();
        common::task_workers(pid).is_empty() && t <= base_threads + 3 && f - cg <= other_max && cg <= cgroup_max
    });
    let end = procs::threads_fds_rss(pid).unwrap_or_default();
    if !quiet {
        let (other_max, cgroup_max) = rest_bound();
        ledger.violation(
            "violation.resource_bound",
            format!(
                "at rest after the load: {} threads, {} fds {:?}, {} workers (idle baseline {base_threads} threads, \
                 {base_fds} fds; at most {other_max} fds besides cgroup files, {cgroup_max} cgroup files for {} \
                 slots)",
                end.0,
                end.1,
                procs::fd_kinds(pid),
                common::task_workers(pid).len(),
                slots(),
            ),
        );
    }
    watch_stop.store(true, Ordering::SeqCst);
    let (samples, transient_zombies) = watcher.join().expect("the monitor panicked");

    adopt_late(&env, final_epoch);
    // /metrics of the last daemon equals what clients saw in its life.
    let seen = ledger.seen_in_epoch(final_epoch);
    let metrics = http::get(&d.socket, "/metrics", Duration::from_secs(10))
        .map(|r| http::ended_totals(&r.text()))
        .unwrap_or_default();
    let counted: BTreeMap<String, u64> = metrics.into_iter().filter(|(_, n)| *n > 0).collect();
    if counted != seen {
        ledger.violation(
            "violation.metrics_mismatch",
            format!("epoch {final_epoch}: /metrics {counted:?}, clients saw {seen:?}"),
        );
    }
    audit_list(&env, final_epoch);

    let probe: Vec<Duration> = env.probe.lock().unwrap().clone();
    let p99 = percentile(&probe, 99);
    if probe.len() >= 20 && p99 > probe_p99_bound() {
        ledger.violation(
            "violation.probe_p99",
            format!("probe p99 {p99:?} over {:?} ({} calls)", probe_p99_bound(), probe.len()),
        );
    }
    let bounds = Bounds {
        threads: base_threads + 4 * (s.clients + 4) + 16,
        fds: base_fds + 12 * (s.clients + 4) + 16,
        rss_kb: base_rss + 96 * 1024,
    };
    judge_resources(&ledger, &samples, &bounds);
    let recs = ledger.drain();
    let tally = judge_tasks(&env, &d, recs, final_epoch);

    // A clean stop: exit 0, nothing left, its cgroups removed.
    let code = d.stop();
    if code != Some(0) {
        ledger.violation("violation.daemon_died", format!("SIGTERM at the end: exit {code:?}"));
    }
    if !common::wait_for(Duration::from_secs(10), || procs::daemon_cgroups(pid).is_empty()) {
        ledger.violation(
            "violation.cgroup_slot_left_after_restart",
            format!(
                "agentd {pid}'s cgroups outlive its clean stop: {:?}",
                procs::daemon_cgroups(pid)
            ),
        );
    }

    let sent = tally.sent;
    let report = Report {
        s: &s,
        ledger: &ledger,
        tally,
        probe,
        samples,
        transient_zombies,
        bounds,
        base: (base_threads, base_fds, base_rss),
        end,
        faults: fault_log,
        clients_done_in,
        total: run_started.elapsed(),
    };
    report.print();
    // A soak that broke little or sent little proves little: most of the
    // schedule must have found its victims, and the clients must have sent
    // a task a second at least.
    let applied: u64 = ledger
        .counters()
        .iter()
        .filter(|(k, _)| k.starts_with("fault.") && !k.ends_with(".no_target"))
        .map(|(_, n)| *n)
        .sum();
    assert!(
        applied * 2 >= planned,
        "only {applied} of {planned} faults found a victim (seed {:#x})",
        s.seed
    );
    assert!(sent >= s.secs, "only {sent} tasks in {} s (seed {:#x})", s.secs, s.seed);
    let excused: Vec<&str> = if s.default_run {
        KNOWN_BUG_INVARIANTS.iter().map(|(n, _)| *n).collect()
    } else {
        Vec::new()
    };
    for (name, why) in KNOWN_BUG_INVARIANTS {
        let n = ledger.counters().get(*name).copied().unwrap_or(0);
        if n > 0 && s.default_run {
            eprintln!("chaos: {name} = {n}, a known bug the default run does not fail on: {why}");
        }
    }
    let failed = ledger.violations(&excused);
    if failed > 0 || std::env::var_os("AGENTD_CHAOS_KEEP").is_some() {
        let kept = dir.0.clone();
        std::mem::forget(dir);
        eprintln!("chaos: the daemon's logs are kept in {}", kept.display());
        assert_eq!(failed, 0, "{failed} invariant violation(s) (seed {:#x})", s.seed);
    }
}

/// A client whose call broke (an fd squeeze) before it learned its task's
/// id may have looked for the task by its contextId before the daemon got
/// to the request, and concluded nothing was made. The task is still the
/// one it sent: found by that contextId, it is the client's, and its end
/// is what the client sees now.
fn adopt_late(env: &Env, epoch: u32) {
    let known = env.ledger.task_ids();
    let mut tasks = Vec::new();
    let mut token = String::new();
    loop {
        let Ok(page) = http::rpc(
            &env.daemon.socket,
            "ListTasks",
            json!({"pageSize": 100, "pageToken": token, "historyLength": 0}),
            Duration::from_secs(10),
        ) else {
            return; // audit_list reports it
        };
        tasks.extend(page["tasks"].as_array().cloned().unwrap_or_default());
        token = page["nextPageToken"].as_str().unwrap_or("").to_string();
        if token.is_empty() {
            break;
        }
    }
    for t in &tasks {
        let (Some(id), Some(ctx)) = (t["id"].as_str(), t["contextId"].as_str()) else {
            continue;
        };
        if known.contains_key(id) {
            continue;
        }
        let adopted = env.ledger.with(ctx, |r| {
            let lost = r.task.is_none() && r.epoch == epoch;
            if lost {
                r.task = Some(id.to_string());
                r.unaccepted = false;
            }
            lost
        });
        if adopted == Some(true) {
            env.ledger.count("calls.task_found_after_the_client_gave_up");
            let view = ledger::View::of_task(t);
            if view.terminal() {
                env.ledger.terminal(ctx, view);
            }
        }
    }
}

/// Every task the last daemon lists is one a client sent, and has ended.
fn audit_list(env: &Env, epoch: u32) {
    let known = env.ledger.task_ids();
    let mut token = String::new();
    loop {
        let page = match http::rpc(
            &env.daemon.socket,
            "ListTasks",
            json!({"pageSize": 100, "pageToken": token, "historyLength": 0}),
            Duration::from_secs(10),
        ) {
            Ok(p) => p,
            Err(e) => {
                env.ledger
                    .violation("violation.client_error", format!("ListTasks at the end: {e}"));
                return;
            }
        };
        for t in page["tasks"].as_array().into_iter().flatten() {
            let id = t["id"].as_str().unwrap_or("");
            let state = t["status"]["state"].as_str().unwrap_or("");
            if !known.contains_key(id) {
                env.ledger.violation(
                    "violation.unknown_task",
                    format!("epoch {epoch}: ListTasks has {id} ({state}), which no client sent"),
                );
            }
            if !ledger::is_terminal(state) {
                env.ledger.violation(
                    "violation.not_terminal",
                    format!("task {id} is {state} after the settle"),
                );
            }
        }
        token = page["nextPageToken"].as_str().unwrap_or("").to_string();
        if token.is_empty() {
            return;
        }
    }
}

#[derive(Default)]
struct Tally {
    sent: u64,
    ended: u64,
    not_created: u64,
    lost: u64,
    unacknowledged: u64,
    outcomes: BTreeMap<String, u64>,
    by_fault: BTreeMap<String, BTreeMap<String, u64>>,
}

/// Every task against what was done to it.
fn judge_tasks(env: &Env, d: &Daemon, recs: Vec<(String, Rec)>, final_epoch: u32) -> Tally {
    let mut t = Tally::default();
    let workers = task_workers(d);
    for (ctx, r) in recs {
        if r.unaccepted {
            t.not_created += 1;
            continue;
        }
        t.sent += 1;
        let Some(view) = &r.view else {
            if r.epoch < final_epoch {
                match &r.task {
                    Some(id) => {
                        t.lost += 1;
                        if let Ok(v) = env.get_view(id) {
                            env.ledger.violation(
                                "violation.survived_restart",
                                format!(
                                    "ctx={ctx} task {id} of epoch {} is known after the restart: {v:?}",
                                    r.epoch
                                ),
                            );
                        }
                    }
                    None => t.unacknowledged += 1,
                }
            } else {
                env.ledger.violation(
                    "violation.not_terminal",
                    format!("ctx={ctx} task {:?} ({:?} via {:?}) never ended", r.task, r.kind, r.via),
                );
            }
            continue;
        };
        t.ended += 1;
        let key = view.outcome().key();
        *t.outcomes.entry(key.clone()).or_default() += 1;
        let ended = r.ended.unwrap_or_else(Instant::now);
        let pids = r
            .task
            .as_ref()
            .and_then(|id| workers.get(id))
            .map_or(&[][..], |p| &p[..]);
        let idle = env.ledger.idle_fault_on(pids, r.sent, ended);
        let what = match (r.fault, r.cancel, idle) {
            (Some((f, _)), _, _) => format!("{f:?}"),
            (None, Some(true), _) => "CancelTask".to_string(),
            (None, _, Some(f)) => format!("{f:?} on an idle worker that had just taken it"),
            _ => "nothing".to_string(),
        };
        *t.by_fault.entry(what.clone()).or_default().entry(key).or_default() += 1;
        let squeezed = d.squeezed_between(r.sent, ended, Duration::from_secs(1));
        let ok = allowed(&r, squeezed, idle)
            .iter()
            .any(|(o, text)| *o == view.outcome() && view.text.contains(text));
        if !ok {
            env.ledger.violation(
                "violation.unexpected_outcome",
                format!(
                    "ctx={ctx} task={:?} {:?} via {:?}, {what} done to it: ended {} ({:?}); allowed {:?}",
                    r.task,
                    r.kind,
                    r.via,
                    view.outcome().key(),
                    view.text,
                    allowed(&r, squeezed, idle)
                        .iter()
                        .map(|(o, t)| format!("{} {t:?}", o.key()))
                        .collect::<Vec<_>>()
                ),
            );
        }
    }
    t
}

/// Which workers each task was given to (more than one when a worker never
/// read it and it moved on), from the daemons' `task.start task=… pid=…`
/// lines.
fn task_workers(d: &Daemon) -> std::collections::HashMap<String, Vec<i32>> {
    let mut out: std::collections::HashMap<String, Vec<i32>> = std::collections::HashMap::new();
    for log in d.log_paths() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("task.start ")) {
            let field = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k));
            if let (Some(task), Some(pid)) = (field("task="), field("pid=").and_then(|p| p.parse().ok())) {
                out.entry(task.to_string()).or_default().push(pid);
            }
        }
    }
    out
}

/// One figure of a sample.
type Measure<'a> = &'a dyn Fn(&Sample) -> u64;

struct Bounds {
    threads: usize,
    fds: usize,
    rss_kb: u64,
}

/// Over the bound at any sample; or, in a daemon life of a minute or more,
/// higher in its last quarter than in its second (a leak grows with time).
fn judge_resources(ledger: &Ledger, samples: &[Sample], b: &Bounds) {
    if let Some(s) = samples
        .iter()
        .find(|s| s.threads > b.threads || s.fds > b.fds || s.rss_kb > b.rss_kb)
    {
        ledger.violation(
            "violation.resource_bound",
            format!(
                "t={:.1}s epoch {}: {} threads, {} fds, {} KiB RSS (bounds {}, {}, {} KiB)",
                s.t, s.epoch, s.threads, s.fds, s.rss_kb, b.threads, b.fds, b.rss_kb
            ),
        );
    }
    let mut epochs: BTreeMap<u32, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        epochs.entry(s.epoch).or_default().push(s);
    }
    for (epoch, ss) in epochs {
        if ss.len() < 120 {
            continue;
        }
        let q = ss.len() / 4;
        let max = |part: &[&Sample], f: &dyn Fn(&Sample) -> u64| part.iter().map(|s| f(s)).max().unwrap_or(0);
        let checks: [(&str, Measure, u64); 3] = [
            ("threads", &|s| s.threads as u64, 8),
            ("fds", &|s| s.fds as u64, 16),
            ("RSS KiB", &|s| s.rss_kb, 8 * 1024),
        ];
        for (name, f, slack) in checks {
            let (early, late) = (max(&ss[q..2 * q], f), max(&ss[3 * q..], f));
            if late > early + early / 4 + slack {
                ledger.violation(
                    "violation.resource_growth",
                    format!("epoch {epoch}: {name} peaked at {early} in the second quarter, {late} in the last"),
                );
            }
        }
    }
}

fn percentile(xs: &[Duration], p: usize) -> Duration {
    if xs.is_empty() {
        return Duration::ZERO;
    }
    let mut v = xs.to_vec();
    v.sort();
    v[((v.len() * p).div_ceil(100)).clamp(1, v.len()) - 1]
}

struct Report<'a> {
    s: &'a Settings,
    ledger: &'a Ledger,
    tally: Tally,
    probe: Vec<Duration>,
    samples: Vec<Sample>,
    transient_zombies: usize,
    bounds: Bounds,
    base: (usize, usize, u64),
    end: (usize, usize, u64),
    faults: Vec<String>,
    clients_done_in: Duration,
    total: Duration,
}

impl Report<'_> {
    fn print(&self) {
        let c = self.ledger.counters();
        let t = &self.tally;
        let mut out = String::new();
        let mut line = |l: String| {
            out.push_str(&l);
            out.push('\n');
        };
        line(format!(
            "chaos report: seed={:#x} secs={} clients={} ({} build), total {:.1?} (clients done {:.1?} after the end)",
            self.s.seed,
            self.s.secs,
            self.s.clients,
            if cfg!(debug_assertions) { "debug" } else { "release" },
            self.total,
            self.clients_done_in
        ));
        line(format!(
            "  tasks: {} sent, {} ended, {} lost by restart (+{} unacknowledged when the daemon died), \
             {} not created (413 and the like); {} restart(s)",
            t.sent,
            t.ended,
            t.lost,
            t.unacknowledged,
            t.not_created,
            c.get("restarts").copied().unwrap_or(0)
        ));
        line(format!("  outcomes: {}", join(&t.outcomes)));
        let pick = |prefix: &str| -> BTreeMap<String, u64> {
            c.iter()
                .filter_map(|(k, v)| Some((k.strip_prefix(prefix)?.to_string(), *v)))
                .collect()
        };
        line(format!("  load: {}", join(&pick("via."))));
        line(format!("  faults applied: {}", join(&pick("fault."))));
        for (what, outcomes) in &t.by_fault {
            line(format!("    after {what}: {}", join(outcomes)));
        }
        let others: BTreeMap<String, u64> = c
            .iter()
            .filter(|(k, _)| {
                !k.starts_with("via.") && !k.starts_with("fault.") && !k.starts_with("violation.") && *k != "restarts"
            })
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        line(format!("  other counts: {}", join(&others)));
        line(format!(
            "  probe: {} calls, p50 {:?}, p99 {:?} (bound {:?}), max {:?}",
            self.probe.len(),
            percentile(&self.probe, 50),
            percentile(&self.probe, 99),
            probe_p99_bound(),
            self.probe.iter().max().copied().unwrap_or_default()
        ));
        let curve = |name: &str, f: &dyn Fn(&Sample) -> u64, base: u64, end: u64, bound: u64| {
            let max = self.samples.iter().map(f).max().unwrap_or(0);
            let start = self.samples.first().map(f).unwrap_or(0);
            format!("{name} idle {base}, first sample {start}, max {max}, end {end} (bound {bound})")
        };
        line(format!(
            "  resources ({} samples, at most {} task workers at once): {}; {}; {}; at most {} transient zombies in a sample",
            self.samples.len(),
            self.samples.iter().map(|s| s.workers).max().unwrap_or(0),
            curve("threads", &|s| s.threads as u64, self.base.0 as u64, self.end.0 as u64, self.bounds.threads as u64),
            curve("fds", &|s| s.fds as u64, self.base.1 as u64, self.end.1 as u64, self.bounds.fds as u64),
            curve("RSS KiB", &|s| s.rss_kb, self.base.2, self.end.2, self.bounds.rss_kb),
            self.transient_zombies
        ));
        if self.samples.last().is_some_and(|s| s.t > 120.0) {
            let mut minutes: BTreeMap<u64, (usize, usize, u64)> = BTreeMap::new();
            for s in &self.samples {
                let m = minutes.entry(s.t as u64 / 60).or_default();
                *m = (m.0.max(s.threads), m.1.max(s.fds), m.2.max(s.rss_kb));
            }
            let curve: Vec<String> = minutes
                .iter()
                .map(|(m, (t, f, r))| format!("{m}:{t}/{f}/{:.1}", *r as f64 / 1024.0))
                .collect();
            line(format!("  per minute (threads/fds/RSS MiB, max): {}", curve.join(" ")));
        }
        line("  invariants:".into());
        for name in ledger::INVARIANTS {
            line(format!("    {name:<44} {}", c.get(*name).copied().unwrap_or(0)));
        }
        for (name, ex) in self.ledger.examples() {
            line(format!("  {name}, first cases:"));
            for e in ex {
                line(format!("    {e}"));
            }
        }
        if self.ledger.violations(&[]) > 0 || self.s.secs <= 120 {
            line(format!("  fault log ({} entries):", self.faults.len()));
            for f in self.faults.iter().take(400) {
                line(format!("    {f}"));
            }
        }
        eprint!("{out}");
    }
}

fn join(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}
