//! Tasks as MCP resources: `agentd://task/{id}`, the task as JSON.
//!
//! ```text
//!  resources/list            ListTasks (cursor = pageToken)
//!  resources/templates/list  agentd://task/{id}
//!  resources/read            GetTask            → contents[0].text = the task's JSON
//!  resources/subscribe       a thread on SubscribeToTask: every event of the task
//!                            → notifications/resources/updated {uri}, until it ends
//!  resources/unsubscribe     stops the notifications at once; the thread ends with
//!                            its stream (the task's next event or its end)
//! ```
//! Errors are JSON-RPC errors here (resources have no `isError`): an unknown
//! task is -32002 (resource not found, as the 2025 revisions number it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::tools::{daemon_error, parts_text, short_state};
use super::{lock, Bridge, McpError};
use crate::client::ClientError;
use crate::limits::{MCP_HISTORY_MAX, MCP_SUBSCRIPTIONS_MAX};
use crate::rpc::{INTERNAL_ERROR, INVALID_PARAMS};

const PREFIX: &str = "agentd://task/";
/// MCP's "resource not found" in the 2025 revisions.
pub const RESOURCE_NOT_FOUND: i32 = -32002;

/// Live subscriptions by URI; the flag stops one.
#[derive(Default)]
pub struct Subscriptions(Mutex<HashMap<String, Arc<AtomicBool>>>);

pub fn uri_of(id: &str) -> String {
    format!("{PREFIX}{id}")
}

/// The task id in `agentd://task/{id}`.
pub fn task_of(uri: &str) -> Option<&str> {
    uri.strip_prefix(PREFIX)
        .filter(|id| !id.is_empty() && !id.contains(['/', '?', '#']))
}

fn uri_param(params: &Value, method: &str) -> Result<(String, String), McpError> {
    let uri = params["uri"]
        .as_str()
        .ok_or_else(|| McpError::new(INVALID_PARAMS, format!("{method}: params.uri must be a string")))?;
    let id = task_of(uri).ok_or_else(|| {
        McpError::new(
            INVALID_PARAMS,
            format!("{method}: `{uri}` is not a resource of this server (they are {PREFIX}{{id}})"),
        )
    })?;
    Ok((uri.to_string(), id.to_string()))
}

/// A daemon error as a JSON-RPC error: not found keeps its meaning.
fn rpc_error(e: &ClientError, uri: &str) -> McpError {
    match e {
        ClientError::Rpc(err) if err["code"] == -32001 => McpError {
            code: RESOURCE_NOT_FOUND,
            message: format!("Resource not found: {uri}"),
            data: Some(json!({ "uri": uri })),
        },
        other => McpError::new(INTERNAL_ERROR, daemon_error(other)),
    }
}

pub fn templates() -> Value {
    json!({"resourceTemplates": [{
        "uriTemplate": "agentd://task/{id}",
        "name": "task",
        "title": "agentd task",
        "description": "An agentd task as JSON (the A2A Task: status, artifacts, recent history).",
        "mimeType": "application/json",
    }]})
}

pub fn list(bridge: &Bridge, params: &Value) -> Result<Value, McpError> {
    let mut q = json!({"pageSize": crate::limits::LIST_PAGE_MAX, "historyLength": 0});
    if let Some(c) = params["cursor"].as_str() {
        q["pageToken"] = json!(c);
    }
    let page = bridge
        .client()
        .and_then(|c| c.call("ListTasks", q))
        .map_err(|e| McpError::new(INTERNAL_ERROR, daemon_error(&e)))?;
    let resources: Vec<Value> = page["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let id = t["id"].as_str()?;
            let state = short_state(&t["status"]["state"]);
            let note = parts_text(&t["status"]["message"]["parts"]);
            Some(json!({
                "uri": uri_of(id),
                "name": format!("task {id}"),
                "description": if note.is_empty() { state } else { format!("{state}: {note}") },
                "mimeType": "application/json",
            }))
        })
        .collect();
    let mut out = json!({ "resources": resources });
    if let Some(next) = page["nextPageToken"].as_str().filter(|t| !t.is_empty()) {
        out["nextCursor"] = json!(next);
    }
    Ok(out)
}

