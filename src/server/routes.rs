//! What each request gets: the card, metrics, or a JSON-RPC call (its
//! Content-Type, envelope and A2A-Version checked), answered whole or as
//! a stream.

use std::sync::atomic::Ordering;

use super::Shared;
use crate::a2a::card::{Card, PROTOCOL_VERSION};
use crate::a2a::{stream, Answer, Call};
use crate::ext;
use crate::http::{self, Request, Response};
use crate::limits;
use crate::principal::Principal;
use crate::rpc::{self, RpcError};

const CARD_PATH: &str = "/.well-known/agent-card.json";
const METRICS_PATH: &str = "/metrics";

/// What a request gets: a whole response, or an SSE stream.
pub(super) enum Reply {
    Full(Response),
    /// A task answer too large to render into one buffer first: written
    /// onto the connection as it is rendered ([`write_task_answer`]).
    LargeTask(LargeTask),
    /// The client hung up while its call waited: close, answer nothing.
    Gone,
    Stream {
        id: rpc::Id,
        source: Source,
        active: ext::Active,
    },
}

/// A task answer written as it is rendered.
pub(super) struct LargeTask {
    id: rpc::Id,
    task: Box<crate::tasks::Snapshot>,
    in_result: bool,
    echo: Vec<String>,
}

/// What a stream carries.
pub(super) enum Source {
    Task(Box<stream::Plan>),
    /// The events extension's feed, resuming after this sequence.
    Events(Option<u64>),
}

pub(super) fn route(req: &Request, principal: &Principal, shared: &Shared, peer_gone: &dyn Fn() -> bool) -> Reply {
    let path = req.path.as_str();
    // A debug build's connection thread can be made to panic, to test that
    // a panic ends only its connection; a release build has no such path.
    #[cfg(debug_assertions)]
    if path == "/__test_panic" && std::env::var_os("AGENTD_TEST_PANIC").is_some_and(|v| v == "conn") {
        panic!("AGENTD_TEST_PANIC=conn: a connection thread panics (a test of the panic policy)");
    }
    if path == CARD_PATH {
        return Reply::Full(match req.method.as_str() {
            "GET" => card_response(req, &shared.card),
            _ => Response::error(405, "the agent card is read with GET").header("Allow", "GET"),
        });
    }
    if path == METRICS_PATH {
        return Reply::Full(match req.method.as_str() {
            "GET" => metrics_response(shared),
            _ => Response::error(405, "metrics are read with GET").header("Allow", "GET"),
        });
    }
    if path == "/" || path.is_empty() {
        return match req.method.as_str() {
            "POST" => rpc_response(req, principal, shared, peer_gone),
            _ => Reply::Full(Response::error(405, "JSON-RPC requests are POSTed to /").header("Allow", "POST")),
        };
    }
    Reply::Full(Response::error(
        404,
        "not found: JSON-RPC is served at POST /, the card at GET /.well-known/agent-card.json, \
         metrics at GET /metrics",
    ))
}

/// `GET /metrics`: the counters plus what the task table and the
/// connection count say now.
fn metrics_response(shared: &Shared) -> Response {
    let (queued, running, finished) = shared.agent.tasks.counts();
    let gauges = crate::metrics::Gauges {
        tasks_queued: queued,
        tasks_running: running,
        tasks_retained_finished: finished,
        tasks_retained_bytes: shared.agent.tasks.retained_bytes(),
        connections_open: shared.conns.load(Ordering::SeqCst),
        max_running: shared.agent.tasks.max_running(),
    };
    Response::new(200).header("Cache-Control", "no-store").body(
        crate::metrics::CONTENT_TYPE,
        crate::metrics::render(&gauges).into_bytes(),
    )
}

/// The card, or 304 when the client's copy is current: If-None-Match
/// decides when present; otherwise If-Modified-Since (RFC 9110 §13.2.2).
fn card_response(req: &Request, card: &Card) -> Response {
    let cache = format!("public, max-age={}", limits::CARD_MAX_AGE_SECS);
    let built_secs = card.built_ms / 1000;
    let last_modified = http::date::format(built_secs);
    let fresh = match req.header("If-None-Match") {
        Some(v) => v.split(',').any(|t| t.trim() == card.etag || t.trim() == "*"),
        // An invalid date, or more than one, is ignored (RFC 9110 §13.1.3).
        None => req
            .header("If-Modified-Since")
            .and_then(http::date::parse)
            .is_some_and(|since| built_secs <= since),
    };
    let resp = Response::new(if fresh { 304 } else { 200 })
        .header("ETag", &card.etag)
        .header("Last-Modified", &last_modified)
        .header("Cache-Control", &cache);
    if fresh {
        return resp;
    }
    resp.body("application/json", card.json.clone())
}

