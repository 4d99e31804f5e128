//! RPC throughput and latency of a running `agentd`, side by side with the
//! named baseline: the bare cost of one process per task.
//!
//! `cargo bench --bench rpc` (5 s per row) or `cargo bench --bench rpc -- --quick`
//! (1 s per row). It starts the release `agentd` found next to this bench
//! executable (target/release/agentd) with the default echo agent on a unix
//! socket in a temp dir, and measures over keep-alive HTTP/1.1 connections
//! (one per client thread):
//!
//! - `GET /.well-known/agent-card.json`, concurrency 1 and 16;
//! - blocking `SendMessage` to the echo agent, concurrency 1 and 16, every
//!   response checked for a COMPLETED task;
//! - baseline: fork+exec+wait of `agentd version` (stdout to /dev/null),
//!   1 and 16 threads.
//!
//! No dependencies beyond std, serde_json and libc; no panics on errors — a
//! failure prints a message and exits non-zero.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

type Res<T> = Result<T, String>;

/// Concurrency levels every row is run at.
const LEVELS: [usize; 2] = [1, 16];
/// Distinct failure messages kept per row for the report.
const MAX_FAILURE_NOTES: usize = 5;

struct Opts {
    duration: Duration,
    warmup: Duration,
}

fn parse_opts() -> Opts {
    // cargo passes `--bench`; anything else unknown (filters) is ignored.
    let quick = std::env::args().skip(1).any(|a| a == "--quick");
    if quick {
        Opts {
            duration: Duration::from_secs(1),
            warmup: Duration::from_millis(200),
        }
    } else {
        Opts {
            duration: Duration::from_secs(5),
            warmup: Duration::from_millis(500),
        }
    }
}

fn main() -> ExitCode {
    let opts = parse_opts();
    let bin = match locate_binary() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!("build it first:  cargo build --release   (then: cargo bench --bench rpc)");
            return ExitCode::FAILURE;
        }
    };
    match run(&bin, &opts) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("error: some requests failed (rows marked with !)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// current_exe = target/release/deps/rpc-HASH → target/release/agentd.
fn locate_binary() -> Res<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| format!("cannot derive target dir from {}", exe.display()))?;
    let bin = dir.join("agentd");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!("agentd binary not found at {}", bin.display()))
    }
}

// ---------------------------------------------------------------- daemon --

/// A temp directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Res<TempDir> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let p = std::env::temp_dir().join(format!("agentd-bench-{}-{nanos:08x}", std::process::id()));
        std::fs::create_dir_all(&p).map_err(|e| format!("create {}: {e}", p.display()))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The daemon under test. Dropping it without `stop` SIGKILLs it.
struct Daemon {
    child: Option<Child>,
    pid: i32,
    socket: PathBuf,
    log: PathBuf,
    // Declared last: removed after the child is gone.
    _dir: TempDir,
}

