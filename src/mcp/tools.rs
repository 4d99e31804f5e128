//! The five tools, RFC 0020's `subagent.*` self-surface, each one or two
//! A2A calls on the daemon. They are listed as `subagent_spawn` …: MCP hosts
//! (Claude Desktop among them) check every tool name against
//! `^[a-zA-Z0-9_-]{1,64}$` and withhold a server's whole tool set over one
//! name that fails; `tools/call` still takes the dotted spelling.
//!
//! ```text
//!  subagent_spawn   SendStreamingMessage (progress as notifications/progress) → GetTask
//!                   or, with returnImmediately, SendMessage{returnImmediately}
//!  subagent_send    the same, with message.taskId: the next turn of a task waiting for input
//!  subagent_status  GetTask (history bounded)
//!  subagent_cancel  CancelTask: the kill ladder; answers once the task is CANCELED
//!  subagent_list    ListTasks with its filters and paging
//! ```
//!
//! A result is the task as `structuredContent` (the shapes `schemas.rs` declares)
//! and the same rendered as text. Whatever goes wrong past the arguments'
//! shape — the daemon unreachable, the task unknown, not cancelable, denied —
//! is a tool result with `isError: true` and a sentence saying what
//! happened, so the model can read it and try again.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{Bridge, Call, McpError};
use crate::client::ClientError;
use crate::cost::{self, COST_KEY};
use crate::ext::ANNOTATIONS;
use crate::limits::{MCP_HISTORY_DEFAULT, MCP_HISTORY_MAX};
use crate::rpc::INVALID_PARAMS;

pub(super) const STATES: [&str; 8] = [
    "submitted",
    "working",
    "input-required",
    "auth-required",
    "completed",
    "failed",
    "canceled",
    "rejected",
];

/// What a tool says when it fails: one sentence for the model.
struct Failed(String);

impl From<ClientError> for Failed {
    fn from(e: ClientError) -> Failed {
        Failed(daemon_error(&e))
    }
}

type Args = Map<String, Value>;

/// A daemon error as a sentence that says what to do.
pub(super) fn daemon_error(e: &ClientError) -> String {
    match e {
        ClientError::Connect { addr, source } => {
            format!("the agentd daemon at {addr} is unreachable ({source}); is `agentd serve` running there?")
        }
        ClientError::Rpc(err) => {
            let msg = err["message"].as_str().unwrap_or("(no message)");
            match err["code"].as_i64() {
                Some(-32001) => format!("task not found: {msg}"),
                Some(-32002) => format!("the task cannot be canceled: {msg}"),
                Some(-31401 | -31403) => format!("the daemon denied the request: {msg}"),
                Some(-32602) => format!("the daemon rejected the arguments: {msg}"),
                Some(code) => format!("the daemon answered error {code}: {msg}"),
                None => format!("the daemon answered an error: {msg}"),
            }
        }
        other => format!("the daemon could not be used: {other}"),
    }
}

/// `tools/call`. Only an unknown tool or a malformed request is a JSON-RPC
/// error; everything else is a tool result.
pub fn call(bridge: &Arc<Bridge>, call: &Call, params: &Value) -> Result<Value, McpError> {
    let name = params["name"]
        .as_str()
        .ok_or_else(|| McpError::new(INVALID_PARAMS, "tools/call: params.name must be a string"))?;
    let args = match params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a.clone(),
        Some(_) => {
            return Err(McpError::new(
                INVALID_PARAMS,
                "tools/call: params.arguments must be an object",
            ))
        }
    };
    let name = canonical(name).ok_or_else(|| McpError::new(INVALID_PARAMS, format!("Unknown tool: {name}")))?;
    let token = params["_meta"]["progressToken"].clone();
    let token = (token.is_string() || token.is_i64() || token.is_u64()).then_some(token);
    let outcome = match name {
        "subagent_spawn" => spawn(bridge, call, token, &args),
        "subagent_send" => send(bridge, call, token, &args),
        "subagent_status" => status(bridge, &args),
        "subagent_cancel" => cancel(bridge, &args),
        _ => list_tasks(bridge, &args),
    };
    log::info!(
        "mcp.tool name={name} ok={} task={}",
        outcome.is_ok(),
        outcome.as_ref().ok().and_then(|v| v["taskId"].as_str()).unwrap_or("-")
    );
    Ok(match outcome {
        Ok(structured) => {
            let text = if name == "subagent_list" {
                render_list(&structured)
            } else {
                render_task(&structured)
            };
            let mut r = json!({"content": [{"type": "text", "text": text}], "isError": false});
            if bridge.version() != "2025-03-26" {
                r["structuredContent"] = structured;
            }
            r
        }
        Err(Failed(text)) => error_result(text),
    })
}

