//! systemd's two daemon protocols, spoken without libsystemd.
//!
//! ```text
//!  NOTIFY_SOCKET=/run/…/notify    datagram to a path          READY=1 once every
//!  NOTIFY_SOCKET=@name            datagram, abstract name     listener is bound and
//!  NOTIFY_SOCKET=vsock:CID:PORT   one vsock stream per        procman is up; STATUS=…;
//!                                 message (a VM guest → host) STOPPING=1 at the drain;
//!  WATCHDOG_USEC=N                WATCHDOG=1 every N/2 µs, only after procman answered a ping
//!
//!  LISTEN_PID=<our pid> LISTEN_FDS=n LISTEN_FDNAMES=a:b   fds 3…3+n-1 are listeners to serve
//! ```
//! The variables are read once at start-up and removed from agentd's own
//! environment; task processes never see them (their environment is an
//! allow-list anyway).

use std::io::{self, Write};
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::PathBuf;
use std::time::Duration;

/// The variables this module reads.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";
const WATCHDOG_USEC: &str = "WATCHDOG_USEC";
const WATCHDOG_PID: &str = "WATCHDOG_PID";
const LISTEN_PID: &str = "LISTEN_PID";
const LISTEN_FDS: &str = "LISTEN_FDS";
const LISTEN_FDNAMES: &str = "LISTEN_FDNAMES";
/// The first fd systemd passes (SD_LISTEN_FDS_START).
const LISTEN_FDS_START: RawFd = 3;

/// Where `NOTIFY_SOCKET` points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotifyTarget {
    Path(PathBuf),
    /// An abstract unix name (the `@` stripped).
    Abstract(Vec<u8>),
    Vsock {
        cid: u32,
        port: u32,
    },
}

impl NotifyTarget {
    /// `/path`, `@abstract`, or `vsock:CID:PORT` (also `vsock-stream:`).
    pub fn parse(s: &str) -> Result<NotifyTarget, String> {
        if s.starts_with('/') {
            return Ok(NotifyTarget::Path(PathBuf::from(s)));
        }
        if let Some(name) = s.strip_prefix('@') {
            if !name.is_empty() {
                return Ok(NotifyTarget::Abstract(name.as_bytes().to_vec()));
            }
        }
        if let Some(rest) = s.strip_prefix("vsock:").or_else(|| s.strip_prefix("vsock-stream:")) {
            if let Some((cid, port)) = rest.split_once(':') {
                if let (Ok(cid), Ok(port)) = (cid.parse(), port.parse()) {
                    return Ok(NotifyTarget::Vsock { cid, port });
                }
            }
        }
        Err(format!(
            "NOTIFY_SOCKET=`{s}`: expected an absolute path, @abstract-name or vsock:CID:PORT"
        ))
    }
}

/// The service manager's ear, when there is one.
#[derive(Debug)]
pub struct Notifier {
    target: NotifyTarget,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// From `NOTIFY_SOCKET` and `WATCHDOG_USEC`/`WATCHDOG_PID`, which are then
    /// removed from the environment. None when agentd is not supervised.
    pub fn from_env() -> Option<Notifier> {
        let raw = std::env::var(NOTIFY_SOCKET).ok();
        let usec = std::env::var(WATCHDOG_USEC).ok();
        let pid = std::env::var(WATCHDOG_PID).ok();
        for name in [NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID] {
            // Start-up is single-threaded: nothing reads the environment
            // concurrently.
            std::env::remove_var(name);
        }
        let target = match NotifyTarget::parse(raw?.as_str()) {
            Ok(t) => t,
            Err(e) => {
                log::warn!("agentd.notify {e}; not notifying");
                return None;
            }
        };
        let ours = pid.is_none_or(|p| p.trim() == std::process::id().to_string());
        let watchdog = usec
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|u| *u > 0 && ours)
            .map(Duration::from_micros);
        Some(Notifier { target, watchdog })
    }

    /// How often WATCHDOG=1 is due (half the manager's timeout).
    pub fn watchdog_every(&self) -> Option<Duration> {
        self.watchdog.map(|d| d / 2)
    }

    /// Sends one notification (newline-separated `KEY=VALUE` lines). A
    /// failure is logged, never fatal: the manager may be gone.
    pub fn send(&self, message: &str) {
        if let Err(e) = self.try_send(message) {
            log::warn!("agentd.notify target={:?} error={e}", self.target);
        }
    }

    fn try_send(&self, message: &str) -> io::Result<()> {
        match &self.target {
            NotifyTarget::Path(p) => UnixDatagram::unbound()?.send_to(message.as_bytes(), p).map(drop),
            NotifyTarget::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = SocketAddr::from_abstract_name(name)?;
                UnixDatagram::unbound()?
                    .send_to_addr(message.as_bytes(), &addr)
                    .map(drop)
            }
            NotifyTarget::Vsock { cid, port } => {
                // vsock has no datagrams: one connection per message, whose
                // end (EOF) marks the message's end.
                let mut s = vsock::VsockStream::connect_with_cid_port(*cid, *port)?;
                s.set_write_timeout(Some(Duration::from_millis(
                    crate::limits::SYSTEMD_VSOCK_NOTIFY_TIMEOUT_MS,
                )))?;
                s.write_all(message.as_bytes())
            }
        }
    }
}

