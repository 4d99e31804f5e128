//! Every built-in bound and default in one place, with its unit in its name.
//! Config keys override the ones marked "(config: key)"; the rest are fixed.

/// Largest request head (request line + headers) we buffer; over it → 431.
pub const HTTP_HEAD_MAX_BYTES: usize = 16 * 1024;
/// Most header fields in one request head; over it → 431.
pub const HTTP_HEADERS_MAX: usize = 64;
/// Largest request body (config: `http.body_max_bytes`); over it → 413.
pub const HTTP_BODY_MAX_BYTES: usize = 4 * 1024 * 1024;
/// Longest chunk-size line in a chunked body (hex digits + extensions).
pub const HTTP_CHUNK_LINE_MAX_BYTES: usize = 1024;
/// Time a client has to send a whole request head once its first byte
/// arrived (config: `http.head_timeout_ms`); over it → 408.
pub const HTTP_HEAD_TIMEOUT_MS: u64 = 10_000;
/// Time a client has to send the body after the head (same key as head).
pub const HTTP_BODY_TIMEOUT_MS: u64 = 30_000;
/// Idle time allowed between keep-alive requests (config: `http.idle_timeout_ms`).
pub const HTTP_IDLE_TIMEOUT_MS: u64 = 60_000;
/// Time one response write may block on a client that does not read.
pub const HTTP_WRITE_TIMEOUT_MS: u64 = 30_000;
/// Concurrent connections per daemon (config: `a2a.max_connections`);
/// over it the connection gets 503 and is closed.
pub const MAX_CONNECTIONS: usize = 1024;
/// Stack of one connection thread. Parsing is on the heap and serde_json
/// caps nesting at 128, so a small stack holds; 1,024 idle connections then
/// cost 256 MiB of address space, not 2 GiB.
pub const CONN_THREAD_STACK_BYTES: usize = 256 * 1024;
/// File descriptors kept back from connections for the daemon itself
/// (listeners, procman, logs, a 503 to a client over the cap) ...
pub const FD_RESERVE_BASE: u64 = 64;
/// ... and for each worker there may be at once (`tasks.max_running`, plus
/// the idle pool: `tasks.prespawn`, or `PRESPAWN_AUTO_MAX`): procman's ends
/// of its two control pipes, its cgroup slot's kept files (the directory to
/// fork into, `cgroup.kill`, `cgroup.procs`, `cpu.stat`, a peak counter,
/// the pids and OOM counters a limit makes meaningful; a v1 slot one
/// `cgroup.procs` more) and the two pipe ends an ask for it holds a moment.
/// Connections get the rest of RLIMIT_NOFILE, so a task never fails
/// because clients used the fds.
pub const FD_RESERVE_PER_TASK: u64 = 12;
/// A condition that repeats (accept failing with EMFILE, say) is logged at
/// most once per this interval, with the count of what was not logged.
pub const LOG_REPEAT_INTERVAL_MS: u64 = 10_000;
/// Deepest nesting of arrays and objects in a JSON-RPC request body, the
/// envelope included; deeper → -32700 before anything is parsed. Well below
/// serde_json's own limit (128), so a request's values stay parseable when
/// re-embedded in a task, an event or a worker frame, and so every handler
/// on a connection thread (debug builds too) stays within its stack.
pub const JSON_DEPTH_MAX: usize = 64;

