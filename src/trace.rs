//! W3C Trace Context (`traceparent`, `tracestate`): what a request carries
//! is kept on its task, given to the program as `TRACEPARENT`/`TRACESTATE`
//! (OpenTelemetry's environment carrier), sent on to a peer, and logged as
//! `trace=<trace-id>`.
//!
//! ```text
//!  traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
//!               ^^ ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ ^^^^^^^^^^^^^^^^ ^^
//!          version trace-id (not all 0)         parent-id (not 0) flags
//! ```
//! An invalid `traceparent` is ignored (and so is `tracestate` with it), as
//! the recommendation says: the task simply has no trace context.

use serde::{Deserialize, Serialize};

/// The environment variables a program finds the context in.
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";
pub const TRACESTATE_ENV: &str = "TRACESTATE";
/// The recommendation's limits for `tracestate`: 32 list members; agentd
/// keeps at most 512 bytes (the size every vendor must propagate).
const TRACESTATE_MEMBERS_MAX: usize = 32;
const TRACESTATE_MAX_BYTES: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    pub traceparent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

fn lower_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks `traceparent` and returns its first four fields (a future
/// version may append more after a `-`).
fn valid_traceparent(v: &str) -> Option<&str> {
    let v = v.trim();
    let head = v.get(..55)?;
    let mut parts = head.split('-');
    let (version, trace_id, parent_id, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let shapes = [(version, 2), (trace_id, 32), (parent_id, 16), (flags, 2)];
    if parts.next().is_some() || shapes.iter().any(|(p, n)| p.len() != *n || !lower_hex(p)) {
        return None;
    }
    if version == "ff" || (version == "00" && v.len() != 55) || (v.len() > 55 && !v[55..].starts_with('-')) {
        return None;
    }
    if trace_id.bytes().all(|b| b == b'0') || parent_id.bytes().all(|b| b == b'0') {
        return None;
    }
    Some(head)
}

fn valid_tracestate(v: &str) -> Option<String> {
    let v = v.trim();
    let members = v.split(',').filter(|m| !m.trim().is_empty()).count();
    let printable = v.bytes().all(|b| (0x20..0x7f).contains(&b));
    (!v.is_empty() && printable && members <= TRACESTATE_MEMBERS_MAX && v.len() <= TRACESTATE_MAX_BYTES)
        .then(|| v.to_string())
}

impl TraceContext {
    /// From a request's headers; None unless `traceparent` is valid.
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<TraceContext> {
        let traceparent = valid_traceparent(traceparent?)?.to_string();
        Some(TraceContext {
            traceparent,
            tracestate: tracestate.and_then(valid_tracestate),
        })
    }

    /// The trace id (for log lines).
    pub fn trace_id(&self) -> &str {
        self.traceparent.get(3..35).unwrap_or("")
    }

    /// The headers (and, with other names, the environment) that carry it.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![("traceparent", self.traceparent.clone())];
        if let Some(s) = &self.tracestate {
            out.push(("tracestate", s.clone()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn valid_traceparents_are_kept_with_their_state() {
        let t = TraceContext::from_headers(Some(GOOD), Some("congo=t61rcWkgMzE, rojo=00f067aa0ba902b7")).unwrap();
        assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            t.tracestate.as_deref(),
            Some("congo=t61rcWkgMzE, rojo=00f067aa0ba902b7")
        );
        // A future version may carry more fields; the known four are kept.
        let future = format!("cc{}-what-the-future-holds", &GOOD[2..]);
        assert_eq!(
            TraceContext::from_headers(Some(&future), None).unwrap().traceparent,
            format!("cc{}", &GOOD[2..])
        );
    }

    #[test]
    fn invalid_traceparents_are_ignored() {
        let bad = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ];
        for b in bad {
            assert_eq!(TraceContext::from_headers(Some(b), Some("a=b")), None, "{b}");
        }
        assert_eq!(TraceContext::from_headers(None, Some("a=b")), None);
        // A bad tracestate alone is dropped; the traceparent stays.
        let t = TraceContext::from_headers(Some(GOOD), Some(&"a=b,".repeat(40))).unwrap();
        assert_eq!(t.tracestate, None);
    }
}