/// A tool result that says the call failed, in one sentence.
pub(super) fn error_result(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// The tools, as `tools/list` names them (`^[a-zA-Z0-9_-]{1,64}$`).
pub(super) const TOOLS: [&str; 5] = [
    "subagent_spawn",
    "subagent_send",
    "subagent_status",
    "subagent_cancel",
    "subagent_list",
];

/// A tool's name as called: as listed, or in RFC 0020's dotted spelling.
fn canonical(name: &str) -> Option<&'static str> {
    let listed = match name.split_once('.') {
        Some(("subagent", verb)) => format!("subagent_{verb}"),
        _ => name.to_string(),
    };
    TOOLS.iter().copied().find(|t| *t == listed)
}

fn check_keys(args: &Args, tool: &str, allowed: &[&str]) -> Result<(), Failed> {
    match args.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(Failed(format!(
            "{tool}: unknown argument `{k}` (it takes: {})",
            allowed.join(", ")
        ))),
        None => Ok(()),
    }
}

fn string<'a>(args: &'a Args, key: &str, tool: &str) -> Result<Option<&'a str>, Failed> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s)),
        Some(_) => Err(Failed(format!("{tool}: `{key}` must be a non-empty string"))),
    }
}

fn required<'a>(args: &'a Args, key: &str, tool: &str) -> Result<&'a str, Failed> {
    string(args, key, tool)?.ok_or_else(|| Failed(format!("{tool}: `{key}` is required (a string)")))
}

fn flag(args: &Args, key: &str, tool: &str) -> Result<bool, Failed> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(Failed(format!("{tool}: `{key}` must be true or false"))),
    }
}

fn integer(args: &Args, key: &str, tool: &str, min: u64, max: u64) -> Result<Option<u64>, Failed> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(Failed(format!(
                "{tool}: `{key}` must be an integer from {min} to {max}"
            ))),
        },
    }
}

fn history(args: &Args, tool: &str) -> Result<u64, Failed> {
    Ok(integer(args, "historyLength", tool, 0, MCP_HISTORY_MAX)?.unwrap_or(MCP_HISTORY_DEFAULT))
}

fn annotations(args: &Args, tool: &str) -> Result<Option<Value>, Failed> {
    match args.get("annotations") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) if m.values().all(Value::is_string) => Ok(Some(Value::Object(m.clone()))),
        Some(_) => Err(Failed(format!(
            "{tool}: `annotations` must be an object of string values"
        ))),
    }
}

/// The A2A message a spawn or send carries.
fn build_message(args: &Args, tool: &str, text_key: &str) -> Result<Value, Failed> {
    let mut parts = vec![json!({ "text": required(args, text_key, tool)? })];
    match args.get("data") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => parts.extend(items.iter().map(|d| json!({ "data": d }))),
        Some(_) => return Err(Failed(format!("{tool}: `data` must be an array of JSON values"))),
    }
    match args.get("files") {
        None | Some(Value::Null) => {}
        Some(Value::Array(files)) => {
            for (i, f) in files.iter().enumerate() {
                parts.push(file_part(f).map_err(|why| Failed(format!("{tool}: files[{i}]: {why}")))?);
            }
        }
        Some(_) => return Err(Failed(format!("{tool}: `files` must be an array"))),
    }
    let mut m = json!({"messageId": crate::ids::new_id(), "role": "ROLE_USER", "parts": parts});
    if let Some(labels) = annotations(args, tool)? {
        m["metadata"] = json!({ ANNOTATIONS: labels });
    }
    Ok(m)
}

