//! Every configuration key, once: what `agentd help config` prints, what
//! `Config::set` accepts and what the manual must cover.

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
    "agent.runner", "echo|exec|peer", "echo", "What a task runs: the built-in echo agent, the program of agent.exec, or the A2A agent at agent.peer. Without this key, the last of agent.exec and agent.peer set picks the runner (a flag after the file's key, a later line after an earlier one).";
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
    "tasks.prespawn", "auto|N", "auto", "Idle workers kept forked ahead of demand, so starting a task does not wait for a worker to be forked and to start (they show as `agentd-idle` in ps). auto = as many as tasks started in the last 250 ms, at least 1, at most 8; N = exactly N; 0 = fork on demand.";
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
