//! The judgement at the end of a run: every task against what was done to
//! it, every request that made no task against why, the resources against
//! their bounds, and the last daemon's lists against the ledger. What needs
//! the daemon (a lookup, a list) is gathered first; the weighing itself is
//! pure, so judge_tests.rs can feed it cases by hand.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::env::{Env, CREATE_GRACE};
use crate::feed::FeedLog;
use crate::http;
use crate::ledger::{self, allowed, Ledger, Progress, Rec};
use crate::procs;
use crate::watch::Sample;

/// How long before a task was sent an idle-worker fault may still be
/// the one that ended it (see the judge of outcomes).
const IDLE_FAULT_LEAD: Duration = Duration::from_secs(2);

/// A client whose call broke (an fd squeeze, a hang-up) before it learned
/// its task's id may have stopped looking for the task by its contextId
/// before the daemon got to the request. The task is still the one it
/// sent: found by that contextId, it is the client's, and its end is what
/// the client sees now.
pub fn adopt_late(env: &Env, epoch: u32) {
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
pub fn audit_list(env: &Env, epoch: u32) {
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
        let tasks = page["tasks"].as_array().cloned().unwrap_or_default();
        env.ledger.judged("violation.unknown_task", tasks.len() as u64);
        for t in &tasks {
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

/// A task of a killed daemon that its client never saw end must be unknown
/// to the last daemon: looked up by its id, or, when its request was
/// written whole to the killed daemon (so surely there) without an answer,
/// by its contextId. `lookup(id or None, ctx)` says what the last daemon
/// holds, if anything.
pub fn survivors(
    ledger: &Ledger,
    recs: &[(String, Rec)],
    final_epoch: u32,
    lookup: impl Fn(Option<&str>, &str) -> Option<String>,
) {
    for (ctx, r) in recs {
        if r.epoch >= final_epoch || r.view.is_some() || !r.may_exist() {
            continue;
        }
        let by_ctx = r.task.is_none() && r.request == Some(Progress::Written);
        if r.task.is_none() && !by_ctx {
            continue;
        }
        ledger.judged("violation.survived_restart", 1);
        if let Some(found) = lookup(r.task.as_deref(), ctx) {
            ledger.violation(
                "violation.survived_restart",
                format!(
                    "ctx={ctx} task {:?} of epoch {} is known after the restart: {found}",
                    r.task, r.epoch
                ),
            );
        }
    }
}

/// Why a record has no task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum NotCreated {
    /// Refused with 413: the body was over http.body_max_bytes.
    Refused413,
    /// Answered with another error (judged by `client_error`).
    AnsweredError,
    /// Not written whole while the daemon was being killed.
    UnsentByKill,
    /// Not written whole otherwise (judged by `client_error`).
    Unsent,
    /// Written whole, no answer, and its daemon killed within CREATE_GRACE.
    LostWithKilledDaemon,
    /// Sent by the MCP bridge, which does not say how far it got (its
    /// failed calls are judged by `client_error`).
    ViaBridge,
    /// Written whole to a daemon killed later, whose events feed was not
    /// read whole: whether it was made cannot be told.
    FeedGap,
    /// Written whole, neither answered nor found, and no kill explains it.
    Lost,
}

impl NotCreated {
    pub fn label(self) -> &'static str {
        match self {
            NotCreated::Refused413 => "refused 413",
            NotCreated::AnsweredError => "answered with an error",
            NotCreated::UnsentByKill => "not written whole, the daemon being killed",
            NotCreated::Unsent => "not written whole otherwise",
            NotCreated::LostWithKilledDaemon => "written, its daemon killed within 5 s",
            NotCreated::ViaBridge => "through the MCP bridge, not found",
            NotCreated::FeedGap => "written, not found, the feed incomplete",
            NotCreated::Lost => "written and lost",
        }
    }
}

/// Why `r` has no task, or None when it has one: its client knows the id,
/// or the events feed saw a task made for its contextId (`in_feed`).
/// `feed_whole`: the feed of the record's epoch was read whole;
/// `ended_at`: when the daemon of its epoch was killed (or stopped).
pub fn not_created(
    r: &Rec,
    in_feed: bool,
    feed_whole: bool,
    final_epoch: u32,
    ended_at: Option<Instant>,
) -> Option<NotCreated> {
    if r.task.is_some() || in_feed {
        return None;
    }
    if r.refused {
        return Some(NotCreated::Refused413);
    }
    Some(match r.request {
        None => NotCreated::ViaBridge,
        Some(Progress::Answered) => NotCreated::AnsweredError,
        Some(Progress::Unsent) if r.broken == Some("restart") => NotCreated::UnsentByKill,
        Some(Progress::Unsent) => NotCreated::Unsent,
        Some(Progress::Written) => {
            let killed = r.epoch < final_epoch;
            let soon = ended_at
                .zip(r.written_at)
                .is_some_and(|(k, w)| k.saturating_duration_since(w) <= CREATE_GRACE);
            if killed && soon {
                NotCreated::LostWithKilledDaemon
            } else if killed && !feed_whole {
                NotCreated::FeedGap
            } else {
                NotCreated::Lost
            }
        }
    })
}

#[derive(Default)]
pub struct Tally {
    pub sent: u64,
    pub ended: u64,
    /// Tasks made by a daemon later killed, whose end no client saw.
    pub lost: u64,
    pub not_created: BTreeMap<NotCreated, u64>,
    pub outcomes: BTreeMap<String, u64>,
    pub by_fault: BTreeMap<String, BTreeMap<String, u64>>,
    /// Tasks whose end a client saw, by the epoch that ran them.
    pub ended_per_epoch: BTreeMap<u32, u64>,
}

/// What the judge of the tasks knows beside the records.
pub struct Facts<'a> {
    pub final_epoch: u32,
    /// The workers each task was given to (from `task.start` lines).
    pub workers: HashMap<String, Vec<i32>>,
    /// Whether [from, to] overlapped an fd squeeze (and a second after it).
    pub squeezed: &'a dyn Fn(Instant, Instant) -> bool,
    /// When the daemon of an epoch was killed or stopped.
    pub ended_at: &'a dyn Fn(u32) -> Option<Instant>,
    pub feed: &'a FeedLog,
}