fn file_part(f: &Value) -> Result<Value, &'static str> {
    let text = |k: &str| f.get(k).and_then(Value::as_str);
    let mut part = match (text("uri"), text("bytes")) {
        (Some(u), None) => json!({ "url": u }),
        (None, Some(b)) => json!({ "raw": b }),
        _ => return Err("give exactly one of `uri` and `bytes` (strings)"),
    };
    if let Some(n) = text("name") {
        part["filename"] = json!(n);
    }
    if let Some(t) = text("mediaType") {
        part["mediaType"] = json!(t);
    }
    Ok(part)
}

fn spawn(bridge: &Arc<Bridge>, call: &Call, token: Option<Value>, args: &Args) -> Result<Value, Failed> {
    const TOOL: &str = "subagent_spawn";
    check_keys(
        args,
        TOOL,
        &[
            "objective",
            "data",
            "files",
            "contextId",
            "annotations",
            "returnImmediately",
            "historyLength",
        ],
    )?;
    let mut m = build_message(args, TOOL, "objective")?;
    if let Some(c) = string(args, "contextId", TOOL)? {
        m["contextId"] = json!(c);
    }
    converse(bridge, call, token, m, args, TOOL)
}

fn send(bridge: &Arc<Bridge>, call: &Call, token: Option<Value>, args: &Args) -> Result<Value, Failed> {
    const TOOL: &str = "subagent_send";
    check_keys(
        args,
        TOOL,
        &[
            "taskId",
            "text",
            "data",
            "files",
            "annotations",
            "returnImmediately",
            "historyLength",
        ],
    )?;
    let mut m = build_message(args, TOOL, "text")?;
    m["taskId"] = json!(required(args, "taskId", TOOL)?);
    converse(bridge, call, token, m, args, TOOL)
}

/// Sends `message` and waits for the task's turn to end (or not, with
/// returnImmediately). Waiting is a stream even without a progress token:
/// its first event names the task, which MCP cancellation needs.
fn converse(
    bridge: &Arc<Bridge>,
    call: &Call,
    token: Option<Value>,
    message: Value,
    args: &Args,
    tool: &str,
) -> Result<Value, Failed> {
    let history = history(args, tool)?;
    let client = bridge.client()?;
    if flag(args, "returnImmediately", tool)? {
        let config = json!({"returnImmediately": true, "historyLength": history});
        let r = client.call("SendMessage", json!({"message": message, "configuration": config}))?;
        return Ok(view_of_result(&r));
    }
    let mut task_id: Option<String> = None;
    let mut direct: Option<Value> = None;
    let mut progress = 0u64;
    let params = json!({"message": message, "configuration": {"historyLength": history}});
    client.stream("SendStreamingMessage", params, None, &mut |ev| {
        let r = &ev.result;
        if let Some(m) = r.get("message") {
            direct = Some(m.clone());
            return false;
        }
        if let (None, Some(id)) = (&task_id, event_task(r)) {
            task_id = Some(id.to_string());
            if call.bind_task(id) {
                // Cancelled before we knew the task: cancel it now.
                bridge.cancel_task_in_background(id.to_string());
            }
        }
        if let (Some(token), false) = (&token, call.is_cancelled()) {
            if let Some(text) = progress_text(r) {
                progress += 1;
                bridge.notify(
                    "notifications/progress",
                    json!({"progressToken": token, "progress": progress, "message": text}),
                );
            }
        }
        true
    })?;
    if let Some(m) = direct {
        return Ok(view_of_result(&json!({ "message": m })));
    }
    let id = task_id.ok_or_else(|| Failed("the daemon ended the stream before naming a task".into()))?;
    let task = client.call("GetTask", json!({"id": id, "historyLength": history}))?;
    Ok(task_view(&task))
}

fn status(bridge: &Bridge, args: &Args) -> Result<Value, Failed> {
    const TOOL: &str = "subagent_status";
    check_keys(args, TOOL, &["taskId", "historyLength"])?;
    let id = required(args, "taskId", TOOL)?;
    let history = history(args, TOOL)?;
    let task = bridge
        .client()?
        .call("GetTask", json!({"id": id, "historyLength": history}))?;
    Ok(task_view(&task))
}

