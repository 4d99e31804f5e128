//! Interop with the official A2A JavaScript SDK (`@a2a-js/sdk` 1.x): its
//! client, its card resolver and its JSON-RPC transport talk to the real
//! daemon over the socket, through the shim a JavaScript user would write
//! (`examples/js/agentd_unix.mjs`). The checks themselves are in
//! `tests/interop/js_client.mjs`, which prints one line per check.
//!
//! How the SDK reaches a unix socket: it makes every HTTP request through a
//! `fetch`, and takes a custom one as `fetchImpl` (on
//! `DefaultAgentCardResolver` and `JsonRpcTransportFactory`). The shim's
//! fetch is undici's `fetch` with a `dispatcher` that is an undici `Agent`
//! built with `connect: { socketPath }`. Its `ClientFactory` has one
//! transport factory, registered under agentd's binding URI, which hands out
//! the SDK's own JSON-RPC transport on that fetch; the SDK's card-based
//! interface selection then picks the card's unix interface. No URL the card
//! names is ever dialed.
//!
//! The SDK (and undici) are installed with `npm ci` from
//! `tests/interop/package.json` and its lockfile (pinned versions) into
//! `target/interop-js` once and reused while those files are unchanged. If
//! they cannot be installed (no network, no `node`/`npm`) the test fails
//! under CI (see `common::skip_or_fail`) and otherwise skips loudly. The
//! driver and the shim are copied beside that `node_modules` for each run: ES modules resolve
//! bare imports from where the importing file lives.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Daemon;

/// What `npm ci` installs from (versions pinned there and in the lockfile).
const PACKAGE_JSON: &str = "tests/interop/package.json";
const PACKAGE_LOCK: &str = "tests/interop/package-lock.json";
const DRIVER: &str = "tests/interop/js_client.mjs";
const SHIM: &str = "examples/js/agentd_unix.mjs";

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether `dir/name` holds exactly `want` (`None`: must not exist).
fn same_file(dir: &Path, name: &str, want: &Option<Vec<u8>>) -> bool {
    std::fs::read(dir.join(name)).ok() == *want
}

/// `target/interop-js` with the SDK importable, installing it on first use
/// (and again whenever the committed package.json or lockfile changed).
fn sdk_dir() -> Result<PathBuf, String> {
    let dir = common::target_dir().join("interop-js");
    let read = |p: &str| std::fs::read(manifest_dir().join(p)).map_err(|e| format!("{p}: {e}"));
    let package = Some(read(PACKAGE_JSON)?);
    let lock = read(PACKAGE_LOCK).ok();
    let usable = |dir: &Path| {
        common::run_to_completion(
            Command::new("node")
                .current_dir(dir)
                .args(["--input-type=module", "-e"])
                .arg("await import('@a2a-js/sdk'); await import('@a2a-js/sdk/client'); await import('undici');"),
        )
        .is_ok()
    };
    let current =
        same_file(&dir, "package.json", &package) && (lock.is_none() || same_file(&dir, "package-lock.json", &lock));
    if current && dir.join("node_modules").is_dir() && usable(&dir) {
        return Ok(dir);
    }
    let how = if lock.is_some() { "ci" } else { "install" };
    eprintln!(
        "interop_js: `npm {how}` of {PACKAGE_JSON} into {} (once)",
        dir.display()
    );
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).map_err(|e| format!("{name}: {e}"));
    write("package.json", package.as_deref().unwrap())?;
    match &lock {
        Some(lock) => write("package-lock.json", lock)?,
        None => {
            let _ = std::fs::remove_file(dir.join("package-lock.json"));
        }
    }
    common::run_to_completion(Command::new("npm").current_dir(&dir).args([
        how,
        "--no-audit",
        "--no-fund",
        "--ignore-scripts",
        "--loglevel=error",
    ]))?;
    if !usable(&dir) {
        return Err(format!(
            "npm {how} succeeded but `import('@a2a-js/sdk/client')` fails in {}",
            dir.display()
        ));
    }
    Ok(dir)
}

#[test]
fn js_sdk_client_over_the_socket() {
    let started = Instant::now();
    let dir = match sdk_dir() {
        Ok(d) => d,
        Err(e) => {
            return common::skip_or_fail(
                "js_sdk_client_over_the_socket",
                &format!("the A2A JavaScript SDK could not be installed (needs node, npm and the network): {e}"),
            )
        }
    };
    let installed = started.elapsed();
    for (from, to) in [(DRIVER, "js_client.mjs"), (SHIM, "agentd_unix.mjs")] {
        std::fs::copy(manifest_dir().join(from), dir.join(to))
            .unwrap_or_else(|e| panic!("copy {from} into {}: {e}", dir.display()));
    }

    let echo = Daemon::start(&[]);
    let sleeper = Daemon::start(&["--exec", "sleep 30"]);
    let out_path = echo.dir.0.join("js.out");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = Command::new("node")
        .current_dir(&dir)
        .arg("js_client.mjs")
        .arg(&echo.socket)
        .arg(&sleeper.socket)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("start the node driver");

    let ran = Instant::now();
    let status = common::wait_child(&mut child, Duration::from_secs(120));
    let output = std::fs::read_to_string(&out_path).unwrap_or_default();
    eprintln!(
        "--- {DRIVER} ({:.1} s; SDK ready in {:.1} s) ---\n{output}",
        ran.elapsed().as_secs_f64(),
        installed.as_secs_f64()
    );
    match status {
        Some(s) if s.success() => {}
        // (Each Daemon prints its log as it drops during the panic.)
        Some(s) => panic!("the JavaScript SDK driver failed ({s}):\n{output}"),
        None => panic!("the JavaScript SDK driver did not finish within 120 s:\n{output}"),
    }
    assert!(output.contains("all checks passed"), "{output}");
}
