//! Addresses, listeners, dialing, and who the peer is.
//!
//! ```text
//!  unix:///abs/path          listen + dial   SO_PEERCRED gate: our euid or root
//!  vsock://CID:PORT          listen + dial   CID gate: a2a.vsock_allow_cids
//!                            (listen CID -1 or `any` = every CID)
//!  vsock+uds:///path:PORT    dial only       a guest's vsock port reached from the host
//!                            through a hybrid-vsock unix socket (Firecracker,
//!                            vhost-device-vsock): `CONNECT PORT\n` → `OK …\n`
//! ```
//! Everything above HTTP sees one [`Stream`] type, so the connection code is
//! the same for both transports, and vsock logic is testable without vsock.

mod unix;

use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

pub use unix::{bind_unix, BindError, UnixSocketListener};

use crate::principal::Principal;
use crate::sys;

/// The most bytes a unix socket path may have (sun_path minus the NUL).
const SUN_PATH_MAX: usize = 107;
/// How long the hybrid-vsock handshake may take.
const HYBRID_HANDSHAKE: Duration = Duration::from_millis(crate::limits::VSOCK_HYBRID_HANDSHAKE_MS);

/// The `protocolBinding` URIs agentd owns (no version in them; see the
/// binding text).
pub const BINDING_UNIX: &str = "https://agentd.dev/a2a/binding/jsonrpc-unix";
pub const BINDING_VSOCK: &str = "https://agentd.dev/a2a/binding/jsonrpc-vsock";

/// Where to listen or dial.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Address {
    /// `unix:///absolute/path`
    Unix(PathBuf),
    /// `vsock://CID:PORT`; CID `u32::MAX` (VMADDR_CID_ANY) when listening
    /// on every CID.
    Vsock { cid: u32, port: u32 },
    /// `vsock+uds:///path:PORT`: a hybrid-vsock unix socket and the guest
    /// port to ask it for. Dial only.
    VsockUds { path: PathBuf, port: u32 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressError(pub String);

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

const EXPECTED: &str = "expected unix:///ABSOLUTE/PATH, vsock://CID:PORT or vsock+uds:///PATH:PORT \
                        (TCP is not served: put a proxy in front of the socket)";

fn unix_path(s: &str, path: &str) -> Result<PathBuf, AddressError> {
    if !path.starts_with('/') {
        return Err(AddressError(format!(
            "`{s}`: the path must be absolute, as in unix:///run/agentd/agentd.sock"
        )));
    }
    if path.len() > SUN_PATH_MAX {
        return Err(AddressError(format!(
            "`{s}`: the path is {} bytes; unix sockets allow at most {SUN_PATH_MAX}",
            path.len()
        )));
    }
    Ok(PathBuf::from(path))
}

fn port(s: &str, p: &str) -> Result<u32, AddressError> {
    p.parse::<u32>()
        .ok()
        .filter(|p| *p != u32::MAX)
        .ok_or_else(|| AddressError(format!("`{s}`: `{p}` is not a vsock port (0–4294967294)")))
}

impl Address {
    pub fn parse(s: &str) -> Result<Address, AddressError> {
        if let Some(path) = s.strip_prefix("unix://") {
            return Ok(Address::Unix(unix_path(s, path)?));
        }
        if let Some(rest) = s.strip_prefix("vsock+uds://") {
            let (path, p) = rest
                .rsplit_once(':')
                .ok_or_else(|| AddressError(format!("`{s}`: expected vsock+uds:///PATH:PORT")))?;
            return Ok(Address::VsockUds {
                path: unix_path(s, path)?,
                port: port(s, p)?,
            });
        }
        if let Some(rest) = s.strip_prefix("vsock://") {
            let (cid, p) = rest
                .rsplit_once(':')
                .ok_or_else(|| AddressError(format!("`{s}`: expected vsock://CID:PORT")))?;
            let cid = match cid {
                "-1" | "any" => libc::VMADDR_CID_ANY,
                c => c.parse::<u32>().map_err(|_| {
                    AddressError(format!(
                        "`{s}`: `{c}` is not a CID (a number, or -1/any to listen on all)"
                    ))
                })?,
            };
            return Ok(Address::Vsock { cid, port: port(s, p)? });
        }
        if s.starts_with('/') {
            return Err(AddressError(format!("`{s}`: write it as unix://{s}")));
        }
        Err(AddressError(format!("`{s}`: {EXPECTED}")))
    }

    /// The `protocolBinding` URI of an interface on this address.
    pub fn binding_uri(&self) -> &'static str {
        match self {
            Address::Unix(_) => BINDING_UNIX,
            Address::Vsock { .. } | Address::VsockUds { .. } => BINDING_VSOCK,
        }
    }

    /// Whether agentd can listen on this address.
    pub fn can_listen(&self) -> bool {
        !matches!(self, Address::VsockUds { .. })
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Unix(p) => write!(f, "unix://{}", p.display()),
            Address::Vsock { cid, port } if *cid == libc::VMADDR_CID_ANY => write!(f, "vsock://-1:{port}"),
            Address::Vsock { cid, port } => write!(f, "vsock://{cid}:{port}"),
            Address::VsockUds { path, port } => write!(f, "vsock+uds://{}:{port}", path.display()),
        }
    }
}

