//! The manual (man/agentd.8) against the binary: every config key that
//! `agentd help config` lists, every long flag of `agentd help serve` and
//! `agentd help client`, every client command, every extension URI agentd
//! declares (each with its own subsection of EXTENSIONS) and the events
//! method, the error codes agentd answers, and the version must appear in
//! it, every default it states must be the one the code starts with, and
//! groff must render it without a single warning.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

fn man_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("man/agentd.8")
}

/// The roff source as plain-ish text: `\-` is a `-`, `\&` is nothing.
fn man_text() -> String {
    let raw = std::fs::read_to_string(man_path()).expect("man/agentd.8 is readable");
    raw.replace("\\-", "-").replace("\\&", "")
}

/// Runs `agentd ARGS…` and returns its stdout; it must succeed.
fn agentd(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("agentd runs");
    assert!(
        out.status.success(),
        "agentd {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// Key names: lines that start, at column 0, with `[a-z0-9_.]+: `.
fn config_keys(help: &str) -> Vec<String> {
    help.lines()
        .filter_map(|line| {
            let (name, _) = line.split_once(": ")?;
            let ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.');
            ok.then(|| name.to_string())
        })
        .collect()
}

/// Every `--[a-z-]+` in a text, once each, in order of appearance.
fn long_flags(help: &str) -> Vec<String> {
    let bytes = help.as_bytes();
    let mut flags: Vec<String> = Vec::new();
    let mut i = 0;
    while i + 2 < bytes.len() {
        if &bytes[i..i + 2] == b"--" && (i == 0 || bytes[i - 1] != b'-') {
            let mut j = i + 2;
            while j < bytes.len() && (bytes[j].is_ascii_lowercase() || bytes[j] == b'-') {
                j += 1;
            }
            if j > i + 2 {
                let flag = help[i..j].trim_end_matches('-').to_string();
                if flag.len() > 2 && !flags.contains(&flag) {
                    flags.push(flag);
                }
            }
            i = j;
        } else {
            i += 1;
        }
    }
    flags
}

fn missing_from_man<'a>(names: &'a [String], man: &str) -> Vec<&'a str> {
    names.iter().map(String::as_str).filter(|n| !man.contains(n)).collect()
}

#[test]
fn every_config_key_is_documented() {
    let keys = config_keys(&agentd(&["help", "config"]));
    assert!(
        keys.len() >= 20,
        "expected the config help to list many keys, found {}: {keys:?} (did its format change?)",
        keys.len()
    );
    let missing = missing_from_man(&keys, &man_text());
    assert!(
        missing.is_empty(),
        "config keys listed by `agentd help config` but not in man/agentd.8: {missing:?}"
    );
}

/// Each key of `agentd help config` with its default (`""` when it lists
/// none), in order.
fn help_defaults(help: &str) -> Vec<(String, String)> {
    let keys = config_keys(help);
    let lines: Vec<&str> = help.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some((name, _)) = line.split_once(": ") else {
            continue;
        };
        if !keys.iter().any(|k| k == name) {
            continue;
        }
        let default = lines
            .get(i + 1)
            .and_then(|l| l.trim_start().strip_prefix("default: "))
            .unwrap_or("");
        out.push((name.to_string(), default.trim().to_string()));
    }
    out
}

/// Roff source to the words it renders: font escapes and the macros that
/// only choose fonts go; `.BR A B` alternates, so its words join.
fn roff_words(src: &str) -> String {
    let mut out = String::new();
    for line in src.lines() {
        let line = line.replace("\\-", "-").replace("\\&", "");
        let line = ["\\fB", "\\fI", "\\fR", "\\fP"]
            .iter()
            .fold(line, |l, esc| l.replace(esc, ""));
        let text = match line.split_once(' ') {
            Some((m, rest)) if [".BR", ".RB", ".IR", ".RI", ".BI", ".IB"].contains(&m) => rest.split(' ').collect(),
            Some((m, rest)) if [".B", ".I"].contains(&m) => rest.to_string(),
            _ if line.starts_with('.') => continue,
            _ => line,
        };
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(text.trim_matches('"'));
    }
    out
}

