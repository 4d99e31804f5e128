//! Links the static (musl, x86_64) build with `link/worker-text.ld`: the
//! code a fresh task worker runs and the constants it reads, each placed
//! together so the worker faults them in with few faults (2 and 2 instead
//! of ~18 and 3 when the list was made; the script says why, and
//! `link/worker_text.py` regenerates it and measures today's). The list
//! names generic instances by their v0-mangled names, which the same
//! target's rustflags in `.cargo/config.toml` ask for.
//! Placement only: the code and data are the same.
//!
//! The script names functions by their symbols, which another rustc may
//! spell or split differently; an entry that matches nothing is silently
//! ignored by the linker. So the link also writes a map (`worker-text.map`
//! in OUT_DIR, which tests/footprint.rs reads to check what the script
//! placed), and a rustc other than the one the script records gets a
//! warning to regenerate it.

use std::path::Path;
use std::process::Command;

/// The line of the script's header that records the rustc it was made with.
const GENERATED_WITH: &str = " * Generated with: ";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link/worker-text.ld");
    let cfg = |key: &str, want: &str| std::env::var(key).is_ok_and(|v| v == want);
    // The list was measured on x86_64: another architecture's worker runs
    // other code (and its musl other archive members), so it gets no script.
    let x86_64_musl_linux = cfg("CARGO_CFG_TARGET_ENV", "musl")
        && cfg("CARGO_CFG_TARGET_OS", "linux")
        && cfg("CARGO_CFG_TARGET_ARCH", "x86_64");
    if !x86_64_musl_linux {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("link/worker-text.ld");
    println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
    if let Some(out) = std::env::var_os("OUT_DIR") {
        let map = Path::new(&out).join("worker-text.map");
        println!("cargo:rustc-link-arg-bins=-Wl,-Map={}", map.display());
    }
    warn_if_another_rustc(&script);
}

/// Prints a cargo warning when the compiling rustc (cargo gives build
/// scripts its path in RUSTC) is not the one the script was generated with.
/// Any rustc may still build agentd: a stale entry costs page faults, not
/// correctness.
fn warn_if_another_rustc(script: &Path) {
    let Ok(text) = std::fs::read_to_string(script) else {
        println!("cargo:warning=cannot read {}", script.display());
        return;
    };
    let recorded = text.lines().find_map(|l| l.strip_prefix(GENERATED_WITH)).map(str::trim);
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let this = Command::new(&rustc)
        .arg("-V")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match (recorded, this) {
        (Some(recorded), Some(this)) if recorded == this => {}
        (recorded, this) => println!(
            "cargo:warning=link/worker-text.ld was generated with {}; this is {}: regenerate it with \
             python3 link/worker_text.py (a stale list costs a worker page faults, not correctness)",
            recorded.unwrap_or("an unrecorded rustc"),
            this.as_deref().unwrap_or("a rustc whose -V failed"),
        ),
    }
}
