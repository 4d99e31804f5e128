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

/// How long the peer has to answer its card request.
const PEER_CARD_TIMEOUT: Duration = Duration::from_secs(5);

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
