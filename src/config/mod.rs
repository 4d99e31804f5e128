//! The configuration model: one flat `key: value` file (`#` starts a comment
//! line), overridden by flags. Every key is listed once in [`KEYS`], which is
//! also what `agentd help config` prints and what the manual must cover.
//! Errors name the file and line (or the flag) and say what was expected.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::control::ExecProtocol;
use crate::limits;
use crate::transport::Address;

mod keys;
mod program;
#[cfg(test)]
mod tests;
mod values;

pub use keys::{Key, KEYS};
use values::{boolean, cids, list, number, positive, suggest, text};
pub use values::{edit_distance, nearest, parse_secs, secs_text, split_command};

/// The two keys that each pick a runner by being set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunnerKey {
    Exec,
    Peer,
}

/// What a task runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runner {
    Echo,
    Exec { argv: Vec<String> },
    Peer { address: Address },
}

impl Runner {
    pub fn name(&self) -> &'static str {
        match self {
            Runner::Echo => "echo",
            Runner::Exec { .. } => "exec",
            Runner::Peer { .. } => "peer",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    pub name: String,
    pub description: Option<String>,
    pub version: String,
    pub provider_organization: Option<String>,
    pub provider_url: Option<String>,
    pub documentation_url: Option<String>,
    pub input_modes: Vec<String>,
    pub output_modes: Vec<String>,
    pub skill_id: Option<String>,
    pub skill_name: Option<String>,
    pub skill_description: Option<String>,
    pub skill_tags: Vec<String>,
    pub skill_examples: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tasks {
    pub max_running: usize,
    pub max_queued: usize,
    pub deadline_ms: u64,
    pub input_idle_ms: u64,
    pub ping_interval_ms: u64,
    pub stall_timeout_ms: u64,
    pub retain_max: usize,
    pub retain_ms: u64,
    pub retain_bytes: usize,
    pub queued_max_bytes: usize,
    pub cancel_grace_ms: u64,
    pub term_grace_ms: u64,
    pub output_max_bytes: u64,
    pub rlimit_as_bytes: u64,
    pub rlimit_cpu_secs: u64,
    pub rlimit_nofile: u64,
    pub cgroup: String,
    /// Idle workers to keep: `None` = sized to demand (auto).
    pub prespawn: Option<usize>,
    /// `None` = auto: 1024 where cgroup v2 enforces it for free.
    pub pids_max: Option<u64>,
    pub memory_max_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub listen: Vec<Address>,
    pub vsock_allow_cids: Vec<u32>,
    pub vsock_operator_cids: Vec<u32>,
    pub advertise: Vec<(String, String)>,
    pub max_connections: usize,
    pub version_required: bool,
    pub card: Card,
    /// The runner in force (resolved from the agent.* keys by `validate`).
    pub runner: Runner,
    runner_choice: Option<String>,
    exec_argv: Option<Vec<String>>,
    peer: Option<Address>,
    /// Which of agent.exec and agent.peer was set last: it picks the
    /// runner when agent.runner does not.
    last_runner_key: Option<RunnerKey>,
    pub exec_protocol: ExecProtocol,
    pub workdir: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    pub tasks: Tasks,
    pub body_max_bytes: usize,
    pub head_timeout_ms: u64,
    pub idle_timeout_ms: u64,
    pub sse_keepalive_ms: u64,
    pub init_modules: Vec<PathBuf>,
    pub ext_required: Vec<String>,
    pub events_ring: usize,
    pub log_level: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: Vec::new(),
            vsock_allow_cids: Vec::new(),
            vsock_operator_cids: Vec::new(),
            advertise: Vec::new(),
            max_connections: limits::MAX_CONNECTIONS,
            version_required: true,
            card: Card {
                name: "agentd".into(),
                description: None,
                version: env!("CARGO_PKG_VERSION").into(),
                provider_organization: None,
                provider_url: None,
                documentation_url: None,
                input_modes: vec!["text/plain".into()],
                output_modes: vec!["text/plain".into()],
                skill_id: None,
                skill_name: None,
                skill_description: None,
                skill_tags: Vec::new(),
                skill_examples: Vec::new(),
            },
            runner: Runner::Echo,
            runner_choice: None,
            exec_argv: None,
            peer: None,
            last_runner_key: None,
            exec_protocol: ExecProtocol::Text,
            workdir: None,
            env: Vec::new(),
            tasks: Tasks {
                max_running: limits::TASKS_MAX_RUNNING,
                max_queued: limits::TASKS_MAX_QUEUED,
                deadline_ms: limits::TASK_DEADLINE_MS,
                input_idle_ms: limits::TASK_INPUT_IDLE_MS,
                ping_interval_ms: limits::WORKER_PING_INTERVAL_MS,
                stall_timeout_ms: limits::WORKER_STALL_TIMEOUT_MS,
                retain_max: limits::TASKS_RETAIN_MAX,
                retain_ms: limits::TASKS_RETAIN_MS,
                retain_bytes: limits::TASKS_RETAIN_BYTES,
                queued_max_bytes: limits::TASKS_QUEUED_MAX_BYTES,
                cancel_grace_ms: limits::LADDER_CANCEL_GRACE_MS,
                term_grace_ms: limits::LADDER_TERM_GRACE_MS,
                output_max_bytes: limits::TASK_OUTPUT_MAX_BYTES,
                rlimit_as_bytes: 0,
                rlimit_cpu_secs: 0,
                rlimit_nofile: 0,
                cgroup: "auto".into(),
                prespawn: None,
                // Off unless asked for: on a hybrid host a limit costs each
                // task a cgroup v1 move, which stalls every fork.
                pids_max: None,
                memory_max_bytes: 0,
            },
            body_max_bytes: limits::HTTP_BODY_MAX_BYTES,
            head_timeout_ms: limits::HTTP_HEAD_TIMEOUT_MS,
            idle_timeout_ms: limits::HTTP_IDLE_TIMEOUT_MS,
            sse_keepalive_ms: limits::SSE_KEEPALIVE_MS,
            init_modules: Vec::new(),
            ext_required: Vec::new(),
            events_ring: crate::limits::EVENTS_RING_RECORDS_DEFAULT,
            log_level: "info".into(),
        }
    }
}

