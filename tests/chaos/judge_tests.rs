//! The judges of the soak, fed by hand: for each invariant, a case it must
//! count and, beside it, one it must let pass. They run with the soak in
//! `cargo test --test chaos`, in well under a second each but for those
//! that watch processes of their own (a second or two, five for what a dead
//! daemon left), so that a judge that could no longer fire is caught
//! without a soak. `AGENTD_CHAOS_BREAK` shows the same through a whole run,
//! and is the only proof for the four judges that need a daemon of their
//! own to fire: process_outlived_daemon (the wait of
//! process_left_after_restart's, before the restart),
//! cgroup_slot_left_after_restart (a real cgroup), probe_timeout and
//! daemon_died (a call unanswered, an exit).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::breaks::{Breaks, BREAKS};
use crate::daemon::Daemon;
use crate::env::{Env, CREATE_GRACE};
use crate::faults::{floor, Fault};
use crate::feed::{FedTask, FeedLog};
use crate::http::{CallError, Event};
use crate::judge::{self, Bounds, Facts, NotCreated};
use crate::ledger::{is_invariant, Kind, Ledger, Outcome, Progress, Rec, TaskFault, Via, View, INVARIANTS};
use crate::stream::Assembly;
use crate::watch::{Sample, Watch};

fn count(l: &Ledger, invariant: &str) -> u64 {
    l.counters()
        .get(&format!("violation.{invariant}"))
        .copied()
        .unwrap_or(0)
}

fn view(state: &str, cause: &str, text: &str) -> View {
    View {
        state: state.into(),
        cause: cause.into(),
        text: text.into(),
        artifacts: Vec::new(),
    }
}

/// A ledger holding one record, shaped by `f`.
fn one(f: impl FnOnce(&mut Rec)) -> (Ledger, Vec<(String, Rec)>) {
    let l = Ledger::quiet();
    l.register("c-1", Kind::Ok, Via::Blocking, 1, 0);
    l.with("c-1", f);
    let recs = l.drain();
    (l, recs)
}

fn no_squeeze(_: Instant, _: Instant) -> bool {
    false
}

fn never_ended(_: u32) -> Option<Instant> {
    None
}

/// judge_tasks on `recs` with nothing else known: last epoch `final_epoch`,
/// the daemons' ends as `ended_at` says, the feed as given.
fn judge(
    l: &Ledger,
    recs: &[(String, Rec)],
    final_epoch: u32,
    ended_at: &dyn Fn(u32) -> Option<Instant>,
    feed: &FeedLog,
) -> judge::Tally {
    let facts = Facts {
        final_epoch,
        workers: Default::default(),
        squeezed: &no_squeeze,
        ended_at,
        feed,
    };
    judge::judge_tasks(l, recs, &facts)
}

fn ended_ok(r: &mut Rec) {
    r.task = Some("t-1".into());
    r.request = Some(Progress::Answered);
    r.view = Some(view("COMPLETED", "completed", "ok"));
    r.ended = Some(Instant::now());
}

#[test]
fn every_invariant_has_a_break_and_every_break_an_invariant() {
    for (name, _) in INVARIANTS {
        let short = name.trim_start_matches("violation.");
        assert!(BREAKS.iter().any(|(b, _)| *b == short), "{name} has no break");
    }
    for (b, _) in BREAKS {
        assert!(is_invariant(&format!("violation.{b}")), "break {b} breaks no invariant");
    }
    assert_eq!(Breaks::parse("all").unwrap().list().len(), INVARIANTS.len());
    assert!(Breaks::parse("two_terminal_states,violation.zombie")
        .unwrap()
        .asked("zombie"));
    assert!(Breaks::parse("no_such_thing").is_err());
    let b = Breaks::parse("zombie").unwrap();
    assert!(b.take("zombie") && !b.take("zombie") && !b.take("helper_pool"));
}

#[test]
fn unexpected_outcome_counts_an_end_the_fault_cannot_give() {
    let (l, recs) = one(|r| {
        ended_ok(r);
        r.fault = Some((TaskFault::KillWorker, Instant::now()));
    });
    judge(&l, &recs, 1, &never_ended, &FeedLog::default());
    assert_eq!(count(&l, "unexpected_outcome"), 1);
    let (l, recs) = one(ended_ok);
    judge(&l, &recs, 1, &never_ended, &FeedLog::default());
    assert_eq!(count(&l, "unexpected_outcome"), 0);
}

