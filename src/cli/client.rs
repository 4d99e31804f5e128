//! The client subcommands: `agentd card|send|get|list|cancel|subscribe
//! ENDPOINT …`. Human output by default, the raw JSON with `--json`.
//!
//! Exit codes: 0 success; 1 the agent answered with a JSON-RPC error
//! (printed); 2 usage; 3 the endpoint could not be reached or did not speak
//! A2A over our binding; 4 `send`/`subscribe` saw the task end FAILED,
//! REJECTED or CANCELED; 5 `--timeout` ran out; 130 interrupted (Ctrl-C).

use std::io::{Read, Write};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Value};

use super::{EXIT_FAILURE, EXIT_OK, EXIT_USAGE};
use crate::client::{Client, ClientError, StreamEvent};
use crate::transport::Address;

pub const EXIT_UNREACHABLE: i32 = 3;
pub const EXIT_TASK_FAILED: i32 = 4;
pub const EXIT_TIMED_OUT: i32 = 5;
pub const EXIT_INTERRUPTED: i32 = 130;

/// The task a `send` or `subscribe` is following, once known: what a
/// timeout or Ctrl-C names when it says the task goes on.
static FOLLOWING: Mutex<Option<String>> = Mutex::new(None);

pub const HELP: &str = "\
Usage: agentd COMMAND [ENDPOINT] [ARGS] [OPTIONS]

Talk to an A2A agent on a unix socket or vsock. ENDPOINT is
unix:///PATH, vsock://CID:PORT, or vsock+uds:///PATH:PORT (a guest's port
through a hybrid-vsock socket, as Firecracker and vhost-device-vsock offer).
Without an ENDPOINT the client dials the socket `agentd serve` listens on by
default ($XDG_RUNTIME_DIR/agentd/agentd.sock, /run/agentd/agentd.sock as
root, else /tmp/agentd-UID/agentd.sock). The client reads the agent's card,
checks it offers agentd's binding for that transport, and always sends to
ENDPOINT itself.

Commands:
  card ENDPOINT                  show the agent card
  send ENDPOINT [TEXT]           send a message (TEXT, or stdin when absent or -)
      --stream                   show progress live (SendStreamingMessage)
      --task ID                  continue a task waiting for input
      --context ID               send within a conversation (contextId)
      --no-wait                  return at once (returnImmediately)
  get ENDPOINT TASK_ID           show a task  [--history N]
  list ENDPOINT                  list tasks   [--context ID] [--state STATE]
                                              [--page-size N] [--page-token T] [--artifacts]
  cancel ENDPOINT TASK_ID        cancel a task (returns once it is CANCELED)
  subscribe ENDPOINT TASK_ID     follow a task's events until it ends  [--last-event-id N]
  events ENDPOINT                follow every task's lifecycle (events extension)  [--from SEQ]
  command ENDPOINT OP [KEY=VALUE…]
                                 an operator command (command extension): status, drain,
                                 resume, limits [maxRunning=N]

Options for every command:
      --json                     print the raw JSON results (one per line when streaming)
      --timeout SECS             give up after SECS seconds, streaming or not (a task
                                 goes on running: the message says how to cancel it)

Exit status: 0 success; 1 the agent answered with an error; 2 usage;
3 the endpoint could not be reached or speaks no binding we know;
4 the task ended FAILED, REJECTED or CANCELED; 5 --timeout ran out;
130 interrupted by Ctrl-C (the task goes on).
";

/// Parsed flags shared by every client command.
struct Opts {
    json: bool,
    positional: Vec<String>,
    flags: Vec<(String, Option<String>)>,
}

