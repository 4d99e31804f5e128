//! What the soak knows: every task a client sent (keyed by the contextId
//! the client chose, known before the daemon answers), how far its request
//! got, what was done to it, what the client last saw; and the named
//! counters of the report, the invariants among them, each with how many
//! things it judged (an invariant that judged nothing proves nothing).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;

use serde_json::Value;

/// What the agent is asked to do (the first word of the message).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Ok,
    Fail,
    Reject,
    Sleep,
    /// Sleeps with a setsid'd escapee in the background.
    Child,
    Flood,
    Ask,
    AskIdle,
    Hang,
    Big,
    Grow,
    Hog,
}

impl Kind {
    /// The (state, cause) a task of this kind ends in when nothing is done to it.
    pub fn natural(self) -> Outcome {
        match self {
            Kind::Fail => Outcome::new("FAILED", "failed"),
            Kind::Reject => Outcome::new("REJECTED", "refused"),
            Kind::AskIdle => Outcome::new("FAILED", "idle"),
            Kind::Hang => Outcome::new("FAILED", "deadline"),
            Kind::Hog => Outcome::new("FAILED", "exhausted"),
            _ => Outcome::new("COMPLETED", "completed"),
        }
    }
}

/// How the client drove the task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Via {
    Blocking,
    Streaming,
    Resubscribe,
    Cancel,
    MultiTurn,
    VanishCall,
    VanishStream,
    SlowReader,
    NearLimit,
    Mcp,
    Probe,
}

/// What the injector did to one task's processes (one fault per task).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskFault {
    KillWorker,
    KillProgram,
    KillChild,
    StopWorker { long: bool },
    StopProgram,
    StopChild,
    SqueezeMemory,
}

/// A fault aimed at an idle worker that may have landed on a task's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleFault {
    Kill,
    StopLong,
}

/// A terminal state (without `TASK_STATE_`) and its `agentd.dev/terminal`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Outcome {
    pub state: String,
    pub cause: String,
}

impl Outcome {
    pub fn new(state: &str, cause: &str) -> Outcome {
        Outcome {
            state: state.into(),
            cause: cause.into(),
        }
    }

    pub fn key(&self) -> String {
        format!("{}/{}", self.state, self.cause)
    }
}

/// A task as a client saw it last (or as GetTask shows it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    pub state: String,
    pub cause: String,
    pub text: String,
    /// (artifactId, the text of its parts joined), sorted by id.
    pub artifacts: Vec<(String, String)>,
}

pub fn short_state(s: &str) -> &str {
    s.strip_prefix("TASK_STATE_").unwrap_or(s)
}

pub fn is_terminal(state: &str) -> bool {
    matches!(short_state(state), "COMPLETED" | "FAILED" | "CANCELED" | "REJECTED")
}