fn json_response(status: u16, body: Vec<u8>, extensions: &[String]) -> Response {
    let mut resp = Response::new(status).body("application/json", body);
    if !extensions.is_empty() {
        resp = resp.header("A2A-Extensions", &extensions.join(", "));
    }
    resp
}

fn rpc_response(req: &Request, principal: &Principal, shared: &Shared, peer_gone: &dyn Fn() -> bool) -> Reply {
    // Extensions: activated = requested ∩ declared; unknown ones are
    // ignored, never an error. The activated ones are echoed.
    let active = ext::Active::from_header(req.header("A2A-Extensions"));
    let echo = active.echo();
    let full = |status: u16, body: Vec<u8>| Reply::Full(json_response(status, body, &echo));
    if let Some(ct) = req.header("Content-Type") {
        if !is_json_media_type(ct) {
            let err = RpcError::new(
                rpc::CONTENT_TYPE_NOT_SUPPORTED,
                format!("Content-Type `{ct}` is not supported: send `Content-Type: application/json`"),
            );
            return full(err.http_status(), rpc::failure(&rpc::Id::null(), &err));
        }
    }
    let call = match rpc::decode(&req.body) {
        Ok(c) => c,
        Err((id, err)) => return full(err.http_status(), rpc::failure(&id, &err)),
    };
    let ctx = Call {
        principal,
        active: &active,
        last_event_id: req.header("Last-Event-ID").and_then(|v| v.trim().parse().ok()),
        peer_gone,
        trace: crate::trace::TraceContext::from_headers(req.header("traceparent"), req.header("tracestate")),
    };
    let result = check_version(req, shared.agent.cfg.version_required)
        .and_then(|()| shared.agent.call(&ctx, &call.method, &call.params));
    match result {
        Ok(Answer::Value(mut v)) => {
            if !active.has(ext::ANNOTATIONS) {
                ext::annotations::strip(&mut v);
            }
            full(200, rpc::success(&call.id, &v))
        }
        Ok(Answer::Task(mut task)) => {
            if !active.has(ext::ANNOTATIONS) {
                ext::annotations::strip_task(&mut task);
            }
            full(200, rpc::success(&call.id, &task))
        }
        Ok(Answer::Snapshot { task, in_result }) => {
            // Written from the snapshot, unless labels must come out first
            // (a client that did not activate the extension never sees them).
            if !active.has(ext::ANNOTATIONS) && task.mentions(ext::ANNOTATIONS) {
                let hint = task.json_bytes_hint();
                let mut task = task.render();
                ext::annotations::strip_task(&mut task);
                return full(200, answer_task(&call.id, &task, in_result, hint));
            }
            let hint = task.json_bytes_hint();
            if hint >= limits::RESPONSE_STREAMED_MIN_BYTES {
                return Reply::LargeTask(LargeTask {
                    id: call.id,
                    task,
                    in_result,
                    echo,
                });
            }
            full(200, answer_task(&call.id, &task.json(), in_result, hint))
        }
        Ok(Answer::Response(mut response)) => {
            if !active.has(ext::ANNOTATIONS) {
                ext::annotations::strip_response(&mut response);
            }
            full(200, rpc::success(&call.id, &response))
        }
        Ok(Answer::Stream(plan)) => Reply::Stream {
            id: call.id,
            source: Source::Task(plan),
            active,
        },
        Ok(Answer::Events(from)) => Reply::Stream {
            id: call.id,
            source: Source::Events(from),
            active,
        },
        Err(err) if crate::a2a::client_gone(&err) => Reply::Gone,
        Err(err) => {
            log::debug!(
                "a2a.rpc.error method={} code={} message={}",
                call.method,
                err.code,
                err.message
            );
            full(err.http_status(), rpc::failure(&call.id, &err))
        }
    }
}

/// A task as a call's result: SendMessage's `{"task": …}` (`in_result`),
/// or the task itself, of about `hint` bytes.
fn answer_task<T: serde::Serialize>(id: &rpc::Id, task: &T, in_result: bool, hint: usize) -> Vec<u8> {
    if in_result {
        rpc::success_sized(id, &InResult { task }, hint)
    } else {
        rpc::success_sized(id, task, hint)
    }
}