impl Daemon {
    fn start(bin: &Path) -> Res<Daemon> {
        let dir = TempDir::new()?;
        let socket = dir.0.join("a.sock");
        let log = dir.0.join("agentd.log");
        let logf = std::fs::File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let child = Command::new(bin)
            .arg("serve")
            .arg("--listen")
            .arg(format!("unix://{}", socket.display()))
            .args(["--log-level", "warn"])
            // Extra daemon flags for an experiment, e.g.
            // AGENTD_BENCH_ARGS='--set tasks.prespawn=4'.
            .args(
                std::env::var("AGENTD_BENCH_ARGS")
                    .unwrap_or_default()
                    .split_whitespace(),
            )
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf)
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        let pid = child.id() as i32;
        let mut d = Daemon {
            child: Some(child),
            pid,
            socket,
            log,
            _dir: dir,
        };
        d.wait_ready()?;
        Ok(d)
    }

    fn wait_ready(&mut self) -> Res<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if UnixStream::connect(&self.socket).is_ok() {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!(
                        "agentd exited at startup ({status}); log:\n{}",
                        self.log_text()
                    ));
                }
            }
            if Instant::now() >= deadline {
                return Err(format!("agentd did not listen within 10 s; log:\n{}", self.log_text()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGTERM, then wait (20 s bound, then SIGKILL). Returns a description
    /// of how it ended.
    fn stop(&mut self) -> Res<String> {
        let Some(mut child) = self.child.take() else {
            return Err("agentd was not running".into());
        };
        signal(self.pid, libc::SIGTERM);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            match child.try_wait() {
                Ok(Some(status)) => return Ok(format!("{status} after SIGTERM in {}", fmt_dur(t0.elapsed()))),
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(format!("waiting for agentd: {e}")),
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        Err("agentd did not exit within 20 s of SIGTERM (killed)".into())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) takes plain integers; pid is our own child.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// (VmRSS in KiB, Threads) from /proc/PID/status.
fn proc_status(pid: i32) -> Res<(u64, u64)> {
    let text =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
    };
    match (field("VmRSS:"), field("Threads:")) {
        (Some(rss), Some(threads)) => Ok((rss, threads)),
        _ => Err(format!("/proc/{pid}/status lacks VmRSS/Threads")),
    }
}

// ---------------------------------------------------------------- client --

/// One keep-alive HTTP/1.1 connection.
struct Conn {
    r: BufReader<UnixStream>,
    line: String,
    body: Vec<u8>,
}

impl Conn {
    fn open(socket: &Path) -> Res<Conn> {
        let s = UnixStream::connect(socket).map_err(|e| format!("connect {}: {e}", socket.display()))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| format!("set_read_timeout: {e}"))?;
        Ok(Conn {
            r: BufReader::with_capacity(64 * 1024, s),
            line: String::new(),
            body: Vec::new(),
        })
    }

    /// Writes one request and reads its response; returns (status, body).
    /// The second value is true if the server asked to close.
    fn roundtrip(&mut self, req: &[u8]) -> Res<(u16, bool)> {
        self.r.get_mut().write_all(req).map_err(|e| format!("write: {e}"))?;
        self.line.clear();
        let n = self
            .r
            .read_line(&mut self.line)
            .map_err(|e| format!("read status: {e}"))?;
        if n == 0 {
            return Err("connection closed before a response".into());
        }
        let status: u16 = self
            .line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad status line {:?}", self.line.trim_end()))?;
        let mut len: Option<usize> = None;
        let mut close = false;
        loop {
            self.line.clear();
            let n = self
                .r
                .read_line(&mut self.line)
                .map_err(|e| format!("read header: {e}"))?;
            if n == 0 {
                return Err("connection closed inside the response head".into());
            }
            let l = self.line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                let (k, v) = (k.trim(), v.trim());
                if k.eq_ignore_ascii_case("content-length") {
                    len = Some(v.parse().map_err(|_| format!("bad Content-Length {v:?}"))?);
                } else if k.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close") {
                    close = true;
                } else if k.eq_ignore_ascii_case("transfer-encoding") {
                    return Err(format!("unexpected Transfer-Encoding: {v} (HTTP {status})"));
                }
            }
        }
        let len = len.ok_or_else(|| format!("HTTP {status} without Content-Length"))?;
        self.body.resize(len, 0);
        self.r
            .read_exact(&mut self.body)
            .map_err(|e| format!("read body: {e}"))?;
        Ok((status, close))
    }
}

// ---------------------------------------------------------------- load ----

/// One operation of a row, owned by one client thread.
trait Op: Send {
    fn call(&mut self) -> Res<()>;
}

/// GET the card on a keep-alive connection.
struct CardOp {
    socket: PathBuf,
    conn: Option<Conn>,
}

const CARD_REQ: &[u8] = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: agentd\r\n\r\n";

impl Op for CardOp {
    fn call(&mut self) -> Res<()> {
        let conn = match self.conn.as_mut() {
            Some(c) => c,
            None => self.conn.insert(Conn::open(&self.socket)?),
        };
        let result = conn.roundtrip(CARD_REQ);
        match result {
            Ok((200, close)) => {
                let ok = conn.body.starts_with(b"{");
                if close {
                    self.conn = None;
                }
                if ok {
                    Ok(())
                } else {
                    Err("card body is not a JSON object".into())
                }
            }
            Ok((status, _)) => {
                let text = snippet(&conn.body);
                self.conn = None;
                Err(format!("HTTP {status}: {text}"))
            }
            Err(e) => {
                self.conn = None;
                Err(e)
            }
        }
    }
}