/// Each `\fBkey\fR: …` entry of the manual's CONFIGURATION with the text
/// after its `Default:` up to the entry's end (None without one).
fn man_defaults() -> Vec<(String, Option<String>)> {
    let raw = std::fs::read_to_string(man_path()).unwrap();
    let config = &raw[raw.find("\n.SH CONFIGURATION\n").expect("a CONFIGURATION section")..];
    let config = &config[..config[1..].find("\n.SH ").map_or(config.len(), |e| e + 1)];
    let mut out = Vec::new();
    for entry in config.split("\n.TP\n").skip(1) {
        let (head, body) = entry.split_once('\n').unwrap_or((entry, ""));
        let Some(name) = head
            .strip_prefix("\\fB")
            .and_then(|h| h.split_once("\\fR:"))
            .map(|(n, _)| n)
        else {
            continue;
        };
        let body = body.split("\n.SS ").next().unwrap_or(body);
        let default = body.find("Default:").map(|at| {
            let words = roff_words(&body[at + "Default:".len()..]);
            words.trim().trim_end_matches('.').trim().to_string()
        });
        out.push((name.to_string(), default));
    }
    out
}

/// Every `Default:` in the manual says what `agentd help config` says, and
/// every default the help lists is in the manual. A literal default (a
/// number, a word) must be the same literal; the few defaults that are
/// descriptions (in parentheses in the help) are paired here one by one.
/// A figure in parentheses after a number (`(64 MiB)`, `(one hour)`) must
/// be that number.
#[test]
fn every_default_in_the_manual_is_the_help_configs() {
    const DESCRIBED: &[(&str, &str)] = &[
        (
            "$XDG_RUNTIME_DIR/agentd/agentd.sock",
            "the default socket path (see FILES)",
        ),
        ("(any)", "any CID"),
        ("", "none"),
        ("(depends on the runner)", "a sentence that depends on the runner"),
        ("(agentd's version)", "agentd's version"),
        ("(runner name)", "the runner's name"),
        ("(agentd's working directory)", "agentd's working directory"),
    ];
    let help = help_defaults(&agentd(&["help", "config"]));
    let man = man_defaults();
    let mut wrong = Vec::new();
    let mut compared = 0;
    for (key, man_default) in &man {
        let Some((_, help_default)) = help.iter().find(|(k, _)| k == key) else {
            wrong.push(format!("{key}: in the manual, not in `agentd help config`"));
            continue;
        };
        let Some(man_default) = man_default else {
            if !help_default.is_empty() {
                wrong.push(format!(
                    "{key}: help says default {help_default:?}, the manual says none"
                ));
            }
            continue;
        };
        compared += 1;
        let literal = !help_default.is_empty() && !help_default.starts_with(['(', '$']);
        let ok = if literal {
            let (value, figure) = match man_default.split_once(" (") {
                Some((v, f)) => (v, Some(f.trim_end_matches(')'))),
                None => (man_default.as_str(), None),
            };
            value == help_default && figure.is_none_or(|f| figure_is(f, value))
        } else {
            // The description may run on (`the runner's name (echo, …)`).
            DESCRIBED
                .iter()
                .any(|(h, m)| h == help_default && man_default.starts_with(m))
        };
        if !ok {
            wrong.push(format!(
                "{key}: the manual says {man_default:?}, `agentd help config` says {help_default:?}"
            ));
        }
    }
    for (key, help_default) in &help {
        if !help_default.is_empty() && !man.iter().any(|(k, _)| k == key) {
            wrong.push(format!(
                "{key}: default {help_default:?} in the help, no entry in the manual"
            ));
        }
    }
    assert!(wrong.is_empty(), "defaults that disagree:\n  {}", wrong.join("\n  "));
    // The manual had 44 of them when this test was written: a parser that
    // finds far fewer has lost its way.
    assert!(compared >= 40, "only {compared} Default: lines compared: {man:?}");
}