/// Flags that take a value.
const VALUED: &[&str] = &[
    "--task",
    "--context",
    "--history",
    "--state",
    "--page-size",
    "--page-token",
    "--last-event-id",
    "--timeout",
    "--from",
];
const BOOLEAN: &[&str] = &["--json", "--stream", "--no-wait", "--artifacts"];

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        json: false,
        positional: Vec::new(),
        flags: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        if VALUED.contains(&name.as_str()) {
            let v = inline
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{name} needs a value"))?;
            o.flags.push((name, Some(v)));
        } else if BOOLEAN.contains(&name.as_str()) {
            if name == "--json" {
                o.json = true;
            }
            o.flags.push((name, None));
        } else if name.starts_with("--") {
            return Err(format!("unknown option `{name}`"));
        } else {
            o.positional.push(a.clone());
        }
    }
    Ok(o)
}

impl Opts {
    fn has(&self, name: &str) -> bool {
        self.flags.iter().any(|(n, _)| n == name)
    }

    fn value(&self, name: &str) -> Option<&str> {
        self.flags
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }

    fn number(&self, name: &str) -> Result<Option<i64>, String> {
        self.value(name)
            .map(|v| v.parse::<i64>().map_err(|_| format!("{name}: `{v}` is not a number")))
            .transpose()
    }
}

/// Runs one client command; returns the exit code.
pub fn run(command: &str, args: &[String]) -> i32 {
    crate::sys::default_sigpipe();
    let opts = match parse(args) {
        Ok(o) => o,
        Err(e) => return usage(&e),
    };
    // The first word is the endpoint when it looks like one; otherwise the
    // default socket, as `agentd serve` and `agentd mcp` use.
    let given = opts.positional.first().filter(|p| looks_like_endpoint(p));
    let addr = match given {
        Some(endpoint) => match Address::parse(endpoint) {
            Ok(a) => a,
            Err(e) => return usage(&e.to_string()),
        },
        None => Address::Unix(crate::config::default_socket_path()),
    };
    let endpoint = addr.to_string();
    let mut client = Client::new(addr);
    match opts.number("--timeout") {
        Ok(Some(t)) if t > 0 => {
            let t = Duration::from_secs(t as u64);
            // Backstop for the socket; the watchdog below is what ends us.
            client.timeout = Some(t + Duration::from_secs(1));
            give_up_after(t, &endpoint);
        }
        Ok(Some(t)) => return usage(&format!("--timeout: `{t}` must be a positive number of seconds")),
        Ok(None) => {}
        Err(e) => return usage(&e),
    }
    if command == "send" || command == "subscribe" {
        tell_on_interrupt(&endpoint);
    }
    let rest = &opts.positional[usize::from(given.is_some())..];
    let result = match command {
        "card" => card(&client, &opts),
        "send" => send(&mut client, &opts, rest),
        "get" => one_id(rest, "get").and_then(|id| get(&mut client, &opts, id)),
        "list" => list(&mut client, &opts),
        "cancel" => one_id(rest, "cancel").and_then(|id| cancel(&mut client, &opts, id)),
        "subscribe" => one_id(rest, "subscribe").and_then(|id| subscribe(&mut client, &opts, id)),
        "events" => events(&mut client, &opts),
        "command" => operator_command(&mut client, &opts, rest),
        _ => return usage(&format!("unknown command `{command}`")),
    };
    match result {
        Ok(code) => code,
        Err(Failure::Usage(m)) => usage(&m),
        Err(Failure::Client(e)) => {
            if opts.json {
                if let ClientError::Rpc(err) = &e {
                    println!("{}", json!({ "error": err }));
                }
            }
            eprintln!("agentd: {e}");
            match e {
                ClientError::Rpc(_) => EXIT_FAILURE,
                _ => EXIT_UNREACHABLE,
            }
        }
    }
}

enum Failure {
    Usage(String),
    Client(ClientError),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Failure {
        Failure::Client(e)
    }
}

/// An address (`unix://…`, `vsock://…`, a bare `/path` to be told how to
/// write it, or any other `scheme://`, to be told what is served).
fn looks_like_endpoint(word: &str) -> bool {
    word.starts_with('/') || word.split_once("://").is_some_and(|(scheme, _)| !scheme.contains(' '))
}

