//! A2A 1.0's method handlers, the card (`card`), the streaming methods
//! (`stream`) and the command extension's operations (`operator`). A
//! handler turns a decoded JSON-RPC call into a result or an `RpcError`; it
//! talks to the task table and to procman, never to sockets or processes
//! directly. The wire types it speaks are `crate::wire`'s, shared with the
//! rooms below.

pub mod card;
mod operator;
pub mod stream;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::config::Config;
use crate::ext;
use crate::principal::Principal;
use crate::procman::Procman;
use crate::rpc::{self, RpcError};
use crate::tasks::{ContinueError, CreateError, ListQuery, Snapshot, TaskTable, Watch};
use crate::wire::{
    CancelTaskRequest, GetTaskRequest, ListTasksRequest, Role, SendMessageRequest, StreamResponse,
    SubscribeToTaskRequest, Task, TaskState,
};

/// Every method of the A2A 1.0 JSON-RPC binding.
pub const METHODS: [&str; 11] = [
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
];

/// What a method call produced: a JSON-RPC result, or a stream to open.
pub enum Answer {
    Value(Value),
    /// A task (GetTask, CancelTask): written straight from the typed value,
    /// no JSON tree in between.
    Task(Box<Task>),
    /// SendMessage's result (a task or a message), likewise.
    Response(Box<StreamResponse>),
    /// A task as the table holds it, written without a copy: SendMessage's
    /// result (`{"task": …}`, `in_result`) or GetTask's and CancelTask's.
    Snapshot {
        task: Box<Snapshot>,
        in_result: bool,
    },
    Stream(Box<stream::Plan>),
    /// The events extension's feed, resuming after this sequence.
    Events(Option<u64>),
}

/// Who is calling, and what the request activated.
pub struct Call<'a> {
    pub principal: &'a Principal,
    pub active: &'a ext::Active,
    /// The SSE `Last-Event-ID` header.
    pub last_event_id: Option<u64>,
    /// Whether the client has hung up. A blocking call asks between slices
    /// of its wait, and gives up with [`client_gone`] when it has.
    pub peer_gone: &'a dyn Fn() -> bool,
    /// A valid W3C `traceparent` (and `tracestate`): kept on a task the
    /// call creates.
    pub trace: Option<crate::trace::TraceContext>,
}

/// The reason of the error a blocking call returns when its client hung up
/// while it waited. Nobody reads it: the connection is closed unanswered.
pub const CLIENT_GONE: &str = "CLIENT_GONE";

/// Whether `err` says the client went away (see [`Call::peer_gone`]).
pub fn client_gone(err: &RpcError) -> bool {
    err.data.first().and_then(|d| d.get("reason")).and_then(Value::as_str) == Some(CLIENT_GONE)
}

/// Daemon-wide facts and switches the command extension reads and sets.
pub struct Daemon {
    pub started: std::time::Instant,
    pub listeners: Vec<String>,
    /// `drain`: no new tasks; follow-ups to existing ones still go through.
    pub draining: AtomicBool,
    /// What tasks are isolated with (`process-group`, `+cgroup2`, …).
    pub isolation: String,
    /// The connection cap in force: `a2a.max_connections`, or lower when
    /// the fd limit could not hold it.
    pub max_connections: usize,
}

/// The agent behind every listener.
pub struct Agent {
    pub cfg: Arc<Config>,
    pub tasks: Arc<TaskTable>,
    pub procman: Procman,
    pub daemon: Daemon,
}

