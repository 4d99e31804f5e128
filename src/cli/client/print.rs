//! How the client shows tasks and stream events to a person, and what it
//! tells them to do next.

use std::collections::HashMap;
use std::io::Write;

use serde_json::Value;

use super::EXIT_OK;
use super::EXIT_TASK_FAILED;
use crate::client::StreamEvent;
use crate::cost::{self, COST_KEY};

pub fn print_json(v: &Value) {
    println!("{v}");
}

pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// `TASK_STATE_INPUT_REQUIRED` → `input-required`.
pub fn short_state(v: &Value) -> String {
    let s = v.as_str().unwrap_or("?");
    s.strip_prefix("TASK_STATE_")
        .unwrap_or(s)
        .to_ascii_lowercase()
        .replace('_', "-")
}

pub fn task_exit(state: Option<&Value>) -> i32 {
    match state.and_then(Value::as_str) {
        Some("TASK_STATE_FAILED" | "TASK_STATE_REJECTED" | "TASK_STATE_CANCELED") => EXIT_TASK_FAILED,
        _ => EXIT_OK,
    }
}

pub fn is_final(state: &Value) -> bool {
    matches!(
        state.as_str(),
        Some("TASK_STATE_COMPLETED" | "TASK_STATE_FAILED" | "TASK_STATE_REJECTED" | "TASK_STATE_CANCELED")
    )
}

pub fn message_text(m: &Value) -> String {
    crate::client::parts_text(&m["parts"], "\n")
}

/// A status text worth a line: not empty, and not just the state's name
/// again (`task … completed` needs no `status: completed`).
fn status_note(status: &Value) -> Option<String> {
    let note = status.get("message").map(message_text)?;
    let state = short_state(&status["state"]);
    let trimmed = note.trim();
    (!trimmed.is_empty() && !trimmed.eq_ignore_ascii_case(&state)).then_some(note)
}

pub fn print_task(task: &Value, with_artifacts: bool, endpoint: &str) {
    println!("task {} {}", text(&task["id"]), short_state(&task["status"]["state"]));
    println!("  context {}", text(&task["contextId"]));
    if let Some(note) = status_note(&task["status"]) {
        println!("  status: {note}");
    }
    if let Some(c) = cost::describe(&task["metadata"][COST_KEY]) {
        println!("  cost: {c}");
    }
    if task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED" {
        println!("  {}", input_hint(endpoint, &text(&task["id"])));
    }
    if with_artifacts {
        for a in task["artifacts"].as_array().into_iter().flatten() {
            let body = message_text(a);
            // An artifact with nothing in it (a program that wrote no
            // stdout) is no block: a heading over nothing reads as lost output.
            if body.is_empty() {
                continue;
            }
            println!(
                "artifact {}:",
                a["name"].as_str().unwrap_or(a["artifactId"].as_str().unwrap_or("?"))
            );
            print!("{body}");
            if !body.ends_with('\n') {
                println!();
            }
        }
    }
}

/// How to answer a task waiting for input.
pub fn input_hint(endpoint: &str, task_id: &str) -> String {
    format!("the agent asks for input: answer with `agentd send {endpoint} --task {task_id} TEXT`")
}

/// What to do with a task left running: follow it, see it, cancel it.
pub fn follow_hint(endpoint: &str, id: &str) -> String {
    format!(
        "  follow it: agentd subscribe {endpoint} {id}\n  \
         see it:    agentd get {endpoint} {id}\n  \
         cancel it: agentd cancel {endpoint} {id}"
    )
}

/// Prints stream events as they come, one clean line per event, and
/// remembers the last state.
pub struct Printer {
    json: bool,
    endpoint: String,
    last_state: Option<String>,
    /// Artifact text that did not end with a newline is on the screen: the
    /// next line starts on a new one.
    mid_line: bool,
    /// How many bytes of each artifact's text are on the screen, by id. A
    /// task snapshot (the first event of `subscribe`, or a fresh one after
    /// the stream fell behind) holds everything the task produced so far,
    /// of which only the part not yet shown is printed.
    shown: HashMap<String, usize>,
}

impl Printer {
    pub fn new(json: bool, endpoint: &str) -> Printer {
        Printer {
            json,
            endpoint: endpoint.to_string(),
            last_state: None,
            mid_line: false,
            shown: HashMap::new(),
        }
    }

    /// Prints artifact text as it is, remembering whether a line is open.
    fn artifact_text(&mut self, body: &str) {
        if !body.is_empty() {
            print!("{body}");
            self.mid_line = !body.ends_with('\n');
        }
    }

    fn line(&mut self, text: &str) {
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
        println!("{text}");
    }

    /// Shows one event.
    pub fn event(&mut self, ev: &StreamEvent) {
        let r = &ev.result;
        if let Some(t) = r.get("task") {
            self.last_state = t["status"]["state"].as_str().map(String::from);
        }
        if let Some(s) = r.get("statusUpdate") {
            self.last_state = s["status"]["state"].as_str().map(String::from);
        }
        let task_id = event_task(r).map(String::from);
        if self.json {
            print_json(r);
        } else if let Some(t) = r.get("task") {
            self.line(&format!(
                "task {} {}",
                text(&t["id"]),
                short_state(&t["status"]["state"])
            ));
            for a in t["artifacts"].as_array().into_iter().flatten() {
                let body = message_text(a);
                let id = text(&a["artifactId"]);
                let from = self.shown.get(&id).copied().unwrap_or(0);
                // Text replaced by a shorter one, or cut mid-character, is
                // not printed again.
                if let Some(rest) = body.get(from..) {
                    self.artifact_text(rest);
                }
                self.shown.insert(id, body.len());
            }
        } else if let Some(m) = r.get("message") {
            self.line(&message_text(m));
        } else if let Some(s) = r.get("statusUpdate") {
            let state = short_state(&s["status"]["state"]);
            // A bare "working" says nothing the task line did not.
            match status_note(&s["status"]) {
                Some(note) => self.line(&format!("[{state}] {}", note.trim())),
                None if state == "working" => {}
                None => self.line(&format!("[{state}]")),
            }
            if state == "input-required" {
                let hint = input_hint(&self.endpoint, task_id.as_deref().unwrap_or("TASK_ID"));
                self.line(&hint);
            }
            // The final status says what the task cost.
            if let Some(c) = cost::describe(&s["metadata"][COST_KEY]) {
                self.line(&format!("  cost: {c}"));
            }
        } else if let Some(a) = r.get("artifactUpdate") {
            let body = message_text(&a["artifact"]);
            let shown = self.shown.entry(text(&a["artifact"]["artifactId"])).or_insert(0);
            *shown = if a["append"] == true {
                *shown + body.len()
            } else {
                body.len()
            };
            self.artifact_text(&body);
        }
        let _ = std::io::stdout().flush();
    }

    /// The stream is over: end a dangling line.
    pub fn finish(&mut self) {
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
    }

    pub fn exit_code(&self) -> i32 {
        task_exit(self.last_state.as_ref().map(|s| Value::String(s.clone())).as_ref())
    }
}

/// The task a stream event is about.
pub fn event_task(r: &Value) -> Option<&str> {
    r["task"]["id"]
        .as_str()
        .or_else(|| r["statusUpdate"]["taskId"].as_str())
        .or_else(|| r["artifactUpdate"]["taskId"].as_str())
}