/// Tasks whose worker runs at once (config: `tasks.max_running`); more wait
/// in SUBMITTED.
pub const TASKS_MAX_RUNNING: usize = 32;
/// Tasks waiting in SUBMITTED (config: `tasks.max_queued`); over it a send
/// is refused with -32603 and reason QUEUE_FULL, and nothing is created.
pub const TASKS_MAX_QUEUED: usize = 1024;
/// Wall-clock budget of one task (config: `tasks.deadline_ms`); 0 = none.
pub const TASK_DEADLINE_MS: u64 = 0;
/// `tasks.pids_max: auto`: the processes and threads one task may have
/// where cgroup v2 enforces it at no cost per task.
pub const TASK_PIDS_MAX_WHERE_FREE: u64 = 1024;
/// Most idle workers `tasks.prespawn: auto` keeps ready under load.
pub const PRESPAWN_AUTO_MAX: usize = 8;
/// Finished tasks kept for GetTask/ListTasks (config: `tasks.retain_max`).
pub const TASKS_RETAIN_MAX: usize = 1000;
/// How long a finished task is kept (config: `tasks.retain_ms`).
pub const TASKS_RETAIN_MS: u64 = 3_600_000;
/// Estimated bytes all finished tasks may hold together (config:
/// `tasks.retain_bytes`); past it the oldest finished tasks are dropped.
pub const TASKS_RETAIN_BYTES: usize = 256 * 1024 * 1024;
/// Bytes of the messages of tasks waiting in SUBMITTED (config:
/// `tasks.queued_max_bytes`); a send over it is refused with -32603 and
/// reason QUEUE_FULL, and nothing is created.
pub const TASKS_QUEUED_MAX_BYTES: usize = 64 * 1024 * 1024;
/// Events kept per task for replay; older ones are dropped first.
pub const TASK_EVENTS_MAX: usize = 4096;
/// Messages kept in one task's history; older ones are dropped first.
pub const TASK_HISTORY_MAX: usize = 1000;
/// Bytes of one task's history; past it the oldest messages are dropped
/// (the newest always stays: it is bounded by the request body size).
pub const TASK_HISTORY_MAX_BYTES: usize = 16 * 1024 * 1024;