/// How often STATUS= is refreshed when no watchdog asks for more.
const STATUS_EVERY: Duration = Duration::from_millis(crate::limits::SYSTEMD_STATUS_EVERY_MS);

/// The notifier's thread: WATCHDOG=1 every half watchdog period, but only
/// after `ping` answered within that time — `ping` is a round trip through
/// procman's loop, so a wedged procman stops the beats and systemd restarts
/// the service. STATUS= is refreshed whenever `status` changes. Ends when
/// `stop` fires or its sender is dropped.
pub fn watch(
    notifier: std::sync::Arc<Notifier>,
    ping: impl Fn() -> crossbeam_channel::Receiver<()> + Send + 'static,
    status: impl Fn() -> String + Send + 'static,
    stop: crossbeam_channel::Receiver<()>,
) -> io::Result<std::thread::JoinHandle<()>> {
    let every = notifier.watchdog_every().unwrap_or(STATUS_EVERY).min(STATUS_EVERY);
    std::thread::Builder::new().name("systemd".into()).spawn(move || {
        let mut last = String::new();
        loop {
            let beat_by = std::time::Instant::now() + every;
            if notifier.watchdog.is_some() {
                match ping().recv_timeout(every) {
                    Ok(()) => notifier.send("WATCHDOG=1"),
                    Err(_) => log::warn!(
                        "agentd.watchdog procman did not answer within {} ms; not beating",
                        every.as_millis()
                    ),
                }
            }
            let now = status();
            if now != last {
                notifier.send(&format!("STATUS={now}"));
                last = now;
            }
            let left = beat_by.saturating_duration_since(std::time::Instant::now());
            match stop.recv_timeout(left) {
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        }
    })
}

/// One listener systemd passed, with the name `FileDescriptorName=` gave it.
#[derive(Debug)]
pub struct Passed {
    pub fd: OwnedFd,
    pub name: String,
}

/// The listeners passed by socket activation (`LISTEN_PID` = our pid), or
/// none. The variables are removed either way, so nothing started later
/// believes the fds are its own.
pub fn listen_fds() -> Result<Vec<Passed>, String> {
    let pid = std::env::var(LISTEN_PID).ok();
    let fds = std::env::var(LISTEN_FDS).ok();
    let names = std::env::var(LISTEN_FDNAMES).ok();
    for name in [LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES] {
        // Start-up is single-threaded (see Notifier::from_env).
        std::env::remove_var(name);
    }
    passed_fds(pid.as_deref(), fds.as_deref(), names.as_deref(), std::process::id())?
        .into_iter()
        .map(|(fd, name)| {
            crate::sys::adopt_listening_socket(fd)
                .map(|fd| Passed { fd, name: name.clone() })
                .map_err(|e| format!("socket activation: fd {fd} ({name}): {e}"))
        })
        .collect()
}

/// The descriptors and names `LISTEN_PID`/`LISTEN_FDS`/`LISTEN_FDNAMES`
/// pass to process `own_pid` (none when meant for another): what
/// [`listen_fds`] adopts, apart so it can be fuzzed without the environment.
pub fn passed_fds(
    pid: Option<&str>,
    fds: Option<&str>,
    names: Option<&str>,
    own_pid: u32,
) -> Result<Vec<(RawFd, String)>, String> {
    let (Some(pid), Some(fds)) = (pid, fds) else {
        return Ok(Vec::new());
    };
    if pid.trim() != own_pid.to_string() {
        return Ok(Vec::new()); // meant for another process
    }
    let n: RawFd = fds
        .trim()
        .parse()
        .ok()
        .filter(|n| (0..=1024).contains(n))
        .ok_or_else(|| format!("{LISTEN_FDS}=`{fds}` is not a count of descriptors"))?;
    let names: Vec<&str> = names.map(|n| n.split(':').collect()).unwrap_or_default();
    Ok((0..n)
        .map(|i| {
            let name = names.get(i as usize).copied().unwrap_or("unknown").to_string();
            (LISTEN_FDS_START + i, name)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_socket_forms() {
        assert_eq!(
            NotifyTarget::parse("/run/systemd/notify").unwrap(),
            NotifyTarget::Path("/run/systemd/notify".into())
        );
        assert_eq!(
            NotifyTarget::parse("@sd-notify").unwrap(),
            NotifyTarget::Abstract(b"sd-notify".to_vec())
        );
        assert_eq!(
            NotifyTarget::parse("vsock:2:9999").unwrap(),
            NotifyTarget::Vsock { cid: 2, port: 9999 }
        );
        assert_eq!(
            NotifyTarget::parse("vsock-stream:2:1").unwrap(),
            NotifyTarget::Vsock { cid: 2, port: 1 }
        );
        for bad in ["", "@", "relative", "vsock:2", "vsock:x:1", "vsock:2:-1"] {
            assert!(NotifyTarget::parse(bad).unwrap_err().contains("expected"), "{bad}");
        }
    }

    /// The watchdog beats only while `ping` answers: a wedged procman
    /// (a ping nobody answers) gets no WATCHDOG=1, only its status.
    #[test]
    fn the_watchdog_beats_only_when_ping_answers() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let dir = std::env::temp_dir().join(format!("agentd-wd-{}", crate::ids::new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let ear = UnixDatagram::bind(&path).unwrap();
        ear.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let notifier = Arc::new(Notifier {
            target: NotifyTarget::Path(path),
            watchdog: Some(Duration::from_millis(100)),
        });
        let wedged = Arc::new(AtomicBool::new(true));
        let held = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (w, h) = (wedged.clone(), held.clone());
        let ping = move || {
            let (tx, rx) = crossbeam_channel::bounded(1);
            if w.load(Ordering::SeqCst) {
                h.lock().unwrap().push(tx); // never answered
            } else {
                let _ = tx.send(());
            }
            rx
        };
        let (stop_tx, stop) = crossbeam_channel::bounded(1);
        let t = watch(notifier, ping, || "busy".to_string(), stop).unwrap();
        // Counts and deadlines, no listening window: every datagram is
        // read until `enough` holds, then what is already queued.
        let heard_until = |enough: &dyn Fn(&[String]) -> bool| {
            let mut got = Vec::new();
            let until = std::time::Instant::now() + Duration::from_secs(20);
            let mut buf = [0u8; 64];
            while !enough(&got) && std::time::Instant::now() < until {
                if let Ok(n) = ear.recv(&mut buf) {
                    got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                }
            }
            ear.set_nonblocking(true).unwrap();
            while let Ok(n) = ear.recv(&mut buf) {
                got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
            ear.set_nonblocking(false).unwrap();
            got
        };
        // Wedged for three whole beats (the third ping asked means the
        // first two went unanswered to their end): a status, no beat.
        let wedged_msgs =
            heard_until(&|got: &[String]| held.lock().unwrap().len() >= 3 && got.iter().any(|m| m == "STATUS=busy"));
        assert!(held.lock().unwrap().len() >= 3, "the watchdog stopped pinging");
        assert!(wedged_msgs.contains(&"STATUS=busy".to_string()), "{wedged_msgs:?}");
        assert!(!wedged_msgs.iter().any(|m| m == "WATCHDOG=1"), "{wedged_msgs:?}");
        wedged.store(false, Ordering::SeqCst);
        let alive = heard_until(&|got: &[String]| got.iter().filter(|m| *m == "WATCHDOG=1").count() >= 2);
        assert!(alive.iter().filter(|m| *m == "WATCHDOG=1").count() >= 2, "{alive:?}");
        drop(stop_tx);
        t.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sends_a_datagram_to_a_path_and_an_abstract_name() {
        let dir = std::env::temp_dir().join(format!("agentd-sd-{}", crate::ids::new_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let ear = UnixDatagram::bind(&path).unwrap();
        let n = Notifier {
            target: NotifyTarget::Path(path),
            watchdog: Some(Duration::from_secs(4)),
        };
        assert_eq!(n.watchdog_every(), Some(Duration::from_secs(2)));
        n.send("READY=1\nSTATUS=hi");
        let mut buf = [0u8; 64];
        let got = ear.recv(&mut buf).unwrap();
        assert_eq!(&buf[..got], b"READY=1\nSTATUS=hi");
        std::fs::remove_dir_all(&dir).unwrap();

        use std::os::linux::net::SocketAddrExt;
        let name = format!("agentd-test-{}", crate::ids::new_id());
        let ear = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        let n = Notifier {
            target: NotifyTarget::Abstract(name.into_bytes()),
            watchdog: None,
        };
        n.send("STOPPING=1");
        let got = ear.recv(&mut buf).unwrap();
        assert_eq!(&buf[..got], b"STOPPING=1");
    }
}
