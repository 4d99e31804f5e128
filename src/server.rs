//! The daemon: listeners, one thread per connection (capped), the
//! keep-alive loop, routing, and the orderly shutdown.
//!
//! ```text
//!  accept ─▶ SO_PEERCRED gate ─▶ cap ─▶ thread: loop { read request ─▶ route ─▶ write }
//!   GET  /.well-known/agent-card.json  → the card (ETag, Last-Modified, Cache-Control)
//!   GET  /metrics                      → Prometheus text (src/metrics.rs)
//!   POST / (or "")                     → Content-Type ─▶ JSON-RPC ─▶ A2A-Version ─▶ method
//!   anything else                      → 404 / 405
//! ```

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// The events extension's feed (it subscribes to the task table).
    feed: Arc<Feed>,
    card: Card,
    gate: Gate,
    http_limits: http::Limits,
    conns: AtomicUsize,
    /// The connection cap: a2a.max_connections, or less when RLIMIT_NOFILE
    /// cannot hold that many beside the fds kept for workers.
    max_conns: usize,
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
            pids_max: cfg.tasks.pids_max.unwrap_or(0),
            memory_max_bytes: cfg.tasks.memory_max_bytes,
            pids_max_where_free: limits::TASK_PIDS_MAX_WHERE_FREE,
        },
    );
    let feed = Arc::new(Feed::new(cfg.events_ring));
    let mut tasks = TaskTable::new(TableLimits {
        max_running: cfg.tasks.max_running,
        max_queued: cfg.tasks.max_queued,
        queued_max_bytes: cfg.tasks.queued_max_bytes,
        retain_max: cfg.tasks.retain_max,
        retain_ms: cfg.tasks.retain_ms,
        retain_bytes: cfg.tasks.retain_bytes,
    });
    tasks.subscribe(feed.clone());
    let tasks = Arc::new(tasks);
    let isolation_text = isolation.to_string();
    let (procman, procman_thread) = crate::procman::spawn(cfg.clone(), tasks.clone(), isolation)
        .map_err(|e| ServeError::Setup("starting procman", e))?;
    // Raises the fd limit as far as the cap needs, or lowers the cap to fit.
    let max_conns = connection_cap(&cfg);
    let shared = Arc::new(Shared {
        card: Card::build(&cfg, &card_addresses, true),
        http_limits: http::Limits {
            body_max_bytes: cfg.body_max_bytes,
            head_timeout: Duration::from_millis(cfg.head_timeout_ms),
            body_timeout: Duration::from_millis(cfg.head_timeout_ms.max(limits::HTTP_BODY_TIMEOUT_MS)),
            idle_timeout: Duration::from_millis(cfg.idle_timeout_ms),
            ..http::Limits::default()
        },
        feed: feed.clone(),
        agent: Agent {
            cfg: cfg.clone(),
            tasks,
            procman: procman.clone(),
            daemon: Daemon {
                started: Instant::now(),
                listeners: listeners.iter().map(Listener::name).collect(),
                draining: AtomicBool::new(false),
                isolation: isolation_text.clone(),
                max_connections: max_conns,
            },
        },
        gate: Gate {
            vsock_allow: cfg.vsock_allow_cids.clone(),
            vsock_operators: cfg.vsock_operator_cids.clone(),
        },
        conns: AtomicUsize::new(0),
        max_conns,
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
        "agentd.ready pid={} max_running={} isolation={isolation_text}",
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
    let mut accept_errors = Throttle::default();
    let mut refusals = Throttle::default();
    loop {
        let peer = match listener.accept() {
            Ok(Some(p)) => p,
            Ok(None) if shared.stopping.load(Ordering::SeqCst) => return,
            Ok(None) => continue,
            Err(e) => {
                if shared.stopping.load(Ordering::SeqCst) {
                    return;
                }
                // EMFILE and friends: log (once per interval), breathe, go
                // on. One bad accept must not take the listener down.
                if let Some(suppressed) = accept_errors.due() {
                    log::warn!("a2a.accept listener={name} error={e} repeats_unlogged={suppressed}");
                }
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
        let Some(slot) = Slot::take(shared, shared.max_conns) else {
            crate::metrics::connection_refused();
            if let Some(suppressed) = refusals.due() {
                log::warn!(
                    "a2a.conn.refused conn={conn_id} reason=connection cap {} reached repeats_unlogged={suppressed}",
                    shared.max_conns
                );
            }
            refuse_busy(stream);
            continue;
        };
        crate::metrics::connection_accepted();
        let shared2 = shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("conn-{conn_id}"))
            .stack_size(limits::CONN_THREAD_STACK_BYTES)
            .spawn(move || {
                // Dropped however the thread ends, a panic included.
                let _slot = slot;
                let reason = serve_connection(stream, &principal, &shared2);
                log::debug!("a2a.conn.close conn={conn_id} reason={reason}");
            });
        // A failed spawn dropped the closure, and the slot with it.
        if let Err(e) = spawned {
            log::warn!("a2a.conn.thread conn={conn_id} error={e}");
        }
    }
}

/// Logs a repeating condition once per [`limits::LOG_REPEAT_INTERVAL_MS`].
#[derive(Default)]
struct Throttle {
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    /// `Some(times not logged since the last line)` when a line is due.
    fn due(&mut self) -> Option<u64> {
        let interval = Duration::from_millis(limits::LOG_REPEAT_INTERVAL_MS);
        if self.last.is_some_and(|t| t.elapsed() < interval) {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(Instant::now());
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// Raises RLIMIT_NOFILE's soft limit as far as connections and the
/// workers' reserve need (at most to the hard limit) and returns the
/// connection cap that fits under it: a2a.max_connections, or less — said
/// once in the log — so a client over the cap gets its 503 before accept
/// could fail with EMFILE, and a task's worker always finds its fds.
fn connection_cap(cfg: &Config) -> usize {
    let reserve = limits::FD_RESERVE_BASE + limits::FD_RESERVE_PER_TASK * cfg.tasks.max_running as u64;
    let wanted = cfg.max_connections as u64 + reserve;
    let Ok((mut soft, hard)) = crate::sys::nofile_limit() else {
        return cfg.max_connections;
    };
    if soft < wanted {
        let raised = wanted.min(hard);
        match crate::sys::set_nofile_soft(raised, hard) {
            Ok(()) => {
                log::info!("agentd.nofile soft={raised} was={soft} hard={hard}");
                soft = raised;
            }
            Err(e) => log::warn!("agentd.nofile cannot raise soft={soft} to {raised}: {e}"),
        }
    }
    let fits = usize::try_from(soft.saturating_sub(reserve))
        .unwrap_or(usize::MAX)
        .max(1);
    if fits < cfg.max_connections {
        log::warn!(
            "a2a.max_connections lowered to {fits} (configured {}): RLIMIT_NOFILE is {soft} (hard {hard}) and {reserve} \
             fds are kept for workers; raise the hard limit (ulimit -Hn, systemd LimitNOFILE=) to serve more",
            cfg.max_connections
        );
    }
    fits.min(cfg.max_connections)
}

/// A connection slot, given back on drop: however a connection thread
/// ends, a panic included, its slot is free again.
struct Slot(Arc<Shared>);

impl Slot {
    /// A slot, unless `max` are taken.
    fn take(shared: &Arc<Shared>, max: usize) -> Option<Slot> {
        if shared.conns.fetch_add(1, Ordering::SeqCst) >= max {
            shared.conns.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Slot(shared.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.conns.fetch_sub(1, Ordering::SeqCst);
    }
}

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

/// Over the connection cap: a short 503, then close.
fn refuse_busy(mut stream: Stream) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(500)));
    let resp =
        Response::error(503, "too many connections (a2a.max_connections); retry later").header("Retry-After", "1");
    let _ = http::write_response(&mut stream, &resp, false);
}

/// Why a connection ended, for the log.
enum CloseReason {
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
        let busy = Busy::enter(&shared.busy);
        let peer_gone = || stream.peer_gone();
        let written = match route(&req, principal, shared, &peer_gone) {
            Reply::Gone => return CloseReason::PeerGone,
            Reply::Full(resp) => {
                let keep_alive = req.keep_alive && !shared.stopping.load(Ordering::SeqCst);
                http::write_response(&mut stream, &resp, keep_alive)
            }
            Reply::Stream { id, source, active } => {
                // HTTP/1.0 knows no chunked coding: its stream ends with the connection.
                let close_delimited = !req.http11;
                let written = write_stream(&mut stream, principal, shared, &id, source, &active, close_delimited);
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

/// What a request gets: a whole response, or an SSE stream.
enum Reply {
    Full(Response),
    /// The client hung up while its call waited: close, answer nothing.
    Gone,
    Stream {
        id: rpc::Id,
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

fn route(req: &Request, principal: &Principal, shared: &Shared, peer_gone: &dyn Fn() -> bool) -> Reply {
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
    let echo = active.echo();
    if !echo.is_empty() {
        headers.push(("A2A-Extensions".to_string(), echo.join(", ")));
    }
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
    let mut sink = |emit: Emit| match emit {
        Emit::Event(seq, mut result) => {
            events += 1;
            if strip_labels {
                ext::annotations::strip(&mut result);
            }
            let data = String::from_utf8_lossy(&rpc::success(id, &result)).into_owned();
            out.chunk(&sse::encode_event(seq, &data))
        }
        Emit::KeepAlive => out.chunk(&sse::encode_comment("keep-alive")),
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
        .and_then(|()| shared.agent.call(&ctx, &call.method, call.params));
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