/// What to say about a task we stop following: it goes on, and how to
/// cancel it.
fn task_goes_on(endpoint: &str) -> String {
    match FOLLOWING.lock().ok().and_then(|t| t.clone()) {
        Some(id) => format!(
            "the task goes on running; cancel it with `agentd cancel {endpoint} {id}`, \
             or see it with `agentd get {endpoint} {id}`"
        ),
        None => format!(
            "a task it started goes on running; find it with `agentd list {endpoint}` and cancel it with \
             `agentd cancel {endpoint} TASK_ID`"
        ),
    }
}

/// `--timeout`: after `t`, say so and exit, whatever the command waits on.
fn give_up_after(t: Duration, endpoint: &str) {
    let endpoint = endpoint.to_string();
    let _ = std::thread::Builder::new().name("timeout".into()).spawn(move || {
        std::thread::sleep(t);
        let _ = std::io::stdout().flush();
        eprintln!(
            "\nagentd: no answer within {} s (--timeout); {}",
            t.as_secs(),
            task_goes_on(&endpoint)
        );
        std::process::exit(EXIT_TIMED_OUT);
    });
}

/// Ctrl-C during `send` or `subscribe`: the task is not cancelled by a
/// client going away; say so, and how to cancel it.
fn tell_on_interrupt(endpoint: &str) {
    let endpoint = endpoint.to_string();
    let Ok(mut signals) = signal_hook::iterator::Signals::new([libc::SIGINT]) else {
        return;
    };
    let _ = std::thread::Builder::new().name("sigint".into()).spawn(move || {
        if signals.forever().next().is_some() {
            let _ = std::io::stdout().flush();
            eprintln!("\nagentd: interrupted; {}", task_goes_on(&endpoint));
            std::process::exit(EXIT_INTERRUPTED);
        }
    });
}

fn follow(task_id: &str) {
    if let Ok(mut t) = FOLLOWING.lock() {
        if t.is_none() {
            *t = Some(task_id.to_string());
        }
    }
}

fn usage(msg: &str) -> i32 {
    eprintln!("agentd: {msg} (see `agentd help client`)");
    EXIT_USAGE
}

fn one_id<'a>(rest: &'a [String], cmd: &str) -> Result<&'a str, Failure> {
    match rest {
        [id] => Ok(id),
        [] => Err(Failure::Usage(format!("`{cmd}` needs a TASK_ID"))),
        _ => Err(Failure::Usage(format!("`{cmd}` takes one TASK_ID"))),
    }
}

fn print_json(v: &Value) {
    println!("{v}");
}

fn card(client: &Client, opts: &Opts) -> Result<i32, Failure> {
    let card = client.card()?;
    if opts.json {
        print_json(&card);
        client.check_interface(&card)?;
        return Ok(EXIT_OK);
    }
    println!("{} {}", text(&card["name"]), text(&card["version"]));
    println!("  {}", text(&card["description"]));
    println!("interfaces:");
    for i in card["supportedInterfaces"].as_array().into_iter().flatten() {
        println!(
            "  {}  {}  (A2A {})",
            text(&i["url"]),
            text(&i["protocolBinding"]),
            text(&i["protocolVersion"])
        );
    }
    let caps = &card["capabilities"];
    println!(
        "capabilities: streaming={} pushNotifications={} extendedAgentCard={}",
        caps["streaming"].as_bool().unwrap_or(false),
        caps["pushNotifications"].as_bool().unwrap_or(false),
        caps["extendedAgentCard"].as_bool().unwrap_or(false)
    );
    for e in caps["extensions"].as_array().into_iter().flatten() {
        println!(
            "  extension {}{}",
            text(&e["uri"]),
            if e["required"] == true { " (required)" } else { "" }
        );
    }
    for s in card["skills"].as_array().into_iter().flatten() {
        println!("skill {}: {}", text(&s["id"]), text(&s["description"]));
    }
    client.check_interface(&card)?;
    Ok(EXIT_OK)
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn read_message_text(rest: &[String]) -> Result<String, Failure> {
    match rest {
        [] => read_stdin(),
        [t] if t == "-" => read_stdin(),
        words => Ok(words.join(" ")),
    }
}

fn read_stdin() -> Result<String, Failure> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .map_err(|e| Failure::Usage(format!("cannot read the message from stdin: {e}")))?;
    Ok(s)
}