fn cancel(bridge: &Bridge, args: &Args) -> Result<Value, Failed> {
    const TOOL: &str = "subagent_cancel";
    check_keys(args, TOOL, &["taskId"])?;
    let id = required(args, "taskId", TOOL)?;
    let client = bridge.client()?;
    match client.call("CancelTask", json!({ "id": id })) {
        Ok(task) => Ok(task_view(&task)),
        // Already finished: that is the answer, not a failure.
        Err(ClientError::Rpc(e)) if e["code"] == -32002 => {
            let task = client.call("GetTask", json!({"id": id, "historyLength": MCP_HISTORY_DEFAULT}))?;
            let mut v = task_view(&task);
            if STATES[4..].contains(&v["state"].as_str().unwrap_or("")) {
                v["note"] = json!(format!(
                    "the task had already ended ({}); nothing to cancel",
                    v["state"]
                ));
                Ok(v)
            } else {
                Err(Failed(daemon_error(&ClientError::Rpc(e))))
            }
        }
        Err(e) => Err(e.into()),
    }
}

fn list_tasks(bridge: &Bridge, args: &Args) -> Result<Value, Failed> {
    const TOOL: &str = "subagent_list";
    check_keys(
        args,
        TOOL,
        &[
            "contextId",
            "state",
            "annotations",
            "pageSize",
            "pageToken",
            "includeArtifacts",
        ],
    )?;
    let mut params = json!({"historyLength": 0});
    if let Some(c) = string(args, "contextId", TOOL)? {
        params["contextId"] = json!(c);
    }
    if let Some(s) = string(args, "state", TOOL)? {
        let short = s
            .strip_prefix("TASK_STATE_")
            .unwrap_or(s)
            .to_ascii_lowercase()
            .replace('_', "-");
        if !STATES.contains(&short.as_str()) {
            return Err(Failed(format!("{TOOL}: `state` is one of {}", STATES.join(", "))));
        }
        params["status"] = json!(format!("TASK_STATE_{}", short.to_ascii_uppercase().replace('-', "_")));
    }
    if let Some(labels) = annotations(args, TOOL)? {
        params["metadata"] = json!({ ANNOTATIONS: labels });
    }
    if let Some(n) = integer(args, "pageSize", TOOL, 1, 100)? {
        params["pageSize"] = json!(n);
    }
    if let Some(t) = string(args, "pageToken", TOOL)? {
        params["pageToken"] = json!(t);
    }
    if flag(args, "includeArtifacts", TOOL)? {
        params["includeArtifacts"] = json!(true);
    }
    let page = bridge.client()?.call("ListTasks", params)?;
    let tasks: Vec<Value> = page["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let mut v = task_view(t);
            if let Some(o) = v.as_object_mut() {
                o.remove("task");
                if let Some(ts) = t["status"]["timestamp"].as_str() {
                    o.insert("updated".into(), json!(ts));
                }
            }
            v
        })
        .collect();
    let mut out = json!({"tasks": tasks, "totalSize": page["totalSize"].as_u64().unwrap_or(0)});
    if let Some(next) = page["nextPageToken"].as_str().filter(|t| !t.is_empty()) {
        out["nextPageToken"] = json!(next);
    }
    Ok(out)
}

/// The task id an A2A stream event is about.
fn event_task(r: &Value) -> Option<&str> {
    r["task"]["id"]
        .as_str()
        .or_else(|| r["statusUpdate"]["taskId"].as_str())
        .or_else(|| r["artifactUpdate"]["taskId"].as_str())
}

/// One stream event as a progress `message`.
pub(super) fn progress_text(r: &Value) -> Option<String> {
    if let Some(t) = r.get("task") {
        return Some(format!(
            "task {} {}",
            text(&t["id"]),
            short_state(&t["status"]["state"])
        ));
    }
    if let Some(s) = r.get("statusUpdate") {
        let note = parts_text(&s["status"]["message"]["parts"]);
        let state = short_state(&s["status"]["state"]);
        return Some(if note.is_empty() {
            state
        } else {
            format!("{state}: {note}")
        });
    }
    let update = r.get("artifactUpdate")?;
    let a = &update["artifact"];
    let name = a["name"].as_str().or(a["artifactId"].as_str()).unwrap_or("?");
    match parts_text(&a["parts"]) {
        // An empty chunk only closes the artifact: say that, or nothing.
        t if t.is_empty() => (update["lastChunk"] == true).then(|| format!("artifact {name} complete")),
        t => Some(format!("artifact {name}: {t}")),
    }
}

