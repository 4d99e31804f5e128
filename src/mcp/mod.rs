//! `agentd mcp [ENDPOINT]`: an MCP server on stdio that is an A2A client of
//! the daemon at ENDPOINT. It holds no task state: every tool call and
//! resource read is an A2A call, so MCP clients, A2A clients and several
//! bridges all see the same tasks.
//!
//! ```text
//!  MCP client ──stdin: one JSON-RPC message per line──▶ reader thread
//!      ▲                                                  │ initialize, ping, tools/list,
//!      │                                                  │ templates: answered at once
//!      │                                                  │ tools/call, resources/*: a thread each
//!      │                                                  ▼
//!      └──stdout: one JSON object per line◀── writer lock ◀── call threads ──A2A──▶ agentd serve
//!                 (responses, notifications/progress,            (SendStreamingMessage, GetTask,
//!                  notifications/resources/updated)               CancelTask, ListTasks, SubscribeToTask)
//!
//!  notifications/cancelled {requestId} ──▶ that call's task gets CancelTask (the kill ladder),
//!                                          and the call sends no response (MCP cancellation rules)
//! ```
//!
//! Protocol revisions: the initialize-handshake ones ([`PROTOCOL_VERSIONS`]).
//! A client asking for one gets it; any other gets our newest. A 2026-07-28
//! ("modern", stateless) client probes `server/discover` first, gets -32601,
//! and falls back to `initialize`, as that revision's stdio binding says.
//! Logs go to stderr; stdout carries nothing but protocol.
//!
//! ```
//! use agentd::mcp::Bridge;
//! let (bridge, out) = Bridge::in_memory("unix:///nonexistent/agentd.sock");
//! bridge.serve(&b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n"[..]);
//! assert_eq!(out.text(), "{\"id\":1,\"jsonrpc\":\"2.0\",\"result\":{}}\n");
//! ```

mod resources;
mod schemas;
mod tools;

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::client::{Client, ClientError};
use crate::limits::{MCP_INFLIGHT_MAX, MCP_LINE_MAX_BYTES};
use crate::rpc::{INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR};
use crate::transport::Address;

/// The MCP revisions served, newest first. Tool output schemas and
/// `structuredContent` exist from 2025-06-18 on; a 2025-03-26 session gets
/// tools without them (and the same text).
pub const PROTOCOL_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// The revision to answer `initialize` with: the client's, if we speak it,
/// else our newest (the client then decides whether to go on).
pub fn negotiate(requested: &str) -> &'static str {
    PROTOCOL_VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(PROTOCOL_VERSIONS[0])
}

/// A JSON-RPC error to answer a request with.
#[derive(Debug, Clone, PartialEq)]
pub struct McpError {
    pub code: i32,
    pub message: String,
    pub data: Option<Value>,
}

impl McpError {
    pub fn new(code: i32, message: impl Into<String>) -> McpError {
        McpError {
            code,
            message: message.into(),
            data: None,
        }
    }

    fn to_json(&self) -> Value {
        let mut e = json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.data {
            e["data"] = d.clone();
        }
        e
    }
}

impl fmt::Display for McpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error {}: {}", self.code, self.message)
    }
}

/// One request being worked on in its own thread.
pub struct Call {
    /// The request's id and method, for an answer from outside the thread
    /// (the drain at EOF).
    id: Value,
    method: String,
    /// Set by `notifications/cancelled`: the call sends no response.
    cancelled: AtomicBool,
    /// Set by whoever answers the request: its thread, or the drain. One
    /// request gets one answer.
    answered: AtomicBool,
    /// The A2A task the call drives, once known; cancellation needs it.
    task: Mutex<Option<String>>,
}

impl Call {
    fn new(id: Value, method: String) -> Call {
        Call {
            id,
            method,
            cancelled: AtomicBool::new(false),
            answered: AtomicBool::new(false),
            task: Mutex::new(None),
        }
    }