fn send(client: &mut Client, opts: &Opts, rest: &[String]) -> Result<i32, Failure> {
    client.discover()?;
    let text = read_message_text(rest)?;
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
    if opts.has("--no-wait") {
        params["configuration"] = json!({"returnImmediately": true});
    }
    if let Some(t) = opts.value("--task") {
        follow(t);
    }
    let endpoint = client.addr.to_string();
    if opts.has("--stream") {
        let mut printer = Printer::new(opts.json, &endpoint);
        let streamed = client.stream("SendStreamingMessage", params, None, &mut |ev| printer.event(ev));
        printer.finish();
        streamed?;
        return Ok(printer.exit_code());
    }
    let result = client.call("SendMessage", params)?;
    if opts.json {
        print_json(&result);
    } else if let Some(m) = result.get("message") {
        println!("{}", message_text(m));
    } else {
        print_task(&result["task"], true, &endpoint);
    }
    Ok(task_exit(result.get("task").map(|t| &t["status"]["state"])))
}

fn get(client: &mut Client, opts: &Opts, id: &str) -> Result<i32, Failure> {
    client.discover()?;
    let mut params = json!({ "id": id });
    if let Some(n) = opts.number("--history").map_err(Failure::Usage)? {
        params["historyLength"] = json!(n);
    }
    let task = client.call("GetTask", params)?;
    if opts.json {
        print_json(&task);
    } else {
        print_task(&task, true, &client.addr.to_string());
    }
    Ok(EXIT_OK)
}

fn list(client: &mut Client, opts: &Opts) -> Result<i32, Failure> {
    client.discover()?;
    let mut params = json!({});
    if let Some(c) = opts.value("--context") {
        params["contextId"] = json!(c);
    }
    if let Some(s) = opts.value("--state") {
        let upper = s.to_ascii_uppercase().replace('-', "_");
        let state = if upper.starts_with("TASK_STATE_") {
            upper
        } else {
            format!("TASK_STATE_{upper}")
        };
        params["status"] = json!(state);
    }
    if let Some(n) = opts.number("--page-size").map_err(Failure::Usage)? {
        params["pageSize"] = json!(n);
    }
    if let Some(t) = opts.value("--page-token") {
        params["pageToken"] = json!(t);
    }
    if opts.has("--artifacts") {
        params["includeArtifacts"] = json!(true);
    }
    let page = client.call("ListTasks", params)?;
    if opts.json {
        print_json(&page);
        return Ok(EXIT_OK);
    }
    let tasks = page["tasks"].as_array().cloned().unwrap_or_default();
    println!("{:<36}  {:<15}  {:<24}  CONTEXT", "TASK", "STATE", "UPDATED");
    for t in &tasks {
        println!(
            "{:<36}  {:<15}  {:<24}  {}",
            text(&t["id"]),
            short_state(&t["status"]["state"]),
            text(&t["status"]["timestamp"]),
            text(&t["contextId"])
        );
    }
    println!("{} of {} task(s)", tasks.len(), page["totalSize"]);
    if let Some(next) = page["nextPageToken"].as_str().filter(|t| !t.is_empty()) {
        println!("more: --page-token {next}");
    }
    Ok(EXIT_OK)
}

fn cancel(client: &mut Client, opts: &Opts, id: &str) -> Result<i32, Failure> {
    client.discover()?;
    let task = client.call("CancelTask", json!({ "id": id }))?;
    if opts.json {
        print_json(&task);
    } else {
        println!("task {} {}", text(&task["id"]), short_state(&task["status"]["state"]));
    }
    Ok(EXIT_OK)
}

