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
//!
//! Here: starting up (listeners, procman, the connection cap, systemd's
//! READY=1). Each running part has its room: `signals.rs` (the first
//! SIGTERM drains, a second kills), `accept.rs` (the accept loop and the
//! cap), `conn.rs` (one connection's keep-alive loop and SSE streams),
//! `routes.rs` (what each request gets), `drain.rs` (the orderly shutdown).

mod accept;
mod conn;
mod drain;
mod routes;
mod signals;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::a2a::card::Card;
use crate::a2a::{Agent, Daemon};
use crate::cgroup::Isolation;
use crate::config::Config;
use crate::ext::events::Feed;
use crate::http;
use crate::limits;
use crate::tasks::{TableLimits, TaskTable};
use crate::transport::{self, Gate, Listener};

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
    crate::sys::keep_large_blocks_out_of_mallocs_heap();
    if let Err(e) = crate::sys::set_child_subreaper() {
        log::warn!("agentd.subreaper error={e}; orphaned grandchildren will be reaped by init");
    }
    let caught = signals::install()?;
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
            crate::vital::spawn("accept", move || accept::accept_loop(&listener, &shared, &name))
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

    let signals = signals::spawn(caught, procman.clone())?;
    let sig = signals.first_stop();
    drain::Serving {
        cfg,
        shared,
        listeners,
        accept_threads,
        procman,
        procman_thread,
        feed,
        notifier,
        signals,
        watch_stop,
        watch,
    }
    .drain(sig);
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

/// Raises RLIMIT_NOFILE's soft limit as far as connections and the
/// workers' reserve need (at most to the hard limit) and returns the
/// connection cap that fits under it: a2a.max_connections, or less — said
/// once in the log — so a client over the cap gets its 503 before accept
/// could fail with EMFILE, and a task's worker always finds its fds.
fn connection_cap(cfg: &Config) -> usize {
    let pool = cfg.tasks.prespawn.unwrap_or(limits::PRESPAWN_AUTO_MAX);
    let workers = (cfg.tasks.max_running + pool) as u64;
    let reserve = limits::FD_RESERVE_BASE + limits::FD_RESERVE_PER_TASK * workers;
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