/// Kill ladder: wait after the `cancel` frame before SIGTERM to the group
/// (config: `tasks.cancel_grace_ms`).
pub const LADDER_CANCEL_GRACE_MS: u64 = 1_000;
/// Kill ladder: wait after SIGTERM before SIGKILL (config: `tasks.term_grace_ms`).
pub const LADDER_TERM_GRACE_MS: u64 = 2_000;
/// After the worker exits, how long its control channel may stay open
/// before the task is finished without it. The channel closes with the
/// worker (no other process holds it), so this only bounds how long procman
/// may take to read and parse what is still queued: a frame of tens of MiB
/// (see `control_frame_max_bytes`) takes seconds on a loaded machine.
pub const WORKER_CHANNEL_DRAIN_MS: u64 = 10_000;
/// After a worker reported its result, how long it has to exit by itself
/// before its group is SIGKILLed (the result stands).
pub const WORKER_EXIT_GRACE_MS: u64 = 1_000;
/// How often a task's group that outlives its worker is SIGKILLed again
/// and checked for emptiness.
pub const GROUP_POLL_MS: u64 = 20;
/// How long a worker may leave its task's `spawn` frame unread (a stopped
/// or lost idle worker); past it the task goes to a fresh worker, and the
/// worker is killed. A healthy worker reads it within microseconds.
pub const WORKER_TAKE_MS: u64 = 1_000;
/// Workers a task is given to, in a row, that never read it; the next
/// time the task FAILS (`crashed`) with the reason instead of going round.
pub const WORKER_TAKE_ATTEMPTS: u32 = 3;
/// How long the fork server may leave a request for a worker unanswered
/// (it forks in well under a millisecond); past it, it is taken for lost
/// (stopped, wedged), killed and replaced, and what it owed is asked of the
/// new one. Tasks waiting for those workers are not failed.
pub const FORK_ANSWER_MS: u64 = 1_000;
/// Fork servers lost in a row (no worker from any) before their unanswered
/// requests count as failed forks (`FORK_ATTEMPTS`).
pub const FORK_SERVER_LOSSES_MAX: u32 = 5;
/// Workers that could not be had in a row before the task first in line
/// FAILS with the reason (nothing waits for ever on a fork that fails).
pub const FORK_ATTEMPTS: u32 = 3;
/// How long procman waits before asking again after a failed or refused ask.
pub const FORK_RETRY_MS: u64 = 20;
/// How often a running task's cgroup counters are read (a fork bomb is
/// stopped between two reads).
pub const CGROUP_CHECK_MS: u64 = 250;
/// How far back task starts count as demand for idle workers
/// (`tasks.prespawn: auto`); a surplus idle worker retires after four.
pub const PRESPAWN_DEMAND_WINDOW_MS: u64 = 250;
/// Most idle workers procman asks for per turn of its loop, so refilling
/// the pool never holds up frames that are waiting.
pub const PRESPAWN_PER_TURN: usize = 2;
/// After poll(2) failed (more fds than RLIMIT_NOFILE allows), how long
/// procman waits before it tries every descriptor anyway.
pub const PROCMAN_POLL_RETRY_MS: u64 = 10;
/// How long the allocator's spare large blocks (sys/alloc.rs: freed chunks
/// of large outputs, kept for the next) wait to be taken before procman
/// gives them back to libc.
pub const SPARE_BLOCKS_IDLE_MS: u64 = 1000;
/// procman's one buffer the small reads of every control pipe go through.
pub const PROCMAN_READ_BUFFER_BYTES: usize = 64 * 1024;
/// Most bytes procman reads from one worker per turn of its loop, so a
/// worker that floods frames shares procman with the others.
pub const CONTROL_READ_TURN_BYTES: usize = 256 * 1024;
/// Largest non-streaming response body agentd's own client accepts
/// (`agentd send|get|list`, the peer runner, the MCP bridge); over it the
/// call fails with the limit named.
pub const CLIENT_RESPONSE_MAX_BYTES: usize = 64 * 1024 * 1024;
/// How long agentd's client waits for an answer once writing its request
/// failed: an agent that refused the request (413) has answered and hung
/// up already, so this only bounds a peer that broke off without a word.
pub const CLIENT_REFUSAL_READ_MS: u64 = 2_000;
/// How long the client commands wait for the agent card without
/// `--timeout` (and `serve --check` for the peer's): an agent answers it at
/// once, so a socket silent this long (one that accepts and never answers)
/// is not waited on for ever. What follows the card (a blocking send, a
/// stream) is waited for as long as it takes.
pub const CLIENT_CARD_TIMEOUT_MS: u64 = 5_000;
/// How long the hybrid-vsock handshake (`CONNECT port` / `OK`) may take.
pub const VSOCK_HYBRID_HANDSHAKE_MS: u64 = 5_000;
/// How often a vsock accept loop looks up to see whether the daemon stops:
/// shutdown(2) does not wake accept(2) on a vsock socket as it does on unix.
pub const VSOCK_ACCEPT_POLL_MS: i32 = 200;
/// How long a vsock readiness notification may take to connect and write.
pub const SYSTEMD_VSOCK_NOTIFY_TIMEOUT_MS: u64 = 2_000;
/// How often STATUS= is refreshed when no watchdog asks for more.
pub const SYSTEMD_STATUS_EVERY_MS: u64 = 5_000;
/// Records the events extension keeps for resuming (config: `ext.events_ring`,
/// this its default); a client resuming from one older than that gets a
/// `resync` record first.
pub const EVENTS_RING_RECORDS_DEFAULT: usize = 4096;
/// The task-annotations extension: labels per task, and the bytes of a key
/// and of a value; past them the send is refused with -32602.
pub const ANNOTATION_LABELS_MAX: usize = 16;
pub const ANNOTATION_KEY_MAX_BYTES: usize = 64;
pub const ANNOTATION_VALUE_MAX_BYTES: usize = 256;
/// Distinct denied peers (uid or CID) kept as their own `/metrics` series;
/// the rest are counted under `other`, so a scan of uids cannot grow it.
pub const METRICS_DENIED_SERIES_MAX: usize = 32;

