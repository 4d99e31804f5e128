//! The daemon's log lines: `TIMESTAMP LEVEL [who pid] event key=value…` on
//! stderr, filtered by `log.level` and, over it, RUST_LOG's directives
//! (`LEVEL`, `TARGET=LEVEL`; the longest matching target wins).

mod common;

use std::time::Duration;

use common::{wait_for, Daemon, TempDir};

fn start(args: &[&str], rust_log: &str) -> Daemon {
    let dir = TempDir::new("log");
    let socket = dir.0.join("a.sock");
    Daemon::start_env(dir, socket, args, &[("RUST_LOG", rust_log)])
}

/// Every line is `2026-…Z LEVEL [agentd|worker PID] event…`.
fn assert_well_formed(log: &str) {
    for line in log.lines() {
        let mut words = line.splitn(3, ' ');
        let (time, level) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let rest = line[time.len()..].trim_start().trim_start_matches(level).trim_start();
        assert!(
            time.len() == 24 && time.ends_with('Z') && time.as_bytes()[10] == b'T',
            "{line}"
        );
        assert!(["ERROR", "WARN", "INFO", "DEBUG", "TRACE"].contains(&level), "{line}");
        let who = rest.strip_prefix('[').and_then(|r| r.split_once(']')).map(|(w, _)| w);
        let (name, pid) = who.and_then(|w| w.rsplit_once(' ')).unwrap_or_else(|| panic!("{line}"));
        assert!(name == "agentd" || name == "worker", "{line}");
        assert!(pid.parse::<u32>().is_ok(), "{line}");
    }
}

#[test]
fn rust_log_overrides_the_level_and_a_target_directive_opens_one_module() {
    // log.level says debug everywhere; RUST_LOG says warn, but debug for procman.
    let d = start(&["--log-level", "debug"], "warn,agentd::procman=debug");
    let id = d.send_async("hello");
    let ended = wait_for(Duration::from_secs(10), || d.log_text().contains("task.exit pid="));
    let log = d.log_text();
    assert!(ended, "no procman debug line after task {id}:\n{log}");
    assert!(log.contains("procman.forkserver pid="), "{log}");
    // The listener's info line (agentd::server) is below warn.
    assert!(!log.contains("a2a.listen"), "{log}");
    assert!(
        log.lines()
            .all(|l| !l.contains(" DEBUG ") || l.contains("] task.") || l.contains("] procman.")),
        "{log}"
    );
    assert_well_formed(&log);
}

#[test]
fn log_level_alone_filters_and_a_bad_directive_is_reported_not_fatal() {
    let d = start(&["--log-level", "info"], "info,agentd::nothing=loud");
    d.send_async("hello");
    assert!(
        wait_for(Duration::from_secs(10), || d.log_text().contains("task.start task=")),
        "{}",
        d.log_text()
    );
    let log = d.log_text();
    // env_logger's own words, naming the part it could not read.
    assert!(log.contains("invalid logging spec 'loud', ignoring it"), "{log}");
    assert!(log.contains("a2a.listen address="), "{log}");
    assert!(!log.contains(" DEBUG "), "{log}");
    assert_well_formed(
        &log.lines()
            .filter(|l| !l.starts_with("warning:"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
}

#[test]
fn a_text_suffix_keeps_only_the_lines_that_contain_it() {
    // The manual: `/TEXT` keeps lines whose message contains TEXT.
    let d = start(&[], "info/task.end");
    let id = d.send_async("hello");
    let ended = wait_for(Duration::from_secs(10), || d.log_text().contains("task.end"));
    let log = d.log_text();
    assert!(ended, "task {id} never logged its end:\n{log}");
    assert!(!log.contains("task.start") && !log.contains("a2a.listen"), "{log}");
    assert!(log.lines().all(|l| l.contains("task.end")), "{log}");
    assert_well_formed(&log);
}
