//! The footprint README promises, checked where it can drift: the direct
//! dependencies are exactly the design card's nine, `cargo tree -e normal`
//! has at most 26 crates in all, and the static musl binary is at most
//! 2.5 MiB.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
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
const STATIC_BINARY_MAX_BYTES: u64 = 2560 * 1024;

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
    let card: BTreeSet<String> = DESIGN_CARD.iter().map(|c| c.to_string()).collect();
    let outside: Vec<&String> = direct.difference(&card).collect();
    let missing: Vec<&String> = card.difference(&direct).collect();
    assert!(
        outside.is_empty() && missing.is_empty(),
        "the direct dependencies are the design card's nine, exactly: outside it {outside:?}, missing {missing:?}"
    );
}

#[test]
fn the_static_binary_fits_in_2_5_mib() {
    if !common::musl_target_installed() {
        return common::skip_or_fail(
            "the_static_binary_fits_in_1_5_mib",
            "the x86_64-unknown-linux-musl target is not installed (rustup target add x86_64-unknown-linux-musl)",
        );
    }
    // Built where the VM test builds it: one build for both.
    let bin = common::static_agentd();
    let len = std::fs::metadata(&bin).expect("the static binary exists").len();
    assert!(
        len <= STATIC_BINARY_MAX_BYTES,
        "{} is {len} bytes, over the {STATIC_BINARY_MAX_BYTES} (2.5 MiB) README promises",
        bin.display()
    );
}
