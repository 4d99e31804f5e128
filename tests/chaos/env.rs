//! What every client of the soak shares: the daemon, the ledger, and the
//! calls that go through both. A call that creates a task is made only on
//! a connection to the daemon of the epoch the client noted, and tells the
//! ledger how far its request got, so the judge can tell a request the
//! daemon never had whole from one it had and lost.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::breaks::Breaks;
use crate::daemon::Daemon;
use crate::http::{self, CallError, Opened, Progress, Response, Sse};
use crate::ledger::{Kind, Ledger, TaskFault, View};

/// The longest a blocking call may take: the deadline, a long stop, the
/// kill ladder and a loaded machine.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(45);
/// How long a request written whole may take to become a task the daemon
/// lists: it is read when its connection thread gets its turn, or once
/// accept has waited out an fd squeeze. A daemon killed within this of the
/// write may have died with the request unread.
pub const CREATE_GRACE: Duration = Duration::from_secs(5);
pub const SHORT: Duration = Duration::from_secs(15);

pub struct Env {
    pub daemon: Arc<Daemon>,
    pub ledger: Arc<Ledger>,
    /// Where the agent writes `<contextId>` → "pid starttime".
    pub pids: PathBuf,
    pub body_max: usize,
    /// Task cgroups enforce tasks.memory_max_bytes: grow and hog run.
    pub memory: bool,
    /// CHAOS_RUN, the mark every process of the run's agent carries.
    pub run_id: String,
    pub breaks: Breaks,
    pub stop: AtomicBool,
    /// The probe's latencies (calls the daemon's kill did not break).
    pub probe: Mutex<Vec<Duration>>,
    /// A kind of task the injector has a fault for and no target: the next
    /// blocking task a client sends is one.
    wanted: Mutex<Option<Kind>>,
    next_ctx: AtomicU64,
}

impl Env {
    pub fn new(
        daemon: Arc<Daemon>,
        ledger: Arc<Ledger>,
        pids: PathBuf,
        body_max: usize,
        memory: bool,
        run_id: String,
        breaks: Breaks,
    ) -> Env {
        Env {
            daemon,
            ledger,
            pids,
            body_max,
            memory,
            run_id,
            breaks,
            stop: AtomicBool::new(false),
            probe: Mutex::new(Vec::new()),
            wanted: Mutex::new(None),
            next_ctx: AtomicU64::new(1),
        }
    }

    /// Whether the break for `invariant` was asked for and has not made
    /// it fire yet (for breaks that try again until they do).
    pub fn break_pending(&self, invariant: &str) -> bool {
        self.breaks.asked(invariant)
            && self
                .ledger
                .counters()
                .get(&format!("violation.{invariant}"))
                .is_none_or(|n| *n == 0)
    }

    /// Asks for a task of `kind` (see `wanted`).
    pub fn want(&self, kind: Kind) {
        *self.wanted.lock().unwrap() = Some(kind);
    }

