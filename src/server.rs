//! The daemon: listeners, one thread per connection (capped), the
//! keep-alive loop, routing, and the orderly shutdown.
//!
//! ```text
//!  accept ─▶ SO_PEERCRED gate ─▶ cap ─▶ thread: loop { read request ─▶ route ─▶ write }
//!   GET  /.well-known/agent-card.json  → the card (ETag, Cache-Control)
//!   GET  /metrics                      → Prometheus text (src/metrics.rs)
//!   POST / (or "")                     → Content-Type ─▶ JSON-RPC ─▶ A2A-Version ─▶ method
//!   anything else                      → 404 / 405
//! ```

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::a2a::card::{Card, PROTOCOL_VERSION};
use crate::a2a::{stream, Agent, Answer, Call, Daemon};
use crate::cgroup::Isolation;
use crate::config::Config;
use crate::ext;
use crate::ext::events::{Emit, Feed};
use crate::http::{self, sse, Conn, ReadError, Request, Response};
use crate::limits;
use crate::principal::Principal;
use crate::rpc::{self, RpcError};
use crate::tasks::{TableLimits, TaskTable};
use crate::transport::{self, AcceptHandle, Gate, Listener, Stream};

const CARD_PATH: &str = "/.well-known/agent-card.json";
const METRICS_PATH: &str = "/metrics";

/// Everything a connection thread needs.
struct Shared {
    agent: Agent,
    card: Card,
    gate: Gate,
    http_limits: http::Limits,
    conns: AtomicUsize,
    busy: AtomicUsize,
    stopping: AtomicBool,
    next_conn: AtomicUsize,
}

/// Why `serve` could not run.
#[derive(Debug)]
pub enum ServeError {
    Bind(transport::BindError),
    Setup(&'static str, std::io::Error),
    /// LISTEN_FDS named descriptors agentd cannot serve.
    Activation(String),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Bind(e) => write!(f, "{e}"),
            ServeError::Setup(what, e) => write!(f, "cannot start: {what}: {e}"),
            ServeError::Activation(e) => write!(f, "cannot start: {e}"),
        }
    }
}