impl Agent {
    /// Runs one method.
    pub fn call(&self, call: &Call<'_>, method: &str, params: &RawValue) -> Result<Answer, RpcError> {
        if let Some(uri) = call.active.missing(&self.cfg.ext_required) {
            return Err(RpcError::with_reason(
                rpc::EXTENSION_SUPPORT_REQUIRED,
                "EXTENSION_SUPPORT_REQUIRED",
                rpc::A2A_DOMAIN,
                format!("This agent requires the extension {uri}: name it in the A2A-Extensions header"),
                &[("extension", uri)],
            ));
        }
        let principal = call.principal;
        match method {
            "SendMessage" => self.send_message(call, parse(params)?),
            "SendStreamingMessage" => self
                .send_streaming(call, parse(params)?)
                .map(|p| Answer::Stream(Box::new(p))),
            "SubscribeToTask" => self
                .subscribe(principal, parse(params)?, call.last_event_id)
                .map(|p| Answer::Stream(Box::new(p))),
            "GetTask" => self.get_task(principal, parse(params)?).map(|t| Answer::Snapshot {
                task: Box::new(t),
                in_result: false,
            }),
            "ListTasks" => self.list_tasks(call, params).map(Answer::Value),
            "CancelTask" => self.cancel_task(principal, parse(params)?).map(|t| Answer::Snapshot {
                task: Box::new(t),
                in_result: false,
            }),
            ext::EVENTS_METHOD if call.active.has(ext::EVENTS) => {
                let params: Value = parse(params)?;
                let from = match params.get("fromSeq").or_else(|| params.get("from_seq")) {
                    None | Some(Value::Null) => call.last_event_id,
                    Some(v) => Some(v.as_u64().ok_or_else(|| {
                        RpcError::invalid_params("fromSeq", "a sequence number (a whole number, 0 or more)")
                    })?),
                };
                Ok(Answer::Events(from))
            }
            ext::EVENTS_METHOD => Err(RpcError::with_reason(
                rpc::METHOD_NOT_FOUND,
                "METHOD_NOT_FOUND",
                rpc::A2A_DOMAIN,
                format!(
                    "{method} belongs to the extension {}: activate it with the A2A-Extensions header",
                    ext::EVENTS
                ),
                &[("method", method), ("extension", ext::EVENTS)],
            )),
            "CreateTaskPushNotificationConfig"
            | "GetTaskPushNotificationConfig"
            | "ListTaskPushNotificationConfigs"
            | "DeleteTaskPushNotificationConfig" => Err(RpcError::new(
                rpc::PUSH_NOT_SUPPORTED,
                "Push notifications are not supported (capabilities.pushNotifications is false): \
                 use SubscribeToTask or poll GetTask",
            )),
            "GetExtendedAgentCard" => Err(RpcError::unsupported(
                "There is no extended agent card (capabilities.extendedAgentCard is false)",
                &[],
            )),
            other => Err(RpcError::with_reason(
                rpc::METHOD_NOT_FOUND,
                "METHOD_NOT_FOUND",
                rpc::A2A_DOMAIN,
                format!("Method not found: `{other}`{}", legacy_hint(other)),
                &[("method", other)],
            )),
        }
    }

