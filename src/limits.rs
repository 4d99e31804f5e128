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

/// Tasks whose worker runs at once (config: `tasks.max_running`); more wait
/// in SUBMITTED.
pub const TASKS_MAX_RUNNING: usize = 32;
/// Tasks waiting in SUBMITTED (config: `tasks.max_queued`); over it a send
/// is refused with -32603 and reason QUEUE_FULL, and nothing is created.
pub const TASKS_MAX_QUEUED: usize = 1024;
/// Wall-clock budget of one task (config: `tasks.deadline_ms`); 0 = none.
pub const TASK_DEADLINE_MS: u64 = 0;
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
/// before the task is finished without it.
pub const WORKER_CHANNEL_DRAIN_MS: u64 = 1_000;

/// How long a task waiting for input (a warm session) may wait
/// (config: `tasks.input_idle_ms`); past it the task FAILS with cause `idle`.
pub const TASK_INPUT_IDLE_MS: u64 = 600_000;
/// Heartbeat: procman pings each worker this often (config: `tasks.ping_interval_ms`).
pub const WORKER_PING_INTERVAL_MS: u64 = 5_000;
/// Heartbeat: a ping unanswered this long means the worker is stalled
/// (config: `tasks.stall_timeout_ms`): kill ladder, FAILED, cause `stalled`.
pub const WORKER_STALL_TIMEOUT_MS: u64 = 15_000;
/// SSE comment sent on an idle stream (config: `http.sse_keepalive_ms`).
pub const SSE_KEEPALIVE_MS: u64 = 15_000;

/// Largest control-channel frame, either way; a bigger one kills the worker.
pub const CONTROL_FRAME_MAX_BYTES: usize = 8 * 1024 * 1024;
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
