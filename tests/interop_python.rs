//! Interop with the official A2A Python SDK (`a2a-sdk` 1.x): its client, its
//! card resolver and its JSON-RPC transport talk to the real daemon over the
//! socket, through the shim a Python user would write
//! (`examples/python/agentd_unix.py`). The checks themselves are in
//! `tests/interop/python_client.py`, which prints one line per check.
//!
//! The SDK is installed once into a venv under `target/interop-venv` and
//! reused. If it cannot be installed (no network, no `python3 -m venv`) the
//! test fails under CI (see `common::skip_or_fail`) and otherwise skips
//! loudly.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::Daemon;

/// What pip installs: the SDK's 1.x line (it pulls in httpx).
const SDK_REQUIREMENT: &str = "a2a-sdk>=1,<2";

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's python with the A2A Python SDK importable, installing it on first use.
fn sdk_python() -> Result<PathBuf, String> {
    common::venv_python("interop-venv", SDK_REQUIREMENT, "import a2a.client, httpx")
}

#[test]
fn python_sdk_client_over_the_socket() {
    let Some(python) = common::needed("the A2A Python SDK", "interop_python", sdk_python()) else {
        return;
    };

    let echo = Daemon::start(&[]);
    let sleeper = Daemon::start(&["--exec", "sleep 30"]);
    let script = manifest_dir().join("tests/interop/python_client.py");
    let out_path = echo.dir.0.join("python.out");
    let args = [echo.socket.as_os_str(), sleeper.socket.as_os_str()];
    let (status, output) = common::run_python_driver(&python, &script, &args, &out_path, Duration::from_secs(120));
    match status {
        Some(s) if s.success() => {}
        // (Each Daemon prints its log as it drops during the panic.)
        Some(s) => panic!("the Python SDK driver failed ({s}):\n{output}"),
        None => panic!("the Python SDK driver did not finish within 120 s:\n{output}"),
    }
    assert!(output.contains("all checks passed"), "{output}");
}