    /// Validates a send and hands the message to a new task or to the
    /// waiting one. Returns the task as of then, its event sequence, and
    /// whether it is new; with `watch`, also a stream's hold on the task,
    /// taken before the task can move.
    fn begin_send(&self, call: &Call<'_>, req: SendMessageRequest, watch: bool) -> Result<Begun, RpcError> {
        let principal = call.principal;
        let config = req.configuration.unwrap_or_default();
        history_length(config.history_length, "configuration.historyLength")?;
        if config.task_push_notification_config.is_some() {
            return Err(RpcError::new(
                rpc::PUSH_NOT_SUPPORTED,
                "configuration.taskPushNotificationConfig: push notifications are not supported",
            ));
        }
        let mut message = req.message;
        // ProtoJSON: an empty string is the default value, i.e. "not set".
        message.task_id = message.task_id.filter(|t| !t.is_empty());
        message.context_id = message.context_id.filter(|c| !c.is_empty());
        validate_user_message(&message)?;
        let labels = if call.active.has(ext::ANNOTATIONS) {
            ext::annotations::parse(message.metadata.as_ref(), "message.metadata")?
        } else {
            None
        };
        match message.task_id.clone() {
            Some(task_id) => {
                if let Some(l) = &labels {
                    self.tasks
                        .update_metadata(principal, &task_id, |md| ext::annotations::check_fits(md.as_ref(), l))?;
                }
                let (task, seq) = self
                    .tasks
                    .continue_with(principal, &task_id, &mut message)
                    .map_err(|e| continue_error(&task_id, e))?;
                if let Some(l) = &labels {
                    self.tasks
                        .update_metadata(principal, &task_id, |md| ext::annotations::merge_into(md, l))?;
                }
                let watch = if watch {
                    self.tasks.watch(principal, &task_id)
                } else {
                    None
                };
                self.procman.input(task.task_id(), message).map_err(supervisor_gone)?;
                Ok(Begun {
                    task,
                    seq,
                    is_new: false,
                    config,
                    watch,
                })
            }
            None => {
                if self.daemon.draining.load(Ordering::SeqCst) {
                    return Err(RpcError::with_reason(
                        rpc::INTERNAL_ERROR,
                        "DRAINING",
                        rpc::AGENTD_DOMAIN,
                        "agentd is draining: it takes no new tasks while running ones finish (an operator sent \
                         `drain`; `resume` undoes it). Follow-ups to tasks waiting for input still work.",
                        &[],
                    ));
                }
                let mut metadata = req.metadata;
                if let Some(l) = &labels {
                    ext::annotations::merge_into(&mut metadata, l)?;
                }
                let task = self.tasks.create(principal, message, metadata).map_err(|e| match e {
                    CreateError::QueueFull { max } => RpcError::with_reason(
                        rpc::INTERNAL_ERROR,
                        "QUEUE_FULL",
                        rpc::AGENTD_DOMAIN,
                        format!("Too many tasks waiting ({max}, tasks.max_queued); nothing was created — retry later"),
                        &[("maxQueued", &max.to_string())],
                    ),
                    CreateError::QueueBytes { max_bytes } => RpcError::with_reason(
                        rpc::INTERNAL_ERROR,
                        "QUEUE_FULL",
                        rpc::AGENTD_DOMAIN,
                        format!(
                            "The waiting tasks' messages hold {max_bytes} bytes already (tasks.queued_max_bytes); \
                             nothing was created — retry later"
                        ),
                        &[("queuedMaxBytes", &max_bytes.to_string())],
                    ),
                })?;
                if let Some(trace) = &call.trace {
                    self.tasks.set_trace(task.id(), trace.clone());
                }
                let watch = if watch {
                    self.tasks.watch(principal, task.id())
                } else {
                    None
                };
                // procman gone means the daemon is exiting (a vital thread
                // ended it): the caller is told; the task goes with the daemon.
                self.procman.start(task.task_id()).map_err(supervisor_gone)?;
                Ok(Begun {
                    task,
                    seq: 0,
                    is_new: true,
                    config,
                    watch,
                })
            }
        }
    }

    fn send_message(&self, call: &Call<'_>, req: SendMessageRequest) -> Result<Answer, RpcError> {
        let sent_task = |task: Snapshot| Answer::Snapshot {
            task: Box::new(task),
            in_result: true,
        };
        if let Some(reply) = self.command(call, &req)? {
            return Ok(Answer::Response(Box::new(StreamResponse::Message(reply))));
        }
        let principal = call.principal;
        let Begun { task, config, .. } = self.begin_send(call, req, false)?;
        let history_length = history_length(config.history_length, "configuration.historyLength")?;
        if config.return_immediately {
            let now = self.tasks.peek(principal, task.id(), history_length);
            return Ok(sent_task(now.unwrap_or(task)));
        }
        let task = self.wait_for_turn(call, task.id(), history_length)?;
        Ok(match self.tasks.direct_reply(task.id()) {
            Some(m) => Answer::Response(Box::new(StreamResponse::Message(m))),
            None => sent_task(task),
        })
    }