/// An idle worker SIGKILLed just before a task went to it can still read
/// the task and die with it (FAILED/crashed): the kill explains the end
/// when it came up to IDLE_FAULT_LEAD before the send, and not when it
/// came longer before (the pid then belongs to another life).
#[test]
fn an_idle_worker_killed_just_before_the_send_explains_a_crash() {
    for (before_send, explained) in [(Duration::from_millis(300), true), (Duration::from_secs(5), false)] {
        let l = Ledger::quiet();
        l.idle_worker_fault(4242, crate::ledger::IdleFault::Kill);
        std::thread::sleep(Duration::from_millis(1));
        l.register("c-1", Kind::Ok, Via::Blocking, 1, 0);
        l.with("c-1", |r| {
            r.sent = Instant::now() + before_send;
            r.task = Some("t-1".into());
            r.request = Some(Progress::Answered);
            r.view = Some(view(
                "FAILED",
                "crashed",
                "the worker ended without a result: killed by signal 9",
            ));
            r.ended = Some(r.sent + Duration::from_millis(12));
        });
        let recs = l.drain();
        let facts = Facts {
            final_epoch: 1,
            workers: [("t-1".to_string(), vec![4242])].into_iter().collect(),
            squeezed: &no_squeeze,
            ended_at: &never_ended,
            feed: &FeedLog::default(),
        };
        judge::judge_tasks(&l, &recs, &facts);
        let want = if explained { 0 } else { 1 };
        assert_eq!(
            count(&l, "unexpected_outcome"),
            want,
            "killed {before_send:?} before the send"
        );
    }
}

#[test]
fn not_terminal_counts_a_task_of_the_last_daemon_without_an_end() {
    let (l, recs) = one(|r| {
        r.task = Some("t-1".into());
        r.request = Some(Progress::Answered);
    });
    judge(&l, &recs, 1, &never_ended, &FeedLog::default());
    assert_eq!(count(&l, "not_terminal"), 1);
    // Of a killed daemon, it is lost by restart instead.
    let (l, recs) = one(|r| {
        r.task = Some("t-1".into());
        r.request = Some(Progress::Answered);
    });
    let t = judge(&l, &recs, 2, &never_ended, &FeedLog::default());
    assert_eq!((count(&l, "not_terminal"), t.lost), (0, 1));
}

#[test]
fn two_terminal_states_counts_a_second_witness_that_saw_another_end() {
    // GetTask after the client's end.
    let l = Ledger::quiet();
    l.register("c-1", Kind::Ok, Via::Blocking, 1, 0);
    l.terminal("c-1", view("COMPLETED", "completed", "ok"));
    l.compare("c-1", &view("FAILED", "crashed", "ok"));
    assert_eq!(count(&l, "two_terminal_states"), 1);
    assert_eq!(count(&l, "view_differs_from_GetTask"), 0);
    // The same client path twice.
    l.terminal("c-1", view("CANCELED", "canceled", ""));
    assert_eq!(count(&l, "two_terminal_states"), 2);
    // The events feed: against the client, and against itself.
    let (l, recs) = one(ended_ok);
    let mut feed = FeedLog::default();
    feed.tasks.insert(
        "t-1".into(),
        FedTask {
            epoch: 1,
            ctx: "c-1".into(),
            ends: vec![Outcome::new("FAILED", "stalled")],
        },
    );
    crate::feed::judge(&l, &feed, &recs);
    assert_eq!(count(&l, "two_terminal_states"), 1);
    feed.tasks.get_mut("t-1").unwrap().ends = vec![Outcome::new("COMPLETED", "completed")];
    let (l, recs) = one(ended_ok);
    crate::feed::judge(&l, &feed, &recs);
    assert_eq!(count(&l, "two_terminal_states"), 0);
    feed.tasks
        .get_mut("t-1")
        .unwrap()
        .ends
        .push(Outcome::new("COMPLETED", "completed"));
    crate::feed::judge(&l, &feed, &recs);
    assert_eq!(count(&l, "two_terminal_states"), 1);
}

