//! Interop with the official A2A Python SDK (`a2a-sdk` 1.x): its client, its
//! card resolver and its JSON-RPC transport talk to the real daemon over the
//! socket, through the shim a Python user would write
//! (`examples/python/agentd_unix.py`). The checks themselves are in
//! `tests/interop/python_client.py`, which prints one line per check.
//!
//! The SDK is installed once into a venv under `target/interop-venv` and
//! reused. If it cannot be installed (no network, no `python3 -m venv`) the
//! test fails under CI (`CI` set) and otherwise skips loudly.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = Command::new(&python)
        .arg(&script)
        .arg(&echo.socket)
        .arg(&sleeper.socket)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("start the python driver");

    let started = Instant::now();
    let status = common::wait_child(&mut child, Duration::from_secs(120));
    let output = std::fs::read_to_string(&out_path).unwrap_or_default();
    eprintln!(
        "--- {} ({:.1} s) ---\n{output}",
        script.display(),
        started.elapsed().as_secs_f64()
    );
    match status {
        Some(s) if s.success() => {}
        // (Each Daemon prints its log as it drops during the panic.)
        Some(s) => panic!("the Python SDK driver failed ({s}):\n{output}"),
        None => panic!("the Python SDK driver did not finish within 120 s:\n{output}"),
    }
    assert!(output.contains("all checks passed"), "{output}");
}
