//! The harness's own promises, where a mistake would hide others: what
//! `CI` means, and that a skip is a failure under CI and otherwise a
//! notice that reaches the terminal even though the test passes (the
//! harness captures `eprintln!` of passing tests).

mod common;

use std::ffi::OsStr;
use std::process::Command;

/// Set only for the child run below: the probe skips, nothing else.
const PROBE: &str = "AGENTD_HARNESS_SKIP_PROBE";

#[test]
fn what_ci_means() {
    for (value, ci) in [
        (None, false),
        (Some(""), false),
        (Some("0"), false),
        (Some("false"), false),
        (Some("FALSE"), false),
        (Some(" false "), false),
        (Some("1"), true),
        (Some("true"), true),
        (Some("yes"), true),
        (Some("github-actions"), true),
    ] {
        assert_eq!(common::ci_value_means_ci(value.map(OsStr::new)), ci, "CI={value:?}");
    }
}

#[test]
fn skip_probe() {
    if std::env::var_os(PROBE).is_some() {
        common::skip_or_fail("skip_probe", "the probe's own reason");
    }
}

/// Runs this test binary's `skip_probe` alone, captured as usual (no
/// --nocapture), with `CI` as given.
fn probe(ci: &str) -> (bool, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "skip_probe", "--test-threads=1"])
        .env(PROBE, "1")
        .env("CI", ci)
        .output()
        .expect("the test binary runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_skip_is_seen_when_it_passes_and_fails_under_ci() {
    let (passed, text) = probe("false");
    assert!(passed, "outside CI a skip passes:\n{text}");
    let stderr_notice = "SKIPPED skip_probe:";
    assert!(
        text.contains(stderr_notice) && text.contains("the probe's own reason"),
        "the notice of a passing skip must reach the terminal past the capture:\n{text}"
    );
    let (passed, text) = probe("1");
    assert!(!passed, "under CI=1 a skip fails:\n{text}");
    assert!(
        text.contains("skip_probe cannot run under CI: the probe's own reason"),
        "{text}"
    );
}