#[test]
fn the_feed_record_is_read_as_the_daemon_writes_it() {
    let mut feed = FeedLog::default();
    feed.record(
        2,
        &json!({"seq": 1, "kind": "task.created", "taskId": "t-1", "contextId": "c-1"}),
    );
    feed.record(
        2,
        &json!({"seq": 2, "kind": "task.terminal", "taskId": "t-1", "contextId": "c-1",
                "state": "TASK_STATE_FAILED", "cause": "deadline"}),
    );
    let t = &feed.tasks["t-1"];
    assert_eq!((t.epoch, t.ctx.as_str()), (2, "c-1"));
    assert_eq!(t.ends, vec![Outcome::new("FAILED", "deadline")]);
    assert_eq!(feed.by_ctx()["c-1"], vec!["t-1"]);
}

#[test]
fn view_differs_counts_the_same_end_told_otherwise() {
    let l = Ledger::quiet();
    l.register("c-1", Kind::Ok, Via::Blocking, 1, 0);
    l.terminal("c-1", view("COMPLETED", "completed", "ok"));
    l.compare("c-1", &view("COMPLETED", "completed", "ok"));
    assert_eq!(count(&l, "view_differs_from_GetTask"), 0);
    l.compare("c-1", &view("COMPLETED", "completed", "ok, then more"));
    assert_eq!(count(&l, "view_differs_from_GetTask"), 1);
}

fn event(id: Option<u64>, result: serde_json::Value) -> Event {
    Event {
        id,
        data: json!({"jsonrpc": "2.0", "id": 1, "result": result}),
    }
}

#[test]
fn stream_protocol_counts_ids_that_do_not_rise_and_events_after_the_end() {
    let working = json!({"statusUpdate": {"status": {"state": "TASK_STATE_WORKING"}}});
    let done = json!({"statusUpdate": {"status": {"state": "TASK_STATE_COMPLETED",
        "message": {"parts": [{"text": "ok"}], "metadata": {"agentd.dev/terminal": "completed"}}}}});
    let mut a = Assembly::new("c-1");
    a.feed(&event(Some(1), working.clone()));
    a.feed(&event(Some(2), done.clone()));
    let l = Ledger::quiet();
    a.report_to(&l);
    assert_eq!(count(&l, "stream_protocol"), 0);
    assert_eq!(
        a.result().map(|v| v.outcome()),
        Some(Outcome::new("COMPLETED", "completed"))
    );
    let mut a = Assembly::new("c-1");
    a.feed(&event(Some(2), working.clone()));
    a.feed(&event(Some(2), working));
    a.feed(&event(Some(3), done.clone()));
    a.feed(&event(Some(4), done));
    a.report_to(&l);
    assert_eq!(count(&l, "stream_protocol"), 2);
}

/// An Env over a daemon that serves as `pid` (a process of the test's own,
/// or none), with a ledger of its own.
fn env_of(pid: Option<i32>) -> (Arc<Env>, PathBuf) {
    let dir = std::env::temp_dir().join(format!("chaos-judge-{}", crate::common::new_id()));
    std::fs::create_dir_all(dir.join("pids")).unwrap();
    let d = Arc::new(Daemon::new(
        PathBuf::from("/nonexistent"),
        dir.clone(),
        Vec::new(),
        Vec::new(),
    ));
    if let Some(pid) = pid {
        d.pretend_up(pid);
    }
    let env = Env::new(
        d,
        Arc::new(Ledger::quiet()),
        dir.join("pids"),
        0,
        false,
        format!("judge-{}", crate::common::new_id()),
        Breaks::none(),
    );
    (Arc::new(env), dir)
}

