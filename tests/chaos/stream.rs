//! Reading a task's event stream as the soak's clients do: a view of the
//! task assembled from its events, checked as they come (ids rise, nothing
//! follows the end).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use crate::env::{Env, CALL_TIMEOUT};
use crate::http::{CallError, Event, Opened, Sse};
use crate::ledger::{is_terminal, parts_text, short_state, Ledger, View};

/// A task's view built from its events, checked as they come: ids rise,
/// nothing follows a terminal status.
pub struct Assembly {
    ctx: String,
    view: Option<View>,
    /// artifactId → text so far.
    artifacts: BTreeMap<String, String>,
    pub last_id: Option<u64>,
    terminal: bool,
    problems: Vec<String>,
}

impl Assembly {
    pub fn new(ctx: &str) -> Assembly {
        Assembly {
            ctx: ctx.to_string(),
            view: None,
            artifacts: BTreeMap::new(),
            last_id: None,
            terminal: false,
            problems: Vec::new(),
        }
    }

    pub fn feed(&mut self, ev: &Event) {
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
    pub fn result(&self) -> Option<View> {
        let mut v = self.view.clone()?;
        v.artifacts = self.artifacts.iter().map(|(k, t)| (k.clone(), t.clone())).collect();
        v.terminal().then_some(v)
    }

    /// Reads events until the stream ends (or `stop_after` events).
    pub fn read(&mut self, s: &mut Sse, stop_after: Option<usize>, pause: Duration) -> Result<bool, CallError> {
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

    pub fn report(&self, env: &Env) {
        self.report_to(&env.ledger);
    }

    /// Each problem seen is a violation.
    pub fn report_to(&self, ledger: &Ledger) {
        ledger.judged("violation.stream_protocol", 1);
        for p in &self.problems {
            ledger.violation("violation.stream_protocol", format!("ctx={}: {p}", self.ctx));
        }
    }
}

/// Subscribes to a task's stream on whichever daemon serves now; a plain
/// JSON-RPC error is an error here.
pub fn subscribe(env: &Env, id: &str, extra: &[(&str, &str)]) -> Result<Sse, CallError> {
    match Sse::open(
        &env.daemon.socket,
        "SubscribeToTask",
        json!({"id": id}),
        extra,
        CALL_TIMEOUT,
    )? {
        Opened::Stream(s) => Ok(s),
        Opened::Json(e) => Err(CallError::Rpc(e)),
    }
}

/// Reads a whole stream into `a`; learns the task id from its first event.
pub fn drain_stream(env: &Env, ctx: &str, a: &mut Assembly, s: &mut Sse, pause: Duration) -> Result<(), CallError> {
    let mut twice = env.breaks.take("stream_protocol");
    while let Some(ev) = s.next()? {
        if ev.kind() == "task" {
            if let Some(id) = ev.body()["id"].as_str() {
                env.ledger.set_task(ctx, id);
            }
        }
        if twice && ev.id.is_some() {
            // The same event read twice: its id does not rise.
            a.feed(&ev);
            twice = false;
        }
        a.feed(&ev);
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
    Ok(())
}