    /// True for the one caller that may answer the request.
    fn claim_answer(&self) -> bool {
        !self.answered.swap(true, Ordering::SeqCst)
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Records the call's task; true when the call was cancelled before the
    /// task was known (the caller then cancels it). Both this and `cancel`
    /// hold the task lock, so one of them always sees the other.
    pub fn bind_task(&self, id: &str) -> bool {
        let mut t = lock(&self.task);
        if t.is_none() {
            *t = Some(id.to_string());
        }
        self.is_cancelled()
    }

    /// Marks the call cancelled; returns its task, if already known.
    fn cancel(&self) -> Option<String> {
        let t = lock(&self.task);
        self.cancelled.store(true, Ordering::SeqCst);
        t.clone()
    }
}

struct State {
    version: &'static str,
    /// In-flight requests by their id's JSON text (so `1` and `"1"` differ).
    calls: HashMap<String, Arc<Call>>,
}

/// The bridge: where to reach the daemon, the one stdout writer, and the
/// requests and subscriptions in flight.
pub struct Bridge {
    addr: Address,
    out: Mutex<Box<dyn Write + Send>>,
    state: Mutex<State>,
    /// Signalled (with `state`) each time a call ends.
    call_ended: Condvar,
    subscriptions: resources::Subscriptions,
}

/// A poisoned lock only means another call thread panicked; the data it
/// guards (maps, a writer) is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Bridge {
    pub fn new(addr: Address, out: Box<dyn Write + Send>) -> Arc<Bridge> {
        Arc::new(Bridge {
            addr,
            out: Mutex::new(out),
            state: Mutex::new(State {
                version: PROTOCOL_VERSIONS[0],
                calls: HashMap::new(),
            }),
            call_ended: Condvar::new(),
            subscriptions: resources::Subscriptions::default(),
        })
    }

    /// A bridge writing into memory, for tests and the doc example.
    pub fn in_memory(endpoint: &str) -> (Arc<Bridge>, Captured) {
        let captured = Captured::default();
        let addr = Address::parse(endpoint).unwrap_or(Address::Unix("/nonexistent".into()));
        (Bridge::new(addr, Box::new(captured.clone())), captured)
    }