/// Every task against what was done to it; every record without a task
/// against why it has none.
pub fn judge_tasks(ledger: &Ledger, recs: &[(String, Rec)], f: &Facts) -> Tally {
    let mut t = Tally::default();
    let fed = f.feed.by_ctx();
    for (ctx, r) in recs {
        if r.request >= Some(Progress::Written) {
            ledger.judged("violation.written_request_lost", 1);
        }
        let why = not_created(
            r,
            fed.contains_key(ctx.as_str()),
            f.feed.whole(r.epoch),
            f.final_epoch,
            (f.ended_at)(r.epoch),
        );
        if let Some(why) = why {
            *t.not_created.entry(why).or_default() += 1;
            if why == NotCreated::Lost {
                ledger.violation(
                    "violation.written_request_lost",
                    format!(
                        "ctx={ctx} ({:?} via {:?}, epoch {}): its request was written whole {:.1?} before its \
                         daemon's end or the judgement, never answered, and no task has its contextId",
                        r.kind,
                        r.via,
                        r.epoch,
                        r.written_at
                            .map(|w| (f.ended_at)(r.epoch)
                                .unwrap_or_else(Instant::now)
                                .saturating_duration_since(w))
                            .unwrap_or_default()
                    ),
                );
            }
            continue;
        }
        t.sent += 1;
        if r.epoch == f.final_epoch {
            ledger.judged("violation.not_terminal", 1);
        }
        let Some(view) = &r.view else {
            if r.epoch < f.final_epoch {
                t.lost += 1;
            } else {
                ledger.violation(
                    "violation.not_terminal",
                    format!("ctx={ctx} task {:?} ({:?} via {:?}) never ended", r.task, r.kind, r.via),
                );
            }
            continue;
        };
        t.ended += 1;
        *t.ended_per_epoch.entry(r.epoch).or_default() += 1;
        let key = view.outcome().key();
        *t.outcomes.entry(key.clone()).or_default() += 1;
        let ended = r.ended.unwrap_or_else(Instant::now);
        let pids = r
            .task
            .as_ref()
            .and_then(|id| f.workers.get(id))
            .map_or(&[][..], |p| &p[..]);
        // From a little before the send: an idle worker SIGKILLed just
        // before the task went to it, but not yet run to its death, still
        // reads the task from its pipe (the kernel hands a sleeping reader
        // the data it woke for before the signal) and dies holding it.
        // (Within 2 s no pid comes round again, even with pid_max 32768.)
        let from = r.sent.checked_sub(IDLE_FAULT_LEAD).unwrap_or(r.sent);
        let idle = ledger.idle_fault_on(pids, from, ended);
        let what = match (r.fault, r.cancel, idle) {
            (Some((fault, _)), _, _) => format!("{fault:?}"),
            (None, Some(true), _) => "CancelTask".to_string(),
            (None, _, Some(fault)) => format!("{fault:?} on an idle worker that had just taken it"),
            _ => "nothing".to_string(),
        };
        *t.by_fault.entry(what.clone()).or_default().entry(key).or_default() += 1;
        let squeezed = (f.squeezed)(r.sent, ended);
        let may = allowed(r, squeezed, idle);
        ledger.judged("violation.unexpected_outcome", 1);
        if !may
            .iter()
            .any(|(o, text)| *o == view.outcome() && view.text.contains(text))
        {
            ledger.violation(
                "violation.unexpected_outcome",
                format!(
                    "ctx={ctx} task={:?} {:?} via {:?}, {what} done to it: ended {} ({:?}); allowed {:?}",
                    r.task,
                    r.kind,
                    r.via,
                    view.outcome().key(),
                    view.text,
                    may.iter()
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
pub fn task_workers(logs: &[std::path::PathBuf]) -> HashMap<String, Vec<i32>> {
    let mut out: HashMap<String, Vec<i32>> = HashMap::new();
    for log in logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("task.start ")) {
            let field = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k));
            if let (Some(task), Some(pid)) = (field("task="), field("pid=").and_then(|p| p.parse().ok())) {
                out.entry(task.to_string()).or_default().push(pid);
            }
        }
    }
    out
}

/// Finished tasks a daemon keeps (tasks.retain_max, its default, set by
/// the soak): until it holds as many, its task table grows by design.
pub const RETAIN_MAX: usize = 1000;

/// One figure of a sample.
type Measure<'a> = &'a dyn Fn(&Sample) -> u64;

pub struct Bounds {
    pub threads: usize,
    pub fds: usize,
    pub rss_kb: u64,
}

/// A daemon life judged for growth has this many samples at least (a
/// minute at the monitor's two a second) once it is warm: shorter, what it
/// keeps on purpose (the slots and idle workers, the allocator's arenas)
/// is still growth.
pub const GROWTH_SAMPLES: usize = 120;

/// Over the bound at any sample; or, in a daemon life with a minute or
/// more after `warm` (epoch → when, in seconds of the run, it held as many
/// finished tasks as it keeps: until then the task table grows by design),
/// higher in the last quarter of that part than in its second (a leak
/// grows with time). Returns, per epoch, how many warm samples it had.
pub fn judge_resources(
    ledger: &Ledger,
    samples: &[Sample],
    b: &Bounds,
    warm: &BTreeMap<u32, f64>,
) -> BTreeMap<u32, usize> {
    ledger.judged("violation.resource_bound", samples.len() as u64);
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
    let mut warm_samples = BTreeMap::new();
    for (epoch, ss) in epochs {
        let Some(since) = warm.get(&epoch) else { continue };
        let ss: Vec<&Sample> = ss.into_iter().filter(|s| s.t >= *since).collect();
        warm_samples.insert(epoch, ss.len());
        if ss.len() < GROWTH_SAMPLES {
            continue;
        }
        ledger.judged("violation.resource_growth", 1);
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
                    format!(
                        "epoch {epoch}: {name} peaked at {early} in the second quarter of its warm life \
                         (from t={since:.0}s), {late} in the last"
                    ),
                );
            }
        }
    }
    warm_samples
}

