//! The tools' JSON Schemas: what `tools/list` says each tool takes and
//! returns. The SDKs validate `structuredContent` against the output
//! schemas, so [`super::tools`] must build exactly these shapes.

use serde_json::{json, Map, Value};

use super::tools::STATES;
use crate::limits::{MCP_HISTORY_DEFAULT, MCP_HISTORY_MAX};

fn task_id_schema() -> Value {
    json!({"type": "string", "minLength": 1, "description": "The task's id (from subagent.spawn or subagent.list)."})
}

fn annotations_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": {"type": "string"},
        "description": "agentd task annotations: labels (string values) kept on the task and usable as subagent.list filters."
    })
}

fn history_schema() -> Value {
    json!({"type": "integer", "minimum": 0, "maximum": MCP_HISTORY_MAX,
           "description": format!("Messages of history in `task` (default {MCP_HISTORY_DEFAULT}).")})
}

fn message_properties(text_key: &str, text_doc: &str) -> Map<String, Value> {
    let mut p = Map::new();
    p.insert(text_key.into(), json!({"type": "string", "description": text_doc}));
    p.insert(
        "data".into(),
        json!({"type": "array", "items": {}, "description": "JSON values, each sent as a data part."}),
    );
    p.insert(
        "files".into(),
        json!({
            "type": "array",
            "description": "Files, each sent as a file part: by `uri`, or inline as base64 `bytes`.",
            "items": {
                "type": "object",
                "properties": {
                    "uri": {"type": "string"},
                    "bytes": {"type": "string", "description": "base64"},
                    "name": {"type": "string"},
                    "mediaType": {"type": "string"}
                },
                "additionalProperties": false
            }
        }),
    );
    p.insert("annotations".into(), annotations_schema());
    p.insert(
        "returnImmediately".into(),
        json!({"type": "boolean", "default": false,
               "description": "Answer at once with the task as it is, instead of when its turn ends."}),
    );
    p.insert("historyLength".into(), history_schema());
    p
}

fn artifact_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "artifactId": {"type": "string"},
            "name": {"type": "string"},
            "text": {"type": "string", "description": "The artifact's text parts, joined."},
            "parts": {"type": "array", "description": "The A2A parts as they are."}
        },
        "required": ["artifactId", "text", "parts"]
    })
}

/// The output schema of spawn, send, status and cancel: one task.
pub fn output_task() -> Value {
    json!({
        "type": "object",
        "properties": {
            "taskId": {"type": "string"},
            "contextId": {"type": "string"},
            "state": {"type": "string", "enum": STATES.iter().chain(["message"].iter()).collect::<Vec<_>>(),
                      "description": "The task's state; `message` when the agent answered with a message and no task."},
            "statusText": {"type": "string", "description": "The text of the task's status message (or of the direct reply)."},
            "artifacts": {"type": "array", "items": artifact_schema()},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            "note": {"type": "string"},
            "task": {"type": "object", "description": "The A2A Task as the daemon returned it."},
            "message": {"type": "object", "description": "The agent's direct reply (A2A Message), when state is `message`."}
        },
        "required": ["state", "statusText", "artifacts"]
    })
}

fn output_list() -> Value {
    let mut item = output_task();
    item["properties"]["updated"] = json!({"type": "string", "description": "When the status last changed."});
    if let Some(p) = item["properties"].as_object_mut() {
        p.remove("task");
        p.remove("message");
        p.remove("note");
    }
    json!({
        "type": "object",
        "properties": {
            "tasks": {"type": "array", "items": item},
            "totalSize": {"type": "integer"},
            "nextPageToken": {"type": "string", "description": "Pass as pageToken for the next page; absent on the last."}
        },
        "required": ["tasks", "totalSize"]
    })
}

fn object(properties: Map<String, Value>, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

/// `tools/list`: the five tools (output schemas from 2025-06-18 on).
pub fn list(version: &str) -> Value {
    let mut spawn = message_properties("objective", "What the task is to do: sent as the message's text part.");
    spawn.insert(
        "contextId".into(),
        json!({"type": "string", "description": "Start the task within this conversation."}),
    );
    let send = {
        let mut p = message_properties("text", "The follow-up: sent as the message's text part.");
        p.insert("taskId".into(), task_id_schema());
        p
    };
    let mut status = Map::new();
    status.insert("taskId".into(), task_id_schema());
    status.insert("historyLength".into(), history_schema());
    let mut cancel = Map::new();
    cancel.insert("taskId".into(), task_id_schema());
    let mut listing = Map::new();
    listing.insert("contextId".into(), json!({"type": "string"}));
    listing.insert("state".into(), json!({"type": "string", "enum": STATES}));
    listing.insert("annotations".into(), annotations_schema());
    listing.insert(
        "pageSize".into(),
        json!({"type": "integer", "minimum": 1, "maximum": 100}),
    );
    listing.insert("pageToken".into(), json!({"type": "string"}));
    listing.insert("includeArtifacts".into(), json!({"type": "boolean", "default": false}));

    let tools = [
        ("subagent.spawn", "Start a task", "Start a supervised agentd task from a text objective (plus optional data and file parts, a context id, annotations). Waits until the task's turn ends — completed, failed, canceled, rejected, or waiting for input — unless returnImmediately; progress arrives as notifications when the call carries a progressToken. Returns the task.", object(spawn, &["objective"])),
        ("subagent.send", "Continue a task", "Send a follow-up message to a task that waits for input (input-required); the same process receives it. Waits like subagent.spawn. Returns the task.", object(send, &["taskId", "text"])),
        ("subagent.status", "Show a task", "The task as it is now: state, status text, artifacts, the last messages of its history.", object(status, &["taskId"])),
        ("subagent.cancel", "Cancel a task", "Cancel a task through agentd's kill ladder (cancel, SIGTERM, SIGKILL of its whole process group); answers once the task is CANCELED and none of its processes is left, or with the task as it is if it had already finished.", object(cancel, &["taskId"])),
        ("subagent.list", "List tasks", "List the daemon's tasks, newest first, filtered by context, state or annotations, a page at a time.", object(listing, &[])),
    ];
    let structured = version != "2025-03-26";
    let tools: Vec<Value> = tools
        .into_iter()
        .map(|(name, title, description, input)| {
            let mut t = json!({"name": name, "description": description, "inputSchema": input});
            if structured {
                t["title"] = json!(title);
                t["outputSchema"] = if name == "subagent.list" {
                    output_list()
                } else {
                    output_task()
                };
            }
            t
        })
        .collect();
    json!({ "tools": tools })
}