    /// A fresh client of the daemon that has read and checked its card (so a
    /// restarted daemon is found again). It asks for task annotations, so
    /// results carry them.
    pub fn client(&self) -> Result<Client, ClientError> {
        let mut c = Client::new(self.addr.clone());
        c.extensions.push(crate::ext::ANNOTATIONS.to_string());
        c.discover()?;
        Ok(c)
    }

    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// The negotiated revision (our newest until `initialize`).
    pub fn version(&self) -> &'static str {
        lock(&self.state).version
    }

    /// Writes one message as one line. Every writer goes through this lock,
    /// so lines never interleave.
    pub fn send(&self, msg: &Value) {
        let mut line = msg.to_string();
        line.push('\n');
        let mut out = lock(&self.out);
        if let Err(e) = out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
            // The client closed stdout; the reader sees EOF soon and exits.
            log::debug!("mcp.write_failed error={e}");
        }
    }

    pub fn notify(&self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    fn reply(&self, id: &Value, result: Result<Value, McpError>) {
        match result {
            Ok(r) => self.send(&json!({"jsonrpc": "2.0", "id": id, "result": r})),
            Err(e) => self.send(&json!({"jsonrpc": "2.0", "id": id, "error": e.to_json()})),
        }
    }

    /// Reads stdin until EOF, one message per line. Returns at EOF (or a
    /// read error) with calls perhaps still in flight: see [`Bridge::drain`].
    pub fn serve(self: &Arc<Self>, input: impl BufRead) {
        let mut input = input;
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match read_line(&mut input, &mut buf, MCP_LINE_MAX_BYTES) {
                Ok(Line::Eof) => return,
                Ok(Line::TooLong) => self.reply(
                    &Value::Null,
                    Err(McpError::new(
                        PARSE_ERROR,
                        format!("parse error: a line is longer than {MCP_LINE_MAX_BYTES} bytes"),
                    )),
                ),
                Ok(Line::Complete) => self.handle_line(&buf),
                Err(e) => {
                    log::error!("mcp.stdin_failed error={e}");
                    return;
                }
            }
        }
    }

    fn handle_line(self: &Arc<Self>, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        match parse_message(line) {
            Ok(Message::Request { id, method, params }) => self.request(id, &method, params),
            Ok(Message::Notification { method, params }) => self.notification(&method, &params),
            Ok(Message::Response) => log::debug!("mcp.ignored_response (we send no requests)"),
            Err((id, e)) => {
                log::warn!("mcp.bad_message code={} {}", e.code, e.message);
                self.reply(&id, Err(e));
            }
        }
    }

    fn request(self: &Arc<Self>, id: Value, method: &str, params: Value) {
        match method {
            "initialize" => {
                let r = self.initialize(&params);
                self.reply(&id, r);
            }
            "ping" => self.reply(&id, Ok(json!({}))),
            "tools/list" => self.reply(&id, Ok(schemas::list(self.version()))),
            "resources/templates/list" => self.reply(&id, Ok(resources::templates())),
            "tools/call" | "resources/list" | "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                self.start_call(id, method.to_string(), params)
            }
            other => self.reply(
                &id,
                Err(McpError::new(METHOD_NOT_FOUND, format!("method not found: {other}"))),
            ),
        }
    }

    fn initialize(&self, params: &Value) -> Result<Value, McpError> {
        let requested = params["protocolVersion"]
            .as_str()
            .ok_or_else(|| McpError::new(INVALID_PARAMS, "initialize: params.protocolVersion must be a string"))?;
        let version = negotiate(requested);
        lock(&self.state).version = version;
        log::info!(
            "mcp.initialize requested={requested} version={version} client={}",
            params["clientInfo"]["name"].as_str().unwrap_or("?")
        );
        let mut info = json!({"name": "agentd", "version": env!("CARGO_PKG_VERSION")});
        if version != "2025-03-26" {
            info["title"] = json!("agentd (A2A tasks as MCP tools)");
        }
        Ok(json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": {"listChanged": false},
                "resources": {"subscribe": true, "listChanged": false},
            },
            "serverInfo": info,
            "instructions": "Each tool drives a task of the agentd daemon at this bridge's endpoint: \
                             subagent_spawn starts one, subagent_send answers one that asks for input, \
                             subagent_status reads it, subagent_cancel stops it and every process it \
                             started, subagent_list lists them. Tasks are also resources agentd://task/{id}.",
        }))
    }

    fn notification(self: &Arc<Self>, method: &str, params: &Value) {
        match method {
            "notifications/initialized" => log::debug!("mcp.initialized"),
            "notifications/cancelled" => {
                let key = params["requestId"].to_string();
                let call = lock(&self.state).calls.get(&key).cloned();
                let Some(call) = call else {
                    log::debug!("mcp.cancel_unknown request={key}");
                    return;
                };
                log::info!(
                    "mcp.cancelled request={key} reason={}",
                    params["reason"].as_str().unwrap_or("-")
                );
                if let Some(task) = call.cancel() {
                    self.cancel_task_in_background(task);
                }
            }
            other => log::debug!("mcp.ignored_notification method={other}"),
        }
    }

    /// Runs CancelTask (the kill ladder) without holding up stdin: the
    /// ladder may take its grace periods.
    pub fn cancel_task_in_background(self: &Arc<Self>, task: String) {
        let bridge = Arc::clone(self);
        let spawned = std::thread::Builder::new().name("mcp-cancel".into()).spawn(move || {
            let r = bridge
                .client()
                .and_then(|c| c.call("CancelTask", json!({ "id": task })));
            match r {
                Ok(t) => log::info!("mcp.task_cancelled task={task} state={}", t["status"]["state"]),
                Err(e) => log::warn!("mcp.cancel_failed task={task} error={e}"),
            }
        });
        if let Err(e) = spawned {
            log::error!("mcp.thread_failed error={e}");
        }
    }

    fn start_call(self: &Arc<Self>, id: Value, method: String, params: Value) {
        let key = id.to_string();
        let call = Arc::new(Call::new(id.clone(), method.clone()));
        {
            let mut st = lock(&self.state);
            if st.calls.contains_key(&key) {
                drop(st);
                return self.reply(
                    &id,
                    Err(McpError::new(
                        INVALID_REQUEST,
                        format!("request id {key} is already in use"),
                    )),
                );
            }
            if st.calls.len() >= MCP_INFLIGHT_MAX {
                drop(st);
                return self.reply(
                    &id,
                    Err(McpError::new(
                        INTERNAL_ERROR,
                        format!("{MCP_INFLIGHT_MAX} requests are already in flight; retry when one ends"),
                    )),
                );
            }
            st.calls.insert(key.clone(), Arc::clone(&call));
        }
        let bridge = Arc::clone(self);
        let reply_id = id.clone();
        let spawned = std::thread::Builder::new().name("mcp-call".into()).spawn(move || {
            let result = match method.as_str() {
                "tools/call" => tools::call(&bridge, &call, &params),
                "resources/list" => resources::list(&bridge, &params),
                "resources/read" => resources::read(&bridge, &params),
                "resources/subscribe" => resources::subscribe(&bridge, &params),
                _ => resources::unsubscribe(&bridge, &params),
            };
            if call.is_cancelled() {
                log::debug!("mcp.no_response request={key} (cancelled)");
            } else if call.claim_answer() {
                bridge.reply(&id, result);
            }
            // Ended only once answered: the drain at EOF must not let the
            // process exit between the two.
            bridge.end_call(&key);
        });
        if let Err(e) = spawned {
            self.end_call(&reply_id.to_string());
            self.reply(
                &reply_id,
                Err(McpError::new(INTERNAL_ERROR, format!("cannot start a thread: {e}"))),
            );
        }
    }

    fn end_call(&self, key: &str) {
        lock(&self.state).calls.remove(key);
        self.call_ended.notify_all();
    }

    /// After EOF on stdin: waits up to `timeout` for the requests still in
    /// flight to be answered, then answers each one left with an error that
    /// says so (a tool call's task goes on in the daemon). Every request
    /// read gets its answer before the bridge exits.
    pub fn drain(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.state);
        while !st.calls.is_empty() {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            st = self
                .call_ended
                .wait_timeout(st, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        let left: Vec<Arc<Call>> = st.calls.values().cloned().collect();
        drop(st);
        for call in left {
            if call.is_cancelled() || !call.claim_answer() {
                continue;
            }
            let secs = crate::config::secs_text(timeout);
            let task = lock(&call.task).clone();
            log::warn!(
                "mcp.drain_timeout request={} method={} task={}",
                call.id,
                call.method,
                task.as_deref().unwrap_or("-")
            );
            let why = format!("stdin ended and this request was not done within {secs} s (--drain-timeout)");
            if call.method == "tools/call" {
                let text = match task {
                    Some(t) => format!(
                        "{why}; task {t} goes on in the agentd daemon at {}: see it with subagent_status \
                         or `agentd get {} {t}`",
                        self.addr, self.addr
                    ),
                    None => format!(
                        "{why}; a task it started may go on in the agentd daemon at {}",
                        self.addr
                    ),
                };
                self.reply(&call.id, Ok(tools::error_result(text)));
            } else {
                self.reply(&call.id, Err(McpError::new(INTERNAL_ERROR, why)));
            }
        }
    }
}

