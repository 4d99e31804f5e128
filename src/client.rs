//! The outbound A2A client over unix sockets and vsock.
//!
//! It reads the peer's card, checks that the peer offers an interface whose
//! binding this client implements for the address it was given (the unix or
//! vsock binding URI, never `JSONRPC`), and then sends every call to the
//! **configured** endpoint — never to a URL the card names. Every request
//! carries `A2A-Version: 1.0`. Streams are read as SSE (CR, LF and CRLF line
//! ends); an error before the stream starts arrives as plain JSON.

use std::fmt;
use std::io;
use std::time::Duration;

use serde_json::{json, Value};

use crate::http::client::{write_request, ResponseReader};
use crate::http::sse;
use crate::http::Conn;
use crate::transport::{self, Address, Stream};

use crate::limits::{self, CLIENT_RESPONSE_MAX_BYTES as RESPONSE_MAX_BYTES};

#[derive(Debug)]
pub enum ClientError {
    /// The endpoint could not be reached.
    Connect { addr: String, source: io::Error },
    /// It answered, but not with HTTP/JSON-RPC we understand.
    Protocol(String),
    /// It took the request and said nothing within the read timeout.
    TimedOut { addr: String, what: &'static str },
    /// It accepted the connection and sent no card within `card_timeout`.
    NoCard { addr: String, waited: Duration },
    /// The card lists no interface this client can use at this address.
    NoInterface {
        addr: String,
        wanted: &'static str,
        offered: Vec<String>,
    },
    /// The agent answered with a JSON-RPC error object.
    Rpc(Value),
    /// The agent refused the request for its size (HTTP 413): `sent`
    /// bytes, over its `http.body_max_bytes` (`limit`, when its answer says).
    TooLarge {
        addr: String,
        sent: usize,
        limit: Option<u64>,
    },
    /// A unix socket refused us (EACCES, or the peer gate closed the
    /// connection unanswered): it admits only its owner's uid and root.
    Denied { addr: String, owner: u32, us: u32 },
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Connect { addr, source } => match source.kind() {
                io::ErrorKind::NotFound => write!(
                    f,
                    "cannot reach {addr}: no socket there; is `agentd serve` running, listening there?"
                ),
                io::ErrorKind::ConnectionRefused => write!(
                    f,
                    "cannot reach {addr}: nothing listens on it (connection refused); is `agentd serve` running there?"
                ),
                _ => write!(f, "cannot reach {addr}: {source}"),
            },
            ClientError::TimedOut { addr, what } => write!(f, "{addr} {what}: no answer within the timeout"),
            ClientError::NoCard { addr, waited } => write!(
                f,
                "{addr} accepted the connection but sent no agent card within {} s: it is stuck, or not an \
                 A2A agent",
                crate::config::secs_text(*waited)
            ),
            ClientError::Denied { addr, owner, us } => write!(
                f,
                "{addr} refused this client (uid {us}): only uid {owner}, the user agentd runs as, and root \
                 may connect — run the client as that user or as root"
            ),
            ClientError::TooLarge {
                addr,
                sent,
                limit: Some(limit),
            } => write!(
                f,
                "{addr} refused the message: the message is {sent} bytes; this agent takes at most {limit} \
                 (http.body_max_bytes)"
            ),
            ClientError::TooLarge {
                addr,
                sent,
                limit: None,
            } => write!(
                f,
                "{addr} refused the message: the message is {sent} bytes, more than this agent takes \
                 (http.body_max_bytes; its answer did not say how much it takes)"
            ),
            ClientError::Protocol(m) => write!(f, "{m}"),
            ClientError::NoInterface { addr, wanted, offered } => write!(
                f,
                "the agent at {addr} offers no interface with binding {wanted} (it offers: {})",
                if offered.is_empty() {
                    "none".to_string()
                } else {
                    offered.join(", ")
                }
            ),
            ClientError::Rpc(e) => write!(
                f,
                "error {}: {}",
                e["code"],
                e["message"].as_str().unwrap_or("(no message)")
            ),
        }
    }
}

impl std::error::Error for ClientError {}

/// One event of a stream: its SSE id and the JSON-RPC `result`.
pub struct StreamEvent {
    pub id: Option<String>,
    pub result: Value,
}

#[derive(Debug, Clone)]
pub struct Client {
    pub addr: Address,
    /// Read timeout for non-streaming calls (streams wait as long as needed).
    pub timeout: Option<Duration>,
    /// The card's own bound when `timeout` is `None`: a socket that accepts
    /// and never answers is not an agent worth waiting on.
    pub card_timeout: Option<Duration>,
    /// `A2A-Extensions` to request.
    pub extensions: Vec<String>,
    /// More headers for every request (the peer runner's `traceparent`).
    pub headers: Vec<(String, String)>,
}

impl Client {
    pub fn new(addr: Address) -> Client {
        Client {
            addr,
            timeout: None,
            card_timeout: None,
            extensions: Vec::new(),
            headers: Vec::new(),
        }
    }

