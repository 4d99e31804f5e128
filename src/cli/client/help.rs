//! The client commands' help: one entry per command, from which both
//! `agentd help client` and each `agentd COMMAND --help` are made, and
//! the options each command takes (anything else is refused).

/// One client command as its help shows it.
pub struct Command {
    pub name: &'static str,
    /// What follows `agentd` on the usage line.
    pub synopsis: &'static str,
    pub about: &'static str,
    /// `(flag, value name or "", what it does)`; --json, --timeout and
    /// --help go with every command and are not repeated here.
    pub options: &'static [(&'static str, &'static str, &'static str)],
}

pub const COMMANDS: &[Command] = &[
    Command {
        name: "card",
        synopsis: "card [ENDPOINT]",
        about: "show the agent card, and check it offers agentd's binding",
        options: &[],
    },
    Command {
        name: "send",
        synopsis: "send [ENDPOINT] [TEXT…]",
        about: "send a message (TEXT, or stdin when absent or -) and show the task once its turn ends",
        options: &[
            ("--stream", "", "show progress live (SendStreamingMessage)"),
            ("--task", "ID", "continue a task waiting for input"),
            ("--context", "ID", "send within a conversation (contextId)"),
            ("--no-wait", "", "return at once with the task's id (returnImmediately)"),
        ],
    },
    Command {
        name: "get",
        synopsis: "get [ENDPOINT] TASK_ID",
        about: "show a task",
        options: &[("--history", "N", "the last N messages of its history")],
    },
    Command {
        name: "list",
        synopsis: "list [ENDPOINT]",
        about: "list tasks, newest first",
        options: &[
            ("--context", "ID", "only this conversation's"),
            (
                "--state",
                "STATE",
                "only those in STATE (working, input-required, completed…)",
            ),
            ("--page-size", "N", "N a page"),
            ("--page-token", "T", "the page a previous list named"),
            ("--artifacts", "", "include artifacts (with --json)"),
        ],
    },
    Command {
        name: "cancel",
        synopsis: "cancel [ENDPOINT] TASK_ID",
        about: "cancel a task through the kill ladder (returns once it is CANCELED)",
        options: &[],
    },
    Command {
        name: "subscribe",
        synopsis: "subscribe [ENDPOINT] TASK_ID",
        about: "follow a task's events until it ends",
        options: &[("--last-event-id", "N", "resume after event N")],
    },
    Command {
        name: "events",
        synopsis: "events [ENDPOINT]",
        about: "follow every task's lifecycle (events extension)",
        options: &[("--from", "SEQ", "replay the records after SEQ first (0: all kept)")],
    },
    Command {
        name: "command",
        synopsis: "command [ENDPOINT] OP [KEY=VALUE…]",
        about: "an operator command (command extension): status, drain, resume, limits [maxRunning=N]",
        options: &[],
    },
];

/// The options of every command.
pub const COMMON: &[(&str, &str, &str)] = &[
    ("--json", "", "print the raw JSON results (one per line when streaming)"),
    (
        "--timeout",
        "SECS",
        "give up after SECS seconds (0.5 is fine), streaming or not; a task goes on running, and the message says how to cancel it",
    ),
    ("-h, --help", "", "this text"),
];

const ENDPOINT: &str = "\
ENDPOINT is unix:///PATH, vsock://CID:PORT, or vsock+uds:///PATH:PORT (a guest's
port through a hybrid-vsock socket, as Firecracker and vhost-device-vsock offer).
Without an ENDPOINT the client dials the socket `agentd serve` listens on by
default ($XDG_RUNTIME_DIR/agentd/agentd.sock, /run/agentd/agentd.sock as root,
else /tmp/agentd-UID/agentd.sock). The client reads the agent's card, checks it
offers agentd's binding for that transport, and always sends to ENDPOINT itself.
Words after `--` are never options or the ENDPOINT (`agentd send EP -- -v`).
";

const EXIT: &str = "\
Exit status: 0 success; 1 the agent answered with an error; 2 usage;
3 the endpoint could not be reached or speaks no binding we know;
4 the task ended FAILED, REJECTED or CANCELED; 5 --timeout ran out;
130 interrupted by Ctrl-C (a task goes on; the message says which).
";

pub fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name == name)
}

fn option_lines(out: &mut String, options: &[(&str, &str, &str)], indent: usize) {
    for (flag, value, what) in options {
        let left = if value.is_empty() {
            flag.to_string()
        } else {
            format!("{flag} {value}")
        };
        let pad = if flag.starts_with("--") { "    " } else { "" };
        let left = format!("{:indent$}{pad}{left}", "");
        if left.len() < 33 {
            out.push_str(&format!("{left:<33}{what}\n"));
        } else {
            out.push_str(&format!("{left}\n{:33}{what}\n", ""));
        }
    }
}

/// `agentd help client`: every command.
pub fn all() -> String {
    let mut s = String::from(
        "Usage: agentd COMMAND [ENDPOINT] [ARGS] [OPTIONS]\n\n\
         Talk to an A2A agent on a unix socket or vsock.\n\nCommands:\n",
    );
    for c in COMMANDS {
        s.push_str(&format!("  {:<31}{}\n", c.synopsis, c.about));
        option_lines(&mut s, c.options, 4);
    }
    s.push_str("\nOptions for every command:\n");
    option_lines(&mut s, COMMON, 2);
    s.push('\n');
    s.push_str(ENDPOINT);
    s.push('\n');
    s.push_str(EXIT);
    s
}

/// `agentd COMMAND --help`: that command.
pub fn one(c: &Command) -> String {
    let mut s = format!("Usage: agentd {} [OPTIONS]\n\n{}.\n", c.synopsis, capitalised(c.about));
    if !c.options.is_empty() {
        s.push_str("\nOptions:\n");
        option_lines(&mut s, c.options, 2);
    }
    s.push_str("\nOptions for every command:\n");
    option_lines(&mut s, COMMON, 2);
    s.push('\n');
    s.push_str(ENDPOINT);
    s.push('\n');
    s.push_str(EXIT);
    s.push_str("\n`agentd help client` shows every client command.\n");
    s
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}
