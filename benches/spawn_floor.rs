//! The process floors: what one process per task costs at the least, measured
//! on this machine, now, in a small compiled program.
//!
//! `spawn_floor [BIN] [--seconds N] [--quick] [--fork] [--fork-floor] [--json]`
//! runs one row per way of making a process, each in one thread for N seconds
//! (default 3; 1 with `--quick`) after a short warm-up, each process waited
//! for before the next is made:
//!
//! - `posix_spawn` (always): the **exec floor**. Spawns `BIN version` (stdout
//!   and stderr to /dev/null, a fresh process group and an empty environment,
//!   as procman starts its fork server) with std's `Command` and no
//!   `pre_exec` hook, i.e. posix_spawn (clone with CLONE_VM|CLONE_VFORK) and
//!   exec of the very binary agentd ships.
//! - `fork+exec` (`--fork`): the same through fork(2)+exec (an empty
//!   `pre_exec` hook), for comparison.
//! - `fork+_exit` (`--fork-floor`): the **fork floor**. fork(2), `_exit(0)` in
//!   the child, waitpid(2) in the parent: a fresh process and nothing else, the
//!   least a fork server that forks one worker per task (as agentd's does)
//!   could spend. No exec, no allocation in the loop: libc directly, the
//!   latency samples in a fixed histogram on the stack, so this process's
//!   memory (which every fork copies the page tables of) stays the same from
//!   the first fork to the last.
//!
//! BIN defaults to the `agentd` next to this executable's directory
//! (target/<profile>/agentd). bench/run.sh builds this for the musl target (a
//! small static binary, like the C loop the fork floor was first measured
//! with) and runs it with `taskset -c $server_cpu`, on the core the servers
//! get.
//!
//! Per row it prints processes/s, wall µs per process, CPU µs per process
//! (this process plus its reaped children, from getrusage: the whole core
//! time one costs, whichever process it was charged to) and the p50/p99 of one
//! make+wait. `--json` prints one JSON object instead.
//!
//! In a small compiled program on purpose: an interpreter's own per-call
//! overhead would raise the floor and flatter whatever is compared with it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

type Res<T> = Result<T, String>;

const USAGE: &str = "usage: spawn_floor [BIN] [--seconds N] [--quick] [--fork] [--fork-floor] [--json]";

struct Opts {
    bin: PathBuf,
    duration: Duration,
    fork: bool,
    fork_floor: bool,
    json: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum How {
    PosixSpawn,
    ForkExec,
    ForkExit,
}

impl How {
    fn name(self) -> &'static str {
        match self {
            How::PosixSpawn => "posix_spawn",
            How::ForkExec => "fork+exec",
            How::ForkExit => "fork+_exit",
        }
    }

    /// Which floor the row is: a process that execs a binary, or a bare fork.
    fn floor(self) -> &'static str {
        match self {
            How::PosixSpawn | How::ForkExec => "exec",
            How::ForkExit => "fork",
        }
    }
}

struct Row {
    how: How,
    spawns: u64,
    wall: Duration,
    cpu: Duration,
    p50: Duration,
    p99: Duration,
}

fn main() -> ExitCode {
    let opts = match parse_opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("spawn_floor: {e}");
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut hows = vec![How::PosixSpawn];
    if opts.fork {
        hows.push(How::ForkExec);
    }
    if opts.fork_floor {
        hows.push(How::ForkExit);
    }
    let mut rows = Vec::new();
    for how in hows {
        match measure(&opts.bin, how, opts.duration) {
            Ok(row) => rows.push(row),
            Err(e) => {
                eprintln!("spawn_floor: {}: {e}", how.name());
                return ExitCode::FAILURE;
            }
        }
    }
    if opts.json {
        println!("{}", to_json(&opts, &rows));
    } else {
        print_rows(&opts, &rows);
    }
    ExitCode::SUCCESS
}

