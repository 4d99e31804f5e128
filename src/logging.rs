//! Logging set-up, shared by the daemon and its workers.

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

/// stderr logging: `TIMESTAMP LEVEL [who] event key=value…`. RUST_LOG, when
/// set, overrides `level`.
pub fn init(level: &str, who: &'static str) {
    let mut b = env_logger::Builder::new();
    b.parse_filters(level);
    if let Ok(spec) = std::env::var("RUST_LOG") {
        b.parse_filters(&spec);
    }
    b.format(move |buf, rec| {
        write!(
            buf,
            "{} {:<5} [{who} {}] {}",
            crate::clock::format_ms(crate::clock::now_ms()),
            rec.level(),
            std::process::id(),
            rec.args()
        )?;
        match TRACE_ID.get() {
            Some(id) => writeln!(buf, " trace={id}"),
            None => writeln!(buf),
        }
    });
    b.target(env_logger::Target::Stderr);
    let _ = b.try_init();
}
