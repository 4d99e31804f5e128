//! `agentd serve --check`: what a configuration can be checked for without
//! starting anything, and a plain list of what was not checked.
//!
//! Checked before this runs (and again by `serve` at start): every key and
//! flag, the exec program (an executable on the task's PATH, or a path),
//! an interpreter's script operand. Checked here: the peer's card, when
//! the peer answers. Never checked: whether the listeners can be bound and
//! what the program does with a message — only running them says.

use std::path::Path;
use std::time::Duration;

use super::{EXIT_OK, EXIT_USAGE};
use crate::client::{Client, ClientError};
use crate::config::{Config, Runner};
use crate::transport::Address;

/// How long the peer has to answer its card request: as long as the
/// client commands give any agent.
const PEER_CARD_TIMEOUT: Duration = Duration::from_millis(crate::limits::CLIENT_CARD_TIMEOUT_MS);

/// Prints the summary; returns the exit code (2 when the peer answers
/// with a card agentd cannot use).
pub fn report(cfg: &Config, program: Option<&Path>, script: Option<&Path>) -> i32 {
    let mut not_checked =
        vec!["whether the listen addresses can be bound (serve finds out when it starts)".to_string()];
    if let Some(p) = program {
        match script {
            Some(s) => println!(
                "agentd: agent.exec runs {} with the script {}",
                p.display(),
                s.display()
            ),
            None => println!("agentd: agent.exec runs {}", p.display()),
        }
        not_checked.push("what the program does with a task's message (send one to see)".into());
    }
    if let Some(warning) = shell_syntax_warning(&cfg.runner) {
        println!("agentd: warning: {warning}");
    }
    if let Runner::Peer { address } = &cfg.runner {
        match check_peer(address) {
            Peer::Usable(name) => println!("agentd: agent.peer {address} answers: {name}, with agentd's binding"),
            Peer::NotReached(why) => {
                println!("agentd: agent.peer {address} was not reached ({why}); tasks fail until it answers");
                not_checked.push(format!("the card of the peer at {address}"));
            }
            Peer::Unusable(e) => {
                eprintln!("agentd: agent.peer: {e}");
                return EXIT_USAGE;
            }
        }
    }
    for unused in cfg.unused_runner_keys() {
        println!("agentd: note: {unused}");
    }
    println!(
        "agentd: configuration is valid: listen {}; runner {}; max_running {}",
        cfg.listeners()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        cfg.runner.name(),
        cfg.tasks.max_running
    );
    println!("agentd: not checked: {}", not_checked.join("; "));
    EXIT_OK
}

enum Peer {
    /// Its card names agentd's binding for the address: the card's name
    /// and version.
    Usable(String),
    /// Nothing answered (yet): it may be started later.
    NotReached(String),
    /// It answered, and what it answered will not do.
    Unusable(ClientError),
}

fn check_peer(address: &Address) -> Peer {
    let mut client = Client::new(address.clone());
    client.timeout = Some(PEER_CARD_TIMEOUT);
    match client.card() {
        Ok(card) => match client.check_interface(&card) {
            Ok(()) => Peer::Usable(format!(
                "`{}` {}",
                card["name"].as_str().unwrap_or("?"),
                card["version"].as_str().unwrap_or("?")
            )),
            Err(e) => Peer::Unusable(e),
        },
        Err(ClientError::Connect { source, .. }) => Peer::NotReached(match source.kind() {
            std::io::ErrorKind::NotFound => "no socket there".into(),
            std::io::ErrorKind::ConnectionRefused => "nothing listens on it".into(),
            _ => source.to_string(),
        }),
        // Accepted, then silent: as good as not there yet.
        Err(ClientError::TimedOut { .. }) => {
            Peer::NotReached(format!("no card within {} s", PEER_CARD_TIMEOUT.as_secs()))
        }
        Err(e) => Peer::Unusable(e),
    }
}

/// Shells, which do read their `-c` line as shell syntax.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"];