fn parse_opts() -> Res<Opts> {
    let mut bin = None;
    let mut duration = Duration::from_secs(3);
    let (mut fork, mut fork_floor, mut json) = (false, false, false);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            // cargo bench passes --bench; a filter would be a bare word, but a
            // bare word here is the binary, so cargo's is the only one ignored.
            "--bench" => {}
            "--quick" => duration = Duration::from_secs(1),
            "--fork" => fork = true,
            "--fork-floor" => fork_floor = true,
            "--json" => json = true,
            "--seconds" => {
                let v = args.next().ok_or("--seconds needs a number")?;
                let secs: f64 = v.parse().map_err(|_| format!("--seconds: not a number: {v}"))?;
                if !(secs > 0.0 && secs <= 3600.0) {
                    return Err(format!("--seconds: expected 0 < N <= 3600, found {v}"));
                }
                duration = Duration::from_secs_f64(secs);
            }
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s => bin = Some(PathBuf::from(s)),
        }
    }
    let bin = match bin {
        Some(b) => b,
        None => default_binary()?,
    };
    if !bin.is_file() {
        return Err(format!("no binary at {}", bin.display()));
    }
    Ok(Opts {
        bin,
        duration,
        fork,
        fork_floor,
        json,
    })
}

/// current_exe = target/<profile>/deps/spawn_floor-HASH → target/<profile>/agentd.
fn default_binary() -> Res<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    exe.parent()
        .and_then(Path::parent)
        .map(|d| d.join("agentd"))
        .ok_or_else(|| format!("cannot derive target dir from {}", exe.display()))
}

/// One process made, run to its end and waited for.
fn once(bin: &Path, how: How) -> Res<()> {
    match how {
        How::PosixSpawn | How::ForkExec => spawn_once(bin, how),
        How::ForkExit => fork_once(),
    }
}

/// One spawn + exec + exit + wait of `bin version`.
fn spawn_once(bin: &Path, how: How) -> Res<()> {
    let mut cmd = Command::new(bin);
    cmd.arg("version")
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    if how == How::ForkExec {
        // An empty pre_exec hook makes std fork(2) and exec instead of
        // posix_spawn.
        // SAFETY: the hook does nothing, so it is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| Ok(()));
        }
    }
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{} version: {s}", bin.display())),
        Err(e) => Err(format!("spawn {}: {e}", bin.display())),
    }
}

/// One fork + `_exit(0)` + waitpid: nothing allocated unless it fails.
fn fork_once() -> Res<()> {
    // SAFETY: this program has one thread, so the child's copy of it holds no
    // lock another thread could have held; the child only calls _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: _exit is async-signal-safe and ends the child at once,
        // without running the parent's exit handlers or flushing its buffers.
        unsafe { libc::_exit(0) }
    }
    let mut status = 0;
    loop {
        // SAFETY: status is a valid, writable int for the call's duration.
        if unsafe { libc::waitpid(pid, &mut status, 0) } == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("waitpid {pid}: {e}"));
        }
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else {
        Err(format!("child {pid} ended with wait status {status:#x}"))
    }
}

fn measure(bin: &Path, how: How, duration: Duration) -> Res<Row> {
    // The histogram lives on the stack and is written whole here, before the
    // first process: nothing grows while the loop runs (a fork copies the page
    // tables of whatever this process has touched).
    let mut hist = Histogram::new();
    // Warm-up: page cache, the dynamic parts of exec, the CPU's caches, and
    // every page of the histogram.
    let warm_until = Instant::now() + (duration / 10).max(Duration::from_millis(100));
    while Instant::now() < warm_until {
        let s = Instant::now();
        once(bin, how)?;
        hist.record(s.elapsed());
    }
    hist.clear();
    let cpu0 = cpu_time()?;
    let t0 = Instant::now();
    let deadline = t0 + duration;
    loop {
        let s = Instant::now();
        if s >= deadline {
            break;
        }
        once(bin, how)?;
        hist.record(s.elapsed());
    }
    let wall = t0.elapsed();
    let cpu = cpu_time()?.saturating_sub(cpu0);
    Ok(Row {
        how,
        spawns: hist.count,
        wall,
        cpu,
        p50: hist.percentile(50.0),
        p99: hist.percentile(99.0),
    })
}

/// Latencies in 1 µs buckets below FINE µs, 256 µs buckets up to
/// FINE + 256 × COARSE µs, and past that only the largest one seen: 17 KiB,
/// fixed, so recording never allocates.
struct Histogram {
    fine: [u32; FINE],
    coarse: [u32; COARSE],
    over: u32,
    max: Duration,
    count: u64,
}

