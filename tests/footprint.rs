//! The footprint README promises, checked where it can drift: the crates in
//! `cargo tree -e normal` (the design card's set, vsock among them, at most
//! 26 in all) and the size of the static musl binary (at most 1.5 MiB).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The design card's dependency set (DESIGN.md): the only direct
/// dependencies allowed.
const DESIGN_CARD: [&str; 9] = [
    "serde",
    "serde_json",
    "httparse",
    "vsock",
    "libc",
    "log",
    "env_logger",
    "crossbeam-channel",
    "signal-hook",
];
const CRATES_MAX: usize = 26;
const STATIC_BINARY_MAX_BYTES: u64 = 1536 * 1024;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The crate names `cargo tree -e normal` lists, at most `depth` deep.
fn tree(depth: Option<u32>) -> BTreeSet<String> {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["tree", "-e", "normal", "--prefix", "none", "--offline"]);
    if let Some(d) = depth {
        cmd.args(["--depth", &d.to_string()]);
    }
    let out = cmd.current_dir(repo()).output().expect("cargo tree runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_dependency_tree_is_the_design_cards_and_small() {
    let all = tree(None);
    assert!(all.contains("vsock"), "{all:?}");
    assert!(
        all.len() <= CRATES_MAX,
        "{} crates (at most {CRATES_MAX}): {all:?}",
        all.len()
    );
    let mut direct = tree(Some(1));
    direct.remove("agentd");
    let outside: Vec<&String> = direct.iter().filter(|c| !DESIGN_CARD.contains(&c.as_str())).collect();
    assert!(
        outside.is_empty(),
        "direct dependencies outside the design card: {outside:?}"
    );
}

/// The static binary, built where the VM test builds it (one build for
/// both), or `None` when the musl target is missing outside CI.
fn static_agentd() -> Option<PathBuf> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("x86_64-unknown-linux-musl"));
    if !installed {
        assert!(
            std::env::var_os("CI").is_none(),
            "the x86_64-unknown-linux-musl target is not installed"
        );
        eprintln!("SKIPPING the static size check: no x86_64-unknown-linux-musl target");
        return None;
    }
    let target = std::env::var_os("AGENTD_VM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/vm"))
        .join("build");
    let out = Command::new(env!("CARGO"))
        .args(["build", "--release", "-j2", "--target", "x86_64-unknown-linux-musl"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(repo())
        .output()
        .expect("cargo build runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some(target.join("x86_64-unknown-linux-musl/release/agentd"))
}

#[test]
fn the_static_binary_fits_in_1_5_mib() {
    let Some(bin) = static_agentd() else { return };
    let len = std::fs::metadata(&bin).expect("the static binary exists").len();
    assert!(
        len <= STATIC_BINARY_MAX_BYTES,
        "{} is {len} bytes, over the {STATIC_BINARY_MAX_BYTES} (1.5 MiB) README promises",
        bin.display()
    );
}