fn subscribe(client: &mut Client, opts: &Opts, id: &str) -> Result<i32, Failure> {
    client.discover()?;
    follow(id);
    let mut printer = Printer::new(opts.json, &client.addr.to_string());
    let streamed = client.stream(
        "SubscribeToTask",
        json!({ "id": id }),
        opts.value("--last-event-id"),
        &mut |ev| printer.event(ev),
    );
    printer.finish();
    streamed?;
    Ok(printer.exit_code())
}

fn events(client: &mut Client, opts: &Opts) -> Result<i32, Failure> {
    client.discover()?;
    client.extensions.push(crate::ext::EVENTS.to_string());
    let mut params = json!({});
    if let Some(n) = opts.number("--from").map_err(Failure::Usage)? {
        params["fromSeq"] = json!(n);
    }
    let json_out = opts.json;
    client.stream(crate::ext::EVENTS_METHOD, params, None, &mut |ev| {
        let r = &ev.result;
        if json_out {
            print_json(r);
        } else if let Some(e) = r.get("event") {
            let mut line = format!("{:>6} {} {:<14}", text(&e["seq"]), text(&e["time"]), text(&e["kind"]));
            for key in ["taskId", "state", "pid", "cause", "exit", "artifactId"] {
                if let Some(v) = e.get(key).filter(|v| !v.is_null()) {
                    let v = if key == "state" { short_state(v) } else { text(v) };
                    line.push_str(&format!(" {key}={v}"));
                }
            }
            println!("{line}");
        } else if let Some(h) = r.get("hello") {
            println!(
                "# following events from seq {} (ring starts at {})",
                text(&h["seq"]),
                text(&h["ringStart"])
            );
        } else if let Some(rs) = r.get("resync") {
            println!(
                "# resync: records after {} are gone; the ring starts at {}",
                text(&rs["from"]),
                text(&rs["ringStart"])
            );
        } else if r.get("goodbye").is_some() {
            println!("# goodbye: the daemon is stopping");
        }
        let _ = std::io::stdout().flush();
        true
    })?;
    Ok(EXIT_OK)
}

fn operator_command(client: &mut Client, opts: &Opts, rest: &[String]) -> Result<i32, Failure> {
    let Some((op, args)) = rest.split_first() else {
        return Err(Failure::Usage(
            "`command` needs an OP: status, drain, resume or limits".into(),
        ));
    };
    let mut data = json!({ "op": op });
    for a in args {
        let (k, v) = a
            .split_once('=')
            .ok_or_else(|| Failure::Usage(format!("command arguments are KEY=VALUE, found `{a}`")))?;
        data[k] = v.parse::<i64>().map(Value::from).unwrap_or_else(|_| json!(v));
    }
    client.discover()?;
    client.extensions.push(crate::ext::COMMAND.to_string());
    let message = json!({
        "messageId": crate::ids::new_id(),
        "role": "ROLE_USER",
        "extensions": [crate::ext::COMMAND],
        "parts": [{"data": data}],
    });
    let result = client.call("SendMessage", json!({ "message": message }))?;
    let reply = &result["message"]["parts"][0]["data"];
    if opts.json {
        print_json(reply);
    } else {
        println!("{}", serde_json::to_string_pretty(reply).unwrap_or_default());
    }
    Ok(EXIT_OK)
}

/// `TASK_STATE_INPUT_REQUIRED` → `input-required`.
fn short_state(v: &Value) -> String {
    let s = v.as_str().unwrap_or("?");
    s.strip_prefix("TASK_STATE_")
        .unwrap_or(s)
        .to_ascii_lowercase()
        .replace('_', "-")
}

fn task_exit(state: Option<&Value>) -> i32 {
    match state.and_then(Value::as_str) {
        Some("TASK_STATE_FAILED" | "TASK_STATE_REJECTED" | "TASK_STATE_CANCELED") => EXIT_TASK_FAILED,
        _ => EXIT_OK,
    }
}

