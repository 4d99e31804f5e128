//! Interop with the official MCP Python SDK (`mcp` on PyPI): its
//! `stdio_client` starts `agentd mcp unix://SOCKET` and its `ClientSession`
//! lists tools (names an MCP host accepts) and resources, spawns tasks (blocking with progress, and
//! returnImmediately), answers an input-required turn, subscribes to a task, calls a tool by its dotted name,
//! and cancels a program that ignores SIGTERM and forks. The checks are in
//! `tests/interop/mcp_client.py`, one line each; this side then checks that
//! no process of the cancelled task is left.
//!
//! The SDK is installed once into a venv under `target/mcp-venv` and reused.
//! If it cannot be installed the test fails under CI (see
//! `common::skip_or_fail`) and otherwise skips loudly.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{alive, group_members, Daemon};

/// What pip installs: an SDK that speaks the 2025-11-25 handshake.
const SDK_REQUIREMENT: &str = "mcp>=1.23";

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's python with the MCP Python SDK importable, installing it on first use.
fn sdk_python() -> Result<PathBuf, String> {
    common::venv_python("mcp-venv", SDK_REQUIREMENT, "import mcp.client.stdio, mcp.types")
}

#[test]
fn python_mcp_sdk_drives_tasks_through_the_bridge() {
    let Some(python) = common::needed("the MCP Python SDK", "interop_mcp", sdk_python()) else {
        return;
    };

    let agent = manifest_dir().join("tests/interop/mcp_agent.py");
    let d = Daemon::start(&[
        "--exec",
        &format!("python3 {}", agent.display()),
        "--exec-protocol",
        "jsonl",
        "--set",
        "tasks.cancel_grace_ms=200",
        "--set",
        "tasks.term_grace_ms=300",
    ]);
    let pidfile = d.dir.0.join("stubborn.pids");
    let script = manifest_dir().join("tests/interop/mcp_client.py");
    let out_path = d.dir.0.join("mcp-client.out");
    let args = [common::BIN.as_ref(), d.socket.as_os_str(), pidfile.as_os_str()];
    let (status, output) = common::run_python_driver(&python, &script, &args, &out_path, Duration::from_secs(120));
    match status {
        Some(s) if s.success() => {}
        Some(s) => panic!(
            "the MCP SDK driver failed ({s}):\n{output}\n--- daemon log ---\n{}",
            d.log_text()
        ),
        None => panic!("the MCP SDK driver did not finish within 120 s:\n{output}"),
    }
    assert!(output.contains("all checks passed"), "{output}");

    // subagent_cancel answered CANCELED: by then nothing of the task may be
    // left — the program, its two SIGTERM-ignoring children, its worker.
    let pids: Vec<i32> = std::fs::read_to_string(&pidfile)
        .expect("the stubborn program wrote its pids")
        .split_whitespace()
        .map(|p| p.parse().expect("a pid"))
        .collect();
    let (pgid, processes) = (pids[1], [pids[0], pids[2], pids[3]]);
    assert_eq!(
        group_members(pgid),
        Vec::<i32>::new(),
        "group {pgid} still has processes"
    );
    for p in processes {
        assert!(!alive(p), "pid {p} of the cancelled task survived");
    }
}
