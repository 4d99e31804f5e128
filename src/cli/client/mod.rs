//! The client subcommands: `agentd card|send|get|list|cancel|subscribe|
//! events|command [ENDPOINT] …`. Human output by default, the raw JSON with
//! `--json`.
//!
//! Exit codes: 0 success; 1 the agent answered with a JSON-RPC error
//! (printed) or refused the message as too large (413); 2 usage; 3 the
//! endpoint could not be reached, sent no card within its bound, or did not
//! speak A2A over our binding; 4 `send`/`subscribe` saw the task end FAILED,
//! REJECTED or CANCELED; 5 `--timeout` ran out; 130 interrupted (Ctrl-C).
//!
//! A client that gives up (`--timeout`, Ctrl-C) says exactly what goes on
//! without it: nothing, when nothing was sent; the task by its id and the
//! `agentd cancel` line, once the task is known — which is why a blocking
//! `send` waits on a stream whose first event names the task. It writes
//! only to stderr then.

use std::io::{IsTerminal, Read, Write};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;

mod args;
mod help;
mod print;
mod query;
mod send;

use super::{EXIT_FAILURE, EXIT_OK, EXIT_USAGE};
use crate::client::{Client, ClientError};
use crate::transport::Address;
use args::{Opts, Parsed};

pub const EXIT_UNREACHABLE: i32 = 3;
pub const EXIT_TASK_FAILED: i32 = 4;
pub const EXIT_TIMED_OUT: i32 = 5;
pub const EXIT_INTERRUPTED: i32 = 130;

/// `agentd help client`.
pub fn help() -> String {
    help::all()
}

/// Whether `name` is a client command.
pub fn is_command(name: &str) -> bool {
    help::find(name).is_some()
}

/// The client commands' names.
pub fn names() -> impl Iterator<Item = &'static str> {
    help::COMMANDS.iter().map(|c| c.name)
}

/// `agentd help COMMAND`: what `agentd COMMAND --help` prints.
pub fn command_help(name: &str) -> Option<String> {
    help::find(name).map(help::one)
}

/// How far the command got: what a timeout or Ctrl-C says goes on.
#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Nothing that starts or changes a task has been sent.
    Unsent,
    /// The request is out; the task it makes is not known yet.
    Sent,
    /// The task the command is about.
    Task(String),
}

static PHASE: Mutex<Phase> = Mutex::new(Phase::Unsent);

fn set_phase(p: Phase) {
    if let Ok(mut cur) = PHASE.lock() {
        // The task, once known, stays the answer.
        if !matches!(*cur, Phase::Task(_)) || matches!(p, Phase::Task(_)) {
            *cur = p;
        }
    }
}

/// The task the command now follows (the first one named wins).
fn follow(task_id: &str) {
    if let Ok(mut cur) = PHASE.lock() {
        if !matches!(*cur, Phase::Task(_)) {
            *cur = Phase::Task(task_id.to_string());
        }
    }
}

/// What goes on without a client that stops here, for `command`.
fn what_goes_on(command: &str, endpoint: &str) -> Option<String> {
    let phase = PHASE.lock().map(|p| p.clone()).unwrap_or(Phase::Sent);
    match (command, phase) {
        ("cancel", Phase::Task(id)) => Some(format!(
            "the daemon goes on cancelling task {id}; see it with `agentd get {endpoint} {id}`"
        )),
        (_, Phase::Task(id)) => Some(format!(
            "task {id} goes on running; cancel it with `agentd cancel {endpoint} {id}`, \
             or see it with `agentd get {endpoint} {id}`"
        )),
        ("send", Phase::Sent) => Some(format!(
            "the message was sent, and a task it started may go on running: find it with \
             `agentd list {endpoint}` and cancel it with `agentd cancel {endpoint} TASK_ID`"
        )),
        ("send", Phase::Unsent) => Some("nothing was sent".into()),
        _ => None,
    }
}

/// Says why the client stops and what goes on, on stderr only (stdout
/// keeps just what the command printed), and exits.
fn stop(code: i32, why: &str, command: &str, endpoint: &str) -> ! {
    let _ = std::io::stdout().flush();
    // On a terminal the message gets a line of its own after `^C` or a
    // half-printed artifact line; in a log it needs none.
    let lead = if std::io::stderr().is_terminal() { "\n" } else { "" };
    match what_goes_on(command, endpoint) {
        Some(rest) => eprintln!("{lead}agentd: {why}; {rest}"),
        None => eprintln!("{lead}agentd: {why}"),
    }
    std::process::exit(code);
}

/// `--timeout`: after `t`, say so and exit, whatever the command waits on.
fn give_up_after(t: Duration, shown: &str, command: &'static str, endpoint: &str) {
    let (endpoint, why) = (endpoint.to_string(), format!("no answer within {shown} s (--timeout)"));
    let _ = std::thread::Builder::new().name("timeout".into()).spawn(move || {
        std::thread::sleep(t);
        stop(EXIT_TIMED_OUT, &why, command, &endpoint);
    });
}

/// Ctrl-C: a client going away cancels nothing; say what goes on.
fn tell_on_interrupt(command: &'static str, endpoint: &str) {
    let endpoint = endpoint.to_string();
    let Ok(mut signals) = signal_hook::iterator::Signals::new([libc::SIGINT]) else {
        return;
    };
    let _ = std::thread::Builder::new().name("sigint".into()).spawn(move || {
        if signals.forever().next().is_some() {
            stop(EXIT_INTERRUPTED, "interrupted", command, &endpoint);
        }
    });
}