    /// The kind of task asked for, once.
    pub fn take_wanted(&self) -> Option<Kind> {
        self.wanted.lock().unwrap().take()
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// A fresh contextId: no `z` (the near-limit payload counts them), no
    /// quote, no space (the agent cuts its words on them).
    pub fn new_ctx(&self, who: &str) -> String {
        format!("{who}-{:06}", self.next_ctx.fetch_add(1, Ordering::SeqCst))
    }

    /// A call that creates nothing, on whichever daemon serves now.
    pub fn rpc(&self, method: &str, params: Value, timeout: Duration) -> Result<Value, CallError> {
        http::rpc(&self.daemon.socket, method, params, timeout)
    }

    /// A connection to the daemon of `epoch`, or an error: a connection
    /// made while that daemon is being killed may reach its successor, and
    /// a request written there would be in no ledger's epoch. Checked after
    /// the connect: a daemon serving then was serving when it connected
    /// (the next one starts only after this one is marked down).
    pub fn connect(&self, epoch: u32, timeout: Duration) -> Result<UnixStream, CallError> {
        let s = http::connect(&self.daemon.socket, timeout)?;
        if self.daemon.disrupted_since(epoch) {
            return Err(CallError::Unsent(std::io::Error::other(format!(
                "the daemon of epoch {epoch} is gone"
            ))));
        }
        Ok(s)
    }

    /// The request that creates `ctx`'s task, written to the daemon of
    /// `epoch`; its answer. The ledger learns how far the request got.
    pub fn create(&self, epoch: u32, ctx: &str, bytes: &[u8], timeout: Duration) -> Result<Response, CallError> {
        let s = match self.connect(epoch, timeout) {
            Ok(s) => s,
            Err(e) => {
                self.ledger.request(ctx, Progress::Unsent);
                return Err(e);
            }
        };
        let (progress, r) = http::exchange_on(s, bytes);
        self.ledger.request(ctx, progress);
        r
    }

    /// `create` for a JSON-RPC call: its result or error.
    pub fn create_rpc(
        &self,
        epoch: u32,
        ctx: &str,
        method: &str,
        params: &Value,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let bytes = http::post_bytes(&http::request_body(method, params), &[]);
        http::result_of(&self.create(epoch, ctx, &bytes, timeout)?)
    }

    /// `create` for a streaming call; a plain JSON-RPC error is an error.
    pub fn create_stream(
        &self,
        epoch: u32,
        ctx: &str,
        method: &str,
        params: Value,
        rcvbuf: Option<usize>,
    ) -> Result<Sse, CallError> {
        let s = match self.connect(epoch, CALL_TIMEOUT) {
            Ok(s) => s,
            Err(e) => {
                self.ledger.request(ctx, Progress::Unsent);
                return Err(e);
            }
        };
        let (progress, r) = Sse::open_on(s, method, params, &[], rcvbuf);
        self.ledger.request(ctx, progress);
        match r? {
            Opened::Stream(s) => Ok(s),
            Opened::Json(e) => Err(CallError::Rpc(e)),
        }
    }

    pub fn get_view(&self, id: &str) -> Result<View, CallError> {
        self.rpc("GetTask", json!({"id": id, "historyLength": 0}), SHORT)
            .map(|t| View::of_task(&t))
    }

    /// The task a contextId holds, if the daemon created one.
    pub fn find_by_ctx(&self, ctx: &str) -> Result<Option<String>, CallError> {
        let r = self.rpc("ListTasks", json!({"contextId": ctx, "historyLength": 0}), SHORT)?;
        let tasks = r["tasks"].as_array().cloned().unwrap_or_default();
        self.ledger.judged("violation.unknown_task", tasks.len() as u64);
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
        let untouched_ok = view.outcome().key() == "COMPLETED/completed"
            && self
                .ledger
                .with(ctx, |r| r.kind == Kind::Ok && r.fault.is_none() && r.cancel.is_none())
                .unwrap_or(false);
        if untouched_ok && self.breaks.take("unexpected_outcome") {
            // As if the injector had killed its worker: an end it cannot give.
            self.ledger
                .with(ctx, |r| r.fault = Some((TaskFault::KillWorker, Instant::now())));
        }
        self.ledger.terminal(ctx, view);
        let _ = std::fs::remove_file(self.pids.join(ctx));
        let Some(id) = self.ledger.with(ctx, |r| r.task.clone()).flatten() else {
            return;
        };
        match self.get_view(&id) {
            Ok(mut got) => {
                if self.breaks.take("view_differs_from_GetTask") {
                    got.text.push_str(" (told otherwise)");
                }
                self.ledger.compare(ctx, &got)
            }
            Err(e) => self.trouble(epoch, ctx, "GetTask after the end", &e),
        }
    }

    /// A call failed. Broken by the daemon's kill or an fd squeeze, it is
    /// counted; anything else breaks an invariant.
    pub fn trouble(&self, epoch: u32, ctx: &str, what: &str, e: &CallError) {
        let why = if self.daemon.disrupted_since(epoch) {
            self.ledger.count("calls.broken_by_restart");
            "restart"
        } else if self
            .daemon
            .squeezed_between(Instant::now() - Duration::from_secs(2), Instant::now(), Duration::ZERO)
        {
            self.ledger.count("calls.broken_by_fd_squeeze");
            eprintln!(
                "chaos: t={:.1}s ctx={ctx}: {what} during an fd squeeze: {e}",
                self.ledger.t()
            );
            "fd squeeze"
        } else {
            self.ledger
                .violation("violation.client_error", format!("ctx={ctx}: {what}: {e}"));
            "client error"
        };
        self.ledger.with(ctx, |r| {
            r.broken.get_or_insert(why);
        });
    }

    /// Polls the task (found by its id, or by its contextId) until it is
    /// terminal, then records it. Gives up when the daemon is killed. A
    /// task whose request never reached the daemon whole, or was refused,
    /// is not looked for; one written whole is looked for until the
    /// timeout (the judge weighs what was not found), one whose client
    /// cannot tell (the MCP bridge's) for `CREATE_GRACE`.
    pub fn follow(&self, ctx: &str, epoch: u32, timeout: Duration) {
        let started = Instant::now();
        let deadline = started + timeout;
        let mut none_yet = false;
        while Instant::now() < deadline {
            if self.daemon.disrupted_since(epoch) {
                return;
            }
            let Some((task, may_exist, request)) =
                self.ledger.with(ctx, |r| (r.task.clone(), r.may_exist(), r.request))
            else {
                return;
            };
            let id = match task {
                Some(id) => id,
                None if !may_exist => return,
                None => match self.find_by_ctx(ctx) {
                    Ok(Some(id)) => {
                        if none_yet {
                            self.ledger.count("calls.task_made_after_a_first_look_found_none");
                        }
                        self.ledger.set_task(ctx, &id);
                        id
                    }
                    Ok(None) if request == Some(Progress::Written) || started.elapsed() < CREATE_GRACE => {
                        none_yet = true;
                        std::thread::sleep(Duration::from_millis(200));
                        continue;
                    }
                    Ok(None) => return,
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