/// A word a shell would read as syntax (a pipe, a redirection, a list, an
/// expansion): it reaches the program as it is, since no shell runs it.
/// Only whole words and their edges count, so a quoted script such as
/// `python3 -c 'import os; …'` or a regex such as `grep 'a|b'` is not one.
fn looks_like_shell_syntax(word: &str) -> bool {
    let redirection = word.trim_start_matches(|c: char| c.is_ascii_digit());
    word.contains('`')
        || word.contains("$(")
        || word.contains("${")
        || (word.len() > 1 && word.starts_with('$'))
        || word.starts_with(['|', '&', ';', '<', '>'])
        || word.ends_with([';', '|'])
        || word.ends_with("&&")
        || (redirection.len() < word.len() && redirection.starts_with(['<', '>']))
}

/// What to tell a user whose agent.exec holds shell syntax that no shell
/// will read, and how to have one read it; `None` when there is none, or
/// when the program is a shell given its line with `-c`.
pub fn shell_syntax_warning(runner: &Runner) -> Option<String> {
    let Runner::Exec { argv } = runner else { return None };
    let program = argv.first()?;
    let name = Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(program);
    let has_c = argv[1..]
        .iter()
        .any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('c'));
    if SHELLS.contains(&name) && has_c {
        return None;
    }
    let syntax: Vec<String> = argv
        .iter()
        .filter(|w| looks_like_shell_syntax(w))
        .map(|w| format!("`{w}`"))
        .collect();
    if syntax.is_empty() {
        return None;
    }
    let arguments = if syntax.len() == 1 {
        "a plain argument"
    } else {
        "plain arguments"
    };
    // The exact line to write, when the words need no quoting of their own.
    let plain = argv
        .iter()
        .all(|w| !w.contains(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '\\')));
    let line = if plain { argv.join(" ") } else { "...".to_string() };
    Some(format!(
        "no shell runs agent.exec, so `{name}` gets {} as {arguments}; to run a shell line, \
         write --exec 'sh -c \"{line}\"'",
        syntax.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warning(line: &str) -> Option<String> {
        let argv = crate::config::split_command(line).unwrap();
        shell_syntax_warning(&Runner::Exec { argv })
    }

    #[test]
    fn shell_syntax_in_exec_words_is_warned_about() {
        assert_eq!(
            warning("tr a-z A-Z | rev").as_deref(),
            Some(
                "no shell runs agent.exec, so `tr` gets `|` as a plain argument; to run a shell line, \
                 write --exec 'sh -c \"tr a-z A-Z | rev\"'"
            )
        );
        for line in [
            "cat > out.txt",
            "cat <in",
            "cat 2>/dev/null",
            "cat 2>&1",
            "echo $HOME",
            "echo ${X}",
            "echo `date`",
            "echo $(date)",
            "true && cat",
            "true; cat",
            "cat ; true",
            "sleep 1 &",
            "cat|",
        ] {
            assert!(warning(line).is_some(), "{line}");
        }
        let w = warning("cat 'a b' | rev").unwrap();
        assert!(w.ends_with("write --exec 'sh -c \"...\"'"), "{w}");
        let w = warning("cat > out.txt ; true").unwrap();
        assert!(w.contains("so `cat` gets `>`, `;` as plain arguments;"), "{w}");
    }

    #[test]
    fn programs_that_read_their_own_syntax_are_left_alone() {
        for line in [
            "tr a-z A-Z",
            "sh -c 'tr a-z A-Z | rev'",
            "/bin/bash -ec 'cat > /dev/null; echo $HOME'",
            "python3 -c 'import sys; print(sys.argv)'",
            "grep -E 'a|b'",
            "awk '{print $1}'",
            "sed s/$/x/",
            "printf $",
            "curl http://x/?a=1&b=2",
        ] {
            assert_eq!(warning(line), None, "{line}");
        }
        assert_eq!(shell_syntax_warning(&Runner::Echo), None);
    }
}
