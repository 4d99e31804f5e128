//! Logging set-up, shared by the daemon and its workers.

use std::io::Write;

/// stderr logging: `TIMESTAMP LEVEL [who] event key=value…`. RUST_LOG, when
/// set, overrides `level`.
pub fn init(level: &str, who: &'static str) {
    let mut b = env_logger::Builder::new();
    b.parse_filters(level);
    if let Ok(spec) = std::env::var("RUST_LOG") {
        b.parse_filters(&spec);
    }
    b.format(move |buf, rec| {
        writeln!(
            buf,
            "{} {:<5} [{who} {}] {}",
            crate::clock::format_ms(crate::clock::now_ms()),
            rec.level(),
            std::process::id(),
            rec.args()
        )
    });
    b.target(env_logger::Target::Stderr);
    let _ = b.try_init();
}