/// What one line of stdin is.
#[derive(Debug, PartialEq)]
pub enum Message {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// A response to a request of ours (we send none; ignored).
    Response,
}

/// Parses one line as a JSON-RPC 2.0 message. An error carries the id to
/// answer with (null when there is none to be had).
pub fn parse_message(line: &[u8]) -> Result<Message, (Value, McpError)> {
    let v: Value = serde_json::from_slice(line)
        .map_err(|e| (Value::Null, McpError::new(PARSE_ERROR, format!("parse error: {e}"))))?;
    let invalid = |id: Value, why: &str| (id, McpError::new(INVALID_REQUEST, format!("invalid request: {why}")));
    let Value::Object(obj) = v else {
        let why = if v.is_array() {
            "JSON-RPC batches are not supported (send one message per line)"
        } else {
            "a message is a JSON object"
        };
        return Err(invalid(Value::Null, why));
    };
    // An id we can answer with: a string or an integer (never null, per MCP).
    let id = match obj.get("id") {
        None => None,
        Some(i @ Value::String(_)) => Some(i.clone()),
        Some(i @ Value::Number(n)) if n.is_i64() || n.is_u64() => Some(i.clone()),
        Some(_) => return Err(invalid(Value::Null, "`id` must be a string or an integer")),
    };
    let reply_id = id.clone().unwrap_or(Value::Null);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid(reply_id, "`jsonrpc` must be \"2.0\""));
    }
    let method = match obj.get("method") {
        Some(Value::String(m)) => m.clone(),
        Some(_) => return Err(invalid(reply_id, "`method` must be a string")),
        None if id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) => {
            return Ok(Message::Response)
        }
        None => return Err(invalid(reply_id, "no `method`")),
    };
    let params = match obj.get("params") {
        None => json!({}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err((
                reply_id,
                McpError::new(INVALID_PARAMS, format!("{method}: `params` must be an object")),
            ))
        }
    };
    Ok(match id {
        Some(id) => Message::Request { id, method, params },
        None => Message::Notification { method, params },
    })
}