/// A connected stream of either transport.
#[derive(Debug)]
pub enum Stream {
    Unix(UnixStream),
    Vsock(vsock::VsockStream),
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Vsock(s) => Stream::Vsock(s.try_clone()?),
        })
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Vsock(s) => s.as_raw_fd(),
        }
    }
}

impl Stream {
    /// Whether the peer has gone away (see [`sys::peer_hung_up`]); a
    /// blocking call asks this between slices of its wait.
    pub fn peer_gone(&self) -> bool {
        sys::peer_hung_up(self.as_raw_fd())
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Vsock(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Vsock(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.flush(),
            Stream::Vsock(s) => s.flush(),
        }
    }
}

impl crate::http::Conn for Stream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Vsock(s) => s.set_read_timeout(t),
        }
    }

    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Vsock(s) => s.set_write_timeout(t),
        }
    }
}

/// Dials `addr`. For `vsock+uds` this includes the hybrid handshake.
pub fn dial(addr: &Address) -> io::Result<Stream> {
    match addr {
        Address::Unix(path) => UnixStream::connect(path).map(Stream::Unix),
        Address::Vsock { cid, port } => vsock::VsockStream::connect_with_cid_port(*cid, *port).map(Stream::Vsock),
        Address::VsockUds { path, port } => {
            let mut s = UnixStream::connect(path)?;
            s.set_read_timeout(Some(HYBRID_HANDSHAKE))?;
            hybrid_handshake(&mut s, *port)?;
            s.set_read_timeout(None)?;
            Ok(Stream::Unix(s))
        }
    }
}

/// Firecracker's hybrid-vsock handshake on a connected unix stream: send
/// `CONNECT <port>\n`, expect `OK <host port>\n`. Reads byte by byte so
/// nothing after the reply line is consumed.
pub fn hybrid_handshake(s: &mut (impl Read + Write), port: u32) -> io::Result<()> {
    s.write_all(format!("CONNECT {port}\n").as_bytes())?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() < 64 {
        match s.read(&mut byte)? {
            0 => break,
            _ if byte[0] == b'\n' => {
                return if line.starts_with(b"OK ") || line == b"OK" {
                    Ok(())
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::ConnectionRefused,
                        format!(
                            "the hybrid vsock socket refused port {port}: {:?}",
                            String::from_utf8_lossy(&line)
                        ),
                    ))
                };
            }
            _ => line.push(byte[0]),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::ConnectionRefused,
        format!("the hybrid vsock socket closed without an OK for port {port} (is anything listening on it?)"),
    ))
}

/// A bound listener of either transport.
pub enum Listener {
    Unix(UnixSocketListener),
    Vsock {
        listener: vsock::VsockListener,
        address: Address,
        /// Handed over by the service manager: never shut down, since
        /// the manager holds the same socket.
        passed: bool,
    },
    /// A unix listener handed over by the service manager (socket
    /// activation): its socket file is the manager's and stays when we stop.
    PassedUnix {
        listener: UnixListener,
        path: PathBuf,
    },
}

/// What `accept` learned about the peer before any byte was read.
pub enum Peer {
    Unix(UnixStream),
    Vsock { stream: vsock::VsockStream, cid: u32 },
}