pub fn percentile(xs: &[Duration], p: usize) -> Duration {
    if xs.is_empty() {
        return Duration::ZERO;
    }
    let mut v = xs.to_vec();
    v.sort();
    v[((v.len() * p).div_ceil(100)).clamp(1, v.len()) - 1]
}

/// The probe's p99 against its bound, once there are 20 calls to take it of.
pub fn judge_probe(ledger: &Ledger, probe: &[Duration], bound: Duration) {
    if probe.len() < 20 {
        return;
    }
    ledger.judged("violation.probe_p99", 1);
    let p99 = percentile(probe, 99);
    if p99 > bound {
        ledger.violation(
            "violation.probe_p99",
            format!("probe p99 {p99:?} over {bound:?} ({} calls)", probe.len()),
        );
    }
}

/// /metrics of a daemon while it serves: every end a client saw is counted
/// already.
pub fn judge_undercount(ledger: &Ledger, epoch: u32, totals: &BTreeMap<String, u64>, seen: &BTreeMap<String, u64>) {
    ledger.judged("violation.metrics_undercount", 1);
    for (key, n) in seen {
        let m = totals.get(key).copied().unwrap_or(0);
        if m < *n {
            ledger.violation(
                "violation.metrics_undercount",
                format!("epoch {epoch}: clients saw {n} tasks end {key}, /metrics counted {m}"),
            );
        }
    }
}