    fn connect(&self) -> Result<Stream, ClientError> {
        transport::dial(&self.addr).map_err(|source| {
            if source.kind() == io::ErrorKind::PermissionDenied {
                if let Some(denied) = self.denied() {
                    return denied;
                }
            }
            ClientError::Connect {
                addr: self.addr.to_string(),
                source,
            }
        })
    }

    /// `Denied` when the unix socket belongs to another user and we are not
    /// root: then a refusal is the peer gate's (or the 0600 mode's) doing.
    fn denied(&self) -> Option<ClientError> {
        use std::os::unix::fs::MetadataExt;
        let Address::Unix(path) = &self.addr else { return None };
        let owner = std::fs::metadata(path).ok()?.uid();
        let us = crate::sys::geteuid();
        (owner != us && us != 0).then(|| ClientError::Denied {
            addr: self.addr.to_string(),
            owner,
            us,
        })
    }

    fn protocol(&self, what: &str, e: impl fmt::Display) -> ClientError {
        ClientError::Protocol(format!("{} {what}: {e}", self.addr))
    }

    /// A read that failed: the timeout running out, or a broken answer.
    fn read_failed(&self, what: &'static str, e: io::Error) -> ClientError {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ClientError::TimedOut {
                addr: self.addr.to_string(),
                what,
            },
            _ => self.protocol(what, e),
        }
    }

    /// GETs the agent card.
    pub fn card(&self) -> Result<Value, ClientError> {
        let mut s = self.connect()?;
        let bound = self.timeout.or(self.card_timeout);
        let _ = s.set_read_timeout(bound);
        let _ = s.set_write_timeout(bound);
        write_request(
            &mut s,
            "GET",
            "/.well-known/agent-card.json",
            &[("Connection", "close")],
            b"",
        )
        // Closed before a byte (the write or the read fails, a kernel race):
        // what the gate does to another uid.
        .map_err(|e| {
            self.denied()
                .unwrap_or_else(|| self.protocol("did not take the request", e))
        })?;
        let (head, mut body) = ResponseReader::new(s).map_err(|e| {
            self.denied()
                .unwrap_or_else(|| match (self.read_failed("sent no card", e), self.card_timeout) {
                    (ClientError::TimedOut { addr, .. }, Some(waited)) if self.timeout.is_none() => {
                        ClientError::NoCard { addr, waited }
                    }
                    (other, _) => other,
                })
        })?;
        let bytes = body
            .body(RESPONSE_MAX_BYTES)
            .map_err(|e| self.read_failed("sent a broken card", e))?;
        if head.status != 200 {
            return Err(ClientError::Protocol(format!(
                "{} answered the card request with HTTP {}: {}",
                self.addr,
                head.status,
                String::from_utf8_lossy(&bytes).trim()
            )));
        }
        serde_json::from_slice(&bytes).map_err(|e| self.protocol("sent a card that is not JSON", e))
    }

    /// Checks the card offers our binding for this address (and A2A 1.x).
    pub fn check_interface(&self, card: &Value) -> Result<(), ClientError> {
        let wanted = self.addr.binding_uri();
        let interfaces = card["supportedInterfaces"].as_array().cloned().unwrap_or_default();
        let usable = interfaces.iter().any(|i| {
            i["protocolBinding"] == wanted && i["protocolVersion"].as_str().is_some_and(|v| v.starts_with("1."))
        });
        if usable {
            return Ok(());
        }
        Err(ClientError::NoInterface {
            addr: self.addr.to_string(),
            wanted,
            offered: interfaces
                .iter()
                .map(|i| format!("{} {}", i["protocolBinding"], i["url"]).replace('"', ""))
                .collect(),
        })
    }

    /// Fetches the card and checks it, as every command does first; the
    /// extensions the card marks `required` are requested from then on.
    pub fn discover(&mut self) -> Result<Value, ClientError> {
        let card = self.card()?;
        self.check_interface(&card)?;
        for e in card["capabilities"]["extensions"].as_array().into_iter().flatten() {
            if let (Some(uri), true) = (e["uri"].as_str(), e["required"] == true) {
                if !self.extensions.iter().any(|x| x == uri) {
                    self.extensions.push(uri.to_string());
                }
            }
        }
        Ok(card)
    }

    fn post(
        &self,
        method: &str,
        params: Value,
        extra: &[(&str, &str)],
    ) -> Result<(crate::http::client::Head, ResponseReader<Stream>), ClientError> {
        let mut s = self.connect()?;
        // A stream may be quiet for long (keep-alives every 15 s); the
        // timeout bounds answers to plain calls.
        if !extra.contains(&("Accept", "text/event-stream")) {
            let _ = s.set_read_timeout(self.timeout);
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let ext = self.extensions.join(", ");
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("A2A-Version", "1.0"),
            ("Connection", "close"),
        ];
        if !ext.is_empty() {
            headers.push(("A2A-Extensions", ext.as_str()));
        }
        headers.extend(self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        headers.extend_from_slice(extra);
        if let Err(e) = write_request(&mut s, "POST", "/", &headers, body.as_bytes()) {
            // An agent that refuses a request (413 for its size) answers and
            // hangs up before it has read all of it, so the rest of the write
            // fails: its answer, when there is one, is what went wrong.
            let _ = s.set_read_timeout(Some(Duration::from_millis(limits::CLIENT_REFUSAL_READ_MS)));
            return match ResponseReader::new(s) {
                Ok((head, reader)) => self.refused_for_size(head, reader, body.len()),
                Err(_) => Err(self.protocol("did not take the request", e)),
            };
        }
        let (head, reader) = ResponseReader::new(s).map_err(|e| self.read_failed("sent no answer", e))?;
        self.refused_for_size(head, reader, body.len())
    }

    /// The answer to a POST as it is, or `TooLarge` when it is a 413.
    fn refused_for_size(
        &self,
        head: crate::http::client::Head,
        mut reader: ResponseReader<Stream>,
        sent: usize,
    ) -> Result<(crate::http::client::Head, ResponseReader<Stream>), ClientError> {
        if head.status != 413 {
            return Ok((head, reader));
        }
        // agentd's 413 says "request body is too large: at most N bytes";
        // another server's may say nothing we can read a number from.
        let text = reader.body(limits::HTTP_HEAD_MAX_BYTES).unwrap_or_default();
        let limit = String::from_utf8_lossy(&text)
            .split("at most ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok());
        Err(ClientError::TooLarge {
            addr: self.addr.to_string(),
            sent,
            limit,
        })
    }

    /// One JSON-RPC call: the `result`, or the `error` as `ClientError::Rpc`.
    pub fn call(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        let (head, mut body) = self.post(method, params, &[])?;
        let bytes = body
            .body(RESPONSE_MAX_BYTES)
            .map_err(|e| self.read_failed("sent a broken answer", e))?;
        self.rpc_result(head.status, &bytes)
    }

    fn rpc_result(&self, status: u16, bytes: &[u8]) -> Result<Value, ClientError> {
        let v: Value = serde_json::from_slice(bytes).map_err(|_| {
            ClientError::Protocol(format!(
                "{} answered HTTP {status} with a body that is not JSON-RPC: {}",
                self.addr,
                String::from_utf8_lossy(bytes).trim()
            ))
        })?;
        if let Some(e) = v.get("error") {
            return Err(ClientError::Rpc(e.clone()));
        }
        v.get("result")
            .cloned()
            .ok_or_else(|| ClientError::Protocol(format!("{} answered without `result` or `error`", self.addr)))
    }

    /// A streaming call. `on_event` gets each event's result as it arrives
    /// and returns false to stop early. An `error` event ends the stream
    /// with `ClientError::Rpc`.
    pub fn stream(
        &self,
        method: &str,
        params: Value,
        last_event_id: Option<&str>,
        on_event: &mut dyn FnMut(StreamEvent) -> bool,
    ) -> Result<(), ClientError> {
        let mut extra = vec![("Accept", "text/event-stream")];
        if let Some(id) = last_event_id {
            extra.push(("Last-Event-ID", id));
        }
        let (head, mut body) = self.post(method, params, &extra)?;
        let is_sse = head
            .header("Content-Type")
            .is_some_and(|t| t.to_ascii_lowercase().starts_with("text/event-stream"));
        if !is_sse {
            // An error before the stream started: plain JSON-RPC.
            let bytes = body
                .body(RESPONSE_MAX_BYTES)
                .map_err(|e| self.read_failed("sent a broken answer", e))?;
            let result = self.rpc_result(head.status, &bytes)?;
            on_event(StreamEvent { id: None, result });
            return Ok(());
        }
        let mut parser = sse::Parser::new();
        let mut events = Vec::new();
        loop {
            let piece = match body.next_piece() {
                Ok(Some(p)) => p,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.read_failed("broke off the stream", e)),
            };
            parser
                .feed(&piece, &mut events)
                .map_err(|e| self.protocol("sent a bad event stream", e))?;
            for ev in events.drain(..) {
                let v: Value = serde_json::from_slice(ev.data.as_bytes())
                    .map_err(|e| self.protocol("sent an event that is not JSON", e))?;
                if let Some(err) = v.get("error") {
                    return Err(ClientError::Rpc(err.clone()));
                }
                let result = v.get("result").cloned().unwrap_or(Value::Null);
                if !on_event(StreamEvent { id: ev.id, result }) {
                    return Ok(());
                }
            }
        }
    }
}

/// A part list (A2A `parts`) as text for a person: text parts as they are,
/// data as JSON, urls as themselves, raw bytes by their size; joined by `sep`.
pub fn parts_text(parts: &Value, sep: &str) -> String {
    parts
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| match (&p["text"], &p["data"], &p["url"]) {
            (Value::String(t), _, _) => t.clone(),
            (_, d, _) if !d.is_null() => d.to_string(),
            (_, _, Value::String(u)) => u.clone(),
            _ => format!("[{} bytes]", p["raw"].as_str().map_or(0, |r| r.len() * 3 / 4)),
        })
        .collect::<Vec<_>>()
        .join(sep)
}