/// Blocking SendMessage to the echo agent on a keep-alive connection.
struct SendOp {
    socket: PathBuf,
    conn: Option<Conn>,
    thread: usize,
    seq: u64,
    req: Vec<u8>,
}

static MESSAGE_SERIAL: AtomicU64 = AtomicU64::new(0);

impl SendOp {
    fn build(&mut self) {
        self.seq += 1;
        let serial = MESSAGE_SERIAL.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": self.seq,
            "method": "SendMessage",
            "params": {"message": {
                "messageId": format!("bench-{}-{}-{serial}", std::process::id(), self.thread),
                "role": "ROLE_USER",
                "parts": [{"text": "hi"}],
            }},
        })
        .to_string();
        self.req.clear();
        let _ = write!(
            ByteWriter(&mut self.req),
            "POST / HTTP/1.1\r\nHost: agentd\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
    }
}

/// fmt::Write into a Vec<u8>.
struct ByteWriter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for ByteWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn snippet(body: &[u8]) -> String {
    let t = String::from_utf8_lossy(body);
    let t = t.trim();
    if t.chars().count() > 160 {
        format!("{}…", t.chars().take(160).collect::<String>())
    } else {
        t.to_string()
    }
}

impl Op for SendOp {
    fn call(&mut self) -> Res<()> {
        self.build();
        let conn = match self.conn.as_mut() {
            Some(c) => c,
            None => self.conn.insert(Conn::open(&self.socket)?),
        };
        let result = conn.roundtrip(&self.req);
        match result {
            Ok((status, close)) => {
                let b = &conn.body;
                let verdict = if status != 200 {
                    Err(format!("HTTP {status}: {}", snippet(b)))
                } else if contains(b, b"\"error\"") {
                    Err(format!("error response: {}", snippet(b)))
                } else if !contains(b, b"\"result\"") {
                    Err(format!("no result: {}", snippet(b)))
                } else if !contains(b, b"TASK_STATE_COMPLETED") {
                    Err(format!("task not completed: {}", snippet(b)))
                } else {
                    Ok(())
                };
                if close || status != 200 {
                    self.conn = None;
                }
                verdict
            }
            Err(e) => {
                self.conn = None;
                Err(e)
            }
        }
    }
}

/// fork+exec+wait of `agentd version`, stdout to /dev/null.
struct SpawnOp {
    bin: PathBuf,
}

impl Op for SpawnOp {
    fn call(&mut self) -> Res<()> {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // An empty pre_exec hook makes std take its fork(2)+exec path (as
        // agentd's procman does, which sets up the child in pre_exec)
        // instead of posix_spawn/vfork.
        // SAFETY: the hook does nothing, so it is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| Ok(()));
        }
        match cmd.status() {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(format!("agentd version: {s}")),
            Err(e) => Err(format!("spawn agentd version: {e}")),
        }
    }
}

/// What one client thread brings back.
struct ThreadResult {
    samples: Vec<Duration>,
    failures: u64,
    notes: Vec<String>,
    last_end: Instant,
}

struct Row {
    name: &'static str,
    concurrency: usize,
    requests: u64,
    elapsed: Duration,
    /// p50 and p99; the samples themselves are dropped once sorted, so the
    /// bench process stays small for the fork baseline.
    p50: Option<Duration>,
    p99: Option<Duration>,
    failures: u64,
    notes: Vec<String>,
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

impl Row {
    fn rate(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.requests as f64 / s
        } else {
            0.0
        }
    }
}