pub fn read(bridge: &Bridge, params: &Value) -> Result<Value, McpError> {
    let (uri, id) = uri_param(params, "resources/read")?;
    let task = bridge
        .client()
        .and_then(|c| c.call("GetTask", json!({"id": id, "historyLength": MCP_HISTORY_MAX})))
        .map_err(|e| rpc_error(&e, &uri))?;
    let text = serde_json::to_string_pretty(&task).unwrap_or_else(|_| task.to_string());
    Ok(json!({"contents": [{"uri": uri, "mimeType": "application/json", "text": text}]}))
}

pub fn subscribe(bridge: &Arc<Bridge>, params: &Value) -> Result<Value, McpError> {
    let (uri, id) = uri_param(params, "resources/subscribe")?;
    let client = bridge.client().map_err(|e| rpc_error(&e, &uri))?;
    // The task must exist; a finished one will not change, so there is
    // nothing to follow (but subscribing is still fine).
    let task = client
        .call("GetTask", json!({"id": id, "historyLength": 0}))
        .map_err(|e| rpc_error(&e, &uri))?;
    if is_terminal(&task) {
        return Ok(json!({}));
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let mut subs = lock(&bridge.subscriptions.0);
        if subs.contains_key(&uri) {
            return Ok(json!({}));
        }
        if subs.len() >= MCP_SUBSCRIPTIONS_MAX {
            return Err(McpError::new(
                INTERNAL_ERROR,
                format!("{MCP_SUBSCRIPTIONS_MAX} subscriptions are open already; unsubscribe from one first"),
            ));
        }
        subs.insert(uri.clone(), Arc::clone(&stop));
    }
    let b = Arc::clone(bridge);
    let (u, flag) = (uri.clone(), Arc::clone(&stop));
    let id_again = id.clone();
    let spawned = std::thread::Builder::new()
        .name("mcp-subscription".into())
        .spawn(move || {
            let r = client.stream("SubscribeToTask", json!({ "id": id }), None, &mut |_ev| {
                if flag.load(Ordering::SeqCst) {
                    return false;
                }
                b.notify("notifications/resources/updated", json!({ "uri": u }));
                true
            });
            if let Err(e) = r {
                log::debug!("mcp.subscription_ended uri={u} error={e}");
                // The task may have ended between the GetTask above and this
                // stream (which a finished task refuses): it did change, and
                // the subscriber is told so once.
                let ended = client
                    .call("GetTask", json!({"id": id_again, "historyLength": 0}))
                    .is_ok_and(|t| is_terminal(&t));
                if ended && !flag.load(Ordering::SeqCst) {
                    b.notify("notifications/resources/updated", json!({ "uri": u }));
                }
            }
            let mut subs = lock(&b.subscriptions.0);
            if subs.get(&u).is_some_and(|s| Arc::ptr_eq(s, &flag)) {
                subs.remove(&u);
            }
        });
    if let Err(e) = spawned {
        lock(&bridge.subscriptions.0).remove(&uri);
        return Err(McpError::new(INTERNAL_ERROR, format!("cannot start a thread: {e}")));
    }
    Ok(json!({}))
}

fn is_terminal(task: &Value) -> bool {
    matches!(
        task["status"]["state"].as_str(),
        Some("TASK_STATE_COMPLETED" | "TASK_STATE_FAILED" | "TASK_STATE_CANCELED" | "TASK_STATE_REJECTED")
    )
}

pub fn unsubscribe(bridge: &Bridge, params: &Value) -> Result<Value, McpError> {
    let (uri, _) = uri_param(params, "resources/unsubscribe")?;
    if let Some(stop) = lock(&bridge.subscriptions.0).remove(&uri) {
        stop.store(true, Ordering::SeqCst);
    }
    Ok(json!({}))
}