    /// Waits until the task's turn is over (terminal, interrupted, or a
    /// direct reply), in slices, looking between them whether the client
    /// is still there. A client that hung up gets [`CLIENT_GONE`]; the task
    /// goes on as if it had been sent with `returnImmediately`.
    fn wait_for_turn(&self, call: &Call<'_>, id: &str, history_length: Option<usize>) -> Result<Snapshot, RpcError> {
        let turn_over = |s: TaskState| s.is_terminal() || s.is_interrupted();
        let slice = Duration::from_millis(crate::limits::BLOCKING_WAIT_SLICE_MS);
        loop {
            // The task as it settled is the answer: no second look.
            let now = self
                .tasks
                .wait_until(call.principal, id, history_length, Some(slice), turn_over)
                .ok_or_else(|| RpcError::task_not_found(id))?;
            if turn_over(now.state()) || self.tasks.direct_reply(id).is_some() {
                return Ok(now);
            }
            if (call.peer_gone)() {
                log::info!(
                    "a2a.send.abandoned task={id} principal={} the client hung up; the task goes on",
                    call.principal.name()
                );
                return Err(RpcError::with_reason(
                    rpc::INTERNAL_ERROR,
                    CLIENT_GONE,
                    rpc::AGENTD_DOMAIN,
                    "the client hung up",
                    &[("taskId", id)],
                ));
            }
        }
    }

    fn send_streaming(&self, call: &Call<'_>, req: SendMessageRequest) -> Result<stream::Plan, RpcError> {
        if let Some(reply) = self.command(call, &req)? {
            return Ok(stream::Plan {
                watch: None,
                start: stream::Start::Reply(reply),
                until: stream::Until::TurnEnd,
            });
        }
        let Begun {
            task,
            seq,
            is_new,
            config,
            watch,
        } = self.begin_send(call, req, true)?;
        let mut task = task.render();
        if let Some(n) = history_length(config.history_length, "configuration.historyLength")? {
            let history = task.history.take().unwrap_or_default();
            let keep = history.len().min(n);
            task.history = Some(history[history.len() - keep..].to_vec()).filter(|h| !h.is_empty());
        }
        Ok(stream::Plan {
            watch,
            start: stream::Start::Snapshot {
                task,
                seq,
                may_reply: is_new && self.runner_may_reply(),
            },
            until: stream::Until::TurnEnd,
        })
    }

    fn subscribe(
        &self,
        principal: &Principal,
        req: SubscribeToTaskRequest,
        last_event_id: Option<u64>,
    ) -> Result<stream::Plan, RpcError> {
        require_id(&req.id)?;
        let watch = self
            .tasks
            .watch(principal, &req.id)
            .ok_or_else(|| RpcError::task_not_found(&req.id))?;
        let (task, seq) = watch.snapshot(None);
        if task.status.state.is_terminal() {
            return Err(RpcError::unsupported(
                format!(
                    "Task {} is in terminal state {}: there is nothing to subscribe to; use GetTask",
                    req.id,
                    task.status.state.wire_name()
                ),
                &[("taskId", &req.id), ("state", task.status.state.wire_name())],
            ));
        }
        let start = match last_event_id {
            Some(n) if watch.can_replay_from(n) => stream::Start::Replay { seq: n },
            _ => stream::Start::Snapshot {
                task,
                seq,
                may_reply: false,
            },
        };
        Ok(stream::Plan {
            watch: Some(watch),
            start,
            until: stream::Until::Terminal,
        })
    }

    /// A command-extension message, when the extension is active: run it
    /// and return the reply. `None` = an ordinary message.
    fn command(&self, call: &Call<'_>, req: &SendMessageRequest) -> Result<Option<crate::wire::Message>, RpcError> {
        if !call.active.has(ext::COMMAND) || !ext::command::is_command(&req.message) {
            return Ok(None);
        }
        if !call.principal.is_operator() {
            return Err(ext::command::forbidden(&call.principal.name()));
        }
        validate_user_message(&req.message)?;
        let op = ext::command::parse(&req.message)?;
        let body = operator::run(self, &op);
        log::info!("ext.command op={} principal={}", op.name(), call.principal.name());
        Ok(Some(ext::command::reply(body, req.message.context_id.clone())))
    }