/// Runs the daemon until SIGTERM/SIGINT, then drains and returns.
pub fn serve(cfg: Config) -> Result<(), ServeError> {
    let cfg = Arc::new(cfg);
    // Read (and removed from our environment) before any thread or task.
    let notifier = crate::systemd::Notifier::from_env().map(Arc::new);
    let passed = crate::systemd::listen_fds().map_err(ServeError::Activation)?;
    if let Err(e) = crate::sys::set_child_subreaper() {
        log::warn!("agentd.subreaper error={e}; orphaned grandchildren will be reaped by init");
    }
    // SIGCHLD is procman's own (a self-pipe it polls); these are ours.
    let mut signals = signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
        .map_err(|e| ServeError::Setup("installing signal handlers", e))?;
    let listeners = listen(&cfg, passed)?;
    let card_addresses: Vec<transport::Address> = listeners.iter().map(Listener::card_address).collect();
    let isolation = Isolation::detect(
        &cfg.tasks.cgroup,
        crate::cgroup::Limits {
            pids_max: cfg.tasks.pids_max,
            memory_max_bytes: cfg.tasks.memory_max_bytes,
        },
    );
    let feed = Arc::new(Feed::new(cfg.events_ring));
    let tasks = Arc::new(TaskTable::new(
        TableLimits {
            max_running: cfg.tasks.max_running,
            max_queued: cfg.tasks.max_queued,
            retain_max: cfg.tasks.retain_max,
            retain_ms: cfg.tasks.retain_ms,
        },
        feed.clone(),
    ));
    let (procman, procman_thread) = crate::procman::spawn(cfg.clone(), tasks.clone(), isolation.clone())
        .map_err(|e| ServeError::Setup("starting procman", e))?;
    let shared = Arc::new(Shared {
        card: Card::build(&cfg, &card_addresses, true),
        http_limits: http::Limits {
            body_max_bytes: cfg.body_max_bytes,
            head_timeout: Duration::from_millis(cfg.head_timeout_ms),
            body_timeout: Duration::from_millis(cfg.head_timeout_ms.max(limits::HTTP_BODY_TIMEOUT_MS)),
            idle_timeout: Duration::from_millis(cfg.idle_timeout_ms),
            ..http::Limits::default()
        },
        agent: Agent {
            cfg: cfg.clone(),
            tasks,
            procman: procman.clone(),
            daemon: Daemon {
                started: Instant::now(),
                listeners: listeners.iter().map(Listener::name).collect(),
                draining: AtomicBool::new(false),
                isolation: isolation.to_string(),
            },
        },
        gate: Gate {
            vsock_allow: cfg.vsock_allow_cids.clone(),
            vsock_operators: cfg.vsock_operator_cids.clone(),
        },
        conns: AtomicUsize::new(0),
        busy: AtomicUsize::new(0),
        stopping: AtomicBool::new(false),
        next_conn: AtomicUsize::new(1),
    });

    let mut accept_threads = Vec::new();
    for l in &listeners {
        let listener = l.try_clone().map_err(|e| ServeError::Setup("cloning a listener", e))?;
        let shared = shared.clone();
        let name = l.name();
        accept_threads.push(
            std::thread::Builder::new()
                .name("accept".into())
                .spawn(move || accept_loop(&listener, &shared, &name))
                .map_err(|e| ServeError::Setup("starting an accept thread", e))?,
        );
        log::info!("a2a.listen address={} runner={}", l.name(), cfg.runner.name());
    }
    log::info!(
        "agentd.ready pid={} max_running={} isolation={isolation}",
        std::process::id(),
        cfg.tasks.max_running
    );

    let (watch_stop, watch_rx) = crossbeam_channel::bounded::<()>(1);
    let watch = match &notifier {
        Some(n) => Some(notify_ready(n, &shared, &procman, watch_rx)?),
        None => None,
    };

    // The signal thread's only job: turn the first SIGTERM/SIGINT into a
    // drain and the second into SIGKILL.
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<i32>(1);
    let signal_procman = procman.clone();
    let handle = signals.handle();
    let signal_thread = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut terms = 0;
            for sig in signals.forever() {
                match sig {
                    libc::SIGHUP => log::info!("agentd.sighup ignored: nothing is reloaded; restart to apply config"),
                    _ => {
                        terms += 1;
                        if terms == 1 {
                            let _ = stop_tx.try_send(sig);
                        } else {
                            log::warn!(
                                "agentd.signal second {}: killing every task now",
                                crate::sys::signal_name(sig)
                            );
                            signal_procman.kill_all();
                        }
                    }
                }
            }
        })
        .map_err(|e| ServeError::Setup("starting the signal thread", e))?;

    let sig = stop_rx.recv().unwrap_or(libc::SIGTERM);
    let started = Instant::now();
    log::info!("agentd.stopping signal={}", crate::sys::signal_name(sig));
    if let Some(n) = &notifier {
        n.send("STOPPING=1\nSTATUS=draining: stopping every task");
    }
    shared.stopping.store(true, Ordering::SeqCst);
    for l in &listeners {
        l.wake();
    }
    for t in accept_threads {
        let _ = t.join();
    }
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    procman.shutdown(done_tx);
    let t = &cfg.tasks;
    let ladder = Duration::from_millis(t.cancel_grace_ms + t.term_grace_ms + 2_000);
    if done_rx.recv_timeout(ladder).is_err() {
        log::warn!("agentd.stopping ladder overran; killing every task");
        procman.kill_all();
        let _ = done_rx.recv_timeout(Duration::from_secs(2));
    }
    // Every task is final now: tell event subscribers goodbye.
    feed.close();
    // Let answers to blocked requests (now CANCELED) reach their clients.
    let flush_by = Instant::now() + Duration::from_secs(2);
    while shared.busy.load(Ordering::SeqCst) > 0 && Instant::now() < flush_by {
        std::thread::sleep(Duration::from_millis(10));
    }
    handle.close();
    let _ = signal_thread.join();
    drop(watch_stop);
    if let Some(t) = watch {
        let _ = t.join();
    }
    drop(procman_thread);
    drop(listeners); // removes the socket files
    log::info!("agentd.stopped ms={}", started.elapsed().as_millis());
    Ok(())
}

