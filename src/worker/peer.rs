//! The `peer` runner: the task is delegated to another A2A agent (another
//! agentd over a unix socket, or a guest's over vsock). The worker is that
//! agent's client and relays everything both ways:
//!
//! ```text
//!  our task                         the peer's task
//!  message ───────────────────────▶ SendStreamingMessage
//!  status / artifacts / reply ◀──── statusUpdate / artifactUpdate / message
//!  input-required: next message ──▶ SendStreamingMessage {taskId: peer's}
//!  cancel ────────────────────────▶ CancelTask (and we end when it is CANCELED)
//! ```
//! If the stream breaks before the peer's task ends, the worker resubscribes
//! once; if that fails too, the task FAILS saying so.

use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use serde_json::{json, Value};

use super::{ControlEvent, Done, Link};
use crate::client::{Client, ClientError};
use crate::control::{Cause, FromWorker, Outcome, Progress};
use crate::transport::Address;
use crate::wire::{Artifact, Message, TaskState};

/// What the stream thread hands the runner.
enum Peer {
    Event(Value),
    /// The stream is over: how it ended.
    End(Result<(), ClientError>),
}

pub fn run(
    addr: &Address,
    message: &Message,
    trace: Option<&crate::trace::TraceContext>,
    link: &Arc<Link>,
    events: &Receiver<ControlEvent>,
) -> Done {
    let fail = |text: String| Done {
        outcome: Outcome::Failed,
        cause: Cause::Failed,
        text: Some(text),
    };
    // One discovery: the binding check, and the extensions the peer
    // requires, which every later request then carries.
    let mut client = Client::new(addr.clone());
    // The trace goes on with the delegation (W3C Trace Context headers).
    if let Some(t) = trace {
        client.headers = t.pairs().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    }
    if let Err(e) = client.discover() {
        return fail(format!("the peer agent is unusable: {e}"));
    }
    let mut first = message.clone();
    first.task_id = None;
    first.context_id = None;
    let mut relay = Relay {
        link,
        peer_task: None,
        peer_context: None,
        last_state: None,
    };
    let (tx, rx) = crossbeam_channel::unbounded();
    open_stream(&client, "SendStreamingMessage", json!({ "message": first }), &tx);
    let mut resubscribed = false;
    let mut cancelled = false;
    loop {
        crossbeam_channel::select! {
            recv(rx) -> got => match got {
                Ok(Peer::Event(result)) => {
                    if let Some(done) = relay.on_event(&result) {
                        return done;
                    }
                }
                Ok(Peer::End(result)) => {
                    match relay.last_state {
                        Some(s) if s.is_terminal() => return relay.verdict(s),
                        Some(s) if s.is_interrupted() && !cancelled => continue, // wait for input
                        _ => {}
                    }
                    // The stream ended without the peer's task ending.
                    let why = match result {
                        Err(e) => e.to_string(),
                        Ok(()) => "the stream ended early".into(),
                    };
                    match (&relay.peer_task, resubscribed) {
                        (Some(id), false) => {
                            resubscribed = true;
                            log::warn!("worker.peer.resubscribe task={id} after: {why}");
                            open_stream(&client, "SubscribeToTask", json!({ "id": id }), &tx);
                        }
                        _ => return fail(format!("lost the peer agent at {addr}: {why}")),
                    }
                }
                Err(_) => return fail("the peer stream thread vanished".into()),
            },
            recv(events) -> ev => match ev {
                Ok(ControlEvent::Cancel) => {
                    cancelled = true;
                    let Some(id) = relay.peer_task.clone() else {
                        return Done { outcome: Outcome::Canceled, cause: Cause::Canceled, text: None };
                    };
                    match client.call("CancelTask", json!({ "id": id })) {
                        Ok(task) => {
                            relay.last_state = task["status"]["state"].as_str().and_then(TaskState::parse);
                            if relay.last_state.is_some_and(TaskState::is_terminal) {
                                return Done {
                                    outcome: Outcome::Canceled,
                                    cause: Cause::Canceled,
                                    text: Some(format!("canceled here and at the peer ({id})")),
                                };
                            }
                        }
                        Err(e) => log::warn!("worker.peer.cancel task={id} error={e}"),
                    }
                }
                Ok(ControlEvent::Input(mut m)) => {
                    let Some(id) = relay.peer_task.clone() else { continue };
                    m.task_id = Some(id);
                    m.context_id = relay.peer_context.clone();
                    relay.last_state = Some(TaskState::Working);
                    open_stream(&client, "SendStreamingMessage", json!({ "message": m }), &tx);
                }
                Err(_) => {}
            },
        }
    }
}