impl Listener {
    /// Binds `addr` the way its transport demands.
    pub fn bind(addr: &Address) -> Result<Listener, BindError> {
        match addr {
            Address::Unix(path) => bind_unix(path).map(Listener::Unix),
            Address::Vsock { cid, port } => vsock::VsockListener::bind_with_cid_port(*cid, *port)
                .map(|listener| Listener::Vsock {
                    listener,
                    address: addr.clone(),
                    passed: false,
                })
                .map_err(|source| BindError::Io {
                    path: PathBuf::from(addr.to_string()),
                    what: "vsock bind (is the vsock transport loaded? this needs a VM guest or vhost-vsock)",
                    source,
                }),
            Address::VsockUds { .. } => Err(BindError::Io {
                path: PathBuf::from(addr.to_string()),
                what: "vsock+uds is for dialing a guest, not for listening",
                source: io::Error::from(io::ErrorKind::InvalidInput),
            }),
        }
    }

    /// A listening socket the service manager passed (socket activation):
    /// a unix socket with a path, or vsock. Served like one agentd bound,
    /// through the same gate.
    pub fn adopt(fd: OwnedFd) -> io::Result<Listener> {
        let unix = UnixListener::from(fd);
        match unix.local_addr() {
            Ok(addr) => match addr.as_pathname() {
                Some(path) => Ok(Listener::PassedUnix {
                    path: path.to_path_buf(),
                    listener: unix,
                }),
                None => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an abstract or unnamed unix socket (pass a socket with a path: ListenStream=/run/…)",
                )),
            },
            Err(_) => {
                // Not AF_UNIX: it may be vsock.
                let listener = vsock::VsockListener::from(OwnedFd::from(unix));
                let local = listener.local_addr().map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "neither a unix nor a vsock socket (agentd serves no TCP)",
                    )
                })?;
                Ok(Listener::Vsock {
                    listener,
                    address: Address::Vsock {
                        cid: local.cid(),
                        port: local.port(),
                    },
                    passed: true,
                })
            }
        }
    }

    pub fn accept(&self) -> io::Result<Peer> {
        match self {
            Listener::Unix(l) => l.listener.accept().map(|(s, _)| Peer::Unix(s)),
            Listener::PassedUnix { listener, .. } => listener.accept().map(|(s, _)| Peer::Unix(s)),
            Listener::Vsock { listener, .. } => listener.accept().map(|(stream, peer)| Peer::Vsock {
                stream,
                cid: peer.cid(),
            }),
        }
    }

    /// The address as the card should name it: for a vsock listener on
    /// every CID, our own CID where the kernel tells it.
    pub fn card_address(&self) -> Address {
        match self {
            Listener::Unix(l) => Address::Unix(l.path.clone()),
            Listener::PassedUnix { path, .. } => Address::Unix(path.clone()),
            Listener::Vsock { address, .. } => match address {
                Address::Vsock { cid, port } if *cid == libc::VMADDR_CID_ANY => match vsock::get_local_cid() {
                    Ok(own) => Address::Vsock { cid: own, port: *port },
                    Err(_) => address.clone(),
                },
                other => other.clone(),
            },
        }
    }

    pub fn name(&self) -> String {
        match self {
            Listener::Unix(l) => format!("unix://{}", l.path.display()),
            Listener::PassedUnix { path, .. } => format!("unix://{}", path.display()),
            Listener::Vsock { address, .. } => address.to_string(),
        }
    }

    /// Wakes a thread blocked in `accept` so it can see the daemon stop.
    pub fn wake(&self) {
        match self {
            Listener::Unix(l) => {
                let _ = sys::shutdown_read(&l.listener);
                // Belt and braces, should shutdown(2) not wake accept().
                let _ = UnixStream::connect(&l.path);
            }
            // The manager's socket is shared with it: a shutdown(2) would
            // break it for the next start. A connection wakes accept().
            Listener::PassedUnix { path, .. } => {
                let _ = UnixStream::connect(path);
            }
            // A passed vsock listener is left alone: its accept loop looks
            // up every VSOCK_ACCEPT_POLL_MS anyway.
            Listener::Vsock { passed: true, .. } => {}
            Listener::Vsock { listener, .. } => {
                let _ = sys::shutdown_read(listener);
            }
        }
    }

    pub fn try_clone(&self) -> io::Result<AcceptHandle> {
        Ok(match self {
            Listener::Unix(l) => AcceptHandle::Unix(l.listener.try_clone()?),
            Listener::PassedUnix { listener, .. } => AcceptHandle::Unix(listener.try_clone()?),
            Listener::Vsock { listener, .. } => AcceptHandle::Vsock(listener.try_clone()?),
        })
    }
}