/// How long a task waiting for input (a warm session) may wait
/// (config: `tasks.input_idle_ms`); past it the task FAILS with cause `idle`.
pub const TASK_INPUT_IDLE_MS: u64 = 600_000;
/// Heartbeat: procman pings each worker this often (config: `tasks.ping_interval_ms`).
pub const WORKER_PING_INTERVAL_MS: u64 = 5_000;
/// Heartbeat: a ping unanswered this long means the worker is stalled
/// (config: `tasks.stall_timeout_ms`): kill ladder, FAILED, cause `stalled`.
pub const WORKER_STALL_TIMEOUT_MS: u64 = 15_000;
/// A blocking SendMessage waits on its task in slices this long and, between
/// them, looks whether its client hung up; a gone client frees its
/// connection within about this long, and the task goes on.
pub const BLOCKING_WAIT_SLICE_MS: u64 = 200;
/// SSE comment sent on an idle stream (config: `http.sse_keepalive_ms`).
pub const SSE_KEEPALIVE_MS: u64 = 15_000;

/// Longest line a jsonl program may write, without its newline; over it
/// the task fails with a reason that names this limit.
pub const JSONL_LINE_MAX_BYTES: usize = 4 * 1024 * 1024;
/// Messages queued for a program's stdin while it does not read; one more
/// fails the task (the program is not reading its input).
pub const STDIN_QUEUE_MAX_MESSAGES: usize = 8;
/// After a program gave its verdict (a jsonl terminal line or direct
/// reply), how long it has to exit by itself; past it the task ends anyway
/// (a helper may hold the pipes: its EOF is not waited for), and procman's
/// kill of the group takes what is left.
pub const PROGRAM_EXIT_GRACE_MS: u64 = 1_000;
/// Once a program exited, how long its stdout and stderr have to reach EOF
/// (a background grandchild may hold them open); past it the task ends
/// without them, and procman's kill of the worker's group takes the rest.
pub const PROGRAM_PIPES_DRAIN_MS: u64 = 500;
/// A worker's frame buffer is kept for the next frame up to this size (a
/// text chunk's frame fits; a jsonl line of megabytes is let go).
pub const WORKER_FRAME_BUFFER_KEEP_BYTES: usize = 1024 * 1024;

/// Most bytes of a text program's stdout read at once: one artifact chunk.
/// (Larger chunks cost more than they save: past 128 KiB each buffer is a
/// fresh mapping of musl's, faulted in and unmapped per chunk.)
pub const TEXT_CHUNK_MAX_BYTES: usize = 64 * 1024;
/// What a task program's stdout pipe is asked to hold (the kernel's default
/// is 64 KiB; an unprivileged user may ask up to pipe-max-size, 1 MiB by
/// default). At 256 KiB, 256 tasks' pipes are what the kernel lets one
/// user hold before it gives new pipes less (pipe-user-pages-soft, 64 MiB).
pub const PROGRAM_STDOUT_PIPE_BYTES: usize = 256 * 1024;
/// Most a JSON text grows when agentd reads it and writes it back, as
/// NUM/DEN: a float is written in its shortest round-trip form, which can
/// be longer than what was sent (`1e15` → `1000000000000000.0`, 4 → 18
/// bytes; serde_json's `float_roundtrip` makes this the worst case, see
/// control.rs's tests); strings, escapes and structure never grow.
pub const JSON_REENCODE_GROWTH_NUM: usize = 9;
pub const JSON_REENCODE_GROWTH_DEN: usize = 2;
/// What a control frame holds besides the one message, artifact or line it
/// carries: its own fields, task ids, the runner's spec (argv, env).
pub const CONTROL_FRAME_OVERHEAD_BYTES: usize = 64 * 1024;

/// The buffer a control frame is first encoded into: a spawn frame with a
/// short message, or a status or artifact event, fits without growing it.
/// (A fresh worker's first block of 1024 bytes costs it an mmap.)
pub const CONTROL_FRAME_START_BYTES: usize = 512;

/// A response body up to this size is written with its head in one
/// write(2); a larger one is written after it rather than copied.
pub const RESPONSE_INLINE_BODY_MAX_BYTES: usize = 64 * 1024;
/// A task answer of about this size or more (its artifacts, mostly) is
/// written onto the connection as it is rendered, in chunks, instead of
/// into a buffer of its whole size first: no fresh megabytes to fault in,
/// and the client reads while the rest is rendered.
pub const RESPONSE_STREAMED_MIN_BYTES: usize = 1024 * 1024;
/// The size a streamed answer's chunks are gathered to (a piece of the
/// answer larger than this is a chunk of its own, written without a copy).
pub const RESPONSE_CHUNK_BYTES: usize = 256 * 1024;