/// A SendMessage result (`{task}` or `{message}`) as a tool result.
fn view_of_result(r: &Value) -> Value {
    match r.get("message") {
        Some(m) => json!({
            "state": "message",
            "statusText": parts_text(&m["parts"]),
            "artifacts": [],
            "message": m,
        }),
        None => task_view(&r["task"]),
    }
}

/// The compact view of an A2A task every task tool returns.
pub(super) fn task_view(task: &Value) -> Value {
    let artifacts: Vec<Value> = task["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let mut v = json!({
                "artifactId": text(&a["artifactId"]),
                "text": parts_text(&a["parts"]),
                "parts": a["parts"].as_array().cloned().unwrap_or_default(),
            });
            if let Some(n) = a["name"].as_str() {
                v["name"] = json!(n);
            }
            v
        })
        .collect();
    let mut v = json!({
        "taskId": text(&task["id"]),
        "contextId": text(&task["contextId"]),
        "state": short_state(&task["status"]["state"]),
        "statusText": parts_text(&task["status"]["message"]["parts"]),
        "artifacts": artifacts,
        "task": task,
    });
    if let Some(labels) = task["metadata"][ANNOTATIONS].as_object() {
        v["annotations"] = Value::Object(labels.clone());
    }
    // What the task cost, once it ended (agentd's own metadata key).
    if let Some(c) = task["metadata"].get(COST_KEY).filter(|c| c.is_object()) {
        v["cost"] = c.clone();
    }
    v
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `TASK_STATE_INPUT_REQUIRED` → `input-required`.
pub(super) fn short_state(v: &Value) -> String {
    let s = v.as_str().unwrap_or("unknown");
    s.strip_prefix("TASK_STATE_")
        .unwrap_or(s)
        .to_ascii_lowercase()
        .replace('_', "-")
}

/// The text parts of a part list, joined; other parts are named briefly.
pub(super) fn parts_text(parts: &Value) -> String {
    crate::client::parts_text(parts, "")
}

fn render_task(v: &Value) -> String {
    let mut s = match v["taskId"].as_str() {
        Some(id) => format!("task {id} {} (context {})\n", text(&v["state"]), text(&v["contextId"])),
        None => "the agent replied with a message (no task)\n".to_string(),
    };
    let status = text(&v["statusText"]);
    if !status.is_empty() {
        s.push_str(&format!("status: {}\n", status.trim_end()));
    }
    if let Some(note) = v["note"].as_str() {
        s.push_str(&format!("note: {note}\n"));
    }
    if let Some(labels) = v["annotations"].as_object() {
        let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={}", text(v))).collect();
        s.push_str(&format!("annotations: {}\n", l.join(" ")));
    }
    if let Some(c) = cost::describe(&v["cost"]) {
        s.push_str(&format!("cost: {c}\n"));
    }
    for a in v["artifacts"].as_array().into_iter().flatten() {
        let name = a["name"].as_str().or(a["artifactId"].as_str()).unwrap_or("?");
        s.push_str(&format!("artifact {name}:\n{}", text(&a["text"])));
        if !s.ends_with('\n') {
            s.push('\n');
        }
    }
    s
}

fn render_list(v: &Value) -> String {
    let tasks = v["tasks"].as_array().cloned().unwrap_or_default();
    let mut s = String::new();
    for t in &tasks {
        s.push_str(&format!(
            "{} {} {}\n",
            text(&t["taskId"]),
            text(&t["state"]),
            text(&t["statusText"]).lines().next().unwrap_or("")
        ));
    }
    s.push_str(&format!("{} of {} task(s)\n", tasks.len(), v["totalSize"]));
    if let Some(next) = v["nextPageToken"].as_str() {
        s.push_str(&format!("more: pageToken {next}\n"));
    }
    s
}