/// A second handle on a listener, for the accept thread (the `Listener`
/// itself stays with `serve`, whose drop removes the socket file).
pub enum AcceptHandle {
    Unix(std::os::unix::net::UnixListener),
    Vsock(vsock::VsockListener),
}

use crate::limits::VSOCK_ACCEPT_POLL_MS;

impl AcceptHandle {
    /// The next connection; `Ok(None)` now and then (vsock) so the caller
    /// can check whether to stop.
    pub fn accept(&self) -> io::Result<Option<Peer>> {
        match self {
            AcceptHandle::Unix(l) => l.accept().map(|(s, _)| Some(Peer::Unix(s))),
            AcceptHandle::Vsock(l) => {
                if !sys::wait_readable(l.as_raw_fd(), VSOCK_ACCEPT_POLL_MS)? {
                    return Ok(None);
                }
                l.accept().map(|(stream, peer)| {
                    Some(Peer::Vsock {
                        stream,
                        cid: peer.cid(),
                    })
                })
            }
        }
    }
}

/// Why a peer was turned away (for the `a2a.*.denied` log line).
#[derive(Debug)]
pub enum Denied {
    Unix(sys::PeerCred),
    Vsock { cid: u32 },
    Unknown(String),
}

impl Denied {
    /// The metric series it counts under: transport and uid or CID.
    pub fn series(&self) -> (&'static str, String) {
        match self {
            Denied::Unix(c) => ("unix", c.uid.to_string()),
            Denied::Vsock { cid } => ("vsock", cid.to_string()),
            Denied::Unknown(_) => ("unix", "unknown".to_string()),
        }
    }

    /// The stable log event name.
    pub fn event(&self) -> &'static str {
        match self {
            Denied::Vsock { .. } => "a2a.vsock.denied",
            _ => "a2a.unix.denied",
        }
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denied::Unix(c) => write!(f, "pid={} uid={} gid={}", c.pid, c.uid, c.gid),
            Denied::Vsock { cid } => write!(f, "cid={cid} (not in a2a.vsock_allow_cids)"),
            Denied::Unknown(e) => write!(f, "peer credentials unreadable: {e}"),
        }
    }
}

/// A debug build's test hook: with this variable set, the unix gate judges
/// a peer's uid as if it were a vsock CID, by the very CID rule
/// ([`Gate::vsock_principal`]: the allow-list and the operator list). A
/// second vsock CID cannot be had on a machine without vsock loopback, so
/// this is how tests reach the scoping of non-operator peers, everything
/// below the gate being the real code. A release build has no such path.
#[cfg(debug_assertions)]
pub const UNIX_PEERS_AS_VSOCK: &str = "AGENTD_TEST_UNIX_PEERS_AS_VSOCK";

/// Who may connect. Decided before a byte is read.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    /// vsock CIDs allowed to connect; empty = any.
    pub vsock_allow: Vec<u32>,
    /// vsock CIDs that see every task.
    pub vsock_operators: Vec<u32>,
}

impl Gate {
    /// Admits or refuses an accepted peer, returning its stream.
    pub fn admit(&self, peer: Peer) -> Result<(Stream, Principal), Denied> {
        match peer {
            Peer::Unix(s) => {
                let cred = sys::peer_cred(&s).map_err(|e| Denied::Unknown(e.to_string()))?;
                #[cfg(debug_assertions)]
                if std::env::var_os(UNIX_PEERS_AS_VSOCK).is_some() {
                    return self
                        .vsock_principal(cred.uid)
                        .map(|p| (Stream::Unix(s), p))
                        .ok_or(Denied::Vsock { cid: cred.uid });
                }
                if cred.uid == sys::geteuid() || cred.uid == 0 {
                    Ok((
                        Stream::Unix(s),
                        Principal::Unix {
                            uid: cred.uid,
                            pid: cred.pid,
                        },
                    ))
                } else {
                    Err(Denied::Unix(cred))
                }
            }
            Peer::Vsock { stream, cid } => self
                .vsock_principal(cid)
                .map(|p| (Stream::Vsock(stream), p))
                .ok_or(Denied::Vsock { cid }),
        }
    }