#[test]
fn client_error_counts_a_failure_no_kill_or_squeeze_explains() {
    let me = std::process::id() as i32;
    let (env, dir) = env_of(Some(me));
    env.ledger.register("c-1", Kind::Ok, Via::Blocking, 1, 0);
    let e = CallError::Protocol("no answer of the kind asked".into());
    env.trouble(1, "c-1", "a call", &e);
    assert_eq!(count(&env.ledger, "client_error"), 1);
    // A call of a daemon since killed is the kill's.
    env.trouble(0, "c-1", "a call", &e);
    assert_eq!(count(&env.ledger, "client_error"), 1);
    assert_eq!(env.ledger.counters()["calls.broken_by_restart"], 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn survived_restart_counts_a_lost_task_the_next_daemon_knows() {
    let (l, recs) = one(|r| r.task = Some("t-1".into()));
    judge::survivors(&l, &recs, 2, |_, _| None);
    assert_eq!(count(&l, "survived_restart"), 0);
    judge::survivors(&l, &recs, 2, |id, _| id.map(|i| format!("GetTask has {i}")));
    assert_eq!(count(&l, "survived_restart"), 1);
    // A request written whole, never answered: looked up by its contextId.
    let (l, recs) = one(|r| r.request = Some(Progress::Written));
    judge::survivors(&l, &recs, 2, |id, ctx| {
        (id.is_none() && ctx == "c-1").then(|| "ListTasks".into())
    });
    assert_eq!(count(&l, "survived_restart"), 1);
}

fn spawn(cmd: &str, env: &[(&str, &str)]) -> Child {
    Command::new("sh")
        .args(["-c", cmd])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn the_dead_daemons_processes_are_found_by_their_marks() {
    // process_outlived_daemon and process_left_after_restart wait for
    // these to die; found, and alive, they are counted.
    let mut c = spawn(
        "exec sleep 30",
        &[("CHAOS_RUN", "judge-marks"), ("CHAOS_CTX", "c-dead")],
    );
    let pid = c.id() as i32;
    assert!(crate::common::wait_for(Duration::from_secs(5), || {
        crate::procs::marked("judge-marks", |ctx| ctx == "c-dead")
            .iter()
            .any(|p| p.pid == pid)
    }));
    assert!(crate::procs::marked("judge-marks", |ctx| ctx == "c-other").is_empty());
    let _ = c.kill();
    let _ = c.wait();
}

#[test]
fn process_left_after_restart_counts_a_process_of_the_dead_daemons_task() {
    let (env, dir) = env_of(None);
    env.ledger.register("c-dead", Kind::Sleep, Via::Blocking, 1, 0);
    // Nothing of it left: judged, and passed at once.
    crate::restart::left_after_restart(&env, 1, 999_999, &[], &[]);
    assert_eq!(count(&env.ledger, "process_left_after_restart"), 0);
    // Its program, found by its marks though no scan at the kill saw it.
    let mut c = spawn(
        "exec sleep 30",
        &[("CHAOS_RUN", env.run_id.as_str()), ("CHAOS_CTX", "c-dead")],
    );
    crate::restart::left_after_restart(&env, 1, 999_999, &[], &[]);
    assert_eq!(count(&env.ledger, "process_left_after_restart"), 1);
    let _ = c.kill();
    let _ = c.wait();
    let _ = std::fs::remove_dir_all(dir);
}

/// Ticks the monitor over a "daemon" that is a process of the test's own,
/// for 1.6 s (a thing must linger a second to count).
fn watch_over(daemon: i32, run_id: Option<&str>) -> Arc<Env> {
    let (env, dir) = env_of(Some(daemon));
    let run_id = run_id.map_or_else(|| env.run_id.clone(), String::from);
    let mut w = Watch::new(env.clone(), run_id, 1000);
    let until = Instant::now() + Duration::from_millis(1600);
    while Instant::now() < until {
        w.tick();
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = std::fs::remove_dir_all(dir);
    env
}

#[test]
fn zombie_counts_a_child_of_the_daemon_left_unreaped() {
    // The shell's child exits; `exec sleep` never reaps it.
    let mut d = spawn("true & exec sleep 5", &[]);
    let env = watch_over(d.id() as i32, None);
    assert_eq!(count(&env.ledger, "zombie"), 1);
    let _ = d.kill();
    let _ = d.wait();
}

#[test]
fn escaped_process_counts_the_agents_process_outside_the_daemon() {
    let mut d = spawn("exec sleep 5", &[]);
    let mut out = spawn("exec sleep 5", &[("CHAOS_RUN", "judge-escape")]);
    let env = watch_over(d.id() as i32, Some("judge-escape"));
    assert_eq!(count(&env.ledger, "escaped_process"), 1);
    for c in [&mut d, &mut out] {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[test]
fn helper_pool_counts_two_fork_servers_that_last() {
    let dir = std::env::temp_dir().join(format!("chaos-forks-{}", crate::common::new_id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fork = dir.join("agentd-fork");
    std::fs::copy("/bin/sleep", &fork).unwrap();
    let mut d = spawn(&format!("{0} 5 & {0} 5 & exec sleep 5", fork.display()), &[]);
    let env = watch_over(d.id() as i32, None);
    assert!(count(&env.ledger, "helper_pool") >= 1);
    let _ = d.kill();
    let _ = d.wait();
    let _ = std::fs::remove_dir_all(dir);
}

fn sample(t: f64, epoch: u32, threads: usize, fds: usize, rss_kb: u64) -> Sample {
    Sample {
        t,
        epoch,
        threads,
        fds,
        rss_kb,
        workers: 0,
    }
}

#[test]
fn resource_bound_and_growth_count_a_daemon_over_its_bound_or_growing() {
    let b = Bounds {
        threads: 20,
        fds: 100,
        rss_kb: 50_000,
    };
    let flat: Vec<Sample> = (0..judge::GROWTH_SAMPLES)
        .map(|i| sample(i as f64 / 2.0, 1, 10, 50, 10_000))
        .collect();
    let l = Ledger::quiet();
    let warm = BTreeMap::from([(1, 0.0)]);
    judge::judge_resources(&l, &flat, &b, &warm);
    assert_eq!((count(&l, "resource_bound"), count(&l, "resource_growth")), (0, 0));
    let mut over = flat.clone();
    over[7].threads = 21;
    judge::judge_resources(&l, &over, &b, &warm);
    assert_eq!(count(&l, "resource_bound"), 1);
    // fds up by half in the last quarter of a life of a minute.
    let l = Ledger::quiet();
    let mut growing = flat.clone();
    for s in &mut growing[judge::GROWTH_SAMPLES * 3 / 4..] {
        s.fds = 90;
    }
    judge::judge_resources(&l, &growing, &b, &warm);
    assert_eq!(count(&l, "resource_growth"), 1);
    // The same in a shorter life, or in one never warm, is not judged.
    let l = Ledger::quiet();
    let short = &growing[judge::GROWTH_SAMPLES / 2..];
    judge::judge_resources(&l, short, &b, &warm);
    judge::judge_resources(&l, &growing, &b, &BTreeMap::new());
    assert_eq!(count(&l, "resource_growth"), 0);
    assert_eq!(l.judged_counts().get("violation.resource_growth"), None);
    // Warm only from its middle, its warm part is too short to judge.
    judge::judge_resources(&l, &growing, &b, &BTreeMap::from([(1, 30.0)]));
    assert_eq!(l.judged_counts().get("violation.resource_growth"), None);
}

#[test]
fn probe_p99_counts_more_than_a_slow_hundredth() {
    let mut calls = vec![Duration::from_millis(10); 99];
    calls.push(Duration::from_secs(5));
    let l = Ledger::quiet();
    judge::judge_probe(&l, &calls, Duration::from_secs(4));
    assert_eq!(count(&l, "probe_p99"), 0);
    calls.push(Duration::from_secs(5));
    judge::judge_probe(&l, &calls, Duration::from_secs(4));
    assert_eq!(count(&l, "probe_p99"), 1);
    // Under 20 calls there is no p99 to judge.
    let l = Ledger::quiet();
    judge::judge_probe(&l, &calls[90..], Duration::from_secs(4));
    assert_eq!(
        (count(&l, "probe_p99"), l.judged_counts().get("violation.probe_p99")),
        (0, None)
    );
}

#[test]
fn metrics_judges_count_an_end_the_daemon_did_not() {
    let seen = BTreeMap::from([("COMPLETED/completed".to_string(), 3)]);
    let l = Ledger::quiet();
    judge::judge_undercount(&l, 1, &BTreeMap::from([("COMPLETED/completed".to_string(), 4)]), &seen);
    assert_eq!(count(&l, "metrics_undercount"), 0);
    judge::judge_undercount(&l, 1, &BTreeMap::from([("COMPLETED/completed".to_string(), 2)]), &seen);
    assert_eq!(count(&l, "metrics_undercount"), 1);
    judge::judge_metrics(&l, 1, &BTreeMap::from([("COMPLETED/completed".to_string(), 3)]), &seen);
    assert_eq!(count(&l, "metrics_mismatch"), 0);
    judge::judge_metrics(&l, 1, &BTreeMap::from([("COMPLETED/completed".to_string(), 4)]), &seen);
    assert_eq!(count(&l, "metrics_mismatch"), 1);
}

#[test]
fn unknown_task_counts_a_fed_task_no_client_sent_or_two_for_one() {
    let (l, recs) = one(ended_ok);
    let fed = |ctx: &str| FedTask {
        epoch: 1,
        ctx: ctx.into(),
        ends: Vec::new(),
    };
    let mut feed = FeedLog::default();
    feed.tasks.insert("t-1".into(), fed("c-1"));
    crate::feed::judge(&l, &feed, &recs);
    assert_eq!(count(&l, "unknown_task"), 0);
    feed.tasks.insert("t-2".into(), fed("c-nobody"));
    crate::feed::judge(&l, &feed, &recs);
    assert_eq!(count(&l, "unknown_task"), 1);
    feed.tasks.insert("t-3".into(), fed("c-1"));
    crate::feed::judge(&l, &feed, &recs);
    assert_eq!(count(&l, "unknown_task"), 3);
}

#[test]
fn written_request_lost_counts_a_request_neither_answered_nor_found() {
    let written = |r: &mut Rec| {
        r.request = Some(Progress::Written);
        r.written_at = Some(Instant::now() - Duration::from_secs(8));
    };
    // On the last daemon: lost.
    let (l, recs) = one(written);
    let t = judge(&l, &recs, 1, &never_ended, &FeedLog::default());
    assert_eq!(count(&l, "written_request_lost"), 1);
    assert_eq!(t.not_created.get(&NotCreated::Lost), Some(&1));
    // Its daemon killed within CREATE_GRACE of the write: lost with it.
    let (l, recs) = one(written);
    let soon = |_| Some(Instant::now() - Duration::from_secs(8) + CREATE_GRACE / 2);
    let t = judge(&l, &recs, 2, &soon, &FeedLog::default());
    assert_eq!(count(&l, "written_request_lost"), 0);
    assert_eq!(t.not_created.get(&NotCreated::LostWithKilledDaemon), Some(&1));
    // Killed long after the write, its feed read whole: lost.
    let (l, recs) = one(written);
    let late = |_| Some(Instant::now());
    let mut feed = FeedLog::default();
    feed.followed.insert(1);
    judge(&l, &recs, 2, &late, &feed);
    assert_eq!(count(&l, "written_request_lost"), 1);
    // The feed saw it made: found.
    let (l, recs) = one(written);
    feed.tasks.insert(
        "t-1".into(),
        FedTask {
            epoch: 1,
            ctx: "c-1".into(),
            ends: Vec::new(),
        },
    );
    let t = judge(&l, &recs, 2, &late, &feed);
    assert_eq!((count(&l, "written_request_lost"), t.lost), (0, 1));
}

#[test]
fn a_request_without_a_task_is_put_down_to_why() {
    let (_, recs) = one(|r| r.refused = true);
    assert_eq!(
        judge::not_created(&recs[0].1, false, true, 1, None),
        Some(NotCreated::Refused413)
    );
    let (_, recs) = one(|r| {
        r.request = Some(Progress::Unsent);
        r.broken = Some("restart");
    });
    assert_eq!(
        judge::not_created(&recs[0].1, false, true, 2, None),
        Some(NotCreated::UnsentByKill)
    );
    let (_, recs) = one(|r| r.request = Some(Progress::Answered));
    assert_eq!(
        judge::not_created(&recs[0].1, false, true, 1, None),
        Some(NotCreated::AnsweredError)
    );
    let (_, recs) = one(|_| {});
    assert_eq!(
        judge::not_created(&recs[0].1, false, true, 1, None),
        Some(NotCreated::ViaBridge)
    );
    assert_eq!(judge::not_created(&recs[0].1, true, true, 1, None), None);
}

#[test]
fn the_floors_count_a_kind_never_applied_and_a_restart_unused() {
    let planned = BTreeMap::from([(Fault::KillWorker, 4), (Fault::KillDaemon, 1)]);
    let mut counters = BTreeMap::from([
        ("fault.kill-worker".to_string(), 2),
        ("fault.kill-daemon".to_string(), 1),
        ("restarts".to_string(), 1),
    ]);
    let used = BTreeMap::from([(1, 5), (2, 3)]);
    assert!(crate::gates::floors(&planned, &counters, &used, 2).is_empty());
    counters.insert("fault.kill-worker".into(), 1);
    assert_eq!(crate::gates::floors(&planned, &counters, &used, 2).len(), 1);
    assert_eq!(
        crate::gates::floors(&planned, &counters, &BTreeMap::from([(1, 5)]), 2).len(),
        2
    );
    assert_eq!((floor(1), floor(4), floor(101)), (1, 2, 50));
}