/// Runs `concurrency` threads, each with its own op, for warm-up + duration.
/// Only operations that start inside the measured window are counted.
fn measure(
    name: &'static str,
    concurrency: usize,
    opts: &Opts,
    mut make: impl FnMut(usize) -> Box<dyn Op>,
) -> Res<Row> {
    let barrier = Arc::new(Barrier::new(concurrency + 1));
    let mut handles = Vec::with_capacity(concurrency);
    // The window, sent by the main thread once every client is ready.
    let mut senders = Vec::new();
    for i in 0..concurrency {
        let mut op = make(i);
        let barrier = barrier.clone();
        let (stx, srx) = std::sync::mpsc::channel::<(Instant, Instant)>();
        senders.push(stx);
        let h = std::thread::Builder::new()
            .name(format!("{name}-{i}"))
            .spawn(move || -> ThreadResult {
                barrier.wait();
                let (measure_from, end) = match srx.recv() {
                    Ok(t) => t,
                    Err(_) => {
                        return ThreadResult {
                            samples: Vec::new(),
                            failures: 0,
                            notes: Vec::new(),
                            last_end: Instant::now(),
                        }
                    }
                };
                let mut samples = Vec::with_capacity(1 << 14);
                let mut failures = 0u64;
                let mut notes: Vec<String> = Vec::new();
                let mut last_end = measure_from;
                loop {
                    let t0 = Instant::now();
                    if t0 >= end {
                        break;
                    }
                    let r = op.call();
                    let t1 = Instant::now();
                    if t0 >= measure_from {
                        samples.push(t1 - t0);
                        last_end = t1;
                        if let Err(e) = r {
                            failures += 1;
                            if notes.len() < MAX_FAILURE_NOTES && !notes.contains(&e) {
                                notes.push(e);
                            }
                        }
                    }
                }
                ThreadResult {
                    samples,
                    failures,
                    notes,
                    last_end,
                }
            })
            .map_err(|e| format!("spawn client thread: {e}"))?;
        handles.push(h);
    }
    barrier.wait();
    let start = Instant::now();
    let measure_from = start + opts.warmup;
    let end = measure_from + opts.duration;
    for s in &senders {
        let _ = s.send((measure_from, end));
    }
    let mut row = Row {
        name,
        concurrency,
        requests: 0,
        elapsed: Duration::ZERO,
        p50: None,
        p99: None,
        failures: 0,
        notes: Vec::new(),
    };
    let mut samples: Vec<Duration> = Vec::new();
    let mut last_end = measure_from;
    let mut panicked = false;
    for h in handles {
        match h.join() {
            Ok(t) => {
                samples.extend(t.samples);
                row.failures += t.failures;
                for n in t.notes {
                    if row.notes.len() < MAX_FAILURE_NOTES && !row.notes.contains(&n) {
                        row.notes.push(n);
                    }
                }
                last_end = last_end.max(t.last_end);
            }
            Err(_) => panicked = true,
        }
    }
    if panicked {
        return Err(format!("a client thread of {name} c={concurrency} panicked"));
    }
    row.requests = samples.len() as u64;
    row.elapsed = last_end.saturating_duration_since(measure_from);
    samples.sort_unstable();
    row.p50 = percentile(&samples, 50.0);
    row.p99 = percentile(&samples, 99.0);
    Ok(row)
}

// ---------------------------------------------------------------- report --

fn fmt_dur(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 1e6 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

fn fmt_opt(d: Option<Duration>) -> String {
    d.map(fmt_dur).unwrap_or_else(|| "-".into())
}

fn fmt_kib(k: u64) -> String {
    format!("{:.1} MiB", k as f64 / 1024.0)
}

fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:<34} {:>4} {:>9} {:>10} {:>10} {:>10} {:>9}",
        "row", "conc", "requests", "req/s", "p50", "p99", "failures"
    );
    println!("{}", "-".repeat(34 + 5 + 10 + 11 + 11 + 11 + 10));
    for r in rows {
        let mark = if r.failures > 0 { " !" } else { "" };
        println!(
            "{:<34} {:>4} {:>9} {:>10.0} {:>10} {:>10} {:>9}{mark}",
            r.name,
            r.concurrency,
            r.requests,
            r.rate(),
            fmt_opt(r.p50),
            fmt_opt(r.p99),
            r.failures,
        );
    }
    for r in rows.iter().filter(|r| !r.notes.is_empty()) {
        println!("  ! {} c={}: {} failure(s), e.g.:", r.name, r.concurrency, r.failures);
        for n in &r.notes {
            println!("      {n}");
        }
    }
}

const CARD: &str = "GET /.well-known/agent-card.json";
const SEND: &str = "SendMessage (blocking, echo)";
const BASE: &str = "baseline: fork+exec+wait version";