    /// The CID rule alone, so it can be tested without vsock.
    pub fn vsock_principal(&self, cid: u32) -> Option<Principal> {
        if !self.vsock_allow.is_empty() && !self.vsock_allow.contains(&cid) {
            return None;
        }
        Some(Principal::Vsock {
            cid,
            operator: self.vsock_operators.contains(&cid),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_addresses_with_helpful_errors() {
        assert_eq!(
            Address::parse("unix:///run/a.sock").unwrap(),
            Address::Unix("/run/a.sock".into())
        );
        assert_eq!(
            Address::parse("vsock://3:5000").unwrap(),
            Address::Vsock { cid: 3, port: 5000 }
        );
        assert_eq!(
            Address::parse("vsock://any:5000").unwrap(),
            Address::Vsock {
                cid: u32::MAX,
                port: 5000
            }
        );
        assert_eq!(
            Address::parse("vsock://-1:5000").unwrap().to_string(),
            "vsock://-1:5000"
        );
        assert_eq!(
            Address::parse("vsock+uds:///tmp/v.sock:5000").unwrap(),
            Address::VsockUds {
                path: "/tmp/v.sock".into(),
                port: 5000
            }
        );
        assert!(Address::parse("unix://rel.sock").unwrap_err().0.contains("absolute"));
        assert!(Address::parse("/run/a.sock")
            .unwrap_err()
            .0
            .contains("unix:///run/a.sock"));
        assert!(Address::parse("tcp://1.2.3.4:5").unwrap_err().0.contains("proxy"));
        assert!(Address::parse("vsock://x:1").unwrap_err().0.contains("not a CID"));
        assert!(Address::parse("vsock://3:port")
            .unwrap_err()
            .0
            .contains("not a vsock port"));
        assert!(Address::parse("vsock://3").unwrap_err().0.contains("vsock://CID:PORT"));
        let long = format!("unix:///{}", "a".repeat(120));
        assert!(Address::parse(&long).unwrap_err().0.contains("at most 107"));
    }

    #[test]
    fn vsock_gate_allows_listed_cids_and_marks_operators() {
        let open = Gate::default();
        assert_eq!(
            open.vsock_principal(7),
            Some(Principal::Vsock {
                cid: 7,
                operator: false
            })
        );
        let gate = Gate {
            vsock_allow: vec![2, 3],
            vsock_operators: vec![2],
        };
        assert_eq!(gate.vsock_principal(4), None);
        assert!(gate.vsock_principal(2).unwrap().is_operator());
        assert!(!gate.vsock_principal(3).unwrap().is_operator());
        assert_eq!(gate.vsock_principal(3).unwrap().name(), "vsock:cid=3");
    }

    /// A fake hybrid-vsock endpoint: what it was sent, what it answers.
    struct Fake {
        sent: Vec<u8>,
        reply: io::Cursor<Vec<u8>>,
    }

    impl Read for Fake {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            self.reply.read(b)
        }
    }

    impl Write for Fake {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.sent.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn hybrid_handshake_speaks_firecrackers_protocol() {
        let mut ok = Fake {
            sent: vec![],
            reply: io::Cursor::new(b"OK 1073741824\nHTTP/1.1".to_vec()),
        };
        hybrid_handshake(&mut ok, 5000).unwrap();
        assert_eq!(ok.sent, b"CONNECT 5000\n");
        assert_eq!(ok.reply.position(), 14, "nothing past the OK line is consumed");
        let mut refused = Fake {
            sent: vec![],
            reply: io::Cursor::new(b"".to_vec()),
        };
        let err = hybrid_handshake(&mut refused, 7).unwrap_err();
        assert!(err.to_string().contains("port 7"), "{err}");
        let mut junk = Fake {
            sent: vec![],
            reply: io::Cursor::new(b"NOPE\n".to_vec()),
        };
        assert!(hybrid_handshake(&mut junk, 7).unwrap_err().to_string().contains("NOPE"));
    }
}
