//! The configuration model: one flat `key: value` file (`#` starts a comment
//! line), overridden by flags. Every key is listed once in [`KEYS`], which is
//! also what `agentd help config` prints and what the manual must cover.
//! Errors name the file and line (or the flag) and say what was expected.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::control::ExecProtocol;
use crate::limits;
use crate::transport::Address;

/// One documented configuration key.
pub struct Key {
    pub name: &'static str,
    pub value: &'static str,
    pub default: &'static str,
    pub help: &'static str,
}

macro_rules! keys {
    ($( $name:literal, $value:literal, $default:literal, $help:literal; )*) => {
        pub const KEYS: &[Key] = &[ $( Key { name: $name, value: $value, default: $default, help: $help }, )* ];
    };
}

keys! {
    "a2a.listen", "ADDRESS", "$XDG_RUNTIME_DIR/agentd/agentd.sock", "Listen on unix:///ABSOLUTE/PATH or vsock://CID:PORT (CID -1 or `any` = every CID). Repeatable. The first listener is the card's preferred interface.";
    "a2a.vsock_allow_cids", "CID,…", "(any)", "vsock peers allowed to connect; others are closed before any HTTP and logged as a2a.vsock.denied.";
    "a2a.vsock_operator_cids", "CID,…", "", "vsock peers that see every task (others see only the tasks they created).";
    "a2a.advertise", "BINDING URL", "", "Add an interface to the card after the listeners' own, e.g. `JSONRPC http://127.0.0.1:8080/` for a proxy that fronts the socket. Repeatable.";
    "a2a.tls", "-", "", "Not supported: the kernel authenticates peers (SO_PEERCRED on unix sockets, the CID on vsock). Setting it is an error; put TLS in a proxy that fronts the socket.";
    "a2a.max_connections", "N", "1024", "Concurrent connections; a connection over the cap gets 503 and is closed. Lowered at start, with a log line, when RLIMIT_NOFILE cannot hold it beside the fds kept for workers.";
    "a2a.version_required", "BOOL", "true", "Refuse requests without an A2A-Version header (which means 0.3) with -32009. `false` treats a missing header as 1.0.";
    "card.name", "TEXT", "agentd", "The card's name.";
    "card.description", "TEXT", "(depends on the runner)", "The card's description.";
    "card.version", "TEXT", "(agentd's version)", "The agent's own version, as the card states it.";
    "card.provider_organization", "TEXT", "", "The card's provider.organization (provider is omitted unless both it and card.provider_url are set).";
    "card.provider_url", "URL", "", "The card's provider.url.";
    "card.documentation_url", "URL", "", "The card's documentationUrl.";
    "card.input_modes", "TYPE,…", "text/plain", "The card's defaultInputModes, comma-separated media types.";
    "card.output_modes", "TYPE,…", "text/plain", "The card's defaultOutputModes, comma-separated media types.";
    "card.skill_id", "ID", "(runner name)", "The id of the card's one skill.";
    "card.skill_name", "TEXT", "(runner name)", "The skill's name.";
    "card.skill_description", "TEXT", "(depends on the runner)", "The skill's description.";
    "card.skill_tags", "TAG,…", "(runner name)", "The skill's tags, comma-separated (at least one).";
    "card.skill_example", "TEXT", "", "An example prompt for the skill. Repeatable.";
    "agent.runner", "echo|exec|peer", "echo", "What a task runs: the built-in echo agent, the program of agent.exec, or the A2A agent at agent.peer. Without this key, setting agent.exec or agent.peer picks that runner.";
    "agent.exec", "PROGRAM ARGS…", "", "The program each task runs (sets agent.runner to exec). Split on spaces; single and double quotes and backslash work as in sh. No shell is involved.";
    "agent.exec_protocol", "text|jsonl", "text", "How agentd talks to the program. `text`: the message's text on stdin, stdout streamed back as the artifact, exit status decides COMPLETED or FAILED. `jsonl`: one JSON object per line each way, driving the whole task model (see the manual).";
    "agent.peer", "ENDPOINT", "", "Delegate every task to the A2A agent at unix:///PATH, vsock://CID:PORT or vsock+uds:///PATH:PORT (sets agent.runner to peer). The worker is that agent's client: it relays status, artifacts, input-required turns and cancellation.";
    "agent.workdir", "PATH", "(agentd's working directory)", "The program's working directory.";
    "agent.env", "NAME=VALUE", "", "An environment variable for the program. Repeatable. The program otherwise sees only PATH, HOME, USER, LOGNAME, LANG, LC_ALL, TZ and TMPDIR from agentd's environment.";
    "tasks.max_running", "N", "32", "Tasks whose process runs at once; more wait in TASK_STATE_SUBMITTED.";
    "tasks.max_queued", "N", "1024", "Tasks waiting in TASK_STATE_SUBMITTED; a send over it is refused (-32603, reason QUEUE_FULL) and nothing is created.";
    "tasks.queued_max_bytes", "BYTES", "67108864", "Bytes of the messages of the tasks waiting in TASK_STATE_SUBMITTED; a send over it is refused (-32603, reason QUEUE_FULL) and nothing is created. One waiting message always fits.";
    "tasks.deadline_ms", "MS", "0", "Wall-clock budget of one task; past it the kill ladder runs and the task FAILS with cause `deadline`. 0 = no deadline.";
    "tasks.input_idle_ms", "MS", "600000", "How long a task in TASK_STATE_INPUT_REQUIRED or TASK_STATE_AUTH_REQUIRED keeps its process waiting for the next message; past it the task FAILS with cause `idle`.";
    "tasks.ping_interval_ms", "MS", "5000", "A worker silent this long is pinged on its control channel; any frame it sends proves it alive, so a busy worker is never pinged.";
    "tasks.stall_timeout_ms", "MS", "15000", "A worker that sends nothing, not even the pong, this long after a ping is stalled: kill ladder, FAILED with cause `stalled`.";
    "tasks.cgroup", "auto|off|PATH", "auto", "Put each task in its own cgroup where agentd may create them (auto: under agentd's own cgroup v2, plus a v1 pids or memory hierarchy only for a limit set that v2 cannot enforce, and the v1 freezer where there is no v2), or under PATH in a cgroup v2 tree; off: process groups, the worker as its task's subreaper. A cgroup also catches processes that left the task's process group, even after agentd was SIGKILLed, and enforces tasks.pids_max and tasks.memory_max_bytes.";
    "tasks.pids_max", "auto|N", "auto", "Most processes and threads one task may have at once, its worker's few threads included (needs a pids cgroup: free on cgroup v2, a cgroup v1 move per task on a hybrid host); a task that hits it FAILS with cause `exhausted`. auto = 1024 where agentd's cgroup v2 slots enforce it for free, none elsewhere (a hybrid host); N = that limit anywhere; 0 = no limit, else at least 16.";
    "tasks.memory_max_bytes", "BYTES", "0", "Memory one task may use (needs a memory cgroup); the OOM killer ends it and it FAILS with cause `exhausted`. 0 = no limit.";
    "tasks.prespawn", "auto|N", "auto", "Idle workers kept forked ahead of demand, so starting a task does not wait for a worker to be forked and to start (they show as `agentd-idle`). auto = as many as tasks started in the last 250 ms, at least 1, at most 8; N = exactly N; 0 = fork on demand.";
    "tasks.retain_max", "N", "1000", "Finished tasks kept for GetTask and ListTasks; the oldest go first.";
    "tasks.retain_ms", "MS", "3600000", "How long a finished task is kept; expired tasks are dropped on time, also on an idle daemon.";
    "tasks.retain_bytes", "BYTES", "268435456", "Estimated bytes all finished tasks may hold together (artifacts, history, metadata); past it the oldest finished tasks are dropped first (GetTask then answers -32001). A waiting client still gets its task's result.";
    "tasks.cancel_grace_ms", "MS", "1000", "Kill ladder: time between the cancel request to the worker and SIGTERM to its process group.";
    "tasks.term_grace_ms", "MS", "2000", "Kill ladder: time between SIGTERM and SIGKILL to the process group.";
    "tasks.output_max_bytes", "BYTES", "67108864", "Most bytes a task's program may write to stdout (artifact text, or jsonl lines of any kind); over it the task FAILS with cause `exhausted`.";
    "tasks.rlimit_as_bytes", "BYTES", "0", "RLIMIT_AS (address space) of the task's program. 0 = inherit.";
    "tasks.rlimit_cpu_secs", "SECS", "0", "RLIMIT_CPU of the task's program. 0 = inherit.";
    "tasks.rlimit_nofile", "N", "0", "RLIMIT_NOFILE of the task's program. 0 = inherit.";
    "http.body_max_bytes", "BYTES", "4194304", "Largest request body; over it → 413. It also sizes the channel to each worker (4.5 × this or the 4 MiB jsonl line limit, whichever is larger, + 64 KiB), so any message within it reaches the agent.";
    "http.head_timeout_ms", "MS", "10000", "Time a client has to send a request head once it started; over it → 408. The body then gets this long or 30 s, whichever is more.";
    "http.idle_timeout_ms", "MS", "60000", "Idle keep-alive time before the connection is closed.";
    "http.sse_keepalive_ms", "MS", "15000", "An SSE stream with nothing to say sends a `: keep-alive` comment this often.";
    "ext.required", "URI,…", "", "Extensions a client must activate (A2A-Extensions) to be served; the card marks them required and a request without them gets -32008. Only agentd's own extensions can be required.";
    "ext.events_ring", "N", "4096", "Records the events extension keeps for clients resuming from a sequence number.";
    "init.modules", "PATH", "", "When agentd runs as PID 1 (a VM guest's /init): a kernel module to load before listening, e.g. the virtio and vsock modules. Repeatable, loaded in order. As PID 1 agentd also mounts /proc, /sys, /dev, /tmp and /run, and powers the machine off when it stops.";
    "log.level", "LEVEL", "info", "error, warn, info, debug, trace or off. The RUST_LOG environment variable overrides it.";
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
            events_ring: crate::ext::events::RING_DEFAULT,
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
                self.runner = self.resolve_runner().unwrap_or(Runner::Echo);
            }
            "agent.peer" => {
                let addr = Address::parse(value).map_err(|e| format!("agent.peer: {e}"))?;
                self.peer = Some(addr);
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
    /// last of agent.exec / agent.peer, else echo.
    pub fn resolve_runner(&self) -> Result<Runner, String> {
        let exec = self.exec_argv.clone().map(|argv| Runner::Exec { argv });
        let peer = self.peer.clone().map(|address| Runner::Peer { address });
        match self.runner_choice.as_deref() {
            Some("echo") => Ok(Runner::Echo),
            Some("exec") => exec.ok_or_else(|| "agent.runner is `exec` but agent.exec names no program".to_string()),
            Some("peer") => peer.ok_or_else(|| "agent.runner is `peer` but agent.peer names no endpoint".to_string()),
            _ => Ok(match (&self.runner, exec, peer) {
                (Runner::Peer { .. }, _, Some(p)) => p,
                (_, Some(e), None) => e,
                (_, None, Some(p)) => p,
                (Runner::Exec { .. }, Some(e), Some(_)) => e,
                (_, Some(_), Some(p)) => p,
                (_, None, None) => Runner::Echo,
            }),
        }
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

impl Config {
    /// For the exec runner: the program must resolve (on the PATH a task
    /// gets, or as a path) to an executable file, so a typo shows at
    /// `serve --check` and start-up rather than as every task's exit 127.
    /// The resolved path on success.
    pub fn check_program(&self) -> Result<Option<PathBuf>, String> {
        let Runner::Exec { argv } = &self.runner else {
            return Ok(None);
        };
        let program = argv.first().map(String::as_str).unwrap_or("");
        let path_var = self
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var("PATH").ok())
            .unwrap_or_default();
        let candidates: Vec<PathBuf> = if program.contains('/') {
            let p = Path::new(program);
            match &self.workdir {
                Some(dir) if p.is_relative() => vec![dir.join(p)],
                _ => vec![p.to_path_buf()],
            }
        } else {
            std::env::split_paths(&path_var).map(|d| d.join(program)).collect()
        };
        for c in &candidates {
            if let Ok(meta) = std::fs::metadata(c) {
                use std::os::unix::fs::PermissionsExt;
                if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                    return Ok(Some(c.clone()));
                }
                if program.contains('/') {
                    return Err(format!(
                        "agent.exec: `{}` is not an executable file (mode {:o}): chmod +x it or name another program",
                        c.display(),
                        meta.permissions().mode() & 0o7777
                    ));
                }
            }
        }
        Err(if program.contains('/') {
            format!(
                "agent.exec: `{}` does not exist: install it or correct the path",
                candidates[0].display()
            )
        } else {
            format!(
                "agent.exec: `{program}` is not an executable on PATH ({path_var}): install it or give its absolute path"
            )
        })
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

fn text(key: &str, value: &str) -> Result<String, String> {
    if value.is_empty() {
        Err(format!("{key}: expected a value, found nothing"))
    } else {
        Ok(value.to_string())
    }
}

fn list(key: &str, value: &str) -> Result<Vec<String>, String> {
    let items: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    if items.is_empty() {
        Err(format!("{key}: expected a comma-separated list, found nothing"))
    } else {
        Ok(items)
    }
}

fn cids(key: &str, value: &str) -> Result<Vec<u32>, String> {
    list(key, value)?
        .iter()
        .map(|c| c.parse::<u32>().map_err(|_| format!("{key}: `{c}` is not a vsock CID")))
        .collect()
}

fn number(key: &str, value: &str) -> Result<u64, String> {
    value
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{key}: expected a whole number, found `{value}`"))
}

fn positive(key: &str, value: &str) -> Result<usize, String> {
    match number(key, value)? {
        0 => Err(format!("{key}: must be at least 1")),
        n => usize::try_from(n).map_err(|_| format!("{key}: `{value}` is too large")),
    }
}

fn boolean(key: &str, value: &str) -> Result<bool, String> {
    match value {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err(format!("{key}: expected true or false, found `{value}`")),
    }
}

/// The known key closest to a misspelt one (same prefix or one edit away).
fn suggest(key: &str) -> Option<&'static str> {
    KEYS.iter()
        .map(|k| k.name)
        .find(|k| k.eq_ignore_ascii_case(key) || k.replace('-', "_") == key.replace('-', "_"))
        .or_else(|| {
            KEYS.iter()
                .map(|k| k.name)
                .find(|k| key.len() > 3 && (k.starts_with(key) || key.starts_with(k)))
        })
}

/// Splits a command line the way sh would for words: whitespace separates,
/// '…' is literal, "…" allows \" and \\, a backslash outside quotes escapes
/// the next character. No expansion of any kind.
pub fn split_command(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => cur.push(c),
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => cur.push(c),
                    None => return Err("trailing backslash".into()),
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_file_and_names_the_bad_line() {
        let mut c = Config::default();
        c.load_str(
            "# comment\n\na2a.listen: unix:///tmp/x.sock\ntasks.max_running: 4\n",
            "f.conf",
        )
        .unwrap();
        assert_eq!(c.tasks.max_running, 4);
        assert_eq!(c.listen.len(), 1);
        let err = c.load_str("card.name: a\nbogus.key: 1\n", "f.conf").unwrap_err();
        assert_eq!(err.place, "f.conf:2");
        assert!(err.message.contains("unknown key `bogus.key`"), "{err}");
        let err = c.load_str("tasks.max_running: many\n", "f.conf").unwrap_err();
        assert_eq!(
            err.to_string(),
            "f.conf:1: tasks.max_running: expected a whole number, found `many`"
        );
    }

    #[test]
    fn tls_on_unix_is_an_error() {
        let err = Config::default().load_str("a2a.tls: cert.pem\n", "f").unwrap_err();
        assert_eq!(err.place, "f:1");
        assert!(err.message.starts_with("a2a.tls: TLS is not supported"));
    }

    #[test]
    fn suggests_near_keys() {
        let err = Config::default().set("tasks.max-running", "3").unwrap_err();
        assert!(err.contains("did you mean `tasks.max_running`"), "{err}");
    }

    #[test]
    fn splits_commands_like_sh() {
        assert_eq!(
            split_command(r#"sh -c 'echo "a b"; exit 3' x\ y "q\"z""#).unwrap(),
            vec!["sh", "-c", "echo \"a b\"; exit 3", "x y", "q\"z"]
        );
        assert!(split_command("'open").is_err());
        assert_eq!(split_command("  ").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn every_key_is_settable_or_deliberately_refused() {
        for k in KEYS {
            let sample = match k.value {
                "N" | "MS" | "BYTES" | "SECS" => "16",
                "BOOL" => "true",
                "ADDRESS" => "unix:///tmp/agentd-key-test.sock",
                "CID,…" => "2,3",
                "URI,…" => crate::ext::COMMAND,
                "BINDING URL" => "JSONRPC http://127.0.0.1:1/",
                "echo|exec|peer" => "echo",
                "ENDPOINT" => "unix:///tmp/peer.sock",
                "text|jsonl" => "jsonl",
                "auto|off|PATH" => "off",
                "auto|N" => "auto",
                "PATH" => "/tmp",
                "NAME=VALUE" => "A=b",
                "LEVEL" => "debug",
                _ => "x",
            };
            let res = Config::default().set(k.name, sample);
            assert!(res.is_ok() || k.name == "a2a.tls", "{}: {res:?}", k.name);
        }
    }
}