fn print_ratios(rows: &[Row]) {
    println!();
    println!("SendMessage vs. baseline (one bare process per request):");
    for c in LEVELS {
        let send = rows.iter().find(|r| r.name == SEND && r.concurrency == c);
        let base = rows.iter().find(|r| r.name == BASE && r.concurrency == c);
        let (Some(send), Some(base)) = (send, base) else {
            continue;
        };
        let thr = if base.rate() > 0.0 {
            format!("{:.2}", send.rate() / base.rate())
        } else {
            "-".into()
        };
        let lat = match (send.p50, base.p50) {
            (Some(s), Some(b)) if !b.is_zero() => {
                format!("{:.2}", s.as_secs_f64() / b.as_secs_f64())
            }
            _ => "-".into(),
        };
        println!("  c={c:<3} req/s ÷ spawns/s = {thr:>5}    p50 ÷ baseline p50 = {lat:>5}");
    }
}

// ---------------------------------------------------------------- main ----

fn run(bin: &Path, opts: &Opts) -> Res<bool> {
    println!(
        "agentd rpc bench: {} ({} s per row after {} ms warm-up; {} CPUs)",
        bin.display(),
        opts.duration.as_secs_f64(),
        opts.warmup.as_millis(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
    );
    let mut daemon = Daemon::start(bin)?;
    println!("daemon pid {} on {}", daemon.pid, daemon.socket.display());
    // Let startup settle before sampling idle memory.
    std::thread::sleep(Duration::from_millis(200));
    let (rss_idle, threads_idle) = proc_status(daemon.pid)?;

    // The baseline runs first, while this bench process is still small:
    // fork(2) copies the parent's page tables, so its cost grows with the
    // parent's RSS (and the load rows leave megabytes of samples behind in
    // the allocator). The table still lists it last.
    let self_rss = proc_status(std::process::id() as i32)?.0;
    let mut base_rows = Vec::new();
    for c in LEVELS {
        let b = bin.to_path_buf();
        base_rows.push(measure(BASE, c, opts, move |_| Box::new(SpawnOp { bin: b.clone() }))?);
        eprintln!("  done: {BASE} c={c}");
    }

    // Peak daemon RSS and thread count while under load.
    let stop_sampler = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop_sampler.clone();
        let pid = daemon.pid;
        std::thread::spawn(move || {
            let (mut rss, mut threads) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                if let Ok((r, t)) = proc_status(pid) {
                    rss = rss.max(r);
                    threads = threads.max(t);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (rss, threads)
        })
    };
    let mut rows = Vec::new();
    let socket = daemon.socket.clone();
    let load = (|| -> Res<()> {
        for c in LEVELS {
            let s = socket.clone();
            rows.push(measure(CARD, c, opts, move |_| {
                Box::new(CardOp {
                    socket: s.clone(),
                    conn: None,
                })
            })?);
            eprintln!("  done: {CARD} c={c}");
        }
        for c in LEVELS {
            let s = socket.clone();
            rows.push(measure(SEND, c, opts, move |i| {
                Box::new(SendOp {
                    socket: s.clone(),
                    conn: None,
                    thread: i,
                    seq: 0,
                    req: Vec::with_capacity(512),
                })
            })?);
            eprintln!("  done: {SEND} c={c}");
        }
        Ok(())
    })();
    stop_sampler.store(true, Ordering::Relaxed);
    let (rss_peak, threads_peak) = sampler.join().unwrap_or((0, 0));
    load?;
    let (rss_after, threads_after) = proc_status(daemon.pid)?;
    rows.extend(base_rows);

    print_table(&rows);
    print_ratios(&rows);
    println!();
    println!(
        "daemon VmRSS: idle {} → peak under load {} → after load {}",
        fmt_kib(rss_idle),
        fmt_kib(rss_peak),
        fmt_kib(rss_after),
    );
    println!("daemon threads: idle {threads_idle} → peak under load {threads_peak} → after load {threads_after}");
    println!("bench process VmRSS during the baseline rows: {}", fmt_kib(self_rss));

    let alive = daemon.alive();
    let log = daemon.log_text();
    let stopped = daemon.stop();
    match &stopped {
        Ok(how) => println!("daemon stopped: {how}"),
        Err(e) => println!("daemon stop: {e}"),
    }
    let log = log.trim();
    if !log.is_empty() {
        let lines: Vec<&str> = log.lines().collect();
        println!("daemon log (warn+, {} line(s), last 20):", lines.len());
        for l in lines.iter().rev().take(20).rev() {
            println!("  {l}");
        }
    }
    if !alive {
        return Err("agentd died during the run".into());
    }
    stopped?;
    Ok(rows.iter().all(|r| r.failures == 0))
}