/// /metrics of the last daemon at rest against what its clients saw end.
pub fn judge_metrics(ledger: &Ledger, epoch: u32, counted: &BTreeMap<String, u64>, seen: &BTreeMap<String, u64>) {
    ledger.judged("violation.metrics_mismatch", 1);
    let counted: BTreeMap<&String, &u64> = counted.iter().filter(|(_, n)| **n > 0).collect();
    let seen_nonzero: BTreeMap<&String, &u64> = seen.iter().filter(|(_, n)| **n > 0).collect();
    if counted != seen_nonzero {
        ledger.violation(
            "violation.metrics_mismatch",
            format!("epoch {epoch}: /metrics {counted:?}, clients saw {seen_nonzero:?}"),
        );
    }
}

/// Waits for the last daemon to be quiet again: no worker, threads back to
/// the idle baseline, and fds too but for what agentd keeps on purpose: the
/// files of each cgroup slot it keeps for reuse (a few each: directory,
/// cgroup.kill, the procs files, counters) and two control pipes per idle
/// worker. Returns its (threads, fds, RSS) then.
pub fn at_rest(
    ledger: &Ledger,
    pid: i32,
    base_threads: usize,
    base_fds: usize,
    base_cgroup_fds: usize,
) -> (usize, usize, u64) {
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
            base_fds - base_cgroup_fds + 2 * crate::common::idle_workers(pid).len() + 4,
            8 * slots(),
        )
    };
    let quiet = crate::common::wait_for(Duration::from_secs(20), || {
        let Some((t, f, _)) = procs::threads_fds_rss(pid) else {
            return false;
        };
        let cg = procs::cgroup_fds(pid);
        let (other_max, cgroup_max) = rest_bound();
        crate::common::task_workers(pid).is_empty() && t <= base_threads + 3 && f - cg <= other_max && cg <= cgroup_max
    });
    ledger.judged("violation.resource_bound", 1);
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
                crate::common::task_workers(pid).len(),
                slots(),
            ),
        );
    }
    end
}
