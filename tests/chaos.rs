//! The chaos soak: one daemon under a mixed load from many clients at once
//! while a fault injector, from a seeded schedule printed at the start,
//! breaks everything it can reach — task workers, task programs and their
//! children (SIGKILL, SIGSTOP/SIGCONT), the fork server and idle workers,
//! the daemon's RLIMIT_NOFILE and a task's memory limit, and the daemon
//! itself (kill -9, then a restart on the same socket that the clients find
//! again). Invariants are checked all the time and at the end, each a named
//! counter in the report that must stay 0, printed beside how much it
//! judged (tasks, calls, scans, kills…); an invariant that judged nothing
//! fails the run, unless the report says why a run this short cannot
//! judge it (`resource_growth` needs a daemon life with a minute after it
//! grew warm, holding as many finished tasks as it keeps):
//!
//! | counter | what it means |
//! |---|---|
//! | `unexpected_outcome` | a task ended in a state or cause other than what was done to it gives (see `ledger::allowed`) |
//! | `not_terminal` | an accepted task of the last daemon never ended |
//! | `two_terminal_states` | a task was seen ending twice, differently: by its client and by GetTask or the daemon's events feed, or twice by the feed |
//! | `view_differs_from_GetTask` | the client's last view (assembled from events, or the answer) ends as GetTask's but says otherwise |
//! | `stream_protocol` | event ids that do not rise, events after the end, a stream that ends early |
//! | `client_error` | a call failed with nothing (no kill, no squeeze) to explain it |
//! | `survived_restart` | a task of a killed daemon is known to the next one (by its id, or by its contextId) |
//! | `process_outlived_daemon` | a process of a killed daemon lives 5 s on, before any restart |
//! | `process_left_after_restart` | a process of the killed daemon — seen at the kill, in its cgroup slots, or marked as one of its tasks' — lives 5 s after the restart (which clears the dead daemon's slots) |
//! | `cgroup_slot_left_after_restart` | the killed daemon's cgroups outlive the restart by 10 s, or the last daemon's its clean stop |
//! | `escaped_process` | a task's process outside the daemon, or alive 1.5 s after its task ended |
//! | `zombie` | a child of the daemon unreaped for over a second |
//! | `resource_bound` / `resource_growth` | threads, fds or RSS over the stated bound, or higher late in a daemon's warm life than early |
//! | `probe_p99` / `probe_timeout` | the probe client's p99 over the stated bound; a probe call unanswered |
//! | `metrics_undercount` / `metrics_mismatch` | `/metrics` counted fewer ended tasks than clients saw; at the end, not exactly as many |
//! | `daemon_died` | the daemon exited when nobody killed it, or not with 0 at SIGTERM |
//! | `unknown_task` | a task no client sent, or two for one message (listed, or on the events feed) |
//! | `helper_pool` | two fork servers, or no idle worker for 10 s |
//! | `written_request_lost` | a request written whole was neither answered nor became a task, and no kill within 5 s of the write explains it |
//!
//! Tasks in flight when the daemon is killed are counted lost by restart
//! (not a failure), and checked to leave nothing behind. A task counts as
//! made when its client learns its id or the daemon's events feed tells of
//! it. A request that made none is accounted for in the report's `not
//! created` line — refused (413), not written whole (the daemon being
//! killed, or a call error that `client_error` weighed), written whole to a
//! daemon killed within 5 s, or lost (`written_request_lost`) — and bounded:
//! the refusals are the 413s the clients counted, and a kill breaks at most
//! two requests of each client thread.
//!
//! The run also fails below its floors: each kind of fault it planned
//! applied at least half as often (and once), a fault that found no victim
//! being tried again until its kind reaches that; each planned kill of the
//! daemon followed by a restart, and by a task of the new daemon that a
//! client saw end.
//!
//! `AGENTD_CHAOS_BREAK=<invariant>,…` (or `all`) breaks the soak on purpose
//! (breaks.rs says how, per invariant): the run then passes only if each
//! named invariant fired, and prints which others fired beside it.
//! `resource_growth` needs `AGENTD_CHAOS_SECS=300` or so. The judges' own
//! tests (judge_tests.rs) run beside the soak, so the proof stays.
//!
//! ```text
//! cargo test -j2 --test chaos -- --nocapture                     # the default short run (25 s, debug build)
//! AGENTD_CHAOS_SECS=3600 cargo test --release --test chaos -- --nocapture   # the reference hour
//! AGENTD_CHAOS_BREAK=all cargo test -j2 --test chaos -- --nocapture         # every invariant must fire
//! AGENTD_CHAOS_SECS=300 AGENTD_CHAOS_BREAK=resource_growth cargo test -j2 --test chaos -- --nocapture
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