/// A configuration error, located where the operator can fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// `FILE:LINE`, `--flag`, or `config`.
    pub place: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.place, self.message)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Reads a config file on top of the current values.
    pub fn load_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            place: path.display().to_string(),
            message: format!("cannot read config file: {e}"),
        })?;
        self.load_str(&text, &path.display().to_string())
    }

    /// Parses `key: value` lines; `origin` names the source in errors.
    pub fn load_str(&mut self, text: &str, origin: &str) -> Result<(), ConfigError> {
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let place = format!("{origin}:{}", n + 1);
            let Some((key, value)) = line.split_once(':') else {
                return Err(ConfigError {
                    place,
                    message: format!("expected `key: value`, found `{line}`"),
                });
            };
            self.set(key.trim(), value.trim())
                .map_err(|message| ConfigError { place, message })?;
        }
        Ok(())
    }

    /// Sets one key. Repeatable keys append. The error says what was wrong.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "a2a.listen" => {
                let addr = Address::parse(value).map_err(|e| format!("a2a.listen: {e}"))?;
                if !addr.can_listen() {
                    return Err(format!(
                        "a2a.listen: `{value}` can only be dialed; listen on unix:// or vsock://"
                    ));
                }
                self.listen.push(addr);
            }
            "a2a.vsock_allow_cids" => self.vsock_allow_cids = cids(key, value)?,
            "a2a.vsock_operator_cids" => self.vsock_operator_cids = cids(key, value)?,
            "a2a.advertise" => {
                let (binding, url) = value
                    .split_once(char::is_whitespace)
                    .map(|(b, u)| (b.trim(), u.trim()))
                    .filter(|(b, u)| !b.is_empty() && !u.is_empty())
                    .ok_or_else(|| {
                        format!("a2a.advertise: expected `BINDING URL` (e.g. `JSONRPC http://127.0.0.1:8080/`), found `{value}`")
                    })?;
                self.advertise.push((binding.to_string(), url.to_string()));
            }
            "a2a.tls" => {
                return Err("a2a.tls: TLS is not supported on unix or vsock listeners: the kernel \
                            authenticates the peer (SO_PEERCRED, the vsock CID). Remove this key; \
                            put TLS in the proxy that fronts the socket."
                    .into())
            }
            "a2a.max_connections" => self.max_connections = positive(key, value)?,
            "a2a.version_required" => self.version_required = boolean(key, value)?,
            "card.name" => self.card.name = text(key, value)?,
            "card.description" => self.card.description = Some(text(key, value)?),
            "card.version" => self.card.version = text(key, value)?,
            "card.provider_organization" => self.card.provider_organization = Some(text(key, value)?),
            "card.provider_url" => self.card.provider_url = Some(text(key, value)?),
            "card.documentation_url" => self.card.documentation_url = Some(text(key, value)?),
            "card.input_modes" => self.card.input_modes = list(key, value)?,
            "card.output_modes" => self.card.output_modes = list(key, value)?,
            "card.skill_id" => self.card.skill_id = Some(text(key, value)?),
            "card.skill_name" => self.card.skill_name = Some(text(key, value)?),
            "card.skill_description" => self.card.skill_description = Some(text(key, value)?),
            "card.skill_tags" => self.card.skill_tags = list(key, value)?,
            "card.skill_example" => self.card.skill_examples.push(text(key, value)?),
            "agent.runner" => match value {
                "echo" | "exec" | "peer" => self.runner_choice = Some(value.to_string()),
                _ => {
                    return Err(format!(
                        "agent.runner: expected `echo`, `exec` or `peer`, found `{value}`"
                    ))
                }
            },
            "agent.exec" => {
                let argv = split_command(value).map_err(|e| format!("agent.exec: {e}"))?;
                if argv.is_empty() {
                    return Err("agent.exec: expected a program, found nothing".into());
                }
                self.exec_argv = Some(argv);
                self.last_runner_key = Some(RunnerKey::Exec);
                self.runner = self.resolve_runner().unwrap_or(Runner::Echo);
            }
            "agent.peer" => {
                let addr = Address::parse(value).map_err(|e| format!("agent.peer: {e}"))?;
                self.peer = Some(addr);
                self.last_runner_key = Some(RunnerKey::Peer);
                self.runner = self.resolve_runner().unwrap_or(Runner::Echo);
            }
            "agent.exec_protocol" => match value {
                "text" => self.exec_protocol = ExecProtocol::Text,
                "jsonl" => self.exec_protocol = ExecProtocol::Jsonl,
                _ => {
                    return Err(format!(
                        "agent.exec_protocol: expected `text` or `jsonl`, found `{value}`"
                    ))
                }
            },
            "agent.workdir" => {
                if !value.starts_with('/') {
                    return Err(format!("agent.workdir: expected an absolute path, found `{value}`"));
                }
                self.workdir = Some(PathBuf::from(value));
            }
            "agent.env" => {
                let (name, val) = value
                    .split_once('=')
                    .filter(|(n, _)| !n.is_empty() && !n.contains(char::is_whitespace))
                    .ok_or_else(|| format!("agent.env: expected `NAME=VALUE`, found `{value}`"))?;
                self.env.push((name.to_string(), val.to_string()));
            }
            "tasks.max_running" => self.tasks.max_running = positive(key, value)?,
            "tasks.max_queued" => self.tasks.max_queued = number(key, value)? as usize,
            "tasks.deadline_ms" => self.tasks.deadline_ms = number(key, value)?,
            "tasks.input_idle_ms" => self.tasks.input_idle_ms = positive(key, value)? as u64,
            "tasks.ping_interval_ms" => self.tasks.ping_interval_ms = positive(key, value)? as u64,
            "tasks.stall_timeout_ms" => self.tasks.stall_timeout_ms = positive(key, value)? as u64,
            "tasks.cgroup" => {
                if !matches!(value, "auto" | "off") && !value.starts_with('/') {
                    return Err(format!(
                        "tasks.cgroup: expected auto, off or an absolute path, found `{value}`"
                    ));
                }
                self.tasks.cgroup = value.to_string();
            }
            "tasks.pids_max" if value == "auto" => self.tasks.pids_max = None,
            "tasks.pids_max" => {
                let n = number(key, value)?;
                if n != 0 && n < 16 {
                    return Err(
                        "tasks.pids_max: must be 0 or at least 16 (the task's own worker uses up to 8 threads)".into(),
                    );
                }
                self.tasks.pids_max = Some(n);
            }
            "tasks.memory_max_bytes" => self.tasks.memory_max_bytes = number(key, value)?,
            "tasks.prespawn" => {
                self.tasks.prespawn = match value {
                    "auto" => None,
                    _ => Some(number(key, value)?.min(256) as usize),
                }
            }
            "tasks.retain_max" => self.tasks.retain_max = number(key, value)? as usize,
            "tasks.retain_ms" => self.tasks.retain_ms = number(key, value)?,
            "tasks.retain_bytes" => self.tasks.retain_bytes = positive(key, value)?,
            "tasks.queued_max_bytes" => self.tasks.queued_max_bytes = positive(key, value)?,
            "tasks.cancel_grace_ms" => self.tasks.cancel_grace_ms = number(key, value)?,
            "tasks.term_grace_ms" => self.tasks.term_grace_ms = number(key, value)?,
            "tasks.output_max_bytes" => self.tasks.output_max_bytes = positive(key, value)? as u64,
            "tasks.rlimit_as_bytes" => self.tasks.rlimit_as_bytes = number(key, value)?,
            "tasks.rlimit_cpu_secs" => self.tasks.rlimit_cpu_secs = number(key, value)?,
            "tasks.rlimit_nofile" => self.tasks.rlimit_nofile = number(key, value)?,
            "http.body_max_bytes" => self.body_max_bytes = positive(key, value)?,
            "http.head_timeout_ms" => self.head_timeout_ms = positive(key, value)? as u64,
            "http.idle_timeout_ms" => self.idle_timeout_ms = positive(key, value)? as u64,
            "http.sse_keepalive_ms" => self.sse_keepalive_ms = positive(key, value)? as u64,
            "ext.required" => {
                let uris = list(key, value)?;
                if let Some(bad) = uris.iter().find(|u| !crate::ext::DECLARED.contains(&u.as_str())) {
                    return Err(format!(
                        "ext.required: `{bad}` is not an extension agentd declares ({})",
                        crate::ext::DECLARED.join(", ")
                    ));
                }
                self.ext_required = uris;
            }
            "ext.events_ring" => self.events_ring = positive(key, value)?,
            "init.modules" => {
                if !value.starts_with('/') {
                    return Err(format!("init.modules: expected an absolute path, found `{value}`"));
                }
                self.init_modules.push(PathBuf::from(value));
            }
            "log.level" => match value {
                "error" | "warn" | "info" | "debug" | "trace" | "off" => self.log_level = value.into(),
                _ => {
                    return Err(format!(
                        "log.level: expected error, warn, info, debug, trace or off, found `{value}`"
                    ))
                }
            },
            _ => {
                return Err(match suggest(key) {
                    Some(k) => format!("unknown key `{key}` (did you mean `{k}`?)"),
                    None => format!("unknown key `{key}` (`agentd help config` lists every key)"),
                })
            }
        }
        Ok(())
    }

    /// Checks that hold across keys, after everything is read.
    pub fn validate(&mut self) -> Result<(), ConfigError> {
        let err = |message: String| ConfigError {
            place: "config".into(),
            message,
        };
        self.runner = self.resolve_runner().map_err(err)?;
        let mut seen = std::collections::HashSet::new();
        for a in &self.listen {
            if !seen.insert(a.to_string()) {
                return Err(err(format!("a2a.listen: {a} is listed twice")));
            }
        }
        Ok(())
    }

    /// Which runner the keys ask for: agent.runner when given, else the
    /// last of agent.exec / agent.peer set (a flag after the file's key, a
    /// later flag after an earlier one), else echo.
    pub fn resolve_runner(&self) -> Result<Runner, String> {
        let exec = self.exec_argv.clone().map(|argv| Runner::Exec { argv });
        let peer = self.peer.clone().map(|address| Runner::Peer { address });
        match self.runner_choice.as_deref() {
            Some("echo") => Ok(Runner::Echo),
            Some("exec") => exec.ok_or_else(|| "agent.runner is `exec` but agent.exec names no program".to_string()),
            Some("peer") => peer.ok_or_else(|| "agent.runner is `peer` but agent.peer names no endpoint".to_string()),
            _ => Ok(match self.last_runner_key {
                Some(RunnerKey::Exec) => exec.unwrap_or(Runner::Echo),
                Some(RunnerKey::Peer) => peer.unwrap_or(Runner::Echo),
                None => Runner::Echo,
            }),
        }
    }

    /// The runner keys that are set but do not pick the runner, each with
    /// why: what `serve --check` and start-up point out.
    pub fn unused_runner_keys(&self) -> Vec<String> {
        let why = match self.runner_choice {
            Some(_) => "agent.runner names the runner",
            None => "the last of agent.exec and agent.peer set picks the runner",
        };
        let mut unused = Vec::new();
        if self.exec_argv.is_some() && !matches!(self.runner, Runner::Exec { .. }) {
            unused.push(format!(
                "agent.exec is set but unused: the runner is {} ({why})",
                self.runner.name()
            ));
        }
        if self.peer.is_some() && !matches!(self.runner, Runner::Peer { .. }) {
            unused.push(format!(
                "agent.peer is set but unused: the runner is {} ({why})",
                self.runner.name()
            ));
        }
        unused
    }

    /// The listeners to use: the configured ones, else the default path.
    pub fn listeners(&self) -> Vec<Address> {
        if self.listen.is_empty() {
            vec![Address::Unix(default_socket_path())]
        } else {
            self.listen.clone()
        }
    }
}

/// `$XDG_RUNTIME_DIR/agentd/agentd.sock`; as root without it
/// `/run/agentd/agentd.sock`; otherwise `/tmp/agentd-UID/agentd.sock`.
pub fn default_socket_path() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if Path::new(&dir).is_absolute() => Path::new(&dir).join("agentd/agentd.sock"),
        _ if crate::sys::geteuid() == 0 => PathBuf::from("/run/agentd/agentd.sock"),
        _ => PathBuf::from(format!("/tmp/agentd-{}/agentd.sock", crate::sys::geteuid())),
    }
}
