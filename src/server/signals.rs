//! The daemon's own signals: the first SIGTERM or SIGINT starts the drain,
//! a second one kills every task now; SIGHUP is logged and ignored.
//! (SIGCHLD is procman's: a signalfd it polls, see sys/wake.rs.)

use std::thread::JoinHandle;

use crossbeam_channel::Receiver;
use signal_hook::iterator::{Handle, Signals};

use super::ServeError;
use crate::procman::Procman;

/// Catches SIGTERM, SIGINT and SIGHUP from now on (before any listener
/// exists, so none of them can end the process unannounced).
pub(super) fn install() -> Result<Signals, ServeError> {
    Signals::new([libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
        .map_err(|e| ServeError::Setup("installing signal handlers", e))
}

/// The thread that takes the signals [`install`] caught.
pub(super) struct SignalThread {
    handle: Handle,
    thread: JoinHandle<()>,
    first_stop: Receiver<i32>,
}

/// Starts the signal thread. Its only job: turn the first SIGTERM/SIGINT
/// into a drain and the second into SIGKILL.
pub(super) fn spawn(mut signals: Signals, procman: Procman) -> Result<SignalThread, ServeError> {
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<i32>(1);
    let handle = signals.handle();
    let thread = crate::vital::spawn("signals", move || {
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
                        if let Err(gone) = procman.kill_all() {
                            log::error!("agentd.signal {gone}");
                        }
                    }
                }
            }
        }
    })
    .map_err(|e| ServeError::Setup("starting the signal thread", e))?;
    Ok(SignalThread {
        handle,
        thread,
        first_stop: stop_rx,
    })
}

impl SignalThread {
    /// Waits for the first SIGTERM or SIGINT and says which it was.
    pub(super) fn first_stop(&self) -> i32 {
        self.first_stop.recv().unwrap_or(libc::SIGTERM)
    }

    /// Stops taking signals and ends the thread.
    pub(super) fn close(self) {
        self.handle.close();
        let _ = self.thread.join();
    }
}