impl View {
    /// From an A2A Task object.
    pub fn of_task(task: &Value) -> View {
        let mut artifacts: Vec<(String, String)> = task["artifacts"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|art| {
                        (
                            art["artifactId"].as_str().unwrap_or("").to_string(),
                            parts_text(&art["parts"]),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        artifacts.sort();
        View {
            state: short_state(task["status"]["state"].as_str().unwrap_or("")).to_string(),
            cause: task["status"]["message"]["metadata"]["agentd.dev/terminal"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            text: parts_text(&task["status"]["message"]["parts"]),
            artifacts,
        }
    }

    pub fn outcome(&self) -> Outcome {
        Outcome::new(&self.state, &self.cause)
    }

    pub fn terminal(&self) -> bool {
        is_terminal(&self.state)
    }
}

pub fn parts_text(parts: &Value) -> String {
    parts
        .as_array()
        .map(|ps| ps.iter().filter_map(|p| p["text"].as_str()).collect::<String>())
        .unwrap_or_default()
}

pub use crate::http::Progress;

pub struct Rec {
    pub kind: Kind,
    pub via: Via,
    pub epoch: u32,
    pub sent: Instant,
    pub task: Option<String>,
    /// The injector may pick it.
    pub target: bool,
    pub fault: Option<(TaskFault, Instant)>,
    /// How long it runs when left alone (ms; 0 when short).
    pub budget_ms: u64,
    /// CancelTask's answer: Some(true) the task CANCELED; Some(false) not
    /// cancelable, or the task as it ended by itself meanwhile.
    pub cancel: Option<bool>,
    /// The client's last view, once terminal, and when it saw it.
    pub view: Option<View>,
    pub ended: Option<Instant>,
    /// GetTask was compared with the view.
    pub checked: bool,
    /// How far the request that creates the task got; None when the client
    /// cannot tell (the MCP bridge makes the call).
    pub request: Option<Progress>,
    /// When that request was written whole.
    pub written_at: Option<Instant>,
    /// The daemon answered that it created nothing (413).
    pub refused: bool,
    /// What the first call of it that failed was put down to: "restart",
    /// "fd squeeze" or "client error".
    pub broken: Option<&'static str>,
}

impl Rec {
    /// Whether the daemon may hold a task for it: its request was not
    /// refused, and not left unwritten.
    pub fn may_exist(&self) -> bool {
        self.task.is_some() || (!self.refused && self.request != Some(Progress::Unsent))
    }
}

/// The invariants, each a counter that must stay 0, and what each judges
/// (the report says how many of those it judged).
pub const INVARIANTS: &[(&str, &str)] = &[
    ("violation.unexpected_outcome", "ends weighed against what was done"),
    (
        "violation.not_terminal",
        "tasks of the last daemon followed to their end",
    ),
    (
        "violation.two_terminal_states",
        "ends compared: a client's with GetTask's and the events feed's, the feed's with itself",
    ),
    (
        "violation.view_differs_from_GetTask",
        "client views compared with GetTask",
    ),
    ("violation.stream_protocol", "streams and answers checked"),
    ("violation.client_error", "calls"),
    (
        "violation.survived_restart",
        "tasks of a killed daemon looked up after it",
    ),
    ("violation.process_outlived_daemon", "kills, its processes followed"),
    (
        "violation.process_left_after_restart",
        "restarts, the dead daemon's processes followed",
    ),
    (
        "violation.cgroup_slot_left_after_restart",
        "daemon ends with cgroup slots",
    ),
    ("violation.escaped_process", "process table scans"),
    ("violation.zombie", "process table scans"),
    ("violation.resource_bound", "samples"),
    ("violation.resource_growth", "daemon lives with a minute or more warm"),
    ("violation.probe_p99", "p99s of 20 probes or more"),
    ("violation.probe_timeout", "probe calls"),
    ("violation.metrics_undercount", "/metrics reads"),
    ("violation.metrics_mismatch", "/metrics of the last daemon at rest"),
    ("violation.daemon_died", "daemon lives watched"),
    ("violation.unknown_task", "tasks listed or fed by a daemon"),
    ("violation.helper_pool", "process table scans"),
    ("violation.written_request_lost", "requests written whole"),
];

pub fn is_invariant(name: &str) -> bool {
    INVARIANTS.iter().any(|(n, _)| *n == name)
}

#[derive(Default)]
struct Counters {
    n: BTreeMap<String, u64>,
    examples: BTreeMap<String, Vec<String>>,
    /// How many things each invariant judged.
    judged: BTreeMap<String, u64>,
}

pub struct Ledger {
    pub start: Instant,
    /// Violations are printed as they come (not for the judges' own tests).
    loud: bool,
    recs: Mutex<HashMap<String, Rec>>,
    counters: Mutex<Counters>,
    /// Idle workers the injector SIGKILLed or stopped for long: (pid, when,
    /// what). One may have been handed a task a moment before (a worker is
    /// named `agentd-idle` until it has read its spawn frame), and that
    /// task's worker is then the one killed or stopped.
    idle_faults: Mutex<Vec<(i32, Instant, IdleFault)>>,
}

impl Ledger {
    pub fn new() -> Ledger {
        let mut c = Counters::default();
        for (name, _) in INVARIANTS {
            c.n.insert(name.to_string(), 0);
        }
        Ledger {
            start: Instant::now(),
            loud: true,
            recs: Mutex::new(HashMap::new()),
            counters: Mutex::new(c),
            idle_faults: Mutex::new(Vec::new()),
        }
    }

    /// A ledger that keeps its violations to itself (the judges' tests feed
    /// it cases on purpose, beside a soak that prints its own).
    pub fn quiet() -> Ledger {
        Ledger {
            loud: false,
            ..Ledger::new()
        }
    }

    /// The injector SIGKILLed an idle worker, or stopped one for long.
    pub fn idle_worker_fault(&self, pid: i32, what: IdleFault) {
        self.idle_faults.lock().unwrap().push((pid, Instant::now(), what));
    }

    /// What the injector did, as to an idle worker, to one of `pids` (the
    /// workers a task was given to) between `from` and `to`.
    pub fn idle_fault_on(&self, pids: &[i32], from: Instant, to: Instant) -> Option<IdleFault> {
        self.idle_faults
            .lock()
            .unwrap()
            .iter()
            .find(|(pid, at, _)| pids.contains(pid) && from <= *at && *at <= to)
            .map(|(_, _, what)| *what)
    }

    /// Seconds since the run began, for log lines.
    pub fn t(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn count(&self, name: &str) {
        self.add(name, 1);
    }

    pub fn add(&self, name: &str, n: u64) {
        *self.counters.lock().unwrap().n.entry(name.to_string()).or_default() += n;
    }

    /// Counts a broken invariant and keeps its first examples. `name` is
    /// one of INVARIANTS.
    pub fn violation(&self, name: &str, detail: String) {
        assert!(is_invariant(name), "{name} is not an invariant");
        let line = format!("t={:.1}s {detail}", self.t());
        if self.loud {
            eprintln!("chaos: {name}: {line}");
        }
        let mut c = self.counters.lock().unwrap();
        *c.n.entry(name.to_string()).or_default() += 1;
        let ex = c.examples.entry(name.to_string()).or_default();
        if ex.len() < 8 {
            ex.push(line);
        }
    }

    /// `invariant` judged `n` more things.
    pub fn judged(&self, invariant: &str, n: u64) {
        assert!(is_invariant(invariant), "{invariant} is not an invariant");
        *self
            .counters
            .lock()
            .unwrap()
            .judged
            .entry(invariant.to_string())
            .or_default() += n;
    }

    pub fn judged_counts(&self) -> BTreeMap<String, u64> {
        self.counters.lock().unwrap().judged.clone()
    }

    pub fn counters(&self) -> BTreeMap<String, u64> {
        self.counters.lock().unwrap().n.clone()
    }

    pub fn examples(&self) -> BTreeMap<String, Vec<String>> {
        self.counters.lock().unwrap().examples.clone()
    }

    /// Violations of every invariant but those `excused`.
    pub fn violations(&self, excused: &[&str]) -> u64 {
        let c = self.counters.lock().unwrap();
        INVARIANTS
            .iter()
            .filter(|(n, _)| !excused.contains(n))
            .map(|(n, _)| c.n.get(*n).copied().unwrap_or(0))
            .sum()
    }

    /// A task about to be sent; `budget_ms` > 0 makes it a target of the
    /// injector.
    pub fn register(&self, ctx: &str, kind: Kind, via: Via, epoch: u32, budget_ms: u64) {
        self.recs.lock().unwrap().insert(
            ctx.to_string(),
            Rec {
                kind,
                via,
                epoch,
                sent: Instant::now(),
                task: None,
                target: budget_ms > 0,
                fault: None,
                budget_ms,
                cancel: None,
                view: None,
                ended: None,
                checked: false,
                request: None,
                written_at: None,
                refused: false,
                broken: None,
            },
        );
    }

    pub fn with<R>(&self, ctx: &str, f: impl FnOnce(&mut Rec) -> R) -> Option<R> {
        self.recs.lock().unwrap().get_mut(ctx).map(f)
    }

    pub fn set_task(&self, ctx: &str, id: &str) {
        self.with(ctx, |r| r.task = Some(id.to_string()));
    }

    /// How far the creating request got (the furthest, should it be told
    /// twice).
    pub fn request(&self, ctx: &str, progress: Progress) {
        self.with(ctx, |r| {
            if progress != Progress::Unsent && r.written_at.is_none() {
                r.written_at = Some(Instant::now());
            }
            r.request = Some(r.request.map_or(progress, |p| p.max(progress)));
        });
    }

    /// The daemon answered that it created nothing.
    pub fn refused(&self, ctx: &str) {
        self.with(ctx, |r| r.refused = true);
    }

    /// The injector claims a task for `fault`: only a target still running,
    /// once.
    pub fn claim(&self, ctx: &str, fault: TaskFault) -> bool {
        self.with(ctx, |r| {
            let free = r.target && r.fault.is_none() && r.view.is_none();
            if free {
                r.fault = Some((fault, Instant::now()));
            }
            free
        })
        .unwrap_or(false)
    }

    /// The signal could not be sent (the process was gone): no fault.
    pub fn unclaim(&self, ctx: &str) {
        self.with(ctx, |r| r.fault = None);
    }

    /// Targets still running with at least `margin` of their budget left:
    /// (ctx, kind).
    pub fn open_targets(&self, margin: std::time::Duration) -> Vec<(String, Kind)> {
        self.recs
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, r)| {
                r.target
                    && r.fault.is_none()
                    && r.view.is_none()
                    && r.sent.elapsed() + margin < std::time::Duration::from_millis(r.budget_ms)
            })
            .map(|(c, r)| (c.clone(), r.kind))
            .collect()
    }

    /// A client saw the task terminal. A second, different terminal view of
    /// the same task breaks "exactly one terminal state" (a client path
    /// records one end, so the second witness is GetTask, in `compare`, and
    /// the events feed).
    pub fn terminal(&self, ctx: &str, view: View) {
        let clash = self.with(ctx, |r| {
            let clash = r.view.as_ref().filter(|v| v.outcome() != view.outcome()).cloned();
            if r.view.is_none() {
                r.ended = Some(Instant::now());
            }
            r.view = Some(view.clone());
            clash
        });
        if let Some(Some(before)) = clash {
            self.violation(
                "violation.two_terminal_states",
                format!("ctx={ctx}: first {before:?}, then {view:?}"),
            );
        }
    }

    /// GetTask's view after the client's: a second witness of the end. A
    /// different state or cause is a second end; the same end told with
    /// other text or artifacts is a view that differs.
    pub fn compare(&self, ctx: &str, got: &View) {
        let mine = self.with(ctx, |r| {
            r.checked = true;
            (r.view.clone(), r.task.clone())
        });
        let Some((Some(mine), task)) = mine else { return };
        self.judged("violation.two_terminal_states", 1);
        self.judged("violation.view_differs_from_GetTask", 1);
        if mine.outcome() != got.outcome() {
            self.violation(
                "violation.two_terminal_states",
                format!(
                    "ctx={ctx} task={task:?}: the client saw it end {}, GetTask then {}",
                    mine.outcome().key(),
                    got.outcome().key()
                ),
            );
        } else if &mine != got {
            self.violation(
                "violation.view_differs_from_GetTask",
                format!("ctx={ctx} task={task:?}: client saw {mine:?}, GetTask {got:?}"),
            );
        }
    }

    /// When (seconds into the run) clients had seen `n` tasks of `epoch`
    /// end: by then its daemon held as many finished tasks as it keeps
    /// (tasks.retain_max), give or take the few no client saw end.
    pub fn nth_end(&self, epoch: u32, n: usize) -> Option<f64> {
        let mut ends: Vec<Instant> = self
            .recs
            .lock()
            .unwrap()
            .values()
            .filter(|r| r.epoch == epoch && r.view.is_some())
            .filter_map(|r| r.ended)
            .collect();
        ends.sort();
        ends.get(n.checked_sub(1)?)
            .map(|at| at.saturating_duration_since(self.start).as_secs_f64())
    }

    /// Terminal views per outcome in `epoch`, as clients have seen them so far.
    pub fn seen_in_epoch(&self, epoch: u32) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for r in self.recs.lock().unwrap().values() {
            if r.epoch == epoch {
                if let Some(v) = r.view.as_ref().filter(|v| v.terminal()) {
                    *out.entry(v.outcome().key()).or_default() += 1;
                }
            }
        }
        out
    }

    /// Tasks of `epoch` that are not terminal as far as any client knows:
    /// (ctx, task id).
    pub fn open_in_epoch(&self, epoch: u32) -> Vec<(String, Option<String>)> {
        self.recs
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, r)| r.epoch == epoch && r.may_exist() && r.view.is_none())
            .map(|(c, r)| (c.clone(), r.task.clone()))
            .collect()
    }