/// The listeners to serve: those the service manager passed (socket
/// activation), else the configured ones, bound here.
fn listen(cfg: &Config, passed: Vec<crate::systemd::Passed>) -> Result<Vec<Listener>, ServeError> {
    if passed.is_empty() {
        return cfg
            .listeners()
            .iter()
            .map(|addr| Listener::bind(addr).map_err(ServeError::Bind))
            .collect();
    }
    if !cfg.listen.is_empty() {
        log::info!("a2a.activated a2a.listen is ignored: serving the sockets systemd passed");
    }
    passed
        .into_iter()
        .map(|p| {
            Listener::adopt(p.fd).map_err(|e| ServeError::Activation(format!("socket activation: `{}`: {e}", p.name)))
        })
        .collect()
}

/// READY=1 with a first STATUS=, then the watchdog/status thread.
fn notify_ready(
    notifier: &Arc<crate::systemd::Notifier>,
    shared: &Arc<Shared>,
    procman: &crate::procman::Procman,
    stop: crossbeam_channel::Receiver<()>,
) -> Result<std::thread::JoinHandle<()>, ServeError> {
    let listening = shared.agent.daemon.listeners.join(", ");
    let tasks = shared.agent.tasks.clone();
    let status = move || {
        let (queued, running, _) = tasks.counts();
        format!("listening on {listening}; {running} tasks running, {queued} queued")
    };
    // A round trip through procman: its loop is turning and the first
    // idle workers were spawned (fill_pool runs before it takes requests).
    if procman.ping().recv_timeout(Duration::from_secs(5)).is_err() {
        log::warn!("agentd.notify procman did not answer within 5 s; reporting ready anyway");
    }
    notifier.send(&format!("READY=1\nSTATUS={}", status()));
    let procman = procman.clone();
    crate::systemd::watch(notifier.clone(), move || procman.ping(), status, stop)
        .map_err(|e| ServeError::Setup("starting the systemd notifier thread", e))
}

fn accept_loop(listener: &AcceptHandle, shared: &Arc<Shared>, name: &str) {
    loop {
        let peer = match listener.accept() {
            Ok(Some(p)) => p,
            Ok(None) if shared.stopping.load(Ordering::SeqCst) => return,
            Ok(None) => continue,
            Err(e) => {
                if shared.stopping.load(Ordering::SeqCst) {
                    return;
                }
                // EMFILE and friends: log, breathe, go on. One bad accept
                // must not take the listener down.
                log::warn!("a2a.accept listener={name} error={e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let (stream, principal) = match shared.gate.admit(peer) {
            Ok(admitted) => admitted,
            Err(denied) => {
                log::warn!("{} {denied} listener={name}", denied.event());
                let (transport, id) = denied.series();
                crate::metrics::peer_denied(transport, id);
                continue; // dropped: closed before a byte is read
            }
        };
        let conn_id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        if shared.conns.fetch_add(1, Ordering::SeqCst) >= shared.agent.cfg.max_connections {
            shared.conns.fetch_sub(1, Ordering::SeqCst);
            crate::metrics::connection_refused();
            refuse_busy(stream, conn_id);
            continue;
        }
        crate::metrics::connection_accepted();
        let shared2 = shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("conn-{conn_id}"))
            .stack_size(limits::CONN_THREAD_STACK_BYTES)
            .spawn(move || {
                let reason = serve_connection(stream, &principal, &shared2);
                log::debug!("a2a.conn.close conn={conn_id} reason={reason}");
                shared2.conns.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            shared.conns.fetch_sub(1, Ordering::SeqCst);
            log::warn!("a2a.conn.thread conn={conn_id} error={e}");
        }
    }
}

/// Over the connection cap: a short 503, then close.
fn refuse_busy(mut stream: Stream, conn_id: usize) {
    log::warn!("a2a.conn.refused conn={conn_id} reason=connection cap reached");
    let _ = stream.set_write_timeout(Some(Duration::from_millis(500)));
    let resp =
        Response::error(503, "too many connections (a2a.max_connections); retry later").header("Retry-After", "1");
    let _ = http::write_response(&mut stream, &resp, false);
}

/// Why a connection ended, for the log.
enum CloseReason {
    PeerClosed,
    Idle,
    Rejected(u16),
    ClientAskedClose,
    Stopping,
    Io(std::io::Error),
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::PeerClosed => f.write_str("peer closed"),
            CloseReason::Idle => f.write_str("idle timeout"),
            CloseReason::Rejected(s) => write!(f, "bad request ({s})"),
            CloseReason::ClientAskedClose => f.write_str("Connection: close"),
            CloseReason::Stopping => f.write_str("daemon stopping"),
            CloseReason::Io(e) => write!(f, "i/o error: {e}"),
        }
    }
}

