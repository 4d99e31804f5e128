//! agentd: an A2A 1.0 agent (JSON-RPC binding) served as HTTP/1.1 over unix
//! domain sockets, with every task run in a supervised child process.
//!
//! The library exists so `tests/` and `fuzz/` can reach the parsers; the
//! binary in `main.rs` only hands argv to [`cli::main`].
#![deny(unsafe_code)]

pub mod a2a;
pub mod append;
pub mod cgroup;
pub mod cli;
pub mod client;
pub mod clock;
pub mod config;
pub mod control;
pub mod cost;
pub mod ext;
pub mod http;
pub mod ids;
pub mod init;
pub mod limits;
pub mod logging;
pub mod mcp;
pub mod metrics;
pub mod principal;
pub mod procman;
pub mod rpc;
pub mod server;
pub mod sys;
pub mod systemd;
pub mod tasks;
pub mod trace;
pub mod transport;
pub mod vital;
pub mod wire;
pub mod worker;