fn message_text(m: &Value) -> String {
    crate::client::parts_text(&m["parts"], "\n")
}

fn print_task(task: &Value, with_artifacts: bool, endpoint: &str) {
    println!("task {} {}", text(&task["id"]), short_state(&task["status"]["state"]));
    println!("  context {}", text(&task["contextId"]));
    if let Some(m) = task["status"].get("message") {
        println!("  status: {}", message_text(m));
    }
    if task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED" {
        println!("  {}", input_hint(endpoint, &text(&task["id"])));
    }
    if with_artifacts {
        for a in task["artifacts"].as_array().into_iter().flatten() {
            println!(
                "artifact {}:",
                a["name"].as_str().unwrap_or(a["artifactId"].as_str().unwrap_or("?"))
            );
            let body = message_text(a);
            print!("{body}");
            if !body.ends_with('\n') {
                println!();
            }
        }
    }
}

/// How to answer a task waiting for input.
fn input_hint(endpoint: &str, task_id: &str) -> String {
    format!("the agent asks for input: answer with `agentd send {endpoint} --task {task_id} TEXT`")
}

/// Prints stream events as they come, one clean line per event, and
/// remembers the last state.
struct Printer {
    json: bool,
    endpoint: String,
    last_state: Option<String>,
    /// Artifact text that did not end with a newline is on the screen: the
    /// next line starts on a new one.
    mid_line: bool,
}

impl Printer {
    fn new(json: bool, endpoint: &str) -> Printer {
        Printer {
            json,
            endpoint: endpoint.to_string(),
            last_state: None,
            mid_line: false,
        }
    }

    fn line(&mut self, text: &str) {
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
        println!("{text}");
    }

    fn event(&mut self, ev: StreamEvent) -> bool {
        let r = &ev.result;
        if let Some(t) = r.get("task") {
            self.last_state = t["status"]["state"].as_str().map(String::from);
        }
        if let Some(s) = r.get("statusUpdate") {
            self.last_state = s["status"]["state"].as_str().map(String::from);
        }
        let task_id = r
            .get("task")
            .map(|t| &t["id"])
            .or_else(|| r.get("statusUpdate").map(|s| &s["taskId"]))
            .or_else(|| r.get("artifactUpdate").map(|a| &a["taskId"]))
            .and_then(Value::as_str)
            .map(String::from);
        if let Some(id) = &task_id {
            follow(id);
        }
        if self.json {
            print_json(r);
        } else if let Some(t) = r.get("task") {
            self.line(&format!(
                "task {} {}",
                text(&t["id"]),
                short_state(&t["status"]["state"])
            ));
        } else if let Some(m) = r.get("message") {
            self.line(&message_text(m));
        } else if let Some(s) = r.get("statusUpdate") {
            let state = short_state(&s["status"]["state"]);
            let note = s["status"].get("message").map(message_text).unwrap_or_default();
            let note = note.trim();
            // A bare "working" says nothing the task line did not.
            if !(note.is_empty() && state == "working") {
                if note.is_empty() || note == state {
                    self.line(&format!("[{state}]"));
                } else {
                    self.line(&format!("[{state}] {note}"));
                }
            }
            if state == "input-required" {
                let hint = input_hint(&self.endpoint, task_id.as_deref().unwrap_or("TASK_ID"));
                self.line(&hint);
            }
        } else if let Some(a) = r.get("artifactUpdate") {
            let body = message_text(&a["artifact"]);
            if !body.is_empty() {
                print!("{body}");
                self.mid_line = !body.ends_with('\n');
            }
        }
        let _ = std::io::stdout().flush();
        true
    }

    /// The stream is over: end a dangling line.
    fn finish(&mut self) {
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
    }

    fn exit_code(&self) -> i32 {
        task_exit(self.last_state.as_ref().map(|s| Value::String(s.clone())).as_ref())
    }
}
