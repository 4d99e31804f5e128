//! The client commands' help: one entry per command, from which both
//! `agentd help client` and each `agentd COMMAND --help` are printed, and
//! the options each command takes (anything else is refused). The texts
//! are static pieces printed side by side, not formatted: less code in the
//! static binary.

/// One client command.
pub struct Command {
    pub name: &'static str,
    /// What follows `agentd` on the usage line.
    pub synopsis: &'static str,
    /// One line, lower case, no full stop: it follows the synopsis in
    /// `agentd help client`.
    pub about: &'static str,
    /// Its own options' lines, as help prints them.
    pub options_text: &'static str,
    /// Its own options; `valued` is the subset that takes a value.
    pub flags: &'static [&'static str],
    pub valued: &'static [&'static str],
}

pub const COMMANDS: &[Command] = &[
    Command {
        name: "card",
        synopsis: "card [ENDPOINT]",
        about: "show the agent card, and check it offers agentd's binding",
        options_text: "",
        flags: &[],
        valued: &[],
    },
    Command {
        name: "send",
        synopsis: "send [ENDPOINT] [TEXT…]",
        about: "send a message (TEXT, or stdin when absent or -); show the task when its turn ends, and what it cost",
        options_text: "      --stream                   show progress live (SendStreamingMessage)
      --task ID                  continue a task waiting for input
      --context ID               send within a conversation (contextId)
      --no-wait                  return at once with the task's id (returnImmediately)
",
        flags: &["--stream", "--task", "--context", "--no-wait"],
        valued: &["--task", "--context"],
    },
    Command {
        name: "get",
        synopsis: "get [ENDPOINT] TASK_ID",
        about: "show a task (and what it cost, once it ended)",
        options_text: "      --history N                the last N messages of its history\n",
        flags: &["--history"],
        valued: &["--history"],
    },
    Command {
        name: "list",
        synopsis: "list [ENDPOINT]",
        about: "list tasks, newest first",
        options_text: "      --context ID               only this conversation's
      --state STATE              only those in STATE (working, input-required, completed…)
      --page-size N              N a page
      --page-token T             the page a previous list named
      --artifacts                include artifacts (with --json)
",
        flags: &["--context", "--state", "--page-size", "--page-token", "--artifacts"],
        valued: &["--context", "--state", "--page-size", "--page-token"],
    },
    Command {
        name: "cancel",
        synopsis: "cancel [ENDPOINT] TASK_ID",
        about: "cancel a task through the kill ladder (returns once it is CANCELED)",
        options_text: "",
        flags: &[],
        valued: &[],
    },
    Command {
        name: "subscribe",
        synopsis: "subscribe [ENDPOINT] TASK_ID",
        about: "show what a task has produced so far, then follow its events until it ends",
        options_text: "      --last-event-id N          resume after event N\n",
        flags: &["--last-event-id"],
        valued: &["--last-event-id"],
    },
    Command {
        name: "events",
        synopsis: "events [ENDPOINT]",
        about: "follow every task's lifecycle (events extension)",
        options_text: "      --from SEQ                 replay the records after SEQ first (0: all kept)\n",
        flags: &["--from"],
        valued: &["--from"],
    },
    Command {
        name: "command",
        synopsis: "command [ENDPOINT] OP [KEY=VALUE…]",
        about: "an operator command (command extension): status, drain, resume, limits [maxRunning=N]",
        options_text: "",
        flags: &[],
        valued: &[],
    },
];

/// The options of every command (`-h`/`--help` is handled before these).
pub const COMMON_FLAGS: &[&str] = &["--json", "--timeout"];
pub const COMMON_VALUED: &[&str] = &["--timeout"];

const COMMON: &str = "\
Options for every command:
      --json                     print the raw JSON results (one per line when streaming)
      --timeout SECS             give up after SECS seconds (0.5 is fine), streaming or not;
                                 a task goes on running, and the message says how to cancel it.
                                 Without it only the card, which every command reads first,
                                 is bounded (5 s, then exit 3); a blocking send, cancel,
                                 subscribe and events then wait as long as the task takes
  -h, --help                     this text

ENDPOINT is unix:///PATH, vsock://CID:PORT, or vsock+uds:///PATH:PORT (a guest's
port through a hybrid-vsock socket, as Firecracker and vhost-device-vsock offer).
Without an ENDPOINT the client dials the socket `agentd serve` listens on by
default ($XDG_RUNTIME_DIR/agentd/agentd.sock, /run/agentd/agentd.sock as root,
else /tmp/agentd-UID/agentd.sock). The client reads the agent's card, checks it
offers agentd's binding for that transport, and always sends to ENDPOINT itself.
Words after `--` are never options or the ENDPOINT (`agentd send EP -- -v`).

Exit status: 0 success; 1 the agent answered with an error, or refused the
message as larger than its http.body_max_bytes; 2 usage; 3 the endpoint could
not be reached or speaks no binding we know; 4 the task ended FAILED, REJECTED
or CANCELED; 5 --timeout ran out; 130 interrupted by Ctrl-C (a task goes on;
the message says which).
";

pub fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// `agentd help client`: every command.
pub fn all() -> String {
    let mut s = String::from(
        "Usage: agentd COMMAND [ENDPOINT] [ARGS] [OPTIONS]\n\n\
         Talk to an A2A agent on a unix socket or vsock.\n\nCommands:\n",
    );
    for c in COMMANDS {
        s.push_str("  ");
        s.push_str(c.synopsis);
        // Synopses are ASCII but for `…`, which is one column wide.
        let width = c.synopsis.chars().count();
        s.push_str(&" ".repeat(33usize.saturating_sub(2 + width).max(1)));
        s.push_str(c.about);
        s.push('\n');
        s.push_str(c.options_text);
    }
    s.push('\n');
    s.push_str(COMMON);
    s
}

/// `agentd COMMAND --help`: that command.
pub fn one(c: &Command) -> String {
    let mut s = format!("Usage: agentd {} [OPTIONS]\n\n{}.\n", c.synopsis, capitalised(c.about));
    if !c.options_text.is_empty() {
        s.push_str("\nOptions:\n");
        s.push_str(c.options_text);
    }
    s.push('\n');
    s.push_str(COMMON);
    s.push_str("\n`agentd help client` shows every client command.\n");
    s
}

/// The `about` texts are ASCII; `char::to_uppercase` would link Unicode's
/// case table (14 KB of the static binary).
fn capitalised(s: &str) -> String {
    let mut s = s.to_string();
    if let Some(first) = s.get_mut(..1) {
        first.make_ascii_uppercase();
    }
    s
}