/// The buffer a JSON-RPC answer is first written into: a task's answer
/// (about a kilobyte) fits without growing it.
pub const RPC_ANSWER_START_BYTES: usize = 2048;

/// Largest control-channel frame, either way, for a daemon whose
/// `http.body_max_bytes` is `body_max_bytes`: whatever a frame carries came
/// in within that body limit or the jsonl line limit, and grew at most
/// JSON_REENCODE_GROWTH on the way, so no valid input is refused for
/// agentd's own re-encoding (4 MiB → 18 MiB + 64 KiB by default). A frame
/// over it is refused: the sender fails the task naming this limit, the
/// reader treats the channel as broken.
pub const fn control_frame_max_bytes(body_max_bytes: usize) -> usize {
    let carried = if body_max_bytes > JSONL_LINE_MAX_BYTES {
        body_max_bytes
    } else {
        JSONL_LINE_MAX_BYTES
    };
    let framed = (carried / JSON_REENCODE_GROWTH_DEN + 1)
        .saturating_mul(JSON_REENCODE_GROWTH_NUM)
        .saturating_add(CONTROL_FRAME_OVERHEAD_BYTES);
    // The length prefix is a u32.
    if framed > u32::MAX as usize {
        u32::MAX as usize
    } else {
        framed
    }
}

/// Bytes procman queues for one worker that is not reading, beyond one
/// whole frame; past it the worker is stopped as `stalled`.
pub const CONTROL_OUTBOX_SLACK_BYTES: usize = 64 * 1024;

/// Bytes of a program's stderr kept to explain a failure.
pub const STDERR_TAIL_BYTES: usize = 2048;
/// Largest total artifact output of one task (config: `tasks.output_max_bytes`);
/// over it the task ends FAILED with cause `exhausted`.
pub const TASK_OUTPUT_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// `Cache-Control: max-age` of the agent card, in seconds.
pub const CARD_MAX_AGE_SECS: u64 = 300;
/// Default and largest ListTasks page.
pub const LIST_PAGE_DEFAULT: usize = 50;
pub const LIST_PAGE_MAX: usize = 100;

/// Most bytes the request reader adds to a body buffer per read; the body
/// grows as bytes arrive, never from a declared length.
pub const HTTP_BODY_READ_CHUNK_BYTES: usize = 64 * 1024;
/// Longest line the SSE client parser buffers; over it → `SseError::LineTooLong`.
pub const SSE_LINE_MAX_BYTES: usize = 8 * 1024 * 1024;
/// Largest `data` of one SSE event (all its `data:` lines joined); over it →
/// `SseError::EventTooLarge`.
pub const SSE_EVENT_MAX_BYTES: usize = 16 * 1024 * 1024;

/// Longest line `agentd mcp` reads from stdin (one JSON-RPC message); a
/// longer one is skipped up to its newline and answered with -32700.
pub const MCP_LINE_MAX_BYTES: usize = 16 * 1024 * 1024;
/// Requests `agentd mcp` works on at once (one thread each); past it a
/// request is answered at once with -32603 and nothing is started.
pub const MCP_INFLIGHT_MAX: usize = 64;
/// How long `agentd mcp` waits, once stdin has ended, for the requests it
/// read and has not answered yet (`--drain-timeout`); past it each gets an
/// error saying so, and the bridge exits 0.
pub const MCP_EOF_DRAIN_MS: u64 = 30_000;
/// Resource subscriptions `agentd mcp` holds at once (one thread and one
/// stream each); past it `resources/subscribe` is answered with -32603.
pub const MCP_SUBSCRIPTIONS_MAX: usize = 64;
/// Messages of history a tool result or resource carries unless asked
/// otherwise, and the most it carries when asked.
pub const MCP_HISTORY_DEFAULT: u64 = 10;
pub const MCP_HISTORY_MAX: u64 = 100;
