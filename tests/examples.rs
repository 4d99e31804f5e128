//! The shipped examples stay true to the code: each configuration they
//! contain is one `agentd serve --check` accepts.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

fn repo(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

fn check(args: &[&str]) {
    let out = Command::new(BIN)
        .arg("serve")
        .args(args)
        .arg("--check")
        .output()
        .unwrap();
    // The program an example names lives in its image or on the operator's
    // machine, not here: `--check` refusing only that (it checks the program
    // after everything else) means the rest of the configuration is valid.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let program_elsewhere = stderr.starts_with("agentd: agent.exec: `")
        && stderr
            .trim_end()
            .ends_with("does not exist: install it or correct the path");
    assert!(
        out.status.success() || (out.status.code() == Some(2) && program_elsewhere),
        "agentd serve {args:?} --check: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn example_config_file_is_valid() {
    check(&["--config", &repo("examples/agentd.conf")]);
    // And --check does refuse a bad one.
    let dir = std::env::temp_dir().join(format!("agentd-ex-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.conf");
    std::fs::write(&bad, "tasks.max_running: lots\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config", bad.to_str().unwrap(), "--check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.conf:1: tasks.max_running"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The `args: [...]` (or `CMD [...]`) arrays of a file, as JSON arrays.
fn arrays_after(text: &str, key: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(key) {
        rest = &rest[i + key.len()..];
        let Some(end) = rest.find(']') else { break };
        let json = rest[..=end].trim_start_matches(|c: char| c != '[');
        let flat: String = json.split('\n').map(str::trim).collect::<Vec<_>>().join(" ");
        out.push(serde_json::from_str(&flat).unwrap_or_else(|e| panic!("{key} not an array ({e}): {flat}")));
        rest = &rest[end..];
    }
    out
}

#[test]
fn dockerfile_and_kubernetes_commands_are_valid() {
    let docker = std::fs::read_to_string(repo("examples/docker/Dockerfile")).unwrap();
    let cmds = arrays_after(&docker, "CMD ");
    assert_eq!(cmds.len(), 1);
    let args: Vec<&str> = cmds[0].iter().map(String::as_str).collect();
    assert_eq!(args[0], "serve");
    check(&args[1..]);

    let pod = std::fs::read_to_string(repo("examples/kubernetes/pod.yaml")).unwrap();
    let all = arrays_after(&pod, "args: ");
    assert_eq!(all.len(), 2, "two containers");
    for args in all {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(args[0], "serve");
        check(&args[1..]);
    }
}

#[test]
fn systemd_unit_starts_serve_with_a_config_file() {
    let unit = std::fs::read_to_string(repo("examples/systemd/agentd.service")).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let words: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(&words[1..3], &["serve", "--config"]);
    for key in [
        "RuntimeDirectory=agentd",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "RestrictAddressFamilies=",
    ] {
        assert!(unit.contains(key), "the unit sets {key}");
    }
    // Its config is the example one, installed.
    check(&["--config", &repo("examples/agentd.conf")]);
}