    /// The contextIds of the tasks sent in `epoch`.
    pub fn ctxs_in_epoch(&self, epoch: u32) -> std::collections::HashSet<String> {
        self.recs
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, r)| r.epoch == epoch)
            .map(|(c, _)| c.clone())
            .collect()
    }

    /// Drops a record (a break's phantom, once judged).
    pub fn forget(&self, ctx: &str) {
        self.recs.lock().unwrap().remove(ctx);
    }

    /// Every record, for the final judgement.
    pub fn drain(&self) -> Vec<(String, Rec)> {
        self.recs.lock().unwrap().drain().collect()
    }

    pub fn task_ids(&self) -> HashMap<String, String> {
        self.recs
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(c, r)| Some((r.task.clone()?, c.clone())))
            .collect()
    }

    /// A task whose end the client saw more than `grace` ago (for the escape
    /// check), by contextId.
    pub fn ended_before(&self, ctx: &str, before: Instant) -> bool {
        self.with(ctx, |r| r.ended.is_some_and(|e| e < before)).unwrap_or(false)
    }
}

/// What a record may end in, given what was done to it. `squeezed`: its
/// life overlapped an fd squeeze, when a worker may not be had.
/// `idle`: a worker it was given to was SIGKILLed or stopped for long by
/// the injector as an idle one (after the worker read its task, before it
/// took the name `agentd-task`): the task's worker was killed or stopped.
/// (Before the read, agentd moves the task to a fresh worker: no trace.)
pub fn allowed(r: &Rec, squeezed: bool, idle: Option<IdleFault>) -> Vec<(Outcome, &'static str)> {
    let natural = (r.kind.natural(), "");
    let mut out = match (r.cancel, r.fault.map(|f| f.0)) {
        (Some(true), _) => vec![(Outcome::new("CANCELED", "canceled"), "")],
        (_, Some(TaskFault::KillWorker)) => vec![(
            Outcome::new("FAILED", "crashed"),
            "the worker ended without a result: killed by signal 9",
        )],
        (_, Some(TaskFault::KillProgram)) => {
            vec![(Outcome::new("FAILED", "crashed"), "the program was killed by signal 9")]
        }
        (_, Some(TaskFault::KillChild)) => vec![(Outcome::new("FAILED", "failed"), "child ended 137")],
        (_, Some(TaskFault::StopWorker { long: true })) => vec![(Outcome::new("FAILED", "stalled"), "")],
        (_, Some(TaskFault::SqueezeMemory)) => vec![(Outcome::new("FAILED", "exhausted"), "out of memory")],
        _ => vec![natural],
    };
    if squeezed {
        out.push((Outcome::new("FAILED", "crashed"), "could not start a worker"));
    }
    match idle {
        Some(IdleFault::Kill) => out.push((
            Outcome::new("FAILED", "crashed"),
            "the worker ended without a result: killed by signal 9",
        )),
        Some(IdleFault::StopLong) => out.push((Outcome::new("FAILED", "stalled"), "")),
        None => {}
    }
    out
}