pub enum Line {
    Complete,
    TooLong,
    Eof,
}

/// Reads one line into `buf` (without its newline), never buffering more
/// than `max` bytes: a longer line is read through to its newline and
/// dropped. A last line without a newline still counts.
pub fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<Line> {
    let mut too_long = false;
    loop {
        let (done, used) = {
            let avail = match r.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                if buf.is_empty() && !too_long {
                    return Ok(Line::Eof);
                }
                (true, 0)
            } else {
                let (piece, done, used) = match avail.iter().position(|b| *b == b'\n') {
                    Some(i) => (&avail[..i], true, i + 1),
                    None => (avail, false, avail.len()),
                };
                if !too_long && buf.len() + piece.len() <= max {
                    buf.extend_from_slice(piece);
                } else {
                    too_long = true;
                    buf.clear();
                }
                (done, used)
            }
        };
        r.consume(used);
        if done {
            return Ok(if too_long { Line::TooLong } else { Line::Complete });
        }
    }
}

/// Output captured in memory (tests, the doc example).
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.0)).into_owned()
    }

    /// Every line written so far, parsed.
    pub fn messages(&self) -> Vec<Value> {
        self.text()
            .lines()
            .filter_map(|l| serde_json::from_slice(l.as_bytes()).ok())
            .collect()
    }
}

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        lock(&self.0).extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `agentd mcp`'s body once argv is parsed: serve stdio until EOF, then
/// answer what was read (waiting up to `drain`).
pub fn run(addr: Address, drain: Duration) -> i32 {
    log::info!("mcp.start endpoint={addr} versions={}", PROTOCOL_VERSIONS.join(","));
    let bridge = Bridge::new(addr, Box::new(io::stdout()));
    bridge.serve(io::stdin().lock());
    log::info!("mcp.eof in_flight={}", lock(&bridge.state).calls.len());
    bridge.drain(drain);
    0
}

#[cfg(test)]
mod tests;
