//! One connection: its keep-alive loop, and the SSE streams it writes.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::routes::{push_echo, route, write_task_answer, Reply, Source};
use super::Shared;
use crate::a2a::stream;
use crate::ext;
use crate::ext::events::Emit;
use crate::http::{self, sse, Conn, ReadError};
use crate::limits;
use crate::principal::Principal;
use crate::rpc;
use crate::transport::Stream;

/// One request being answered (the drain waits for these), counted until
/// drop for the same reason.
struct Busy<'a>(&'a AtomicUsize);

impl<'a> Busy<'a> {
    fn enter(count: &'a AtomicUsize) -> Busy<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Busy(count)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a connection ended, for the log.
pub(super) enum CloseReason {
    PeerClosed,
    /// Hung up while its blocking call waited.
    PeerGone,
    Idle,
    Rejected(u16),
    ClientAskedClose,
    /// A close-delimited (HTTP/1.0) stream ended: closing is its end.
    StreamEnded,
    Stopping,
    Io(std::io::Error),
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::PeerClosed => f.write_str("peer closed"),
            CloseReason::PeerGone => f.write_str("peer hung up while its call waited"),
            CloseReason::Idle => f.write_str("idle timeout"),
            CloseReason::Rejected(s) => write!(f, "bad request ({s})"),
            CloseReason::ClientAskedClose => f.write_str("Connection: close"),
            CloseReason::StreamEnded => f.write_str("close-delimited stream ended"),
            CloseReason::Stopping => f.write_str("daemon stopping"),
            CloseReason::Io(e) => write!(f, "i/o error: {e}"),
        }
    }
}

pub(super) fn serve_connection(stream: &mut Stream, principal: &Principal, shared: &Shared) -> CloseReason {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(limits::HTTP_WRITE_TIMEOUT_MS)));
    // A task's and a context's id are made here, per task.
    crate::ids::batch_on_this_thread();
    let mut reader = http::Reader::new(shared.http_limits.clone());
    loop {
        let req = match reader.read_request(stream) {
            Ok(r) => r,
            Err(ReadError::Closed) => return CloseReason::PeerClosed,
            Err(ReadError::Idle) => return CloseReason::Idle,
            Err(e @ ReadError::Reject { .. }) => {
                let status = match &e {
                    ReadError::Reject { status, .. } => *status,
                    _ => 400,
                };
                if let Some(resp) = e.response() {
                    let _ = http::write_response(stream, &resp, false);
                }
                return CloseReason::Rejected(status);
            }
            Err(ReadError::Io(e)) => return CloseReason::Io(e),
        };
        let busy = Busy::enter(&shared.busy);
        let peer_gone = || stream.peer_gone();
        let written = match route(&req, principal, shared, &peer_gone) {
            Reply::Gone => return CloseReason::PeerGone,
            Reply::Full(resp) => {
                let keep_alive = req.keep_alive && !shared.stopping.load(Ordering::SeqCst);
                http::write_response(stream, &resp, keep_alive)
            }
            Reply::LargeTask(answer) => {
                let keep_alive = req.keep_alive && !shared.stopping.load(Ordering::SeqCst);
                write_task_answer(stream, &answer, req.http11, keep_alive)
            }
            Reply::Stream { id, source, active } => {
                // HTTP/1.0 knows no chunked coding: its stream ends with the connection.
                let close_delimited = !req.http11;
                let written = write_stream(stream, principal, shared, &id, source, &active, close_delimited);
                if close_delimited && written.is_ok() {
                    return CloseReason::StreamEnded;
                }
                written
            }
        };
        drop(busy);
        if let Err(e) = written {
            return CloseReason::Io(e);
        }
        if !req.keep_alive {
            return CloseReason::ClientAskedClose;
        }
        if shared.stopping.load(Ordering::SeqCst) {
            return CloseReason::Stopping;
        }
    }
}

/// Writes an SSE stream: headers, one chunk per event (flushed at once),
/// keep-alive comments while idle, the zero chunk at the end.
fn write_stream(
    stream: &mut Stream,
    principal: &Principal,
    shared: &Shared,
    id: &rpc::Id,
    source: Source,
    active: &ext::Active,
    close_delimited: bool,
) -> std::io::Result<()> {
    let mut headers = vec![
        ("Content-Type".to_string(), "text/event-stream".to_string()),
        ("Cache-Control".to_string(), "no-cache".to_string()),
        ("X-Accel-Buffering".to_string(), "no".to_string()),
    ];
    push_echo(&mut headers, &active.echo());
    let subject = match &source {
        Source::Task(plan) => format!("task={}", plan.task_id()),
        Source::Events(_) => "events".to_string(),
    };
    let strip_labels = !active.has(ext::ANNOTATIONS);
    let mut out = if close_delimited {
        http::ChunkedWriter::start_close_delimited(stream, 200, &headers)?
    } else {
        http::ChunkedWriter::start(stream, 200, &headers)?
    };
    let keepalive = Duration::from_millis(shared.agent.cfg.sse_keepalive_ms);
    let mut events = 0u64;
    // One buffer for the stream's life: each event is written into it.
    let mut event = Vec::new();
    let mut sink = |emit: Emit| {
        match emit {
            Emit::Event(seq, mut result) => {
                if strip_labels {
                    ext::annotations::strip(&mut result);
                }
                sse::encode_line_event_into(&mut event, seq, |out| rpc::success_append(out, id, &result));
            }
            Emit::Response(seq, mut response) => {
                if strip_labels {
                    ext::annotations::strip_response(&mut response);
                }
                sse::encode_line_event_into(&mut event, seq, |out| rpc::success_append(out, id, &response));
            }
            Emit::KeepAlive => return out.chunk(&sse::encode_comment("keep-alive")),
        }
        events += 1;
        out.chunk(&event)
    };
    let pumped = match source {
        Source::Task(plan) => stream::pump(*plan, keepalive, &mut sink),
        Source::Events(from) => ext::events::pump(&shared.feed, principal, from, keepalive, &mut sink),
    };
    match pumped {
        Ok(()) => {
            log::debug!("a2a.stream.end {subject} events={events}");
            out.finish().map(drop)
        }
        Err(e) => {
            // The client went away: only this stream ends.
            log::debug!("a2a.stream.gone {subject} events={events} error={e}");
            Err(e)
        }
    }
}