const FINE: usize = 4096;
const COARSE: usize = 256;
const COARSE_US: usize = 256;

impl Histogram {
    fn new() -> Self {
        Histogram {
            fine: [0; FINE],
            coarse: [0; COARSE],
            over: 0,
            max: Duration::ZERO,
            count: 0,
        }
    }

    fn clear(&mut self) {
        self.fine.fill(0);
        self.coarse.fill(0);
        self.over = 0;
        self.max = Duration::ZERO;
        self.count = 0;
    }

    fn record(&mut self, d: Duration) {
        let us = d.as_micros() as usize;
        if us < FINE {
            self.fine[us] += 1;
        } else if us < FINE + COARSE * COARSE_US {
            self.coarse[(us - FINE) / COARSE_US] += 1;
        } else {
            self.over += 1;
        }
        self.max = self.max.max(d);
        self.count += 1;
    }

    /// Nearest-rank percentile, as the middle of its bucket (the largest
    /// latency seen, past the last bucket).
    fn percentile(&self, p: f64) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (us, &n) in self.fine.iter().enumerate() {
            seen += u64::from(n);
            if seen >= rank {
                return Duration::from_nanos(us as u64 * 1000 + 500);
            }
        }
        for (i, &n) in self.coarse.iter().enumerate() {
            seen += u64::from(n);
            if seen >= rank {
                let lo = (FINE + i * COARSE_US) as u64;
                return Duration::from_micros(lo + COARSE_US as u64 / 2);
            }
        }
        self.max
    }
}

/// User + system time of this process and of its reaped children.
fn cpu_time() -> Res<Duration> {
    let mut total = Duration::ZERO;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: rusage is plain old data, so all-zeroes is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: ru is a valid, writable rusage for the call's duration.
        if unsafe { libc::getrusage(who, &mut ru) } != 0 {
            return Err(format!("getrusage: {}", std::io::Error::last_os_error()));
        }
        for tv in [ru.ru_utime, ru.ru_stime] {
            total += Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64);
        }
    }
    Ok(total)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn per_spawn(d: Duration, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        us(d) / n as f64
    }
}

fn to_json(opts: &Opts, rows: &[Row]) -> serde_json::Value {
    let rows: Vec<_> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "how": r.how.name(),
                "floor": r.how.floor(),
                "spawns": r.spawns,
                "wall_s": r.wall.as_secs_f64(),
                "cpu_s": r.cpu.as_secs_f64(),
                "spawns_per_s": r.spawns as f64 / r.wall.as_secs_f64(),
                "wall_us_per_spawn": per_spawn(r.wall, r.spawns),
                "cpu_us_per_spawn": per_spawn(r.cpu, r.spawns),
                "p50_us": us(r.p50),
                "p99_us": us(r.p99),
            })
        })
        .collect();
    serde_json::json!({
        "bin": opts.bin.display().to_string(),
        "argv": ["version"],
        "seconds": opts.duration.as_secs_f64(),
        "rows": rows,
    })
}

fn print_rows(opts: &Opts, rows: &[Row]) {
    println!(
        "process floors, one thread, {:.1} s per row: the exec floor spawns, execs and waits for \
         `{} version`; the fork floor (fork+_exit) forks, _exits and waits",
        opts.duration.as_secs_f64(),
        opts.bin.display(),
    );
    println!(
        "  {:<12} {:<6} {:>10} {:>12} {:>13} {:>12} {:>10} {:>10}",
        "how", "floor", "processes", "per second", "wall µs/each", "CPU µs/each", "p50 µs", "p99 µs"
    );
    for r in rows {
        println!(
            "  {:<12} {:<6} {:>10} {:>12.0} {:>13.1} {:>12.1} {:>10.1} {:>10.1}",
            r.how.name(),
            r.how.floor(),
            r.spawns,
            r.spawns as f64 / r.wall.as_secs_f64(),
            per_spawn(r.wall, r.spawns),
            per_spawn(r.cpu, r.spawns),
            us(r.p50),
            us(r.p99)
        );
    }
}