fn serve_connection(mut stream: Stream, principal: &Principal, shared: &Shared) -> CloseReason {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(limits::HTTP_WRITE_TIMEOUT_MS)));
    let mut reader = http::Reader::new(shared.http_limits.clone());
    loop {
        let req = match reader.read_request(&mut stream) {
            Ok(r) => r,
            Err(ReadError::Closed) => return CloseReason::PeerClosed,
            Err(ReadError::Idle) => return CloseReason::Idle,
            Err(e @ ReadError::Reject { .. }) => {
                let status = match &e {
                    ReadError::Reject { status, .. } => *status,
                    _ => 400,
                };
                if let Some(resp) = e.response() {
                    let _ = http::write_response(&mut stream, &resp, false);
                }
                return CloseReason::Rejected(status);
            }
            Err(ReadError::Io(e)) => return CloseReason::Io(e),
        };
        shared.busy.fetch_add(1, Ordering::SeqCst);
        let written = match route(&req, principal, shared) {
            Reply::Full(resp) => {
                let keep_alive = req.keep_alive && !shared.stopping.load(Ordering::SeqCst);
                http::write_response(&mut stream, &resp, keep_alive)
            }
            Reply::Stream { id, source, active } => write_stream(&mut stream, principal, shared, &id, source, &active),
        };
        shared.busy.fetch_sub(1, Ordering::SeqCst);
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

/// What a request gets: a whole response, or an SSE stream.
enum Reply {
    Full(Response),
    Stream {
        id: Value,
        source: Source,
        active: ext::Active,
    },
}

/// What a stream carries.
enum Source {
    Task(Box<stream::Plan>),
    /// The events extension's feed, resuming after this sequence.
    Events(Option<u64>),
}

fn route(req: &Request, principal: &Principal, shared: &Shared) -> Reply {
    let path = req.path.as_str();
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
            "POST" => rpc_response(req, principal, shared),
            _ => Reply::Full(Response::error(405, "JSON-RPC requests are POSTed to /").header("Allow", "POST")),
        };
    }
    Reply::Full(Response::error(
        404,
        "not found: JSON-RPC is served at POST /, the card at GET /.well-known/agent-card.json, \
         metrics at GET /metrics",
    ))
}