/// Every default the manual states, and every one `agentd help config`
/// lists, is what the daemon starts with: set on `Config::default()`, the
/// stated value changes nothing. The test above ties the manual to the
/// help's strings; this ties both to the code, so a default changed in
/// `limits` or `Config::default` and not in the manual fails here.
/// Defaults that are descriptions (`(runner name)`, `none`) name no value
/// to set, except agentd's own version.
#[test]
fn every_stated_default_is_config_default() {
    use agentd::config::{Config, KEYS};
    let code = Config::default();
    let unchanged_by = |key: &str, value: &str| -> Result<(), String> {
        let mut c = Config::default();
        c.set(key, value)
            .map_err(|e| format!("{key}: the stated default {value:?} is refused: {e}"))?;
        // agent.runner also records that it was given; what counts is the
        // runner it resolves to.
        let same = if key == "agent.runner" {
            c.resolve_runner() == Ok(code.runner.clone())
        } else {
            c == code
        };
        if same {
            Ok(())
        } else {
            Err(format!(
                "{key}: the stated default {value:?} is not Config::default()'s"
            ))
        }
    };
    let literal = |default: &str| !default.is_empty() && !default.starts_with(['(', '$']);
    let mut wrong = Vec::new();
    let mut checked = Vec::new();
    for k in KEYS {
        let value = match k.default {
            "(agentd's version)" => env!("CARGO_PKG_VERSION"),
            d if literal(d) => d,
            _ => continue,
        };
        match unchanged_by(k.name, value) {
            Ok(()) => checked.push(k.name),
            Err(e) => wrong.push(format!("help config: {e}")),
        }
    }
    let mut from_man = 0;
    for (key, man_default) in man_defaults() {
        let Some(key_help) = KEYS.iter().find(|k| k.name == key) else {
            continue; // the test above reports it
        };
        let Some(text) = man_default else { continue };
        let value = match key_help.default {
            "(agentd's version)" => env!("CARGO_PKG_VERSION").to_string(),
            d if literal(d) => text.split_once(" (").map_or(text.as_str(), |(v, _)| v).to_string(),
            _ => continue,
        };
        from_man += 1;
        if let Err(e) = unchanged_by(&key, &value) {
            wrong.push(format!("the manual: {e}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "stated defaults that are not the code's:\n  {}",
        wrong.join("\n  ")
    );
    // 34 keys had a value as their default when this test was written: far
    // fewer means a parser lost its way.
    assert!(
        checked.len() >= 34 && from_man >= 34,
        "only {} help defaults and {from_man} manual ones checked: {checked:?}",
        checked.len()
    );
}

/// Whether a parenthesised figure (`64 MiB`, `one hour`) is `value`.
fn figure_is(figure: &str, value: &str) -> bool {
    let Ok(n) = value.parse::<u64>() else {
        return false;
    };
    match figure.split_once(' ') {
        Some((k, "MiB")) => k.parse::<u64>().is_ok_and(|k| k * 1024 * 1024 == n),
        Some((k, "KiB")) => k.parse::<u64>().is_ok_and(|k| k * 1024 == n),
        _ => figure == "one hour" && n == 3_600_000,
    }
}

/// The manual names a task's cgroups one way, as src/cgroup.rs makes
/// them (`agentd-PID/slot-N`, which tests/containment.rs sees on disk):
/// in Cgroups and in FILES alike, and nowhere a per-task name.
#[test]
fn the_manual_names_the_cgroup_slots_as_the_code_does() {
    let raw = std::fs::read_to_string(man_path()).unwrap();
    let words = roff_words(&raw);
    assert!(
        words.contains("CGROUP/agentd-PID/slot-N/"),
        "FILES does not name CGROUP/agentd-PID/slot-N/"
    );
    assert!(
        words.contains("Each worker gets a slot, slot-N in each"),
        "Cgroups lost its slot-N"
    );
    for stale in ["task-WORKERPID", "task-PID", "removed when the task ends"] {
        assert!(
            !words.contains(stale),
            "the manual still says {stale:?} of task cgroups"
        );
    }
}

#[test]
fn every_serve_flag_is_documented() {
    let flags = long_flags(&agentd(&["help", "serve"]));
    assert!(
        flags.contains(&"--listen".to_string()),
        "no --listen in `agentd help serve`: {flags:?}"
    );
    let missing = missing_from_man(&flags, &man_text());
    assert!(
        missing.is_empty(),
        "flags listed by `agentd help serve` but not in man/agentd.8: {missing:?}"
    );
}

#[test]
fn every_client_flag_is_documented() {
    let flags = long_flags(&agentd(&["help", "client"]));
    let missing = missing_from_man(&flags, &man_text());
    assert!(
        missing.is_empty(),
        "flags listed by `agentd help client` but not in man/agentd.8: {missing:?}"
    );
}

#[test]
fn the_mcp_bridge_its_flags_and_its_tools_are_documented() {
    let help = agentd(&["help", "mcp"]);
    let man = man_text();
    let raw = std::fs::read_to_string(man_path()).unwrap();
    assert!(
        raw.contains("\n.SH MCP BRIDGE\n"),
        "man/agentd.8 has no MCP BRIDGE section"
    );
    let flags = long_flags(&help);
    assert!(flags.contains(&"--log-level".to_string()), "{flags:?}");
    let missing = missing_from_man(&flags, &man);
    assert!(
        missing.is_empty(),
        "flags of `agentd help mcp` not in man/agentd.8: {missing:?}"
    );
    // Every tool the bridge serves has its own `.B subagent.NAME` entry.
    let (bridge, out) = agentd::mcp::Bridge::in_memory("unix:///nonexistent.sock");
    bridge.serve(&br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#[..]);
    let tools = out.messages()[0]["result"]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(tools.len(), 5, "{tools:?}");
    for t in tools {
        let name = t["name"].as_str().unwrap();
        assert!(help.contains(name), "`agentd help mcp` does not name {name}");
        assert!(
            raw.contains(&format!("\n.B {name}\nArguments:")),
            "no `.B {name}` entry with its arguments in man/agentd.8"
        );
    }
    for v in agentd::mcp::PROTOCOL_VERSIONS {
        assert!(
            man.contains(v) && help.contains(v),
            "MCP revision {v} is not documented"
        );
    }
}

/// The client commands of the usage line `agentd card|send|… ENDPOINT …`.
fn client_commands(usage: &str) -> Vec<String> {
    usage
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("agentd card|"))
        .map(|rest| {
            let list = rest.split_whitespace().next().unwrap_or("");
            std::iter::once("card")
                .chain(list.split('|'))
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_client_command_has_an_entry() {
    let commands = client_commands(&agentd(&["help"]));
    assert!(
        commands.len() >= 8 && commands.contains(&"events".to_string()),
        "expected the usage line to list the client commands, found {commands:?} (did its format change?)"
    );
    let raw = std::fs::read_to_string(man_path()).unwrap();
    let synopsis = raw
        .lines()
        .find(|l| l.starts_with(".BR card |"))
        .expect("the SYNOPSIS lists the client commands on a `.BR card | …` line");
    let missing: Vec<&String> = commands
        .iter()
        .filter(|c| {
            let in_synopsis = synopsis
                .trim_start_matches(".BR ")
                .split(" | ")
                .any(|w| w.trim() == c.as_str());
            let has_entry = raw.lines().any(|l| {
                l.strip_prefix(".BI \"")
                    .is_some_and(|rest| rest.starts_with(&format!("{c} ")))
            });
            !(in_synopsis && has_entry)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "client commands without a SYNOPSIS mention or a `.BI \"NAME \"` entry under COMMANDS: {missing:?}"
    );
}

#[test]
fn every_extension_and_its_method_is_documented() {
    let man = man_text();
    let raw = std::fs::read_to_string(man_path()).unwrap();
    assert!(
        raw.contains("\n.SH EXTENSIONS\n"),
        "man/agentd.8 has no EXTENSIONS section"
    );
    for uri in agentd::ext::DECLARED {
        assert!(man.contains(uri), "extension {uri} is not in man/agentd.8");
        let name = uri.rsplit('/').next().unwrap();
        assert!(
            raw.contains(&format!("\n.SS {name}\n")),
            "extension {uri} has no `.SS {name}` subsection in man/agentd.8"
        );
    }
    assert!(
        man.contains(agentd::ext::EVENTS_METHOD),
        "the events method {} is not in man/agentd.8",
        agentd::ext::EVENTS_METHOD
    );
}

#[test]
fn the_error_codes_agentd_answers_are_documented() {
    use agentd::rpc;
    let man = man_text();
    let missing: Vec<i32> = [
        rpc::PARSE_ERROR,
        rpc::INVALID_REQUEST,
        rpc::METHOD_NOT_FOUND,
        rpc::INVALID_PARAMS,
        rpc::INTERNAL_ERROR,
        rpc::TASK_NOT_FOUND,
        rpc::TASK_NOT_CANCELABLE,
        rpc::PUSH_NOT_SUPPORTED,
        rpc::UNSUPPORTED_OPERATION,
        rpc::CONTENT_TYPE_NOT_SUPPORTED,
        rpc::EXTENSION_SUPPORT_REQUIRED,
        rpc::VERSION_NOT_SUPPORTED,
        rpc::FORBIDDEN,
    ]
    .into_iter()
    .filter(|code| !man.contains(&format!(".BR {code} ")))
    .collect();
    assert!(
        missing.is_empty(),
        "error codes without a `.BR CODE \"REASON\"` entry under Errors in man/agentd.8: {missing:?}"
    );
}

#[test]
fn title_line_carries_the_version() {
    let out = agentd(&["version"]);
    let version = out
        .split_whitespace()
        .last()
        .expect("`agentd version` prints a version");
    let raw = std::fs::read_to_string(man_path()).unwrap();
    let th = raw
        .lines()
        .find(|l| l.starts_with(".TH "))
        .expect("man/agentd.8 has a .TH line");
    assert!(
        th.contains(version),
        "the .TH line does not name version {version}: {th}"
    );
}

/// The first `groff` on PATH, if any.
fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
    })
}

#[test]
fn groff_renders_without_warnings() {
    let Some(groff) = find_on_path("groff") else {
        return common::skip_or_fail(
            "groff_renders_without_warnings",
            "groff is not on PATH, so man/agentd.8 was NOT checked for roff warnings (apt-get install groff)",
        );
    };
    let out = Command::new(&groff)
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(man_path())
        .output()
        .expect("groff runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "groff -man -Tutf8 -ww -z man/agentd.8: {}\n{stderr}",
        out.status
    );
}

#[test]
fn no_text_line_is_taken_for_a_control_line() {
    // A line starting with ' is a roff control line: text must never do it.
    let raw = std::fs::read_to_string(man_path()).unwrap();
    let bad: Vec<(usize, &str)> = raw
        .lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with('\''))
        .map(|(n, l)| (n + 1, l))
        .collect();
    assert!(bad.is_empty(), "lines starting with a quote in man/agentd.8: {bad:?}");
}

#[test]
fn the_parsers_see_what_they_should() {
    assert_eq!(
        config_keys("Config file: one `key: value`\n\na2a.listen: ADDRESS\n    default: x\nlog.level: LEVEL\n"),
        vec!["a2a.listen", "log.level"]
    );
    assert_eq!(
        long_flags("  -l, --listen ADDRESS\n      --exec-protocol P  (= --listen) --\n"),
        vec!["--listen", "--exec-protocol"]
    );
    assert_eq!(
        client_commands("Usage:\n  agentd serve [OPTIONS]\n  agentd card|send|events ENDPOINT …\n"),
        vec!["card", "send", "events"]
    );
}