/// Runs one client command; returns the exit code.
pub fn run(command: &str, args: &[String]) -> i32 {
    crate::sys::default_sigpipe();
    let Some(cmd) = help::find(command) else {
        return usage(&format!("unknown command `{command}`"));
    };
    let opts = match args::parse(cmd, args) {
        Ok(Parsed::Run(o)) => o,
        Ok(Parsed::Help) => {
            print!("{}", help::one(cmd));
            return EXIT_OK;
        }
        Err(e) => return usage_of(cmd.name, &e),
    };
    let given = match opts.endpoint() {
        Ok(a) => a,
        Err(e) => return usage_of(cmd.name, &e),
    };
    let endpoint_given = given.is_some();
    let addr = given.unwrap_or_else(|| Address::Unix(crate::config::default_socket_path()));
    let endpoint = addr.to_string();
    let mut client = Client::new(addr);
    match opts.timeout() {
        Ok(Some(t)) => {
            // Backstop for the socket; the watchdog is what ends us.
            client.timeout = Some(t + Duration::from_secs(1));
            let shown = opts.value("--timeout").unwrap_or_default().to_string();
            give_up_after(t, &shown, cmd.name, &endpoint);
        }
        // Without one, only the card is bounded: what follows it (a blocking
        // send, a stream) may rightly take as long as the task does.
        Ok(None) => client.card_timeout = Some(Duration::from_millis(crate::limits::CLIENT_CARD_TIMEOUT_MS)),
        Err(e) => return usage_of(cmd.name, &e),
    }
    if matches!(cmd.name, "send" | "subscribe") {
        tell_on_interrupt(cmd.name, &endpoint);
    }
    let rest = opts.rest(endpoint_given);
    let result = match cmd.name {
        "card" => no_more(rest, "card").and_then(|()| query::card(&client, &opts)),
        "send" => send::send(&mut client, &opts, rest),
        "get" => one_id(rest, "get").and_then(|id| query::get(&mut client, &opts, id)),
        "list" => no_more(rest, "list").and_then(|()| query::list(&mut client, &opts)),
        "cancel" => one_id(rest, "cancel").and_then(|id| query::cancel(&mut client, &opts, id)),
        "subscribe" => one_id(rest, "subscribe").and_then(|id| send::subscribe(&mut client, &opts, id)),
        "events" => no_more(rest, "events").and_then(|()| query::events(&mut client, &opts)),
        _ => query::operator_command(&mut client, &opts, rest),
    };
    match result {
        Ok(code) => code,
        Err(Failure::Usage(m)) => usage_of(cmd.name, &m),
        Err(Failure::Client(e)) => {
            if opts.json {
                if let ClientError::Rpc(err) = &e {
                    println!("{}", json!({ "error": err }));
                }
            }
            match (&e, endpoint_given) {
                (ClientError::Connect { .. }, false) => eprintln!(
                    "agentd: {e}\n  (no ENDPOINT was given, so this is the socket `agentd serve` listens on \
                     by default; name another first, e.g. `agentd {} unix:///tmp/agentd.sock`)",
                    cmd.name
                ),
                (ClientError::NoCard { .. }, _) => eprintln!("agentd: {e} (give --timeout SECS to wait longer)"),
                _ => eprintln!("agentd: {e}"),
            }
            match e {
                // Refusals: the agent answered, and said no.
                ClientError::Rpc(_) | ClientError::TooLarge { .. } => EXIT_FAILURE,
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

fn usage(msg: &str) -> i32 {
    eprintln!("agentd: {msg} (see `agentd help client`)");
    EXIT_USAGE
}

fn usage_of(command: &str, msg: &str) -> i32 {
    eprintln!("agentd: {command}: {msg} (see `agentd {command} --help`)");
    EXIT_USAGE
}

fn one_id<'a>(rest: &'a [String], cmd: &str) -> Result<&'a str, Failure> {
    match rest {
        [id] => Ok(id),
        [] => Err(Failure::Usage(format!("`{cmd}` needs a TASK_ID"))),
        [_, extra @ ..] => Err(Failure::Usage(format!(
            "unexpected `{}`: `{cmd}` takes one TASK_ID",
            extra.join(" ")
        ))),
    }
}

fn no_more(rest: &[String], cmd: &str) -> Result<(), Failure> {
    match rest {
        [] => Ok(()),
        extra => Err(Failure::Usage(format!(
            "unexpected `{}`: `{cmd}` takes no arguments after the ENDPOINT",
            extra.join(" ")
        ))),
    }
}

/// The message's text: the words after the ENDPOINT, or stdin when there
/// are none (or just `-`). An empty message is a usage error.
fn message_text(rest: &[String]) -> Result<String, Failure> {
    let text = match rest {
        [] => read_stdin()?,
        [t] if t == "-" => read_stdin()?,
        words => words.join(" "),
    };
    if text.trim().is_empty() {
        return Err(Failure::Usage(
            "the message is empty: give its TEXT after the ENDPOINT (`agentd send ENDPOINT hello`) \
             or on standard input (`echo hello | agentd send ENDPOINT`)"
                .into(),
        ));
    }
    Ok(text)
}

fn read_stdin() -> Result<String, Failure> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprintln!("agentd: reading the message from standard input; end it with Ctrl-D");
    }
    let mut s = String::new();
    stdin
        .lock()
        .read_to_string(&mut s)
        .map_err(|e| Failure::Usage(format!("cannot read the message from stdin: {e}")))?;
    Ok(s)
}