/// Reads one stream in its own thread, so cancels are heard meanwhile.
fn open_stream(client: &Client, method: &'static str, params: Value, tx: &Sender<Peer>) {
    let (client, tx) = (client.clone(), tx.clone());
    std::thread::spawn(move || {
        let result = client.stream(method, params, None, &mut |ev| tx.send(Peer::Event(ev.result)).is_ok());
        let _ = tx.send(Peer::End(result));
    });
}

/// Translates the peer's events into our control frames.
struct Relay<'a> {
    link: &'a Link,
    peer_task: Option<String>,
    peer_context: Option<String>,
    last_state: Option<TaskState>,
}

impl Relay<'_> {
    /// Relays one event; `Some` when our task is over.
    fn on_event(&mut self, r: &Value) -> Option<Done> {
        if let Some(t) = r.get("task") {
            self.peer_task = t["id"].as_str().map(String::from);
            self.peer_context = t["contextId"].as_str().map(String::from);
            self.last_state = t["status"]["state"].as_str().and_then(TaskState::parse);
            log::debug!("worker.peer.task id={:?}", self.peer_task);
            return None;
        }
        if let Some(m) = r.get("message") {
            if let Ok(message) = serde_json::from_value::<Message>(m.clone()) {
                if let Err(e) = self.link.send(&FromWorker::Reply {
                    message: Box::new(message),
                }) {
                    return Some(too_big(&e));
                }
                return Some(Done {
                    outcome: Outcome::Completed,
                    cause: Cause::Completed,
                    text: None,
                });
            }
        }
        if let Some(a) = r.get("artifactUpdate") {
            if let Ok(artifact) = serde_json::from_value::<Artifact>(a["artifact"].clone()) {
                let sent = self.link.send(&FromWorker::Artifact {
                    artifact: Box::new(artifact),
                    append: a["append"] == true,
                    last_chunk: a["lastChunk"] == true,
                });
                if let Err(e) = sent {
                    return Some(too_big(&e));
                }
            }
        }
        if let Some(s) = r.get("statusUpdate") {
            let state = s["status"]["state"].as_str().and_then(TaskState::parse)?;
            self.last_state = Some(state);
            let text = s["status"]["message"]
                .get("parts")
                .and_then(|p| serde_json::from_value::<Vec<crate::wire::Part>>(p.clone()).ok())
                .map(|parts| parts.iter().filter_map(|p| p.as_text()).collect::<Vec<_>>().join("\n"))
                .filter(|t| !t.is_empty());
            let progress = match state {
                TaskState::Working => Some(Progress::Working),
                TaskState::InputRequired => Some(Progress::InputRequired),
                TaskState::AuthRequired => Some(Progress::AuthRequired),
                _ => None,
            };
            match progress {
                Some(p) => {
                    if let Err(e) = self.link.send(&FromWorker::Status { state: p, text }) {
                        return Some(too_big(&e));
                    }
                }
                None if state.is_terminal() => {
                    let mut done = self.verdict(state);
                    done.text = text.or(done.text);
                    return Some(done);
                }
                None => {}
            }
        }
        None
    }

    fn verdict(&self, state: TaskState) -> Done {
        let (outcome, cause) = match state {
            TaskState::Completed => (Outcome::Completed, Cause::Completed),
            TaskState::Rejected => (Outcome::Rejected, Cause::Refused),
            TaskState::Canceled => (Outcome::Canceled, Cause::Canceled),
            _ => (Outcome::Failed, Cause::Failed),
        };
        Done {
            outcome,
            cause,
            text: None,
        }
    }
}

/// The peer's events may be bigger than ours (its limits are its own): one
/// that does not fit our control channel fails the task, naming the limit.
fn too_big(e: &crate::control::FrameError) -> Done {
    Done {
        outcome: Outcome::Failed,
        cause: Cause::Failed,
        text: Some(format!("the peer agent sent an event that does not fit: {e}")),
    }
}