/// Writes an SSE stream: headers, one chunk per event (flushed at once),
/// keep-alive comments while idle, the zero chunk at the end.
fn write_stream(
    stream: &mut Stream,
    principal: &Principal,
    shared: &Shared,
    id: &Value,
    source: Source,
    active: &ext::Active,
) -> std::io::Result<()> {
    let mut headers = vec![
        ("Content-Type".to_string(), "text/event-stream".to_string()),
        ("Cache-Control".to_string(), "no-cache".to_string()),
        ("X-Accel-Buffering".to_string(), "no".to_string()),
    ];
    let echo = active.echo();
    if !echo.is_empty() {
        headers.push(("A2A-Extensions".to_string(), echo.join(", ")));
    }
    let subject = match &source {
        Source::Task(plan) => format!("task={}", plan.task_id),
        Source::Events(_) => "events".to_string(),
    };
    let strip_labels = !active.has(ext::ANNOTATIONS);
    let mut out = http::ChunkedWriter::start(stream, 200, &headers)?;
    let keepalive = Duration::from_millis(shared.agent.cfg.sse_keepalive_ms);
    let mut events = 0u64;
    let mut sink = |emit: Emit| match emit {
        Emit::Event(seq, mut result) => {
            events += 1;
            if strip_labels {
                ext::annotations::strip(&mut result);
            }
            let data = String::from_utf8_lossy(&rpc::success(id, result)).into_owned();
            out.chunk(&sse::encode_event(seq, &data))
        }
        Emit::KeepAlive => out.chunk(&sse::encode_comment("keep-alive")),
    };
    let pumped = match source {
        Source::Task(plan) => stream::pump(&shared.agent.tasks, principal, *plan, keepalive, &mut sink),
        Source::Events(from) => ext::events::pump(shared.agent.tasks.feed(), principal, from, keepalive, &mut sink),
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

/// `GET /metrics`: the counters plus what the task table and the
/// connection count say now.
fn metrics_response(shared: &Shared) -> Response {
    let (queued, running, finished) = shared.agent.tasks.counts();
    let gauges = crate::metrics::Gauges {
        tasks_queued: queued,
        tasks_running: running,
        tasks_retained_finished: finished,
        connections_open: shared.conns.load(Ordering::SeqCst),
        max_running: shared.agent.tasks.max_running(),
    };
    Response::new(200).header("Cache-Control", "no-store").body(
        crate::metrics::CONTENT_TYPE,
        crate::metrics::render(&gauges).into_bytes(),
    )
}

fn card_response(req: &Request, card: &Card) -> Response {
    let cache = format!("public, max-age={}", limits::CARD_MAX_AGE_SECS);
    let matches = req
        .header("If-None-Match")
        .is_some_and(|v| v.split(',').any(|t| t.trim() == card.etag || t.trim() == "*"));
    if matches {
        return Response::new(304)
            .header("ETag", &card.etag)
            .header("Cache-Control", &cache);
    }
    Response::new(200)
        .header("ETag", &card.etag)
        .header("Cache-Control", &cache)
        .body("application/json", card.json.clone())
}

fn json_response(status: u16, body: Vec<u8>, extensions: &[String]) -> Response {
    let mut resp = Response::new(status).body("application/json", body);
    if !extensions.is_empty() {
        resp = resp.header("A2A-Extensions", &extensions.join(", "));
    }
    resp
}

fn rpc_response(req: &Request, principal: &Principal, shared: &Shared) -> Reply {
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
            return full(err.http_status(), rpc::failure(&Value::Null, &err));
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
        trace: crate::trace::TraceContext::from_headers(req.header("traceparent"), req.header("tracestate")),
    };
    let result = check_version(req, shared.agent.cfg.version_required)
        .and_then(|()| shared.agent.call(&ctx, &call.method, call.params));
    match result {
        Ok(Answer::Value(mut v)) => {
            if !active.has(ext::ANNOTATIONS) {
                ext::annotations::strip(&mut v);
            }
            full(200, rpc::success(&call.id, v))
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

/// `application/json`, with or without parameters, or any `+json` type.
fn is_json_media_type(ct: &str) -> bool {
    let essence = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// A2A-Version from the header or the `?A2A-Version=` query; Major.Minor
/// only counts. A missing value means 0.3 (the spec's rule).
fn check_version(req: &Request, required: bool) -> Result<(), RpcError> {
    let raw = req
        .header("A2A-Version")
        .map(str::to_string)
        .or_else(|| req.query_param("A2A-Version"))
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
    if format!("{major}.{minor}") == PROTOCOL_VERSION {
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
    }
}
