//! argv → subcommand: hand-written flag parsing, help texts, exit codes.
//! Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error.

use std::io::Write;
use std::path::PathBuf;

mod check;
mod client;
mod mcp;

use crate::config::{self, Config};

pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILURE: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

const USAGE: &str = "\
agentd — an A2A 1.0 agent on a unix socket or vsock; every task a supervised process

Usage:
  agentd serve [OPTIONS]                 run the daemon (the built-in echo agent by default)
  agentd card|send|get|list|cancel|subscribe|events|command [ENDPOINT] …
                                         talk to an agent (see `agentd help client`)
  agentd mcp [ENDPOINT]                  an MCP server on stdio driving the daemon's tasks
                                         (see `agentd help mcp`)
  agentd help [COMMAND|client|config]    this text, a command's options (as with
                                         `agentd COMMAND --help`), every client
                                         command's, or every config key
  agentd version                         print the version

Run `agentd help serve` for the daemon's options, `agentd help COMMAND` or
`agentd COMMAND --help` for a command's, and `man agentd` for the manual (in a
clone, before it is installed: `man -l man/agentd.8`; `cargo install` does not
install it).
";

const SERVE_HELP: &str = "\
Usage: agentd serve [OPTIONS]

Serves the A2A 1.0 JSON-RPC binding as HTTP/1.1 on unix sockets and vsock. Each task
runs in its own supervised child process. Stops on SIGTERM or SIGINT: running
tasks are cancelled through the kill ladder, the socket is removed, exit 0.
A second SIGTERM kills every task at once.

Options:
  -l, --listen ADDRESS     listen on unix:///ABSOLUTE/PATH or vsock://CID:PORT
                           (CID -1 = any; repeatable; = a2a.listen)
  -c, --config FILE        read `key: value` lines from FILE (see `agentd help config`)
  -e, --exec 'PROGRAM ARGS'
                           run PROGRAM for each task (= agent.exec; no shell involved,
                           so for a pipe write --exec 'sh -c \"a | b\"'; of --exec
                           and --peer the last one given wins)
      --exec-protocol P    how to talk to PROGRAM: text or jsonl (= agent.exec_protocol)
  -p, --peer ENDPOINT      delegate every task to the A2A agent at ENDPOINT
                           (unix://, vsock:// or vsock+uds://; = agent.peer)
  -s, --set KEY=VALUE      set any config key (repeatable; after --config)
      --log-level LEVEL    error, warn, info, debug, trace, off (= log.level; RUST_LOG wins)
      --check              check the configuration, the --exec program (and the
                           script an interpreter runs) and the --peer's card,
                           print what was and was not checked, and exit
  -h, --help               this text

With no --listen the socket is $XDG_RUNTIME_DIR/agentd/agentd.sock, or
/run/agentd/agentd.sock as root, or /tmp/agentd-UID/agentd.sock.

Under systemd: READY=1, STATUS=, STOPPING=1 and WATCHDOG=1 go to NOTIFY_SOCKET
(a path, @abstract or vsock:CID:PORT), and sockets passed by socket activation
(LISTEN_FDS) are served instead of --listen. See SYSTEMD in `man agentd`.
GET /metrics on the socket answers Prometheus text (see METRICS); a request's
traceparent/tracestate reach the task's program as TRACEPARENT/TRACESTATE.

Examples:
  agentd serve
  agentd serve --listen unix:///tmp/a.sock --exec 'tr a-z A-Z'
  curl --unix-socket /tmp/a.sock http://agentd/.well-known/agent-card.json
";

/// Entry point for the binary: returns the process exit code.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprint!("{USAGE}");
        return EXIT_USAGE;
    };
    let rest = &args[1..];
    match cmd.as_str() {
        "serve" => serve(rest),
        name if client::is_command(name) => client::run(cmd, rest),
        "mcp" => mcp::run(rest),
        "__forkserver" => crate::worker::forkserver::main(),
        "help" | "-h" | "--help" => help(rest.first().map(String::as_str)),
        "version" | "-V" | "--version" => {
            println!("agentd {}", env!("CARGO_PKG_VERSION"));
            EXIT_OK
        }
        other => match nearest_command(other) {
            // A near miss needs only the name, not the whole overview.
            Some(near) => {
                eprintln!(
                    "agentd: unknown command `{other}` (did you mean `{near}`? `agentd help` lists every command)"
                );
                EXIT_USAGE
            }
            None => {
                eprintln!("agentd: unknown command `{other}`\n\n{USAGE}");
                EXIT_USAGE
            }
        },
    }
}