#[path = "chaos/breaks.rs"]
mod breaks;
#[path = "chaos/daemon.rs"]
mod daemon;
#[path = "chaos/env.rs"]
mod env;
#[path = "chaos/faults.rs"]
mod faults;
#[path = "chaos/feed.rs"]
mod feed;
#[path = "chaos/gates.rs"]
mod gates;
#[path = "chaos/http.rs"]
mod http;
#[path = "chaos/judge.rs"]
mod judge;
#[path = "chaos/judge_tests.rs"]
mod judge_tests;
#[path = "chaos/ledger.rs"]
mod ledger;
#[path = "chaos/load.rs"]
mod load;
#[path = "chaos/mcp.rs"]
mod mcp;
#[path = "chaos/procs.rs"]
mod procs;
#[path = "chaos/report.rs"]
mod report;
#[path = "chaos/restart.rs"]
mod restart;
#[path = "chaos/rng.rs"]
mod rng;
#[path = "chaos/settings.rs"]
mod settings;
#[path = "chaos/stream.rs"]
mod stream;
#[path = "chaos/watch.rs"]
mod watch;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use breaks::Breaks;
use daemon::Daemon;
use faults::Fault;
use judge::{Bounds, RETAIN_MAX};
use ledger::{Kind, Ledger, Via};
use load::Env;
use settings::settings;

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
const AGENT: &str = include_str!("chaos/agent.sh");

