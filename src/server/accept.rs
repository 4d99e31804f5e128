//! The accept loop of one listener: the peer gate, the connection cap
//! (over it: a short 503), and a thread per connection.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::conn::serve_connection;
use super::Shared;
use crate::http::{self, Conn, Response};
use crate::limits;
use crate::transport::{AcceptHandle, Stream};

pub(super) fn accept_loop(listener: &AcceptHandle, shared: &Arc<Shared>, name: &str) {
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
                let mut stream = stream;
                // Dropped however the thread ends, a panic included, and
                // before the stream (locals drop in reverse): a client that
                // sees its connection closed finds the slot free again.
                let _slot = slot;
                yield_on_wakeup(conn_id);
                let reason = serve_connection(&mut stream, &principal, &shared2);
                log::debug!("a2a.conn.close conn={conn_id} reason={reason}");
            });
        // A failed spawn dropped the closure, and the slot with it.
        if let Err(e) = spawned {
            log::warn!("a2a.conn.thread conn={conn_id} error={e}");
        }
    }
}

/// Makes this connection thread wait its turn when woken (a request in,
/// its task settled) instead of cutting procman's turn short: under load
/// procman then settles and starts a run of tasks in one go, without a
/// switch away and back per task (see sys::yield_on_wakeup). Its share of
/// the CPU is unchanged; a policy other than the default is the operator's
/// and stays. Where the kernel refuses (a seccomp filter), the thread keeps
/// its policy; that is said once.
fn yield_on_wakeup(conn_id: usize) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if let Err(e) = crate::sys::yield_on_wakeup() {
        if !SAID.swap(true, Ordering::Relaxed) {
            log::info!("a2a.conn.sched conn={conn_id} SCHED_BATCH refused: {e}; connection threads keep their policy");
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

/// Over the connection cap: a short 503, then close.
fn refuse_busy(mut stream: Stream) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(500)));
    let resp =
        Response::error(503, "too many connections (a2a.max_connections); retry later").header("Retry-After", "1");
    let _ = http::write_response(&mut stream, &resp, false);
}
