//! The orderly shutdown, in this order: stop accepting; run the kill
//! ladder on every task (bounded: cancel grace + term grace + 2 s, then
//! SIGKILL); tell event subscribers goodbye; let answers to blocked
//! requests reach their clients; stop the signal and systemd threads;
//! remove the socket files.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::signals::SignalThread;
use super::Shared;
use crate::config::Config;
use crate::ext::events::Feed;
use crate::procman::Procman;
use crate::systemd::Notifier;
use crate::transport::Listener;

/// Everything the running daemon holds that the drain takes down.
pub(super) struct Serving {
    pub cfg: Arc<Config>,
    pub shared: Arc<Shared>,
    pub listeners: Vec<Listener>,
    pub accept_threads: Vec<JoinHandle<()>>,
    pub procman: Procman,
    pub procman_thread: JoinHandle<()>,
    pub feed: Arc<Feed>,
    pub notifier: Option<Arc<Notifier>>,
    pub signals: SignalThread,
    /// Dropped to stop the systemd watchdog thread (`watch`).
    pub watch_stop: crossbeam_channel::Sender<()>,
    pub watch: Option<JoinHandle<()>>,
}

impl Serving {
    /// Drains after the stop signal `sig` and returns once it is done.
    pub(super) fn drain(self, sig: i32) {
        let started = Instant::now();
        log::info!("agentd.stopping signal={}", crate::sys::signal_name(sig));
        if let Some(n) = &self.notifier {
            n.send("STOPPING=1\nSTATUS=draining: stopping every task");
        }
        self.shared.stopping.store(true, Ordering::SeqCst);
        for l in &self.listeners {
            l.wake();
        }
        for t in self.accept_threads {
            let _ = t.join();
        }
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        if let Err(gone) = self.procman.shutdown(done_tx) {
            log::error!("agentd.stopping {gone}");
        }
        let t = &self.cfg.tasks;
        let ladder = Duration::from_millis(t.cancel_grace_ms + t.term_grace_ms + 2_000);
        if done_rx.recv_timeout(ladder).is_err() {
            log::warn!("agentd.stopping ladder overran; killing every task");
            let _ = self.procman.kill_all();
            let _ = done_rx.recv_timeout(Duration::from_secs(2));
        }
        // Every task is final now: tell event subscribers goodbye.
        self.feed.close();
        // Let answers to blocked requests (now CANCELED) reach their clients.
        let flush_by = Instant::now() + Duration::from_secs(2);
        while self.shared.busy.load(Ordering::SeqCst) > 0 && Instant::now() < flush_by {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.signals.close();
        drop(self.watch_stop);
        if let Some(t) = self.watch {
            let _ = t.join();
        }
        drop(self.procman_thread);
        drop(self.listeners); // removes the socket files
        log::info!("agentd.stopped ms={}", started.elapsed().as_millis());
    }
}
