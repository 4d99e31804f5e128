//! Logging set-up, shared by the daemon and its workers: a `log::Log` that
//! writes `TIMESTAMP LEVEL [who pid] event key=value…` lines to stderr.
//!
//! The filter reads env_logger's directive syntax, the part of it operators
//! use: comma-separated `LEVEL` (the default) and `TARGET=LEVEL` or a bare
//! `TARGET` (everything from it); the longest matching target wins and a
//! later directive for the same target replaces an earlier one, so RUST_LOG,
//! read after `log.level`, overrides it. Not env_logger itself: its builder,
//! filter parser and formatter were 12 KB of the static binary and two
//! crates, for this.

use std::io::Write;
use std::sync::OnceLock;

use log::{LevelFilter, Log, Metadata, Record};

/// A worker's task's trace id, once it has one: every line it logs then
/// ends with `trace=…`.
static TRACE_ID: OnceLock<String> = OnceLock::new();

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Marks every later log line of this process with `trace=ID` (a worker
/// runs one task, so the process's lines are that task's).
pub fn set_trace_id(id: &str) {
    let _ = TRACE_ID.set(id.to_string());
}

/// stderr logging at `level` (a directive list, above). RUST_LOG, when set,
/// overrides it. A second call keeps the first set-up.
pub fn init(level: &str, who: &'static str) {
    let mut filter = Filter::default();
    filter.parse(level);
    if let Ok(spec) = std::env::var("RUST_LOG") {
        filter.parse(&spec);
    }
    let max = filter.max();
    let logger = LOGGER.get_or_init(|| Logger { filter, who });
    if log::set_logger(logger).is_ok() {
        log::set_max_level(max);
    }
}

struct Logger {
    filter: Filter,
    who: &'static str,
}

impl Log for Logger {
    fn enabled(&self, meta: &Metadata) -> bool {
        meta.level() <= self.filter.level_for(meta.target())
    }

    fn log(&self, rec: &Record) {
        if !self.enabled(rec.metadata()) {
            return;
        }
        // One write per line: workers and the daemon share the stderr.
        let mut line = Vec::with_capacity(160);
        let _ = write!(
            line,
            "{} {:<5} [{} {}] {}",
            crate::clock::format_ms(crate::clock::now_ms()),
            rec.level(),
            self.who,
            std::process::id(),
            rec.args()
        );
        if let Some(id) = TRACE_ID.get() {
            let _ = write!(line, " trace={id}");
        }
        line.push(b'\n');
        let _ = std::io::stderr().lock().write_all(&line);
    }

    fn flush(&self) {}
}

/// What is logged: a default level and per-target levels.
#[derive(Debug, PartialEq)]
struct Filter {
    default: LevelFilter,
    targets: Vec<(String, LevelFilter)>,
}

impl Default for Filter {
    fn default() -> Filter {
        Filter {
            default: LevelFilter::Error,
            targets: Vec::new(),
        }
    }
}

impl Filter {
    /// Adds the directives of `spec`; one it cannot read is reported on
    /// stderr and skipped, as env_logger does.
    fn parse(&mut self, spec: &str) {
        for directive in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            let (target, level) = match directive.split_once('=') {
                Some((target, level)) => match level.trim().parse::<LevelFilter>() {
                    Ok(level) if !target.trim().is_empty() => (Some(target.trim()), level),
                    _ => {
                        eprintln!("warning: invalid logging spec '{directive}', ignoring it");
                        continue;
                    }
                },
                None => match directive.parse::<LevelFilter>() {
                    Ok(level) => (None, level),
                    // A bare name is a target, and everything from it.
                    Err(_) => (Some(directive), LevelFilter::Trace),
                },
            };
            match target {
                None => self.default = level,
                Some(target) => match self.targets.iter_mut().find(|(t, _)| t == target) {
                    Some(known) => known.1 = level,
                    None => self.targets.push((target.to_string(), level)),
                },
            }
        }
    }

    fn level_for(&self, target: &str) -> LevelFilter {
        self.targets
            .iter()
            .filter(|(t, _)| target.starts_with(t.as_str()))
            .max_by_key(|(t, _)| t.len())
            .map_or(self.default, |(_, level)| *level)
    }

    fn max(&self) -> LevelFilter {
        self.targets.iter().map(|(_, l)| *l).fold(self.default, Ord::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(specs: &[&str]) -> Filter {
        let mut f = Filter::default();
        for s in specs {
            f.parse(s);
        }
        f
    }

    #[test]
    fn a_bare_level_is_the_default_and_a_later_one_wins() {
        assert_eq!(filter(&[]).level_for("agentd"), LevelFilter::Error);
        assert_eq!(filter(&["info"]).level_for("agentd::procman"), LevelFilter::Info);
        assert_eq!(filter(&["info", "debug"]).level_for("x"), LevelFilter::Debug);
        assert_eq!(filter(&["info", "OFF"]).max(), LevelFilter::Off);
    }

    #[test]
    fn the_longest_matching_target_wins() {
        let f = filter(&["warn,agentd=info,agentd::procman=trace"]);
        assert_eq!(f.level_for("agentd::procman::pool"), LevelFilter::Trace);
        assert_eq!(f.level_for("agentd::server"), LevelFilter::Info);
        assert_eq!(f.level_for("vsock"), LevelFilter::Warn);
        assert_eq!(f.max(), LevelFilter::Trace);
    }

    #[test]
    fn rust_log_after_the_level_replaces_the_same_target() {
        let f = filter(&["info,agentd::worker=debug", "agentd::worker=error"]);
        assert_eq!(f.level_for("agentd::worker"), LevelFilter::Error);
        assert_eq!(f.level_for("agentd"), LevelFilter::Info);
    }

    #[test]
    fn a_bare_target_means_all_of_it_and_bad_directives_are_skipped() {
        let f = filter(&["error, agentd::http ,=info,x=loud,,"]);
        assert_eq!(f.level_for("agentd::http::sse"), LevelFilter::Trace);
        assert_eq!(f.default, LevelFilter::Error);
        assert_eq!(f.targets.len(), 1, "{f:?}");
    }
}