/// Writes a large task answer: for HTTP/1.1, chunked, rendered straight
/// onto the connection; for HTTP/1.0, which knows no chunks, whole.
pub(super) fn write_task_answer<W: std::io::Write>(
    w: &mut W,
    answer: &LargeTask,
    http11: bool,
    keep_alive: bool,
) -> std::io::Result<()> {
    let LargeTask {
        id,
        task,
        in_result,
        echo,
    } = answer;
    if !http11 {
        let body = answer_task(id, &task.json(), *in_result, task.json_bytes_hint());
        return http::write_response(w, &json_response(200, body, echo), keep_alive);
    }
    let mut headers = vec![("Content-Type".to_string(), "application/json".to_string())];
    push_echo(&mut headers, echo);
    let mut out = http::ChunkedWriter::start(w, 200, &headers)?;
    let mut body = out.body();
    let json = task.json();
    if *in_result {
        rpc::success_to(&mut body, id, &InResult { task: &json })?;
    } else {
        rpc::success_to(&mut body, id, &json)?;
    }
    std::io::Write::flush(&mut body)?;
    out.finish().map(drop)
}

/// Adds the activated extensions' echo (`A2A-Extensions`) to a streamed
/// answer's headers, if any are active.
pub(super) fn push_echo(headers: &mut Vec<(String, String)>, echo: &[String]) {
    if !echo.is_empty() {
        headers.push(("A2A-Extensions".to_string(), echo.join(", ")));
    }
}

/// SendMessage's result: `{"task": …}`.
#[derive(serde::Serialize)]
struct InResult<'a, T> {
    task: &'a T,
}

/// `application/json`, with or without parameters, or any `+json` type.
fn is_json_media_type(ct: &str) -> bool {
    // Compared without a lowercased copy: this runs for every request.
    let essence = ct.split(';').next().unwrap_or("").trim().as_bytes();
    let (top, sub) = essence.split_at(essence.len().min(b"application/".len()));
    top.eq_ignore_ascii_case(b"application/")
        && (sub.eq_ignore_ascii_case(b"json")
            || sub.len() >= b"+json".len() && sub[sub.len() - b"+json".len()..].eq_ignore_ascii_case(b"+json"))
}

/// A2A-Version from the header or the `?A2A-Version=` query; Major.Minor
/// only counts. A missing value means 0.3 (the spec's rule).
fn check_version(req: &Request, required: bool) -> Result<(), RpcError> {
    // Borrowed from the header, as every request has it: checked per
    // request, without a copy.
    let raw = req
        .header("A2A-Version")
        .map(std::borrow::Cow::Borrowed)
        .or_else(|| req.query_param("A2A-Version").map(std::borrow::Cow::Owned))
        .filter(|v| !v.trim().is_empty());
    let Some(raw) = raw else {
        if !required {
            return Ok(());
        }
        return Err(RpcError::with_reason(
            rpc::VERSION_NOT_SUPPORTED,
            "VERSION_NOT_SUPPORTED",
            rpc::A2A_DOMAIN,
            format!(
                "No A2A-Version header: that means A2A 0.3, which this agent does not speak. \
                 Send `A2A-Version: {PROTOCOL_VERSION}`"
            ),
            &[("requestedVersion", "0.3"), ("supportedVersions", PROTOCOL_VERSION)],
        ));
    };
    let raw = raw.trim();
    let mut parts = raw.split('.');
    let major = parts.next().unwrap_or("");
    let minor = parts.next().unwrap_or("0");
    if PROTOCOL_VERSION.split_once('.') == Some((major, minor)) {
        return Ok(());
    }
    Err(RpcError::with_reason(
        rpc::VERSION_NOT_SUPPORTED,
        "VERSION_NOT_SUPPORTED",
        rpc::A2A_DOMAIN,
        format!("A2A-Version {raw} is not supported. Send `A2A-Version: {PROTOCOL_VERSION}`"),
        &[("requestedVersion", raw), ("supportedVersions", PROTOCOL_VERSION)],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_media_types() {
        assert!(is_json_media_type("application/json"));
        assert!(is_json_media_type("Application/JSON; charset=utf-8"));
        assert!(is_json_media_type("application/a2a+json"));
        assert!(!is_json_media_type("text/plain"));
        assert!(!is_json_media_type("application/x-www-form-urlencoded"));
        assert!(is_json_media_type(" APPLICATION/Problem+JSON "));
        assert!(!is_json_media_type("application/jsonx"));
        assert!(!is_json_media_type("application/"));
        assert!(!is_json_media_type("applicat"));
        assert!(!is_json_media_type(""));
        assert!(!is_json_media_type("text/json"));
    }
}