    /// Only a jsonl program can answer with a direct Message.
    fn runner_may_reply(&self) -> bool {
        matches!(self.cfg.runner, crate::config::Runner::Exec { .. })
            && self.cfg.exec_protocol == crate::control::ExecProtocol::Jsonl
    }

    fn get_task(&self, principal: &Principal, req: GetTaskRequest) -> Result<Snapshot, RpcError> {
        require_id(&req.id)?;
        let history_length = history_length(req.history_length, "historyLength")?;
        let task = self
            .tasks
            .peek(principal, &req.id, history_length)
            .ok_or_else(|| RpcError::task_not_found(&req.id))?;
        Ok(task)
    }

    fn list_tasks(&self, call: &Call<'_>, params: &RawValue) -> Result<Value, RpcError> {
        let labels = if call.active.has(ext::ANNOTATIONS) {
            let params: Value = parse(params)?;
            ext::annotations::parse(params.get("metadata").and_then(Value::as_object), "metadata")?
        } else {
            None
        };
        let principal = call.principal;
        let req: ListTasksRequest = parse(params)?;
        let page_size = match req.page_size {
            None => crate::limits::LIST_PAGE_DEFAULT,
            Some(n) if (1..=crate::limits::LIST_PAGE_MAX as i32).contains(&n) => n as usize,
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "pageSize",
                    format!("must be between 1 and {}", crate::limits::LIST_PAGE_MAX),
                ))
            }
        };
        let cursor = match req.page_token.as_deref() {
            None | Some("") => None,
            Some(t) => Some(
                crate::tasks::decode_cursor(t)
                    .ok_or_else(|| RpcError::invalid_params("pageToken", "not a token this server issued"))?,
            ),
        };
        let after_ms = match req.status_timestamp_after.as_deref() {
            None | Some("") => None,
            Some(t) => Some(crate::clock::parse_ms(t).ok_or_else(|| {
                RpcError::invalid_params(
                    "statusTimestampAfter",
                    "expected an RFC 3339 timestamp like 2026-05-01T10:00:00Z",
                )
            })?),
        };
        let query = ListQuery {
            context_id: req.context_id.filter(|c| !c.is_empty()),
            status: req.status,
            after_ms,
            page_size,
            cursor,
            history_length: history_length(req.history_length, "historyLength")?,
            include_artifacts: req.include_artifacts.unwrap_or(false),
            metadata: labels
                .map(|l| -> crate::tasks::MetadataFilter { Box::new(move |md| ext::annotations::matches(md, &l)) }),
        };
        to_value(&self.tasks.list(principal, &query))
    }

    fn cancel_task(&self, principal: &Principal, req: CancelTaskRequest) -> Result<Snapshot, RpcError> {
        require_id(&req.id)?;
        let task = self
            .tasks
            .peek(principal, &req.id, Some(0))
            .ok_or_else(|| RpcError::task_not_found(&req.id))?;
        if task.state().is_terminal() {
            return Err(RpcError::with_reason(
                rpc::TASK_NOT_CANCELABLE,
                "TASK_NOT_CANCELABLE",
                rpc::A2A_DOMAIN,
                format!("Task {} is already finished ({})", req.id, task.state().wire_name()),
                &[("taskId", &req.id), ("state", task.state().wire_name())],
            ));
        }
        self.procman.cancel(&req.id).map_err(supervisor_gone)?;
        let t = &self.cfg.tasks;
        // The ladder is bounded; past it (and a margin for reaping) answer
        // with whatever the task is now rather than hang the client.
        let bound = Duration::from_millis(t.cancel_grace_ms + t.term_grace_ms + 5_000);
        let task = self
            .tasks
            .wait_until(principal, &req.id, None, Some(bound), TaskState::is_terminal)
            .ok_or_else(|| RpcError::task_not_found(&req.id))?;
        Ok(task)
    }
}

/// What a send produced (see `Agent::begin_send`).
struct Begun {
    task: Snapshot,
    seq: u64,
    is_new: bool,
    config: crate::wire::SendMessageConfiguration,
    watch: Option<Watch>,
}

