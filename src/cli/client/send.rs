//! `send` and `subscribe`: the commands that follow a task.
//!
//! A blocking `send` (no `--stream`, no `--no-wait`) to an agent that
//! streams is a `SendStreamingMessage` shown only at its end, then a
//! `GetTask`: the stream's first event names the task, so a timeout or
//! Ctrl-C can say which task goes on and how to cancel it. To an agent
//! without streaming it is one blocking `SendMessage`.

use serde_json::{json, Value};

use super::print::{event_task, follow_hint, is_final, print_json, print_task, task_exit, Printer};
use super::{follow, message_text, set_phase, Failure, Opts, Phase};
use crate::client::{Client, ClientError};

pub fn send(client: &mut Client, opts: &Opts, rest: &[String]) -> Result<i32, Failure> {
    if opts.has("--stream") && opts.has("--no-wait") {
        return Err(Failure::Usage(
            "--stream and --no-wait do not go together: pick one".into(),
        ));
    }
    // The message first: a usage error needs no daemon.
    let text = message_text(rest)?;
    let card = client.discover()?;
    let mut message = json!({
        "messageId": crate::ids::new_id(),
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    });
    if let Some(t) = opts.value("--task") {
        message["taskId"] = json!(t);
    }
    if let Some(c) = opts.value("--context") {
        message["contextId"] = json!(c);
    }
    let mut params = json!({ "message": message });
    let endpoint = client.addr.to_string();
    set_phase(Phase::Sent);
    if let Some(t) = opts.value("--task") {
        follow(t);
    }
    if opts.has("--stream") {
        let mut printer = Printer::new(opts.json, &endpoint);
        let streamed = client.stream("SendStreamingMessage", params, None, &mut |ev| {
            // Known before the line that names it is out: a Ctrl-C that
            // line prompts must find the task to name.
            if let Some(id) = event_task(&ev.result) {
                follow(id);
            }
            printer.event(&ev);
            true
        });
        printer.finish();
        streamed?;
        return Ok(printer.exit_code());
    }
    let result = if opts.has("--no-wait") {
        params["configuration"] = json!({"returnImmediately": true});
        client.call("SendMessage", params)?
    } else if card["capabilities"]["streaming"] == true {
        wait_on_stream(client, params)?
    } else {
        client.call("SendMessage", params)?
    };
    if opts.json {
        print_json(&result);
    } else if let Some(m) = result.get("message") {
        println!("{}", super::print::message_text(m));
    } else {
        let task = &result["task"];
        print_task(task, true, &endpoint);
        let id = task["id"].as_str().unwrap_or("TASK_ID");
        let waiting = task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED";
        if opts.has("--no-wait") && !is_final(&task["status"]["state"]) && !waiting {
            println!("{}", follow_hint(&endpoint, id));
        }
    }
    Ok(task_exit(result.get("task").map(|t| &t["status"]["state"])))
}

/// Sends on a stream and waits for its end, showing nothing; then the
/// task as `GetTask` has it: the same `{task}` (or `{message}`) a
/// blocking SendMessage answers.
fn wait_on_stream(client: &Client, params: Value) -> Result<Value, ClientError> {
    let mut task_id: Option<String> = None;
    let mut direct: Option<Value> = None;
    client.stream("SendStreamingMessage", params, None, &mut |ev| {
        if ev.result.get("message").is_some() {
            direct = Some(ev.result);
            return false;
        }
        if let (None, Some(id)) = (&task_id, event_task(&ev.result)) {
            follow(id);
            task_id = Some(id.to_string());
        }
        true
    })?;
    if let Some(reply) = direct {
        return Ok(reply);
    }
    let id = task_id
        .ok_or_else(|| ClientError::Protocol(format!("{} ended the stream before naming a task", client.addr)))?;
    let task = client.call("GetTask", json!({ "id": id }))?;
    Ok(json!({ "task": task }))
}

pub fn subscribe(client: &mut Client, opts: &Opts, id: &str) -> Result<i32, Failure> {
    client.discover()?;
    follow(id);
    let mut printer = Printer::new(opts.json, &client.addr.to_string());
    let streamed = client.stream(
        "SubscribeToTask",
        json!({ "id": id }),
        opts.value("--last-event-id"),
        &mut |ev| {
            printer.event(&ev);
            true
        },
    );
    printer.finish();
    streamed?;
    Ok(printer.exit_code())
}
