//! Logging set-up, shared by the daemon and its workers: env_logger (the
//! design card's logger, default features off) writing
//! `TIMESTAMP LEVEL [who pid] event key=value…` lines to stderr.
//!
//! The filter is env_logger's directive syntax: comma-separated `LEVEL`
//! (the default) and `TARGET=LEVEL` or a bare `TARGET` (everything from
//! it); the longest matching target wins, and a later directive for the
//! same target replaces an earlier one, so RUST_LOG, read after
//! `log.level`, overrides it.

use std::io::Write;
use std::sync::OnceLock;

/// A worker's task's trace id, once it has one: every line it logs then
/// ends with `trace=…`.
static TRACE_ID: OnceLock<String> = OnceLock::new();

/// Marks every later log line of this process with `trace=ID` (a worker
/// runs one task, so the process's lines are that task's).
pub fn set_trace_id(id: &str) {
    let _ = TRACE_ID.set(id.to_string());
}

/// stderr logging at `level` (a directive list, above). RUST_LOG, when set,
/// overrides it. A second call keeps the first set-up.
pub fn init(level: &str, who: &'static str) {
    let mut builder = env_logger::Builder::new();
    builder.parse_filters(level);
    if let Ok(spec) = std::env::var("RUST_LOG") {
        builder.parse_filters(&spec);
    }
    let pid = std::process::id();
    // env_logger writes each record's buffer to stderr at once: workers and
    // the daemon share the stderr, and their lines do not interleave.
    builder.format(move |buf, rec| {
        write!(
            buf,
            "{} {:<5} [{who} {pid}] {}",
            crate::clock::format_ms(crate::clock::now_ms()),
            rec.level(),
            rec.args()
        )?;
        if let Some(id) = TRACE_ID.get() {
            write!(buf, " trace={id}")?;
        }
        writeln!(buf)
    });
    let _ = builder.try_init();
}