/// A method's params, read straight from their text into its request type.
fn parse<T: DeserializeOwned>(params: &RawValue) -> Result<T, RpcError> {
    serde_json::from_str(params.get()).map_err(|e| {
        // serde_json says where in the text; the client sent an object, not
        // a text with lines, so the position is left out.
        let text = e.to_string();
        let at = format!(" at line {} column {}", e.line(), e.column());
        let text = text.strip_suffix(&at).unwrap_or(&text).to_string();
        let field = text
            .split('`')
            .nth(1)
            .filter(|_| text.starts_with("missing field"))
            .unwrap_or("params")
            .to_string();
        RpcError::invalid_params(&field, text)
    })
}

fn to_value<T: serde::Serialize>(v: &T) -> Result<Value, RpcError> {
    serde_json::to_value(v).map_err(|e| RpcError::new(rpc::INTERNAL_ERROR, format!("Internal error: {e}")))
}

fn require_id(id: &str) -> Result<(), RpcError> {
    if id.is_empty() {
        Err(RpcError::invalid_params("id", "a task id is required"))
    } else {
        Ok(())
    }
}

fn history_length(n: Option<i32>, field: &str) -> Result<Option<usize>, RpcError> {
    match n {
        None => Ok(None),
        Some(n) if n >= 0 => Ok(Some(n as usize)),
        Some(_) => Err(RpcError::invalid_params(field, "must not be negative")),
    }
}

fn validate_user_message(m: &crate::wire::Message) -> Result<(), RpcError> {
    if m.message_id.is_empty() {
        return Err(RpcError::invalid_params("message.messageId", "is required"));
    }
    if m.role != Role::User {
        return Err(RpcError::invalid_params(
            "message.role",
            "a client's message must have ROLE_USER",
        ));
    }
    if m.parts.is_empty() {
        return Err(RpcError::invalid_params(
            "message.parts",
            "at least one part is required",
        ));
    }
    Ok(())
}

fn continue_error(task_id: &str, e: ContinueError) -> RpcError {
    match e {
        ContinueError::NotFound => RpcError::task_not_found(task_id),
        ContinueError::Terminal(state) => RpcError::unsupported(
            format!(
                "Task {task_id} is in terminal state {}: tasks never restart; send a new message \
                 (same contextId) to start another",
                state.wire_name()
            ),
            &[("taskId", task_id), ("state", state.wire_name())],
        ),
        ContinueError::Busy(state) => RpcError::unsupported(
            format!(
                "Task {task_id} is {}: a follow-up message is taken only when the task asks for \
                 one (TASK_STATE_INPUT_REQUIRED)",
                state.wire_name()
            ),
            &[("taskId", task_id), ("state", state.wire_name())],
        ),
        ContinueError::ContextMismatch { task_context } => RpcError::invalid_params(
            "message.contextId",
            format!("task {task_id} belongs to context {task_context}"),
        ),
    }
}

/// A hint for 0.3-era method names.
fn legacy_hint(method: &str) -> &'static str {
    match method {
        "message/send" => " (A2A 0.3 name; 1.0 calls it SendMessage)",
        "message/stream" => " (A2A 0.3 name; 1.0 calls it SendStreamingMessage)",
        "tasks/get" => " (A2A 0.3 name; 1.0 calls it GetTask)",
        "tasks/cancel" => " (A2A 0.3 name; 1.0 calls it CancelTask)",
        "tasks/resubscribe" => " (A2A 0.3 name; 1.0 calls it SubscribeToTask)",
        "tasks/list" => " (1.0 calls it ListTasks)",
        _ => "",
    }
}

/// A request procman can no longer take (its thread is gone and the
/// daemon is on its way out): an error to the caller, never a silent drop.
fn supervisor_gone(gone: crate::procman::ProcmanGone) -> RpcError {
    RpcError::with_reason(
        rpc::INTERNAL_ERROR,
        "SUPERVISOR_GONE",
        rpc::AGENTD_DOMAIN,
        gone.to_string(),
        &[],
    )
}