#[test]
fn chaos_soak() {
    let mut s = settings();
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
        format!("tasks.retain_max={RETAIN_MAX}"),
        // The events feed keeps what its follower has not read yet.
        "ext.events_ring=16384".into(),
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
    let (_, pid0) = d.current().unwrap();
    let has_cgroups = !procs::daemon_cgroups(pid0).is_empty();
    let memory = isolation.contains("memory")
        || procs::daemon_cgroups(pid0)
            .iter()
            .any(|c| std::fs::read_to_string(c.join("cgroup.subtree_control")).is_ok_and(|t| t.contains("memory")));
    let mut skip: Vec<Fault> = Vec::new();
    if s.default_run {
        skip.extend(KNOWN_BUGS.iter().map(|(f, _)| *f));
    }
    if !memory {
        skip.push(Fault::SqueezeMemory);
    }
    let plan = faults::schedule(s.seed, s.secs, &skip, PING_MS, STALL_MS);
    let planned = faults::planned_per_kind(&plan);
    // The injector signals through pidfds (Linux 5.3): without them it could
    // do nothing, and the soak would pass having broken nothing.
    assert!(
        procs::stat(std::process::id() as i32).is_some_and(|me| procs::Held::open(&me).is_some()),
        "pidfd_open(2) does not work here: the fault injector cannot run"
    );
    eprintln!(
        "chaos: seed={:#x} (AGENTD_CHAOS_SEED) secs={} clients={} binary={} ({} build) isolation={isolation}\n\
         chaos: left out: {}\nchaos: breaks asked: {}\nchaos: schedule, {} faults:\n{}",
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
        if s.breaks.list().is_empty() {
            "none".to_string()
        } else {
            s.breaks.list().join(", ")
        },
        plan.len(),
        faults::describe(&plan)
    );

    let ledger = Arc::new(Ledger::new());
    let breaks = std::mem::replace(&mut s.breaks, Breaks::none());
    let env = Arc::new(Env::new(
        d.clone(),
        ledger.clone(),
        pids.clone(),
        BODY_MAX,
        memory,
        run_id.clone(),
        breaks,
    ));
    // The events feed is followed from the first record; its connection is
    // part of the idle baseline below.
    let feed_log = Arc::new(Mutex::new(feed::FeedLog::default()));
    let feed_stop = Arc::new(AtomicBool::new(false));
    let feed_thread = {
        let (env, stop, log) = (env.clone(), feed_stop.clone(), feed_log.clone());
        std::thread::spawn(move || feed::follow(env, stop, log))
    };
    assert!(
        common::wait_for(Duration::from_secs(10), || feed_log
            .lock()
            .unwrap()
            .followed
            .contains(&1)),
        "the events feed of the first daemon could not be followed"
    );

    // The idle baseline, before any load.
    assert!(common::wait_for(Duration::from_secs(10), || !common::idle_workers(
        pid0
    )
    .is_empty()));
    let (base_threads, base_fds, base_rss) = procs::threads_fds_rss(pid0).unwrap();
    let base_cgroup_fds = procs::cgroup_fds(pid0);
    let bounds = Bounds {
        threads: base_threads + 4 * (s.clients + 4) + 16,
        fds: base_fds + 12 * (s.clients + 4) + 16,
        rss_kb: base_rss + 96 * 1024,
    };

    let watch_stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (env, stop, run_id) = (env.clone(), watch_stop.clone(), run_id.clone());
        let thread_bound = bounds.threads;
        std::thread::spawn(move || watch::Watch::new(env, run_id, thread_bound).run(stop))
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
    if env.breaks.take("written_request_lost") {
        let (env, dir) = (env.clone(), dir.0.clone());
        clients.push(std::thread::spawn(move || breaks::lose_a_request(env, dir)));
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
    let end = judge::at_rest(&ledger, pid, base_threads, base_fds, base_cgroup_fds);
    watch_stop.store(true, Ordering::SeqCst);
    let (samples, transient_zombies) = watcher.join().expect("the monitor panicked");

    judge::adopt_late(&env, final_epoch);
    // /metrics of the last daemon equals what clients saw in its life.
    let phantom = env
        .breaks
        .take("metrics_mismatch")
        .then(|| breaks::phantom_end(&env, final_epoch, "COMPLETED", "completed"));
    let seen = ledger.seen_in_epoch(final_epoch);
    if let Some(ctx) = phantom {
        ledger.forget(&ctx);
    }
    let metrics = http::get(&d.socket, "/metrics", Duration::from_secs(10))
        .map(|r| http::ended_totals(&r.text()))
        .unwrap_or_default();
    judge::judge_metrics(&ledger, final_epoch, &metrics, &seen);
    if env.breaks.take("not_terminal") {
        // A task the settle never waited for: still running at the audit.
        let ctx = env.new_ctx("unsettled");
        ledger.register(&ctx, Kind::Sleep, Via::Blocking, final_epoch, 0);
        let params = load::send_params("sleep 0.500 20", &ctx, true);
        if let Ok(r) = env.create_rpc(final_epoch, &ctx, "SendMessage", &params, Duration::from_secs(10)) {
            if let Some(id) = r["task"]["id"].as_str() {
                ledger.set_task(&ctx, id);
            }
        }
    }
    judge::audit_list(&env, final_epoch);

    let probe: Vec<Duration> = env.probe.lock().unwrap().clone();
    judge::judge_probe(&ledger, &probe, probe_p99_bound());
    // A daemon is warm once it holds as many finished tasks as it keeps.
    let warm: BTreeMap<u32, f64> = (1..=final_epoch)
        .filter_map(|e| Some((e, ledger.nth_end(e, RETAIN_MAX)?)))
        .collect();
    let warm_samples = judge::judge_resources(&ledger, &samples, &bounds, &warm);
    let mut recs = ledger.drain();
    if final_epoch > 1 && env.breaks.take("survived_restart") {
        // An ended task of the last daemon, taken for one lost with the one before.
        if let Some((_, r)) = recs
            .iter_mut()
            .find(|(_, r)| r.epoch == final_epoch && r.view.is_some() && r.task.is_some())
        {
            r.epoch = final_epoch - 1;
            r.view = None;
        }
    }
    judge::survivors(&ledger, &recs, final_epoch, |id, ctx| match id {
        Some(id) => env.get_view(id).ok().map(|v| format!("GetTask {v:?}")),
        None => env
            .find_by_ctx(ctx)
            .ok()
            .flatten()
            .map(|id| format!("ListTasks has {id}")),
    });

    // A clean stop: exit 0, nothing left, its cgroups removed.
    feed_stop.store(true, Ordering::SeqCst);
    let killed_at_end = env.breaks.take("daemon_died");
    let code = d.stop_with(if killed_at_end { libc::SIGKILL } else { libc::SIGTERM });
    feed_thread.join().expect("the feed follower panicked");
    ledger.judged("violation.daemon_died", 1);
    if code != Some(0) {
        ledger.violation("violation.daemon_died", format!("SIGTERM at the end: exit {code:?}"));
    }
    if killed_at_end {
        // The next daemon clears the killed one's slots, and stops cleanly.
        d.start().expect("a daemon starts after the killed one");
        d.stop();
    }
    if has_cgroups {
        ledger.judged("violation.cgroup_slot_left_after_restart", 1);
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
    let feed_log = std::mem::take(&mut *feed_log.lock().unwrap());
    feed::judge(&ledger, &feed_log, &recs);
    let squeezed = |from, to| d.squeezed_between(from, to, Duration::from_secs(1));
    let ended_at = |epoch| d.ended_at(epoch);
    let facts = judge::Facts {
        final_epoch,
        workers: judge::task_workers(&d.log_paths()),
        squeezed: &squeezed,
        ended_at: &ended_at,
        feed: &feed_log,
    };
    let tally = judge::judge_tasks(&ledger, &recs, &facts);
    ledger.judged("violation.client_error", http::calls());

    let mut unjudgeable = BTreeMap::new();
    if s.secs < LONG_ENOUGH_FOR_GROWTH {
        let lives: Vec<String> = d
            .lives()
            .iter()
            .filter(|(e, _)| *e <= final_epoch)
            .map(|(e, life)| match warm.get(e) {
                Some(at) => format!(
                    "{e}: {:.0} s, warm from t={at:.0}s for {} samples",
                    life.as_secs_f64(),
                    warm_samples.get(e).copied().unwrap_or(0)
                ),
                None => format!("{e}: {:.0} s, never warm", life.as_secs_f64()),
            })
            .collect();
        unjudgeable.insert(
            "resource_growth",
            format!(
                "no daemon life had {} samples (a minute) once warm, holding tasks.retain_max={RETAIN_MAX} \
                 finished tasks (lives {}); AGENTD_CHAOS_SECS=300 mostly has one, {LONG_ENOUGH_FOR_GROWTH} always",
                judge::GROWTH_SAMPLES,
                lives.join(", ")
            ),
        );
    }
    if !has_cgroups {
        unjudgeable.insert(
            "cgroup_slot_left_after_restart",
            format!("agentd makes no cgroups here ({isolation})"),
        );
    }
    // The run's own gates: the floors, a task a second, the requests that
    // made no task bounded, and every invariant judging something.
    let gates = gates::gates(
        &ledger,
        &tally,
        &planned,
        final_epoch,
        s.secs,
        s.clients as u64 + 2,
        &unjudgeable,
    );
    let report = report::Report {
        head: format!(
            "seed={:#x} secs={} clients={} ({} build)",
            s.seed,
            s.secs,
            s.clients,
            if cfg!(debug_assertions) { "debug" } else { "release" }
        ),
        ledger: &ledger,
        tally,
        probe,
        probe_bound: probe_p99_bound(),
        samples,
        transient_zombies,
        bounds,
        base: (base_threads, base_fds, base_rss),
        end,
        faults: fault_log,
        lives: d.lives(),
        unjudgeable: unjudgeable.clone(),
        clients_done_in,
        total: run_started.elapsed(),
        print_fault_log: s.secs <= 120,
    };
    report.print();

    let seed = s.seed;
    let asked = env.breaks.list();
    if !asked.is_empty() {
        // A run broken on purpose passes when what it broke was seen.
        for g in &gates {
            eprintln!("chaos: (not judged in a break run) {g}");
        }
        let counters = ledger.counters();
        let fired = |n: &str| counters.get(&format!("violation.{n}")).copied().unwrap_or(0);
        let unfired = breaks::verdict(&asked, fired, |n| unjudgeable.get(n).cloned());
        let also: Vec<&str> = ledger::INVARIANTS
            .iter()
            .map(|(n, _)| n.trim_start_matches("violation."))
            .filter(|n| !asked.contains(n) && fired(n) > 0)
            .collect();
        if !also.is_empty() {
            eprintln!("chaos: also fired, not asked to break: {also:?}");
        }
        assert!(
            unfired.is_empty(),
            "breaks that did not fire: {unfired:?} (seed {seed:#x})"
        );
        return;
    }
    assert!(gates.is_empty(), "the run fell short (seed {seed:#x}): {gates:#?}");
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
        assert_eq!(failed, 0, "{failed} invariant violation(s) (seed {seed:#x})");
    }
}

/// A run this long has a daemon life with a minute or more after it grew
/// warm (one kill in its middle, lives of five minutes), in which
/// `resource_growth` must be judged.
const LONG_ENOUGH_FOR_GROWTH: u64 = 600;
