//! The tools' JSON Schemas: what `tools/list` says each tool takes and
//! returns. The SDKs validate `structuredContent` against the output
//! schemas, so [`super::tools`] must build exactly these shapes.

use serde_json::{json, Map, Value};

use super::tools::STATES;
use crate::limits::{MCP_HISTORY_DEFAULT, MCP_HISTORY_MAX};

// The schemas are JSON text read when `tools/list` is asked: a `json!`
// literal compiles to the code that builds its tree, several times the
// bytes of the text (this module was 15 KB of the static binary).

const TASK_ID: &str =
    r#"{"type": "string", "minLength": 1, "description": "The task's id (from subagent_spawn or subagent_list)."}"#;

const ANNOTATIONS: &str = r#"{
    "type": "object",
    "additionalProperties": {"type": "string"},
    "description": "agentd task annotations: labels (string values) kept on the task and usable as subagent_list filters."
}"#;

/// What spawn and send take besides their text.
const MESSAGE_PROPERTIES: &str = r#"{
    "data": {"type": "array", "items": {}, "description": "JSON values, each sent as a data part."},
    "files": {
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
    },
    "returnImmediately": {"type": "boolean", "default": false,
        "description": "Answer at once with the task as it is, instead of when its turn ends."}
}"#;

/// One task, as spawn, send, status and cancel return it; `state`'s enum
/// is filled from [`STATES`].
const OUTPUT_TASK: &str = r#"{
    "type": "object",
    "properties": {
        "taskId": {"type": "string"},
        "contextId": {"type": "string"},
        "state": {"type": "string",
                  "description": "The task's state; `message` when the agent answered with a message and no task."},
        "statusText": {"type": "string", "description": "The text of the task's status message (or of the direct reply)."},
        "artifacts": {"type": "array", "items": {
            "type": "object",
            "properties": {
                "artifactId": {"type": "string"},
                "name": {"type": "string"},
                "text": {"type": "string", "description": "The artifact's text parts, joined."},
                "parts": {"type": "array", "description": "The A2A parts as they are."}
            },
            "required": ["artifactId", "text", "parts"]
        }},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "cost": {"type": "object", "description": "What the task cost, once it ended having run (agentd.dev/cost; each measure names its source).",
            "properties": {
                "wallMs": {"type": "integer"},
                "cpu": {"type": "object", "properties": {
                    "userUsec": {"type": "integer"}, "systemUsec": {"type": "integer"}, "source": {"type": "string"}}},
                "memory": {"type": "object", "properties": {
                    "peakBytes": {"type": "integer"}, "source": {"type": "string"}}}
            }},
        "note": {"type": "string"},
        "task": {"type": "object", "description": "The A2A Task as the daemon returned it."},
        "message": {"type": "object", "description": "The agent's direct reply (A2A Message), when state is `message`."}
    },
    "required": ["state", "statusText", "artifacts"]
}"#;

const OUTPUT_LIST: &str = r#"{
    "type": "object",
    "properties": {
        "tasks": {"type": "array"},
        "totalSize": {"type": "integer"},
        "nextPageToken": {"type": "string", "description": "Pass as pageToken for the next page; absent on the last."}
    },
    "required": ["tasks", "totalSize"]
}"#;

const LIST_PROPERTIES: &str = r#"{
    "contextId": {"type": "string"},
    "state": {"type": "string"},
    "pageSize": {"type": "integer", "minimum": 1, "maximum": 100},
    "pageToken": {"type": "string"},
    "includeArtifacts": {"type": "boolean", "default": false}
}"#;

fn parse(text: &str) -> Value {
    serde_json::from_slice(text.as_bytes()).expect("the built-in schemas are JSON (mcp::tests)")
}

fn properties(text: &str) -> Map<String, Value> {
    match parse(text) {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn history_schema() -> Value {
    json!({"type": "integer", "minimum": 0, "maximum": MCP_HISTORY_MAX,
           "description": format!("Messages of history in `task` (default {MCP_HISTORY_DEFAULT}).")})
}

fn message_properties(text_key: &str, text_doc: &str) -> Map<String, Value> {
    let mut p = properties(MESSAGE_PROPERTIES);
    p.insert(text_key.into(), json!({"type": "string", "description": text_doc}));
    p.insert("annotations".into(), parse(ANNOTATIONS));
    p.insert("historyLength".into(), history_schema());
    p
}

/// The output schema of spawn, send, status and cancel: one task.
pub fn output_task() -> Value {
    let mut task = parse(OUTPUT_TASK);
    let states: Vec<&str> = STATES.iter().copied().chain(["message"]).collect();
    task["properties"]["state"]["enum"] = json!(states);
    task
}

fn output_list() -> Value {
    let mut item = output_task();
    item["properties"]["updated"] = json!({"type": "string", "description": "When the status last changed."});
    if let Some(p) = item["properties"].as_object_mut() {
        p.remove("task");
        p.remove("message");
        p.remove("note");
    }
    let mut list = parse(OUTPUT_LIST);
    list["properties"]["tasks"]["items"] = item;
    list
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
        p.insert("taskId".into(), parse(TASK_ID));
        p
    };
    let mut status = Map::new();
    status.insert("taskId".into(), parse(TASK_ID));
    status.insert("historyLength".into(), history_schema());
    let mut cancel = Map::new();
    cancel.insert("taskId".into(), parse(TASK_ID));
    let mut listing = properties(LIST_PROPERTIES);
    listing["state"]["enum"] = json!(STATES);
    listing.insert("annotations".into(), parse(ANNOTATIONS));

    let tools = [
        ("subagent_spawn", "Start a task", "Start a supervised agentd task from a text objective (plus optional data and file parts, a context id, annotations). Waits until the task's turn ends — completed, failed, canceled, rejected, or waiting for input — unless returnImmediately; progress arrives as notifications when the call carries a progressToken. Returns the task.", object(spawn, &["objective"])),
        ("subagent_send", "Continue a task", "Send a follow-up message to a task that waits for input (input-required); the same process receives it. Waits like subagent_spawn. Returns the task.", object(send, &["taskId", "text"])),
        ("subagent_status", "Show a task", "The task as it is now: state, status text, artifacts, the last messages of its history.", object(status, &["taskId"])),
        ("subagent_cancel", "Cancel a task", "Cancel a task through agentd's kill ladder (cancel, SIGTERM, SIGKILL of its whole process group); answers once the task is CANCELED and none of its processes is left, or with the task as it is if it had already finished.", object(cancel, &["taskId"])),
        ("subagent_list", "List tasks", "List the daemon's tasks, newest first, filtered by context, state or annotations, a page at a time.", object(listing, &[])),
    ];
    let structured = version != "2025-03-26";
    let tools: Vec<Value> = tools
        .into_iter()
        .map(|(name, title, description, input)| {
            let mut t = json!({"name": name, "description": description, "inputSchema": input});
            if structured {
                t["title"] = json!(title);
                t["outputSchema"] = if name == "subagent_list" {
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
