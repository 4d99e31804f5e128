//! The load: many clients at once, each drawing what to do next from its
//! own seeded generator — blocking, streaming, subscribe and resubscribe
//! with Last-Event-ID, cancels at random moments, multi-turn input, jsonl
//! floods, messages at the body limit, clients that vanish, slow readers —
//! plus a latency probe. (The MCP bridge client is in mcp.rs.) Every task
//! goes into the ledger before it is sent, under a contextId of the
//! client's own, so a call that breaks can still find what it created.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::daemon::Daemon;
use crate::http::{self, CallError, Event, Opened, Sse};
use crate::ledger::{is_terminal, parts_text, short_state, Kind, Ledger, Via, View};
use crate::rng::Rng;

/// The longest a blocking call may take: the deadline, a long stop, the
/// kill ladder and a loaded machine.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(45);
/// How long a call that broke may still turn into a task: a request the
/// daemon has whole is read when its connection thread gets its turn, or
/// once accept has waited out an fd squeeze. Only then is "no task with its
/// contextId" taken to mean none was made.
const CREATE_GRACE: Duration = Duration::from_secs(5);
const SHORT: Duration = Duration::from_secs(15);

pub struct Env {
    pub daemon: Arc<Daemon>,
    pub ledger: Arc<Ledger>,
    /// Where the agent writes `<contextId>` → "pid starttime".
    pub pids: PathBuf,
    pub body_max: usize,
    /// Task cgroups enforce tasks.memory_max_bytes: grow and hog run.
    pub memory: bool,
    pub stop: AtomicBool,
    /// The probe's latencies (calls the daemon's kill did not break).
    pub probe: Mutex<Vec<Duration>>,
    next_ctx: AtomicU64,
}

