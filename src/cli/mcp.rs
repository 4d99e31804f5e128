//! `agentd mcp [ENDPOINT]`: argv for the MCP bridge (the bridge is
//! `crate::mcp`). Exit codes: 0 at EOF on stdin, 2 usage.

use std::time::Duration;

use super::{EXIT_OK, EXIT_USAGE};
use crate::limits::MCP_EOF_DRAIN_MS;
use crate::transport::Address;

const HELP: &str = "\
Usage: agentd mcp [ENDPOINT] [OPTIONS]

An MCP server on stdio (newline-delimited JSON-RPC 2.0 on stdin/stdout, logs on
stderr) that is an A2A client of the agentd daemon at ENDPOINT: any MCP client
drives the daemon's supervised tasks. It keeps no task state; MCP and A2A
clients see the same tasks. When stdin ends it answers every request it read
(waiting up to --drain-timeout for them), then exits 0; tasks live on in the
daemon.

ENDPOINT is unix:///PATH, vsock://CID:PORT or vsock+uds:///PATH:PORT; without it,
the socket `agentd serve` listens on by default ($XDG_RUNTIME_DIR/agentd/agentd.sock,
or /run/agentd/agentd.sock as root, or /tmp/agentd-UID/agentd.sock).

MCP protocol revisions: 2025-11-25, 2025-06-18, 2025-03-26.
Tools: subagent_spawn, subagent_send, subagent_status, subagent_cancel, subagent_list
(tools/call also takes RFC 0020's dotted names, subagent.spawn …).
Resources: agentd://task/{id} (list, read, subscribe).

Options:
      --log-level LEVEL    error, warn, info, debug, trace, off (default warn; RUST_LOG wins)
      --drain-timeout SECS once stdin ends, how long to wait for requests still
                           being worked on (default 30; 0.5 is fine, 0 = none);
                           past it each is answered with an error saying so
  -h, --help               this text
";

/// `agentd mcp --help`: the text above, and an MCP client's configuration
/// with the default socket of whoever asks (the path depends on the user
/// and on XDG_RUNTIME_DIR, so no fixed one is right for everyone).
pub fn help() -> String {
    let socket = crate::config::default_socket_path();
    format!(
        "{HELP}\n\
         An MCP client's configuration, with the socket `agentd serve` listens on by\n\
         default for you here (the rule is above; written out, it does not depend on\n\
         the environment the MCP client starts the bridge in):\n  \
         {{\"mcpServers\": {{\"agentd\": {{\"command\": \"agentd\",\n                             \
         \"args\": [\"mcp\", \"unix://{}\"]}}}}}}\n",
        socket.display()
    )
}

/// What argv asked for.
#[derive(Debug, PartialEq)]
enum Parsed {
    Help,
    Run {
        addr: Address,
        log_level: String,
        drain: Duration,
    },
}

fn parse(args: &[String]) -> Result<Parsed, String> {
    let mut endpoint: Option<&str> = None;
    let mut log_level = "warn".to_string();
    let mut drain = Duration::from_millis(MCP_EOF_DRAIN_MS);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        match flag {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--log-level" => {
                log_level = inline
                    .or_else(|| it.next().cloned())
                    .ok_or("--log-level needs a value")?;
            }
            "--drain-timeout" => {
                let v = inline
                    .or_else(|| it.next().cloned())
                    .ok_or("--drain-timeout needs a value")?;
                drain = crate::config::parse_secs(&v)
                    .ok_or_else(|| format!("--drain-timeout: `{v}` is not a number of seconds (e.g. 30 or 0.5)"))?;
            }
            f if f.starts_with('-') => {
                let hint = crate::config::nearest(f, &["--log-level", "--drain-timeout", "--help"])
                    .map(|n| format!(" (did you mean `{n}`?)"))
                    .unwrap_or_default();
                return Err(format!("unknown option `{f}`{hint}"));
            }
            e if endpoint.is_none() => endpoint = Some(e),
            e => return Err(format!("unexpected argument `{e}`: `mcp` takes one ENDPOINT")),
        }
    }
    let addr = match endpoint {
        Some(e) => Address::parse(e).map_err(|e| e.to_string())?,
        None => Address::Unix(crate::config::default_socket_path()),
    };
    Ok(Parsed::Run { addr, log_level, drain })
}

pub fn run(args: &[String]) -> i32 {
    match parse(args) {
        Ok(Parsed::Help) => {
            print!("{}", help());
            EXIT_OK
        }
        Ok(Parsed::Run { addr, log_level, drain }) => {
            crate::logging::init(&log_level, "agentd mcp");
            crate::mcp::run(addr, drain)
        }
        Err(e) => {
            eprintln!("agentd: mcp: {e} (see `agentd help mcp`)");
            EXIT_USAGE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn endpoint_defaults_to_the_serve_socket() {
        let Ok(Parsed::Run { addr, log_level, drain }) = parse(&[]) else {
            panic!("no endpoint is fine")
        };
        assert_eq!(addr, Address::Unix(crate::config::default_socket_path()));
        assert_eq!(log_level, "warn");
        assert_eq!(drain, Duration::from_secs(30));
        assert_eq!(
            parse(&args(&["unix:///tmp/x.sock", "--log-level=debug"])),
            Ok(Parsed::Run {
                addr: Address::Unix("/tmp/x.sock".into()),
                log_level: "debug".into(),
                drain: Duration::from_secs(30),
            })
        );
        assert_eq!(parse(&args(&["-h"])), Ok(Parsed::Help));
        assert!(parse(&args(&["tcp://x"])).unwrap_err().contains("expected unix://"));
        assert!(parse(&args(&["--bogus"])).unwrap_err().contains("unknown option"));
        assert_eq!(
            parse(&args(&["--drain-timeot", "1"])).unwrap_err(),
            "unknown option `--drain-timeot` (did you mean `--drain-timeout`?)"
        );
        let Ok(Parsed::Run { drain, .. }) = parse(&args(&["--drain-timeout=0.5"])) else {
            panic!("a fraction is fine")
        };
        assert_eq!(drain, Duration::from_millis(500));
        assert!(parse(&args(&["--drain-timeout", "-1"]))
            .unwrap_err()
            .contains("not a number of seconds"));
        assert!(parse(&args(&["unix:///a", "unix:///b"]))
            .unwrap_err()
            .contains("one ENDPOINT"));
    }
}