const VERSION_HELP: &str = "\
Usage: agentd version

Prints agentd and its version (-V and --version are the same).
";

/// Every command `agentd` takes, for suggestions.
fn command_names() -> Vec<&'static str> {
    let mut names = vec!["serve", "mcp", "help", "version"];
    names.extend(client::names());
    names
}

fn nearest_command(word: &str) -> Option<&'static str> {
    config::nearest(word, &command_names())
}

fn help(topic: Option<&str>) -> i32 {
    let mut out = std::io::stdout().lock();
    let _ = match topic {
        None | Some("help") => write!(out, "{USAGE}"),
        Some("serve") => write!(out, "{SERVE_HELP}"),
        Some("client") => write!(out, "{}", client::help()),
        Some("mcp") => write!(out, "{}", mcp::help()),
        Some("config") => write!(out, "{}", config_help()),
        Some("version") => write!(out, "{VERSION_HELP}"),
        Some(name) if client::is_command(name) => write!(out, "{}", client::command_help(name).unwrap_or_default()),
        Some(other) => {
            let hint = nearest_command(other)
                .map(|near| format!(" (did you mean `{near}`?)"))
                .unwrap_or_default();
            eprintln!("agentd: no help on `{other}`{hint}; try `agentd help` for every command, `help client` or `help config`");
            return EXIT_USAGE;
        }
    };
    EXIT_OK
}

/// Every config key with its value form, default and meaning.
pub fn config_help() -> String {
    let mut s = String::from(
        "Config file: one `key: value` per line; lines starting with # are comments.\n\
         Repeatable keys may appear several times. Flags given after --config win.\n\n",
    );
    for k in config::KEYS {
        s.push_str(&format!("{}: {}\n", k.name, k.value));
        if !k.default.is_empty() {
            s.push_str(&format!("    default: {}\n", k.default));
        }
        s.push_str(&format!("    {}\n", k.help));
    }
    s
}

/// `serve`'s flags, for suggestions.
const SERVE_FLAGS: &[&str] = &[
    "--listen",
    "--config",
    "--exec",
    "--exec-protocol",
    "--peer",
    "--set",
    "--log-level",
    "--check",
    "--help",
];

/// Parses `serve`'s flags into a Config. Errors are one line for stderr.
pub fn parse_serve(args: &[String]) -> Result<Option<Config>, String> {
    let mut cfg = Config::default();
    let mut sets: Vec<(String, String, String)> = Vec::new(); // (flag, key, value)
    let mut config_file: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{name} needs a value (see `agentd help serve`)"))
        };
        match flag {
            "-h" | "--help" => return Ok(None),
            "-l" | "--listen" => sets.push((flag.into(), "a2a.listen".into(), value(flag)?)),
            "-c" | "--config" => config_file = Some(PathBuf::from(value(flag)?)),
            "-e" | "--exec" => sets.push((flag.into(), "agent.exec".into(), value(flag)?)),
            "--exec-protocol" => sets.push((flag.into(), "agent.exec_protocol".into(), value(flag)?)),
            "-p" | "--peer" => sets.push((flag.into(), "agent.peer".into(), value(flag)?)),
            "--log-level" => sets.push((flag.into(), "log.level".into(), value(flag)?)),
            "-s" | "--set" => {
                let kv = value(flag)?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("{flag} expects KEY=VALUE, found `{kv}`"))?;
                sets.push((flag.into(), k.trim().into(), v.trim().into()));
            }
            other if other.starts_with('-') => {
                let hint = config::nearest(other, SERVE_FLAGS)
                    .map(|f| format!("did you mean `{f}`? "))
                    .unwrap_or_default();
                return Err(format!("unknown option `{other}` ({hint}see `agentd help serve`)"));
            }
            other => return Err(format!("unexpected argument `{other}` (see `agentd help serve`)")),
        }
    }
    if let Some(path) = &config_file {
        cfg.load_file(path).map_err(|e| e.to_string())?;
    }
    for (flag, key, value) in sets {
        cfg.set(&key, &value).map_err(|e| format!("{flag}: {e}"))?;
    }
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(Some(cfg))
}