impl Env {
    pub fn new(daemon: Arc<Daemon>, ledger: Arc<Ledger>, pids: PathBuf, body_max: usize, memory: bool) -> Env {
        Env {
            daemon,
            ledger,
            pids,
            body_max,
            memory,
            stop: AtomicBool::new(false),
            probe: Mutex::new(Vec::new()),
            next_ctx: AtomicU64::new(1),
        }
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// A fresh contextId: no `z` (the near-limit payload counts them), no
    /// quote, no space (the agent cuts its words on them).
    pub fn new_ctx(&self, who: &str) -> String {
        format!("{who}-{:06}", self.next_ctx.fetch_add(1, Ordering::SeqCst))
    }

    fn rpc(&self, method: &str, params: Value, timeout: Duration) -> Result<Value, CallError> {
        http::rpc(&self.daemon.socket, method, params, timeout)
    }

    pub fn get_view(&self, id: &str) -> Result<View, CallError> {
        self.rpc("GetTask", json!({"id": id, "historyLength": 0}), SHORT)
            .map(|t| View::of_task(&t))
    }

    /// The task a contextId holds, if the daemon created one.
    pub fn find_by_ctx(&self, ctx: &str) -> Result<Option<String>, CallError> {
        let r = self.rpc("ListTasks", json!({"contextId": ctx, "historyLength": 0}), SHORT)?;
        let tasks = r["tasks"].as_array().cloned().unwrap_or_default();
        if tasks.len() > 1 {
            self.ledger.violation(
                "violation.unknown_task",
                format!("ctx={ctx}: one message made {} tasks", tasks.len()),
            );
        }
        Ok(tasks.first().and_then(|t| t["id"].as_str()).map(String::from))
    }

    /// The client saw the task end: record its view, compare GetTask's.
    pub fn finish(&self, ctx: &str, epoch: u32, view: View) {
        self.ledger.terminal(ctx, view);
        let _ = std::fs::remove_file(self.pids.join(ctx));
        let Some(id) = self.ledger.with(ctx, |r| r.task.clone()).flatten() else {
            return;
        };
        match self.get_view(&id) {
            Ok(got) => self.ledger.compare(ctx, &got),
            Err(e) => self.trouble(epoch, ctx, "GetTask after the end", &e),
        }
    }

    /// A call failed. Broken by the daemon's kill or an fd squeeze, it is
    /// counted; anything else breaks an invariant.
    pub fn trouble(&self, epoch: u32, ctx: &str, what: &str, e: &CallError) {
        if self.daemon.disrupted_since(epoch) {
            self.ledger.count("calls.broken_by_restart");
        } else if self
            .daemon
            .squeezed_between(Instant::now() - Duration::from_secs(2), Instant::now(), Duration::ZERO)
        {
            self.ledger.count("calls.broken_by_fd_squeeze");
            eprintln!(
                "chaos: t={:.1}s ctx={ctx}: {what} during an fd squeeze: {e}",
                self.ledger.t()
            );
        } else {
            self.ledger
                .violation("violation.client_error", format!("ctx={ctx}: {what}: {e}"));
        }
    }

    /// Polls the task (found by its id, or by its contextId) until it is
    /// terminal, then records it. Gives up when the daemon is killed.
    pub fn follow(&self, ctx: &str, epoch: u32, timeout: Duration) {
        let started = Instant::now();
        let deadline = started + timeout;
        let mut none_yet = false;
        while Instant::now() < deadline {
            if self.daemon.disrupted_since(epoch) {
                return;
            }
            let id = match self.ledger.with(ctx, |r| r.task.clone()).flatten() {
                Some(id) => id,
                None => match self.find_by_ctx(ctx) {
                    Ok(Some(id)) => {
                        if none_yet {
                            self.ledger.count("calls.task_made_after_a_first_look_found_none");
                        }
                        self.ledger.set_task(ctx, &id);
                        id
                    }
                    Ok(None) if started.elapsed() < CREATE_GRACE => {
                        none_yet = true;
                        std::thread::sleep(Duration::from_millis(200));
                        continue;
                    }
                    Ok(None) => {
                        // Nothing was created (the call broke before the task was).
                        self.ledger.unaccepted(ctx);
                        return;
                    }
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(200));
                        continue;
                    }
                },
            };
            if let Ok(v) = self.get_view(&id) {
                if v.terminal() {
                    self.finish(ctx, epoch, v);
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

pub fn user_message(text: &str, ctx: &str, task: Option<&str>) -> Value {
    let mut m = json!({"messageId": crate::common::new_id(), "role": "ROLE_USER", "contextId": ctx,
                       "parts": [{"text": text}]});
    if let Some(t) = task {
        m["taskId"] = json!(t);
    }
    m
}

/// A `sleep`/`child` text: ticks of `per` seconds, a working status each.
fn ticks_text(word: &str, rng: &mut Rng, ticks: (u64, u64), per_ms: (u64, u64)) -> (String, u64) {
    let n = rng.range(ticks.0, ticks.1);
    let per = rng.range(per_ms.0, per_ms.1);
    (format!("{word} {}.{:03} {n}", per / 1000, per % 1000), n * per)
}

/// The text for a task of `kind`, and how long it runs when left alone (ms).
fn text_for(kind: Kind, rng: &mut Rng) -> (String, u64) {
    match kind {
        Kind::Ok => ("ok".into(), 0),
        Kind::Fail => ("fail".into(), 0),
        Kind::Reject => ("reject".into(), 0),
        Kind::Sleep => ticks_text("sleep", rng, (3, 7), (400, 900)),
        Kind::Child => ticks_text("child", rng, (3, 6), (400, 900)),
        Kind::Flood => (format!("flood {}", rng.range(20, 400)), 0),
        Kind::Ask => (format!("ask {}", rng.range(1, 4)), 0),
        Kind::AskIdle => ("askidle".into(), 0),
        Kind::Hang => ("hang".into(), 0),
        Kind::Grow => ("grow".into(), 3000),
        Kind::Hog => ("hog".into(), 0),
        Kind::Big => unreachable!("near_limit builds its own"),
    }
}

/// The budget that makes a task a target of the injector: kinds that run
/// long enough for it (0: not a target).
fn target_budget(kind: Kind, ms: u64) -> u64 {
    if matches!(kind, Kind::Sleep | Kind::Child | Kind::Grow) {
        ms
    } else {
        0
    }
}

/// One load client: operations until the run stops.
pub fn client(env: Arc<Env>, who: String, mut rng: Rng) {
    while !env.stopping() {
        let Some((epoch, _)) = env.daemon.wait_up(Duration::from_secs(60)) else {
            continue;
        };
        let via = rng.weighted(&[
            (Via::Blocking, 30),
            (Via::Streaming, 16),
            (Via::Resubscribe, 8),
            (Via::Cancel, 10),
            (Via::MultiTurn, 6),
            (Via::VanishCall, 5),
            (Via::VanishStream, 4),
            (Via::SlowReader, 3),
            (Via::NearLimit, 3),
        ]);
        let ctx = env.new_ctx(&who);
        match via {
            Via::Blocking => {
                let mut kinds = vec![
                    (Kind::Ok, 20),
                    (Kind::Fail, 6),
                    (Kind::Reject, 4),
                    (Kind::Sleep, 20),
                    (Kind::Child, 10),
                    (Kind::Flood, 8),
                    (Kind::Hang, 2),
                    (Kind::AskIdle, 2),
                ];
                if env.memory {
                    kinds.extend([(Kind::Grow, 10), (Kind::Hog, 1)]);
                }
                blocking(&env, &ctx, epoch, rng.weighted(&kinds), &mut rng)
            }
            Via::Streaming => {
                let kind = rng.weighted(&[
                    (Kind::Sleep, 4),
                    (Kind::Child, 2),
                    (Kind::Flood, 3),
                    (Kind::Ok, 2),
                    (Kind::Fail, 1),
                ]);
                streaming(&env, &ctx, epoch, kind, &mut rng)
            }
            Via::Resubscribe => resubscribe(&env, &ctx, epoch, &mut rng),
            Via::Cancel => cancel(&env, &ctx, epoch, &mut rng),
            Via::MultiTurn => multi_turn(&env, &ctx, epoch, &mut rng),
            Via::VanishCall => vanish_call(&env, &ctx, epoch, &mut rng),
            Via::VanishStream => vanish_stream(&env, &ctx, epoch, &mut rng),
            Via::SlowReader => slow_reader(&env, &ctx, epoch, &mut rng),
            Via::NearLimit => near_limit(&env, &ctx, epoch, &mut rng),
            Via::Mcp | Via::Probe => unreachable!(),
        }
        env.ledger.count(&format!("via.{via:?}"));
    }
}

fn send_params(text: &str, ctx: &str, immediately: bool) -> Value {
    json!({"message": user_message(text, ctx, None),
           "configuration": {"returnImmediately": immediately, "historyLength": 0}})
}

/// A blocking SendMessage of `kind`; input-required ends a blocking call
/// too, so an `askidle` is then followed until its idle timeout.
fn blocking(env: &Env, ctx: &str, epoch: u32, kind: Kind, rng: &mut Rng) {
    let (text, ms) = text_for(kind, rng);
    env.ledger
        .register(ctx, kind, Via::Blocking, epoch, target_budget(kind, ms));
    match env.rpc("SendMessage", send_params(&text, ctx, false), CALL_TIMEOUT) {
        Ok(r) => {
            let task = &r["task"];
            if let Some(id) = task["id"].as_str() {
                env.ledger.set_task(ctx, id);
            }
            let view = View::of_task(task);
            if view.terminal() {
                env.finish(ctx, epoch, view);
            } else if kind == Kind::AskIdle && view.state == "INPUT_REQUIRED" {
                env.follow(ctx, epoch, CALL_TIMEOUT);
            } else {
                env.ledger.violation(
                    "violation.stream_protocol",
                    format!("ctx={ctx}: a blocking {kind:?} answered {}", short_state(&view.state)),
                );
                env.follow(ctx, epoch, CALL_TIMEOUT);
            }
        }
        Err(e) => {
            env.trouble(epoch, ctx, &format!("blocking {kind:?}"), &e);
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
    }
}

/// A task's view built from its events, checked as they come: ids rise,
/// nothing follows a terminal status.
struct Assembly {
    ctx: String,
    view: Option<View>,
    /// artifactId → text so far.
    artifacts: BTreeMap<String, String>,
    last_id: Option<u64>,
    terminal: bool,
    problems: Vec<String>,
}

impl Assembly {
    fn new(ctx: &str) -> Assembly {
        Assembly {
            ctx: ctx.to_string(),
            view: None,
            artifacts: BTreeMap::new(),
            last_id: None,
            terminal: false,
            problems: Vec::new(),
        }
    }

    fn feed(&mut self, ev: &Event) {
        if let (Some(last), Some(id)) = (self.last_id, ev.id) {
            if id <= last {
                self.problems.push(format!("event id {id} after {last}"));
            }
        }
        if ev.id.is_some() {
            self.last_id = ev.id;
        }
        if self.terminal {
            self.problems
                .push(format!("an event after the terminal status: {}", ev.data));
        }
        let body = ev.body();
        match ev.kind() {
            "task" => {
                // A snapshot replaces what was assembled.
                let v = View::of_task(body);
                self.artifacts = v.artifacts.iter().cloned().collect();
                self.terminal = v.terminal();
                self.view = Some(v);
            }
            "statusUpdate" => {
                let state = short_state(body["status"]["state"].as_str().unwrap_or("")).to_string();
                let v = self.view.get_or_insert_with(|| View {
                    state: String::new(),
                    cause: String::new(),
                    text: String::new(),
                    artifacts: Vec::new(),
                });
                v.state = state;
                v.cause = body["status"]["message"]["metadata"]["agentd.dev/terminal"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                v.text = parts_text(&body["status"]["message"]["parts"]);
                self.terminal = is_terminal(&v.state);
            }
            "artifactUpdate" => {
                let art = &body["artifact"];
                let id = art["artifactId"].as_str().unwrap_or("").to_string();
                let text = parts_text(&art["parts"]);
                let slot = self.artifacts.entry(id).or_default();
                if body["append"].as_bool() == Some(true) {
                    slot.push_str(&text);
                } else {
                    *slot = text;
                }
            }
            other => self
                .problems
                .push(format!("unexpected event kind {other:?}: {}", ev.data)),
        }
    }

    /// The assembled view, once terminal.
    fn result(&self) -> Option<View> {
        let mut v = self.view.clone()?;
        v.artifacts = self.artifacts.iter().map(|(k, t)| (k.clone(), t.clone())).collect();
        v.terminal().then_some(v)
    }

    /// Reads events until the stream ends (or `stop_after` events).
    fn read(&mut self, s: &mut Sse, stop_after: Option<usize>, pause: Duration) -> Result<bool, CallError> {
        let mut n = 0;
        while let Some(ev) = s.next()? {
            self.feed(&ev);
            n += 1;
            if stop_after.is_some_and(|k| n >= k) {
                return Ok(false);
            }
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
        }
        Ok(true)
    }

    fn report(&self, env: &Env) {
        for p in &self.problems {
            env.ledger
                .violation("violation.stream_protocol", format!("ctx={}: {p}", self.ctx));
        }
    }
}

/// Opens a stream; a plain JSON-RPC error is an error here.
fn open(
    env: &Env,
    method: &str,
    params: Value,
    extra: &[(&str, &str)],
    rcvbuf: Option<usize>,
) -> Result<Sse, CallError> {
    match Sse::open(&env.daemon.socket, method, params, extra, CALL_TIMEOUT, rcvbuf)? {
        Opened::Stream(s) => Ok(s),
        Opened::Json(e) => Err(CallError::Rpc(e)),
    }
}

/// Reads a whole stream into `a`; learns the task id from its first event.
fn drain_stream(env: &Env, ctx: &str, a: &mut Assembly, s: &mut Sse, pause: Duration) -> Result<(), CallError> {
    while let Some(ev) = s.next()? {
        if ev.kind() == "task" {
            if let Some(id) = ev.body()["id"].as_str() {
                env.ledger.set_task(ctx, id);
            }
        }
        a.feed(&ev);
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
    Ok(())
}

fn streaming(env: &Env, ctx: &str, epoch: u32, kind: Kind, rng: &mut Rng) {
    let (text, ms) = text_for(kind, rng);
    env.ledger
        .register(ctx, kind, Via::Streaming, epoch, target_budget(kind, ms));
    let mut a = Assembly::new(ctx);
    let got = open(env, "SendStreamingMessage", send_params(&text, ctx, false), &[], None)
        .and_then(|mut s| drain_stream(env, ctx, &mut a, &mut s, Duration::ZERO));
    a.report(env);
    match (got, a.result()) {
        (Ok(()), Some(v)) => env.finish(ctx, epoch, v),
        (Ok(()), None) => {
            env.ledger.violation(
                "violation.stream_protocol",
                format!("ctx={ctx}: the stream ended before the task did"),
            );
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
        (Err(e), _) => {
            env.trouble(epoch, ctx, &format!("streaming {kind:?}"), &e);
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
    }
}

/// returnImmediately, then SubscribeToTask, dropped after a few events and
/// resumed with Last-Event-ID, until the task ends.
fn resubscribe(env: &Env, ctx: &str, epoch: u32, rng: &mut Rng) {
    let kind = if rng.chance(70) { Kind::Sleep } else { Kind::Child };
    let (text, ms) = text_for(kind, rng);
    env.ledger.register(ctx, kind, Via::Resubscribe, epoch, ms);
    let id = match env.rpc("SendMessage", send_params(&text, ctx, true), SHORT) {
        Ok(r) => match r["task"]["id"].as_str() {
            Some(id) => id.to_string(),
            None => {
                env.ledger.violation(
                    "violation.stream_protocol",
                    format!("ctx={ctx}: returnImmediately without a task: {r}"),
                );
                return;
            }
        },
        Err(e) => {
            env.trouble(epoch, ctx, "returnImmediately", &e);
            env.follow(ctx, epoch, CALL_TIMEOUT);
            return;
        }
    };
    env.ledger.set_task(ctx, &id);
    let mut a = Assembly::new(ctx);
    for round in 0..8 {
        let last = a.last_id.map(|n| n.to_string());
        let mut headers = Vec::new();
        if let Some(l) = last.as_deref() {
            headers.push(("Last-Event-ID", l));
        }
        let stop_after = (round < 7).then(|| rng.range(1, 4) as usize);
        let r = open(env, "SubscribeToTask", json!({"id": id}), &headers, None)
            .and_then(|mut s| a.read(&mut s, stop_after, Duration::ZERO));
        match r {
            Ok(true) => break,
            Ok(false) => continue,
            // The task ended between two subscriptions.
            Err(CallError::Rpc(e)) if e["code"] == -32004 => break,
            Err(e) => {
                env.trouble(epoch, ctx, "SubscribeToTask", &e);
                break;
            }
        }
    }
    a.report(env);
    match a.result() {
        Some(v) => env.finish(ctx, epoch, v),
        None => env.follow(ctx, epoch, CALL_TIMEOUT),
    }
}

/// A sleeper cancelled at a random moment (queued, running, or finished).
fn cancel(env: &Env, ctx: &str, epoch: u32, rng: &mut Rng) {
    let kind = if rng.chance(80) { Kind::Sleep } else { Kind::Hang };
    let (text, _) = text_for(kind, rng);
    env.ledger.register(ctx, kind, Via::Cancel, epoch, 0);
    let id = match env.rpc("SendMessage", send_params(&text, ctx, true), SHORT) {
        Ok(r) => r["task"]["id"].as_str().unwrap_or("").to_string(),
        Err(e) => {
            env.trouble(epoch, ctx, "returnImmediately", &e);
            env.follow(ctx, epoch, CALL_TIMEOUT);
            return;
        }
    };
    env.ledger.set_task(ctx, &id);
    std::thread::sleep(Duration::from_millis(rng.range(0, 5000)));
    match env.rpc("CancelTask", json!({"id": id}), CALL_TIMEOUT) {
        Ok(task) => {
            let v = View::of_task(&task);
            // The answer is the task once terminal: CANCELED, or — when the
            // task ended by itself while the ladder ran — how it ended.
            let canceled = v.state == "CANCELED";
            if !canceled {
                env.ledger.count("cancel.raced_the_end");
            }
            env.ledger.with(ctx, |r| r.cancel = Some(canceled));
            if v.terminal() {
                env.finish(ctx, epoch, v);
            } else {
                env.ledger.violation(
                    "violation.stream_protocol",
                    format!("ctx={ctx}: CancelTask answered {} (not terminal)", v.state),
                );
                env.follow(ctx, epoch, CALL_TIMEOUT);
            }
        }
        Err(e) if e.code() == Some(-32002) => {
            env.ledger.with(ctx, |r| r.cancel = Some(false));
            env.ledger.count("cancel.already_ended");
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
        Err(e) => {
            env.trouble(epoch, ctx, "CancelTask", &e);
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
    }
}

/// `ask N`: N input-required turns answered on the same task.
fn multi_turn(env: &Env, ctx: &str, epoch: u32, rng: &mut Rng) {
    let (text, _) = text_for(Kind::Ask, rng);
    let turns: usize = text[4..].parse().unwrap_or(1);
    env.ledger.register(ctx, Kind::Ask, Via::MultiTurn, epoch, 0);
    let mut task_id: Option<String> = None;
    let mut answers = Vec::new();
    for turn in 0..=turns {
        let msg = if turn == 0 {
            user_message(&text, ctx, None)
        } else {
            answers.push(format!("a{turn}"));
            user_message(&format!("a{turn}"), ctx, task_id.as_deref())
        };
        let r = env.rpc(
            "SendMessage",
            json!({"message": msg, "configuration": {"historyLength": 0}}),
            CALL_TIMEOUT,
        );
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                env.trouble(epoch, ctx, &format!("turn {turn}"), &e);
                env.follow(ctx, epoch, CALL_TIMEOUT);
                return;
            }
        };
        let task = &r["task"];
        if let Some(id) = task["id"].as_str() {
            task_id = Some(id.to_string());
            env.ledger.set_task(ctx, id);
        }
        let v = View::of_task(task);
        let want = if turn < turns { "INPUT_REQUIRED" } else { "COMPLETED" };
        if v.state != want {
            if v.terminal() {
                // An outcome the judge will weigh (a fault, or a bug).
                env.finish(ctx, epoch, v);
            } else {
                env.ledger.violation(
                    "violation.stream_protocol",
                    format!("ctx={ctx}: turn {turn} answered {}, not {want}", v.state),
                );
                env.follow(ctx, epoch, CALL_TIMEOUT);
            }
            return;
        }
        if turn == turns {
            let want_text = format!("answers: {}", answers.join(" "));
            if v.text != want_text {
                env.ledger.violation(
                    "violation.unexpected_outcome",
                    format!("ctx={ctx}: multi-turn said {:?}, not {want_text:?}", v.text),
                );
            }
            env.finish(ctx, epoch, v);
        }
    }
}

/// A blocking call whose client hangs up mid-call: the task goes on.
fn vanish_call(env: &Env, ctx: &str, epoch: u32, rng: &mut Rng) {
    let kind = if rng.chance(70) { Kind::Sleep } else { Kind::Child };
    let (text, ms) = text_for(kind, rng);
    env.ledger.register(ctx, kind, Via::VanishCall, epoch, ms);
    let bytes = http::post_bytes(&http::request_body("SendMessage", &send_params(&text, ctx, false)), &[]);
    match http::connect(&env.daemon.socket, SHORT) {
        Ok(mut s) => {
            let _ = s.write_all(&bytes);
            let _ = s.set_read_timeout(Some(Duration::from_millis(rng.range(20, 800))));
            let mut buf = [0u8; 64];
            let _ = s.read(&mut buf);
            drop(s);
        }
        Err(e) => env.trouble(epoch, ctx, "connect", &e),
    }
    env.follow(ctx, epoch, CALL_TIMEOUT);
}

/// A stream whose reader hangs up after its first event or two.
fn vanish_stream(env: &Env, ctx: &str, epoch: u32, rng: &mut Rng) {
    let kind = rng.weighted(&[(Kind::Sleep, 3), (Kind::Flood, 2)]);
    let (text, ms) = text_for(kind, rng);
    env.ledger
        .register(ctx, kind, Via::VanishStream, epoch, target_budget(kind, ms));
    let mut a = Assembly::new(ctx);
    let n = rng.range(1, 3) as usize;
    let r = open(env, "SendStreamingMessage", send_params(&text, ctx, false), &[], None).and_then(|mut s| {
        let mut seen = 0;
        while seen < n {
            match s.next()? {
                Some(ev) => {
                    if ev.kind() == "task" {
                        if let Some(id) = ev.body()["id"].as_str() {
                            env.ledger.set_task(ctx, id);
                        }
                    }
                    a.feed(&ev);
                    seen += 1;
                }
                None => break,
            }
        }
        Ok(())
    });
    if let Err(e) = r {
        env.trouble(epoch, ctx, "streaming (vanishing)", &e);
    }
    a.report(env);
    env.follow(ctx, epoch, CALL_TIMEOUT);
}

/// A flood read slowly through a small receive buffer.
fn slow_reader(env: &Env, ctx: &str, epoch: u32, rng: &mut Rng) {
    let text = format!("flood {}", rng.range(300, 1500));
    env.ledger.register(ctx, Kind::Flood, Via::SlowReader, epoch, 0);
    let mut a = Assembly::new(ctx);
    let pause = Duration::from_millis(rng.range(1, 4));
    let got = open(
        env,
        "SendStreamingMessage",
        send_params(&text, ctx, false),
        &[],
        Some(4096),
    )
    .and_then(|mut s| drain_stream(env, ctx, &mut a, &mut s, pause));
    a.report(env);
    match (got, a.result()) {
        (Ok(()), Some(v)) => env.finish(ctx, epoch, v),
        (Ok(()), None) => {
            env.ledger.violation(
                "violation.stream_protocol",
                format!("ctx={ctx}: the slow stream ended before the task did"),
            );
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
        (Err(e), _) => {
            env.trouble(epoch, ctx, "slow stream", &e);
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
    }
}

/// A request body a little under http.body_max_bytes (answered, and the
/// agent got every byte), or a little over it (413, nothing created).
fn near_limit(env: &Env, ctx: &str, epoch: u32, rng: &mut Rng) {
    let over = rng.chance(30);
    let target = if over {
        env.body_max + rng.range(1, 1024) as usize
    } else {
        env.body_max - rng.range(0, 1024) as usize
    };
    let body_with = |k: usize| {
        http::request_body(
            "SendMessage",
            &send_params(&format!("big {}", "z".repeat(k)), ctx, false),
        )
    };
    let k = target - body_with(0).len();
    let body = body_with(k);
    env.ledger.register(ctx, Kind::Big, Via::NearLimit, epoch, 0);
    match http::exchange(&env.daemon.socket, &http::post_bytes(&body, &[]), CALL_TIMEOUT) {
        Ok(resp) if over => {
            if resp.status != 413 {
                env.ledger.violation(
                    "violation.client_error",
                    format!(
                        "ctx={ctx}: a body of {} bytes (limit {}) got {}",
                        body.len(),
                        env.body_max,
                        resp.status
                    ),
                );
            }
            env.ledger.count("near_limit.refused_413");
            match env.find_by_ctx(ctx) {
                Ok(None) => env.ledger.unaccepted(ctx),
                Ok(Some(id)) => {
                    env.ledger.violation(
                        "violation.unknown_task",
                        format!("ctx={ctx}: a 413 request created task {id}"),
                    );
                    env.ledger.set_task(ctx, &id);
                    env.follow(ctx, epoch, CALL_TIMEOUT);
                }
                Err(e) => env.trouble(epoch, ctx, "ListTasks after 413", &e),
            }
        }
        Ok(resp) => match http::result_of(&resp) {
            Ok(r) => {
                if let Some(id) = r["task"]["id"].as_str() {
                    env.ledger.set_task(ctx, id);
                }
                let v = View::of_task(&r["task"]);
                let want = format!("big {k}");
                if v.state == "COMPLETED" && v.text != want {
                    env.ledger.violation(
                        "violation.unexpected_outcome",
                        format!("ctx={ctx}: the agent saw {:?}, not {want:?}", v.text),
                    );
                }
                env.ledger.count("near_limit.served");
                env.finish(ctx, epoch, v);
            }
            Err(e) => {
                env.trouble(epoch, ctx, &format!("a {}-byte body", body.len()), &e);
                env.follow(ctx, epoch, CALL_TIMEOUT);
            }
        },
        Err(e) => {
            env.trouble(epoch, ctx, &format!("a {}-byte body", body.len()), &e);
            env.follow(ctx, epoch, CALL_TIMEOUT);
        }
    }
}

/// The probe: a blocking `ok` every `every`, its latency kept unless the
/// daemon's kill broke it.
pub fn probe(env: Arc<Env>, every: Duration, timeout: Duration) {
    while !env.stopping() {
        let Some((epoch, _)) = env.daemon.wait_up(Duration::from_secs(60)) else {
            continue;
        };
        let ctx = env.new_ctx("probe");
        env.ledger.register(&ctx, Kind::Ok, Via::Probe, epoch, 0);
        let t = Instant::now();
        let r = env.rpc("SendMessage", send_params("ok", &ctx, false), timeout);
        let took = t.elapsed();
        match r {
            Ok(r) => {
                if let Some(id) = r["task"]["id"].as_str() {
                    env.ledger.set_task(&ctx, id);
                }
                env.probe.lock().unwrap().push(took);
                env.finish(&ctx, epoch, View::of_task(&r["task"]));
            }
            Err(e) if env.daemon.disrupted_since(epoch) => {
                env.ledger.count("probe.broken_by_restart");
                let _ = e;
            }
            Err(e) if e.is_timeout() => {
                env.probe.lock().unwrap().push(took);
                env.ledger.violation(
                    "violation.probe_timeout",
                    format!("ctx={ctx}: no answer to a blocking `ok` within {timeout:?}"),
                );
                env.follow(&ctx, epoch, CALL_TIMEOUT);
            }
            Err(e) => {
                env.trouble(epoch, &ctx, "probe", &e);
                env.follow(&ctx, epoch, CALL_TIMEOUT);
            }
        }
        std::thread::sleep(every);
    }
}