fn serve(args: &[String]) -> i32 {
    let check_only = args.iter().any(|a| a == "--check");
    let args: Vec<String> = args.iter().filter(|a| *a != "--check").cloned().collect();
    let refuse = |e: String| {
        eprintln!("agentd: {e}");
        if crate::init::is_guest_init() {
            // PID 1 must not exit (the kernel would panic): say why on
            // the console, then power the guest off.
            crate::sys::power_off();
        }
        EXIT_USAGE
    };
    let cfg = match parse_serve(&args) {
        Ok(Some(cfg)) => cfg,
        Ok(None) => {
            print!("{SERVE_HELP}");
            return EXIT_OK;
        }
        Err(e) => return refuse(e),
    };
    let (program, script) = match cfg.check_program().and_then(|p| Ok((p, cfg.check_script()?))) {
        Ok(checked) => checked,
        Err(e) => return refuse(e),
    };
    if check_only {
        return check::report(&cfg, program.as_deref(), script.as_deref());
    }
    let guest_init = crate::init::is_guest_init();
    // As a guest's /init, stdio (for the log) exists only after /dev is up.
    let prepared = if guest_init {
        crate::init::prepare(&cfg.init_modules)
    } else {
        Ok(())
    };
    crate::logging::init(&cfg.log_level, "agentd");
    for unused in cfg.unused_runner_keys() {
        log::warn!("config.unused_key {unused}");
    }
    if let Some(warning) = check::shell_syntax_warning(&cfg.runner) {
        log::warn!("config.shell_syntax {warning}");
    }
    if let Err(e) = prepared {
        log::error!("agentd.init {e}");
        eprintln!("agentd: init: {e}");
        crate::sys::power_off();
    }
    let code = match crate::server::serve(cfg) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            log::error!("{e}");
            EXIT_FAILURE
        }
    };
    if guest_init {
        log::info!("agentd.poweroff exit_code={code}");
        crate::sys::power_off();
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn flags_map_to_keys() {
        let cfg = parse_serve(&args(&[
            "--listen",
            "unix:///tmp/a.sock",
            "-e",
            "tr a-z A-Z",
            "--set=tasks.max_running=3",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(cfg.listen.len(), 1);
        assert_eq!(cfg.tasks.max_running, 3);
        assert_eq!(
            cfg.runner,
            config::Runner::Exec {
                argv: vec!["tr".into(), "a-z".into(), "A-Z".into()]
            }
        );
    }

    #[test]
    fn errors_name_the_flag() {
        assert_eq!(
            parse_serve(&args(&["--set", "tasks.max_running=0"])).unwrap_err(),
            "--set: tasks.max_running: must be at least 1"
        );
        assert!(parse_serve(&args(&["--listen"])).unwrap_err().contains("needs a value"));
        assert!(parse_serve(&args(&["--bogus"])).unwrap_err().contains("unknown option"));
        assert!(parse_serve(&args(&["--help"])).unwrap().is_none());
    }
}
